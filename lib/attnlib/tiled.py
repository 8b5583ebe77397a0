"""Chapter 9: attention in tiles, with the online softmax (the idea behind FlashAttention).

The scores of one query row are read block by block. A running maximum m and a running sum
ℓ = Σ exp(s_j − m) are kept; when a block raises the maximum, everything summed so far is rescaled by
exp(m_old − m_new). In attention the running output O (a weighted sum of V's rows) is rescaled the same way and
divided by ℓ at the end. The (T_q, T_k) table of scores is never built: only one (block_q, block_k) tile at a time.

Row i of every table is a query position, column j a key position; with T_k > T_q the queries are the *last*
T_q positions (as in :func:`attnlib.causal_mask`).
"""

from __future__ import annotations

import torch

from ._validate import (
    boundary,
    require_batch,
    require_flags,
    require_positive,
    require_row_stats,
    require_same,
    require_shape,
)
from .attention import scale, scores

__all__ = ["SKIPPED", "FULL", "DIAGONAL", "online_softmax_step", "online_softmax", "tile_plan",
           "tiled_attention"]

SKIPPED, FULL, DIAGONAL = 0, 1, 2   # the three kinds of tile in a plan (see tile_plan)


@boundary("_online_softmax_step_args")
def online_softmax_step(m: torch.Tensor, l: torch.Tensor, S_blk: torch.Tensor):
    """Take one more block of scores into the running max m and the running sum ℓ.

    m (...,): the largest score so far (−inf before the first block); l (...,): Σ exp(s − m) over the scores
    so far; S_blk (..., n): the next n scores of each row.
    Returns m_new (...,), l_new (...,), rescale = exp(m − m_new) (...,), the factor that brings anything
    summed against the old max to the new one, and P_blk = exp(S_blk − m_new) (..., n), the block's
    unnormalised weights. A row whose scores so far are all −inf (padding, a window) keeps m = −inf, ℓ = 0
    and weights 0 until its first finite score, as softmax gives those keys weight 0.
    """
    m_new = torch.maximum(m, S_blk.amax(dim=-1))        # (...,)
    shift = torch.where(m_new == float("-inf"), 0.0, m_new)   # (...,) no finite score yet: exp(−inf − 0) = 0, not NaN
    rescale = torch.exp(m - shift)                      # 0 on the first block (m = −inf), 1 if the max stays
    P_blk = torch.exp(S_blk - shift[..., None])         # (..., n), every entry ≤ 1
    l_new = rescale * l + P_blk.sum(dim=-1)             # (...,)
    return m_new, l_new, rescale, P_blk


@boundary("_online_softmax_args")
def online_softmax(S: torch.Tensor, block: int) -> torch.Tensor:
    """softmax over the last axis of S (..., n), reading the scores ``block`` at a time: S → P (..., n).

    One pass over the blocks finds m and ℓ with :func:`online_softmax_step`; then P = exp(S − m) / ℓ.
    """
    m = S.new_full(S.shape[:-1], float("-inf"))         # (...,) running max
    l = S.new_zeros(S.shape[:-1])                       # (...,) running sum of exp(s − m)
    for k0 in range(0, S.shape[-1], block):
        m, l, _, _ = online_softmax_step(m, l, S[..., k0:k0 + block])
    return torch.exp(S - m[..., None]) / l[..., None]


