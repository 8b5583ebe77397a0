"""Exercise checkers for the capstone: a bug hunt with the four reading questions.

``check_fixed_sublayer(fn)``: ``fn(X, ln_1, W_Q, W_K, W_V)`` must be the attention sublayer of a Pre-Norm block
(single head) without the four bugs of :func:`buggy_sublayer`, one bug per question. A version that still holds
some of them gets a hint that names one of those left.
``check_cached_attention(fn)``: ``fn(X_new, K_past, V_past, W_Q, W_K, W_V)`` must be causal attention for new
positions whose earlier K and V are cached, without the bug of :func:`buggy_cached_attention`.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from .._validate import _integer, boundary
from ..attention import attention
from ._core import Group, Mistake, Verdict, _gen, checker, judge, variants

__all__ = [
    "check_fixed_sublayer", "check_cached_attention", "buggy_sublayer", "buggy_cached_attention",
    "sublayer_with_bugs",
]


# --- the suspects, as the learner reads them ----------------------------------------------------------------------

def buggy_sublayer(X, ln_1, W_Q, W_K, W_V):
    """Attention sublayer of a Pre-Norm block, one head, with four bugs.

    X (..., T, d_model) → A (..., T, d_v).
    """
    Q = ln_1(X) @ W_Q                                     # (..., T, d_k)
    K, V = (X @ W for W in (W_K, W_V))                    # (..., T, d_k), (..., T, d_v)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., T, T)
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    P = torch.softmax(S, dim=-2).masked_fill(future, 0.0)
    return P @ K


def buggy_cached_attention(X_new, K_past, V_past, W_Q, W_K, W_V):
    """Causal attention for T_new new positions after T_past cached ones, with one bug.

    X_new (..., T_new, d_model), K_past (..., T_past, d_k), V_past (..., T_past, d_v)
    → (..., T_new, d_v).
    """
    T_past, T_new = K_past.shape[-2], X_new.shape[-2]
    q = torch.einsum("...nd,dk->...nk", X_new, W_Q)
    k = torch.cat([K_past, torch.einsum("...nd,dk->...nk", X_new, W_K)], dim=-2)
    v = torch.cat([V_past, torch.einsum("...nd,dv->...nv", X_new, W_V)], dim=-2)
    S = torch.einsum("...ik,...jk->...ij", q, k) / q.shape[-1] ** 0.5
    query_at = torch.arange(T_new)[:, None]              # the position of each query
    key_at = torch.arange(T_past + T_new)[None, :]       # the position of each key
    S = torch.where(key_at <= query_at, S, float("-inf"))
    return torch.einsum("...ij,...jv->...iv", S.softmax(dim=-1), v)


# --- the sublayer with any set of the four bugs ------------------------------------------------------------------

# Each bug: its label, the first hint (which question, and where to look) and the second (what is wrong).
_BUGS = {
    1: ("q1-kv-from-x",
        "question 1 (where do Q, K and V come from?): do all three projections read the same input, and is it "
        "the one a Pre-Norm block hands to its attention?",
        "question 1 (where do Q, K and V come from?): Q reads the normalised input but K and V read X itself. "
        "In the attention of a Pre-Norm block all three are projections of the output of ln_1."),
    2: ("q2-softmax-axis",
        "question 2 (which axis is the query?): add up your weights along each axis. Which axis sums to 1, and "
        "which should: each query's weights over the keys, or each key's over the queries?",
        "question 2 (which axis is the query?): softmax normalises over the query axis, so each key's column "
        "sums to 1. Rows are queries; softmax must run along a row, over the keys."),
    3: ("q3-mask-after-softmax",
        "question 3 (where is the mask added?): do the rows of your weights still sum to 1? What does softmax "
        "see at the future entries?",
        "question 3 (where is the mask added?): the future is zeroed after softmax, so the rows no longer sum "
        "to 1. The blocked scores must be −∞ before softmax: then their weights come out exactly 0 and the "
        "other keys share the whole weight."),
    4: ("q4-weights-times-K",
        "question 4 (what do the weights multiply?): each output row averages one kind of vector over the "
        "positions. Which kind do your weights average?",
        "question 4 (what do the weights multiply?): the weights multiply K. K only serves to score the match; "
        "what a position passes on is its value."),
}


def _sublayer(X, ln_1, W_Q, W_K, W_V, *, bugs=(), kv_source="ln", scale=True, keys_on_rows=False):
    """The sublayer with the planted ``bugs`` (a subset of 1…4) and a few other typical slips.

    ``kv_source="all-x"``: Q, K and V all read X, skipping LN₁.
    """
    Xn = ln_1(X)
    Q = (X if kv_source == "all-x" else Xn) @ W_Q
    src = X if 1 in bugs or kv_source == "all-x" else Xn            # where K and V are read from
    K, V = src @ W_K, src @ W_V
    S = K @ Q.transpose(-2, -1) if keys_on_rows else Q @ K.transpose(-2, -1)
    if scale:
        S = S / math.sqrt(Q.shape[-1])
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    dim = -2 if 2 in bugs else -1
    if 3 in bugs:
        P = torch.softmax(S, dim=dim).masked_fill(future, 0.0)
    else:
        P = torch.softmax(S.masked_fill(future, float("-inf")), dim=dim)
    return P @ (K if 4 in bugs else V)


def _sublayer_with_bugs_args(questions) -> dict:
    numbers = tuple(_integer(q, f"question {i + 1} of sublayer_with_bugs", "a question number 1, 2, 3 or 4")
                    for i, q in enumerate(questions))
    bad = sorted(set(numbers) - set(_BUGS))
    if bad:
        raise ValueError(f"questions must be among 1, 2, 3, 4, got {bad}")
    return {"questions": numbers}


@boundary(_sublayer_with_bugs_args)
def sublayer_with_bugs(*questions: int):
    """The attention sublayer with the bugs of the given questions (1–4) planted, one bug per question.

    ``sublayer_with_bugs(1, 2, 3, 4)`` computes what :func:`buggy_sublayer` computes; ``sublayer_with_bugs()``
    is the correct sublayer.
    """
    bugs = frozenset(questions)

    def sublayer(X, ln_1, W_Q, W_K, W_V):
        return _sublayer(X, ln_1, W_Q, W_K, W_V, bugs=bugs)

    sublayer.__name__ = "sublayer_with_bugs_" + "_".join(map(str, sorted(bugs)))
    return sublayer


def _combination_mistake(bugs: tuple[int, ...]) -> Mistake:
    if len(bugs) == len(_BUGS):
        return Mistake("unchanged",
                       "this still computes what buggy_sublayer computes: all four bugs are in place, one per "
                       "reading question. Ask the questions one at a time, fix what each one finds, and check "
                       "again.",
                       sublayer_with_bugs(*bugs),
                       more="all four bugs are in place. Question 1: where do K and V come from? Question 2: "
                            "over which axis does softmax run? Question 3: is the mask applied to the scores or "
                            "to the weights? Question 4: which tensor do the weights multiply?")
    label, hint, more = _BUGS[bugs[0]]
    if len(bugs) == 1:
        lead = "one bug is left, and it breaks "
    else:
        fixed = [q for q in _BUGS if q not in bugs]
        lead = (f"you fixed question{'s' if len(fixed) > 1 else ''} {' and '.join(map(str, fixed))}; "
                f"{len(bugs)} bugs are left. The first breaks ")
    return Mistake(label, lead + hint, sublayer_with_bugs(*bugs), more=lead + more)


_SUBLAYER_MISTAKES = [
    _combination_mistake(bugs)
    for n in range(len(_BUGS), 0, -1) for bugs in itertools.combinations(sorted(_BUGS), n)
] + variants(_sublayer, [
    ("q1-all-from-x", dict(kv_source="all-x"),
     "Q, K and V now agree with one another, but what do they read? Which input does a Pre-Norm block hand to "
     "its attention?",
     "all three read X and skip LN₁: in a Pre-Norm block the attention reads the normalised input."),
    ("keys-on-rows", dict(keys_on_rows=True),
     "which axis of your score table holds the queries? Does entry (i, j) score query i against key j?",
     "the keys are on the rows: K times Q transposed is the transpose of the score table. The rows must be "
     "queries, so that the mask removes each query's future and softmax runs over its keys."),
    ("no-scale", dict(scale=False),
     "compare the spread of your scores with the formula's: which step keeps them from growing with d_k?",
     "the division by the square root of d_k is missing."),
])


def _sublayer_cases() -> list[tuple]:
    """Fresh inputs on every call: X far from normalised, an ln_1 whose scale and shift are not 1 and 0; one
    case with two batch axes in float64."""
    g = _gen(2017)
    cases = []
    for shape, d_k, d_v, dtype in (((6, 8), 4, 4, torch.float32),          # d_k = d_v lets P @ K run silently
                                   ((2, 5, 8), 4, 3, torch.float32),
                                   ((2, 3, 4, 8), 4, 5, torch.float64)):
        X = 2.0 * torch.randn(*shape, generator=g, dtype=dtype) + 0.5
        ln_1 = nn.LayerNorm(8, dtype=dtype)
        with torch.no_grad():
            ln_1.weight.copy_(0.5 + torch.rand(8, generator=g, dtype=dtype))
            ln_1.bias.copy_(0.3 * torch.randn(8, generator=g, dtype=dtype))
        ln_1.requires_grad_(False)
        W = [torch.randn(8, n, generator=g, dtype=dtype) for n in (d_k, d_k, d_v)]
        cases.append((X, ln_1, *W))
    return cases


@checker(mistakes=_SUBLAYER_MISTAKES)
def check_fixed_sublayer(fn) -> Verdict:
    """Check ``fn(X, ln_1, W_Q, W_K, W_V)``, X (..., T, d_model), equals softmax(QKᵀ/√d_k + M) V with Q, K, V
    all from ln_1(X); shape (..., T, d_v). Names each of buggy_sublayer's four bugs that is still there."""
    return judge(fn, _sublayer_cases(), lambda X, ln_1, *W: _sublayer(X, ln_1, *W), _SUBLAYER_MISTAKES,
                 success="Q, K, V all from ln_1(X), queries on the rows with softmax over the keys, "
                         "the mask before softmax, the weights times V.")


