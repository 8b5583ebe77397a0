"""Exercise checkers for the scaling chapter (raw scores S = Q Kᵀ, scaled scores Z = S / √d_k).

``check_scaled_scores(fn)``: ``fn(Q, K)``, Q (T_q, B, d_k), K (T_k, B, d_k) sequence first → Z (B, T_q, T_k).
``check_head_scores(fn)``: ``fn(X, W_Q, W_K)``, X (..., T, d_model), W_Q, W_K (d_model, d_k) → Z (..., T, T), the
"find the bug" score table fixed.
``check_unit_length_scores(v)``: a predicted standard deviation of Z for q, k of length 1 (d_k = 64).
"""

from __future__ import annotations

import math

import torch

from ..attention import scale, scores
from ..projections import project
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_scaled_scores", "check_head_scores", "check_unit_length_scores"]


def _scaled(S, scale: str, **width: int):
    """S scaled as ``scale`` says: "/ √n", "/ n" or "× √n" for a width n of ``width``, or "none"."""
    if scale == "none":
        return S
    op, n = scale.split()
    factor = width[n.lstrip("√")] ** (0.5 if n.startswith("√") else 1)
    return S * factor if op == "×" else S / factor


# --- Z = S / √d_k from Q and K in the sequence-first layout: Q (T_q, B, d_k), K (T_k, B, d_k) → (B, T_q, T_k) ---------

def _scores_cases() -> list[tuple]:
    g = _gen(30)
    # T_q = T_k = B = d_k, where every slip of the layout runs silently; then all sizes different; then float64
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
    """The scaled scores with a planted slip; the defaults compute them (``scale`` as in :func:`_scaled`)."""
    Qb, Kb = Q.transpose(0, 1), K.transpose(0, 1)
    S = {"right": lambda: Qb @ Kb.mT,
         "batch": lambda: Q @ K.mT,                            # (T_q, B, B)
         "sequence-first": lambda: (Qb @ Kb.mT).transpose(0, 1),  # (T_q, B, T_k)
         "keys on rows": lambda: Kb @ Qb.mT,                   # (B, T_k, T_q)
         "no transpose": lambda: Qb @ Kb,
         "reshape": lambda: Q.reshape(Qb.shape) @ K.reshape(Kb.shape).mT}[table]()
    return _scaled(S, scale, d_k=Q.shape[-1], B=Q.shape[1], T_q=Q.shape[0], T_k=K.shape[0])


_SCORES_MISTAKES = variants(_planted_scores, [
    ("reshape", {"table": "reshape"},
     "does row i of one sequence's table hold the scores of that sequence's query i? Look at how your batch "
     "axis was brought to the front.",
     "you reshaped (T_q, B, d_k) into (B, T_q, d_k). A reshape keeps the order of the numbers in memory and "
     "only regroups them, so each new \"sequence\" mixes queries of several sequences. Moving an axis "
     "means swapping axes, not regrouping the numbers."),
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
    *[(f"sqrt-{n}", {"scale": f"/ √{n}"},
       "the table's layout is right, but not its scale: the length of which axis of Q do you divide by?",
       f"you divided by the square root of {n}, the length of another axis. The score is a dot product over "
       "the d_k components of q and k, the last axis of Q, and it is divided by √d_k.")
      for n in ("B", "T_q", "T_k")],
])


@checker(mistakes=_SCORES_MISTAKES)
def check_scaled_scores(fn) -> Verdict:
    """``fn(Q, K)`` with Q (T_q, B, d_k), K (T_k, B, d_k) → Z = S / √d_k of shape (B, T_q, T_k); rows are queries."""
    return judge(fn, _scores_cases(), _scores_reference, _SCORES_MISTAKES,
                 success="the batch axis comes first, rows are the queries, columns the keys, and the scores "
                         "are divided by √d_k (square inputs, T_q ≠ T_k, and float64).")


# --- find the bug: Z = (X W_Q)(X W_K)ᵀ / √d_k built by broadcasting ---------------------------------------------------
# The code as given pairs keys with queries the wrong way round (its rows are keys) and divides by √d_model, the width
# of X, where d_k ≠ d_model.

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
    """(X W_Q)(X W_K)ᵀ / √d_k with a planted slip; the defaults compute it."""
    Q, K = X @ W_Q, X @ (W_Q if same_weights else W_K)
    S = Q @ K.mT if rows == "queries" else K @ Q.mT
    S = S.transpose(0, 1) if rows == "first-two" else S
    return _scaled(S, scale, d_k=W_Q.shape[-1], d_model=X.shape[-1], T=X.shape[-2])


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
        ("multiply-by-sqrt", {"scale": "× √d_k"},
         "rows and columns are right now, but the scores are much too large: does your scaling shrink them?",
         "you multiplied by √d_k; the scores must be divided by it."),
        ("sqrt-T", {"scale": "/ √T"},
         "rows and columns are right now. Which axis of X or Q counts the components of a dot product, and "
         "is its length the number whose square root you divide by?",
         "you divide by the square root of T, the number of positions (X.shape[-2]). Each score is a dot "
         "product of two vectors of width d_k, and it is divided by √d_k."),
        ("first-two-axes", {"rows": "first-two"},
         "right for one sequence, but a batch comes back with its axes in another order: which two axes of "
         "the table does your transpose swap?",
         "you swap the first two axes of the table. For one sequence those are its rows and columns, but with "
         "a batch axis in front they are the batch and the rows; swap the last two axes, whatever comes "
         "before them."),
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


