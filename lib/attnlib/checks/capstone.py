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

from .._validate import _integer, _show, boundary
from ._core import Mistake, Verdict, _gen, _in_library, checker, judge, named, variants

__all__ = ["check_fixed_sublayer", "buggy_sublayer", "sublayer_with_bugs", "check_gpt2_lines", "check_which_question",
           "check_block_weights", "check_qkv_per_head"]


# --- the suspects, as the learner reads them ----------------------------------------------------------------------

def buggy_sublayer(X, ln_1, W_Q, W_K, W_V):
    """Attention sublayer of a Pre-Norm block, one head, with four bugs.

    X (..., T, d_model) → O (..., T, d_v).
    """
    Q = ln_1(X) @ W_Q                                     # (..., T, d_k)
    K, V = (X @ W for W in (W_K, W_V))                    # (..., T, d_k), (..., T, d_v)
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., T, T): the scaled scores
    T = Z.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    P = torch.softmax(Z, dim=-2).masked_fill(future, 0.0)
    return P @ K


# --- the sublayer with any set of the four bugs ------------------------------------------------------------------

_BUGS = {   # each bug: its label, its question, the first hint (where to look) and the second (what is wrong)
    1: ("q1-kv-from-x", "where do Q, K and V come from?",
        "do all three projections read the same input, and is it the one a Pre-Norm block hands to its attention?",
        "Q reads the normalised input, K and V read X itself; all three must be projections of the output of ln_1."),
    2: ("q2-softmax-axis", "which axis is the query?",
        "add up your weights along each axis. Which axis sums to 1, and which should: each query's weights over "
        "the keys, or each key's over the queries?",
        "softmax normalises over the query axis, so each key's column sums to 1. It must run along a row."),
    3: ("q3-mask-after-softmax", "where is the mask added?",
        "do the rows of your weights still sum to 1? What does softmax see at the future entries?",
        "the future is zeroed after softmax, so the rows no longer sum to 1; blocked scores must be −∞ before it."),
    4: ("q4-weights-times-K", "what do the weights multiply?",
        "each output row averages one kind of vector over the positions. Which kind do your weights average?",
        "the weights multiply K, which only scores the match; what a position passes on is its value."),
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
    ones = torch.ones(Z.shape[-2:], dtype=torch.bool)
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
    """The sublayer with the bugs of the given questions (1–4): ``sublayer_with_bugs()`` is the correct one,
    ``sublayer_with_bugs(1, 2, 3, 4)`` computes what :func:`buggy_sublayer` computes."""
    bugs = frozenset(questions)

    def sublayer(X, ln_1, W_Q, W_K, W_V):
        return _sublayer(X, ln_1, W_Q, W_K, W_V, bugs=bugs)

    sublayer.__name__ = "sublayer_with_bugs_" + "_".join(map(str, sorted(bugs)))
    return sublayer


def _combination_mistake(bugs: tuple[int, ...]) -> Mistake:
    if len(bugs) == len(_BUGS):
        return Mistake("unchanged", "this still computes what buggy_sublayer computes, all four bugs in place. Ask "
                                    "the reading questions one at a time, fix what each finds, and check again.",
                       sublayer_with_bugs(*bugs),
                       more="all four bugs are in place: where do K and V come from, over which axis does softmax "
                            "run, is the mask on the scores or the weights, what do they multiply?")
    label, question, hint, more = _BUGS[bugs[0]]
    fixed = [q for q in _BUGS if q not in bugs]
    lead = ("one bug is left, and it breaks " if len(bugs) == 1 else
            f"you fixed question{'s' if len(fixed) > 1 else ''} {' and '.join(map(str, fixed))}; "
            f"{len(bugs)} bugs are left. The first breaks ") + f"question {bugs[0]} ({question}): "
    return Mistake(label, lead + hint, sublayer_with_bugs(*bugs), more=lead + more)


_SUBLAYER_MISTAKES = [_combination_mistake(bugs) for n in range(len(_BUGS), 0, -1)
                      for bugs in itertools.combinations(sorted(_BUGS), n)] + variants(_sublayer, [
    ("q1-all-from-x", dict(kv_source="all-x"),
     "Q, K and V agree with one another, but which input does a Pre-Norm block hand to its attention?",
     "all three read X and skip LN₁; the attention of a Pre-Norm block reads the normalised input."),
    ("keys-on-rows", dict(keys_on_rows=True),
     "which axis of your score table holds the queries? Does entry (i, j) score query i against key j?",
     "K times Q transposed puts the keys on the rows; with queries on the rows the mask and softmax act per query."),
    ("no-scale", dict(scale=False), "which step of the formula keeps the scores from growing with d_k?",
     "the division by the square root of d_k is missing."),
    ("scale-d-model", dict(scale="d_model"),
     "your scores are divided by the square root of which width? Q and K have d_k columns, X has d_model.",
     "you divide by √d_model, the width of X; the scale is √d_k, the width of a query and a key."),
    ("q3-mask-diagonal", dict(blocked=0),
     "question 3: may a query read its own position? Look at the first row of your weights.",
     "your mask also blocks the diagonal: each query loses its own key, the first has none left (its row is NaN)."),
    ("q3-mask-past", dict(blocked="past"), "question 3: does your mask block the earlier keys or the later ones?",
     "your mask blocks the keys before each query and leaves the future open; the blocked entries are j > i."),
    ("q2-transposed-weights", dict(bugs=(2,), transposed=True),
     "question 2: your rows now sum to 1, but does row i of the weights that meet V still belong to query i?",
     "softmax still runs over the queries: transposed, row i shares key i among them, the mask on the wrong side."),
])


def _sublayer_cases() -> list[tuple]:
    """X far from normalised, an ln_1 that is not the identity; two batch axes in float64."""
    g = _gen(2017)
    cases = []
    for shape, d_k, d_v, dtype in (((6, 8), 4, 4, torch.float32),          # d_k = d_v lets P @ K run silently
                                   ((2, 5, 8), 4, 3, torch.float32),
                                   ((2, 3, 4, 8), 4, 5, torch.float64)):
        X = 2.0 * torch.randn(*shape, generator=g, dtype=dtype) + 0.5
        ln_1 = nn.LayerNorm(8, dtype=dtype).requires_grad_(False)
        ln_1.weight.copy_(0.5 + torch.rand(8, generator=g, dtype=dtype))
        ln_1.bias.copy_(0.3 * torch.randn(8, generator=g, dtype=dtype))
        cases.append((X, ln_1, *(torch.randn(8, n, generator=g, dtype=dtype) for n in (d_k, d_k, d_v))))
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


def _answer_dict(answer, keys, stub: Mistake, what: str, what_each: str) -> Verdict | None:
    """The verdict on an answer that is not yet a dict with exactly ``keys``, not all of them still ``...``."""
    if answer is ... or answer is None:
        return named(stub)
    if not isinstance(answer, dict):
        return named(DICT_TYPE, got=_show(answer), what=what, what_each=what_each)
    if sorted(map(repr, answer)) != sorted(map(repr, keys)):
        return named(DICT_KEYS, letters=", ".join(map(repr, keys)), keys=", ".join(map(repr, answer)) or "none")
    return named(stub) if all(v is ... or v is None for v in answer.values()) else None


def _line_mistake(label: str, hint: str, more: str) -> Mistake:
    return Mistake(label, "question {q} ({question}): " + hint, more="question {q} ({question}): " + more)


LINES_STUB = Mistake(
    "stub", "quote a line for each question first: replace each ... with one line of the source printed above, "
            "in quotes.",
    more="for each question, copy whole the one line of the printed source that does its step, in quotes.")
DICT_TYPE = Mistake("type", "the answer is a dict from {what}, as in the stub; got {got}.",
                    more="keep the stub's dict: its keys, each mapped to {what_each}; got {got}.")
DICT_KEYS = Mistake("keys", "the dict needs exactly the stub's keys, {letters}; it has {keys}.",
                    more="keep the stub's keys, {letters}, written as there, one answer each; the dict has {keys}.")
_PRODUCT = "Quote the line of the matrix product of the queries and the transposed keys."
_LINE_ROWS = [   # (label, hint, second level) for any question, then (question, what the line computes, …)
    ("missing", "no line yet: replace its ... with a line of the printed source, in quotes.",
     "this question still has the stub's ... : copy whole the line that does its step, in quotes."),
    ("not-a-string", "quote the line as a string, got {got}.",
     "each answer is the text of one line, in quotes, as the printed source has it; got {got}."),
    ("several-lines", "quote one line, not several. Which single line does the step?",
     "the checker changes one line of GPT-2 and watches what happens: quote the one that does the step."),
    ("not-in-source", "this line is not in the source printed above. Copy one whole line as it stands.",
     "a line is found when it equals a printed one, end spaces aside: not cut short, joined, or retyped."),
    ("not-a-statement", "this line continues a statement, opens a block, or is a comment. Which line does the work?",
     "an if or a def, a comment, or a statement's second line cannot change alone: quote a statement's first line."),
    ("never-runs", "this line sits in a branch GPT-2 does not take here. Which line runs on every forward pass?",
     "the line is for another configuration (cross-attention, an argument left at its default): it never ran."),
    ("unconfirmed", "this line computes {what}, but changing it did not change GPT-2 the way the answer predicts.",
     "the line holds {what} only inside what it returns: quote the line where that value is first computed."),
    (1, "ln_1", "this line makes LN₁(X), what attention reads. Where are Q, K and V made from it?",
     "the attention module turns LN₁(X) into all three with one fused projection: quote that line."),
    (1, "part-of-qkv", "after this line runs it holds {which}, not all three of Q, K and V. Where are all three made?",
     "this line reshapes or gathers {which}; all three were made before, together, by one projection."),
    (1, "other", "nothing this line computes is Q, K or V (compared with LN₁(X) W + b of block 0). Which line is?",
     "none of its values matched Q, K and V in either layout; look for the fused projection of the attention."),
    (2, "masked-scores", "this line's table already holds the mask: an earlier line laid out its rows. Which one?",
     "the order of the two factors of one matrix product makes the rows queries. " + _PRODUCT),
    (2, "weights", "softmax runs along the last axis here because an earlier line put the keys there. Which?",
     "the table was made with the queries first and the keys second. " + _PRODUCT),
    (2, "qkv", "this line makes Q, K and V, before any score exists. Which line multiplies queries and keys?",
     "the score table is made later, in the attention core. " + _PRODUCT),
    (2, "part-of-qkv", "this line handles {which}, before any score exists. Which line multiplies queries and keys?",
     "this line only reshapes or gathers {which}; the table is made later, in the attention core. " + _PRODUCT),
    (2, "other", "nothing this line computes is the table q_i · k_j / √d_head of block 0. Which line makes it?",
     "none of its values matched the whole table, future entries included; look in the attention core."),
    (3, "mask", "this line builds the mask, which keys each query may read, but the scores are not touched here. "
                "Where does the mask meet them?",
     "the mask is built once per pass and handed to every block; the attention core adds it to the scores."),
    (3, "scores", "this line's table has no mask in it yet. Which line puts the mask on it?",
     "these scaled scores still hold every future entry; the next step adds the mask, before softmax."),
    (3, "weights", "softmax already receives masked scores here. Which earlier line put the mask on them?",
     "the future weights are exactly 0 because softmax received masked scores: quote the line that masked them."),
    (3, "other", "nothing this line computes is the scaled scores plus the mask (the lowest float where j > i).",
     "none of its values matched the masked scores; the mask is built elsewhere and the attention core adds it."),
    (4, "weighted-values-rearranged", "this line only rearranges a weighted sum made before. Which line makes it?",
     "the product of the weights with the values was made one step before; this line moves its axes."),
    (4, "attention-output", "this line mixes the heads' outputs with W_O, after the weights were applied. Where?",
     "W_O (c_proj) acts on the concatenated heads, after each head's weights averaged the values."),
    (4, "weights", "this line makes the weights. Where are they multiplied, and by what?",
     "the weights are made here and multiplied a few lines later: quote that product."),
    (4, "other", "nothing this line computes is P · V (the weights times the values of block 0, per head).",
     "none of its values matched P · V per head; look in the attention core, after softmax."),
]
_LINE_MISTAKES = {m.label: m for m in (_line_mistake(*row) if isinstance(row[0], str) else
                                       _line_mistake(f"q{row[0]}-{row[1]}", *row[2:]) for row in _LINE_ROWS)}
_WHAT = {1: "Q, K and V", 2: "the scaled scores", 3: "the scaled scores with the mask added", 4: "P · V"}

_SO_FAR = {2: "question 1", 3: "questions 1 and 2", 4: "questions 1, 2 and 3"}
_CONFIRMED = {1: "Q, K and V made from X instead of LN₁(X) at line 1 give GPT-2 without LN₁",
    2: "line 2's table transposed gives GPT-2 with W_Q and W_K swapped",
    3: "without line 3, GPT-2 computes what the library's GPT computes with causal=False",
    4: "P · K in place of line 4's P · V gives GPT-2 with W_V replaced by W_K",
}


def _judge_line(q: int, line) -> tuple[Mistake, dict] | None:
    """None when ``line`` answers question ``q`` by behaviour; else the mistake and its fields."""
    from ..gpt2_reading import _EXPECTED_KIND, gpt2_sources, line_finding
    from ..reading import find_line

    if line is ... or line is None:
        return _LINE_MISTAKES["missing"], {}
    if not isinstance(line, str):
        return _LINE_MISTAKES["not-a-string"], {"got": _show(line)}
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
    if _EXPECTED_KIND[q] in finding.kinds:
        return None if finding.confirmed else (_LINE_MISTAKES["unconfirmed"], {"what": _WHAT[q]})
    kind = next((k for k in sorted(finding.kinds) if f"q{q}-{k}" in _LINE_MISTAKES), "other")
    return _LINE_MISTAKES[f"q{q}-{kind}"], {"which": finding.which}


@checker(kind="predict", mistakes=[LINES_STUB, DICT_TYPE, DICT_KEYS, *_LINE_MISTAKES.values()])
def check_gpt2_lines(lines) -> Verdict:
    """``lines``: {question: a line of GPT-2's source}, each confirmed by changing it in a small GPT-2."""
    from ..gpt2_reading import QUESTIONS

    if (verdict := _answer_dict(lines, [1, 2, 3, 4], LINES_STUB, "each question number to one line of the source",
                                 "one line of GPT-2's source in quotes")) is not None:
        return verdict
    with _one_thread():
        for q in (1, 2, 3, 4):
            if (judged := _judge_line(q, lines[q])) is not None:
                suffix = f" (Confirmed so far: {_SO_FAR[q]}.)" if q > 1 else ""
                return named(judged[0], suffix, q=q, question=QUESTIONS[q], **judged[1])
    return Verdict(True, "each line found in the installed source and confirmed by changing it in a small GPT-2: "
                         + "; ".join(f"({q}) {_CONFIRMED[q]}" for q in (1, 2, 3, 4)) + ".")


# --- GPT-2's code with a planted bug: which question catches it? ---------------------------------------------------

WHICH_STUB = Mistake("stub", "say first which question catches each copy's bug: replace each ... with 1, 2, 3 or 4.",
    more="find the changed line of each copy and ask which step of the path it belongs to: that is its question.")
WHICH_NUMBER = Mistake(
    "not-a-question", "copy {letter}: the answer is the number of a question, 1, 2, 3 or 4; got {got}.",
    more="copy {letter}: give the number, 1 to 4, of the reading question whose check the copy fails; got {got}.")

_WHICH_LINE = {   # what each copy's changed line does: the second level of every wrong question for that copy
    "A": "the changed line reads the queries' (B, T, h·d_head) straight as (B, h, T, d_head), without the "
         "transpose: a head's query row i mixes other positions' columns, later ones too. The mask is intact.",
    "B": "copy B gives GPT-2's logits on a whole prompt; the changed line numbers the new queries of a cached "
         "step from 0, so the mask hides cached keys from them.",
    "C": "the projections and the mask are untouched; the changed line runs softmax along the queries, so each "
         "key's column of weights sums to 1 instead of each query's row.",
    "D": "the changed line hands the cache the values where it expects the keys, and back: every block scores "
         "with V and averages K.",
}
_QUERY_ROWS = "Which position's input does each row of a head's queries come from?"
_CACHED = "With a cache, at which positions does its mask think the new queries stand?"
_SUMS = "Add up its weights along each axis: which one sums to 1?"
_CACHE_PATH = "Follow K and V through the cache: do they come out as the keys and the values?"
_WHICH = {   # (copy, the question answered) → the first hint, for each question that does not catch it
    ("A", 2): "copy A makes its table, softmax along the keys, from what it receives. Is that right? " + _QUERY_ROWS,
    ("A", 3): "the future leaks in copy A, but its mask is built and added as before. " + _QUERY_ROWS,
    ("A", 4): "copy A's weights still multiply the values it receives. Look earlier. " + _QUERY_ROWS,
    ("B", 1): "copy B's Q, K and V are right, cache included. What changes between a whole prompt and a cached step?",
    ("B", 2): "copy B still puts the queries on the rows and runs softmax along the keys. " + _CACHED,
    ("B", 4): "copy B's weights still multiply V. " + _CACHED,
    ("C", 1): "copy C's Q, K and V are GPT-2's own. " + _SUMS,
    ("C", 3): "copy C adds the mask before softmax as GPT-2 does. " + _SUMS,
    ("C", 4): "copy C's weights multiply V as GPT-2's do. " + _SUMS,
    ("D", 2): "copy D makes its table from the keys it receives, queries on the rows. " + _CACHE_PATH,
    ("D", 3): "copy D's mask is GPT-2's own, added before softmax. " + _CACHE_PATH,
    ("D", 4): "copy D's weights multiply what it holds as the values. " + _CACHE_PATH,
}
_WHICH_MISTAKES = {key: Mistake(f"{key[0]}-not-{key[1]}", hint, more=f"question {key[1]}'s check passes: "
                                + _WHICH_LINE[key[0]]) for key, hint in _WHICH.items()}
WHICH_OTHER = Mistake(
    "wrong-question", "copy {letter} passes the check of question {given} ({question}): ask it the other questions.",
    more="planted in a small GPT-2, copy {letter} passes question {given}'s check: which step is its changed line?")


def _caught(letter: str) -> list[int]:
    """The questions whose check copy ``letter`` of GPT-2's code fails (gpt2_reading.ask_gpt2)."""
    from ..gpt2_reading import ask_gpt2, planted_bug

    with planted_bug(letter):
        return ask_gpt2(_gpt2()).failed()


@checker(kind="predict",
         mistakes=[WHICH_STUB, DICT_TYPE, DICT_KEYS, WHICH_NUMBER, WHICH_OTHER, *_WHICH_MISTAKES.values()])
def check_which_question(answers) -> Verdict:
    """``answers``: {copy letter: the question (1–4) whose check that planted copy of GPT-2 fails}."""
    from ..gpt2_reading import PLANTED, QUESTIONS

    if (verdict := _answer_dict(answers, list(PLANTED), WHICH_STUB, "each copy's letter to a question number",
                                 "the number (1 to 4) of the question whose check the copy fails")) is not None:
        return verdict
    for letter, given in answers.items():
        if isinstance(given, bool) or not isinstance(given, int) or given not in QUESTIONS:
            return named(WHICH_NUMBER, letter=letter, got=_show(given))
    with _one_thread():
        caught = {letter: _caught(letter) for letter in PLANTED}
    for letter, first in caught.items():
        if (given := answers[letter]) not in first:
            mistake = _WHICH_MISTAKES.get((letter, given), WHICH_OTHER)
            return named(mistake, letter=letter, given=given, question=QUESTIONS[given])
    return Verdict(True, "each copy planted in a small GPT-2 and asked the four questions: "
                         + "; ".join(f"{letter} fails the check of question {q[0]} ({QUESTIONS[q[0]]})"
                                     for letter, q in caught.items()) + ".")


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
                "whatever l is, your answer is block 1's: a fixed index, or the first catch of hooks on every block.")
