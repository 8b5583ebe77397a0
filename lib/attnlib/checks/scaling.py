"""Exercise checkers for the scaling chapter (raw scores S = Q Kᵀ, scaled scores Z = S / √d_k).

``check_scaled_scores(fn)``: ``fn(Q, K)`` with Q (T_q, B, d_k) and K (T_k, B, d_k), the sequence-first layout of
``nn.MultiheadAttention`` without ``batch_first``, → Z = S / √d_k of shape (B, T_q, T_k), batch first, rows = queries.
``check_head_scores(fn)``: ``fn(X, W_Q, W_K)`` is the "find the bug" score table built by broadcasting, repaired:
X (..., T, d_model), W_Q, W_K (d_model, d_k) → Z = (X W_Q)(X W_K)ᵀ / √d_k of shape (..., T, T).
``check_scaled_variance(v)``: a predicted number, the variance of q·k/√d_k when the components of q and k have
variance σ² = 4 (d_k = 64); the checker measures it.

Every input is built afresh on each call, so a function that changes its inputs cannot change a later verdict,
and a function that changes them is told so.
"""

from __future__ import annotations

import math

import torch

from ..attention import scale, scores
from ..projections import project
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_scaled_scores", "check_head_scores", "check_scaled_variance"]


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


# ------------------------------------------------------------------------------------------------
# Z = S / √d_k from Q and K in the sequence-first layout: Q (T_q, B, d_k), K (T_k, B, d_k) → (B, T_q, T_k).

def _scores_cases() -> list[tuple]:
    g = _gen(30)
    # 1. T_q = T_k = B = d_k: every slip of the layout runs silently and has the right shape.
    # 2. T_q ≠ T_k, B and d_k different again: the same slips give other shapes or fail.
    # 3. float64 inputs, whose scores must stay float64.
    return [
        (torch.randn(4, 4, 4, generator=g), torch.randn(4, 4, 4, generator=g)),
        (torch.randn(3, 2, 6, generator=g), torch.randn(5, 2, 6, generator=g)),
        (torch.randn(2, 3, 8, generator=g, dtype=torch.float64), torch.randn(6, 3, 8, generator=g,
                                                                            dtype=torch.float64)),
    ]


def _scores_reference(Q, K):
    Q, K = Q.transpose(0, 1), K.transpose(0, 1)                 # (B, T_q, d_k), (B, T_k, d_k)
    return scale(scores(Q, K), Q.shape[-1])                      # (B, T_q, T_k)


def _planted_scores(Q, K, *, table: str = "right", scale: str = "/ √d_k"):
    """The scaled scores with a planted slip; the defaults compute them. ``table`` is "right", "batch"
    (the product taken on the sequence-first tensors: sequences against sequences), "sequence-first" (right
    numbers, left in the inputs' axis order), "keys on rows" or "no transpose" (K not transposed)."""
    Qb, Kb = Q.transpose(0, 1), K.transpose(0, 1)
    S = {"right": lambda: Qb @ _kt(Kb),
         "batch": lambda: Q @ _kt(K),                            # (T_q, B, B)
         "sequence-first": lambda: (Qb @ _kt(Kb)).transpose(0, 1),  # (T_q, B, T_k)
         "keys on rows": lambda: Kb @ _kt(Qb),                   # (B, T_k, T_q)
         "no transpose": lambda: Qb @ Kb}[table]()
    return _scaled(S, scale, Q.shape[-1])


_SCORES_MISTAKES = variants(_planted_scores, [
    ("batch-table", {"table": "batch"},
     "does an entry of your table compare a query position with a key position? Look at which two axes "
     "the product of the last two axes pairs up when the sequence axis comes first.",
     "your table compares the sequences of the batch with each other, at each position: a product of the "
     "last two axes treats every axis before them as a batch, and here that is the sequence axis. Bring the "
     "batch axis to the front (or name every axis in an einsum) before taking the product."),
    ("sequence-first-result", {"table": "sequence-first"},
     "your numbers are right, but in which order are the axes of your result? The batch axis comes first.",
     "your result is laid out as (T_q, B, T_k), the order of the inputs; the exercise asks for the batch "
     "axis first: (B, T_q, T_k)."),
    ("keys-on-rows", {"table": "keys on rows"},
     "is row i of one sequence's table the query position i? Count the rows a sequence's table should have.",
     "your table is the transpose of Z: its rows are the T_k keys and its columns the T_q queries. Rows must "
     "be queries, columns keys."),
    ("no-transpose", {"table": "no transpose"},
     "each score is the dot product of one query with one key, over their d_k components: which axes does "
     "your product sum over?",
     "you multiplied the queries by the keys without transposing the keys, so the product sums over key "
     "positions instead of the d_k components (with square inputs this runs silently)."),
    ("no-scale", {"scale": "none"},
     "the table's layout is right, but its entries are too large: which step of S / √d_k is missing?",
     "the table is right but not scaled: divide it by the square root of d_k, the width of q and k."),
    ("divide-by-d_k", {"scale": "/ d_k"},
     "the table's layout is right, but its entries are too small: by what exactly does the scaling divide?",
     "you divided by d_k. The rule divides by its square root, because the standard deviation of q·k grows "
     "like √d_k, not like d_k."),
    ("multiply-by-sqrt", {"scale": "× √d_k"},
     "the table's layout is right, but its entries are much too large: does your scaling shrink the scores?",
     "you multiplied by √d_k; the scores must be divided by it."),
])


