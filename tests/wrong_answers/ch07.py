"""Wrong answers to the exercises of chapter 7 (the block), written from the exercise texts."""

from __future__ import annotations

import torch
from torch.nn.functional import gelu, rms_norm

from wrong_answers import Wrong, collect, wrong

# --- ex-07-mlp-chunks ---------------------------------------------------------------------------------------------


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "adds b_2 once per chunk", "b_2-each-chunk")
def mlp_b2_every_chunk(X, W_1, b_1, W_2, b_2, chunk):
    out = torch.zeros(*X.shape[:-1], W_2.shape[1], dtype=X.dtype)
    for s in range(0, W_1.shape[1], chunk):
        out = out + gelu(X @ W_1[:, s:s + chunk] + b_1[s:s + chunk]) @ W_2[s:s + chunk] + b_2
    return out


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "loops d_ff // chunk times and drops the leftover columns",
       "tail-dropped")
def mlp_drops_tail(X, W_1, b_1, W_2, b_2, chunk):
    out = b_2.expand(*X.shape[:-1], -1).clone()
    for i in range(W_1.shape[1] // chunk):
        s = i * chunk
        out += gelu(X @ W_1[:, s:s + chunk] + b_1[s:s + chunk]) @ W_2[s:s + chunk]
    return out


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "tanh approximation of GELU", "tanh-gelu")
def mlp_tanh_gelu(X, W_1, b_1, W_2, b_2, chunk):
    out = b_2 + torch.zeros_like(X)
    for s in range(0, W_1.shape[1], chunk):
        H = gelu(X @ W_1[:, s:s + chunk] + b_1[s:s + chunk], approximate="tanh")
        out = out + H @ W_2[s:s + chunk]
    return out


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "accumulates the output in a float32 buffer", "precision")
def mlp_float32_accumulator(X, W_1, b_1, W_2, b_2, chunk):
    out = torch.zeros(*X.shape[:-1], W_2.shape[1])
    for s in range(0, W_1.shape[1], chunk):
        out += (gelu(X @ W_1[:, s:s + chunk] + b_1[s:s + chunk]) @ W_2[s:s + chunk]).float()
    return (out + b_2.float()).to(X.dtype)


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "forgets the first bias b_1", "no-b_1")
def mlp_no_b1(X, W_1, b_1, W_2, b_2, chunk):
    parts = [gelu(X @ W_1[:, s:s + chunk]) @ W_2[s:s + chunk] for s in range(0, W_1.shape[1], chunk)]
    return sum(parts) + b_2


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "chunks the tokens instead of the hidden columns", "full-hidden")
def mlp_chunks_rows(X, W_1, b_1, W_2, b_2, chunk):
    flat = X.reshape(-1, X.shape[-1])
    rows = [gelu(flat[s:s + chunk] @ W_1 + b_1) @ W_2 + b_2 for s in range(0, flat.shape[0], chunk)]
    return torch.cat(rows).reshape(*X.shape[:-1], W_2.shape[1])


@wrong("ex-07-mlp-chunks", "check_mlp_in_chunks", "GELU applied after the second product of each chunk",
       "gelu-after-W_2")
def mlp_gelu_late(X, W_1, b_1, W_2, b_2, chunk):
    out = b_2.clone()
    for s in range(0, W_1.shape[1], chunk):
        out = out + gelu((X @ W_1[:, s:s + chunk] + b_1[s:s + chunk]) @ W_2[s:s + chunk])
    return out


# --- ex-07-run-block ----------------------------------------------------------------------------------------------


