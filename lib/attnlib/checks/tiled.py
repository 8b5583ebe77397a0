"""Exercise checkers for chapter 9 (attention in tiles, the online softmax).

``check_online_step(fn)``: one block of the online softmax, fn(m, l, S_blk) → (m_new, l_new).
``check_tile_count(n)``: a predicted number of tiles that causal tiled attention computes.
``check_fixed_tiled_attention(fn)``: :func:`buggy_tiled_attention` with its planted bug fixed.

The function checkers test blocks in which the running maximum grows for some rows and stays for others, a first
block (m = −inf), and sequence lengths that are not a multiple of the block size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..tiled import SKIPPED, online_softmax_step, tile_plan
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_online_step", "check_tile_count", "buggy_tiled_attention", "check_fixed_tiled_attention"]


# ------------------------------------------------------------------------------------------- build: one step
def _step_cases():
    """Fresh inputs on every call (float64): the max grows in rows 0 and 2 and stays in row 1; a first block
    (m = −inf, l = 0); large scores, where exp without subtracting the max overflows."""
    f64 = dict(dtype=torch.float64)
    S = torch.tensor([[2.5, 0.1, -1.0], [1.0, 2.0, 0.0], [4.0, 3.5, 0.2]], **f64)
    first = torch.randn(2, 4, generator=_gen(91), dtype=torch.float64)
    big = 750.0 + torch.randn(2, 3, 5, generator=_gen(92), dtype=torch.float64)
    return [
        (torch.tensor([1.0, 3.0, 0.5], **f64), torch.tensor([1.7, 2.2, 1.0], **f64), S),
        (torch.full((2,), -math.inf, **f64), torch.zeros(2, **f64), first),
        (torch.full((2, 3), 750.5, **f64), torch.full((2, 3), 1.3, **f64), big),
    ]


def _step_reference(m, l, S_blk):
    m_new, l_new, _, _ = online_softmax_step(m, l, S_blk)
    return m_new, l_new


def _step(m, l, S_blk, *, rescale: str = "exp(m - m_new)", shift: str = "m_new", running_max: bool = True):
    """One online-softmax step with the planted mistakes' switches; the defaults are the correct step."""
    m_new = torch.maximum(m, S_blk.amax(-1)) if running_max else S_blk.amax(-1)
    r = {"exp(m - m_new)": torch.exp(m - m_new), "exp(m_new - m)": torch.exp(m_new - m), "none": 1.0}[rescale]
    block = {"m_new": S_blk - m_new[..., None], "m": S_blk - m[..., None], "none": S_blk}[shift]
    return m_new, r * l + torch.exp(block).sum(-1)


_STEP_MISTAKES = variants(_step, [
    ("no-rescale", dict(rescale="none"),
     "when the maximum grows, the old sum ℓ was measured against the old max: multiply it by "
     "exp(m − m_new) before adding the new block's exp(s − m_new)."),
    ("wrong-sign", dict(rescale="exp(m_new - m)"),
     "the rescale factor has the wrong sign: use exp(m − m_new), which is at most 1 (the new max is "
     "the larger one), not exp(m_new − m)."),
    ("no-max", dict(shift="none"),
     "the new block's terms must be exp(s − m_new), not exp(s): ℓ holds sums relative to the running "
     "max, and without the shift large scores overflow to inf."),
    ("old-max", dict(shift="m"),
     "the new block's terms use the old max m; shift them by the new max: exp(s − m_new)."),
    ("block-max-only", dict(running_max=False),
     "m_new must be the largest score so far, max(m, max of the block), not the block's own max: a "
     "block whose scores are all smaller than m leaves the max where it was."),
])


@checker
def check_online_step(fn) -> Verdict:
    """Check ``fn(m, l, S_blk)`` → (m_new, l_new): m, l (...,) and S_blk (..., n), as online_softmax_step."""
    return judge(fn, _step_cases(), _step_reference, _STEP_MISTAKES,
                 success="the running max and the rescaled running sum are right, on a first block, when the "
                         "max grows and when it stays, and for scores near 750.")


# ------------------------------------------------------------------------------------ predict: tile count
QUESTION = dict(T=550, block_q=128, block_k=64)   # causal self-attention, T_q = T_k = T


