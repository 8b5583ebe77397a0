"""The chapter 9 checkers accept the solutions, name every planted mistake, and recognise the stub.

The wrong answers are written out here, independently of the checker's own planted mistakes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib.checks import (
    TILE_QUESTION,
    buggy_tiled_attention,
    check_fixed_tiled_attention,
    check_merge_states,
    check_tile_count,
)
from attnlib.checks import tiled as M
from attnlib.checks._core import MORE, _close
from attnlib.tiled import online_softmax_step
from helpers import assert_accepted, assert_named, stub

INF = math.inf


def assert_each_separated(cases, reference, mistakes):
    """Every planted mistake differs from the answer, and from every other mistake, on at least one case."""
    outs = [[reference(*c) for c in cases]] + [[m.wrong(*c) for c in cases] for m in mistakes]
    names = ["answer"] + [m.label for m in mistakes]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert any(not _close(x, y, 1e-5) for x, y in zip(outs[i], outs[j])), (names[i], names[j])


def assert_planted_mistakes_named(check, mistakes):
    """The checker names each planted mistake of its table as itself, with that mistake's own first hint."""
    for m in mistakes:
        verdict = check(m.wrong)
        assert_named(verdict, m.label)
        assert verdict.message.startswith(m.hint), (m.label, verdict)


# ------------------------------------------------------------------------------------ merge two partial states
def merge_ok(a, b):
    """The merge written another way: each part's log-weight log ℓ + m, against the larger maximum."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    safe = m.nan_to_num(neginf=0.0)
    w_a, w_b = (m_a - safe).exp(), (m_b - safe).exp()
    return m, w_a * l_a + w_b * l_b, w_a.unsqueeze(-1) * O_a + w_b.unsqueeze(-1) * O_b


def merge_as_the_chapters_step(a, b):
    """b treated as a new block of the chapter's step: a is rescaled, b is added as it is."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    r = torch.exp(m_a - torch.where(m == -INF, 0.0, m))
    return m, r * l_a + l_b, r[..., None] * O_a + O_b


def merge_b_only(a, b):
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    r = torch.exp(m_b - torch.where(m == -INF, 0.0, m))
    return m, l_a + r * l_b, O_a + r[..., None] * O_b


def merge_adds(a, b):
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    return torch.maximum(m_a, m_b), l_a + l_b, O_a + O_b


def merge_factor_above_one(a, b):
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m)
    r_a, r_b = torch.exp(ref - m_a), torch.exp(ref - m_b)
    return m, r_a * l_a + r_b * l_b, r_a[..., None] * O_a + r_b[..., None] * O_b


def merge_O_plain(a, b):
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m)
    return m, torch.exp(m_a - ref) * l_a + torch.exp(m_b - ref) * l_b, O_a + O_b


def merge_divides(a, b):
    m, l, O = merge_ok(a, b)
    return m, l, O / l[..., None]


def merge_nan_on_empty_rows(a, b):
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    r_a, r_b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, r_a * l_a + r_b * l_b, r_a[..., None] * O_a + r_b[..., None] * O_b


def merge_unshifted(a, b):
    """exp of each maximum alone, divided out at the end: right until a maximum passes about 709."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    e_a, e_b, e = m_a.exp(), m_b.exp(), torch.where(m == -INF, 0.0, m).exp()
    return m, (e_a * l_a + e_b * l_b) / e, (e_a[..., None] * O_a + e_b[..., None] * O_b) / e[..., None]


def merge_into_a(a, b):
    """Accumulates b into a's tensors: a's state is gone after the call."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m)
    r_a, r_b = torch.exp(m_a - ref), torch.exp(m_b - ref)
    l_a.mul_(r_a).add_(r_b * l_b)
    O_a.mul_(r_a[..., None]).add_(r_b[..., None] * O_b)
    m_a.copy_(m)
    return m_a, l_a, O_a


def merge_two_names_for_m_a(a, b):
    """``m = m_a`` names the same tensor: writing the new max into m overwrites m_a, and the factor of a, which
    the code has, comes out 1."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = m_a
    m[...] = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m)
    r_a, r_b = torch.exp(m_a - ref), torch.exp(m_b - ref)
    return m, r_a * l_a + r_b * l_b, r_a[..., None] * O_a + r_b[..., None] * O_b


def merge_in_float32_zeros(a, b):
    """Accumulates into ``torch.zeros`` (float32 by default), so float64 states come back float32."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m)
    l, O = torch.zeros(l_a.shape), torch.zeros(O_a.shape)
    for m_p, l_p, O_p in ((m_a, l_a, O_a), (m_b, l_b, O_b)):
        r = torch.exp(m_p - ref)
        l += r * l_p
        O += r[..., None] * O_p
    return m, l, O