@checker(mistakes=_SCORES_MISTAKES)
def check_scaled_scores(fn) -> Verdict:
    """``fn(Q, K)`` with Q (T_q, B, d_k), K (T_k, B, d_k) → Z = S / √d_k of shape (B, T_q, T_k); rows are queries."""
    return judge(fn, _scores_cases(), _scores_reference, _SCORES_MISTAKES,
                 success="the batch axis comes first, rows are the queries, columns the keys, and the scores "
                         "are divided by √d_k (square inputs, T_q ≠ T_k, and float64).")


# ------------------------------------------------------------------------------------------------
# Find the bug: Z = (X W_Q)(X W_K)ᵀ / √d_k built by broadcasting. The code as given pairs keys with queries the
# wrong way round (its rows are keys) and divides by √d_model, the width of X, where d_k ≠ d_model.

def _head_cases() -> list[tuple]:
    g = _gen(31)
    return [
        (torch.randn(5, 16, generator=g), torch.randn(16, 8, generator=g) / 4, torch.randn(16, 8, generator=g) / 4),
        (torch.randn(2, 4, 9, generator=g), torch.randn(9, 2, generator=g) / 3, torch.randn(9, 2, generator=g) / 3),
        (torch.randn(3, 6, 12, generator=g, dtype=torch.float64),
         torch.randn(12, 4, generator=g, dtype=torch.float64) / 3,
         torch.randn(12, 4, generator=g, dtype=torch.float64) / 3),
    ]


def _head_reference(X, W_Q, W_K):
    Q, K = project(X, W_Q), project(X, W_K)
    return scale(scores(Q, K), W_Q.shape[-1])


def _planted_head(X, W_Q, W_K, *, scale: str = "/ √d_k", rows: str = "queries", same_weights: bool = False):
    """(X W_Q)(X W_K)ᵀ / √d_k with a planted slip; the defaults compute it. ``rows`` "keys" transposes the table;
    ``same_weights`` uses W_Q for K."""
    Q, K = X @ W_Q, X @ (W_Q if same_weights else W_K)
    S = Q @ _kt(K) if rows == "queries" else K @ _kt(Q)
    return _scaled(S, scale, W_Q.shape[-1], X.shape[-1])


def buggy_head_scores(X, W_Q, W_K):
    """The stub of the exercise, the function as given (its rows are keys, and its scale is √d_model)."""
    Q = X @ W_Q                                        # (..., T, d_k)
    K = X @ W_K                                        # (..., T, d_k)
    pairs = K[..., :, None, :] * Q[..., None, :, :]    # (..., T, T, d_k)
    return pairs.sum(-1) / math.sqrt(X.shape[-1])      # (..., T, T)


_HEAD_MISTAKES = [
    Mistake("as-given",
            "this is still the function as given. It runs and has the right shape, but two of the chapter's "
            "checks fail: compare one row of its table with the dot products of that query against every "
            "key, and compare the spread of its scores with what the scaling should leave.",
            buggy_head_scores,
            more="this is still the function as given, with two bugs: its table has the keys on rows (entry "
                 "(i, j) multiplies key i with query j), and it divides by the square root of the width of X, "
                 "d_model, where the dot products are taken between vectors of width d_k."),
    *variants(_planted_head, [
        ("rows-are-keys", {"rows": "keys"},
         "the scale is right now. Is row i of your table the query position i? Compare row 0 with the dot "
         "products of query 0 against every key.",
         "your table is the transpose of Z: entry (i, j) multiplies key i with query j. Swap the roles in the "
         "broadcast so that the first of the two position axes belongs to the queries."),
        ("sqrt-d_model", {"scale": "/ √d_model"},
         "rows and columns are right now. How many components do the two vectors of each dot product have, "
         "and is that the number whose square root you divide by?",
         "you divide by the square root of d_model, the width of X. The dot products are taken between q "
         "and k, which have d_k components, and here d_k differs from d_model."),
        ("divide-by-d_k", {"scale": "/ d_k"},
         "rows and columns are right now, but the scores are too small: by what exactly does the scaling "
         "divide?",
         "you divided by d_k; divide by its square root, √d_k."),
        ("no-scale", {"scale": "none"},
         "rows and columns are right now, but the scores are too large: which step of S / √d_k is missing?",
         "the table is right but not scaled: divide by the square root of d_k, the width of q and k."),
        ("same-weights", {"same_weights": True},
         "where do your keys come from? Compare them with the queries.",
         "you used W_Q for the keys as well. Queries and keys have separate weights."),
    ]),
]


