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


# --- attention with a KV cache ----------------------------------------------------------------------------------------

def cached(X_new, K_past, V_past, W_Q, W_K, W_V, *, offset=None, own_kv=True, mask_after=False, times_K=False,
           strict=False, new_first=False, dim=-1, scale=True):
    """Written independently of the checker: new query i at position T_past + i (or T_past + i + ``offset``
    − T_past when ``offset`` is given), reading keys j ≤ its position (j < with ``strict``)."""
    Q = X_new @ W_Q
    K_new, V_new = X_new @ W_K, X_new @ W_V
    if own_kv:
        K = torch.cat([K_new, K_past] if new_first else [K_past, K_new], -2)
        V = torch.cat([V_new, V_past] if new_first else [V_past, V_new], -2)
    else:
        K, V = K_past, V_past
    S = torch.einsum("...id,...jd->...ij", Q, K)
    if scale:
        S = S / math.sqrt(Q.shape[-1])
    T_q, T_k = S.shape[-2:]
    T_past = K_past.shape[-2]
    i = torch.arange(T_q)[:, None] + (T_past if offset is None else offset)
    j = torch.arange(T_k)[None, :]
    future = (j >= i) if strict else (j > i)
    if mask_after:
        P = F.softmax(S, dim).masked_fill(future, 0.0)
    else:
        P = F.softmax(S.masked_fill(future, -math.inf), dim)
    return P @ (K if times_K else V)


def fixed_cached(X_new, K_past, V_past, W_Q, W_K, W_V):
    """The notebook's fix: buggy_cached_attention with its queries placed after the cache."""
    T_past, T_new = K_past.shape[-2], X_new.shape[-2]
    q = torch.einsum("...nd,dk->...nk", X_new, W_Q)
    k = torch.cat([K_past, torch.einsum("...nd,dk->...nk", X_new, W_K)], dim=-2)
    v = torch.cat([V_past, torch.einsum("...nd,dv->...nv", X_new, W_V)], dim=-2)
    S = torch.einsum("...ik,...jk->...ij", q, k) / q.shape[-1] ** 0.5
    query_at = T_past + torch.arange(T_new)[:, None]
    key_at = torch.arange(T_past + T_new)[None, :]
    S = torch.where(key_at <= query_at, S, float("-inf"))
    return torch.einsum("...ij,...jv->...iv", S.softmax(dim=-1), v)


def test_cached_attention_accepts_the_fix_and_rejects_the_stub():
    assert_accepted(check_cached_attention(cached))
    assert_accepted(check_cached_attention(fixed_cached))
    assert_named(check_cached_attention(stub), "stub")


def test_the_buggy_cached_attention_is_not_a_copy_of_the_libraries_mask():
    import inspect

    source = inspect.getsource(buggy_cached_attention)
    assert "triu" not in source and "causal_mask" not in source and "@" not in source.split('"""')[-1]


@pytest.mark.parametrize("fn, label", [
    (buggy_cached_attention, "queries-from-zero"),
    (lambda *a: cached(*a, offset=0), "queries-from-zero"),
    (lambda *a: cached(*a, offset=10**6), "no-mask"),
    (lambda *a: cached(*a, own_kv=False), "no-new-kv"),
    (lambda *a: cached(*a, strict=True), "misses-own-key"),             # one diagonal off: its own key blocked
    (lambda *a: cached(*a, offset=a[1].shape[-2] + 1), "offset-one-too-far"),   # one diagonal off the other way
    (lambda *a: cached(*a, new_first=True), "keys-out-of-order"),
    (lambda *a: cached(*a, dim=-2), "softmax-over-queries"),
    (lambda *a: cached(*a, mask_after=True), "mask-after-softmax"),
    (lambda *a: cached(*a, times_K=True), "weights-times-K"),
    (lambda *a: cached(*a, scale=False), "no-scale"),
])
def test_cached_attention_mistakes(fn, label):
    assert_named(check_cached_attention(fn), label)


def test_a_mask_one_diagonal_off_is_not_blamed_on_k_and_v_not_being_appended():
    # with one new token, blocking the own key gives what reading only the cache gives: the every-case rule
    # and the cases with several new tokens keep the blame where it belongs
    v = check_cached_attention(lambda *a: cached(*a, strict=True))
    assert v.mistake == "misses-own-key" and "append" not in v.message


def test_cached_attention_keeps_the_dtype_of_its_inputs():
    def float32_mask(X_new, K_past, V_past, W_Q, W_K, W_V):
        Q = X_new @ W_Q
        K, V = torch.cat([K_past, X_new @ W_K], -2), torch.cat([V_past, X_new @ W_V], -2)
        T_q, T_k = Q.shape[-2], K.shape[-2]
        M = torch.zeros(T_q, T_k).masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q),
                                              -math.inf)
        return F.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]) + M, -1).to(V.dtype) @ V

    assert_accepted(check_cached_attention(float32_mask))            # cast back: right dtype
    v = check_cached_attention(lambda *a: float32_mask(*a).float())
    assert_named(v, "dtype", "torch.float32")


def test_cached_attention_an_answer_that_writes_into_the_cache_is_named():
    def writes_into_K_past(X_new, K_past, V_past, W_Q, W_K, W_V):
        out = cached(X_new, K_past, V_past, W_Q, W_K, W_V)
        K_past.zero_()
        return out

    assert_named(check_cached_attention(writes_into_K_past), "in-place", "K_past")


def test_no_first_level_hint_of_the_cached_attention_holds_the_code_of_the_fix():
    from attnlib.checks import capstone as M

    for m in M._CACHED_MISTAKES:
        for code in ("T_past +", "arange", "triu", "T_k - T_q", "1 +", "cat(", "<="):
            assert code not in m.hint, (m.label, code)


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import capstone as M
    from attnlib.checks._core import _close

    def flat(cases):
        return [c for g in cases for c in (g.cases if hasattr(g, "cases") else [g])]

    for cases, variant, reference, mistakes in [
            (flat(M._sublayer_cases()), M._sublayer, sublayer_with_bugs(), M._SUBLAYER_MISTAKES),
            (flat(M._cached_cases()), M._cached, M._cached_reference, M._CACHED_MISTAKES)]:
        for case in cases:
            assert _close(variant(*case), reference(*case), 1e-2)
        outs = [[f(*case) for f in (reference, *(m.wrong for m in mistakes))] for case in cases]
        for i, j in itertools.combinations(range(len(mistakes) + 1), 2):   # each pair differs on some case
            assert any(not _close(out[i], out[j], 1e-5) for out in outs), (i, j)
    assert set(M._CACHED_MISTAKES) <= set(check_cached_attention.mistakes)
    assert set(M._SUBLAYER_MISTAKES) <= set(check_fixed_sublayer.mistakes)