def merge_through_numpy(a, b):
    """Factors from numpy: float64, so the float32 case comes back float64."""
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m).numpy().astype(np.float64)
    r_a = torch.from_numpy(np.exp(m_a.numpy().astype(np.float64) - ref))
    r_b = torch.from_numpy(np.exp(m_b.numpy().astype(np.float64) - ref))
    return m, r_a * l_a + r_b * l_b, r_a[..., None] * O_a + r_b[..., None] * O_b


def test_merge_solution_is_accepted_and_equals_one_pass_over_all_keys():
    assert_accepted(check_merge_states(merge_ok))
    g = torch.Generator().manual_seed(0)
    Z, V = 3.0 * torch.randn(2, 4, 9, generator=g, dtype=torch.float64), torch.randn(9, 3, generator=g,
                                                                                   dtype=torch.float64)
    one_pass = online_softmax_step(Z.new_full((2, 4), -INF), Z.new_zeros(2, 4), Z)
    merged = merge_ok(M._state(Z[..., :5], V[:5]), M._state(Z[..., 5:], V[5:]))
    torch.testing.assert_close(merged, (one_pass[0], one_pass[1], one_pass[3] @ V))


@pytest.mark.parametrize("fn, label", [
    (merge_adds, "no-rescale"), (merge_as_the_chapters_step, "one-side-a"), (merge_b_only, "one-side-b"),
    (merge_factor_above_one, "wrong-sign"), (merge_O_plain, "O-not-rescaled"), (merge_divides, "normalised"),
    (merge_nan_on_empty_rows, "nan-empty"), (merge_unshifted, "overflow"), (stub, "stub"),
])
def test_merge_mistakes_are_named(fn, label):
    assert_named(check_merge_states(fn), label)


def test_updating_a_state_in_place_is_named_not_accepted():
    """In-place updates are not legitimate in this exercise: the text asks to leave a and b as they came (a
    worker's state may still be merged with another), so the checker judges with no argument mutable."""
    assert_named(check_merge_states(merge_into_a), "in-place", "a[")


def test_two_names_for_one_tensor_are_told_the_input_was_overwritten_not_to_add_a_factor():
    v = check_merge_states(merge_two_names_for_m_a)
    assert_named(v, "in-place", "a[0]")
    assert "factor" not in v.message


@pytest.mark.parametrize("fn, wrong", [(merge_in_float32_zeros, "torch.float32"),
                                       (merge_through_numpy, "torch.float64")])
def test_merge_in_another_dtype_is_told_so(fn, wrong):
    assert_named(check_merge_states(fn), "dtype", wrong)


def test_merge_returning_two_results_is_told_the_shape_of_the_answer():
    v = check_merge_states(lambda a, b: merge_ok(a, b)[1:])
    assert not v.ok and "tuple of 3" in v.message, v


def test_merge_hints_have_two_levels():
    first, second = check_merge_states(merge_adds), check_merge_states(merge_adds, hint=2)
    assert first.message.endswith(MORE) and not second.message.endswith(MORE)
    assert first.message != second.message and second.mistake == "no-rescale"


def test_merge_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    for case in M._merge_cases():
        assert _close(M._merge(*case), merge_ok(*case), 1e-9)
    assert_each_separated(M._merge_cases(), M._merge_reference, M._MERGE_MISTAKES)
    assert_planted_mistakes_named(check_merge_states, M._MERGE_MISTAKES)


def test_merge_reference_keeps_the_dtype_and_the_empty_rows():
    for case in M._merge_cases():
        out = M._merge_reference(*case)
        assert {t.dtype for t in out} == {case[0][0].dtype}
        assert not any(t.isnan().any() for t in out)


# ------------------------------------------------------------------------------------------ predict: tiles
def count_tiles(T_q, T_k, b_q, b_k):
    """Tiles computed by causal tiled attention, the queries the last T_q positions (written independently)."""
    total = 0
    for q0 in range(0, T_q, b_q):
        last_query = T_k - T_q + min(q0 + b_q, T_q) - 1
        total += last_query // b_k + 1          # key blocks 0 … the one holding the last query
    return total


