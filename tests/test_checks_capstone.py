"""The capstone's checkers: the bug hunts accept the fix, reject the stub and name every planted bug, alone or with
others; the reading of GPT-2 accepts exactly the line that answers each question, judged by what changing it does
to a running GPT-2, and names the question each planted copy of GPT-2's code fails."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib.checks import (
    buggy_sublayer,
    check_block_weights,
    check_fixed_sublayer,
    check_qkv_per_head,
    sublayer_with_bugs,
)
from attnlib.checks.capstone import _QKV_MISTAKES, _WEIGHTS_MISTAKES
from helpers import assert_accepted, assert_each_mistake_named, assert_named, stub

# --- the attention sublayer: one bug per reading question -----------------------------------------------------------

def sublayer(X, ln_1, W_Q, W_K, W_V, *, kv_from_x=False, softmax_dim=-1, mask_after=False, times_K=False,
             all_from_x=False, keys_on_rows=False, scale=True, allow="past and own", transpose_P=False):
    """Written independently of the checker: the correct sublayer, with switches for each wrong answer."""
    Xn = X if all_from_x else ln_1(X)
    Q = Xn @ W_Q
    src = X if kv_from_x else Xn
    K, V = src @ W_K, src @ W_V
    S = torch.einsum("...jd,...id->...ij", Q, K) if keys_on_rows else torch.einsum("...id,...jd->...ij", Q, K)
    if scale:
        S = S / math.sqrt(X.shape[-1] if scale == "d_model" else W_Q.shape[-1])
    T = S.shape[-1]
    ones = torch.ones(T, T)
    allowed = {"past and own": ones.tril(), "past only": ones.tril(-1), "own and future": ones.triu()}[allow].bool()
    if mask_after:
        P = F.softmax(S, dim=softmax_dim) * allowed
    else:
        P = F.softmax(S.masked_fill(~allowed, -math.inf), dim=softmax_dim)
    return (P.mT if transpose_P else P) @ (K if times_K else V)


def fixed(X, ln_1, W_Q, W_K, W_V):
    return sublayer(X, ln_1, W_Q, W_K, W_V)


BUG_FLAGS = {1: {"kv_from_x": True}, 2: {"softmax_dim": -2}, 3: {"mask_after": True}, 4: {"times_K": True}}
BUG_LABELS = {1: "q1-kv-from-x", 2: "q2-softmax-axis", 3: "q3-mask-after-softmax", 4: "q4-weights-times-K"}


def with_flags(**flags):
    return lambda *args: sublayer(*args, **flags)


def test_fixed_sublayer_accepts_the_fix_and_rejects_the_stub():
    assert_accepted(check_fixed_sublayer(fixed))
    assert_named(check_fixed_sublayer(stub), "stub")


def test_the_buggy_sublayer_is_recognised_as_unchanged():
    assert_named(check_fixed_sublayer(buggy_sublayer), "unchanged")
    all_four = {k: v for flags in BUG_FLAGS.values() for k, v in flags.items()}
    assert_named(check_fixed_sublayer(with_flags(**all_four)), "unchanged")


@pytest.mark.parametrize("question", [1, 2, 3, 4])
def test_each_planted_bug_alone_is_named(question):
    verdict = check_fixed_sublayer(with_flags(**BUG_FLAGS[question]))
    assert_named(verdict, BUG_LABELS[question])
    assert f"question {question}" in verdict.message


@pytest.mark.parametrize("remaining", [(1, 2), (2, 4), (3, 4), (1, 3, 4), (2, 3, 4), (1, 2, 3)])
def test_a_partial_fix_gets_a_hint_naming_a_remaining_bug(remaining):
    flags = {k: v for q in remaining for k, v in BUG_FLAGS[q].items()}
    verdict = check_fixed_sublayer(with_flags(**flags))
    assert_named(verdict, BUG_LABELS[remaining[0]])
    assert f"{len(remaining)} bugs are left" in verdict.message
    assert f"question {remaining[0]}" in verdict.message


@pytest.mark.parametrize("flags, label", [
    ({"all_from_x": True}, "q1-all-from-x"),
    ({"keys_on_rows": True}, "keys-on-rows"),
    ({"scale": False}, "no-scale"),
    ({"scale": "d_model"}, "scale-d-model"),
    ({"allow": "past only"}, "q3-mask-diagonal"),
    ({"allow": "own and future"}, "q3-mask-past"),
    ({"softmax_dim": -2, "transpose_P": True}, "q2-transposed-weights"),
])
def test_other_slips_are_named(flags, label):
    assert_named(check_fixed_sublayer(with_flags(**flags)), label)


def test_every_planted_sublayer_mistake_is_named_as_itself():
    from attnlib.checks import capstone as M

    assert_each_mistake_named(check_fixed_sublayer, M._SUBLAYER_MISTAKES)


def test_sublayer_with_bugs_plants_exactly_the_bugs_asked_for():
    assert_accepted(check_fixed_sublayer(sublayer_with_bugs()))
    for q, label in BUG_LABELS.items():
        assert_named(check_fixed_sublayer(sublayer_with_bugs(q)), label)
    g = torch.Generator().manual_seed(0)
    X, W = torch.randn(5, 8, generator=g), [torch.randn(8, 4, generator=g) for _ in range(3)]
    ln_1 = nn.LayerNorm(8)
    torch.testing.assert_close(sublayer_with_bugs(1, 2, 3, 4)(X, ln_1, *W), buggy_sublayer(X, ln_1, *W))
    with pytest.raises(ValueError, match="1, 2, 3, 4"):
        sublayer_with_bugs(5)
    assert sublayer_with_bugs(np.int64(2)).__name__ == "sublayer_with_bugs_2"      # a NumPy integer is a number


@pytest.mark.parametrize("questions, shown", [((1.0,), "got 1.0"), ((True,), "got True (bool)"),
                                              ((2, [1, 4]), "question 2 of sublayer_with_bugs"),
                                              (("1",), "got '1' (str)")])
def test_sublayer_with_bugs_takes_question_numbers_only(questions, shown):
    with pytest.raises(TypeError, match="must be a question number 1, 2, 3 or 4") as e:
        sublayer_with_bugs(*questions)
    assert shown in str(e.value), e.value


def test_a_learner_who_changes_ln_1_in_place_is_told_so():
    def right_then_vandal(X, ln_1, W_Q, W_K, W_V):
        out = fixed(X, ln_1, W_Q, W_K, W_V)
        with torch.no_grad():
            ln_1.weight.fill_(7.0)
            ln_1.bias.fill_(-3.0)
        return out

    assert_named(check_fixed_sublayer(right_then_vandal), "in-place", "ln_1.weight")


def test_a_learner_who_normalises_X_in_place_is_told_so():
    def normalises_in_place(X, ln_1, W_Q, W_K, W_V):
        with torch.no_grad():
            X.copy_(ln_1(X))
        return sublayer(X, nn.Identity(), W_Q, W_K, W_V)

    assert_named(check_fixed_sublayer(normalises_in_place), "in-place", "X")


def test_the_sublayer_keeps_the_dtype_of_its_inputs():
    def float32_mask_added(X, ln_1, W_Q, W_K, W_V):
        Xn = ln_1(X)
        Q, K, V = Xn @ W_Q, Xn @ W_K, Xn @ W_V
        T = X.shape[-2]
        M = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        S = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).float() + M      # float32 from here on
        return F.softmax(S, -1) @ V.float()

    assert_named(check_fixed_sublayer(float32_mask_added), "dtype", "torch.float32", "torch.float64")


CODE_OF_THE_FIXES = ("dim=-1", "dim=-2", "P @ V", "ln_1(X)", "masked_fill", "triu", "-inf", "softmax(",
                     "Xn @", "return ")


def test_no_first_level_hint_of_the_sublayer_holds_the_code_of_a_fix():
    from attnlib.checks import capstone as M

    for m in M._SUBLAYER_MISTAKES:
        for code in CODE_OF_THE_FIXES:
            assert code not in m.hint, (m.label, code, m.hint)
    # and what the learner sees after fixing some of the bugs, at the first level
    for remaining in [(1, 2), (2, 4), (3, 4), (2,), (4,)]:
        flags = {k: v for q in remaining for k, v in BUG_FLAGS[q].items()}
        message = check_fixed_sublayer(with_flags(**flags)).message
        assert not any(code in message for code in CODE_OF_THE_FIXES), message


def test_the_second_level_says_what_is_wrong():
    v = check_fixed_sublayer(with_flags(**BUG_FLAGS[2]), hint=2)
    assert_named(v, "q2-softmax-axis", "query axis")
    assert "hint=2" not in v.message


# --- GPT-2's code: quote the line that answers each question ---------------------------------------------------------

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed")

GOLDEN = {1: "query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)",
          2: "attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling",
          3: "attn_weights = attn_weights + attention_mask",
          4: "attn_output = torch.matmul(attn_weights, value)"}

HEAD_SPLIT_Q = "query_states = query_states.view(shape_q).transpose(1, 2)"
CACHE_UPDATE = "key_states, value_states = curr_cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)"
SOFTMAX = "attn_weights = nn.functional.softmax(attn_weights, dim=-1)"


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def with_line(q, line):
    return {**GOLDEN, q: line}


@needs_transformers
def test_gpt2_lines_accepts_the_four_lines_and_rejects_the_stub(one_thread):
    from attnlib.checks import check_gpt2_lines

    assert_accepted(check_gpt2_lines(GOLDEN))
    assert_accepted(check_gpt2_lines({q: "    " + line + "  " for q, line in GOLDEN.items()}))   # indentation
    for stub_answer in (..., None, {1: ..., 2: ..., 3: ..., 4: ...}):
        assert_named(check_gpt2_lines(stub_answer), "stub")


@needs_transformers
def test_the_answer_lines_are_lines_the_page_prints():
    from attnlib.gpt2_reading import gpt2_sources
    from attnlib.reading import source_lines

    printed = {line.strip() for fn in gpt2_sources() for line in source_lines(fn)}
    assert set(GOLDEN.values()) <= printed


@needs_transformers
def test_no_other_line_of_the_printed_source_answers_any_question(one_thread):
    """Every line of the functions handed to the learner, docstrings included, for every question: only the four
    answers are accepted. A line is judged by what it computes (one recording run) and, where that is what the
    question asks for, by the change the checker makes to it."""
    from attnlib.checks import capstone as M
    from attnlib.gpt2_reading import _EXPECTED_KIND, gpt2_sources, line_finding, tiny_gpt2
    from attnlib.reading import find_line, source_lines

    model = tiny_gpt2()
    lines = sorted({t.strip() for fn in gpt2_sources() for t in source_lines(fn, docstring=True) if t.strip()})
    accepted = {}
    for line in lines:
        places = find_line(line, gpt2_sources())
        if not all(p.simple for p in places):
            assert M._judge_line(1, line)[0].label == "not-a-statement", line
            continue
        kinds = line_finding(1, places, model).kinds
        for q in (1, 2, 3, 4):
            if _EXPECTED_KIND[q] in kinds and M._judge_line(q, line) is None:
                accepted.setdefault(q, []).append(line)
    assert accepted == {q: [line] for q, line in GOLDEN.items()}, accepted


NEAR_MISSES = [
    (1, "hidden_states = self.ln_1(hidden_states)", "q1-ln_1", "LN₁(X)"),
    (1, HEAD_SPLIT_Q, "q1-part-of-qkv", "holds Q,"),
    (1, CACHE_UPDATE, "q1-part-of-qkv", "holds K and V,"),
    (1, GOLDEN[2], "q1-other", "Q, K or V"),
    (2, GOLDEN[3], "q2-masked-scores", "already holds the mask"),
    (2, SOFTMAX, "q2-weights", "earlier line put the keys there"),
    (2, GOLDEN[1], "q2-qkv", "before any score exists"),
    (2, HEAD_SPLIT_Q, "q2-part-of-qkv", "handles Q"),
    (3, "return kv_idx <= q_idx", "q3-mask", "builds the mask"),
    (3, "mask = torch.where(mask, torch.zeros((), device=mask.device, dtype=dtype), min_dtype)", "q3-mask", ""),
    (3, "causal_mask = create_causal_mask(", "q3-mask", ""),
    (3, GOLDEN[2], "q3-scores", "no mask in it yet"),
    (3, SOFTMAX, "q3-weights", "already receives masked scores"),
    (3, "q_arange = torch.arange(q_length, device=device) + q_offset", "q3-other", ""),
    (4, "attn_output = attn_output.transpose(1, 2)", "q4-weighted-values-rearranged", "only rearranges"),
    (4, "attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()",
     "q4-weighted-values-rearranged", ""),
    (4, "attn_output = self.c_proj(attn_output)", "q4-attention-output", "W_O"),
    (4, SOFTMAX, "q4-weights", "makes the weights"),
    (4, "residual = hidden_states", "q4-other", "P · V"),
]


@needs_transformers
@pytest.mark.parametrize("q, line, label, fragment", NEAR_MISSES,
                         ids=[f"{n[0]}-{n[2]}-{i}" for i, n in enumerate(NEAR_MISSES)])
def test_a_line_that_answers_another_step_is_named_by_what_it_computes(one_thread, q, line, label, fragment):
    from attnlib.checks import check_gpt2_lines

    v = check_gpt2_lines(with_line(q, line))
    assert_named(v, label, f"question {q} (", fragment)
    if q > 1:
        assert "Confirmed so far: question" in v.message, v
    more = check_gpt2_lines(with_line(q, line), hint=2)
    assert_named(more, label)
    assert more.message != v.message and "hint=2" not in more.message


@needs_transformers
@pytest.mark.parametrize("line, label", [
    ("attn_weights = attn_weights+attention_mask", "not-in-source"),          # retyped with other spacing
    ("attn_weights = attn_weights", "not-in-source"),                         # cut short
    ("if attention_mask is not None:", "not-a-statement"),                    # a block's header
    ("# residual connection", "not-a-statement"),                             # a comment
    (")", "not-a-statement"),                                                 # the end of a statement
    ("def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):",
     "not-a-statement"),
    ("scaling = query.size(-1) ** -0.5", "never-runs"),                       # scaling is always passed
    ("attention_mask = encoder_attention_mask", "never-runs"),                # cross-attention only
    (GOLDEN[3] + "\n" + SOFTMAX, "several-lines"),
    (3, "not-a-string"),
    (..., "missing"),
    ("", "not-in-source"),
])
def test_a_line_that_cannot_be_judged_is_told_why(one_thread, line, label):
    from attnlib.checks import check_gpt2_lines

    assert_named(check_gpt2_lines(with_line(3, line)), label, "question 3 (")


@needs_transformers
@pytest.mark.parametrize("answer, label", [
    ("0.5", "type"), ([GOLDEN[1]], "type"), (GOLDEN, None),
    ({"1": GOLDEN[1], "2": GOLDEN[2], "3": GOLDEN[3], "4": GOLDEN[4]}, "keys"),
    ({1.0: GOLDEN[1], 2: GOLDEN[2], 3: GOLDEN[3], 4: GOLDEN[4]}, "keys"),
    ({1: GOLDEN[1], 2: GOLDEN[2], 3: GOLDEN[3]}, "keys"),
    ({**GOLDEN, 5: "x"}, "keys"),
])
def test_the_answer_is_a_dict_of_the_four_question_numbers(one_thread, answer, label):
    from attnlib.checks import check_gpt2_lines

    v = check_gpt2_lines(answer)
    if label is None:
        assert_accepted(v)
    else:
        assert_named(v, label)


@needs_transformers
def test_a_line_whose_change_does_not_give_the_predicted_model_is_not_accepted(one_thread, monkeypatch):
    from attnlib import gpt2_reading
    from attnlib.checks import check_gpt2_lines

    real = gpt2_reading.line_finding

    def unconfirmed(question, places, model=None):
        found = real(question, places, model)
        return dataclasses.replace(found, confirmed=False) if question == 4 else found

    monkeypatch.setattr(gpt2_reading, "line_finding", unconfirmed)
    assert_named(check_gpt2_lines(GOLDEN), "unconfirmed", "P · V", "Confirmed so far: questions 1, 2 and 3.")


@needs_transformers
def test_checking_lines_leaves_transformers_as_it_was(one_thread):
    from attnlib.checks import check_gpt2_lines
    from attnlib.gpt2_reading import gpt2_sources

    codes = [inspect.unwrap(fn).__code__ for fn in gpt2_sources()]
    for answer in (GOLDEN, with_line(2, SOFTMAX), with_line(3, "return kv_idx <= q_idx")):
        check_gpt2_lines(answer)
    assert [inspect.unwrap(fn).__code__ for fn in gpt2_sources()] == codes
    assert not any(name.startswith("__attnlib_probe__") for fn in gpt2_sources()
                   for name in inspect.unwrap(fn).__globals__)


# --- GPT-2's code with a planted bug: which question catches it? ---------------------------------------------------

RIGHT = {"A": 1, "B": 3, "C": 2, "D": 1}


@needs_transformers
def test_which_question_accepts_the_questions_the_copies_fail_and_rejects_the_stub(one_thread):
    from attnlib.checks import check_which_question

    assert_accepted(check_which_question(RIGHT))
    for stub_answer in (..., None, {"A": ..., "B": ..., "C": ..., "D": ...}):
        assert_named(check_which_question(stub_answer), "stub")


@needs_transformers
@pytest.mark.parametrize("letter, wrong", [(letter, q) for letter, right in RIGHT.items() for q in (1, 2, 3, 4)
                                           if q != right])
def test_each_wrong_question_for_a_copy_gets_its_own_hint(one_thread, letter, wrong):
    from attnlib.checks import check_which_question

    answer = {**RIGHT, letter: wrong}
    v = check_which_question(answer)
    assert_named(v, f"{letter}-not-{wrong}", f"copy {letter}")
    more = check_which_question(answer, hint=2)
    assert_named(more, f"{letter}-not-{wrong}")
    assert more.message != v.message and "hint=2" not in more.message


@needs_transformers
@pytest.mark.parametrize("answer, label", [
    ([1, 3, 2, 1], "type"), ("A1 B3", "type"), ({"A": 1, "B": 3, "C": 2}, "keys"),
    ({"a": 1, "b": 3, "c": 2, "d": 1}, "keys"), ({**RIGHT, "A": 0}, "not-a-question"),
    ({**RIGHT, "B": 5}, "not-a-question"), ({**RIGHT, "C": 2.0}, "not-a-question"),
    ({**RIGHT, "D": True}, "not-a-question"), ({**RIGHT, "A": "1"}, "not-a-question"),
    ({**RIGHT, "A": ...}, "not-a-question"),
])
def test_which_question_takes_a_question_number_per_copy(one_thread, answer, label):
    from attnlib.checks import check_which_question

    assert_named(check_which_question(answer), label)


@needs_transformers
def test_the_which_question_checker_follows_what_the_copies_fail(one_thread, monkeypatch):
    """The answer is measured, not stored: a copy that failed another question would change the right answer."""
    from attnlib.checks import capstone as M
    from attnlib.checks import check_which_question

    monkeypatch.setattr(M, "_caught", lambda letter: [4] if letter == "C" else [RIGHT[letter]])
    assert_named(check_which_question(RIGHT), "wrong-question", "copy C", "question 2")
    assert_accepted(check_which_question({**RIGHT, "C": 4}))


CODE_OF_THE_LINES = ("c_attn(", "matmul(", "+ attention_mask", "transpose(-1", "dim=-1", "kv_idx <=", "q_offset")


@needs_transformers
def test_no_hint_of_the_gpt2_checkers_quotes_code():
    from attnlib.checks import _core, check_gpt2_lines, check_which_question

    for check in (check_gpt2_lines, check_which_question):
        for m in (m for m in check.mistakes if m not in _core._GENERAL):
            for text in (m.hint, m.more or ""):
                assert not any(code in text for code in CODE_OF_THE_LINES), (m.label, text)
                assert "`" not in text, (m.label, text)


# --- spies on GPT-2: the learner's forward hooks ------------------------------------------------------------------

def caught(module_of, pick, remove=True, **call):
    """A spy as a learner writes it: a forward hook on ``module_of(model, l)``, ``pick(args, out)`` kept; the hook
    removed in a ``finally`` (``remove="after"``: only after a pass that did not fail; False: never)."""
    def spy(model, ids, l):
        seen = {}
        hook = module_of(model, l).register_forward_hook(lambda mod, args, out: seen.update(x=pick(args, out)))
        try:
            with torch.no_grad():
                model(ids, **call)
            if remove == "after":
                hook.remove()
        finally:
            if remove is True:
                hook.remove()
        return seen["x"]
    return spy


def attn(model, l):
    return model.transformer.h[l - 1].attn


def split(y, model, heads=True, transpose=True, order=(0, 1, 2)):
    B, T, three_d = y.shape
    h, d = model.config.n_head, three_d // 3
    parts = [y.split(d, dim=-1)[i] for i in order]
    if not heads:
        return tuple(parts)
    if not transpose:
        return tuple(p.reshape(B, h, T, d // h) for p in parts)
    return tuple(p.view(B, T, h, d // h).transpose(1, 2) for p in parts)


def qkv_spy(transform=lambda y, model: split(y, model), index=lambda l: l - 1, remove=True):
    def spy(model, ids, l):
        seen = {}
        hook = model.transformer.h[index(l)].attn.c_attn.register_forward_hook(
            lambda mod, args, out: seen.update(y=out))
        try:
            with torch.no_grad():
                model(ids)
            if remove == "after":
                hook.remove()
        finally:
            if remove is True:
                hook.remove()
        return transform(seen["y"], model)
    return spy


def weights_by_output_attentions(model, ids, l):
    with torch.no_grad():
        return model(ids, output_attentions=True).attentions[l - 1]


def weights_by_hand(model, ids, l, mask=True):
    """Q and K caught from c_attn, the weights made by hand: right with the mask, a slip without it."""
    Q, K, _ = qkv_spy()(model, ids, l)
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask:
        Z = Z.masked_fill(torch.ones(Z.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return Z.softmax(-1)


def qkv_by_hand(model, ids, l, bias=True):
    """LN₁(X) caught at the attention's input, projected by hand."""
    x = caught(attn, lambda args, out: args[0])(model, ids, l)
    W = attn(model, l).c_attn.weight
    y = x @ W + (attn(model, l).c_attn.bias if bias else 0)
    return split(y, model)


