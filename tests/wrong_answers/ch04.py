"""Wrong answers to the exercises of chapter 4 (the causal mask), written from the exercise texts."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlib import causal_mask
from wrong_answers import collect, wrong

# --- ex-04-packed-mask -----------------------------------------------------------------------------------------


@wrong("ex-04-packed-mask", "check_packed_mask", "same-document test only, no causal part", "documents-only")
def packed_no_causal(doc_ids):
    return doc_ids[..., :, None] == doc_ids[..., None, :]


@wrong("ex-04-packed-mask", "check_packed_mask", "causal mask only: documents are not separated", "causal-only")
def packed_causal_only(doc_ids):
    T = doc_ids.shape[-1]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=doc_ids.device))
    return mask.expand(*doc_ids.shape[:-1], T, T)


@wrong("ex-04-packed-mask", "check_packed_mask",
       "triu instead of tril: each token reads its own document's future", "wrong-triangle")
def packed_triu(doc_ids):
    T = doc_ids.shape[-1]
    same = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)
    return same & torch.triu(torch.ones(T, T, dtype=torch.bool, device=doc_ids.device))


@wrong("ex-04-packed-mask", "check_packed_mask",
       "strictly causal (diagonal=-1): a token may not read itself", "diagonal-blocked")
def packed_no_self(doc_ids):
    T = doc_ids.shape[-1]
    same = doc_ids[..., :, None] == doc_ids[..., None, :]
    return same & torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril(-1)


@wrong("ex-04-packed-mask", "check_packed_mask",
       "doc_j <= doc_i: a token also reads the earlier documents", "causal-only")
def packed_earlier_docs(doc_ids):
    T = doc_ids.shape[-1]
    earlier_or_same = doc_ids[..., None, :] <= doc_ids[..., :, None]
    return earlier_or_same & torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()


@wrong("ex-04-packed-mask", "check_packed_mask",
       "the nn.MultiheadAttention convention: True where masked", "blocked-convention")
def packed_inverted(doc_ids):
    T = doc_ids.shape[-1]
    same = doc_ids[..., :, None] == doc_ids[..., None, :]
    allowed = same & torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return ~allowed


@wrong("ex-04-packed-mask", "check_packed_mask",
       "returns the additive float mask (0 / -inf) instead of booleans", "additive")
def packed_float(doc_ids):
    T = doc_ids.shape[-1]
    same = doc_ids[..., :, None] == doc_ids[..., None, :]
    allowed = same & torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return torch.zeros(allowed.shape, device=doc_ids.device).masked_fill(~allowed, float("-inf"))


@wrong("ex-04-packed-mask", "check_packed_mask",
       "loops over one row: indexes doc_ids[i] and doc_ids[j] as if 1-D", "batch-axes")
def packed_loop_1d(doc_ids):
    T = doc_ids.shape[-1]
    mask = torch.zeros(*doc_ids.shape[:-1], T, T, dtype=torch.bool)
    flat = doc_ids.reshape(-1, T)[0]
    for i in range(T):
        for j in range(i + 1):
            mask[..., i, j] = bool(flat[i] == flat[j])
    return mask


# --- ex-04-chunk-weights ---------------------------------------------------------------------------------------


def _query_pos(Z, start):
    T_q, T_k = Z.shape[-2:]
    return start + torch.arange(T_q, device=Z.device)[:, None], torch.arange(T_k, device=Z.device)


@wrong("ex-04-chunk-weights", "check_chunk_weights",
       "ignores start: queries treated as positions 0 … T_q − 1", "row-is-position")
def chunk_ignores_start(Z, start):
    T_q, T_k = Z.shape[-2:]
    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=Z.device).tril()
    return Z.masked_fill(~allowed, float("-inf")).softmax(-1)


@wrong("ex-04-chunk-weights", "check_chunk_weights",
       "bottom-right alignment: queries taken as the last T_q keys", "last-chunk")
def chunk_bottom_right(Z, start):
    T_q, T_k = Z.shape[-2:]
    return (Z + causal_mask(T_q, T_k, dtype=Z.dtype, device=Z.device)).softmax(-1)


@wrong("ex-04-chunk-weights", "check_chunk_weights",
       "strict <: a query cannot read the key at its own position", "self-blocked")
def chunk_strict(Z, start):
    i, j = _query_pos(Z, start)
    return Z.masked_fill(~(j < i), float("-inf")).softmax(-1)


@wrong("ex-04-chunk-weights", "check_chunk_weights", "masked_fill_ in place: Z is changed", "in-place")
def chunk_in_place(Z, start):
    i, j = _query_pos(Z, start)
    return Z.masked_fill_(j > i, float("-inf")).softmax(dim=-1)


@wrong("ex-04-chunk-weights", "check_chunk_weights", "mask after softmax, rows not renormalized", "after-softmax")
def chunk_mask_after_softmax(Z, start):
    i, j = _query_pos(Z, start)
    return Z.softmax(-1).masked_fill(j > i, 0.0)


@wrong("ex-04-chunk-weights", "check_chunk_weights", "softmax in float32 and returned as float32", "upcast")
def chunk_float32(Z, start):
    i, j = _query_pos(Z, start)
    return torch.where(j <= i, Z.float(), float("-inf")).softmax(-1)


@wrong("ex-04-chunk-weights", "check_chunk_weights", "softmax over the queries (dim=-2)", "wrong-axis")
def chunk_wrong_axis(Z, start):
    i, j = _query_pos(Z, start)
    return Z.masked_fill(j > i, float("-inf")).softmax(dim=-2).nan_to_num(0.0)


@wrong("ex-04-chunk-weights", "check_chunk_weights", "tril with diagonal=start - 1: one key short", "self-blocked")
def chunk_tril_off_by_one(Z, start):
    T_q, T_k = Z.shape[-2:]
    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=Z.device).tril(diagonal=start - 1)
    return Z.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)


@wrong("ex-04-chunk-weights", "check_chunk_weights",
       "fills with finfo.min, then softmax in float64 returned as float64", "upcast")
def chunk_float64_softmax(Z, start):
    i, j = _query_pos(Z, start)
    P = F.softmax(Z.masked_fill(j > i, torch.finfo(Z.dtype).min).double(), dim=-1)
    return P


# --- ex-04-sealed-head -----------------------------------------------------------------------------------------


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "the additive mask S + M: a NaN in a later key spreads to every row", "as-on-the-page")
def sealed_additive(Q, K, V):
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    return (Z + causal_mask(T, dtype=Q.dtype, device=Q.device)).softmax(-1) @ V


def _plain_pv(Q, K, V):
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    future = torch.ones(T, T, dtype=torch.bool, device=Q.device).triu(1)
    return Z.masked_fill(future, float("-inf")).softmax(-1) @ V


sealed_plain_pv = wrong("ex-04-sealed-head", "check_sealed_attention",
                        "masked_fill on the scores, then a plain P @ V: 0 · NaN in V", "zero-times-nan")(_plain_pv)


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "cleans the inputs with nan_to_num, which the statement forbids", "cleaned-values")
def sealed_cleans_inputs(Q, K, V):
    K, V = K.nan_to_num(0.0, 0.0, 0.0), V.nan_to_num(0.0, 0.0, 0.0)
    return _plain_pv(Q, K, V)


@wrong("ex-04-sealed-head", "check_sealed_attention", "cleans the output: nan_to_num on the result", "nan-hidden")
def sealed_cleans_output(Q, K, V):
    return _plain_pv(Q, K, V).nan_to_num(0.0)


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "SDPA with is_causal=True: the library also multiplies 0 by NaN", "as-on-the-page")
def sealed_sdpa(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "loop over rows with the prefix K[:i], V[:i]: the row's own key left out", "own-key-left-out")
def sealed_loop_excludes_self(Q, K, V):
    T, d_k = Q.shape[-2], Q.shape[-1]
    rows = []
    for i in range(T):
        n = max(i, 1)
        z = Q[..., i:i + 1, :] @ K[..., :n, :].transpose(-2, -1) / math.sqrt(d_k)
        rows.append(z.softmax(-1) @ V[..., :n, :])
    return torch.cat(rows, dim=-2)


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "loop over prefixes, but scaled by sqrt(T) instead of sqrt(d_k)", "scale-T")
def sealed_loop_wrong_scale(Q, K, V):
    T = Q.shape[-2]
    rows = []
    for i in range(T):
        z = Q[..., i:i + 1, :] @ K[..., :i + 1, :].transpose(-2, -1) / math.sqrt(T)
        rows.append(z.softmax(-1) @ V[..., :i + 1, :])
    return torch.cat(rows, dim=-2)


@wrong("ex-04-sealed-head", "check_sealed_attention",
       "zeroes P where it is 0, with torch.where, before P @ V: NaN stays", "zero-times-nan")
def sealed_where_on_p(Q, K, V):
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    allowed = torch.ones(T, T, dtype=torch.bool, device=Q.device).tril()
    P = torch.where(allowed, Z, float("-inf")).softmax(-1)
    P = torch.where(allowed, P, torch.zeros_like(P))
    return P @ V


@wrong("ex-04-sealed-head", "check_sealed_attention", "prefix loop computed in float32 and cast back", "precision")
def sealed_loop_float32(Q, K, V):
    d_k = Q.shape[-1]
    q, k, v = Q.float(), K.float(), V.float()
    rows = []
    for i in range(Q.shape[-2]):
        z = q[..., i:i + 1, :] @ k[..., :i + 1, :].transpose(-2, -1) / math.sqrt(d_k)
        rows.append(z.softmax(-1) @ v[..., :i + 1, :])
    return torch.cat(rows, dim=-2).to(Q.dtype)


WRONG = collect(globals())