def test_tile_count_right_number_is_accepted():
    n = count_tiles(*TILE_QUESTION.values())
    assert n == 29
    assert_accepted(check_tile_count(n))
    assert_accepted(check_tile_count(torch.tensor(29)))
    assert_accepted(check_tile_count(29.0))


@pytest.mark.parametrize("value, label", [
    (4 * 8, "no-skip"),                                        # every tile of the grid
    (32 - 29, "skipped"),
    (count_tiles(200, 200, 64, 64), "offset-ignored"),         # 10: the new queries placed at positions 0 …
    (count_tiles(500, 500, 64, 64), "prefill"),                # 36: all 500 positions as queries
    (5 + 6 + 7 + 8, "first-query"),                            # 26: each block up to its first query
    (6 + 7 + 7, "full-blocks-only"),                           # 20: the short blocks left out
    (7, "diagonal-only"),
    (16, "half"),
    (30, "values"), (28, "values"), (29.5, "values"),
    (..., "stub"), (None, "stub"), ("29", "type"),
])
def test_tile_count_wrong_numbers_are_named(value, label):
    assert_named(check_tile_count(value), label)


def test_tile_count_verdicts_say_too_high_or_too_low_and_give_no_formula():
    """Each guess is a whole number of its own, and its first hint says on which side of the answer it lies."""
    want = count_tiles(*TILE_QUESTION.values())
    values = [g.value for g in M._TILE_GUESSES]
    assert all(float(v).is_integer() and v != want for v in values)
    assert len({g.label for g in M._TILE_GUESSES}) == len(set(values))
    for g in M._TILE_GUESSES:
        side = "too high" if g.value > want else "too low"
        assert g.hint.startswith(side), g
        assert "⌈" not in g.hint and "//" not in g.hint and "=" not in g.hint, g
    assert "too high" in str(check_tile_count(31)) and "too low" in str(check_tile_count(27))


# ------------------------------------------------------------------------------------------ find the bug
def _q_outer(Q, K, V, b_q, b_k, update):
    """Tiled attention with query blocks outside (the chapter's order), the state updated by ``update``."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    outs = []
    for q0 in range(0, T_q, b_q):
        q1 = min(q0 + b_q, T_q)
        pos = torch.arange(q0, q1) + T_k - T_q
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -INF, dtype=Q.dtype)
        l, O = torch.zeros_like(m), torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)
        for k0 in range(0, int(pos[-1]) + 1, b_k):
            k1 = min(k0 + b_k, T_k)
            Z = (Q[..., q0:q1, :] @ K[..., k0:k1, :].mT) / math.sqrt(Q.shape[-1])
            Z = torch.where(torch.arange(k0, k1)[None, :] <= pos[:, None], Z, -INF)
            m_new = torch.maximum(m, Z.amax(-1))
            P = (Z - m_new[..., None]).exp()
            alpha = (m - m_new).exp()
            m, l, O = m_new, *update(l, O, alpha, P, P @ V[..., k0:k1, :])
        outs.append(O / l[..., None])
    return torch.cat(outs, dim=-2)


def fixed_ok(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (a * l + P.sum(-1), a[..., None] * O + PV))


def fixed_by_cloning(Q, K, V, block_q, block_k):
    """The buggy function's own structure, with the old maxima copied before m is written."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -INF)
    l = Q.new_zeros(Q.shape[:-1])
    O = Q.new_zeros(*Q.shape[:-1], V.shape[-1])
    pos = torch.arange(T_k - T_q, T_k)
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k))
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:
                continue
            Z = torch.einsum("...qd,...kd->...qk", Q[..., rows, :], K[..., keys, :]) / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(keys > pos[rows, None], -INF)
            m_old = m[..., rows].clone()
            m[..., rows] = torch.maximum(m_old, Z.amax(-1))
            r = torch.exp(m_old - m[..., rows])
            P = torch.exp(Z - m[..., rows, None])
            l[..., rows] = r * l[..., rows] + P.sum(-1)
            O[..., rows, :] = r[..., None] * O[..., rows, :] + torch.einsum("...qk,...kd->...qd", P, V[..., keys, :])
    return O / l[..., None]