@boundary("_tile_plan_args")
def tile_plan(T_q: int, T_k: int, block_q: int, block_k: int, causal: bool = True) -> torch.Tensor:
    """Which tiles of the (T_q, T_k) score table causal attention computes: (n_q, n_k) of SKIPPED/FULL/DIAGONAL.

    Query block i holds rows i·block_q … (last one shorter when block_q does not divide T_q), key block j
    columns j·block_k …; n_q = ⌈T_q / block_q⌉, n_k = ⌈T_k / block_k⌉. A tile is SKIPPED when every key in it
    lies in the future of every query in it, FULL when every key may be read by every query (no mask needed),
    DIAGONAL when it straddles the diagonal (computed, with the mask). Without ``causal`` every tile is FULL.
    """
    n_q, n_k = -(-T_q // block_q), -(-T_k // block_k)           # ceiling division
    plan = torch.full((n_q, n_k), FULL, dtype=torch.int64)
    if not causal:
        return plan
    first_q = torch.arange(n_q) * block_q + (T_k - T_q)          # absolute position of each block's first query
    last_q = torch.clamp((torch.arange(n_q) + 1) * block_q, max=T_q) - 1 + (T_k - T_q)
    first_k = torch.arange(n_k) * block_k
    last_k = torch.clamp((torch.arange(n_k) + 1) * block_k, max=T_k) - 1
    plan[last_k[None, :] > first_q[:, None]] = DIAGONAL          # some key lies after some query
    plan[first_k[None, :] > last_q[:, None]] = SKIPPED           # every key lies after every query
    return plan


@boundary("_tiled_attention_args")
def tiled_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, causal: bool = True,
                    block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """softmax(Q Kᵀ / √d_k + M) V, one (block_q, block_k) tile at a time: → (..., T_q, d_v).

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v), with the same batch axes. Beyond its output, the
    memory it needs depends on the block sizes only, not on T_q · T_k: the full score table is never built.
    """
    T_q, d_k, T_k = Q.shape[-2], Q.shape[-1], K.shape[-2]
    plan = tile_plan(T_q, T_k, block_q, block_k, causal).tolist()   # n_q lists of n_k kinds
    out = Q.new_empty(*Q.shape[:-1], V.shape[-1])                # (..., T_q, d_v)
    for i, kinds in enumerate(plan):                             # kinds: the tiles of query block i
        q0, q1 = i * block_q, min((i + 1) * block_q, T_q)
        rows = Q.shape[:-2] + (q1 - q0,)
        m = Q.new_full(rows, float("-inf"))                     # running max, (..., block_q)
        l = Q.new_zeros(rows)                                   # running sum of exp(s − m)
        O = Q.new_zeros(rows + (V.shape[-1],))                  # running Σ exp(s − m) v, (..., block_q, d_v)
        for j, kind in enumerate(kinds):
            if kind == SKIPPED:
                continue
            k0, k1 = j * block_k, min((j + 1) * block_k, T_k)
            S = scale(scores(Q[..., q0:q1, :], K[..., k0:k1, :]), d_k)   # (..., block_q, block_k)
            if kind == DIAGONAL:
                pos_q = torch.arange(q0, q1, device=Q.device) + (T_k - T_q)
                future = torch.arange(k0, k1, device=Q.device)[None, :] > pos_q[:, None]
                S = S.masked_fill(future, float("-inf"))
            m, l, rescale, P_blk = online_softmax_step(m, l, S)
            O = rescale[..., None] * O + P_blk @ V[..., k0:k1, :]
        out[..., q0:q1, :] = O / l[..., None]
    return out


# ---------------------------------------------------------------------------------------------- argument specs
# Each public function above is checked once, where it is called from outside the library (see boundary,
# which finds a spec by its name). Views of any layout come back as contiguous copies, so that they give the
# bits of a plain copy.


def _online_softmax_step_args(m, l, S_blk):
    require_shape(S_blk, "S_blk", "... n")
    require_row_stats(m, "m", S_blk, "S_blk")
    require_row_stats(l, "l", S_blk, "S_blk")
    return {"m": m.contiguous(), "l": l.contiguous(), "S_blk": S_blk.contiguous()}


def _online_softmax_args(S, block):
    require_shape(S, "S", "... n")
    block, = require_positive(block=block)
    return {"S": S.contiguous(), "block": block}


def _tile_plan_args(T_q, T_k, block_q, block_k, causal):
    T_q, T_k, block_q, block_k = require_positive(T_q=T_q, T_k=T_k, block_q=block_q, block_k=block_k)
    causal, = require_flags(causal=causal)
    if causal and T_k < T_q:
        raise ValueError(f"T_k={T_k} must be at least T_q={T_q}: every query needs its own key")
    return {"T_q": T_q, "T_k": T_k, "block_q": block_q, "block_k": block_k, "causal": causal}


def _tiled_attention_args(Q, K, V, causal, block_q, block_k):
    d = require_shape(Q, "Q", "... T_q d_k")
    d |= require_shape(K, "K", "... T_k d_k", d_k=d["d_k"])
    require_shape(V, "V", "... T_k d_v", T_k=d["T_k"])
    for X, name in ((K, "K"), (V, "V")):
        require_same(Q, X, "Q", name)
        require_batch(Q, X, "Q", name)
    block_q, block_k = require_positive(block_q=block_q, block_k=block_k)
    plan = _tile_plan_args(d["T_q"], d["T_k"], block_q, block_k, causal)
    return {"Q": Q.contiguous(), "K": K.contiguous(), "V": V.contiguous(), "causal": plan["causal"],
            "block_q": block_q, "block_k": block_k}
