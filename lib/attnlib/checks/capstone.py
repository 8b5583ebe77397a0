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
from ._core import Mistake, Verdict, _gen, checker, judge, variants

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
    Q = X_new @ W_Q
    K = torch.cat([K_past, X_new @ W_K], dim=-2)          # (..., T_k, d_k)
    V = torch.cat([V_past, X_new @ W_V], dim=-2)          # T_k = T_past + T_new
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., T_new, T_k)
    T_q, T_k = S.shape[-2], S.shape[-1]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(1)
    P = torch.softmax(S.masked_fill(future, float("-inf")), dim=-1)
    return P @ V


# --- the sublayer with any set of the four bugs ------------------------------------------------------------------

_BUGS = {
    1: ("q1-kv-from-x",
        "question 1 (where do Q, K and V come from?): Q reads ln_1(X) but K and V read X itself. All three "
        "come from the same input, the normalised one: Xn = ln_1(X), then Xn @ W_Q, Xn @ W_K, Xn @ W_V."),
    2: ("q2-softmax-axis",
        "question 2 (which axis is the query?): softmax runs over dim=-2, the query axis, so each key's column "
        "sums to 1. Row i of S is query i and column j is key j; each query's weights over the keys must sum "
        "to 1: softmax(..., dim=-1)."),
    3: ("q3-mask-after-softmax",
        "question 3 (where is the mask added?): the future is zeroed after softmax, so the rows of weights no "
        "longer sum to 1. Put -inf on the future scores first, then take softmax: "
        "softmax(S.masked_fill(future, float('-inf')), dim=-1)."),
    4: ("q4-weights-times-K",
        "question 4 (what do the weights multiply?): the weights multiply K. K only serves to score the "
        "match; what a position passes on is its value: return P @ V."),
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
                       sublayer_with_bugs(*bugs))
    label, hint = _BUGS[bugs[0]]
    if len(bugs) == 1:
        text = f"one bug is left, and it breaks {hint}"
    else:
        fixed = [q for q in _BUGS if q not in bugs]
        text = (f"you fixed question{'s' if len(fixed) > 1 else ''} {' and '.join(map(str, fixed))}; "
                f"{len(bugs)} bugs are left. The first breaks {hint}")
    return Mistake(label, text, sublayer_with_bugs(*bugs))


_SUBLAYER_MISTAKES = [
    _combination_mistake(bugs)
    for n in range(len(_BUGS), 0, -1) for bugs in itertools.combinations(sorted(_BUGS), n)
] + variants(_sublayer, [
    ("q1-all-from-x", dict(kv_source="all-x"),
     "Q, K and V now all read X, so they agree with each other but skip LN₁. In a Pre-Norm block the "
     "attention reads the normalised input: Xn = ln_1(X), and Q, K, V all come from Xn."),
    ("keys-on-rows", dict(keys_on_rows=True),
     "S = K Qᵀ puts the keys on the rows. The rows of the score table are queries: S = Q Kᵀ, so that "
     "S[i, j] = q_i · k_j and the mask removes the upper triangle."),
    ("no-scale", dict(scale=False),
     "the scaling is gone: divide the scores by math.sqrt(d_k) before the mask and softmax."),
])


def _sublayer_cases() -> list[tuple]:
    """Fresh inputs on every call: X far from normalised, an ln_1 whose scale and shift are not 1 and 0."""
    g = _gen(2017)
    cases = []
    for shape, d_k, d_v in (((6, 8), 4, 4), ((2, 5, 8), 4, 3)):   # d_k = d_v lets P @ K run silently
        X = 2.0 * torch.randn(*shape, generator=g) + 0.5
        ln_1 = nn.LayerNorm(8)
        with torch.no_grad():
            ln_1.weight.copy_(0.5 + torch.rand(8, generator=g))
            ln_1.bias.copy_(0.3 * torch.randn(8, generator=g))
        ln_1.requires_grad_(False)
        W = [torch.randn(8, n, generator=g) for n in (d_k, d_k, d_v)]
        cases.append((X, ln_1, *W))
    return cases