# --- cached attention: the queries are the LAST positions ----------------------------------------------------------

def _cached(X_new, K_past, V_past, W_Q, W_K, W_V, *, start="past", shift=0, own=True, new_kv=True,
            order="past-first", mask_after=False, times_K=False, scale=True, dim=-1):
    """Cached attention with the planted mistakes' switches; the defaults are right.

    New query i stands at position T_past + i (``start="past"``) or at i (``"zero"``), plus ``shift``; it reads
    the keys up to its own position (``own``), or all keys (``start="none"``). ``order``: the new K and V go
    after the cached ones ("past-first") or before them.
    """
    Q = X_new @ W_Q
    K, V = K_past, V_past
    if new_kv:
        K_new, V_new = X_new @ W_K, X_new @ W_V
        pair = ((K_past, K_new), (V_past, V_new)) if order == "past-first" else ((K_new, K_past), (V_new, V_past))
        K, V = torch.cat(pair[0], dim=-2), torch.cat(pair[1], dim=-2)
    S = Q @ K.transpose(-2, -1)
    if scale:
        S = S / math.sqrt(Q.shape[-1])
    T_past, T_new, T_k = K_past.shape[-2], X_new.shape[-2], K.shape[-2]
    query_at = torch.arange(T_new)[:, None] + (T_past if start == "past" else 0) + shift
    key_at = torch.arange(T_k)[None, :]
    allowed = (key_at <= query_at) if own else (key_at < query_at)
    if start == "none":
        allowed = torch.ones(T_new, T_k, dtype=torch.bool)
    if mask_after:
        P = torch.softmax(S, dim=dim).masked_fill(~allowed, 0.0)
    else:
        P = torch.softmax(S.masked_fill(~allowed, float("-inf")), dim=dim)
    return P @ (K if times_K else V)


