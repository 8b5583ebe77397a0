"""Exercise checkers for the scaling chapter (S = Q Kᵀ / √d_k).

``check_scaled_scores(fn)``: ``fn(Q, K)`` with Q, K (..., T, d_k) → Q Kᵀ / √d_k (..., T, T), rows = queries.
``check_head_scores(fn)``: ``fn(X, W_Q, W_K)`` with X (..., T, d_model), W_Q, W_K (d_model, d_k) → (..., T, T).
``check_scaled_variance(v)``: a predicted number, the variance of q·k/√d_k when the components of q and k have
variance σ² = 4 (d_k = 64); the checker measures it.

Every input is built afresh on each call, so a function that changes its inputs cannot change a later verdict.
"""

from __future__ import annotations

import math

import torch

from ..attention import scale, scores
from ..projections import project
from ._core import Guess, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_scaled_scores", "check_head_scores", "check_scaled_variance"]


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


def _scaled(S, scale: str, d_k: int, d_model: int | None = None):
    """S scaled as ``scale`` says: "/ √d_k" (right), "/ d_k", "× √d_k", "/ √d_model" or "none"."""
    if scale == "/ √d_k":
        return S / math.sqrt(d_k)
    if scale == "/ d_k":
        return S / d_k
    if scale == "× √d_k":
        return S * math.sqrt(d_k)
    if scale == "/ √d_model":
        return S / math.sqrt(d_model)
    return S


def _planted_scores(Q, K, *, table: str = "Q Kᵀ", scale: str = "/ √d_k"):
    """Q Kᵀ / √d_k with a planted slip; the defaults compute it. ``table`` is "Q Kᵀ", "Q K" or "K Qᵀ"."""
    S = {"Q Kᵀ": lambda: Q @ _kt(K), "Q K": lambda: Q @ K, "K Qᵀ": lambda: K @ _kt(Q)}[table]()
    return _scaled(S, scale, Q.shape[-1])


_SCORES_MISTAKES = variants(_planted_scores, [
    ("divide-by-d_k", {"scale": "/ d_k"},
     "you divided by d_k. The rule divides by its square root: `/ math.sqrt(d_k)` (or `d_k ** 0.5`), "
     "because the standard deviation of q·k grows like √d_k, not like d_k."),
    ("no-scale", {"scale": "none"},
     "the table Q Kᵀ is right, but it is not scaled yet: divide it by √d_k, where d_k = Q.shape[-1]."),
    ("no-transpose", {"table": "Q K"},
     "you multiplied Q @ K. Each score is a dot product q_i · k_j, so K must be transposed: "
     "`Q @ K.transpose(-2, -1)` (with square inputs the slip runs silently and gives wrong numbers)."),
    ("transposed-table", {"table": "K Qᵀ"},
     "you built K Qᵀ, the transposed table: its rows are keys and its columns queries. Rows must be "
     "queries: `Q @ K.transpose(-2, -1)`."),
    ("multiply-by-sqrt", {"scale": "× √d_k"},
     "you multiplied by √d_k; the scores must be divided by it."),
])


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


def _planted_head(X, W_Q, W_K, *, scale: str = "/ √d_k", same_weights: bool = False):
    """(X W_Q)(X W_K)ᵀ / √d_k with a planted slip; the defaults compute it. ``same_weights`` uses W_Q for K."""
    Q, K = X @ W_Q, X @ (W_Q if same_weights else W_K)
    return _scaled(Q @ _kt(K), scale, W_Q.shape[-1], X.shape[-1])


_HEAD_MISTAKES = variants(_planted_head, [
    ("sqrt-d_model", {"scale": "/ √d_model"},
     "you divided by √d_model. The dot products are taken between q and k, which have d_k components: "
     "divide by √d_k, where d_k = W_Q.shape[1] (here d_k differs from d_model)."),
    ("divide-by-d_k", {"scale": "/ d_k"},
     "you divided by d_k; divide by its square root, √d_k."),
    ("no-scale", {"scale": "none"},
     "Q Kᵀ is right but not scaled: divide by √d_k, where d_k = W_Q.shape[1]."),
    ("same-weights", {"same_weights": True},
     "you used W_Q for the keys as well. Queries and keys have separate weights: K = X @ W_K."),
])


@checker
def check_head_scores(fn) -> Verdict:
    """``fn(X, W_Q, W_K)`` with X (..., T, d_model), W_Q, W_K (d_model, d_k) → (..., T, T) scaled scores."""
    return judge(fn, _head_cases(), _head_reference, _HEAD_MISTAKES,
                 success="Q and K from their own weights, scores divided by √d_k (not √d_model).")


# ------------------------------------------------------------------------------------------------
# Predict: the variance of q·k / √d_k when the components of q and k have variance σ² = 4.

_VARIANCE = {"sigma2": 4.0, "d_k": 64, "n_pairs": 20_000}


def _measured_scaled_variance(sigma2: float, d_k: int, n_pairs: int) -> float:
    """Draw n_pairs (q, k) with independent N(0, σ²) components from a local generator; var of q·k/√d_k."""
    g = _gen(33)
    std = math.sqrt(sigma2)
    # the sums run in float64, so the printed number does not depend on the order of the additions
    q = std * torch.randn(n_pairs, d_k, generator=g).double()
    k = std * torch.randn(n_pairs, d_k, generator=g).double()
    return scale((q * k).sum(-1), d_k).var().item()


@checker(kind="predict")
def check_scaled_variance(value) -> Verdict:
    """A predicted variance of the scaled score q·k/√d_k, for components of variance σ² = 4 and d_k = 64."""
    s2, d_k = _VARIANCE["sigma2"], _VARIANCE["d_k"]
    guesses = [
        Guess("scaling-fixes-it", "dividing by √d_k only cancels the factor d_k, the number of terms. It "
              "assumes each term q_m·k_m has variance 1; here it does not.", 1.0),
        Guess("one-factor", f"{s2:g} is the variance of one factor (and the standard deviation of the answer). "
              "A term q_m·k_m multiplies two independent factors, each of variance σ², and the variance of "
              "such a product is the product of the variances.", s2),
        Guess("added", "variances add in a sum of independent terms, but multiply in a product: "
              "var(q_m·k_m) = σ² · σ².", 2 * s2),
        Guess("unscaled", f"that is the variance of q·k before the scaling. Dividing a score by √d_k divides "
              f"its variance by (√d_k)² = d_k = {d_k}.", s2 * s2 * d_k),
        Guess("divided-by-sqrt", f"dividing a score by √d_k divides its variance by d_k = {d_k}, not by "
              f"√d_k = {math.sqrt(d_k):g}: variance scales with the square of a factor.",
              s2 * s2 * math.sqrt(d_k)),
        Guess("one-factor-unscaled", "two things: both q and k carry the factor σ² (so σ⁴ per term), and "
              "the sum of d_k terms is divided by √d_k, which divides its variance by d_k.", s2 * d_k),
    ]
    return judge_number(value, _measured_scaled_variance(**_VARIANCE), guesses, rtol=0.1,
                        success=f"each term q_m·k_m has variance σ⁴ = {s2 * s2:g}; the sum of d_k terms has "
                                f"d_k·σ⁴, and dividing by √d_k leaves σ⁴.")
