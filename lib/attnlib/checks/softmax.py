"""Exercise checkers for the softmax chapter.

``check_stable_softmax(fn)``: ``fn(z)`` must return the softmax of z (..., n) along the last axis, without
overflow on large inputs.
``check_attention_output(fn)``: ``fn(Q, K, V)`` must return softmax(Q Kᵀ / √d_k + M) V, with Q, K (..., T, d_k)
and V (..., T, d_v) → (..., T, d_v).
``check_softmax_jacobian(fn)``: ``fn(z)`` must return the Jacobian ∂p/∂z = diag(p) − p pᵀ of p = softmax(z),
z (..., n) → (..., n, n), as autograd computes it.
``check_fixed_head(fn)``: ``fn(Q, K, V)`` is the einsum head of the "find the bug" exercise, repaired: it must
return softmax(Q Kᵀ / √d_k + M) V for Q, K (B, T, d_k) and V (B, T, d_v).
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask, softmax
from ._core import Mistake, Verdict, checker, judge, variants

__all__ = ["check_stable_softmax", "check_attention_output", "check_softmax_jacobian", "check_fixed_head"]


def _softmax_cases() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(505)
    return [
        (torch.randn(3, 5, generator=g) * 3,),
        # Row 0 overflows exp() unless the maximum is subtracted; row 1 overflows if the minimum is.
        (torch.tensor([[1000.0, 999.0, 998.0, 997.0], [50.0, -100.0, 0.0, 10.0]]),),
        (torch.randn(2, 3, 4, generator=g) * 3,),
    ]


def _planted_softmax(z: torch.Tensor, *, shift: str = "row max", dim: int = -1,
                      normalise: bool = True) -> torch.Tensor:
    """softmax(z) with a planted slip; the defaults compute it. ``shift`` is what is subtracted before exp():
    "row max", "row min", "global max" or "nothing"."""
    if shift == "row max":
        z = z - z.amax(dim=dim, keepdim=True)
    elif shift == "row min":
        z = z - z.amin(dim=dim, keepdim=True)
    elif shift == "global max":
        z = z - z.max()
    e = z.exp()
    return e / e.sum(dim=dim, keepdim=True) if normalise else e


_SOFTMAX_MISTAKES = variants(_planted_softmax, [
    ("naive", {"shift": "nothing"},
     "exp() overflowed: exp(1000) is inf in float32 and inf / inf is NaN. Subtract each row's maximum "
     "first (z - z.amax(dim=-1, keepdim=True)); softmax does not change when a constant is subtracted."),
    ("subtract-min", {"shift": "row min"},
     "you subtracted the row minimum. That makes every exponent ≥ 0, so a large spread still overflows "
     "(exp(150) is inf in float32). Subtract the row maximum: every exponent is then ≤ 0."),
    ("global-max", {"shift": "global max"},
     "you subtracted the maximum of the whole tensor, not of each row: a row far below that maximum "
     "underflows to all zeros and 0 / 0 gives NaN. Use z.amax(dim=-1, keepdim=True)."),
    ("wrong-axis", {"dim": -2},
     "you normalised along the wrong axis (columns sum to 1). Take max and sum over the last axis: "
     "dim=-1 with keepdim=True."),
    ("not-normalised", {"normalise": False},
     "you returned exp(z - max) without dividing by the row sum, so rows do not sum to 1."),
])


@checker
def check_stable_softmax(fn) -> Verdict:
    """Check ``fn(z)``: softmax along the last axis of z (..., n), finite even for scores like 1000."""
    return judge(fn, _softmax_cases(), lambda z: softmax(z), _SOFTMAX_MISTAKES,
                 success="matches the library on small scores, on [1000, 999, 998, 997] and on a batch.")


def _attention_cases() -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(5)

    def qkv(B: int, T: int, d_k: int, d_v: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(B, T, d_k, generator=g), torch.randn(B, T, d_k, generator=g),
                torch.randn(B, T, d_v, generator=g))

    # First T = d_k = d_v, where weights · K, Qᵀ K and a scale by √T all run silently with the right shape;
    # then an odd T with T ≠ d_k ≠ d_v, and a batch, where they give other numbers or other shapes.
    return [qkv(2, 6, 6, 6), qkv(1, 5, 4, 3), qkv(2, 7, 8, 2)]


def _planted_attention(Q, K, V, *, scores: str = "Q Kᵀ", divisor: str = "√d_k", mask: str = "add", dim: int = -1,
                       mixed: str = "V") -> torch.Tensor:
    """softmax(Q Kᵀ / √d_k + M) V with a planted slip; the defaults compute it. ``scores`` is "Q Kᵀ" or
    "Qᵀ K"; ``divisor`` is "√d_k", "√T", "d_k" or "1"; ``mask`` is "add" (before softmax), "after" (future
    weights zeroed after softmax) or "none"; ``mixed`` is the tensor the weights multiply, "V" or "K"."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    S = Q.transpose(-2, -1) @ K if scores == "Qᵀ K" else Q @ K.transpose(-2, -1)
    S = S / {"√d_k": math.sqrt(d_k), "√T": math.sqrt(T), "d_k": d_k, "1": 1}[divisor]
    if mask == "add":
        P = softmax(S + causal_mask(T), dim=dim)
    elif mask == "after":
        P = softmax(S, dim=dim) * torch.ones(T, T, dtype=torch.bool).tril()
    else:
        P = softmax(S, dim=dim)
    return P @ (K if mixed == "K" else V)


