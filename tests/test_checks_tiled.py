"""The chapter 9 checkers accept the solutions, name every planted mistake, and recognise the stub.

The wrong answers are written out here, independently of the checker's own planted mistakes."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import (
    TILE_QUESTION,
    buggy_tiled_attention,
    check_combine_splits,
    check_fixed_tiled_attention,
    check_tile_count,
)
from attnlib.checks import tiled as M
from attnlib.checks._core import MORE, _close
from helpers import assert_accepted, assert_named, stub

INF = math.inf


def _output(fn, case):
    """fn(*case), or the error it raises (a planted mistake may be one that raises)."""
    try:
        return fn(*case)
    except Exception as e:  # noqa: BLE001 - the error is the mistake's output
        return e


def _differ(x, y) -> bool:
    if isinstance(x, Exception) or isinstance(y, Exception):
        return type(x) is not type(y) or x.args != y.args
    return not _close(x, y, 1e-5)


def assert_each_separated(cases, reference, mistakes):
    """Every planted mistake differs from the answer, and from every other mistake, on at least one case."""
    outs = [[reference(*c) for c in cases]] + [[_output(m.wrong, c) for c in cases] for m in mistakes]
    names = ["answer"] + [m.label for m in mistakes]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert any(_differ(x, y) for x, y in zip(outs[i], outs[j])), (names[i], names[j])


def assert_planted_mistakes_named(check, mistakes):
    """The checker names each planted mistake of its table as itself, with that mistake's own first hint."""
    for m in mistakes:
        verdict = check(m.wrong)
        assert_named(verdict, m.label)
        assert verdict.message.startswith(m.hint), (m.label, verdict)


# ----------------------------------------------------------------------- combine the splits of a long cache
def combine_ok(O_parts, lse_parts):
    """The combination written another way: the shares as a softmax over the splits."""
    share = torch.softmax(lse_parts, dim=0)
    return torch.einsum("s...q,s...qd->...qd", share, O_parts), torch.logsumexp(lse_parts, dim=0)


def combine_pairwise(O_parts, lse_parts):
    """Another right answer: the splits taken in one at a time, as the online softmax takes blocks."""
    O, lse = O_parts[0], lse_parts[0]
    for O_s, lse_s in zip(O_parts[1:], lse_parts[1:]):
        new = torch.logaddexp(lse, lse_s)
        O = torch.exp(lse - new)[..., None] * O + torch.exp(lse_s - new)[..., None] * O_s
        lse = new
    return O, lse


def combine_mean(O_parts, lse_parts):
    return O_parts.mean(dim=0), torch.logsumexp(lse_parts, dim=0)


def combine_unshifted(O_parts, lse_parts):
    """exp of each lse alone: right until an lse passes about 709."""
    w = lse_parts.exp()
    return (w[..., None] * O_parts).sum(0) / w.sum(0)[..., None], w.sum(0).log()


def combine_lse_by_hand(O_parts, lse_parts):
    """The shares right, the lse as log Σ exp written out: inf for large scores."""
    lse = torch.log(torch.exp(lse_parts).sum(dim=0))
    return (torch.softmax(lse_parts, dim=0)[..., None] * O_parts).sum(0), lse


def combine_lse_max(O_parts, lse_parts):
    return combine_ok(O_parts, lse_parts)[0], lse_parts.max(dim=0).values


def combine_lse_sum(O_parts, lse_parts):
    return combine_ok(O_parts, lse_parts)[0], lse_parts.sum(dim=0)


def combine_softmax_last_axis(O_parts, lse_parts):
    w = torch.softmax(lse_parts, dim=-1)
    return (w.unsqueeze(-1) * O_parts).sum(0), torch.logsumexp(lse_parts, 0)


def combine_not_divided(O_parts, lse_parts):
    m = lse_parts.max(dim=0).values
    w = torch.exp(lse_parts - m)
    return (w[..., None] * O_parts).sum(0), m + torch.log(w.sum(0))


def combine_lse_as_ell(O_parts, lse_parts):
    """lse_s read as the sum ℓ_s itself."""
    w = lse_parts / lse_parts.sum(0)
    return (w[..., None] * O_parts).sum(0), torch.logsumexp(lse_parts, 0)


