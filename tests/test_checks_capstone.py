"""The capstone's bug-hunt checkers accept the fix, reject the stub and name every planted bug, alone or with others."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib.checks import (
    buggy_cached_attention,
    buggy_sublayer,
    check_cached_attention,
    check_fixed_sublayer,
    sublayer_with_bugs,
)
from conftest import assert_accepted, assert_named, stub

# --- the attention sublayer: one bug per reading question -----------------------------------------------------------

def sublayer(X, ln_1, W_Q, W_K, W_V, *, kv_from_x=False, softmax_dim=-1, mask_after=False, times_K=False,
             all_from_x=False, keys_on_rows=False, scale=True):
    """Written independently of the checker: the correct sublayer, with switches for each wrong answer."""
    Xn = X if all_from_x else ln_1(X)
    Q = Xn @ W_Q
    src = X if kv_from_x else Xn
    K, V = src @ W_K, src @ W_V
    S = torch.einsum("...jd,...id->...ij", Q, K) if keys_on_rows else torch.einsum("...id,...jd->...ij", Q, K)
    if scale:
        S = S / math.sqrt(W_Q.shape[-1])
    T = S.shape[-1]
    allowed = torch.tril(torch.ones(T, T)).bool()
    if mask_after:
        P = F.softmax(S, dim=softmax_dim) * allowed
    else:
        P = F.softmax(S.masked_fill(~allowed, -math.inf), dim=softmax_dim)
    return P @ (K if times_K else V)


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
])
def test_other_slips_are_named(flags, label):
    assert_named(check_fixed_sublayer(with_flags(**flags)), label)


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


def test_a_learner_who_changes_ln_1_in_place_does_not_change_the_reference():
    def right_then_vandal(X, ln_1, W_Q, W_K, W_V):
        out = fixed(X, ln_1, W_Q, W_K, W_V)
        with torch.no_grad():
            ln_1.weight.fill_(7.0)
            ln_1.bias.fill_(-3.0)
        return out

    assert_accepted(check_fixed_sublayer(right_then_vandal))


# --- attention with a KV cache ----------------------------------------------------------------------------------------

def cached(X_new, K_past, V_past, W_Q, W_K, W_V, *, diagonal=None, own_kv=True, mask_after=False, times_K=False):
    Q = X_new @ W_Q
    K = torch.cat([K_past, X_new @ W_K], -2) if own_kv else K_past
    V = torch.cat([V_past, X_new @ W_V], -2) if own_kv else V_past
    S = torch.einsum("...id,...jd->...ij", Q, K) / math.sqrt(Q.shape[-1])
    T_q, T_k = S.shape[-2:]
    i = torch.arange(T_q)[:, None] + (T_k - T_q if diagonal is None else diagonal)
    future = torch.arange(T_k)[None, :] > i
    if mask_after:
        P = F.softmax(S, -1).masked_fill(future, 0.0)
    else:
        P = F.softmax(S.masked_fill(future, -math.inf), -1)
    return P @ (K if times_K else V)


def test_cached_attention_accepts_the_fix_and_rejects_the_stub():
    assert_accepted(check_cached_attention(cached))
    assert_named(check_cached_attention(stub), "stub")


@pytest.mark.parametrize("fn, label", [
    (buggy_cached_attention, "square-mask"),
    (lambda *a: cached(*a, diagonal=0), "square-mask"),
    (lambda *a: cached(*a, diagonal=10**6), "no-mask"),
    (lambda *a: cached(*a, own_kv=False), "no-new-kv"),
    (lambda *a: cached(*a, mask_after=True), "mask-after-softmax"),
    (lambda *a: cached(*a, times_K=True), "weights-times-K"),
])
def test_cached_attention_mistakes(fn, label):
    assert_named(check_cached_attention(fn), label)


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import capstone as M
    from attnlib.checks._core import _close

    for cases, variant, reference, mistakes in [
            (M._sublayer_cases, M._sublayer, sublayer_with_bugs(), M._SUBLAYER_MISTAKES),
            (M._cached_cases, M._cached, M._cached_reference, M._CACHED_MISTAKES)]:
        for case in cases():
            assert _close(variant(*case), reference(*case), 1e-6)
        outs = [[f(*case) for f in (reference, *(m.wrong for m in mistakes))] for case in cases()]
        for i, j in itertools.combinations(range(len(mistakes) + 1), 2):   # each pair differs on some case
            assert any(not _close(out[i], out[j], 1e-5) for out in outs), (i, j)
