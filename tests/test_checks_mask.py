"""The mask chapter's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnlib.checks import check_causal_mask, check_masked_weights, check_padded_causal_weights
from conftest import assert_accepted, assert_each_mistake_named, assert_mistakes_distinct, assert_named, stub

NEG_INF = float("-inf")


def upper(T, diagonal=1):
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=diagonal)


# ---- check_causal_mask: fn(T) -> M (T, T) ---------------------------------------------------------------

def mask_solution(T):
    return torch.zeros(T, T).masked_fill(upper(T), NEG_INF)


def mask_solution_additive(T):
    return torch.full((T, T), NEG_INF).triu(1)


def mask_lower_triangle(T):
    return torch.zeros(T, T).masked_fill(torch.ones(T, T).tril(-1).bool(), NEG_INF)


def mask_tril_fill(T):
    return torch.zeros(T, T).masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool)), NEG_INF)


def mask_with_diagonal(T):
    return torch.zeros(T, T).masked_fill(upper(T, 0), NEG_INF)


def mask_zero_one(T):
    return torch.triu(torch.ones(T, T), diagonal=1)


def mask_bool(T):
    return upper(T)


def mask_keep_bool(T):  # SDPA's boolean convention: True = may attend
    return torch.ones(T, T, dtype=torch.bool).tril()


@pytest.mark.parametrize("fn", [mask_solution, mask_solution_additive])
def test_causal_mask_solutions_pass(fn):
    assert_accepted(check_causal_mask(fn))


@pytest.mark.parametrize("fn, label", [
    (mask_lower_triangle, "wrong-triangle"),
    (mask_tril_fill, "wrong-triangle"),
    (mask_with_diagonal, "diagonal-masked"),
    (mask_zero_one, "zero-one"),
    (mask_bool, "zero-one"),
    (mask_keep_bool, "keep-mask"),
    (stub, "stub"),
])
def test_causal_mask_mistakes_are_named(fn, label):
    assert_named(check_causal_mask(fn), label)


@pytest.mark.parametrize("fill", [-1e4, -1e9, -1e30, torch.finfo(torch.float32).min, -100.0])
def test_any_large_finite_fill_is_named_finite_and_quoted(fill):
    def finite(T):
        return torch.zeros(T, T).masked_fill(upper(T), fill)

    v = check_causal_mask(finite)
    assert_named(v, "finite")
    assert f"{fill:.4g}" in v.message


def test_a_finite_fill_in_float16_or_float64_is_named_finite():
    for dtype, fill in [(torch.float16, torch.finfo(torch.float16).min), (torch.float64, -1e200),
                         (torch.float64, torch.finfo(torch.float64).min)]:
        def finite(T, dtype=dtype, fill=fill):
            return torch.zeros(T, T, dtype=dtype).masked_fill(upper(T), fill)

        assert_named(check_causal_mask(finite), "finite")


def test_a_small_finite_fill_is_not_called_a_stand_in_for_minus_infinity():
    v = check_causal_mask(lambda T: torch.zeros(T, T).masked_fill(upper(T), -1.0))
    assert_named(v, "values")


def test_the_mask_checker_tries_an_odd_and_an_even_T():
    seen = []

    def spy(T):
        seen.append(T)
        return mask_solution(T)

    assert_accepted(check_causal_mask(spy))
    assert any(T % 2 for T in seen) and any(T % 2 == 0 for T in seen), seen


# ---- check_masked_weights: fn(S) -> P (..., T, T) -------------------------------------------------------

def future_of(S, diagonal=1):
    return upper(S.shape[-1], diagonal)


def weights_solution(S):
    return torch.softmax(S.masked_fill(future_of(S), NEG_INF), dim=-1)


def weights_solution_renormalised(S):
    P = torch.softmax(S, dim=-1) * ~future_of(S)
    return P / P.sum(dim=-1, keepdim=True)


def weights_solution_finfo_min(S):  # a finite fill that always fits the dtype is fine with a causal mask
    return torch.softmax(S.masked_fill(future_of(S), torch.finfo(S.dtype).min), dim=-1)


def weights_after_softmax(S):
    return torch.softmax(S, dim=-1).masked_fill(future_of(S), 0.0)


def weights_no_mask(S):
    return torch.softmax(S, dim=-1)


def weights_wrong_axis(S):
    return torch.softmax(S.masked_fill(future_of(S), NEG_INF), dim=-2)


def weights_wrong_triangle(S):
    return torch.softmax(S.masked_fill(future_of(S).transpose(-2, -1), NEG_INF), dim=-1)


def weights_tril_fill(S):
    T = S.shape[-1]
    return torch.softmax(S.masked_fill(torch.ones(T, T, dtype=torch.bool).tril(), NEG_INF), dim=-1)


def weights_diagonal_masked(S):
    return torch.softmax(S.masked_fill(future_of(S, 0), NEG_INF), dim=-1)


def weights_multiplied(S):
    T = S.shape[-1]
    return torch.softmax(S * torch.ones(T, T, dtype=S.dtype).tril(), dim=-1)


def weights_fill_minus_1e9(S):
    return torch.softmax(S.masked_fill(future_of(S), -1e9), dim=-1)


def weights_fill_float32_min(S):
    return torch.softmax(S.masked_fill(future_of(S), torch.finfo(torch.float32).min), dim=-1)


@pytest.mark.parametrize("fn", [weights_solution, weights_solution_renormalised, weights_solution_finfo_min])
def test_masked_weights_solutions_pass(fn):
    assert_accepted(check_masked_weights(fn))


@pytest.mark.parametrize("fn, label", [
    (weights_after_softmax, "after-softmax"),
    (weights_no_mask, "no-mask"),
    (weights_wrong_axis, "wrong-axis"),
    (weights_wrong_triangle, "wrong-triangle"),
    (weights_tril_fill, "wrong-triangle"),
    (weights_diagonal_masked, "diagonal-masked"),
    (weights_multiplied, "multiplied"),
    (weights_fill_minus_1e9, "finite"),        # passes in float32, refused by masked_fill in float16
    (weights_fill_float32_min, "finite"),
    (stub, "stub"),
])
def test_masked_weights_mistakes_are_named(fn, label):
    assert_named(check_masked_weights(fn), label)


def test_the_weights_checker_includes_float16_scores():
    dtypes = []

    def spy(S):
        dtypes.append(S.dtype)
        return weights_solution(S)

    assert_accepted(check_masked_weights(spy))
    assert torch.float16 in dtypes and torch.float32 in dtypes, dtypes


def test_an_unrecognised_answer_gets_a_generic_verdict():
    assert_named(check_causal_mask(lambda T: torch.zeros(T, T)), "values")
    assert_named(check_masked_weights(lambda S: S[..., :2]), "shape")


def test_a_learner_who_edits_the_input_in_place_does_not_change_later_checks():
    def in_place(S):
        return S.zero_()

    assert not check_masked_weights(in_place).ok
    assert check_masked_weights(weights_solution).ok

    def in_place_padded(S, is_pad):
        is_pad.fill_(True)
        return S.zero_()

    assert not check_padded_causal_weights(in_place_padded).ok
    assert check_padded_causal_weights(padded_solution).ok


# ---- check_padded_causal_weights: fn(S, is_pad) -> P (B, T, T) ------------------------------------------

def allowed_of(S, is_pad):
    return ~future_of(S) & ~is_pad[:, None, :]


def padded_solution(S, is_pad):
    allowed = allowed_of(S, is_pad)
    P = torch.softmax(S.masked_fill(~allowed, NEG_INF), dim=-1)
    return P.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def padded_solution_nan_to_num(S, is_pad):
    return torch.softmax(S.masked_fill(~allowed_of(S, is_pad), NEG_INF), dim=-1).nan_to_num(0.0)


def padded_solution_sdpa_style(S, is_pad):  # additive masks, then empty rows zeroed
    T = S.shape[-1]
    M = torch.zeros(T, T).masked_fill(future_of(S), NEG_INF)
    pad = torch.zeros(is_pad.shape).masked_fill(is_pad, NEG_INF)[:, None, :]
    P = torch.softmax(S + M + pad, dim=-1)
    return torch.where(P.isnan(), torch.zeros_like(P), P)


def padded_nan_rows(S, is_pad):
    return torch.softmax(S.masked_fill(~allowed_of(S, is_pad), NEG_INF), dim=-1)


def padded_uniform_rows(S, is_pad):
    return torch.softmax(S.masked_fill(~allowed_of(S, is_pad), torch.finfo(S.dtype).min), dim=-1)


def padded_queries(S, is_pad):
    allowed = ~future_of(S) & ~is_pad[:, :, None]
    return torch.softmax(S.masked_fill(~allowed, NEG_INF), dim=-1).nan_to_num(0.0)


def padded_causal_only(S, is_pad):
    return torch.softmax(S.masked_fill(future_of(S), NEG_INF), dim=-1)


def padded_padding_only(S, is_pad):
    P = torch.softmax(S.masked_fill(is_pad[:, None, :], NEG_INF), dim=-1)
    return P.nan_to_num(0.0)


def padded_inverted(S, is_pad):
    return padded_solution(S, ~is_pad)


def padded_inverted_nan(S, is_pad):
    return padded_nan_rows(S, ~is_pad)


def padded_zeroed_after(S, is_pad):
    P = torch.softmax(S.masked_fill(future_of(S), NEG_INF), dim=-1)
    return P.masked_fill(is_pad[:, None, :], 0.0)


@pytest.mark.parametrize("fn", [padded_solution, padded_solution_nan_to_num, padded_solution_sdpa_style])
def test_padded_causal_solutions_pass(fn):
    assert_accepted(check_padded_causal_weights(fn))


@pytest.mark.parametrize("fn, label", [
    (padded_nan_rows, "nan-rows"),
    (padded_uniform_rows, "uniform-rows"),
    (padded_queries, "padded-queries"),
    (padded_causal_only, "no-padding"),
    (padded_padding_only, "no-causal"),
    (padded_inverted, "inverted-padding"),
    (padded_inverted_nan, "inverted-padding"),
    (padded_zeroed_after, "after-softmax"),
    (stub, "stub"),
])
def test_padded_causal_mistakes_are_named(fn, label):
    assert_named(check_padded_causal_weights(fn), label)


def test_the_padding_cases_include_a_query_with_nothing_to_read():
    from attnlib.checks import mask

    for S, is_pad in mask._padded_cases()[:1]:
        empty = ~allowed_of(S, is_pad).any(-1)
        assert empty.any(), "no left-padded sequence: the NaN-row mistake would pass"
        assert (~is_pad).all(-1).any(), "no unpadded sequence in the batch"


# ---- every checker of the chapter ---------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    from attnlib.checks import mask

    for check, mistakes, cases, reference in [
        (check_causal_mask, mask._MASK_MISTAKES, [(5,)], lambda T: mask_solution(T)),
        (check_masked_weights, mask._WEIGHTS_MISTAKES, mask._scores_cases(), mask._weights_reference),
        (check_padded_causal_weights, mask._PADDED_MISTAKES, mask._padded_cases(), mask._padded_reference),
    ]:
        assert_each_mistake_named(check, mistakes)
        assert_mistakes_distinct(cases[0], reference, mistakes)


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks import mask
    from attnlib.checks._core import _close

    for wrong, cases, reference, atol in [
        (mask._planted_mask, [(5,), (8,)], mask_solution, 0.0),
        (mask._planted_weights, mask._scores_cases(), weights_solution, 1e-5),
        (mask._planted_weights, mask._half_cases(), weights_solution, 3e-3),
        (mask._planted_padded, mask._padded_cases(), padded_solution, 1e-5),
    ]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), atol), wrong.__name__
