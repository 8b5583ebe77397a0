"""Chapter 11's checkers accept the solutions and name each planted mistake (wrong answers written here), and
none of their holes is open: dtype, in-place changes, blame that does not match every case."""

from __future__ import annotations

import pytest
import torch

from attnlib import KVCache, sliding_window_mask
from attnlib.checks.batches import (
    NONZERO_LENGTHS,
    check_batched_generation,
    check_nonzero_weights,
    check_packed_positions,
    check_sink_window_mask,
)
from helpers import assert_accepted, assert_named, stub

# ---------------------------------------------------------------------------------------------- positions


def good_positions(doc_ids):
    col = torch.arange(doc_ids.shape[-1]).expand_as(doc_ids)
    new = torch.ones_like(doc_ids, dtype=torch.bool)
    new[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    first = torch.where(new, col, 0).cummax(-1).values       # column where the current document began
    return (col - first).masked_fill(doc_ids < 0, 0)


def loop_positions(doc_ids):
    out = torch.zeros_like(doc_ids)
    for b, row in enumerate(doc_ids.tolist()):
        n = 0
        for t, d in enumerate(row):
            n = 0 if t == 0 or d != row[t - 1] else n + 1
            out[b, t] = n if d >= 0 else 0
    return out


def mask_sum_positions(doc_ids):                               # chapter 4's packed mask, summed along each row
    T = doc_ids.shape[-1]
    same = doc_ids[..., :, None] == doc_ids[..., None, :]
    return ((same & torch.ones(T, T, dtype=torch.bool).tril()).sum(-1) - 1).masked_fill(doc_ids < 0, 0)


def test_packed_positions_solution_and_rewrites_are_accepted():
    for answer in (good_positions, loop_positions, mask_sum_positions):
        assert_accepted(check_packed_positions(answer))


def test_packed_positions_counted_across_the_rows_of_a_batch_is_rejected():
    """One running count over the flattened batch is right until a row ends with the id the next row starts with."""
    def flattened(doc_ids):
        flat = doc_ids.reshape(-1)
        out = torch.zeros_like(flat)
        for t in range(1, flat.numel()):
            out[t] = out[t - 1] + 1 if flat[t] == flat[t - 1] else 0
        return out.reshape(doc_ids.shape).masked_fill(doc_ids < 0, 0)

    assert_named(check_packed_positions(flattened), "across-rows")


def test_packed_positions_stub_and_junk():
    assert_named(check_packed_positions(stub), "stub")
    assert_named(check_packed_positions(lambda d: d[:, :1]), "shape")
    assert_named(check_packed_positions(3), "not-callable")
    assert_named(check_packed_positions(lambda d: good_positions(d).int()), "dtype", "torch.int32")


def test_packed_positions_an_answer_that_overwrites_doc_ids_is_named():
    def overwrites(doc_ids):
        out = good_positions(doc_ids)
        doc_ids.clamp_(min=0)
        return out

    assert_named(check_packed_positions(overwrites), "in-place", "doc_ids")


def test_packed_positions_a_slip_on_one_row_of_one_case_is_not_blamed_on_a_planted_mistake():
    def one_row_off(doc_ids):
        out = good_positions(doc_ids).clone()
        if doc_ids.shape[0] == 3:
            out[1] += 1
        return out

    assert_named(check_packed_positions(one_row_off), "values")


# ---------------------------------------------------------------------------------------------- prediction


def test_nonzero_weights_prediction():
    n = list(NONZERO_LENGTHS)
    B, T = len(n), max(n)
    right = sum(k * (k + 1) // 2 for k in n)
    assert right == 46   # the chapter's numbers: prompts of 5, 2 and 7 tokens
    assert_named(check_nonzero_weights(...), "stub")
    v = check_nonzero_weights(right)
    assert v.ok and "46" in str(v)
    assert check_nonzero_weights(float(right)).ok
    wrong = {"causal-only": B * T * (T + 1) // 2, "no-mask": B * T * T, "no-causal": T * sum(n),
             "real-square": sum(k * k for k in n), "pad-rows": right + sum(T - k for k in n),
             "pads-after": right + sum((T - k) * k for k in n), "no-self": sum(k * (k - 1) // 2 for k in n),
             "half-of-all": round(B * T * T / 2)}   # "the causal mask keeps half", rounded to even: 74
    for label, value in wrong.items():
        v = check_nonzero_weights(value)
        assert_named(v, label)
        assert ("too high" if value > right else "too low") in v.message
    assert_named(check_nonzero_weights(45), "values")
    assert_named(check_nonzero_weights("46"), "type")


# ---------------------------------------------------------------------------------------------- find the bug


def the_stub(model, ids, attention_mask, n_new):
    """The notebook's generate_batch as the learner first sees it."""
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=attention_mask == 0)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.cat([attention_mask, torch.zeros_like(step)], dim=1)
    return ids


def good_generation(model, ids, attention_mask, n_new, *, cache=True, new=torch.ones_like):
    caches = [KVCache() for _ in model.blocks] if cache else None
    step = ids
    for _ in range(n_new):
        logits = model(step if cache else ids, caches, is_pad=attention_mask == 0)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.cat([attention_mask, new(step)], dim=1)
    return ids


def buggy_generation(model, ids, attention_mask, n_new, *, flag=1, extend=True, front=False, padded=True,
                     flipped=False):
    for _ in range(n_new):
        is_pad = attention_mask.bool() if flipped else ~attention_mask.bool()
        logits = model(ids, is_pad=is_pad) if padded else model(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        col = torch.zeros_like(nxt) + flag
        if extend:
            attention_mask = torch.cat([col, attention_mask], 1) if front else torch.cat([attention_mask, col], 1)
    return ids


GENERATION_WRONG = {
    "new-as-padding": dict(flag=0),
    "reads-ones-as-padding": dict(flipped=True),
    "not-extended": dict(extend=False),
    "prepended": dict(front=True),
    "no-padding": dict(padded=False),
}


def test_batched_generation_solutions_are_accepted():
    assert_accepted(check_batched_generation(good_generation))
    assert_accepted(check_batched_generation(lambda *a: good_generation(*a, cache=False)))
    assert_accepted(check_batched_generation(        # a bool column: torch.cat promotes it to the mask's dtype
        lambda *a: good_generation(*a, new=lambda s: torch.ones_like(s, dtype=torch.bool))))
    assert_accepted(check_batched_generation(
        lambda model, ids, mask, n: model.generate(ids, n, is_pad=mask == 0)))


def test_batched_generation_the_stub_is_named_without_giving_the_fix():
    v = check_batched_generation(the_stub)
    assert_named(v, "new-as-padding")
    for fix in ("ones_like", "zeros_like", "append 1", "append 0"):
        assert fix not in v.message


@pytest.mark.parametrize("label", sorted(GENERATION_WRONG))
def test_batched_generation_mistakes_are_named(label):
    kw = GENERATION_WRONG[label]
    v = check_batched_generation(lambda m, i, p, n: buggy_generation(m, i, p, n, **kw))
    assert_named(v, label)


def fixed(model, ids, attention_mask, n_new, *, column=torch.ones_like, is_pad=lambda m: m == 0, front=False,
          cache=True):
    """The exercise's function after a learner's attempt at a fix: the new column, the is_pad line, the cache."""
    caches = [KVCache() for _ in model.blocks] if cache else None
    step = ids
    for _ in range(n_new):
        logits = model(step if cache else ids, caches, is_pad=is_pad(attention_mask))
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        new = column(step)
        attention_mask = torch.cat([new, attention_mask] if front else [attention_mask, new], dim=1)
    return ids


# Wrong answers written from the exercise text, with the mistake each makes (None: any specific verdict).
GENERATION_FROM_TEXT = [
    (the_stub, "new-as-padding"),                                                        # the raise deleted only
    (lambda *a: fixed(*a, column=torch.zeros_like, is_pad=lambda m: m != 1), "new-as-padding"),
    (lambda *a: fixed(*a, column=torch.zeros_like, is_pad=lambda m: m == 1), "reads-ones-as-padding"),
    (lambda *a: fixed(*a, is_pad=lambda m: m.bool()), "reads-ones-as-padding"),
    (lambda *a: fixed(*a, column=lambda s: s), "token-as-flag"),                          # the token as its flag
    (lambda *a: fixed(*a, front=True), "prepended"),
    (lambda *a: fixed(*a, column=lambda s: s[:, :0]), "not-extended"),                  # an empty column
    (lambda *a: fixed(*a, is_pad=lambda m: None), "no-padding"),
]


def test_batched_generation_wrong_answers_from_the_text():
    from test_checks_mask import assert_wrong_answers

    assert_wrong_answers(check_batched_generation, GENERATION_FROM_TEXT)


def test_batched_generation_an_answer_that_writes_into_ids_is_named():
    def writes_into_ids(model, ids, attention_mask, n_new):
        out = good_generation(model, ids, attention_mask, n_new)
        ids[:, 0] = 0
        return out

    assert_named(check_batched_generation(writes_into_ids), "in-place", "ids")


# ---------------------------------------------------------------------------------------------- sink window


def good_sink_window(T_q, T_k, window, n_sink):
    i = torch.arange(T_k - T_q, T_k)[:, None]          # the absolute position of each query
    j = torch.arange(T_k)[None, :]
    return (j <= i) & ((j > i - window) | (j < n_sink))


def sink_band(T_q, T_k, window, n_sink, *, shift=0, extra=0, causal_sinks=True, use_cache=True, both=False):
    i = torch.arange(T_q)[:, None] + (T_k - T_q if use_cache else 0) + shift
    j = torch.arange(T_k)[None, :]
    win = (j <= i) & (j >= i - window + 1 - extra)
    sink = (j < n_sink) & (j <= i) if causal_sinks else j < n_sink
    return win & sink if both else win | sink


SINK_WRONG = {
    "no-sinks": lambda *a: sink_band(*a[:3], 0),
    "sinks-read-future": lambda *a: sink_band(*a, causal_sinks=False),
    "sinks-and-window": lambda *a: sink_band(*a, both=True),
    "queries-from-zero": lambda *a: sink_band(*a, use_cache=False),
    "offset-one-too-far": lambda *a: sink_band(*a, shift=1),
    "window-plus-one": lambda *a: sink_band(*a, extra=1),
    "window-minus-one": lambda *a: sink_band(*a, extra=-1),
    "inverted": lambda *a: ~good_sink_window(*a),
    "float-mask": lambda *a: torch.where(good_sink_window(*a), 0.0, float("-inf")),
    "float-01-mask": lambda *a: good_sink_window(*a).float(),            # a 0/1 float mask, not a boolean one
}


def test_sink_window_solution_is_accepted():
    assert_accepted(check_sink_window_mask(good_sink_window))


@pytest.mark.parametrize("label", sorted(SINK_WRONG))
def test_sink_window_mistakes_are_named(label):
    assert_named(check_sink_window_mask(SINK_WRONG[label]), label)


def test_sink_window_a_float64_01_mask_is_named_too_and_its_second_hint_says_boolean():
    assert_named(check_sink_window_mask(lambda *a: good_sink_window(*a).double()), "float-01-mask")
    assert_named(check_sink_window_mask(lambda *a: good_sink_window(*a).double(), hint=2), "float-01-mask",
                 "boolean")


def test_sink_window_an_integer_01_mask_gets_the_dtype_verdict():
    assert_named(check_sink_window_mask(lambda *a: good_sink_window(*a).long()), "dtype", "torch.int64")


# ---------------------------------------------------------------------------------------------- all four


def test_checkers_never_raise():
    for check in (check_packed_positions, check_batched_generation, check_sink_window_mask):
        v = check(lambda *a: 1 / 0)
        assert not v.ok and "ZeroDivisionError" in v.message
    assert not check_nonzero_weights(object()).ok


def test_every_mistake_of_the_tables_is_named_as_itself_with_its_own_first_hint():
    from attnlib.checks import batches as M

    for check, mistakes in [(check_packed_positions, M._PACKED_MISTAKES),
                            (check_batched_generation, M._GENERATION_MISTAKES),
                            (check_sink_window_mask, M._SINK_MISTAKES)]:
        for m in mistakes:
            v = check(m.wrong)
            assert_named(v, m.label)
            assert v.message.startswith(m.hint), (m.label, v)
        assert set(mistakes) <= set(check.mistakes)


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import batches as M
    from attnlib.checks._core import _close

    for cases, variant, reference, mistakes in [
            (M._packed_cases, M._packed_positions, good_positions, M._PACKED_MISTAKES),
            (M._generation_cases, M._greedy, M._generation_reference, M._GENERATION_MISTAKES),
            (M._sink_cases, M._sink_window, M._sink_reference, M._SINK_MISTAKES)]:
        for case in cases():
            assert _close(variant(*case), reference(*case), 0.0)
        # the answer and the mistakes that compute on every case: each pair differs on some case
        computed = [m for m in mistakes if m.label not in ("not-extended", "bitwise-not", "refed-with-cache")]
        outs = [[f(*case) for f in (reference, *(m.wrong for m in computed))] for case in cases()]
        for a in range(len(computed) + 1):
            for b in range(a + 1, len(computed) + 1):
                assert any(not _close(o[a], o[b], 1e-9) for o in outs), (a, b)
    # an attention_mask that does not grow is refused by the model itself: that mistake is named by its error
    with pytest.raises(ValueError, match="is_pad must be"):
        M._greedy(*M._generation_cases()[0], extend=False)
    with pytest.raises(ValueError, match="is_pad must be"):
        M._greedy(*M._generation_cases()[0], cache="kept")


# ---------------------------------------------------------------------------------------------- from the texts

def sink_from_text(T_q, T_k, window, n_sink, *, join="or", causal_sinks=True, offset=True, width=0):
    i = torch.arange(T_q)[:, None] + ((T_k - T_q) if offset else 0)
    j = torch.arange(T_k)[None, :]
    recent = (j <= i) & (j > i - window - width)
    sinks = (j < n_sink) & ((j <= i) if causal_sinks else True)
    return recent | sinks if join == "or" else recent & sinks


def sink_causal_plus_columns(T_q, T_k, window, n_sink):   # the window forgotten: the causal mask, sink columns set
    m = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
    m[:, :n_sink] = True
    return m


SINK_FROM_TEXT = [
    (sink_causal_plus_columns, "no-window"),
    (lambda T_q, T_k, w, n: (torch.arange(T_k) <= torch.arange(T_q)[:, None] + T_k - T_q) | (torch.arange(T_k) < n),
     "no-window"),
    (lambda *a: sink_from_text(*a, causal_sinks=False), "sinks-read-future"),
    (lambda *a: sink_from_text(*a, join="and"), "sinks-and-window"),
    (lambda *a: sink_from_text(*a, offset=False), "queries-from-zero"),
    (lambda *a: sink_from_text(*a, width=1), "window-plus-one"),
    (lambda *a: ~sink_from_text(*a), "inverted"),
    (lambda *a: sink_from_text(*a).float(), "float-01-mask"),
    (lambda T_q, T_k, w, n: sliding_window_mask(T_q, T_k, window=w, dtype=torch.bool), "no-sinks"),
]


def test_sink_window_wrong_answers_from_the_text():
    from test_checks_mask import assert_wrong_answers

    assert_wrong_answers(check_sink_window_mask, SINK_FROM_TEXT)


def test_nonzero_weights_wrong_predictions_from_the_text():
    from test_checks_mask import assert_wrong_answers

    guesses = [84, 147, 98, 78, 53, 32, 45]   # a causal triangle per row, every entry, ..., one short
    assert_wrong_answers(check_nonzero_weights, [(g, None) for g in guesses])
