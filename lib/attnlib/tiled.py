"""Chapter 9: attention in tiles, with the online softmax (the idea behind FlashAttention).

The scaled scores z of one query row are read block by block. A running maximum m and a running sum
ℓ = Σ exp(z_j − m) are kept; when a block raises the maximum, everything summed so far is rescaled by
exp(m_old − m_new). In attention the running output Õ (``acc``, a weighted sum of V's rows) is rescaled the same
way and divided by ℓ at the end, giving the output O. The (T_q, T_k) table of scores is never built: only one
(block_q, block_k) tile at a time (N_q × N_k in the book's notation). The query blocks are the outer loop, as in
FlashAttention-2.

The backward pass (:func:`tiled_attention_backward`, wired into autograd by :class:`TiledAttention` and
:func:`recomputing_tiled_attention`) keeps only Q, K, V, O and the row statistics m and ℓ, and recomputes each
tile's weights P = exp(Z − m) / ℓ from its scores instead of storing the table.

Row i of every table is a query position, column j a key position; with T_k > T_q the queries are the *last*
T_q positions (as in :func:`attnlib.causal_mask`).
"""

from __future__ import annotations

import math

import torch

from ._validate import (
    boundary,
    require_batch,
    require_fits,
    require_flags,
    require_positive,
    require_row_stats,
    require_same,
    require_shape,
)
from .attention import scale, scores

__all__ = ["SKIPPED", "FULL", "DIAGONAL", "online_softmax_step", "online_softmax", "tile_plan",
           "tiled_attention", "tiled_attention_backward", "TiledAttention", "recomputing_tiled_attention"]

SKIPPED, FULL, DIAGONAL = 0, 1, 2   # the three kinds of tile in a plan (see tile_plan)


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _online_softmax_step_args(m, ell, Z_blk):
    require_shape(Z_blk, "Z_blk", "... n")
    require_row_stats(m, "m", Z_blk, "Z_blk")
    require_row_stats(ell, "ell", Z_blk, "Z_blk")


def _online_softmax_args(Z, block):
    require_shape(Z, "Z", "... n")
    block, = require_positive(block=block)
    return {"block": block}


