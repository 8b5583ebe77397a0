"""Exercise checkers for the capstone: a bug hunt with the four reading questions.

``check_fixed_sublayer(fn)``: ``fn(X, ln_1, W_Q, W_K, W_V)`` must be the attention sublayer of a Pre-Norm block
(single head) without the four bugs of :func:`buggy_sublayer`, one bug per question. A version that still holds
some of them gets a hint that names one of those left.
``check_cached_attention(fn)``: ``fn(X_new, K_past, V_past, W_Q, W_K, W_V)`` must be causal attention for new
positions whose earlier K and V are cached, without the bug of :func:`buggy_cached_attention` (a question-3 bug:
the mask compares the keys with the wrong query positions).
``check_gpt2_lines(lines)``: for each question, the line of GPT-2's installed source that answers it; each line is
confirmed by behaviour, by changing it in a small GPT-2 (:func:`attnlib.gpt2_reading.line_finding`), never by
comparing strings.
``check_which_question(answers)``: for each planted copy of GPT-2's code (:data:`attnlib.gpt2_reading.PLANTED`),
the question whose check it fails, found by asking the copy the four questions (:func:`attnlib.gpt2_reading.ask_gpt2`).
"""

from __future__ import annotations

import contextlib
import itertools
import math

import torch
from torch import nn

from .._validate import _integer, boundary
from ..attention import attention
from ._core import Group, Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = [
    "check_fixed_sublayer", "check_cached_attention", "buggy_sublayer", "buggy_cached_attention",
    "sublayer_with_bugs", "check_gpt2_lines", "check_which_question",
]


# --- the suspects, as the learner reads them ----------------------------------------------------------------------

def buggy_sublayer(X, ln_1, W_Q, W_K, W_V):
    """Attention sublayer of a Pre-Norm block, one head, with four bugs.

    X (..., T, d_model) → A (..., T, d_v).
    """
    Q = ln_1(X) @ W_Q                                     # (..., T, d_k)
    K, V = (X @ W for W in (W_K, W_V))                    # (..., T, d_k), (..., T, d_v)
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., T, T): the scaled scores
    T = Z.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    P = torch.softmax(Z, dim=-2).masked_fill(future, 0.0)
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
    Z = torch.einsum("...ik,...jk->...ij", q, k) / q.shape[-1] ** 0.5
    query_at = torch.arange(T_new)[:, None]              # the position of each query
    key_at = torch.arange(T_past + T_new)[None, :]       # the position of each key
    Z = torch.where(key_at <= query_at, Z, float("-inf"))
    return torch.einsum("...ij,...jv->...iv", Z.softmax(dim=-1), v)


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
    Z = S / math.sqrt(Q.shape[-1]) if scale else S
    T = Z.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    dim = -2 if 2 in bugs else -1
    if 3 in bugs:
        P = torch.softmax(Z, dim=dim).masked_fill(future, 0.0)
    else:
        P = torch.softmax(Z.masked_fill(future, float("-inf")), dim=dim)
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
    Z = S / math.sqrt(Q.shape[-1]) if scale else S
    T_past, T_new, T_k = K_past.shape[-2], X_new.shape[-2], K.shape[-2]
    query_at = torch.arange(T_new)[:, None] + (T_past if start == "past" else 0) + shift
    key_at = torch.arange(T_k)[None, :]
    allowed = (key_at <= query_at) if own else (key_at < query_at)
    if start == "none":
        allowed = torch.ones(T_new, T_k, dtype=torch.bool)
    if mask_after:
        P = torch.softmax(Z, dim=dim).masked_fill(~allowed, 0.0)
    else:
        P = torch.softmax(Z.masked_fill(~allowed, float("-inf")), dim=dim)
    return P @ (K if times_K else V)


def _cached_reference(X_new, K_past, V_past, W_Q, W_K, W_V):
    K = torch.cat([K_past, X_new @ W_K], dim=-2)
    V = torch.cat([V_past, X_new @ W_V], dim=-2)
    return attention(X_new @ W_Q, K, V)          # the library's mask puts the queries at the last positions