_BLOCK_HOOKED = ("which module did you hook? A block returns its output X_l only; the weights come from one inside it.",
                 "the hook is on the whole block, whose output is X_l (B, T, d_model); hook its attention.")
_WEIGHTS_MISTAKES = variants(_weights, [_NEXT_BLOCK, _FIRST_BLOCK,
    ("block-output", dict(what="block"), *_BLOCK_HOOKED), ("block-output", dict(what="block-whole"), *_BLOCK_HOOKED),
    ("attention-output", dict(what="output"), "the attention module returns more than one thing: which is the weights?",
     "this is the attention's output (B, T, d_model), the first thing its forward returns; the weights come second."),
    ("softmax-again", dict(what="softmax-again"), "are your rows flatter than the attention's own? What did you catch?",
     "the attention module returns the weights after softmax; softmax again flattens every row."),
    ("before-softmax", dict(what="softmax-input"), "do your rows sum to 1? Is this softmax's input or its output?",
     "this is what softmax received, the scaled scores plus the mask (the lowest float at the future)."),
    ("no-mask", dict(what="no-mask"), "is any weight on a later key 0 in what you return? Where did the mask go?",
     "your weights are softmax of scores made by hand from Q and K, without GPT-2's mask. Catch the attention's own."),
    ("keys-on-rows", dict(keys_on_rows=True),
     "which axis of your table sums to 1? Entry (i, j) should be query i's weight on key j.",
     "your table is transposed: each column sums to 1, so the keys are on the rows."),
    ("mean-over-heads", dict(mean=True), "count the axes of what you return: where did the heads go?",
     "you averaged the heads; the answer keeps one table per head, (B, h, T, T)."),
])
_C_ATTN_ORDER = "in what order does c_attn lay out its 3·d_model columns: all of Q, then K, then V, or "
_QKV_MISTAKES = variants(_qkv, [_NEXT_BLOCK, _FIRST_BLOCK,
    ("no-transpose", dict(heads="reshape"),
     "question 1: does row t of a head's queries come from position t's input alone? Compare with the unsplit Q.",
     "reading the projection's memory straight as heads mixes several positions' columns into one row: split the "
     "last axis into heads, then move the heads' axis."),
    ("heads-not-split", dict(heads="none"), "the core receives Q, K and V per head. How many axes should each have?",
     "your last axis still holds every head side by side: split it into h heads of width d_head, heads first."),
    ("split-by-heads-first", dict(interleaved=True), _C_ATTN_ORDER + "per head?",
     "you split every head's columns in three; c_attn's columns hold all of Q, then K, then V, each split later."),
    ("heads-not-moved", dict(heads="unmoved"), "in which order do your axes come? The core receives (B, h, T, d_head).",
     "the positions' axis comes before the heads' axis: the heads' axis has to move in front of it."),
    ("head-columns-order", dict(heads="heads-last"), "which columns are head 0's: d_head neighbours, or every h-th?",
     "your head index varies fastest, so head 0 takes every h-th column; GPT-2 gives each head d_head neighbours."),
    ("split-interleaved", dict(interleaved="columns"), _C_ATTN_ORDER + "alternating?",
     "you took every third column for Q (and the next for K and V); c_attn's columns hold all of Q, then K, then V."),
    ("q-scaled", dict(scaled=True), "your K and V are right; is your Q what c_attn made, or changed since?",
     "you divided Q by √d_head; the core receives Q as c_attn makes it and scales the scores."),
    ("no-ln_1", dict(ln=False), "question 1: which input does c_attn read: the block's input X, or LN₁(X)?",
     "you projected the block's input itself; c_attn reads the output of the block's ln_1."),
    ("q-k-swapped", dict(order=(1, 0, 2)), "which third of c_attn's output is the queries?",
     "your Q and K are swapped: the first third of c_attn's columns is Q, the second K."),
    ("no-bias", dict(bias=False), "GPT-2's projections are x W + b. Did all of that reach your Q, K and V?",
     "the bias of c_attn is missing: catch what the projection gives, or add its bias."),
])
HOOK_LEFT = Mistake(
    "hook-left", "the values are right, but what does the model keep from your function? Count its hooks after.",
    more="your hook stays on the module, so every later pass runs it again: remove it, also when the pass fails.")


