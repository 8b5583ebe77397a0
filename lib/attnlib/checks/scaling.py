"""Exercise checkers for the scaling chapter (S = Q Kᵀ / √d_k)."""

from __future__ import annotations

import math

import torch

from ..attention import scale, scores
from ..projections import project
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_scaled_scores", "check_head_scores"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# S / √d_k from Q and K.

def _scores_cases() -> list[tuple]:
    g = _gen(30)
    # The first case has T == d_k, so forgetting the transpose (Q @ K) runs and gives a wrong table;
    # the others have T != d_k (one with a batch axis), where the same slip fails on shapes.
    return [
        (torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)),
        (torch.randn(5, 9, generator=g), torch.randn(5, 9, generator=g)),
        (torch.randn(2, 3, 9, generator=g), torch.randn(2, 3, 9, generator=g)),
    ]


def _scores_reference(Q, K):
    return scale(scores(Q, K), Q.shape[-1])


def _kt(K):
    return K.transpose(-2, -1)


_SCORES_MISTAKES = [
    Mistake("divide-by-d_k",
            "you divided by d_k. The rule divides by its square root: `/ math.sqrt(d_k)` (or `d_k ** 0.5`), "
            "because the standard deviation of q·k grows like √d_k, not like d_k.",
            lambda Q, K: Q @ _kt(K) / Q.shape[-1]),
    Mistake("no-scale",
            "the table Q Kᵀ is right, but it is not scaled yet: divide it by √d_k, where d_k = Q.shape[-1].",
            lambda Q, K: Q @ _kt(K)),
    Mistake("no-transpose",
            "you multiplied Q @ K. Each score is a dot product q_i · k_j, so K must be transposed: "
            "`Q @ K.transpose(-2, -1)` (with square inputs the slip runs silently and gives wrong numbers).",
            lambda Q, K: Q @ K / math.sqrt(Q.shape[-1])),
    Mistake("transposed-table",
            "you built K Qᵀ, the transposed table: its rows are keys and its columns queries. Rows must be "
            "queries: `Q @ K.transpose(-2, -1)`.",
            lambda Q, K: K @ _kt(Q) / math.sqrt(Q.shape[-1])),
    Mistake("multiply-by-sqrt",
            "you multiplied by √d_k; the scores must be divided by it.",
            lambda Q, K: Q @ _kt(K) * math.sqrt(Q.shape[-1])),
]


@checker
def check_scaled_scores(fn) -> Verdict:
    """``fn(Q, K)`` with Q, K (..., T, d_k) → S / √d_k of shape (..., T, T); rows are queries."""
    return judge(fn, _scores_cases(), _scores_reference, _SCORES_MISTAKES,
                 success="rows are queries, columns keys, and the scores are divided by √d_k.")


# ------------------------------------------------------------------------------------------------
# From X: (X W_Q)(X W_K)ᵀ / √d_k, where d_k (the width of W_Q) is not d_model.

def _head_cases() -> list[tuple]:
    g = _gen(31)
    return [
        (torch.randn(5, 16, generator=g), torch.randn(16, 8, generator=g) / 4, torch.randn(16, 8, generator=g) / 4),
        (torch.randn(2, 4, 9, generator=g), torch.randn(9, 2, generator=g) / 3, torch.randn(9, 2, generator=g) / 3),
    ]


def _head_reference(X, W_Q, W_K):
    Q, K = project(X, W_Q), project(X, W_K)
    return scale(scores(Q, K), W_Q.shape[-1])


def _qk(X, W_Q, W_K):
    return (X @ W_Q) @ _kt(X @ W_K)


_HEAD_MISTAKES = [
    Mistake("sqrt-d_model",
            "you divided by √d_model. The dot products are taken between q and k, which have d_k components: "
            "divide by √d_k, where d_k = W_Q.shape[1] (here d_k differs from d_model).",
            lambda X, W_Q, W_K: _qk(X, W_Q, W_K) / math.sqrt(X.shape[-1])),
    Mistake("divide-by-d_k",
            "you divided by d_k; divide by its square root, √d_k.",
            lambda X, W_Q, W_K: _qk(X, W_Q, W_K) / W_Q.shape[-1]),
    Mistake("no-scale",
            "Q Kᵀ is right but not scaled: divide by √d_k, where d_k = W_Q.shape[1].",
            _qk),
    Mistake("same-weights",
            "you used W_Q for the keys as well. Queries and keys have separate weights: K = X @ W_K.",
            lambda X, W_Q, W_K: _qk(X, W_Q, W_Q) / math.sqrt(W_Q.shape[-1])),
]


@checker
def check_head_scores(fn) -> Verdict:
    """``fn(X, W_Q, W_K)`` with X (..., T, d_model), W_Q, W_K (d_model, d_k) → (..., T, T) scaled scores."""
    return judge(fn, _head_cases(), _head_reference, _HEAD_MISTAKES,
                 success="Q and K from their own weights, scores divided by √d_k (not √d_model).")