def combine_mean_and_max(O_parts, lse_parts):
    return O_parts.mean(0), lse_parts.amax(0)


def combine_scaled_in_place(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, 0)
    O_parts *= torch.exp(lse_parts - lse)[..., None]
    return O_parts.sum(0), lse


def combine_into_float32_zeros(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, 0)
    O = torch.zeros(O_parts.shape[1:])
    for O_s, lse_s in zip(O_parts, lse_parts):
        O += torch.exp(lse_s - lse)[..., None] * O_s
    return O, lse


def combine_clamped(O_parts, lse_parts):
    """The exponent clamped so that exp cannot overflow: finite everywhere, wrong for large scores."""
    w = lse_parts.clamp(max=700.0).exp()
    return (w[..., None] * O_parts).sum(0) / w.sum(0)[..., None], w.sum(0).log()


def combine_largest_split(O_parts, lse_parts):
    """The split of largest lse taken alone."""
    best = lse_parts.argmax(dim=0, keepdim=True)                                   # (1, ..., T_q)
    O = O_parts.gather(0, best[..., None].expand(1, *O_parts.shape[1:]))[0]
    return O, torch.logsumexp(lse_parts, 0)


def combine_over_rows(O_parts, lse_parts):
    """Everything over the last axis of lse_parts, the query rows."""
    lse = torch.logsumexp(lse_parts, dim=-1)
    return torch.einsum("s...q,s...qd->s...d", torch.exp(lse_parts - lse[..., None]), O_parts), lse


def combine_weights_without_d_v_axis(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, 0)
    return (torch.exp(lse_parts - lse) * O_parts).sum(0), lse


@pytest.mark.parametrize("fn", [combine_ok, combine_pairwise, M._combine])
def test_combining_is_accepted(fn):
    assert_accepted(check_combine_splits(fn))


def test_the_combined_splits_are_one_pass_over_all_the_keys():
    g = torch.Generator().manual_seed(0)
    Z = 3.0 * torch.randn(2, 4, 9, generator=g, dtype=torch.float64)
    V = torch.randn(9, 3, generator=g, dtype=torch.float64)
    O, lse = combine_ok(*M._splits(Z, V, (0, 2, 5, 9)))
    torch.testing.assert_close(O, torch.softmax(Z, -1) @ V)
    torch.testing.assert_close(lse, torch.logsumexp(Z, -1))
    for case in M._split_cases():
        out = M._combine_reference(*case)
        assert {t.dtype for t in out} == {case[0].dtype} and not any(t.isnan().any() for t in out)
    assert bool((M._split_cases()[2][1] == -INF).any())           # a range that a row cannot read


# written from the exercise text, each one verified wrong on the checker's inputs
COMBINE_WRONG = [
    (combine_mean, "equal-weights"), (combine_unshifted, "overflow"), (combine_lse_by_hand, "overflow"),
    (combine_lse_max, "lse-max"), (combine_lse_sum, "lse-sum"), (combine_softmax_last_axis, "rows"),
    (combine_not_divided, "unnormalised"), (combine_lse_as_ell, "lse-as-weights"),
    (combine_mean_and_max, "equal-weights"), (combine_scaled_in_place, "in-place"),
    (combine_into_float32_zeros, "dtype"), (combine_clamped, "values"),
    (combine_largest_split, "largest-split"), (combine_over_rows, "wrong-axis"),
]


@pytest.mark.parametrize("fn, label", COMBINE_WRONG + [(stub, "stub"),
                                                       (combine_weights_without_d_v_axis, "no-d_v-axis")])
def test_combining_mistakes_are_named(fn, label):
    assert_named(check_combine_splits(fn), label)


def test_combining_wrong_answers_are_wrong_and_mostly_named():
    for fn, _ in COMBINE_WRONG:
        assert not all(_close(fn(*[t.clone() for t in c]), M._combine_reference(*c), 1e-6) for c in M._split_cases()) \
            or fn in (combine_scaled_in_place, combine_into_float32_zeros), fn.__name__
    named_share = sum(label != "values" for _, label in COMBINE_WRONG) / len(COMBINE_WRONG)
    assert named_share >= 0.85