def _judge_spy(fn, reference, mistakes, success) -> Verdict:
    """judge ``fn(model, ids, l)``, noting after each call whether a hook of the learner's is left on the model."""
    g, left, model = _gen(31), [], _gpt2(biased=True)
    cases = [(model, torch.randint(0, 32, (1, 6), generator=g), 1),      # block 1 of one prompt,
             (model, torch.randint(0, 32, (2, 5), generator=g), 2)]      # block 2 of two

    def learners_hooks():
        """(hooks dict, key) of every hook on the model that is not transformers' own or the library's."""
        for m in model.modules():
            for hooks in (m._forward_hooks, m._forward_pre_hooks):
                for key, h in list(hooks.items()):
                    h = getattr(h, "func", h)
                    code = getattr(h, "__code__", None) or getattr(h.__call__, "__code__", None)
                    if code is None or not _in_library(code.co_filename):
                        yield hooks, key

    @functools.wraps(fn)
    def watched(model, ids, l):
        try:
            return fn(model, ids, l)
        finally:
            for hooks, key in list(learners_hooks()):
                left.append(key)
                del hooks[key]      # the next call, and the next check, start from a clean model

    with _one_thread():
        verdict = judge(watched if callable(fn) else fn, cases, reference, mistakes, success=success)
        if verdict.ok and not left:   # a pass that fails (an ID the model has no row for) must not leave one either
            with contextlib.suppress(Exception):
                watched(model, torch.full((1, 3), model.config.vocab_size), 1)
    return named(HOOK_LEFT) if verdict.ok and left else verdict


@checker(mistakes=[*_WEIGHTS_MISTAKES, HOOK_LEFT])
def check_block_weights(fn) -> Verdict:
    """``fn(model, ids, l)``: block l's attention weights (B, h, T, T), by a hook removed afterwards."""
    return _judge_spy(fn, _weights, _WEIGHTS_MISTAKES, "block l's weights, a (T, T) table per head, no hook left.")


@checker(mistakes=[*_QKV_MISTAKES, HOOK_LEFT])
def check_qkv_per_head(fn) -> Verdict:
    """``fn(model, ids, l)``: block l's Q, K, V, each (B, h, T, d_head), by a hook removed afterwards."""
    return _judge_spy(fn, _qkv, _QKV_MISTAKES, "block l's Q, K and V, each (B, h, T, d_head), no hook left.")
