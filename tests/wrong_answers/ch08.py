"""Wrong answers to the exercises of chapter 8 (the stack), written from the exercise texts."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.functional import scaled_dot_product_attention

from attnlib import Block, attention, merge_heads
from wrong_answers import collect, wrong

# --- ex-08-deepen -------------------------------------------------------------------------------------------------


def _silence(block):
    """Zero the two output projections (weights and biases): the block adds nothing to the stream."""
    with torch.no_grad():
        for lin in (block.attn.W_O, block.mlp.W_2):
            lin.weight.zero_()
            if lin.bias is not None:
                lin.bias.zero_()
    return block


@wrong("ex-08-deepen", "check_deepen", "entry 2i is blocks[i] itself, not a copy", "shared-parameters")
def deepen_reuses_old(blocks):
    out = nn.ModuleList()
    for b in blocks:
        out.append(b)
        out.append(_silence(copy.deepcopy(b)))
    return out


@wrong("ex-08-deepen", "check_deepen", "new block built with default settings (d_ff, RoPE, dtype ignored)",
       "wrong-d_ff")
def deepen_default_block(blocks):
    out = nn.ModuleList()
    for b in blocks:
        out.append(copy.deepcopy(b))
        out.append(_silence(Block(b.d_model, b.attn.h)))
    return out


@wrong("ex-08-deepen", "check_deepen", "zeroes every parameter of the new block (it cannot learn)", "dead-block")
def deepen_all_zero(blocks):
    out = nn.ModuleList()
    for b in blocks:
        new = copy.deepcopy(b)
        with torch.no_grad():
            for p in new.parameters():
                p.zero_()
        out.extend([copy.deepcopy(b), new])
    return out


@wrong("ex-08-deepen", "check_deepen", "zeroes only the attention's W_O, not the MLP's output", "not-identity")
def deepen_only_attention(blocks):
    out = nn.ModuleList()
    for b in blocks:
        new = copy.deepcopy(b)
        with torch.no_grad():
            new.attn.W_O.weight.zero_()
            if new.attn.W_O.bias is not None:
                new.attn.W_O.bias.zero_()
        out.extend([copy.deepcopy(b), new])
    return out


@wrong("ex-08-deepen", "check_deepen", "zeroes the output weights but leaves their biases", "constant-added")
def deepen_weights_only(blocks):
    out = nn.ModuleList()
    for b in blocks:
        new = copy.deepcopy(b)
        with torch.no_grad():
            new.attn.W_O.weight.zero_()
            new.mlp.W_2.weight.zero_()
        out.extend([copy.deepcopy(b), new])
    return out


@wrong("ex-08-deepen", "check_deepen", "shallow copy.copy for the new block, so zeroing it zeroes the old one",
       "in-place")
def deepen_shallow_copy(blocks):
    out = nn.ModuleList()
    for b in blocks:
        out.append(copy.deepcopy(b))
        out.append(_silence(copy.copy(b)))
    return out


@wrong("ex-08-deepen", "check_deepen", "also zeroes W_QKV and W_1 (nothing gets a gradient)", "dead-block")
def deepen_zero_mlp_in(blocks):
    out = nn.ModuleList()
    for b in blocks:
        new = _silence(copy.deepcopy(b))
        with torch.no_grad():
            new.mlp.W_1.weight.zero_()
            new.attn.W_QKV.weight.zero_()
        out.extend([copy.deepcopy(b), new])
    return out


# --- ex-08-lens ---------------------------------------------------------------------------------------------------


@wrong("ex-08-lens", "check_logit_lens", "final LayerNorm only on the last layer", "raw-but-last")
def lens_no_ln_f(X0, blocks, ln_f, head):
    X, out = X0, [head(X0)]
    for b in blocks:
        X = b(X)
        out.append(head(X))
    out[-1] = head(ln_f(X))
    return torch.stack(out)


@wrong("ex-08-lens", "check_logit_lens", "leaves out X_0: L readouts", "missing-x0")
def lens_no_X0(X0, blocks, ln_f, head):
    X, out = X0, []
    for b in blocks:
        X = b(X)
        out.append(head(ln_f(X)))
    return torch.stack(out)


@wrong("ex-08-lens", "check_logit_lens", "feeds the normed stream into the next block", "normed-stream")
def lens_feeds_normed(X0, blocks, ln_f, head):
    X = ln_f(X0)
    out = [head(X)]
    for b in blocks:
        X = ln_f(b(X))
        out.append(head(X))
    return torch.stack(out)


@wrong("ex-08-lens", "check_logit_lens", "stacks on dim=1: (B, L + 1, T, vocab)", "layer-axis")
def lens_stack_dim1(X0, blocks, ln_f, head):
    states = [X0]
    for b in blocks:
        states.append(b(states[-1]))
    return torch.stack([head(ln_f(X)) for X in states], dim=1)


@wrong("ex-08-lens", "check_logit_lens", "torch.cat instead of stack: ((L + 1) B, T, vocab)",
       "concatenated")
def lens_cat(X0, blocks, ln_f, head):
    states = [X0]
    for b in blocks:
        states.append(b(states[-1]))
    return torch.cat([head(ln_f(X)) for X in states])


@wrong("ex-08-lens", "check_logit_lens", "preallocated with torch.zeros (float32 whatever X0's dtype)", "dtype")
def lens_prealloc_float32(X0, blocks, ln_f, head):
    B, T, _ = X0.shape
    out = torch.zeros(len(blocks) + 1, B, T, head.out_features)
    X = X0
    for l in range(len(blocks) + 1):
        out[l] = head(ln_f(X)).detach()
        if l < len(blocks):
            X = blocks[l](X)
    return out


@wrong("ex-08-lens", "check_logit_lens", "reads each X before its block: X_0 … X_{L-1}, then X_L twice")
def lens_before_block(X0, blocks, ln_f, head):
    X, out = X0, []
    for b in blocks:
        out.append(head(ln_f(X)))
        X = b(X)
    out.append(head(ln_f(X)))
    out[-2] = out[-1]
    return torch.stack(out)


# --- ex-08-windows ------------------------------------------------------------------------------------------------


@wrong("ex-08-windows", "check_text_windows", "n = len // T and targets by torch.roll (last target wraps to 0)",
       "one-too-many")
def windows_roll(data, T):
    n = len(data) // T
    x = data[:n * T]
    return x.view(n, T), torch.roll(x, -1).view(n, T)


@wrong("ex-08-windows", "check_text_windows", "every window start (stride 1), overlapping", "overlapping")
def windows_stride1(data, T):
    x = data[:-1].unfold(0, T, 1)
    y = data[1:].unfold(0, T, 1)
    return x, y


@wrong("ex-08-windows", "check_text_windows", "consecutive blocks of T + 1 tokens (skips inputs)", "gap")
def windows_T_plus_1(data, T):
    n = len(data) // (T + 1)
    blocks = data[:n * (T + 1)].view(n, T + 1)
    return blocks[:, :-1], blocks[:, 1:]


@wrong("ex-08-windows", "check_text_windows", "pads the leftover tokens into a last window with zeros",
       "one-too-many")
def windows_padded(data, T):
    n = -(-(len(data) - 1) // T)
    padded = torch.cat([data, data.new_zeros(n * T + 1 - len(data))])
    return padded[:-1].view(n, T), padded[1:].view(n, T)


@wrong("ex-08-windows", "check_text_windows", "drops the leftover at the start instead of the end",
       "aligned-to-end")
def windows_from_end(data, T):
    n = (len(data) - 1) // T
    tail = data[len(data) - (n * T + 1):]
    return tail[:-1].reshape(n, T), tail[1:].reshape(n, T)


@wrong("ex-08-windows", "check_text_windows", "n = len // T - 1: one window too few when the text fits exactly",
       "one-too-few")
def windows_one_short(data, T):
    n = len(data) // T - 1
    return data[:n * T].reshape(n, T), data[1:n * T + 1].reshape(n, T)


# --- ex-08-kv-cache -----------------------------------------------------------------------------------------------


def _generate(model, ids, n_new, chunk, *, attend=None, embed_offset=True, qkv_offset=True, keep=True,
              refeed=False):
    """A chunked, cached generation with one switch per mistake below."""
    attend = attend or (lambda Q, K, V: attention(Q, K, V, causal=True))
    L = len(model.blocks)
    Ks, Vs = [None] * L, [None] * L

    def feed(x_ids, offset):
        X = model.embed_tokens(x_ids, offset if embed_offset else 0)
        for l, b in enumerate(model.blocks):
            Q, K, V = b.attn.qkv(b.ln_1(X), offset if qkv_offset else 0)
            if keep and Ks[l] is not None:
                K, V = torch.cat([Ks[l], K], dim=2), torch.cat([Vs[l], V], dim=2)
            Ks[l], Vs[l] = K, V
            X = X + b.attn.W_O(merge_heads(attend(Q, K, V)))
            X = X + b.mlp(b.ln_2(X))
        return model.head(model.ln_f(X))

    with torch.no_grad():
        seq, T0 = ids, ids.shape[1]
        for s in range(0, T0, chunk):
            logits = feed(ids[:, s:s + chunk], s)
        if refeed:
            logits = feed(ids[:, -1:], T0 - 1)
        for _ in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
            logits = feed(nxt, seq.shape[1] - 1)
    return seq


@wrong("ex-08-kv-cache", "check_cached_generation", "SDPA with is_causal=True (top-left mask) for every chunk",
       "top-left-mask")
def kv_sdpa_is_causal(model, ids, n_new, chunk):
    sdpa = lambda Q, K, V: scaled_dot_product_attention(Q, K, V, is_causal=True)  # noqa: E731
    return _generate(model, ids, n_new, chunk, attend=sdpa)


@wrong("ex-08-kv-cache", "check_cached_generation", "causal=False: a chunk's rows read its later rows",
       "unmasked")
def kv_no_mask(model, ids, n_new, chunk):
    return _generate(model, ids, n_new, chunk, attend=lambda Q, K, V: attention(Q, K, V, causal=False))


@wrong("ex-08-kv-cache", "check_cached_generation", "embed_tokens without the offset (learned positions restart)",
       "no-offset")
def kv_embed_no_offset(model, ids, n_new, chunk):
    return _generate(model, ids, n_new, chunk, embed_offset=False)


@wrong("ex-08-kv-cache", "check_cached_generation", "qkv without the offset (RoPE restarts each chunk)",
       "no-offset")
def kv_qkv_no_offset(model, ids, n_new, chunk):
    return _generate(model, ids, n_new, chunk, qkv_offset=False)


@wrong("ex-08-kv-cache", "check_cached_generation", "overwrites the cache with the newest chunk's K and V",
       "cache-overwritten")
def kv_overwrites(model, ids, n_new, chunk):
    return _generate(model, ids, n_new, chunk, keep=False)


@wrong("ex-08-kv-cache", "check_cached_generation", "feeds the last prompt token again after the prompt",
       "last-token-twice")
def kv_refeeds_last(model, ids, n_new, chunk):
    return _generate(model, ids, n_new, chunk, refeed=True)


WRONG = collect(globals())