_ATTENTION_MISTAKES = variants(_planted_attention, [
    ("times-K", {"mixed": "K"},
     "you multiplied the weights by K. K is only used to compute the match (the scores); the information "
     "that is mixed is V: return P @ V. When d_k = d_v nothing fails, the numbers are simply wrong."),
    ("no-scale", {"divisor": "1"},
     "you forgot to divide the scores by √d_k before softmax: P = softmax(Q Kᵀ / √d_k + M)."),
    ("scale-by-T", {"divisor": "√T"},
     "you divided the scores by √T (Q.shape[-2], the number of positions); the scale is √d_k, the width "
     "of a query: Q.shape[-1]. The two agree only when T = d_k."),
    ("Qt-K", {"scores": "Qᵀ K"},
     "your score table is Qᵀ K (d_k × d_k), not Q Kᵀ (T × T): it only has the right shape when T = d_k. "
     "Each score is q_i · k_j: Q @ K.transpose(-2, -1)."),
    ("scale-by-dk", {"divisor": "d_k"},
     "you divided the scores by d_k; the scale is √d_k (math.sqrt(d_k)), with d_k = Q.shape[-1]."),
    ("no-mask", {"mask": "none"},
     "you forgot the causal mask: every position reads its future. Add M (causal_mask(T)) to the scaled "
     "scores before softmax."),
    ("after-softmax", {"mask": "after"},
     "you zeroed the future weights after softmax, so rows no longer sum to 1. Add M to the scores "
     "before softmax."),
    ("wrong-axis", {"dim": -2},
     "your softmax ran over the query axis (dim=-2). Each query's row of weights must sum to 1: dim=-1."),
])


@checker
def check_attention_output(fn) -> Verdict:
    """Check ``fn(Q, K, V)``: Q, K (..., T, d_k), V (..., T, d_v) → softmax(Q Kᵀ/√d_k + M) V (..., T, d_v)."""
    return judge(fn, _attention_cases(), lambda Q, K, V: attention(Q, K, V), _ATTENTION_MISTAKES,
                 success="softmax(Q Kᵀ/√d_k + M) V, for T = d_k = d_v = 6, for T = 5 (d_k = 4, d_v = 3) "
                         "and for T = 7 (d_k = 8, d_v = 2).")


# ------------------------------------------------------------------------------------------------
# Extend: the Jacobian of softmax, ∂p_i/∂z_j = p_i (δ_ij − p_j), checked against autograd.

def _jacobian_cases() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(506)
    return [
        (torch.randn(5, generator=g) * 2,),                             # one row, odd n
        # a batch: an ordinary row, a saturated one (one score far above the rest: J ≈ 0) and one whose
        # exp() overflows unless the maximum is subtracted
        (torch.stack([torch.randn(4, generator=g), torch.tensor([12.0, 0.0, -1.0, 1.0]),
                      torch.tensor([1000.0, 999.0, 998.0, 997.0])]),),
    ]


def _jacobian_reference(z: torch.Tensor) -> torch.Tensor:
    """Autograd, one row at a time, in float64: (..., n) → (..., n, n)."""
    rows = z.detach().double().reshape(-1, z.shape[-1])
    J = [torch.autograd.functional.jacobian(lambda r: torch.softmax(r, dim=-1), r) for r in rows]
    return torch.stack(J).reshape(*z.shape, z.shape[-1])


def _outer(p: torch.Tensor) -> torch.Tensor:
    return p[..., :, None] * p[..., None, :]


def _naive(z: torch.Tensor) -> torch.Tensor:
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def _unbatched(z: torch.Tensor) -> torch.Tensor:
    p = softmax(z)
    return torch.diag(p) - torch.outer(p, p)       # fails for a batch (z of 2 axes)


def _unbatched_broadcast(z: torch.Tensor) -> torch.Tensor:
    p = softmax(z)
    return torch.diag(p) - p[:, None] * p[None, :]  # fails for a batch too, with another message


def _planted_jacobian(z: torch.Tensor, *, stable: bool = True, diag: bool = True, outer: bool = True,
                      sign: int = 1) -> torch.Tensor:
    """J = diag(p) − p pᵀ with a planted slip; the defaults compute it. ``diag`` and ``outer`` keep its two
    terms, ``sign`` = -1 flips it, and ``stable`` = False computes p without subtracting the row maximum."""
    p = softmax(z) if stable else _naive(z)
    return sign * ((torch.diag_embed(p) if diag else 0) - (_outer(p) if outer else 0))


