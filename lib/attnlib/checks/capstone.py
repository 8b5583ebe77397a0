"""Exercise checkers for the capstone: a bug hunt with the four reading questions.

``check_fixed_sublayer(fn)``: ``fn(X, ln_1, W_Q, W_K, W_V)`` → the single-head attention sublayer of a Pre-Norm
block without :func:`buggy_sublayer`'s four bugs, one per question.
``check_block_weights(fn)``, ``check_qkv_per_head(fn)``: ``fn(model, ids, l)`` → block l's attention weights, or its
per-head Q, K and V, caught by a hook on a GPT-2 and removed afterwards.
``check_gpt2_lines(lines)``: {question: the line of GPT-2's source that answers it}, confirmed by behaviour.
``check_which_question(answers)``: {planted copy: the question whose check it fails}.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math

import torch
from torch import nn

from .._validate import _integer, boundary
from ._core import Mistake, Verdict, _gen, _in_library, checker, judge, named, variants

__all__ = [
    "check_fixed_sublayer", "buggy_sublayer", "sublayer_with_bugs", "check_gpt2_lines", "check_which_question",
    "check_block_weights", "check_qkv_per_head",
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


def _sublayer(X, ln_1, W_Q, W_K, W_V, *, bugs=(), kv_source="ln", scale=True, keys_on_rows=False, blocked=1,
              transposed=False):
    """The sublayer with the planted ``bugs`` (a subset of 1…4) and a few other typical slips."""
    Xn = ln_1(X)
    Q = (X if kv_source == "all-x" else Xn) @ W_Q
    src = X if 1 in bugs or kv_source == "all-x" else Xn            # where K and V are read from
    K, V = src @ W_K, src @ W_V
    S = K @ Q.transpose(-2, -1) if keys_on_rows else Q @ K.transpose(-2, -1)
    Z = S / math.sqrt(X.shape[-1] if scale == "d_model" else Q.shape[-1]) if scale else S
    T = Z.shape[-1]
    ones = torch.ones(T, T, dtype=torch.bool)
    future = ones.tril(-1) if blocked == "past" else ones.triu(blocked)
    dim = -2 if 2 in bugs else -1
    if 3 in bugs:
        P = torch.softmax(Z, dim=dim).masked_fill(future, 0.0)
    else:
        P = torch.softmax(Z.masked_fill(future, float("-inf")), dim=dim)
    return (P.transpose(-2, -1) if transposed else P) @ (K if 4 in bugs else V)


def _sublayer_with_bugs_args(questions) -> dict:
    numbers = tuple(_integer(q, f"question {i + 1} of sublayer_with_bugs", "a question number 1, 2, 3 or 4")
                    for i, q in enumerate(questions))
    bad = sorted(set(numbers) - set(_BUGS))
    if bad:
        raise ValueError(f"questions must be among 1, 2, 3, 4, got {bad}")
    return {"questions": numbers}


@boundary(_sublayer_with_bugs_args)
def sublayer_with_bugs(*questions: int):
    """The attention sublayer with the bugs of the given questions (1–4) planted: ``sublayer_with_bugs()``
    is the correct sublayer, ``sublayer_with_bugs(1, 2, 3, 4)`` computes what :func:`buggy_sublayer` computes."""
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
    ("scale-d-model", dict(scale="d_model"),
     "your scores are divided by the square root of which width? Q and K have d_k columns, X has d_model.",
     "you divide by √d_model, the width of X; the scale is √d_k, the width of a query and a key."),
    ("q3-mask-diagonal", dict(blocked=0),
     "question 3: may a query read its own position? Look at the first row of your weights.",
     "your mask also blocks the diagonal, so each query loses its own key and the first query has no key left "
     "(its row comes out NaN). Only the keys after the query are blocked."),
    ("q3-mask-past", dict(blocked="past"),
     "question 3: which keys does your mask block, the earlier ones or the later ones?",
     "your mask blocks every key before the query and leaves the future open. The blocked entries are those "
     "above the diagonal, j > i."),
    ("q2-transposed-weights", dict(bugs=(2,), transposed=True),
     "question 2: your rows now sum to 1, but does row i of the weights that meet V still belong to query i? "
     "Which positions does output 0 read?",
     "you kept softmax over the queries and transposed P afterwards, so row i of what meets V is column i of "
     "the table: how key i is shared among the queries, with the mask on the wrong side. Run softmax over the "
     "keys of each query's row and use P as it is."),
])


def _sublayer_cases() -> list[tuple]:
    """X far from normalised, an ln_1 that is not the identity; two batch axes in float64."""
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
    """``fn(X, ln_1, W_Q, W_K, W_V)``: buggy_sublayer without its four bugs; each bug left is named."""
    return judge(fn, _sublayer_cases(), lambda X, ln_1, *W: _sublayer(X, ln_1, *W), _SUBLAYER_MISTAKES,
                 success="Q, K, V all from ln_1(X), queries on the rows with softmax over the keys, "
                         "the mask before softmax, the weights times V.")


# --- GPT-2's code: quote the line that answers each question --------------------------------------------------------

@functools.cache
def _gpt2(biased: bool = False):
    """The small GPT-2 the checkers change, built once; ``biased``: random c_attn biases, for the spies."""
    from ..gpt2_reading import tiny_gpt2

    model, g = tiny_gpt2(seed=0), _gen(30)
    for block in model.transformer.h if biased else ():
        block.attn.c_attn.bias.copy_(torch.randn(48, generator=g, dtype=torch.float64))
    return model


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
    """``lines``: {question: a line of GPT-2's source}, each confirmed by changing it in a small GPT-2."""
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

_WHICH_LINE = {   # what each copy's changed line does: the second level of every wrong question for that copy
    "A": "the changed line gives the queries their head axis by a reshape alone: (B, T, h·d_head) read straight as "
         "(B, h, T, d_head), without the transpose, so a head's query row i mixes the columns of other positions, "
         "some of them later ones. The mask is intact; the queries are not.",
    "B": "on a whole prompt copy B gives GPT-2's logits; only a step with a cache differs. The changed line numbers "
         "the new queries from 0, as if nothing were cached, so the mask hides cached keys from them.",
    "C": "the projections and the mask are untouched. The changed line runs softmax along the queries, so each "
         "key's column of weights sums to 1 instead of each query's row.",
    "D": "the changed line hands the cache the values where it expects the keys, and back: K and V come out "
         "swapped, so every block scores with V and averages K.",
}
_WHICH = {   # (copy, the question answered) → the first hint, for each question that does not catch it
    ("A", 2): "copy A still makes its table from the queries and keys it receives, with softmax along the keys. "
              "Is what it receives right? Which position's input does each row of a head's queries come from?",
    ("A", 3): "the future does leak in copy A, but the mask is built and added as before: the lowest float sits "
              "at every j > i. Which position's input does each row of a head's queries come from?",
    ("A", 4): "copy A's weights still multiply the values it receives. Look earlier: which position's input does "
              "each row of a head's queries come from?",
    ("B", 1): "copy B's Q, K and V are the right projections, the cached keys and values included. What changes "
              "between a whole prompt, where B is right, and a cached step?",
    ("B", 2): "copy B still puts the queries on the rows and runs softmax along the keys. With a cache, at which "
              "positions does its mask think the new queries stand?",
    ("B", 4): "copy B's weights still multiply V. With a cache, at which positions does its mask think the new "
              "queries stand?",
    ("C", 1): "copy C's Q, K and V are GPT-2's own. Add up its weights along each axis: which one sums to 1?",
    ("C", 3): "copy C adds the mask before softmax as GPT-2 does, and the future weights are 0. Add up its weights "
              "along each axis: which one sums to 1?",
    ("C", 4): "copy C's weights multiply V as GPT-2's do. Add up the weights along each axis: which one sums to 1?",
    ("D", 2): "copy D makes its table from the keys it receives, queries on the rows. Are those keys the keys? "
              "Follow them through the cache.",
    ("D", 3): "copy D's mask is GPT-2's own, added before softmax. What goes into the cache, and what comes back "
              "out?",
    ("D", 4): "copy D's weights multiply what it holds as the values. Follow K and V through the cache: are they "
              "still the keys and the values?",
}
_WHICH_MISTAKES = {key: Mistake(f"{key[0]}-not-{key[1]}", hint, more=f"question {key[1]}'s check passes: "
                                + _WHICH_LINE[key[0]]) for key, hint in _WHICH.items()}
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
    """``answers``: {copy letter: the question (1–4) whose check that planted copy of GPT-2 fails}."""
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


# --- spies on GPT-2: forward hooks that the learner writes ---------------------------------------------------------

def _spy(model, module, ids):
    """(first input, output) of ``module`` while ``model`` reads ``ids``, by a hook removed afterwards."""
    seen = {}
    hook = module.register_forward_hook(lambda mod, args, out: seen.update(x=args[0], out=out))
    with torch.no_grad():
        model(ids)
    hook.remove()
    return seen["x"], seen["out"]


def _weights(model, ids, l, *, shift=0, first=False, what="weights", keys_on_rows=False, mean=False):
    """Block l's weights P (B, h, T, T), or with a switch another tensor of the attention, of another block."""
    block = model.transformer.h[0 if first else l - 1 + shift]
    x, out = _spy(model, block if what.startswith("block") else block.attn, ids)
    if what in ("block", "output", "block-whole"):
        return out if what == "block-whole" else out[1 if what == "block" else 0]
    P = out[1].softmax(-1) if what == "softmax-again" else out[1]
    if what in ("softmax-input", "no-mask"):
        from ..gpt2_reading import _heads, _projections

        Q, K, _ = (_heads(t, model.config.n_head) for t in _projections(block.attn, x))
        Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])                 # (B, h, T, T)
        future = torch.ones(Z.shape[-2:], dtype=torch.bool).triu(1)
        P = Z.softmax(-1) if what == "no-mask" else Z.masked_fill(future, torch.finfo(Z.dtype).min)
    P = P.transpose(-2, -1) if keys_on_rows else P
    return P.mean(1) if mean else P