# --- predict: the spread of Z = S / √d_k when every query and key has length 1 ----------------------------------------
# A component of a random direction of length 1 has variance 1/d_k, so q·k has variance d_k · (1/d_k)² = 1/d_k, and Z
# has standard deviation 1/d_k.

_UNIT = {"B": 4, "T": 32, "d_model": 128, "d_k": 64}   # B tables of T queries against T keys


def _measured_unit_length_std(B: int, T: int, d_model: int, d_k: int) -> float:
    """The standard deviation of Z over B tables of T × T scores of random unit-length q and k (float64)."""
    g = _gen(33)
    Q, K = (torch.randn(B, T, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    Q, K = Q / Q.norm(dim=-1, keepdim=True), K / K.norm(dim=-1, keepdim=True)
    return scale(scores(Q, K), d_k).std().item()


_B, _T, _DM, _DK = _UNIT.values()
_RAW = 1 / math.sqrt(_DK)         # the spread of q·k before the division
# Each hint says which side the guess is on and which part of the count is off, never how to count it.
_GUESSES = [
    Guess("scaling-fixes-it", "too high: 1 is what the division gives for components of variance 1. What variance "
          "does one component of a vector of length 1 have?", 1.0,
          more="too high: the division makes up for the number of terms only. Here the length 1 is shared by "
               "all d_k components, so each one is much smaller than 1."),
    Guess("unscaled", "too high: that is the spread of q·k before the division by √d_k.", _RAW,
          more="too high by a factor of √d_k = 8: your q·k is right, but Z is q·k divided by √d_k."),
    Guess("variance", "too low: your number is a variance, and the question asks for a standard deviation.",
          _RAW ** 2 / _DK, more="too low: that is the variance of Z; its standard deviation is its square root."),
    Guess("divided-by-d_k", "too low by a factor of √d_k = 8: one step of your count shrinks the spread by √d_k "
          "once too often. Which one?", _RAW / _DK,
          more="too low by a factor of 8: either you divided the standard deviation by d_k (it shrinks by √d_k), "
               "or you left out how the spread grows from one term q_r·k_r to the sum of d_k terms."),
    Guess("variance-divided-by-sqrt", "too high: the spread of q·k is right; what the division does to a variance "
          "is off. By how much does dividing every score by 8 shrink their variance?", _RAW / _DK ** 0.25,
          more="too high by a factor of √8: dividing every score by √d_k divides their variance by d_k."),
    Guess("width-d_model", "too low: which width do q and k have, d_model or d_k?", 1 / _DM,
          more="too low: you counted with d_model = 128, the width of X; q and k have d_k = 64 components."),
    Guess("sqrt-d_model", "too low: the spread of q·k is right. Which width's square root divides the scores?",
          _RAW / math.sqrt(_DM), more="too low: you divided by √d_model; the scores are divided by √d_k."),
    Guess("sqrt-T", "too high: by what is every score divided? The number of keys T is not in a dot product.",
          _RAW / math.sqrt(_T), more="too high: you divided by √T. T only counts the scores of a row; each one "
                                     "is a dot product of width d_k, divided by √d_k."),
    Guess("unit-variance", "too high: that is the spread of q·k for components of variance 1, before any "
          "division. How large is one component of a vector of length 1?", math.sqrt(_DK),
          more="too high: √d_k is the spread of q·k for components of variance 1, and without the division. "
               "Here q and k have length 1, so their d_k components share that length."),
    Guess("orthogonal", "too low: random directions in many dimensions are nearly orthogonal, but not exactly. "
          "How far from 0 does q·k stray?", 0.0,
          more="too low: q·k of two random directions is close to 0 but not 0; it is a sum of d_k small "
               "products, and a sum of d_k random terms spreads."),
    Guess("sqrt-B", "too high: by what is every score divided? The number of sequences B is not in a dot product.",
          _RAW / math.sqrt(_B), more="too high: you divided by √B. B only counts the tables; each score is a dot "
                                     "product of width d_k, divided by √d_k."),
]


@checker(kind="predict", mistakes=_GUESSES)
def check_unit_length_scores(value) -> Verdict:
    """A predicted standard deviation of Z = q·k/√d_k for q and k of length 1 (d_k = 64)."""
    return judge_number(value, _measured_unit_length_std(**_UNIT), _GUESSES, rtol=0.1,
                        success=f"each component has variance 1/d_k, q·k has variance 1/d_k, and the division "
                                f"leaves Z a standard deviation of 1/d_k = {1 / _DK:g}.")