def test_combining_returning_only_O_is_told_the_shape_of_the_answer():
    v = check_combine_splits(lambda O_parts, lse_parts: combine_ok(O_parts, lse_parts)[0])
    assert not v.ok and "tuple of 2" in v.message, v


def test_combining_hints_have_two_levels():
    first, second = check_combine_splits(combine_mean), check_combine_splits(combine_mean, hint=2)
    assert first.message.endswith(MORE) and not second.message.endswith(MORE)
    assert first.message != second.message and second.mistake == "equal-weights"


def test_combining_tables_each_plant_their_own_mistake():
    assert_each_separated(M._split_cases(), M._combine_reference, M._SPLIT_MISTAKES)
    assert_planted_mistakes_named(check_combine_splits, M._SPLIT_MISTAKES)


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
    assert n == 29 == M._tiles_reading(*TILE_QUESTION.values())
    assert int((M.tile_plan(*TILE_QUESTION.values()) != M.SKIPPED).sum()) == n     # the library's own plan
    assert_accepted(check_tile_count(n))
    assert_accepted(check_tile_count(torch.tensor(29)))
    assert_accepted(check_tile_count(29.0))


@pytest.mark.parametrize("value, label", [
    (4 * 8, "no-skip"),                                        # every tile of the grid
    (32 - 29, "skipped"),
    (count_tiles(200, 200, 64, 64), "offset-ignored"),         # 10: the new queries placed at positions 0 …
    (count_tiles(500, 500, 64, 64), "prefill"),                # 36: all 500 positions as queries
    (5 + 6 + 7 + 8, "first-query"),                            # 26: each block up to its first query
    (6 + 7 + 8, "short-query-block"), (6 + 7 + 7 + 7, "short-key-block"),
    (4 + 5 + 6 + 7, "full-only"),                              # 22: the diagonal tiles left out
    (6 + 7 + 7, "full-blocks-only"),                           # 20: the short blocks left out
    (7, "diagonal-only"),
    (16, "half"),
    (5 + 6 + 7 + 7, "key-index"),                              # 25: each block's key blocks counted 0 … k as k
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
def _q_outer(Q, K, V, b_q, b_k, update, stop=-1):
    """Tiled attention with query blocks outside (the chapter's order), the state updated by ``update``; the key
    blocks run up to the query ``stop`` of the block."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    outs = []
    for q0 in range(0, T_q, b_q):
        q1 = min(q0 + b_q, T_q)
        pos = torch.arange(q0, q1) + T_k - T_q
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -INF, dtype=Q.dtype)
        ell, O = torch.zeros_like(m), torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)
        for k0 in range(0, int(pos[stop]) + 1, b_k):
            k1 = min(k0 + b_k, T_k)
            Z = (Q[..., q0:q1, :] @ K[..., k0:k1, :].mT) / math.sqrt(Q.shape[-1])
            Z = torch.where(torch.arange(k0, k1)[None, :] <= pos[:, None], Z, -INF)
            m_new = torch.maximum(m, Z.amax(-1))
            P = (Z - m_new[..., None]).exp()
            alpha = (m - m_new).exp()
            m, ell, O = m_new, *update(ell, O, alpha, P, P @ V[..., k0:k1, :])
        outs.append(O / ell[..., None])
    return torch.cat(outs, dim=-2)


def fixed_ok(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (a * ell + P.sum(-1), a[..., None] * O + PV))


def fixed_by_cloning(Q, K, V, block_q, block_k):
    """The buggy function's own structure, with the old maxima copied before m is written."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -INF)
    ell = Q.new_zeros(Q.shape[:-1])
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
            ell[..., rows] = r * ell[..., rows] + P.sum(-1)
            O[..., rows, :] = r[..., None] * O[..., rows, :] + torch.einsum("...qk,...kd->...qd", P, V[..., keys, :])
    return O / ell[..., None]


def fixed_stopping_at_the_first_query(Q, K, V, b_q, b_k):
    """Key blocks only up to the block's first query: its later rows miss the keys of a later key block."""
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (a * ell + P.sum(-1), a[..., None] * O + PV), stop=0)


def fixed_wrong_sign(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (ell / a + P.sum(-1), O / a[..., None] + PV))


def fixed_after_adding(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (a * (ell + P.sum(-1)), a[..., None] * (O + PV)))


def fixed_O_only(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (ell + P.sum(-1), a[..., None] * O + PV))


def fixed_ell_only(Q, K, V, b_q, b_k):
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (a * ell + P.sum(-1), O + PV))


