"""The mask chapter's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnlib.checks import check_causal_mask, check_masked_weights

NEG_INF = float("-inf")


# ---- check_causal_mask: fn(T) -> M (T, T) ---------------------------------------------------------------

def mask_solution(T):
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return torch.zeros(T, T).masked_fill(future, NEG_INF)


def mask_solution_additive(T):
    return torch.full((T, T), NEG_INF).triu(1)


def mask_lower_triangle(T):
    return torch.zeros(T, T).masked_fill(torch.ones(T, T).tril(-1).bool(), NEG_INF)


def mask_tril_fill(T):
    return torch.zeros(T, T).masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool)), NEG_INF)


def mask_with_diagonal(T):
    return torch.zeros(T, T).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool)), NEG_INF)


def mask_zero_one(T):
    return torch.triu(torch.ones(T, T), diagonal=1)


def mask_bool(T):
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def mask_finite(T):
    return torch.zeros(T, T).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -1e9)


def stub_mask(T):
    raise NotImplementedError


@pytest.mark.parametrize("fn", [mask_solution, mask_solution_additive])
def test_causal_mask_solutions_pass(fn):
    v = check_causal_mask(fn)
    assert v.ok, v
    assert str(v).startswith("✓")


@pytest.mark.parametrize("fn, label", [
    (mask_lower_triangle, "wrong-triangle"),
    (mask_tril_fill, "wrong-triangle"),
    (mask_with_diagonal, "diagonal-masked"),
    (mask_zero_one, "zero-one"),
    (mask_bool, "zero-one"),
    (mask_finite, "finite"),
    (stub_mask, "stub"),
])
def test_causal_mask_mistakes_are_named(fn, label):
    v = check_causal_mask(fn)
    assert not v.ok and v.mistake == label, v
    assert str(v).startswith("✗ not yet")


# ---- check_masked_weights: fn(S) -> P (..., T, T) -------------------------------------------------------

def future_of(S, diagonal=1):
    T = S.shape[-1]
    return torch.ones(T, T, dtype=torch.bool).triu(diagonal)


def weights_solution(S):
    return torch.softmax(S.masked_fill(future_of(S), NEG_INF), dim=-1)


def weights_solution_renormalised(S):
    P = torch.softmax(S, dim=-1) * ~future_of(S)
    return P / P.sum(dim=-1, keepdim=True)


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
    return torch.softmax(S * torch.ones(T, T).tril(), dim=-1)


def stub_weights(S):
    raise NotImplementedError


@pytest.mark.parametrize("fn", [weights_solution, weights_solution_renormalised])
def test_masked_weights_solutions_pass(fn):
    v = check_masked_weights(fn)
    assert v.ok, v


@pytest.mark.parametrize("fn, label", [
    (weights_after_softmax, "after-softmax"),
    (weights_no_mask, "no-mask"),
    (weights_wrong_axis, "wrong-axis"),
    (weights_wrong_triangle, "wrong-triangle"),
    (weights_tril_fill, "wrong-triangle"),
    (weights_diagonal_masked, "diagonal-masked"),
    (weights_multiplied, "multiplied"),
    (stub_weights, "stub"),
])
def test_masked_weights_mistakes_are_named(fn, label):
    v = check_masked_weights(fn)
    assert not v.ok and v.mistake == label, v


def test_an_unrecognised_answer_gets_a_generic_verdict():
    assert check_causal_mask(lambda T: torch.zeros(T, T)).mistake == "values"
    assert check_masked_weights(lambda S: S[..., :2]).mistake == "shape"


def test_a_learner_who_edits_the_input_in_place_does_not_change_later_checks():
    def in_place(S):
        return S.zero_()

    assert not check_masked_weights(in_place).ok
    assert check_masked_weights(weights_solution).ok


def test_every_planted_mistake_is_recognised_as_itself():
    from attnlib.checks import mask

    for check, mistakes in [(check_causal_mask, mask._MASK_MISTAKES), (check_masked_weights, mask._WEIGHTS_MISTAKES)]:
        for m in mistakes:
            v = check(m.wrong)
            assert not v.ok and v.mistake == m.label and v.message == m.hint, (m.label, v)
