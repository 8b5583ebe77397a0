"""Exercise checkers for the softmax chapter.

``check_stable_softmax(fn)``: ``fn(z)`` must return the softmax of z (..., n) along the last axis, without
overflow on large inputs.
``check_attention_output(fn)``: ``fn(Q, K, V)`` must return softmax(Q Kᵀ / √d_k + M) V, with Q, K (..., T, d_k)
and V (..., T, d_v) → (..., T, d_v).
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask, softmax
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_stable_softmax", "check_attention_output"]


def _softmax_cases() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(505)
    return [
        (torch.randn(3, 5, generator=g) * 3,),
        # Row 0 overflows exp() unless the maximum is subtracted; row 1 overflows if the minimum is.
        (torch.tensor([[1000.0, 999.0, 998.0, 997.0], [50.0, -100.0, 0.0, 10.0]]),),
        (torch.randn(2, 3, 4, generator=g) * 3,),
    ]


def _normalise(e: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return e / e.sum(dim=dim, keepdim=True)


_SOFTMAX_MISTAKES = [
    Mistake("naive",
            "exp() overflowed: exp(1000) is inf in float32 and inf / inf is NaN. Subtract each row's maximum "
            "first (z - z.amax(dim=-1, keepdim=True)); softmax does not change when a constant is subtracted.",
            lambda z: _normalise(z.exp())),
    Mistake("subtract-min",
            "you subtracted the row minimum. That makes every exponent ≥ 0, so a large spread still overflows "
            "(exp(150) is inf in float32). Subtract the row maximum: every exponent is then ≤ 0.",
            lambda z: _normalise((z - z.amin(dim=-1, keepdim=True)).exp())),
    Mistake("global-max",
            "you subtracted the maximum of the whole tensor, not of each row: a row far below that maximum "
            "underflows to all zeros and 0 / 0 gives NaN. Use z.amax(dim=-1, keepdim=True).",
            lambda z: _normalise((z - z.max()).exp())),
    Mistake("wrong-axis",
            "you normalised along the wrong axis (columns sum to 1). Take max and sum over the last axis: "
            "dim=-1 with keepdim=True.",
            lambda z: softmax(z, dim=-2)),
    Mistake("not-normalised",
            "you returned exp(z - max) without dividing by the row sum, so rows do not sum to 1.",
            lambda z: (z - z.amax(dim=-1, keepdim=True)).exp()),
]


@checker
def check_stable_softmax(fn) -> Verdict:
    """Check ``fn(z)``: softmax along the last axis of z (..., n), finite even for scores like 1000."""
    return judge(fn, _softmax_cases(), lambda z: softmax(z), _SOFTMAX_MISTAKES,
                 success="matches the library on small scores, on [1000, 999, 998, 997] and on a batch.")


def _attention_cases() -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(5)
    # d_k ≠ d_v in both cases, so weights · K cannot pass for weights · V.
    return [
        (torch.randn(1, 5, 4, generator=g), torch.randn(1, 5, 4, generator=g), torch.randn(1, 5, 3, generator=g)),
        (torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 2, generator=g)),
    ]


def _S(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    return Q @ K.transpose(-2, -1)


def _M(Q: torch.Tensor) -> torch.Tensor:
    return causal_mask(Q.shape[-2])


def _after(Q, K, V):
    keep = torch.ones(Q.shape[-2], Q.shape[-2], dtype=torch.bool).tril()
    return (softmax(_S(Q, K) / math.sqrt(Q.shape[-1])) * keep) @ V


_ATTENTION_MISTAKES = [
    Mistake("times-K",
            "you multiplied the weights by K. K is only used to compute the match (the scores); the information "
            "that is mixed is V: return P @ V. (The output must have V's last size d_v.)",
            lambda Q, K, V: softmax(_S(Q, K) / math.sqrt(Q.shape[-1]) + _M(Q)) @ K),
    Mistake("no-scale",
            "you forgot to divide the scores by √d_k before softmax: P = softmax(Q Kᵀ / √d_k + M).",
            lambda Q, K, V: softmax(_S(Q, K) + _M(Q)) @ V),
    Mistake("scale-by-dk",
            "you divided the scores by d_k; the scale is √d_k (math.sqrt(d_k)), with d_k = Q.shape[-1].",
            lambda Q, K, V: softmax(_S(Q, K) / Q.shape[-1] + _M(Q)) @ V),
    Mistake("no-mask",
            "you forgot the causal mask: every position reads its future. Add M (causal_mask(T)) to the scaled "
            "scores before softmax.",
            lambda Q, K, V: softmax(_S(Q, K) / math.sqrt(Q.shape[-1])) @ V),
    Mistake("after-softmax",
            "you zeroed the future weights after softmax, so rows no longer sum to 1. Add M to the scores "
            "before softmax.",
            _after),
    Mistake("wrong-axis",
            "your softmax ran over the query axis (dim=-2). Each query's row of weights must sum to 1: dim=-1.",
            lambda Q, K, V: softmax(_S(Q, K) / math.sqrt(Q.shape[-1]) + _M(Q), dim=-2) @ V),
]


@checker
def check_attention_output(fn) -> Verdict:
    """Check ``fn(Q, K, V)``: Q, K (..., T, d_k), V (..., T, d_v) → softmax(Q Kᵀ/√d_k + M) V (..., T, d_v)."""
    return judge(fn, _attention_cases(), lambda Q, K, V: attention(Q, K, V), _ATTENTION_MISTAKES,
                 success="softmax(Q Kᵀ/√d_k + M) V, for T = 5 (d_k = 4, d_v = 3) and a batch "
                         "(T = 6, d_k = 8, d_v = 2).")