def fixed_with_the_factor_dropped(Q, K, V, b_q, b_k):
    """Removing the factor that was always 1 changes nothing: the same output as the function as given."""
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (ell + P.sum(-1), O + PV))


def fixed_forgetting_earlier_blocks(Q, K, V, b_q, b_k):
    """The state started again at every key block."""
    return _q_outer(Q, K, V, b_q, b_k, lambda ell, O, a, P, PV: (P.sum(-1), PV))


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
    (fixed_O_only, "ell-not-rescaled"), (fixed_ell_only, "O-not-rescaled"),
    (fixed_in_float32, "dtype"), (fixed_scaling_Q_in_place, "in-place"), (stub, "stub"),
    (fixed_forgetting_earlier_blocks, "state-forgotten"), (fixed_stopping_at_the_first_query, "skip-by-first-query"),
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
    for check, table in ((check_combine_splits, [*M._SPLIT_MISTAKES, M._OVERFLOW]),
                         (check_fixed_tiled_attention, M._FIX_MISTAKES), (check_tile_count, M._TILE_GUESSES)):
        labels = {m.label for m in check.mistakes}
        assert {m.label for m in table} <= labels
        assert all(m.more for m in table), check.__name__


# ---------------------------------------------------------------- classes that once misled: each with its own answer
def combine_overflow_replaced(O_parts, lse_parts):
    """exp(lse_s) with its overflow replaced by a large finite number: finite everywhere, wrong for large scores."""
    w = lse_parts.exp().nan_to_num(posinf=1e300)
    return (w[..., None] * O_parts).sum(0) / w.sum(0)[..., None], w.sum(0).log()


def test_an_answer_with_no_inf_or_nan_is_never_told_it_holds_one():
    assert all(torch.isfinite(t).all() for c in M._split_cases() for t in combine_overflow_replaced(*c))
    verdict = check_combine_splits(combine_overflow_replaced)
    assert not verdict.ok and verdict.mistake != "overflow", verdict
    for text in (verdict.message, verdict.hint(2).message):
        assert "NaN" not in text and "holds inf" not in text, text


def _key_outer_fixed(Q, K, V, block_q, block_k, *, p_old=False, tile_max=False):
    """The buggy function's loops with m_old copied; P against the old maximum, or m the tile's own maximum."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m, ell = Q.new_full(Q.shape[:-1], -INF), Q.new_zeros(Q.shape[:-1])
    O = Q.new_zeros(*Q.shape[:-1], V.shape[-1])
    pos = torch.arange(T_k - T_q, T_k)
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k))
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:
                continue
            Z = Q[..., rows, :] @ K[..., keys, :].mT / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(keys > pos[rows, None], -INF)
            m_old = m[..., rows].clone()
            m[..., rows] = Z.amax(-1) if tile_max else torch.maximum(m_old, Z.amax(-1))
            r = torch.exp(m_old - m[..., rows])
            P = torch.exp(Z - (m_old if p_old else m[..., rows])[..., None])
            ell[..., rows] = r * ell[..., rows] + P.sum(-1)
            O[..., rows, :] = r[..., None] * O[..., rows, :] + P @ V[..., keys, :]
    return O / ell[..., None]


def test_p_against_the_old_maximum_is_named_without_claiming_the_factor_is_above_1():
    verdict = check_fixed_tiled_attention(lambda *a: _key_outer_fixed(*a, p_old=True))
    assert verdict.mistake == "wrong-sign" and "NaN" in verdict.message, verdict
    for text in (verdict.message, verdict.hint(2).message):
        assert "above 1" not in text, text
    assert_accepted(check_fixed_tiled_attention(_key_outer_fixed))


def test_a_maximum_taken_over_the_tile_alone_is_named():
    assert_named(check_fixed_tiled_attention(lambda *a: _key_outer_fixed(*a, tile_max=True)), "tile-max-only", "NaN")