_CACHED_MISTAKES = variants(_cached, [
    ("queries-from-zero", dict(start="zero"),
     "question 3 (where is the mask added, and what does it compare?): which position does row i of the score "
     "table stand for once T_past keys are cached? Check what your mask compares each key's position with.",
     "question 3: the mask numbers the new queries 0 … T_new − 1, as if nothing were cached. Row i of the table "
     "is the query at position T_past + i, so a new query cannot see most of the past."),
    ("offset-one-too-far", dict(shift=1),
     "question 3: does your mask let a new query read a key after its own position? Count the keys of the first "
     "new row.",
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


# --- GPT-2's code: quote the line that answers each question --------------------------------------------------------

_GPT2: list = []   # the small GPT-2 that the checkers change lines of (built once, never given out)


def _gpt2():
    from ..gpt2_reading import tiny_gpt2

    if not _GPT2:
        _GPT2.append(tiny_gpt2(seed=0))
    return _GPT2[0]


@contextlib.contextmanager
def _one_thread():
    """A tiny model runs fastest on one thread; the caller's setting comes back afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _line_mistake(label: str, hint: str, more: str) -> Mistake:
    return Mistake(label, "question {q} ({question}): " + hint, more="question {q} ({question}): " + more)


LINES_STUB = Mistake(
    "stub", "quote a line for each question first: replace each ... with one line of the source printed above, "
            "in quotes.",
    more="each of the four answers is still the stub's ... : for each question, find in the printed source the one "
         "line that does the step it asks about, copy it whole and put it in quotes in place of the ... .")
LINES_TYPE = Mistake(
    "type", "the answer is a dict from each question number to one line of the source, as in the stub; got {got}.",
    more="the answer is a dict with the keys 1, 2, 3 and 4, each mapped to one line of GPT-2's source as a string "
         "in quotes; got {got}.")
LINES_KEYS = Mistake(
    "keys", "the dict needs exactly the keys 1, 2, 3 and 4, one per question; it has {keys}.",
    more="keep the stub's keys, the question numbers 1, 2, 3 and 4 as integers, and give each one line; the dict "
         "has {keys}.")
_LINE_GENERAL = [
    _line_mistake("missing", "no line yet: replace its ... with a line of the printed source, in quotes.",
                  "this question still has the stub's ... in place of a line. Find the line that does the step the "
                  "question asks about, copy it whole and put it in quotes."),
    _line_mistake("not-a-string", "quote the line as a string, got {got}.",
                  "each answer is the text of one line, in quotes, as the printed source has it; got {got}."),
    _line_mistake("several-lines", "quote one line, not several. Which single line does the step?",
                  "your answer holds more than one line of text. The checker changes one line of GPT-2 and "
                  "watches what happens: quote the one that does the step, on its own."),
    _line_mistake("not-in-source", "this line is not in the source printed above. Copy one whole line as it "
                                   "stands (its indentation does not matter).",
                  "the checker looks, in the printed functions, for a line equal to yours once the spaces at both "
                  "ends are removed. A line cut short, two lines joined, or a line typed again with other spacing "
                  "or other names is not found."),
    _line_mistake("not-a-statement", "this line does not start a statement of its own: it continues one, opens a "
                                     "block, or is a comment. Quote a line that does the work.",
                  "a header such as an if or a def, a comment, or the second line of a statement that starts above "
                  "cannot be changed on its own. Quote the first line of the statement that does the step."),
    _line_mistake("never-runs", "this line does not run when GPT-2 reads a prompt here: it sits in a branch that "
                                "is not taken. Which line runs on every forward pass?",
                  "the checker ran a small GPT-2 with this line watched and it never ran (a branch for another "
                  "configuration, such as cross-attention or an argument left at its default). The step the "
                  "question asks about runs on every forward pass."),
    _line_mistake("unconfirmed", "this line computes {what}, but changing it did not change GPT-2 the way the "
                                 "answer predicts. Is there a line that does the step itself?",
                  "the line holds {what} only inside what it returns, so changing it in place did not give the "
                  "predicted model. Quote the line where that value is first computed."),
]

# What a line computes (found by gpt2_reading.line_finding), and the hint for a question it does not answer.
_WHAT = {"qkv": "Q, K and V", "ln_1": "LN₁(X)", "part-of-qkv": "part of Q, K and V", "scores": "the scaled scores",
         "masked-scores": "the scaled scores with the mask added", "mask": "the mask", "weights": "the weights P",
         "weighted-values": "P · V", "weighted-values-rearranged": "P · V rearranged",
         "attention-output": "the attention's output after W_O"}

_NEAR = {   # (question, what the line computes) → (hint, second level)
    (1, "ln_1"): ("this line makes what attention reads, LN₁(X). Q, K and V are made from it further on: where?",
                  "after this line the block holds LN₁(X), and passes it to the attention module. There one fused "
                  "projection turns it into queries, keys and values: quote the line that computes all three."),
    (1, "part-of-qkv"): ("after this line runs it holds {which}, not all three of Q, K and V. Where are all three "
                         "computed from the attention's input?",
                         "this line reshapes or gathers {which} (their head axis, or the cache); all three were "
                         "computed before, together, by one projection of the attention module's input."),
    (2, "masked-scores"): ("this line's table already holds the mask, so its rows and columns were laid out by an "
                           "earlier line. Which line makes the table from Q and K?",
                           "the mask is added to a table whose rows are already queries and whose columns are "
                           "keys. The order of the two factors of one matrix product decides that: quote that "
                           "line."),
    (2, "weights"): ("softmax runs along the last axis here, but only because an earlier line put the keys there. "
                     "Which line decides which axis holds the queries?",
                     "softmax normalises along the keys, the last axis, because the table was made with the "
                     "queries first and the keys second. Quote the line that multiplies them in that order."),
    (2, "qkv"): ("this line makes Q, K and V, before any score exists. Which line multiplies queries and keys into "
                 "the table?",
                 "the score table does not exist yet at this line: it is made in the attention core, by one matrix "
                 "product of the queries and the transposed keys. Quote that line."),
    (2, "part-of-qkv"): ("this line handles {which}, before any score exists. Which line multiplies queries and "
                         "keys into the table?",
                         "the score table is made later, in the attention core, by one matrix product of the "
                         "queries and the transposed keys. Quote that line."),
    (3, "mask"): ("this line builds the mask, which keys each query may read, but the scores are not touched here. "
                  "Where does the mask meet them?",
                  "masking_utils builds the mask once per forward pass and the model hands it to every block. The "
                  "attention core receives it as an argument and adds it to the scaled scores before softmax: "
                  "quote that line."),
    (3, "scores"): ("this line's table has no mask in it yet. Which line puts the mask on it?",
                    "the scaled scores made here still hold every future entry. The next step adds the mask, "
                    "before softmax: quote that line."),
    (3, "weights"): ("softmax already receives masked scores here. Which earlier line put the mask on them?",
                     "the weights come out with exact zeros on the future because the scores that softmax "
                     "received were already masked. Quote the line that added the mask."),
    (4, "weighted-values-rearranged"): ("this line only rearranges a weighted sum that was already made. Which "
                                        "line multiplies the weights?",
                                        "the product of the weights with the values was made one step before; "
                                        "this line moves its axes. Quote the line of the product."),
    (4, "attention-output"): ("this line mixes the heads' outputs with W_O; the weights were applied before. "
                              "Where?",
                              "W_O (c_proj) acts on the concatenated heads, after each head's weights have "
                              "averaged the values. Quote the line where the weights multiply them."),
    (4, "weights"): ("this line makes the weights. Where are they multiplied, and by what?",
                     "the weights are made here and multiplied a few lines later: quote that product."),
}
_OTHER = {   # a question, and a line that computes none of the things it could be confused with
    1: ("nothing this line computes is Q, K or V (compared with LN₁(X) W + b of block 0). Which line turns the "
        "block's normalised input into all three?",
        "the checker compared every value this line assigns with Q, K and V computed from block 0's weights, in "
        "both layouts (per position, and per head): none matched. Look for the fused projection in the "
        "attention module's forward."),
    2: ("nothing this line computes is the table of scaled scores q_i · k_j / √d_head (compared with one made from "
        "block 0's Q and K). Which line makes it?",
        "the checker compared every value this line assigns with the table of scaled scores, all of it, future "
        "entries included: none matched. It is made in the attention core, from the queries and the keys."),
    3: ("nothing this line computes is the scaled scores with the mask added (the scores where j ≤ i, the lowest "
        "float where j > i). Which line makes that?",
        "the checker compared every value this line assigns with the scaled scores plus the mask: none matched. "
        "The mask is built elsewhere and handed to the attention core, which adds it."),
    4: ("nothing this line computes is P · V (compared with the weights times the values of block 0, per head). "
        "Which line makes it?",
        "the checker compared every value this line assigns with P · V per head: none matched. Look in the "
        "attention core, after softmax."),
}
_LINE_SPECIFIC = [_line_mistake(f"q{q}-{kind}", *texts) for (q, kind), texts in _NEAR.items()]
_LINE_SPECIFIC += [_line_mistake(f"q{q}-other", *texts) for q, texts in _OTHER.items()]
_LINE_MISTAKES = {m.label: m for m in [*_LINE_GENERAL, *_LINE_SPECIFIC]}

_CONFIRMED = {
    1: "Q, K and V made from X instead of LN₁(X) at line 1 give GPT-2 without LN₁",
    2: "line 2's table transposed gives GPT-2 with W_Q and W_K swapped",
    3: "without line 3, GPT-2 computes what the library's GPT computes with causal=False",
    4: "P · K in place of line 4's P · V gives GPT-2 with W_V replaced by W_K",
}


def _judge_line(q: int, line) -> tuple[Mistake, dict] | None:
    """None when ``line`` answers question ``q`` by behaviour; else the mistake and its fields."""
    from ..gpt2_reading import gpt2_sources, line_finding
    from ..reading import find_line

    if line is ... or line is None:
        return _LINE_MISTAKES["missing"], {}
    if not isinstance(line, str):
        return _LINE_MISTAKES["not-a-string"], {"got": f"{type(line).__name__} {_shown(line)}"}
    if len([part for part in line.strip().split("\n") if part.strip()]) > 1:
        return _LINE_MISTAKES["several-lines"], {}
    places = find_line(line, gpt2_sources())
    if not places:
        return _LINE_MISTAKES["not-in-source"], {}
    if not all(p.simple for p in places):
        return _LINE_MISTAKES["not-a-statement"], {}
    finding = line_finding(q, places, _gpt2())
    if not finding.ran:
        return _LINE_MISTAKES["never-runs"], {}
    want = {1: "qkv", 2: "scores", 3: "masked-scores", 4: "weighted-values"}[q]
    if want in finding.kinds:
        return None if finding.confirmed else (_LINE_MISTAKES["unconfirmed"], {"what": _WHAT[want]})
    for kind in sorted(finding.kinds):
        if f"q{q}-{kind}" in _LINE_MISTAKES:
            return _LINE_MISTAKES[f"q{q}-{kind}"], {"which": finding.which}
    return _LINE_MISTAKES[f"q{q}-other"], {}


def _questions(numbers: list[int]) -> str:
    """"question 1", "questions 1 and 2", "questions 1, 2 and 3"."""
    if len(numbers) == 1:
        return f"question {numbers[0]}"
    return "questions " + ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"


def _shown(x) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


@checker(kind="predict", mistakes=[LINES_STUB, LINES_TYPE, LINES_KEYS, *_LINE_MISTAKES.values()])
def check_gpt2_lines(lines) -> Verdict:
    """``lines``: {1: line, 2: line, 3: line, 4: line}, each a line of GPT-2's source (gpt2_sources) that answers
    that reading question. Each is found in the installed source and confirmed by behaviour: the checker changes
    it in a small GPT-2 and compares the result with the model the answer predicts (see
    :func:`attnlib.gpt2_reading.line_finding`)."""
    from ..gpt2_reading import QUESTIONS

    if lines is ... or lines is None:
        return named(LINES_STUB)
    if not isinstance(lines, dict):
        return named(LINES_TYPE, got=f"{type(lines).__name__} {_shown(lines)}")
    keys = list(lines)
    if sorted(keys, key=repr) != [1, 2, 3, 4] or not all(type(k) is int for k in keys):
        return named(LINES_KEYS, keys=", ".join(map(repr, keys)) or "none")
    if all(v is ... or v is None for v in lines.values()):
        return named(LINES_STUB)
    done = []
    with _one_thread():
        for q in (1, 2, 3, 4):
            judged = _judge_line(q, lines[q])
            if judged is not None:
                mistake, fields = judged
                suffix = f" (Confirmed so far: {_questions(done)}.)" if done else ""
                return named(mistake, suffix, q=q, question=QUESTIONS[q], **fields)
            done.append(q)
    return Verdict(True, "each line found in the installed source and confirmed by changing it in a small GPT-2: "
                         + "; ".join(f"({q}) {_CONFIRMED[q]}" for q in (1, 2, 3, 4)) + ".")


# --- GPT-2's code with a planted bug: which question catches it? ---------------------------------------------------

WHICH_STUB = Mistake(
    "stub", "say first which question catches each copy's bug: replace each ... with 1, 2, 3 or 4.",
    more="each answer is still the stub's ... : find the changed line of each copy, ask which step of the path it "
         "belongs to, and put that question's number in place of the ... .")
WHICH_TYPE = Mistake(
    "type", "the answer is a dict from each copy's letter to a question number, as in the stub; got {got}.",
    more="keep the stub's dict: the keys are the letters of the copies, each mapped to the number (1, 2, 3 or 4) "
         "of the question whose check the copy fails; got {got}.")
WHICH_KEYS = Mistake(
    "keys", "the dict needs exactly one key per copy: {letters}; it has {keys}.",
    more="keep the stub's keys, the copies' letters {letters}, as strings, and give each a question number; the "
         "dict has {keys}.")
WHICH_NUMBER = Mistake(
    "not-a-question", "copy {letter}: the answer is the number of a question, 1, 2, 3 or 4; got {got}.",
    more="copy {letter}: give the number of the reading question whose check the copy fails, a whole number from "
         "1 to 4; got {got}.")

_WHICH = {   # (copy, the question answered) → (hint, second level), for each question that does not catch it
    ("A", 2): ("copy A still makes its table from the queries and keys it receives, with softmax along the keys. "
               "Is what it receives right? Which position's input does each row of a head's queries come from?",
               "the table and softmax are GPT-2's own. The changed line gives the queries their head axis by a "
               "reshape alone, so a head's query row mixes the columns of several positions."),
    ("A", 3): ("the future does leak in copy A, but the mask is built and added as before: the lowest float sits "
               "at every j > i. Which position's input does each row of a head's queries come from?",
               "the mask is untouched and softmax's input is masked exactly where it should be. The queries are "
               "wrong: reshaping (B, T, h·d_head) straight to (B, h, T, d_head) without a transpose makes a "
               "head's row i read other positions, some of them later ones."),
    ("A", 4): ("copy A's weights still multiply the values it receives. Look earlier: which position's input does "
               "each row of a head's queries come from?",
               "the last steps are GPT-2's own. The changed line gives the queries their head axis by a reshape "
               "alone, so a head's query row mixes the columns of several positions."),
    ("B", 1): ("copy B's Q, K and V are the right projections, the cached keys and values included. What changes "
               "between a whole prompt, where B is right, and a cached step?",
               "on a whole prompt copy B gives GPT-2's logits; only a step with a cache differs. Q, K and V pass "
               "the first check there too: look at which keys the mask lets each new query read."),
    ("B", 2): ("copy B still puts the queries on the rows and runs softmax along the keys. With a cache, at which "
               "positions does its mask think the new queries stand?",
               "the table is (T_q, T_k) and its rows sum to 1. The changed line numbers the new queries from 0, "
               "as if nothing were cached, so the mask hides cached keys from them."),
    ("B", 4): ("copy B's weights still multiply V. With a cache, at which positions does its mask think the new "
               "queries stand?",
               "P · V is computed as before. The changed line numbers the new queries from 0, as if nothing were "
               "cached, so the mask hides cached keys from them."),
    ("C", 1): ("copy C's Q, K and V are GPT-2's own. Add up its weights along each axis: which one sums to 1?",
               "the projections are untouched. The changed line runs softmax along the queries, so each key's "
               "column of weights sums to 1 instead of each query's row."),
    ("C", 3): ("copy C adds the mask before softmax as GPT-2 does, and the future weights are 0. Add up its "
               "weights along each axis: which one sums to 1?",
               "the mask is right. The changed line runs softmax along the queries, so each key's column of "
               "weights sums to 1 instead of each query's row."),
    ("C", 4): ("copy C's weights multiply V as GPT-2's do. Add up the weights along each axis: which one sums "
               "to 1?",
               "P · V is computed as before, but P is not GPT-2's: the changed line runs softmax along the "
               "queries, so each key's column sums to 1 instead of each query's row."),
    ("D", 2): ("copy D makes its table from the keys it receives, queries on the rows. Are those keys the keys? "
               "Follow them through the cache.",
               "the table is built as before, from what arrives. The changed line hands the cache the values "
               "where it expects the keys, and back: K and V come out swapped."),
    ("D", 3): ("copy D's mask is GPT-2's own, added before softmax. What goes into the cache, and what comes "
               "back out?",
               "the mask is untouched. The changed line hands the cache the values where it expects the keys, "
               "and back: every block scores with V and averages K."),
    ("D", 4): ("copy D's weights multiply what it holds as the values. Follow K and V through the cache: are "
               "they still the keys and the values?",
               "the product is as before, but its operands are not: the changed line hands the cache the values "
               "where it expects the keys, so the weights average K and the scores use V."),
}
_WHICH_MISTAKES = {key: Mistake(f"{key[0]}-not-{key[1]}", hint, more=more) for key, (hint, more) in _WHICH.items()}
WHICH_OTHER = Mistake(
    "wrong-question", "copy {letter} passes the check of question {given} ({question}): ask it the other questions.",
    more="the checker planted copy {letter} in a small GPT-2 and asked it question {given}: that check passes. "
         "Read the changed line again and ask which step of the path it belongs to.")


def _caught(letter: str) -> list[int]:
    """The questions whose check copy ``letter`` of GPT-2's code fails (gpt2_reading.ask_gpt2)."""
    from ..gpt2_reading import ask_gpt2, planted_bug

    with planted_bug(letter):
        return ask_gpt2(_gpt2()).failed()


@checker(kind="predict",
         mistakes=[WHICH_STUB, WHICH_TYPE, WHICH_KEYS, WHICH_NUMBER, WHICH_OTHER, *_WHICH_MISTAKES.values()])
def check_which_question(answers) -> Verdict:
    """``answers``: {"A": q, "B": q, "C": q, "D": q}, the question (1–4) whose check each planted copy of GPT-2's
    code fails. The checker plants each copy in a small GPT-2 and asks it the four questions (ask_gpt2)."""
    from ..gpt2_reading import PLANTED, QUESTIONS

    letters = list(PLANTED)
    if answers is ... or answers is None:
        return named(WHICH_STUB)
    if not isinstance(answers, dict):
        return named(WHICH_TYPE, got=f"{type(answers).__name__} {_shown(answers)}")
    if sorted(map(repr, answers)) != sorted(map(repr, letters)):
        return named(WHICH_KEYS, letters=", ".join(letters), keys=", ".join(map(repr, answers)) or "none")
    if all(v is ... or v is None for v in answers.values()):
        return named(WHICH_STUB)
    for letter in letters:
        given = answers[letter]
        if isinstance(given, bool) or not isinstance(given, int) or given not in QUESTIONS:
            return named(WHICH_NUMBER, letter=letter, got=_shown(given))
    with _one_thread():
        caught = {letter: _caught(letter) for letter in letters}
    for letter in letters:
        if answers[letter] not in caught[letter]:
            mistake = _WHICH_MISTAKES.get((letter, answers[letter]), WHICH_OTHER)
            return named(mistake, letter=letter, given=answers[letter], question=QUESTIONS[answers[letter]])
    return Verdict(True, "each copy planted in a small GPT-2 and asked the four questions: "
                         + "; ".join(f"{letter} fails the check of question {caught[letter][0]} "
                                     f"({QUESTIONS[caught[letter][0]]})" for letter in letters) + ".")