def _cached_reference(X_new, K_past, V_past, W_Q, W_K, W_V):
    K = torch.cat([K_past, X_new @ W_K], dim=-2)
    V = torch.cat([V_past, X_new @ W_V], dim=-2)
    return attention(X_new @ W_Q, K, V)          # the library's mask puts the queries at the last positions


_CACHED_MISTAKES = variants(_cached, [
    ("queries-from-zero", dict(start="zero"),
     "question 2: which position does row i of the score table stand for once T_past keys are cached? "
     "Check what your mask compares each key's position with.",
     "the mask numbers the new queries 0 … T_new − 1, as if nothing were cached. Row i of the table is the "
     "query at position T_past + i, so a new query cannot see most of the past."),
    ("offset-one-too-far", dict(shift=1),
     "question 2: does a new query read a key after its own position? Count the keys of the first new row.",
     "your rows stand one position too far: each new query also reads the key after its own, which is its "
     "future."),
    ("misses-own-key", dict(own=False),
     "does a new query read its own key? Look at a step with one new token: which keys does it read?",
     "your mask also blocks each query's own key. A query may read every key up to and including its own "
     "position; its own key and value are part of what it reads."),
    ("no-mask", dict(start="none"),
     "right for one new token, wrong for several: may the first of three new tokens read the other two?",
     "there is no mask any more. One new token may read every key, but with several new positions the earlier "
     "ones must not read the later ones."),
    ("no-new-kv", dict(new_kv=False),
     "question 1: do the new positions read their own keys and values? Count the columns of your score "
     "table.",
     "the new positions read only the cached K and V: their own keys and values belong in the table too, "
     "after the cached ones."),
    ("keys-out-of-order", dict(order="new-first"),
     "question 2: which position does column j of your score table stand for? Does the order in which K and "
     "V are joined agree with the positions your mask assumes?",
     "the new keys and values come before the cached ones, so column j no longer stands at position j, and "
     "the mask blocks the wrong keys. The cache holds the earlier positions: it comes first."),
    ("softmax-over-queries", dict(dim=-2),
     "question 2: which axis of your weights sums to 1?",
     "softmax runs over the new queries; each query's weights over the keys must sum to 1."),
    ("mask-after-softmax", dict(mask_after=True),
     "question 3: do the rows of your weights still sum to 1?",
     "the future is zeroed after softmax, so the rows no longer sum to 1: the blocked scores must be −∞ "
     "before softmax."),
    ("weights-times-K", dict(times_K=True),
     "question 4: which tensor do your weights multiply?",
     "the weights multiply K; they must average the values."),
    ("no-scale", dict(scale=False),
     "compare the spread of your scores with the formula's: which step keeps them from growing with d_k?",
     "the division by the square root of d_k is missing."),
])