def weights_of_softmax_input(model, ids, l):
    """A spy on softmax that keeps what went in, not what came out."""
    seen = []
    real = F.softmax

    def spy(x, *args, **kwargs):
        seen.append(x)
        return real(x, *args, **kwargs)

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.nn.functional, "softmax", spy)
        model(ids)
    return seen[l - 1]


CORRECT_WEIGHTS = [caught(attn, lambda args, out: out[1]), weights_by_output_attentions, weights_by_hand]
CORRECT_QKV = [qkv_spy(), qkv_by_hand,
               qkv_spy(lambda y, model: tuple(t.transpose(1, 2) for t in
                                              y.unflatten(-1, (3, model.config.n_head, -1)).unbind(2)))]


@pytest.mark.parametrize("fn", CORRECT_WEIGHTS)
def test_block_weights_accepts_correct_spies(fn):
    assert_accepted(check_block_weights(fn))


@pytest.mark.parametrize("fn", CORRECT_QKV)
def test_qkv_per_head_accepts_correct_spies(fn):
    assert_accepted(check_qkv_per_head(fn))


def test_a_hook_left_by_one_attempt_is_not_blamed_on_the_next():
    assert_named(check_block_weights(caught(attn, lambda args, out: out[1], remove=False)), "hook-left")
    assert_accepted(check_block_weights(CORRECT_WEIGHTS[0]))