def _tile_plan_args(T_q, T_k, block_q, block_k, causal):
    T_q, T_k, block_q, block_k = require_positive(T_q=T_q, T_k=T_k, block_q=block_q, block_k=block_k)
    causal, = require_flags(causal=causal)
    if causal and T_k < T_q:
        raise ValueError(f"T_k={T_k} must be at least T_q={T_q}: every query needs its own key")
    n_q, n_k = -(-T_q // block_q), -(-T_k // block_k)
    require_fits("this tile plan", {f"T_q={T_q} / block_q={block_q} × T_k={T_k} / block_k={block_k}": 2 * n_q * n_k},
                 what="numbers")
    return {"T_q": T_q, "T_k": T_k, "block_q": block_q, "block_k": block_k, "causal": causal}


def _tiled_attention_args(Q, K, V, causal, block_q, block_k, return_stats=False):
    d = require_shape(Q, "Q", "... T_q d_k")
    d |= require_shape(K, "K", "... T_k d_k", d_k=d["d_k"])
    require_shape(V, "V", "... T_k d_v", T_k=d["T_k"])
    for X, name in ((K, "K"), (V, "V")):
        require_same(Q, X, "Q", name)
        require_batch(Q, X, "Q", name)
    block_q, block_k = require_positive(block_q=block_q, block_k=block_k)
    return_stats, = require_flags(return_stats=return_stats)
    plan = _tile_plan_args(d["T_q"], d["T_k"], block_q, block_k, causal)
    return {"causal": plan["causal"],
            "block_q": block_q, "block_k": block_k, "return_stats": return_stats}


def _recomputing_args(Q, K, V, causal, block_q, block_k):
    out = _tiled_attention_args(Q, K, V, causal, block_q, block_k)
    del out["return_stats"]
    return out


def _tiled_attention_backward_args(Q, K, V, O, m, ell, dO, causal, block_q, block_k):
    out = _recomputing_args(Q, K, V, causal, block_q, block_k)
    d_v = V.shape[-1]
    require_shape(O, "O", "... T_q d_v", T_q=Q.shape[-2], d_v=d_v)
    require_shape(dO, "dO", "... T_q d_v", T_q=Q.shape[-2], d_v=d_v)
    for X, name in ((O, "O"), (dO, "dO")):
        require_same(Q, X, "Q", name)
        require_batch(Q, X, "Q", name)
    require_row_stats(m, "m", O, "O")
    require_row_stats(ell, "ell", O, "O")
    return out


@boundary(_online_softmax_step_args)
def online_softmax_step(m: torch.Tensor, ell: torch.Tensor, Z_blk: torch.Tensor):
    """Take one more block of scores into the running max m and the running sum ℓ.

    m (...,): the largest score so far (−inf before the first block); ell (...,): Σ exp(z − m) over the scores
    so far; Z_blk (..., n): the next n scores of each row (scaled scores, what softmax receives).
    Returns m_new (...,), ell_new (...,), rescale = exp(m − m_new) (...,), the factor that brings anything
    summed against the old max to the new one, and P_blk = exp(Z_blk − m_new) (..., n), the block's
    unnormalised weights. A row whose scores so far are all −inf (padding, a window) keeps m = −inf, ℓ = 0
    and weights 0 until its first finite score, as softmax gives those keys weight 0.
    """
    m_new = torch.maximum(m, Z_blk.amax(dim=-1))        # (...,)
    shift = torch.where(m_new == float("-inf"), 0.0, m_new)   # (...,) no finite score yet: exp(−inf − 0) = 0, not NaN
    rescale = torch.exp(m - shift)                      # 0 on the first block (m = −inf), 1 if the max stays
    P_blk = torch.exp(Z_blk - shift[..., None])         # (..., n), every entry ≤ 1
    ell_new = rescale * ell + P_blk.sum(dim=-1)         # (...,)
    return m_new, ell_new, rescale, P_blk


@boundary(_online_softmax_args)
def online_softmax(Z: torch.Tensor, block: int) -> torch.Tensor:
    """softmax over the last axis of Z (..., n), reading the scores ``block`` at a time: Z → P (..., n).

    One pass over the blocks finds m and ℓ with :func:`online_softmax_step`; then P = exp(Z − m) / ℓ.
    Cost: a Python loop of n / block steps, so a small block is slow by design (block=1 over 10⁶ numbers takes
    minutes: a million steps of a few tensor calls each); the answer is the same for every block.
    """
    m = Z.new_full(Z.shape[:-1], float("-inf"))         # (...,) running max
    ell = Z.new_zeros(Z.shape[:-1])                     # (...,) running sum of exp(z − m)
    for k0 in range(0, Z.shape[-1], block):
        m, ell, _, _ = online_softmax_step(m, ell, Z[..., k0:k0 + block])
    return torch.exp(Z - m[..., None]) / ell[..., None]


@boundary(_tile_plan_args)
def tile_plan(T_q: int, T_k: int, block_q: int, block_k: int, causal: bool = True) -> torch.Tensor:
    """Which tiles of the (T_q, T_k) score table causal attention computes: (n_q, n_k) of SKIPPED/FULL/DIAGONAL.

    Query block qb holds rows qb·block_q … (last one shorter when block_q does not divide T_q), key block kb
    columns kb·block_k …; n_q = ⌈T_q / block_q⌉, n_k = ⌈T_k / block_k⌉. A tile is SKIPPED when every key in it
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


@boundary(_tiled_attention_args)
def tiled_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, causal: bool = True,
                    block_q: int = 64, block_k: int = 64, return_stats: bool = False):
    """softmax(Q Kᵀ / √d_k + M) V, one (block_q, block_k) tile at a time: → (..., T_q, d_v).

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v), with the same batch axes. Beyond its output, the
    memory it needs depends on the block sizes only, not on T_q · T_k: the full score table is never built.
    With ``return_stats`` it also returns m and ℓ of every query row, (..., T_q) each: (out, m, ell).
    Cost: a Python loop over (T_q / block_q) · (T_k / block_k) tiles, so tiny blocks are slow by design
    (1 × 1 blocks over T = 1024 run half a million tiles: minutes); the answer is the same for every block size.
    """
    T_q, d_k, T_k = Q.shape[-2], Q.shape[-1], K.shape[-2]
    plan = tile_plan(T_q, T_k, block_q, block_k, causal).tolist()   # n_q lists of n_k kinds
    out = Q.new_empty(*Q.shape[:-1], V.shape[-1])                # (..., T_q, d_v)
    stats = Q.new_empty(2, *Q.shape[:-1]) if return_stats else None   # m and ℓ of every query row
    for qb, kinds in enumerate(plan):                            # outer loop: query block qb
        q0, q1 = qb * block_q, min((qb + 1) * block_q, T_q)
        rows = Q.shape[:-2] + (q1 - q0,)
        m = Q.new_full(rows, float("-inf"))                     # running max, (..., block_q)
        ell = Q.new_zeros(rows)                                 # running sum of exp(z − m)
        acc = Q.new_zeros(rows + (V.shape[-1],))                # Õ: running Σ exp(z − m) v, (..., block_q, d_v)
        for kb, kind in enumerate(kinds):                        # inner loop: key block kb
            if kind == SKIPPED:
                continue
            k0, k1 = kb * block_k, min((kb + 1) * block_k, T_k)
            Z = scale(scores(Q[..., q0:q1, :], K[..., k0:k1, :]), d_k)   # (..., block_q, block_k)
            if kind == DIAGONAL:
                pos_q = torch.arange(q0, q1, device=Q.device) + (T_k - T_q)
                future = torch.arange(k0, k1, device=Q.device)[None, :] > pos_q[:, None]
                Z = Z.masked_fill(future, float("-inf"))
            m, ell, rescale, P_blk = online_softmax_step(m, ell, Z)
            acc = rescale[..., None] * acc + P_blk @ V[..., k0:k1, :]
        out[..., q0:q1, :] = acc / ell[..., None]
        if return_stats:
            stats[0, ..., q0:q1], stats[1, ..., q0:q1] = m, ell
    return (out, stats[0], stats[1]) if return_stats else out


@boundary(_tiled_attention_backward_args)
def tiled_attention_backward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, O: torch.Tensor,
                             m: torch.Tensor, ell: torch.Tensor, dO: torch.Tensor, *, causal: bool = True,
                             block_q: int = 64, block_k: int = 64):
    """The gradients (dQ, dK, dV) of O = tiled_attention(Q, K, V), given dO = ∂loss/∂O, one tile at a time.

    O (..., T_q, d_v), m and ell (..., T_q) come from the forward pass (``return_stats=True``). No (T_q, T_k)
    table is kept: each tile's weights are recomputed from its scores, P = exp(Z − m) / ℓ. With D = rowsum(dO ∘ O)
    (one number per query row), a tile's gradients are dV += Pᵀ dO, dP = dO Vᵀ, dZ = P ∘ (dP − D), the
    softmax's backward, and dQ += dZ K / √d_k, dK += dZᵀ Q / √d_k. The key blocks are the outer loop, as in
    FlashAttention-2's backward: a key block's dK and dV are complete when its column of tiles is done.
    """
    T_q, d_k, T_k = Q.shape[-2], Q.shape[-1], K.shape[-2]
    plan = tile_plan(T_q, T_k, block_q, block_k, causal)        # (n_q, n_k)
    D = (dO * O).sum(-1)                                         # (..., T_q): Σ_j P_ij dP_ij of every row
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    for kb, kinds in enumerate(plan.T.tolist()):                 # outer loop: key block kb
        k0, k1 = kb * block_k, min((kb + 1) * block_k, T_k)
        for qb, kind in enumerate(kinds):                        # inner loop: query block qb
            if kind == SKIPPED:
                continue
            q0, q1 = qb * block_q, min((qb + 1) * block_q, T_q)
            Z = scale(scores(Q[..., q0:q1, :], K[..., k0:k1, :]), d_k)   # the tile's scores, again
            if kind == DIAGONAL:
                pos_q = torch.arange(q0, q1, device=Q.device) + (T_k - T_q)
                future = torch.arange(k0, k1, device=Q.device)[None, :] > pos_q[:, None]
                Z = Z.masked_fill(future, float("-inf"))
            P = torch.exp(Z - m[..., q0:q1, None]) / ell[..., q0:q1, None]  # the forward's weights
            dO_blk = dO[..., q0:q1, :]
            dV[..., k0:k1, :] += P.mT @ dO_blk
            dZ = P * (dO_blk @ V[..., k0:k1, :].mT - D[..., q0:q1, None])   # softmax backward
            dQ[..., q0:q1, :] += dZ @ K[..., k0:k1, :] / math.sqrt(d_k)
            dK[..., k0:k1, :] += dZ.mT @ Q[..., q0:q1, :] / math.sqrt(d_k)
    return dQ, dK, dV


class TiledAttention(torch.autograd.Function):
    """Tiled attention for autograd: the forward keeps Q, K, V, O, m and ℓ, the backward recomputes P per tile.

    ``TiledAttention.apply(Q, K, V, causal, block_q, block_k)``; :func:`recomputing_tiled_attention` is the same
    with its arguments checked. Autograd through :func:`tiled_attention` itself keeps every tile's weights
    instead, T_q · T_k / 2 numbers or more.
    """

    @staticmethod
    def forward(ctx, Q, K, V, causal, block_q, block_k):
        O, m, ell = tiled_attention(Q, K, V, causal=causal, block_q=block_q, block_k=block_k, return_stats=True)
        ctx.save_for_backward(Q, K, V, O, m, ell)                # two numbers per query row beyond Q, K, V, O
        ctx.tiles = dict(causal=causal, block_q=block_q, block_k=block_k)
        return O

    @staticmethod
    def backward(ctx, dO):
        dQ, dK, dV = tiled_attention_backward(*ctx.saved_tensors, dO, **ctx.tiles)
        return dQ, dK, dV, None, None, None


@boundary(_recomputing_args)
def recomputing_tiled_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, causal: bool = True,
                                block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """:func:`tiled_attention` whose backward pass is tiled too (:class:`TiledAttention`): → (..., T_q, d_v)."""
    return TiledAttention.apply(Q, K, V, causal, block_q, block_k)