def _cached_cases() -> list[Group]:
    """One new token after 4 cached (the generation step), 3 new after 3 (a prompt in two pieces) with d_k ≠
    d_v, 2 new after 5 with two batch axes in float64, and 4 new after 6 in float16 (its own tolerance)."""
    g = _gen(2024)

    def case(lead, T_past, T_new, d_k, d_v, dtype):
        def draw(*shape):
            return torch.randn(*shape, generator=g).to(dtype)
        return (draw(*lead, T_new, 8), draw(*lead, T_past, d_k), draw(*lead, T_past, d_v),
                *(0.5 * draw(8, n) for n in (d_k, d_k, d_v)))

    return [Group([case((), 4, 1, 4, 4, torch.float32), case((2,), 3, 3, 4, 3, torch.float32),
                   case((2, 3), 5, 2, 4, 6, torch.float64)], 1e-5),
            Group([case((), 6, 4, 8, 8, torch.float16)], 2e-2)]


@checker(mistakes=_CACHED_MISTAKES)
def check_cached_attention(fn) -> Verdict:
    """Check ``fn(X_new, K_past, V_past, W_Q, W_K, W_V)`` → (..., T_new, d_v): the new queries read every cached
    key and the new keys up to their own position, in the dtype of the inputs."""
    return judge(fn, _cached_cases(), _cached_reference, _CACHED_MISTAKES,
                 success="new query i stands at position T_past + i and reads every key up to there, its own "
                         "included (one and several new tokens, extra batch axes, float16 to float64).")