_JACOBIAN_MISTAKES = variants(_planted_jacobian, [
    ("missing-outer", {"outer": False},
     "you returned diag(p) only. Every p_i depends on every z_j through the sum in the denominator, so "
     "the off-diagonal entries are not 0: subtract the outer product p pᵀ."),
    ("missing-diag", {"diag": False},
     "you returned −p pᵀ only. The diagonal also gets the direct term: ∂p_i/∂z_i = p_i − p_i², "
     "so J = diag(p) − p pᵀ."),
    ("sign", {"sign": -1},
     "your signs are flipped: J = diag(p) − p pᵀ (you wrote p pᵀ − diag(p)). Raising z_i must raise p_i, "
     "so the diagonal is positive."),
    ("naive-softmax", {"stable": False},
     "the formula is right but p overflowed: exp(1000) is inf in float32. Compute p with the stable "
     "softmax (subtract the row maximum) before building J."),
]) + [
    Mistake("diagonal-only",
            "you kept only the diagonal p_i (1 − p_i). The off-diagonal entries ∂p_i/∂z_j = −p_i p_j are not "
            "zero: raising one score lowers every other weight. J = diag(p) − p pᵀ.",
            lambda z: torch.diag_embed(softmax(z) * (1 - softmax(z)))),
    Mistake("not-batched",
            "your function works for one row but not for a batch (..., n): torch.diag and torch.outer only take "
            "one vector. Use torch.diag_embed(p) and p[..., :, None] * p[..., None, :].",
            _unbatched),
    Mistake("not-batched",
            "your function works for one row but not for a batch (..., n): torch.diag takes one vector, and "
            "p[:, None] * p[None, :] is the outer product only for a single row. Use torch.diag_embed(p) and "
            "p[..., :, None] * p[..., None, :].",
            _unbatched_broadcast),
]


@checker
def check_softmax_jacobian(fn) -> Verdict:
    """Check ``fn(z)``: z (..., n) → J (..., n, n) with J[..., i, j] = ∂p_i/∂z_j for p = softmax(z)."""
    return judge(fn, _jacobian_cases(), _jacobian_reference, _JACOBIAN_MISTAKES,
                 success="diag(p) − p pᵀ matches autograd on one row of 5 scores and on a batch with a "
                         "saturated row and a row of scores near 1000.")


# ------------------------------------------------------------------------------------------------
# Find the bug: an einsum head whose last line sums over the query index (out = Pᵀ V).

_GIVEN = "bij,bid->bjd"   # the last line of the head as given: it sums P over the query index i


def _einsum_head(Q, K, V, *, scores: str = "bid,bjd->bij", dim: int = -1, mask: bool = True,
                 mix: str = "bij,bjd->bid", mixed: str = "V") -> torch.Tensor:
    """The einsum head with a planted slip; the defaults compute it. ``scores`` and ``mix`` are its two einsum
    specs, ``dim`` the axis of softmax, ``mask`` whether M is added, ``mixed`` the tensor mixed ("V" or "K")."""
    S = torch.einsum(scores, Q, K) / math.sqrt(Q.shape[-1])
    P = softmax(S + causal_mask(Q.shape[-2]) if mask else S, dim=dim)
    return torch.einsum(mix, P, K if mixed == "K" else V)


_FIXED_HEAD_MISTAKES = variants(_einsum_head, [
    ("unchanged", {"mix": _GIVEN},
     "this is still the function as given: it runs and has the right shape, yet output 0 changes when the "
     "value of the last position changes. Find the line that lets an early output read a late value."),
    ("transposed-scores", {"scores": "bid,bjd->bji", "mix": _GIVEN},
     "you transposed the score table instead of fixing the last line: now the mask and softmax act on "
     "the wrong axes. Keep S[b, i, j] = q_i · k_j ('bid,bjd->bij'); the bug is in the sum over V."),
    ("softmax-over-queries", {"dim": -2, "mix": _GIVEN},
     "you moved softmax to the query axis (dim=-2) instead of fixing the last line. Each query's row of "
     "weights must sum to 1 (dim=-1); then output i is Σ_j P[i, j] v_j."),
    ("column-sum", {"mix": "bij,bjd->bjd"},
     "your last line sums P over i and keeps j on both sides ('bij,bjd->bjd'): each value is scaled by "
     "its column sum, not mixed. Output i must be Σ_j P[i, j] v_j: 'bij,bjd->bid'."),
    ("times-K", {"mixed": "K"},
     "you now mix K instead of V. K only computes the match; the information mixed is V."),
    ("no-mask", {"mask": False},
     "you removed the causal mask: the mask was right. Keep M and look at which index the last line "
     "sums over."),
])


@checker
def check_fixed_head(fn) -> Verdict:
    """Check the repaired head ``fn(Q, K, V)``: Q, K (B, T, d_k), V (B, T, d_v) → (B, T, d_v)."""
    return judge(fn, _attention_cases(), lambda Q, K, V: attention(Q, K, V), _FIXED_HEAD_MISTAKES,
                 success="output i now mixes the values of positions 0…i with row i of P, "
                         "for T = d_k = d_v = 6, T = 5 and T = 7.")