def test_the_spies_reject_the_stub_and_name_each_planted_mistake():
    assert_named(check_block_weights(stub), "stub")
    assert_named(check_qkv_per_head(stub), "stub")
    assert_each_mistake_named(check_block_weights, _WEIGHTS_MISTAKES, exact=False)
    assert_each_mistake_named(check_qkv_per_head, _QKV_MISTAKES, exact=False)


# Wrong answers written from the exercise texts: (answer, the mistake it makes, or None for "not nameable").
WRONG_WEIGHTS = [
    (caught(lambda model, l: model.transformer.h[l].attn, lambda args, out: out[1]), "next-block"),
    (caught(attn, lambda args, out: out[0]), "attention-output"),
    (caught(attn, lambda args, out: out[1], remove=False), "hook-left"),
    (caught(attn, lambda args, out: out[1], remove="after"), "hook-left"),   # no finally: left when a pass fails
    (caught(lambda model, l: model.transformer.h[l - 1], lambda args, out: out[1]), "block-output"),
    (weights_of_softmax_input, "before-softmax"),
    (lambda model, ids, l: weights_by_hand(model, ids, l, mask=False), "no-mask"),
    (caught(attn, lambda args, out: out[1].transpose(-2, -1)), "keys-on-rows"),
    (caught(attn, lambda args, out: out[1].mean(1)), "mean-over-heads"),
    (caught(attn, lambda args, out: out[1].float()), "dtype"),
]
WRONG_QKV = [
    (qkv_spy(lambda y, model: split(y, model, transpose=False)), "no-transpose"),
    (qkv_spy(index=lambda l: l), "next-block"),
    (qkv_spy(lambda y, model: split(y, model, heads=False)), "heads-not-split"),
    (qkv_spy(remove=False), "hook-left"),
    (qkv_spy(remove="after"), "hook-left"),
    (qkv_spy(lambda y, model: tuple(t.transpose(1, 2) for t in
                                    y.unflatten(-1, (model.config.n_head, 3, -1)).unbind(3))), "split-by-heads-first"),
    (lambda model, ids, l: qkv_by_hand(model, ids, l, bias=False), "no-bias"),
    (qkv_spy(lambda y, model: split(y, model, order=(1, 0, 2))), "q-k-swapped"),
    (qkv_spy(lambda y, model: split(y, model, order=(2, 1, 0))), None),
]


@pytest.mark.parametrize("check, wrong", [(check_block_weights, WRONG_WEIGHTS), (check_qkv_per_head, WRONG_QKV)],
                         ids=["weights", "qkv"])
def test_wrong_spies_are_rejected_never_misnamed_and_mostly_named(check, wrong):
    labels = {m.label for m in check.mistakes}
    named = 0
    for fn, label in wrong:
        v = check(fn)
        assert not v.ok, (label, v)
        if label is None:
            assert v.mistake not in labels - {"values", "shape", "dtype", "type", "length", "error"}, v
        else:
            assert v.mistake == label, (label, v)
            named += 1
    assert len(wrong) >= 5 and named >= 0.85 * len(wrong)


def test_a_spy_that_breaks_leaves_no_hook_but_one_that_forgets_is_told():
    v = check_block_weights(caught(attn, lambda args, out: out[1], remove=False))
    assert "hook" in v.message and "(For a stronger hint" in v.message
    assert "remove" in v.hint(2).message.lower()
