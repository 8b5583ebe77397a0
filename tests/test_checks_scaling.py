"""The scaling chapter's checkers accept the solutions and name each planted mistake."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import check_head_scores, check_scaled_scores, check_scaled_variance
from conftest import assert_accepted, assert_mistakes_distinct, assert_named

# ---- S / √d_k from Q and K ---------------------------------------------------------------------

def scores_right(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def scores_by_d_k(Q, K):
    return Q @ K.transpose(-2, -1) / Q.shape[-1]


def scores_unscaled(Q, K):
    return Q @ K.transpose(-2, -1)


def scores_no_transpose(Q, K):
    return Q @ K / math.sqrt(Q.shape[-1])


def scores_keys_on_rows(Q, K):
    return K @ Q.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def scores_times_sqrt(Q, K):
    return Q @ K.transpose(-2, -1) * Q.shape[-1] ** 0.5


# ---- scaled scores from X ----------------------------------------------------------------------

def head_right(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return Q @ K.transpose(-2, -1) / math.sqrt(W_Q.shape[1])


def head_sqrt_d_model(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return Q @ K.transpose(-2, -1) / math.sqrt(X.shape[-1])


def head_by_d_k(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return Q @ K.transpose(-2, -1) / W_Q.shape[1]


def head_unscaled(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return Q @ K.transpose(-2, -1)


def head_same_weights(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_Q
    return Q @ K.transpose(-2, -1) / math.sqrt(W_Q.shape[1])


CASES = [
    (check_scaled_scores, scores_right, [
        (scores_by_d_k, "divide-by-d_k"),
        (scores_unscaled, "no-scale"),
        (scores_no_transpose, "no-transpose"),
        (scores_keys_on_rows, "transposed-table"),
        (scores_times_sqrt, "multiply-by-sqrt"),
    ]),
    (check_head_scores, head_right, [
        (head_sqrt_d_model, "sqrt-d_model"),
        (head_by_d_k, "divide-by-d_k"),
        (head_unscaled, "no-scale"),
        (head_same_weights, "same-weights"),
    ]),
]

SOLUTIONS = [(c, s) for c, s, _ in CASES]
MISTAKES = [(c, w, label) for c, _, ws in CASES for w, label in ws]


@pytest.mark.parametrize("check, solution", SOLUTIONS, ids=lambda x: getattr(x, "__name__", ""))
def test_solution_is_accepted(check, solution):
    assert_accepted(check(solution))


@pytest.mark.parametrize("check, wrong, label", MISTAKES, ids=lambda x: getattr(x, "__name__", x))
def test_planted_mistake_is_named(check, wrong, label):
    assert_named(check(wrong), label)


def test_every_planted_mistake_differs_from_the_answer_and_from_the_others():
    from attnlib.checks import scaling as S

    for cases, reference, mistakes in [(S._scores_cases(), S._scores_reference, S._SCORES_MISTAKES),
                                      (S._head_cases(), S._head_reference, S._HEAD_MISTAKES)]:
        assert_mistakes_distinct(cases[0], reference, mistakes)


def test_forgetting_the_transpose_fails_on_shapes_when_d_k_differs_from_T():
    from attnlib.checks import scaling as S

    Q, K = S._scores_cases()[1]
    assert Q.shape[-1] != Q.shape[-2]
    with pytest.raises(RuntimeError):
        scores_no_transpose(Q, K)


# ---- predict: the variance of the scaled score when q and k have components of variance 4 ------------------------

def test_scaled_variance_stub_right_number_and_each_typical_guess():
    assert_named(check_scaled_variance(...), "stub")
    assert_named(check_scaled_variance(None), "stub")
    sigma2, d_k = 4, 64
    assert_accepted(check_scaled_variance(sigma2 * sigma2))
    assert_accepted(check_scaled_variance(15.5))
    guesses = {
        "scaling-fixes-it": 1,
        "one-factor": sigma2,
        "added": sigma2 + sigma2,
        "unscaled": sigma2 * sigma2 * d_k,
        "divided-by-sqrt": sigma2 * sigma2 * math.sqrt(d_k),
        "one-factor-unscaled": sigma2 * d_k,
    }
    for label, value in guesses.items():
        assert_named(check_scaled_variance(value), label)
    assert_named(check_scaled_variance(40), "values")
    assert_named(check_scaled_variance([16]), "type")


def test_scaled_variance_is_measured_and_reported():
    from attnlib.checks import scaling as S

    measured = S._measured_scaled_variance(**S._VARIANCE)
    assert abs(measured - 16) < 0.8, measured
    assert S._measured_scaled_variance(1.0, 64, 20_000) == pytest.approx(1.0, rel=0.05)
    assert f"measured {measured:.4g}" in check_scaled_variance(16).message


def test_scaled_variance_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    want = torch.rand(2)
    torch.manual_seed(0)
    check_scaled_variance(16)
    assert torch.equal(torch.rand(2), want)


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks import scaling as S
    from attnlib.checks._core import _close

    for wrong, cases, reference in [(S._planted_scores, S._scores_cases(), scores_right),
                                    (S._planted_head, S._head_cases(), head_right)]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), 1e-5), wrong.__name__