def _qkv(model, ids, l, *, shift=0, first=False, heads="transpose", order=(0, 1, 2), bias=True, interleaved=False,
         scaled=False, ln=True):
    """Block l's Q, K, V, each (B, h, T, d_head), from c_attn's output, or with a switch a planted slip."""
    block = model.transformer.h[0 if first else l - 1 + shift]
    attn = block.attn
    y = _spy(model, attn.c_attn, ids)[1] if ln else attn.c_attn(_spy(model, block, ids)[0])
    y = y - (0 if bias else attn.c_attn.bias)                                     # (B, T, 3·d_model)
    B, T, d, h = *y.shape[:2], y.shape[-1] // 3, model.config.n_head
    parts = (y.reshape(B, T, d, 3).unbind(-1) if interleaved == "columns" else
             y.reshape(B, T, h, 3, d // h).unbind(3) if interleaved else y.split(d, dim=-1))
    parts = [parts[i].reshape(B, T, d) for i in order]
    parts[0] = parts[0] / math.sqrt(d // h) if scaled else parts[0]
    split = {"none": lambda p: p, "reshape": lambda p: p.reshape(B, h, T, d // h),
             "unmoved": lambda p: p.reshape(B, T, h, d // h),
             "heads-last": lambda p: p.reshape(B, T, d // h, h).permute(0, 3, 1, 2),
             "transpose": lambda p: p.reshape(B, T, h, d // h).transpose(1, 2)}[heads]
    return tuple(split(p) for p in parts)


_NEXT_BLOCK = ("next-block", dict(shift=1),
               "which block did you hook? The book numbers the blocks 1 … L; the model's list counts from 0.",
               "this is block l + 1: the model's list of blocks counts from 0, the book's blocks from 1.")
_FIRST_BLOCK = ("first-block", dict(first=True),
                "right for l = 1 only: for l = 2 you return block 1's. Where does your function use l?",
                "whatever l is, your answer comes from block 1: a hook on every block that keeps the first catch, "
                "or a fixed index, gives that. Hook block l alone (the model's list counts from 0).")
_WEIGHTS_MISTAKES = variants(_weights, [
    _NEXT_BLOCK, _FIRST_BLOCK,
    ("attention-output", dict(what="output"),
     "the attention module gives back more than one thing. Which of them has one row and one column per "
     "position, for each head?",
     "this is the attention's output (B, T, d_model), the first thing its forward returns; the weights are the "
     "second."),
    ("block-output", dict(what="block"),
     "which module did you hook? A block returns its output X_l only; the weights come from a module inside it.",
     "the hook sits on the whole block, whose output is one tensor: indexing it takes a batch row, not the "
     "weights. Hook the block's attention module."),
    ("block-output", dict(what="block-whole"),
     "which module did you hook? A block returns its output X_l only; the weights come from a module inside it.",
     "the hook sits on the whole block, whose output is X_l (B, T, d_model), not the weights. Hook the block's "
     "attention module, which returns its weights beside its output."),
    ("softmax-again", dict(what="softmax-again"),
     "your rows sum to 1, but are they flatter than the attention's own? What did the hook catch: scores, or "
     "weights already?",
     "the attention module returns the weights P themselves, after softmax; running softmax on them again "
     "flattens every row. Return what the hook caught."),
    ("before-softmax", dict(what="softmax-input"),
     "do the rows of what you return sum to 1? What did you catch, softmax's input or its output?",
     "this is what softmax received, the scaled scores plus the mask (the lowest float at the future), not the "
     "weights it made of them."),
    ("no-mask", dict(what="no-mask"),
     "is any weight of a query on a later key 0 in what you return? Where did your table lose the mask?",
     "your weights are softmax of the unmasked scores: made by hand from Q and K, they miss the mask that "
     "GPT-2 adds. Catch the weights the attention itself made."),
    ("keys-on-rows", dict(keys_on_rows=True),
     "which axis of your table sums to 1? Entry (i, j) should be query i's weight on key j.",
     "your table is transposed: each column sums to 1, so the keys are on the rows."),
    ("mean-over-heads", dict(mean=True),
     "count the axes of what you return: where did the heads go?",
     "you averaged the heads; the answer keeps one table per head, (B, h, T, T)."),
])
_QKV_MISTAKES = variants(_qkv, [
    _NEXT_BLOCK, _FIRST_BLOCK,
    ("no-transpose", dict(heads="reshape"),
     "question 1: does row t of a head's queries come from position t's input alone? Check one head's row "
     "against the unsplit Q.",
     "the head axis came from a reshape alone: reading the projection's memory straight as heads mixes the "
     "columns of several positions into one row. Split the last axis into heads where it stands, then move the "
     "heads' axis before the positions'."),
    ("heads-not-split", dict(heads="none"),
     "the core receives each of Q, K and V per head. How many axes should each have?",
     "your Q, K and V still hold every head side by side in their last axis: split it into h heads of width "
     "d_head, and put the heads' axis before the positions'."),
    ("split-by-heads-first", dict(interleaved=True),
     "in what order does c_attn lay out its 3·d_model columns: all of Q, then K, then V, or per head?",
     "you split every head's columns in three; c_attn's columns hold all of Q first, then all of K, then all "
     "of V, and each is split into heads afterwards."),
    ("heads-not-moved", dict(heads="unmoved"),
     "your heads are split, but in which order do the axes come? The core receives (B, h, T, d_head).",
     "each of your Q, K and V has the positions' axis before the heads' axis: the heads' axis has to move in "
     "front of it."),
    ("head-columns-order", dict(heads="heads-last"),
     "which columns of Q belong to head 0: a block of d_head neighbours, or every h-th column?",
     "you split each row of d_model columns with the head index varying fastest, so head 0 takes every h-th "
     "column. GPT-2 gives each head a block of d_head neighbouring columns: the head index varies slowest."),
    ("split-interleaved", dict(interleaved="columns"),
     "in what order does c_attn lay out its 3·d_model columns: all of Q, then K, then V, or alternating?",
     "you took every third column for Q (and the next ones for K and V); c_attn's columns hold all of Q first, "
     "then all of K, then all of V."),
    ("q-scaled", dict(scaled=True),
     "your K and V are right; is your Q what c_attn made, or has it been changed since?",
     "you divided Q by √d_head. The core receives Q as c_attn makes it and applies the scale to the scores."),
    ("no-ln_1", dict(ln=False),
     "question 1: which input does c_attn read: the block's input X, or LN₁(X)?",
     "you projected the block's input itself; c_attn reads the output of the block's ln_1. Catch what c_attn "
     "gives, or project what ln_1 gives."),
    ("q-k-swapped", dict(order=(1, 0, 2)),
     "which third of c_attn's output is the queries?",
     "your Q and K are swapped: the first third of c_attn's columns is Q, the second K."),
    ("no-bias", dict(bias=False),
     "GPT-2's projections are x W + b. Did all of that reach your Q, K and V?",
     "the bias of c_attn is missing: catch what the projection gives, or add its bias."),
])
HOOK_LEFT = Mistake(
    "hook-left", "the values are right, but what does the model keep from your function? Count its hooks after.",
    more="your hook stays on the module after your function returns, so every later pass of the model runs it "
         "again. Remove it when the pass is done, also when the pass fails.")


def _judge_spy(fn, reference, mistakes, success) -> Verdict:
    """judge ``fn(model, ids, l)``, noting after each call whether a hook of the learner's is left on the model."""
    g, left, model = _gen(31), [], _gpt2(biased=True)
    cases = [(model, torch.randint(0, 32, (1, 6), generator=g), 1),      # block 1 of one prompt,
             (model, torch.randint(0, 32, (2, 5), generator=g), 2)]      # block 2 of two

    @functools.wraps(fn)
    def watched(model, ids, l):
        try:
            return fn(model, ids, l)
        finally:   # transformers keeps hooks of its own
            hooks = [getattr(h, "func", h) for m in model.modules()
                     for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
            codes = [getattr(h, "__code__", None) or getattr(h.__call__, "__code__", None) for h in hooks]
            left.extend(c for c in codes if c is None or not _in_library(c.co_filename))

    with _one_thread():
        verdict = judge(watched if callable(fn) else fn, cases, reference, mistakes, success=success)
    return named(HOOK_LEFT) if verdict.ok and left else verdict


@checker(mistakes=[*_WEIGHTS_MISTAKES, HOOK_LEFT])
def check_block_weights(fn) -> Verdict:
    """``fn(model, ids, l)``: block l's attention weights (B, h, T, T), by a hook removed afterwards."""
    return _judge_spy(fn, _weights, _WEIGHTS_MISTAKES, "block l's weights, a (T, T) table per head, no hook left.")


@checker(mistakes=[*_QKV_MISTAKES, HOOK_LEFT])
def check_qkv_per_head(fn) -> Verdict:
    """``fn(model, ids, l)``: block l's Q, K, V, each (B, h, T, d_head), by a hook removed afterwards."""
    return _judge_spy(fn, _qkv, _QKV_MISTAKES, "block l's Q, K and V, each (B, h, T, d_head), no hook left.")