@checker(kind="predict")
def check_tile_count(n) -> Verdict:
    """Check a predicted number of tiles that causal ``tiled_attention`` computes for QUESTION's sizes."""
    T, b_q, b_k = QUESTION["T"], QUESTION["block_q"], QUESTION["block_k"]
    plan = tile_plan(T, T, b_q, b_k, causal=True)                  # the library's own plan, counted
    n_q, n_k = plan.shape
    want = int((plan != SKIPPED).sum())
    T_floor = T // b_q * b_q
    guesses = [
        Guess("no-skip", f"that is every tile of the grid, ⌈T/block_q⌉ · ⌈T/block_k⌉ = {n_q} · {n_k}. Tiles "
                         "whose keys all lie in the future of all their queries are skipped.", n_q * n_k),
        Guess("skipped", "that is the number of tiles skipped; the question asks for the tiles computed.",
              n_q * n_k - want),
        Guess("half", "exactly half the grid is only the limit for many small blocks. Count the tiles on the "
                      "diagonal too: each of them is computed, with the mask.", n_q * n_k / 2),
        Guess("diagonal-only", "that counts only the tiles that straddle the diagonal (computed with the "
                               "mask). The tiles wholly below it are computed too, without a mask.",
              int((plan == 2).sum())),
        Guess("floor", f"T = {T} is not a multiple of the block sizes: the last query block holds "
                       f"{T - T_floor} rows and the last key block {T - T // b_k * b_k} keys. Round the "
                       "number of blocks up, ⌈T / block⌉.",
              int((tile_plan(T_floor, T_floor, b_q, b_k) != SKIPPED).sum())),
        Guess("square", "that is n(n + 1)/2 for n query blocks, as if the blocks were square. Here a query "
                        "block spans two key blocks: count key blocks per query block.", n_q * (n_q + 1) // 2),
    ]
    return judge_number(n, want, guesses, rtol=1e-9,
                        success="query block i reads the key blocks up to its last query.",
                        again="count, for each query block, the key blocks from 0 up to the one that holds "
                              "its last query, and add them up.")


# ------------------------------------------------------------------------------------ find the bug
def buggy_tiled_attention(Q, K, V, block):
    """Causal attention in square tiles, with one planted bug: Q, K (B, T, d_k), V (B, T, d_v) → (B, T, d_v)."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    out = torch.empty(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    for q0 in range(0, T, block):
        q1 = min(q0 + block, T)
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -math.inf, dtype=Q.dtype)   # running max
        l = torch.zeros_like(m)                                                # running sum
        O = torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)                 # running output
        for k0 in range(0, q1, block):              # key blocks up to the last query; the rest is future
            k1 = min(k0 + block, T)
            S = Q[..., q0:q1, :] @ K[..., k0:k1, :].transpose(-2, -1) / math.sqrt(d_k)
            future = torch.arange(k0, k1)[None, :] > torch.arange(q0, q1)[:, None]
            S = S.masked_fill(future, -math.inf)
            m_new = torch.maximum(m, S.amax(-1))
            P = torch.exp(S - m_new[..., None])
            l = torch.exp(m - m_new) * l + P.sum(-1)
            O = O + P @ V[..., k0:k1, :]
            m = m_new
        out[..., q0:q1, :] = O / l[..., None]
    return out


def _tiled_variant(Q, K, V, block, *, O_update: str = "right", l_rescaled: bool = True):
    """Square-tiled causal attention, the accumulator updated as ``O_update`` says (for the planted mistakes)."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    out = torch.empty(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    for q0 in range(0, T, block):
        q1 = min(q0 + block, T)
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -math.inf, dtype=Q.dtype)
        l = torch.zeros_like(m)
        O = torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)
        for k0 in range(0, q1, block):
            k1 = min(k0 + block, T)
            S = Q[..., q0:q1, :] @ K[..., k0:k1, :].transpose(-2, -1) / math.sqrt(d_k)
            S = S.masked_fill(torch.arange(k0, k1)[None, :] > torch.arange(q0, q1)[:, None], -math.inf)
            m_new = torch.maximum(m, S.amax(-1))
            P = torch.exp(S - m_new[..., None])
            r = torch.exp(m - m_new)[..., None]
            l = (r[..., 0] if l_rescaled else 1.0) * l + P.sum(-1)
            PV = P @ V[..., k0:k1, :]
            O = {"right": r * O + PV, "none": O + PV, "wrong-sign": O / r + PV, "after": r * (O + PV)}[O_update]
            m = m_new
        out[..., q0:q1, :] = O / l[..., None]
    return out


def _fixed_reference(Q, K, V, block):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


def _fix_cases():
    """Fresh float64 inputs: T = 10 with block 4 (T not a multiple of the block, d_v ≠ d_k), T = 7 with
    block 3 and a batch of 2, and T = 5 with one block larger than T."""
    g = _gen(93)
    cases = []
    for B, T, d_k, d_v, block in ((1, 10, 4, 3, 4), (2, 7, 3, 3, 3), (1, 5, 4, 2, 8)):
        Q, K = (2.0 * torch.randn(B, T, d_k, generator=g, dtype=torch.float64) for _ in range(2))
        V = torch.randn(B, T, d_v, generator=g, dtype=torch.float64)
        cases.append((Q, K, V, block))
    return cases


_FIX_MISTAKES = [
    Mistake("unchanged",
            "this is still the function as given. Follow one query row through two key blocks: when the "
            "second block raises the running max, ℓ is rescaled by exp(m − m_new). Is everything else that "
            "was summed against the old max rescaled too?",
            buggy_tiled_attention),
    *variants(_tiled_variant, [
        ("wrong-sign", dict(O_update="wrong-sign"),
         "the running output must be multiplied by exp(m − m_new), the same factor as ℓ (at most 1), not "
         "divided by it."),
        ("rescale-after-add", dict(O_update="after"),
         "you rescale O after adding the new block's P @ V, so the new block is scaled down too. Rescale "
         "the old O first, then add: O = exp(m − m_new) · O + P @ V."),
        ("moved-rescale", dict(l_rescaled=False),
         "the output is rescaled now, but ℓ no longer is. Both were summed against the old max, so both "
         "need the factor exp(m − m_new)."),
    ]),
]


@checker
def check_fixed_tiled_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V, block)`` is :func:`buggy_tiled_attention` with its bug fixed: equal to SDPA."""
    return judge(fn, _fix_cases(), _fixed_reference, _FIX_MISTAKES,
                 success="equal to F.scaled_dot_product_attention(is_causal=True) for T = 10, 7 and 5 and "
                         "blocks of 4, 3 and 8.")
