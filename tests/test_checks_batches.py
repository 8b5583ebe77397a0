"""Chapter 11's checkers accept the solutions and name each planted mistake (wrong answers written here)."""

from __future__ import annotations

import pytest
import torch

from attnlib.checks.batches import (
    NONZERO_LENGTHS,
    check_batched_generation,
    check_nonzero_weights,
    check_position_ids,
    check_sliding_window_mask,
)
from conftest import assert_accepted, assert_mistakes_distinct, assert_named, stub

# ---------------------------------------------------------------------------------------------- position ids


def good_positions(is_pad):
    return ((~is_pad).long().cumsum(-1) - 1).clamp(min=0)


POSITION_WRONG = {
    "arange": lambda is_pad: torch.arange(is_pad.shape[1]).repeat(is_pad.shape[0], 1),
    "off-by-one": lambda is_pad: (~is_pad).long().cumsum(-1),
    "no-clamp": lambda is_pad: (~is_pad).long().cumsum(-1) - 1,
    "counted-pads": lambda is_pad: (is_pad.long().cumsum(-1) - 1).clamp(min=0),
}


def test_position_ids_solution_is_accepted():
    v = check_position_ids(good_positions)
    assert_accepted(v)


@pytest.mark.parametrize("label", sorted(POSITION_WRONG))
def test_position_ids_mistakes_are_named(label):
    v = check_position_ids(POSITION_WRONG[label])
    assert_named(v, label)


def test_position_ids_stub_and_junk():
    assert_named(check_position_ids(stub), "stub")
    assert_named(check_position_ids(lambda is_pad: is_pad[:, :1]), "shape")
    assert_named(check_position_ids(3), "not-callable")


def test_position_ids_checker_is_not_fooled_by_a_function_that_mutates_its_input():
    def mutating(is_pad):
        out = good_positions(is_pad)
        is_pad.fill_(True)
        return out

    assert check_position_ids(mutating).ok and check_position_ids(good_positions).ok


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
             "real-square": sum(k * k for k in n), "pad-rows": right + sum(T - k for k in n)}
    for label, value in wrong.items():
        assert_named(check_nonzero_weights(value), label)
    assert_named(check_nonzero_weights(45), "values")
    assert_named(check_nonzero_weights("46"), "type")


# ---------------------------------------------------------------------------------------------- find the bug


def good_generation(model, ids, is_pad, n_new):
    for _ in range(n_new):
        nxt = model(ids, is_pad=is_pad)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        is_pad = torch.cat([is_pad, torch.zeros_like(nxt, dtype=torch.bool)], dim=1)
    return ids


def buggy_generation(model, ids, is_pad, n_new, *, flag=False, extend=True, front=False, padded=True):
    for _ in range(n_new):
        logits = model(ids, is_pad=is_pad) if padded else model(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        col = torch.zeros_like(nxt, dtype=torch.bool) | flag
        if extend:
            is_pad = torch.cat([col, is_pad], 1) if front else torch.cat([is_pad, col], 1)
    return ids


GENERATION_WRONG = {
    "new-as-padding": dict(flag=True),
    "not-extended": dict(extend=False),
    "prepended": dict(front=True),
    "no-padding": dict(padded=False),
}


def test_batched_generation_solutions_are_accepted():
    assert check_batched_generation(good_generation).ok
    v = check_batched_generation(lambda model, ids, is_pad, n: model.generate(ids, n, is_pad=is_pad))
    assert_accepted(v)


@pytest.mark.parametrize("label", sorted(GENERATION_WRONG))
def test_batched_generation_mistakes_are_named(label):
    kw = GENERATION_WRONG[label]
    v = check_batched_generation(lambda m, i, p, n: buggy_generation(m, i, p, n, **kw))
    assert_named(v, label)


# ---------------------------------------------------------------------------------------------- sliding window


def good_window(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) & (j > i - window)


def band(T, lo, hi):
    d = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return (lo <= d) & (d <= hi)


WINDOW_WRONG = {
    "window-plus-one": lambda T, w: band(T, 0, w),
    "window-minus-one": lambda T, w: band(T, 0, w - 2),
    "no-window": lambda T, w: torch.ones(T, T, dtype=torch.bool).tril(),
    "no-causal": lambda T, w: (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs() < w,
    "inverted": lambda T, w: ~good_window(T, w),
    "float-mask": lambda T, w: torch.zeros(T, T).masked_fill(~good_window(T, w), float("-inf")),
}


def test_sliding_window_solution_is_accepted():
    v = check_sliding_window_mask(good_window)
    assert_accepted(v)


@pytest.mark.parametrize("label", sorted(WINDOW_WRONG))
def test_sliding_window_mistakes_are_named(label):
    v = check_sliding_window_mask(WINDOW_WRONG[label])
    assert_named(v, label)


def test_checkers_never_raise():
    for check in (check_position_ids, check_batched_generation, check_sliding_window_mask):
        v = check(lambda *a: 1 / 0)
        assert not v.ok and "ZeroDivisionError" in v.message
    assert not check_nonzero_weights(object()).ok


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.attention import sliding_window_mask
    from attnlib.batches import position_ids
    from attnlib.checks import batches as M
    from attnlib.checks._core import _close

    def window(T, w):
        return sliding_window_mask(T, window=w, dtype=torch.bool)

    for cases, variant, reference, mistakes in [
            (M._pad_cases, M._positions, position_ids, M._POSITION_MISTAKES),
            (M._generation_cases, M._greedy, M._generation_reference, M._GENERATION_MISTAKES),
            (M._window_cases, M._window, window, M._WINDOW_MISTAKES)]:
        for case in cases():
            assert _close(variant(*case), reference(*case), 0.0)
        # an is_pad that does not grow is refused by the model itself: that mistake is named by its error
        computed = [m for m in mistakes if m.label != "not-extended"]
        assert_mistakes_distinct(cases()[0], reference, computed)
    with pytest.raises(ValueError, match="is_pad must be"):
        M._greedy(*M._generation_cases()[0], extend=False)