@wrong("ex-07-run-block", "check_run_block", "left the loop as given (Pre-Norm adds to the normed stream)", "unchanged")
def run_block_unfixed(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = norm(stream)
            stream = stream + sublayer(stream)
    return stream


@wrong("ex-07-run-block", "check_run_block", "uses the Post-Norm line for both layouts", "pre-as-post")
def run_block_post_everywhere(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        stream = norm(stream + sublayer(stream))
    return stream


@wrong("ex-07-run-block", "check_run_block", "Pre-Norm fixed, but both sublayers normed by block.ln_1",
       "ln_1-for-mlp")
def run_block_one_norm(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = stream + sublayer(block.ln_1(stream))
    return stream


@wrong("ex-07-run-block", "check_run_block", "Pre-Norm: normalises the sublayer's output, s + norm(f(s))",
       "normed-output")
def run_block_norm_after_sublayer(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = stream + norm(sublayer(stream))
    return stream


@wrong("ex-07-run-block", "check_run_block", "Pre-Norm: both sublayers read norm(X) of the block's input",
       "mlp-reads-X")
def run_block_reads_input(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = stream + sublayer(norm(X))
    return stream


@wrong("ex-07-run-block", "check_run_block", "Pre-Norm fixed, but a final norm added after the loop",
       "final-norm")
def run_block_extra_final_norm(X, block):
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = stream + sublayer(norm(stream))
    return stream if block.norm == "post" else block.ln_2(stream)


# --- ex-07-parallel ----------------------------------------------------------------------------------------------


@wrong("ex-07-parallel", "check_parallel_block", "kept the sequential order: the MLP reads ln_1 of the middle "
       "stream", "sequential")
def parallel_mlp_reads_H(X, block):
    H = X + block.attn(block.ln_1(X))
    return H + block.mlp(block.ln_1(H))


@wrong("ex-07-parallel", "check_parallel_block", "each sublayer with its own LayerNorm, ln_1 and ln_2",
       "two-norms")
def parallel_two_layernorms(X, block):
    A = block.attn(block.ln_1(X))
    M = block.mlp(block.ln_2(X))
    return X + A + M


@wrong("ex-07-parallel", "check_parallel_block", "a residual addition around each branch, then the branches "
       "added", "residual-twice")
def parallel_two_residuals(X, block):
    x = block.ln_1(X)
    return (X + block.attn(x)) + (X + block.mlp(x))


@wrong("ex-07-parallel", "check_parallel_block", "overwrote X with its normalised copy before the sum",
       "normed-residual")
def parallel_residual_is_copy(X, block):
    X = block.ln_1(X)
    return X + block.attn(X) + block.mlp(X)


@wrong("ex-07-parallel", "check_parallel_block", "the shared LayerNorm taken as the MLP's, ln_2", "ln_2")
def parallel_shared_ln_2(X, block):
    x = block.ln_2(X)
    return X + block.attn(x) + block.mlp(x)


@wrong("ex-07-parallel", "check_parallel_block", "called the block for attention's half: block(X) is the "
       "sequential block", "sequential")
def parallel_from_block_call(X, block):
    return block(X)


@wrong("ex-07-parallel", "check_parallel_block", "the two branches averaged instead of added", "averaged")
def parallel_branches_averaged(X, block):
    x = block.ln_1(X)
    return X + (block.attn(x) + block.mlp(x)) / 2


@wrong("ex-07-parallel", "check_parallel_block", "one LayerNorm after the sum, Post-Norm style", "norm-after")
def parallel_norm_last(X, block):
    return block.ln_1(X + block.attn(X) + block.mlp(X))


# --- ex-07-predict-flops ------------------------------------------------------------------------------------------
# d_model 48, h 4 (d_head 12), d_ff 128, T 10: W_QKV 138240, scores 9600, P V 9600, W_O 46080, MLP 245760.

flops_0 = Wrong("ex-07-predict-flops", "check_block_flops", 430080, "left out the two attention products",
                frozenset({"no-attention-products"}))
flops_1 = Wrong("ex-07-predict-flops", "check_block_flops", 224640, "one FLOP per multiply-add",
                frozenset({"multiply-adds"}))
flops_2 = Wrong("ex-07-predict-flops", "check_block_flops", 572160, "MLP width taken as 4 * d_model = 192",
                frozenset({"d_ff-assumed"}))
flops_3 = Wrong("ex-07-predict-flops", "check_block_flops", 403200, "forgot the output projection W_O",
                frozenset({"no-W_O"}))
flops_4 = Wrong("ex-07-predict-flops", "check_block_flops", 439680,
                "halved the attention products for the causal mask", frozenset({"causal-half"}))
flops_5 = Wrong("ex-07-predict-flops", "check_block_flops", 506880,
                "attention products with d_model per head, not d_head",
                frozenset({"d_model-per-head"}))


# --- ex-07-rms-norm -----------------------------------------------------------------------------------------------


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "no centring: rms_norm of X itself, plus beta", "no-centering")
def rms_no_centre(X, gamma, beta):
    return rms_norm(X, X.shape[-1:], gamma, 1e-5) + beta


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "gamma passed as weight and multiplied again",
       "gamma-twice")
def rms_gamma_twice(X, gamma, beta):
    Xc = X - X.mean(-1, keepdim=True)
    return gamma * rms_norm(Xc, (X.shape[-1],), gamma, 1e-5) + beta


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "rms_norm's default eps instead of 1e-5", "eps-default")
def rms_default_eps(X, gamma, beta):
    Xc = X - X.mean(-1, keepdim=True)
    return rms_norm(Xc, (X.shape[-1],), gamma) + beta


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "mean taken over the first axis",
       "center-wrong-axis")
def rms_mean_axis0(X, gamma, beta):
    Xc = X - X.mean(0, keepdim=True)
    return rms_norm(Xc, (X.shape[-1],), gamma, 1e-5) + beta


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "forgets the shift beta", "no-beta")
def rms_no_beta(X, gamma, beta):
    Xc = X - X.mean(-1, keepdim=True)
    return rms_norm(Xc, (X.shape[-1],), gamma, 1e-5)


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "normalized_shape X.shape[1:] (all but the first axis)",
       "rms-wrong-axes")
def rms_shape_tail(X, gamma, beta):
    Xc = X - X.mean(-1, keepdim=True)
    return rms_norm(Xc, X.shape[1:], None, 1e-5) * gamma + beta


@wrong("ex-07-rms-norm", "check_layer_norm_from_rms", "computes in float32 and casts back", "precision")
def rms_float32(X, gamma, beta):
    Xf = X.float()
    Xc = Xf - Xf.mean(-1, keepdim=True)
    return (rms_norm(Xc, (X.shape[-1],), gamma.float(), 1e-5) + beta.float()).to(X.dtype)


WRONG = collect(globals())
