"""Wrong answers to five exercises (ex-03-fp16-scores, ex-06-head-writes, ex-07-parallel, ex-heads-uniform-score,
ex-audit-labels), written from the exercise statements and stub cells alone by someone who did not write these
checkers and did not read their mistake tables. Each was verified wrong against the writer's own correct version."""

from __future__ import annotations

import math

import torch

from wrong_answers import Wrong, collect, wrong

# --- ex-03-fp16-scores -------------------------------------------------------------------------------------------


@wrong("ex-03-fp16-scores", "check_fp16_scores", "divides after the product: QKᵀ overflows float16 first",
       "scale-after")
def fp16_divide_after(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


@wrong("ex-03-fp16-scores", "check_fp16_scores", "divides Q by d_k instead of √d_k", "scaled-twice")
def fp16_divide_by_dk(Q, K):
    return (Q / Q.shape[-1]) @ K.transpose(-2, -1)


@wrong("ex-03-fp16-scores", "check_fp16_scores", "precedence slip: d_k ** 1/2 is d_k / 2, not √d_k", "scale-factor")
def fp16_precedence(Q, K):
    d_k = Q.shape[-1]
    return (Q / d_k ** 1 / 2) @ K.transpose(-2, -1)


@wrong("ex-03-fp16-scores", "check_fp16_scores", "divides both Q and K by √d_k: Z / √d_k", "scaled-twice")
def fp16_both_scaled(Q, K):
    s = math.sqrt(Q.shape[-1])
    return (Q / s) @ (K / s).transpose(-2, -1)


@wrong("ex-03-fp16-scores", "check_fp16_scores", "computes in float32 and casts back (a wider copy)", "wider-dtype")
def fp16_upcast(Q, K):
    Z = (Q.float() / math.sqrt(Q.shape[-1])) @ K.float().transpose(-2, -1)
    return Z.to(Q.dtype)


@wrong("ex-03-fp16-scores", "check_fp16_scores", "takes d_k from the wrong axis: Q.shape[-2] (T_q)", "scale-factor")
def fp16_wrong_axis(Q, K):
    return (Q / math.sqrt(Q.shape[-2])) @ K.transpose(-2, -1)


@wrong("ex-03-fp16-scores", "check_fp16_scores", "transposes K with .T, which reverses every axis",
       "every-axis-reversed")
def fp16_dot_T(Q, K):
    return (Q / math.sqrt(Q.shape[-1])) @ K.T


@wrong("ex-03-fp16-scores", "check_fp16_scores", "scales Q in place: the caller's Q is changed", "in-place")
def fp16_in_place(Q, K):
    Q /= math.sqrt(Q.shape[-1])
    return Q @ K.transpose(-2, -1)


# --- ex-06-head-writes -------------------------------------------------------------------------------------------


@wrong("ex-06-head-writes", "check_per_head_writes", "reshapes W_O.weight without transposing it (nn.Linear "
       "stores (out, in))", "orientation")
def writes_no_transpose(O, W_O):
    B, h, T, d_v = O.shape
    return O @ W_O.weight.reshape(h, d_v, -1)


@wrong("ex-06-head-writes", "check_per_head_writes", "adds the bias to every head's term", "bias-each")
def writes_bias_each(O, W_O):
    B, h, T, d_v = O.shape
    return O @ W_O.weight.T.reshape(h, d_v, -1) + W_O.bias


@wrong("ex-06-head-writes", "check_per_head_writes", "adds bias / h to every head's term", "bias-shared")
def writes_bias_shared(O, W_O):
    B, h, T, d_v = O.shape
    return O @ W_O.weight.T.reshape(h, d_v, -1) + W_O.bias / h


@wrong("ex-06-head-writes", "check_per_head_writes", "interleaved rows: head index taken as the fastest one", "strided")
def writes_interleaved(O, W_O):
    B, h, T, d_v = O.shape
    rows = W_O.weight.T.reshape(d_v, h, -1).transpose(0, 1)
    return O @ rows


@wrong("ex-06-head-writes", "check_per_head_writes", "block size d_model // h instead of d_v", "widths")
def writes_block_d_model(O, W_O):
    B, h, T, d_v = O.shape
    d_model = W_O.weight.shape[0]
    W = W_O.weight.T
    return torch.stack([O[:, n] @ W[n * (d_model // h):n * (d_model // h) + d_v] for n in range(h)], dim=1)


@wrong("ex-06-head-writes", "check_per_head_writes", "computes in float32: float64 input comes back float32", "dtype")
def writes_float32(O, W_O):
    B, h, T, d_v = O.shape
    return O.float() @ W_O.weight.T.reshape(h, d_v, -1).float()


@wrong("ex-06-head-writes", "check_per_head_writes", "stacks the terms on the wrong axis: (B, T, h, d_model)",
       "heads-after-T")
def writes_stack_axis(O, W_O):
    B, h, T, d_v = O.shape
    W = W_O.weight.T
    return torch.stack([O[:, n] @ W[n * d_v:(n + 1) * d_v] for n in range(h)], dim=2)


@wrong("ex-06-head-writes", "check_per_head_writes", "returns the sum over heads, not the h terms", "summed")
def writes_summed(O, W_O):
    B, h, T, d_v = O.shape
    return (O @ W_O.weight.T.reshape(h, d_v, -1)).sum(1)


# --- ex-07-parallel ----------------------------------------------------------------------------------------------


@wrong("ex-07-parallel", "check_parallel_block", "the MLP reads LN₂(X) instead of the shared LN₁(X)", "two-norms")
def parallel_ln2(X, block):
    return X + block.attn(block.ln_1(X)) + block.mlp(block.ln_2(X))


@wrong("ex-07-parallel", "check_parallel_block", "runs the sequential block: the MLP reads X + A", "sequential")
def parallel_sequential(X, block):
    H = X + block.attn(block.ln_1(X))
    return H + block.mlp(block.ln_2(H))


@wrong("ex-07-parallel", "check_parallel_block", "forgets the residual: returns the two sublayers' sum", "no-residual")
def parallel_no_residual(X, block):
    N = block.ln_1(X)
    return block.attn(N) + block.mlp(N)


@wrong("ex-07-parallel", "check_parallel_block", "adds X twice, once per sublayer", "residual-twice")
def parallel_x_twice(X, block):
    N = block.ln_1(X)
    return (X + block.attn(N)) + (X + block.mlp(N))


@wrong("ex-07-parallel", "check_parallel_block", "the MLP reads X, not the normalised copy", "mlp-reads-X")
def parallel_mlp_reads_x(X, block):
    return X + block.attn(block.ln_1(X)) + block.mlp(X)


@wrong("ex-07-parallel", "check_parallel_block", "residual from the normalised copy: LN₁(X) + A + M", "normed-residual")
def parallel_residual_normed(X, block):
    N = block.ln_1(X)
    return N + block.attn(N) + block.mlp(N)


@wrong("ex-07-parallel", "check_parallel_block", "the MLP reads the attention's output", "mlp-reads-attention")
def parallel_mlp_after_attn(X, block):
    A = block.attn(block.ln_1(X))
    return X + A + block.mlp(A)


@wrong("ex-07-parallel", "check_parallel_block", "attention called without the causal mask", "not-causal")
def parallel_not_causal(X, block):
    N = block.ln_1(X)
    return X + block.attn(N, causal=False) + block.mlp(N)


# --- ex-heads-uniform-score --------------------------------------------------------------------------------------

_U = ("ex-heads-uniform-score", "check_uniform_induction_score")
heads_all_keys = Wrong(*_U, answer=0.5, made="spreads every row over all 2r keys, ignoring the causal mask: c = 1/2",
                       names=frozenset({"no-mask"}))
heads_all_queries = Wrong(*_U, answer=math.log(2) / 2,
                          made="averages over all 2r queries, the first half scoring 0: c = ln 2 / 2",
                          names=frozenset({"all-queries"}))
heads_midpoint = Wrong(*_U, answer=2 / 3, made="takes every second-half query as reading about 1.5 r keys: c = 2/3",
                       names=frozenset({"one-mean-count"}))
heads_r_keys = Wrong(*_U, answer=1.0, made="takes every query as reading about r keys: c = 1",
                     names=frozenset({"one-block"}))
heads_finite_r = Wrong(*_U, answer=1 / 5 + 1 / 6 + 1 / 7 + 1 / 8,
                       made="gives r × score at r = 4 (1/5 + … + 1/8), not the limit", names=frozenset({"page-demo"}))
heads_score_not_c = Wrong(*_U, answer=sum(1 / k for k in range(17, 33)) / 16,
                          made="gives the score itself at r = 16, not r × score",
                          names=frozenset({"score-at-one-r"}))
heads_inverse = Wrong(*_U, answer=1 / math.log(2), made="inverts the limit: c = 1 / ln 2",
                      names=frozenset({"inverted"}))
heads_log10 = Wrong(*_U, answer=math.log10(2), made="right sum, wrong logarithm: log10 2",
                    names=frozenset({"log10"}))

# --- ex-audit-labels ---------------------------------------------------------------------------------------------

_A = ("ex-audit-labels", "check_audit_labels")
audit_offset_only = Wrong(*_A, answer={"mask-offset"}, made="sees the misplaced diagonal but not the empty first row",
                          names=frozenset({"missed-nan"}))
audit_nan_only = Wrong(*_A, answer={"nan-empty-row"}, made="sees the NaN row but not the misplaced diagonal",
                       names=frozenset({"missed-offset"}))
audit_plus_cached = Wrong(*_A, answer={"mask-offset", "nan-empty-row", "cached-step"},
                          made="adds cached-step: thinks triu(T_k − T_q) breaks a cached step",
                          names=frozenset({"extra-cached-step"}))
audit_leak = Wrong(*_A, answer={"leak"}, made="reads the triu mask as letting the future in",
                   names=frozenset({"extra-leak"}))
audit_plain_nan = Wrong(*_A, answer={"mask-offset", "nan"}, made="names the NaN with the plain nan label",
                        names=frozenset({"extra-nan"}))
audit_nothing = Wrong(*_A, answer=set(), made="predicts a clean audit", names=frozenset({"empty"}))
audit_convention = Wrong(*_A, answer={"mask-convention", "nan-empty-row"},
                         made="thinks the boolean mask is read in the other convention",
                         names=frozenset({"extra-mask-convention"}))
audit_plus_leak = Wrong(*_A, answer={"mask-offset", "nan-empty-row", "leak"}, made="adds leak to the two right labels",
                        names=frozenset({"extra-leak"}))

WRONG = collect(globals())