def fixed_wrong_sign(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (l / a + P.sum(-1), O / a[..., None] + PV))


def fixed_after_adding(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (a * (l + P.sum(-1)), a[..., None] * (O + PV)))


def fixed_O_only(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (l + P.sum(-1), a[..., None] * O + PV))


def fixed_l_only(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (a * l + P.sum(-1), O + PV))


def fixed_with_the_factor_dropped(Q, K, V, b_q, b_k):
    """Removing the factor that was always 1 changes nothing: the same output as the function as given."""
    return _q_outer(Q, K, V, b_q, b_k, lambda l, O, a, P, PV: (l + P.sum(-1), O + PV))


def fixed_in_float32(Q, K, V, b_q, b_k):
    """A fix whose state is made with torch.full / torch.zeros without a dtype: float32 for float64 inputs."""
    out = fixed_ok(Q, K, V, b_q, b_k)
    return out.float()


def fixed_scaling_Q_in_place(Q, K, V, b_q, b_k):
    Q /= math.sqrt(Q.shape[-1])
    return fixed_ok(Q * math.sqrt(Q.shape[-1]), K, V, b_q, b_k)


def test_fixed_tiled_attention_solutions_are_accepted():
    assert_accepted(check_fixed_tiled_attention(fixed_ok))
    assert_accepted(check_fixed_tiled_attention(fixed_by_cloning))


@pytest.mark.parametrize("fn, label", [
    (buggy_tiled_attention, "unchanged"), (fixed_with_the_factor_dropped, "unchanged"),
    (fixed_wrong_sign, "wrong-sign"), (fixed_after_adding, "rescale-after-add"),
    (fixed_O_only, "l-not-rescaled"), (fixed_l_only, "O-not-rescaled"),
    (fixed_in_float32, "dtype"), (fixed_scaling_Q_in_place, "in-place"), (stub, "stub"),
])
def test_fixed_tiled_attention_mistakes_are_named(fn, label):
    assert_named(check_fixed_tiled_attention(fn), label)


def test_the_planted_bug_shows_only_when_a_row_spans_two_key_blocks():
    """The bug is invisible with one key block (the checker must not rely on such a case) and visible
    otherwise, also with a cache offset and batch axes."""
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(buggy_tiled_attention(Q, K, V, 2, 8), fixed_ok(Q, K, V, 2, 8))
    assert not torch.allclose(buggy_tiled_attention(Q, K, V, 2, 2), fixed_ok(Q, K, V, 2, 2))
    Q = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    K, V = (2 * torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64) for _ in range(2))
    assert not torch.allclose(buggy_tiled_attention(Q, K, V, 3, 2), fixed_ok(Q, K, V, 3, 2))


def test_the_buggy_function_is_not_the_chapters_code():
    """It sits under no correct version: key blocks outside, einsum, no call of the chapter's functions."""
    import inspect

    source = inspect.getsource(buggy_tiled_attention)
    assert "einsum" in source and "online_softmax_step" not in source and "tile_plan" not in source
    assert max(len(line) for line in source.splitlines()) <= 88


def test_a_fix_right_only_without_a_cache_offset_fails():
    def only_self_attention(Q, K, V, b_q, b_k):
        out = fixed_ok(Q, K, V, b_q, b_k)
        return out if Q.shape[-2] == K.shape[-2] else out + 1e-3
    assert not check_fixed_tiled_attention(only_self_attention).ok


def test_fix_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    for case in M._fix_cases():
        assert _close(M._tiled_variant(*case), M._fixed_reference(*case), 1e-9)
        assert _close(M._tiled_variant(*case, alias=True), buggy_tiled_attention(*case), 1e-9)
    assert_each_separated(M._fix_cases(), M._fixed_reference, M._FIX_MISTAKES)
    assert_planted_mistakes_named(check_fixed_tiled_attention, M._FIX_MISTAKES)


def test_every_mistake_the_checkers_name_is_registered_with_two_hint_levels():
    for check, table in ((check_merge_states, [*M._MERGE_MISTAKES, M._OVERFLOW]),
                         (check_fixed_tiled_attention, M._FIX_MISTAKES), (check_tile_count, M._TILE_GUESSES)):
        labels = {m.label for m in check.mistakes}
        assert {m.label for m in table} <= labels
        assert all(m.more for m in table), check.__name__
