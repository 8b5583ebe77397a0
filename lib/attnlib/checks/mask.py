"""Exercise checkers for the mask chapter.

``check_causal_mask(fn)``: ``fn(T)`` must return M (T, T), 0 where j ≤ i and −inf where j > i.
``check_masked_weights(fn)``: ``fn(S)`` must return P = softmax(S + M) for scores S (..., T, T).
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_causal_mask", "check_masked_weights"]

_NEG_INF = float("-inf")


def _fill(blocked: torch.Tensor, value: float = _NEG_INF) -> torch.Tensor:
    return torch.zeros(blocked.shape).masked_fill(blocked, value)


def _future(T: int, diagonal: int = 1) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).triu(diagonal)


_MASK_MISTAKES = [
    Mistake("wrong-triangle",
            "you blocked the lower triangle (the past) instead of the upper one (the future). Rows are queries i, "
            "columns keys j; key j is in query i's future when j > i, which is torch.triu(..., diagonal=1).",
            lambda T: _fill(torch.ones(T, T, dtype=torch.bool).tril(-1))),
    Mistake("wrong-triangle",
            "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
            "filling it with -inf blocks exactly the wrong entries. Block the future instead: "
            "torch.triu(..., diagonal=1).",
            lambda T: _fill(torch.ones(T, T, dtype=torch.bool).tril(0))),
    Mistake("diagonal-masked",
            "you also blocked the diagonal (torch.triu with diagonal=0). A position may read itself: use "
            "diagonal=1. With the diagonal blocked, row 0 has no key left and softmax gives NaN.",
            lambda T: _fill(_future(T, 0))),
    Mistake("zero-one",
            "your mask holds 0 and 1 (or True/False). M is added to the scores, so it must be 0 where a key is "
            "allowed and float('-inf') where it is blocked: exp(-inf) = 0 is what removes the weight.",
            lambda T: _future(T).float()),
    Mistake("finite",
            "you used a finite number such as -1e9 for the blocked entries. M is defined with float('-inf'); a "
            "finite stand-in overflows to -inf in float16 and turns a fully blocked row into uniform weights.",
            lambda T: _fill(_future(T), -1e9)),
]


@checker
def check_causal_mask(fn) -> Verdict:
    """Check ``fn(T) -> M`` of shape (T, T): 0 on and below the diagonal, -inf above it."""
    return judge(fn, [(4,), (6,)], lambda T: causal_mask(T), _MASK_MISTAKES,
                 success="M is 0 where j ≤ i and -inf where j > i, for T = 4 and T = 6.")


def _scores_cases() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(404)
    return [(torch.randn(5, 5, generator=g) * 2,), (torch.randn(2, 4, 4, generator=g) * 2,)]


def _m(S: torch.Tensor, diagonal: int = 1) -> torch.Tensor:
    T = S.shape[-1]
    return _fill(_future(T, diagonal))


def _after(S: torch.Tensor) -> torch.Tensor:
    return softmax(S) * (~_future(S.shape[-1]))


_WEIGHTS_MISTAKES = [
    Mistake("after-softmax",
            "you zeroed the future weights after softmax, so the rows no longer sum to 1. Add M to the scores "
            "before softmax (or renormalise each row, which gives the same result).",
            _after),
    Mistake("no-mask",
            "your weights are softmax(S) without the mask: every position still reads its future. Add M "
            "(0 where j ≤ i, -inf where j > i) to S before softmax.",
            lambda S: softmax(S)),
    Mistake("wrong-axis",
            "you took softmax over the query axis (dim=-2), so columns sum to 1. Each query's row of weights "
            "must sum to 1: use dim=-1.",
            lambda S: softmax(S + _m(S), dim=-2)),
    Mistake("wrong-triangle",
            "you masked the past (lower triangle) instead of the future. Key j is blocked for query i when "
            "j > i: torch.triu(..., diagonal=1).",
            lambda S: softmax(S + _fill(torch.ones(S.shape[-1], S.shape[-1], dtype=torch.bool).tril(-1)))),
    Mistake("wrong-triangle",
            "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
            "filling it with -inf blocks exactly the wrong entries (the last row is left with no key: NaN). "
            "Block the future instead: torch.triu(..., diagonal=1).",
            lambda S: softmax(S + _fill(torch.ones(S.shape[-1], S.shape[-1], dtype=torch.bool).tril(0)))),
    Mistake("diagonal-masked",
            "you masked the diagonal too (triu with diagonal=0): row 0 has no key left and becomes NaN. "
            "Use diagonal=1 so each position reads itself.",
            lambda S: softmax(S + _m(S, 0))),
    Mistake("multiplied",
            "you multiplied the scores by a 0/1 mask. A score of 0 is not 'no weight': exp(0) = 1. Add -inf "
            "to the blocked scores (S + M or S.masked_fill(future, float('-inf'))) instead.",
            lambda S: softmax(S * (~_future(S.shape[-1])))),
]


@checker
def check_masked_weights(fn) -> Verdict:
    """Check ``fn(S) -> P``: S (..., T, T) → P = softmax(S + M) (..., T, T), masking before softmax."""
    return judge(fn, _scores_cases(), lambda S: softmax(S + causal_mask(S.shape[-1])), _WEIGHTS_MISTAKES,
                 success="future weights are exactly 0 and every row sums to 1 (T = 5, and a batch with T = 4).")