@checker
def check_fixed_sublayer(fn) -> Verdict:
    """Check ``fn(X, ln_1, W_Q, W_K, W_V)``, X (..., T, d_model), equals softmax(QKᵀ/√d_k + M) V with Q, K, V
    all from ln_1(X); shape (..., T, d_v). Names each of buggy_sublayer's four bugs that is still there."""
    return judge(fn, _sublayer_cases(), lambda X, ln_1, *W: _sublayer(X, ln_1, *W), _SUBLAYER_MISTAKES,
                 success="Q, K, V all from ln_1(X), queries on the rows with softmax over the keys, "
                         "the mask before softmax, the weights times V.")


# --- cached attention: the queries are the LAST positions ----------------------------------------------------------

def _cached(X_new, K_past, V_past, W_Q, W_K, W_V, *, mask="offset", new_kv=True, times_K=False,
            mask_after=False):
    Q = X_new @ W_Q
    K, V = K_past, V_past
    if new_kv:
        K, V = torch.cat([K_past, X_new @ W_K], dim=-2), torch.cat([V_past, X_new @ W_V], dim=-2)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    T_q, T_k = S.shape[-2], S.shape[-1]
    offset = {"offset": 1 + T_k - T_q, "square": 1, "none": T_k}[mask]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(offset)
    if mask_after:
        P = torch.softmax(S, dim=-1).masked_fill(future, 0.0)
    else:
        P = torch.softmax(S.masked_fill(future, float("-inf")), dim=-1)
    return P @ (K if times_K else V)


def _cached_reference(X_new, K_past, V_past, W_Q, W_K, W_V):
    K = torch.cat([K_past, X_new @ W_K], dim=-2)
    V = torch.cat([V_past, X_new @ W_V], dim=-2)
    return attention(X_new @ W_Q, K, V)          # the library's mask puts the queries at the last positions


_CACHED_MISTAKES = variants(_cached, [
    ("square-mask", dict(mask="square"),
     "the mask ignores the cache. triu(1) on the (T_new, T_past + T_new) table treats new query i as "
     "position i, so it cannot see most of the past. With a cache the rows are the LAST T_new positions: "
     "query i stands at position T_past + i and may read every key j ≤ T_past + i, so the future starts "
     "at triu(1 + T_k - T_q)."),
    ("no-mask", dict(mask="none"),
     "there is no mask any more. One new token may indeed read every key, but with several new positions "
     "the earlier ones must not read the later ones: mask the keys j > T_past + i, i.e. "
     "triu(1 + T_k - T_q)."),
    ("no-new-kv", dict(new_kv=False),
     "the new positions read only the cached K and V. Their own keys and values belong in the table too "
     "(question 1): append X_new @ W_K and X_new @ W_V to the cache before scoring."),
    ("mask-after-softmax", dict(mask_after=True),
     "the future is zeroed after softmax, so the rows no longer sum to 1: mask the scores with -inf first."),
    ("weights-times-K", dict(times_K=True),
     "the weights multiply K; they must average the values: return P @ V."),
])


def _cached_cases() -> list[tuple]:
    g = _gen(2024)
    cases = []
    # one new token after 4 cached ones (the generation step), then 3 new ones after 3 (a prompt in two pieces)
    for lead, T_past, T_new, d_k, d_v in (((), 4, 1, 4, 4), ((2,), 3, 3, 4, 3)):
        X_new = torch.randn(*lead, T_new, 8, generator=g)
        K_past = torch.randn(*lead, T_past, d_k, generator=g)
        V_past = torch.randn(*lead, T_past, d_v, generator=g)
        W = [torch.randn(8, n, generator=g) for n in (d_k, d_k, d_v)]
        cases.append((X_new, K_past, V_past, *W))
    return cases


@checker
def check_cached_attention(fn) -> Verdict:
    """Check ``fn(X_new, K_past, V_past, W_Q, W_K, W_V)`` → (..., T_new, d_v): the new queries read every cached
    key and the new keys up to their own position."""
    return judge(fn, _cached_cases(), _cached_reference, _CACHED_MISTAKES,
                 success="new query i stands at position T_past + i and reads every key up to there, its own "
                         "included.")
