"""Wrong answers to the exercises of chapter 6 (multi-head attention), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from attnlib import causal_mask, softmax
from wrong_answers import Wrong, collect, wrong

# --- ex-06-head-writes --------------------------------------------------------------------------------------------


@wrong("ex-06-head-writes", "check_per_head_writes",
       "sliced W_O.weight by rows as the page slices W_O, forgetting nn.Linear stores it (out, in)", "orientation")
def writes_weight_rows(O, W_O):
    d_v = O.shape[-1]
    terms = [O[:, n] @ W_O.weight[n * d_v:(n + 1) * d_v, :] for n in range(O.shape[1])]
    return torch.stack(terms, dim=1)


@wrong("ex-06-head-writes", "check_per_head_writes", "ran each head through F.linear with the layer's bias",
       "bias-each")
def writes_linear_with_bias(O, W_O):
    d_v = O.shape[-1]
    return torch.stack([torch.nn.functional.linear(O[:, n], W_O.weight[:, n * d_v:(n + 1) * d_v], W_O.bias)
                        for n in range(O.shape[1])], dim=1)


@wrong("ex-06-head-writes", "check_per_head_writes", "an h-th of the bias in every head, so the heads add up "
       "to the layer's output", "bias-shared")
def writes_bias_spread(O, W_O):
    h, d_v = O.shape[1], O.shape[-1]
    W = W_O.weight.T.reshape(h, d_v, -1)
    return O @ W + W_O.bias / h


@wrong("ex-06-head-writes", "check_per_head_writes", "head width taken as d_model // h, as in the chapter",
       "widths")
def writes_d_model_over_h(O, W_O):
    B, h, T, _ = O.shape
    d_head = W_O.out_features // h
    W = W_O.weight.T
    return torch.stack([O[:, n] @ W[n * d_head:(n + 1) * d_head] for n in range(h)], dim=1)


@wrong("ex-06-head-writes", "check_per_head_writes", "cut W_O as (d_v, h, d_model): head n gets every h-th row",
       "strided")
def writes_strided_rows(O, W_O):
    h, d_v = O.shape[1], O.shape[-1]
    W = W_O.weight.T.reshape(d_v, h, -1).permute(1, 0, 2)     # (h, d_v, d_model)
    return O @ W


@wrong("ex-06-head-writes", "check_per_head_writes", "list of per-head terms stacked on the first axis",
       "heads-in-front")
def writes_stacked_dim0(O, W_O):
    d_v = O.shape[-1]
    W = W_O.weight.T
    return torch.stack([O[:, n] @ W[n * d_v:(n + 1) * d_v] for n in range(O.shape[1])])


@wrong("ex-06-head-writes", "check_per_head_writes", "einsum that puts the head axis after the positions",
       "heads-after-T")
def writes_einsum_bthm(O, W_O):
    h, d_v = O.shape[1], O.shape[-1]
    return torch.einsum("bhtv,hvm->bthm", O, W_O.weight.T.reshape(h, d_v, -1))


@wrong("ex-06-head-writes", "check_per_head_writes", "concatenated the heads with a reshape, no transpose, then "
       "cut the concatenation per head", "merge-no-transpose")
def writes_concat_by_reshape(O, W_O):
    B, h, T, d_v = O.shape
    concat = O.reshape(B, T, h * d_v)
    W = W_O.weight.T
    return torch.stack([concat[..., n * d_v:(n + 1) * d_v] @ W[n * d_v:(n + 1) * d_v] for n in range(h)], dim=1)


@wrong("ex-06-head-writes", "check_per_head_writes", "returned the sum of the heads' terms, the layer's work",
       "summed")
def writes_summed(O, W_O):
    h, d_v = O.shape[1], O.shape[-1]
    return (O @ W_O.weight.T.reshape(h, d_v, -1)).sum(dim=1)


# --- ex-06-heads-first --------------------------------------------------------------------------------------------


def _project(X, W_Q, W_K, W_V):
    q = torch.einsum("btd,hdk->bhtk", X, W_Q)
    k = torch.einsum("btd,hdk->bhtk", X, W_K)
    v = torch.einsum("btd,hdv->bhtv", X, W_V)
    return q, k, v


@wrong("ex-06-heads-first", "check_heads_first", "scaled by √d_v instead of √d_k", "scale-d_v")
def hf_scale_d_v(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    Z = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    P = softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device))
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "scaled by √d_model instead of √d_k", "scale-d_model")
def hf_scale_d_model(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    B, T, d_model = X.shape
    Z = q @ k.transpose(-2, -1) / math.sqrt(d_model)
    P = softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device))
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "scaled by √(d_model / h), the chapter's d_head, instead of √d_k",
       "widths")
def hf_scale_d_model_over_h(X, W_Q, W_K, W_V, W_O):
    h, d_model, d_k = W_Q.shape
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    Z = q @ k.transpose(-2, -1) / math.sqrt(d_model / h)
    P = softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device))
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "no causal mask", "no-mask")
def hf_no_mask(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    P = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first",
       "mask applied after the softmax (future weights zeroed, rows not renormalised)",
       "mask-after-softmax")
def hf_mask_after_softmax(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    P = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    P = P * torch.ones(T, T, dtype=X.dtype, device=X.device).tril()
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "merged the heads with a reshape and no transpose",
       "merge-no-transpose")
def hf_merge_reshape_only(X, W_Q, W_K, W_V, W_O):
    B, T, d_model = X.shape
    h, d_v, _ = W_O.shape
    q, k, v = _project(X, W_Q, W_K, W_V)
    P = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, dtype=X.dtype, device=X.device))
    out = (P @ v).reshape(B, T, h * d_v)                   # (B, T, h·d_v)
    return out @ W_O.reshape(h * d_v, d_model)


@wrong("ex-06-heads-first", "check_heads_first",
       "flattened W_O as (d_v, h) rows: rows no longer follow the concatenated heads",
       "W_O-interleaved")
def hf_W_O_rows_wrong_order(X, W_Q, W_K, W_V, W_O):
    B, T, d_model = X.shape
    h, d_v, _ = W_O.shape
    q, k, v = _project(X, W_Q, W_K, W_V)
    P = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, dtype=X.dtype, device=X.device))
    out = (P @ v).transpose(1, 2).reshape(B, T, h * d_v)
    return out @ W_O.transpose(0, 1).reshape(h * d_v, d_model)


@wrong("ex-06-heads-first", "check_heads_first", "computes in float32 and casts back (float64 loses accuracy)",
       "precision")
def hf_float32_round_trip(X, W_Q, W_K, W_V, W_O):
    Xf, Qf, Kf, Vf, Of = (t.float() for t in (X, W_Q, W_K, W_V, W_O))
    q, k, v = _project(Xf, Qf, Kf, Vf)
    T = X.shape[1]
    P = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, device=X.device))
    return torch.einsum("bhtv,hvd->btd", P @ v, Of).to(X.dtype)


@wrong("ex-06-heads-first", "check_heads_first",
       "mask built with causal_mask(T)'s default float32: float16 scores come out float32",
       "dtype")
def hf_mask_default_dtype(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    P = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, device=X.device), dim=-1)
    return torch.einsum("bhtv,hvd->btd", P @ v.to(P.dtype), W_O.to(P.dtype))


@wrong("ex-06-heads-first", "check_heads_first", "masked with masked_fill(-1e9), which does not fit in float16",
       "finite")
def hf_fill_minus_1e9(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    Z = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(1)
    P = torch.softmax(Z.masked_fill(future, -1e9), dim=-1)
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "softmax over the query axis (dim=-2) instead of the keys",
       "softmax-over-queries")
def hf_softmax_wrong_axis(X, W_Q, W_K, W_V, W_O):
    q, k, v = _project(X, W_Q, W_K, W_V)
    T = X.shape[1]
    Z = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, dtype=X.dtype, device=X.device)
    P = torch.softmax(Z, dim=-2)
    return torch.einsum("bhtv,hvd->btd", P @ v, W_O)


@wrong("ex-06-heads-first", "check_heads_first", "averaged the heads' projected outputs instead of summing them",
       "mean-heads")
def hf_mean_over_heads(X, W_Q, W_K, W_V, W_O):
    T = X.shape[1]
    outs = []
    for n in range(W_Q.shape[0]):
        q, k, v = X @ W_Q[n], X @ W_K[n], X @ W_V[n]
        P = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, dtype=X.dtype, device=X.device))
        outs.append(P @ v @ W_O[n])
    return torch.stack(outs).mean(0)


@wrong("ex-06-heads-first", "check_heads_first", "scores K Qᵀ instead of Q Kᵀ (the table transposed)",
       "scores-transposed")
def hf_scores_transposed(X, W_Q, W_K, W_V, W_O):
    T = X.shape[1]
    Y = 0
    for n in range(W_Q.shape[0]):
        q, k, v = X @ W_Q[n], X @ W_K[n], X @ W_V[n]
        P = softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]) + causal_mask(T, dtype=X.dtype, device=X.device))
        Y = Y + P @ v @ W_O[n]
    return Y


# --- ex-06-predict-parameters -------------------------------------------------------------------------------------

_D, _H, _DK, _DV = 96, 8, 16, 24

count_chapter_formula = Wrong("ex-06-predict-parameters", "check_attention_parameters", 4 * _D ** 2 + 4 * _D,
                              "used the chapter's 4·d_model² + 4·d_model", frozenset({"chapter-layer"}))
count_no_biases = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                        2 * _D * _H * _DK + 2 * _D * _H * _DV,
                        "weights only, forgot the biases", frozenset({"no-bias"}))
count_no_output_bias = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                             2 * (_D * _H * _DK + _H * _DK) + (_D * _H * _DV + _H * _DV) + _H * _DV * _D,
                             "forgot the output projection's bias", frozenset({"no-output-bias"}))
count_d_k_everywhere = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                             3 * (_D * _H * _DK + _H * _DK) + (_H * _DK * _D + _D),
                             "used d_k for every projection, d_v ignored", frozenset({"values-as-keys"}))
count_bias_one_head = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                            2 * (_D * _H * _DK + _DK) + (_D * _H * _DV + _DV) + (_H * _DV * _D + _D),
                            "biases of one head's width, not multiplied by h", frozenset({"biases-one-head"}))
count_W_O_one_head = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                           2 * (_D * _H * _DK + _H * _DK) + (_D * _H * _DV + _H * _DV) + (_DV * _D + _D),
                           "W_O counted as one head's (d_v, d_model), not (h·d_v, d_model)",
                           frozenset({"output-one-head"}))
count_one_head = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                       2 * (_D * _DK + _DK) + (_D * _DV + _DV) + (_DV * _D + _D),
                       "counted one head only", frozenset({"one-head"}))
count_no_W_O = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                     2 * (_D * _H * _DK + _H * _DK) + (_D * _H * _DV + _H * _DV),
                     "forgot W_O entirely", frozenset({"no-output"}))
count_square_weights = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                             4 * _D * _D + 2 * _H * _DK + _H * _DV + _D,
                             "weights as d_model × d_model each, biases right", frozenset({"square-matrices"}))
count_output_bias_per_head = Wrong("ex-06-predict-parameters", "check_attention_parameters",
                                   2 * (_D * _H * _DK + _H * _DK) + (_D * _H * _DV + _H * _DV)
                                   + (_H * _DV * _D + _H * _D),
                                   "gave the output projection one bias per head (h·d_model)",
                                   frozenset({"output-bias-per-head"}))

# --- ex-06-find-the-bug -------------------------------------------------------------------------------------------


@wrong("ex-06-find-the-bug", "check_folded_heads", "deleted the raise line and changed nothing else", "unchanged")
def folded_as_given(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)                   # each (B, T, d_model)
    # torch.bmm takes three axes: fold every sequence's heads into one axis of B·h
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))                           # each (B·h, T, d_head)
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)  # (B·h, T, T)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)                                    # (B·h, T, d_head)
    out = out.reshape(h, B, T, d_head).permute(1, 2, 0, 3)  # (B, T, h, d_head)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads",
       "unfolded to (B, h, T, d_head) and merged with a reshape, no transpose",
       "merge-no-transpose")
def folded_unfold_no_transpose(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V).reshape(B, h, T, d_head)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads", "same (h, B) unfold written as transpose(0, 1) then transpose(1, 2)",
       "unchanged")
def folded_same_bug_other_way(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)
    out = out.reshape(h, B, T, d_head).transpose(0, 1).transpose(1, 2)   # (B, T, h, d_head)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads",
       "fixed the unfold but merged with view on the transposed tensor (raises)",
       "view-of-transposed")
def folded_view_after_permute(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V).reshape(B, h, T, d_head).permute(0, 2, 1, 3)
    return out.view(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads", "unfolded as (B, h, T, d_head) but permuted to (B, T, d_head, h)",
       "merge-interleaved")
def folded_wrong_permutation(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V).reshape(B, h, T, d_head).permute(0, 2, 3, 1)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads",
       "changed the fold to (h, B) order without the transpose to match the unfold",
       "fold-by-reshape")
def folded_fold_changed_instead(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(h, B, T, d_head).reshape(h * B, T, d_head) for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)
    out = out.reshape(h, B, T, d_head).permute(1, 2, 0, 3)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads",
       "took the scale for the bug: divides by √d_model, unfold left as it was",
       "scale-d_model")
def folded_scale_changed_instead(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_model)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)
    out = out.reshape(h, B, T, d_head).permute(1, 2, 0, 3)
    return out.reshape(B, T, d_model) @ W_O


@wrong("ex-06-find-the-bug", "check_folded_heads", "fixed the unfold but scaled by √d_model while at it",
       "scale-d_model")
def folded_fixed_but_scale_d_model(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_model)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V).reshape(B, h, T, d_head).transpose(1, 2)
    return out.reshape(B, T, d_model) @ W_O


WRONG = collect(globals())