@checker(mistakes=_HEAD_MISTAKES)
def check_head_scores(fn) -> Verdict:
    """``fn(X, W_Q, W_K)`` with X (..., T, d_model), W_Q, W_K (d_model, d_k) → Z (..., T, T), the scaled scores."""
    return judge(fn, _head_cases(), _head_reference, _HEAD_MISTAKES,
                 success="rows are queries, columns keys, and the scores are divided by √d_k, the width of q "
                         "and k (not √d_model).")


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


_S2, _D_K = _VARIANCE["sigma2"], _VARIANCE["d_k"]
# Each hint says which side the guess is on and which part of the count is off, never how to count it.
_GUESSES = [
    Guess("scaling-fixes-it",
          "too low: that is the answer for components of variance 1. Where does the size of the components "
          "enter your count?", 1.0,
          more="too low: the division by √d_k makes up for the number of terms only. The size of each term, "
               "which here comes from two factors of variance 4, is still in the result."),
    Guess("std-not-variance",
          "too low: 2 is how far one component typically strays, a standard deviation; the question asks for "
          "a variance.", 2.0,
          more="too low: 2 is the standard deviation of one component. A variance is the square of a "
               "standard deviation, and the count must go on from one component to the whole score."),
    Guess("one-factor",
          "too low: your number is the variance of one of the two factors of a term q_m·k_m. What does the "
          "second factor add?", _S2,
          more="too low by a factor of 4: each term multiplies a component of q by a component of k, both of "
               "variance 4, and your count uses only one of them."),
    Guess("added",
          "too low: the part for one term q_m·k_m is off. Do the variances of its two factors combine as in "
          "a sum?", 2 * _S2,
          more="too low by a factor of 2: you added the two factors' variances. A term is a product of two "
               "independent factors, not a sum, and for a product they combine differently."),
    Guess("one-factor-divided-by-sqrt",
          "too high, and two parts are off: the variance of one term, and what the scaling does to the "
          "variance.", _S2 * math.sqrt(_D_K),
          more="two parts are off: the variance of one term counts only one factor (a factor 4 too small), "
               "and the scaling's effect on the variance is a factor 8 too weak."),
    Guess("divided-by-sqrt",
          "too high: the part for one term is right; what the scaling does to the variance is off. By how "
          "much does dividing every score by 8 shrink their variance?", _S2 * _S2 * math.sqrt(_D_K),
          more="too high by a factor of 8: a score divided by √d_k = 8 has its variance divided by 8 times 8, "
               "not by 8."),
    Guess("one-factor-unscaled",
          "too high: two parts are off, the variance of one term and the scaling, which your number leaves "
          "out.", _S2 * _D_K,
          more="two parts are off: one term's variance counts one factor instead of both (a factor 4 too "
               "small), and the division by √d_k is missing (a factor 64 too large)."),
    Guess("unscaled",
          "too high: the part for one term is right, but your number is the variance before the scaling.",
          _S2 * _S2 * _D_K,
          more="too high by a factor of 64 = d_k: dividing every score by √d_k changes its variance too, by "
               "the square of that factor."),
]


@checker(kind="predict", mistakes=_GUESSES)
def check_scaled_variance(value) -> Verdict:
    """A predicted variance of the scaled score q·k/√d_k, for components of variance σ² = 4 and d_k = 64."""
    return judge_number(value, _measured_scaled_variance(**_VARIANCE), _GUESSES, rtol=0.1,
                        success=f"each term q_m·k_m has variance σ⁴ = {_S2 * _S2:g}; the sum of d_k terms has "
                                f"d_k·σ⁴, and dividing by √d_k leaves σ⁴.")

