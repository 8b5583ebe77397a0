"""The projections chapter's checkers accept the solutions and name each planted mistake."""

from __future__ import annotations

import pytest
import torch

from attnlib.checks import check_cross_kv, check_linear_by_hand, check_qkv_params, check_split_fused
from conftest import assert_accepted, assert_mistakes_distinct, assert_named

# ---- nn.Linear by hand -------------------------------------------------------------------------

def linear_right(x, weight, bias):
    return x @ weight.T + bias


def linear_no_transpose(x, weight, bias):
    return x @ weight + bias


def linear_no_bias(x, weight, bias):
    return x @ weight.T


def linear_neither(x, weight, bias):
    return x @ weight


# ---- find the bug: splitting a fused projection -------------------------------------------------

def fused_right(X, W_QKV, d_k):
    Q, K, V = (X @ W_QKV).split(d_k, dim=-1)
    return Q, K, V


def fused_order(X, W_QKV, d_k):
    K, Q, V = (X @ W_QKV).split(d_k, dim=-1)   # Q and K read from the wrong blocks
    return Q, K, V


def fused_reversed(X, W_QKV, d_k):
    V, K, Q = (X @ W_QKV).split(d_k, dim=-1)
    return Q, K, V


def fused_as_given(X, W_QKV, d_k):
    """The function the chapter prints, bug included."""
    QKV = X @ W_QKV                                        # (..., T, 3·d_k)
    Q, K, V = QKV.view(*QKV.shape[:-1], d_k, 3).unbind(-1)
    return Q, K, V


def fused_rows(X, W_QKV, d_k):
    Q, K, V = (X @ W_QKV).chunk(3, dim=-2)                 # cut along T instead of the last axis
    return Q, K, V


def fused_reshape_3_d_k(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, K, V = QKV.view(*QKV.shape[:-1], 3, d_k).unbind(-2)  # another right repair
    return Q, K, V


# ---- cross-attention K and V -------------------------------------------------------------------

def cross_right(X, X_kv, W_K, W_V):
    return X_kv @ W_K, X_kv @ W_V


def cross_from_queries(X, X_kv, W_K, W_V):
    return X @ W_K, X @ W_V


def cross_k_from_queries(X, X_kv, W_K, W_V):
    return X @ W_K, X_kv @ W_V


def cross_v_from_queries(X, X_kv, W_K, W_V):
    return X_kv @ W_K, X @ W_V


def cross_swapped(X, X_kv, W_K, W_V):
    return X_kv @ W_V, X_kv @ W_K


CASES = [
    (check_linear_by_hand, linear_right, [
        (linear_no_transpose, "no-transpose"),
        (linear_no_bias, "no-bias"),
        (linear_neither, "no-transpose-no-bias"),
    ]),
    (check_split_fused, fused_right, [
        (fused_order, "order"),
        (fused_reversed, "reversed"),
        (fused_as_given, "unchanged"),
        (fused_rows, "rows"),
    ]),
    (check_cross_kv, cross_right, [
        (cross_from_queries, "kv-from-queries"),
        (cross_k_from_queries, "k-from-queries"),
        (cross_v_from_queries, "v-from-queries"),
        (cross_swapped, "swapped-weights"),
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
    from attnlib.checks import projections as P

    for cases, reference, mistakes in [(P._linear_cases(), P._linear_reference, P._LINEAR_MISTAKES),
                                      (P._fused_cases(), P._fused_reference, P._FUSED_MISTAKES),
                                      (P._cross_cases(), P._cross_reference, P._CROSS_MISTAKES)]:
        assert_mistakes_distinct(cases[0], reference, mistakes)


def test_another_repair_of_the_fused_split_is_accepted():
    assert_accepted(check_split_fused(fused_reshape_3_d_k))


def test_the_fused_bug_runs_silently_with_the_right_shapes():
    from attnlib.checks import projections as P

    for X, W_QKV, d_k in P._fused_cases():
        for got, want in zip(fused_as_given(X, W_QKV, d_k), fused_right(X, W_QKV, d_k)):
            assert got.shape == want.shape and not torch.allclose(got, want)


# ---- predict: the parameters of GPT-2 small's Q, K, V projections in one layer ----------------------------------

D_MODEL, H = 768, 12
D_HEAD = D_MODEL // H


def test_qkv_params_stub_right_number_and_each_typical_guess():
    assert_named(check_qkv_params(...), "stub")
    right = H * 3 * (D_MODEL * D_HEAD + D_HEAD)
    assert right == 3 * (D_MODEL**2 + D_MODEL) == 1_771_776
    assert_accepted(check_qkv_params(right))
    assert_accepted(check_qkv_params(torch.tensor(right)))
    guesses = {
        "one-head": 3 * (D_MODEL * D_HEAD + D_HEAD),
        "one-head-no-bias": 3 * D_MODEL * D_HEAD,
        "no-bias": 3 * D_MODEL**2,
        "full-width-heads": H * 3 * (D_MODEL**2 + D_MODEL),
        "with-W_O": 4 * (D_MODEL**2 + D_MODEL),
        "one-matrix": D_MODEL**2 + D_MODEL,
    }
    for label, value in guesses.items():
        assert_named(check_qkv_params(value), label)
    assert_named(check_qkv_params(right + 1000), "values")
    assert_named(check_qkv_params("many"), "type")


def test_qkv_params_are_counted_from_real_modules():
    from attnlib import FusedProjections
    from attnlib.checks import projections as P

    fused = FusedProjections(D_MODEL, D_MODEL, bias=True)      # all heads' W_Q, W_K, W_V side by side
    assert P._qkv_params(D_MODEL, H) == sum(p.numel() for p in fused.parameters())
    assert P._qkv_params(16, 4) == 3 * (16 * 16 + 16)


def test_cross_kv_solution_has_T_kv_rows():
    g = torch.Generator().manual_seed(0)
    X, X_kv, W = torch.randn(3, 6, generator=g), torch.randn(5, 6, generator=g), torch.randn(6, 4, generator=g)
    K, V = cross_right(X, X_kv, W, W)
    assert K.shape == V.shape == (5, 4)


def test_cross_kv_names_the_shapes_that_came_back():
    def narrow_values(X, X_kv, W_K, W_V):
        return X_kv @ W_K, (X_kv @ W_V)[..., :2]

    verdict = check_cross_kv(narrow_values)
    assert_named(verdict, "shape")
    assert "(5, 4), (5, 4)" in verdict.message and "(5, 4), (5, 2)" in verdict.message


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks import projections as P
    from attnlib.checks._core import _close

    for wrong, cases, reference in [(P._planted_linear, P._linear_cases(), linear_right),
                                    (P._planted_split, P._fused_cases(), fused_right),
                                    (P._planted_kv, P._cross_cases(), cross_right)]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), 1e-5), wrong.__name__
