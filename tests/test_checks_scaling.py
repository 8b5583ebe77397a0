"""The scaling chapter's checkers accept the solutions, name each planted mistake, and leave no hole: dtype,
in-place changes of the inputs, and a mistake blamed only where it matches every case."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import check_head_scores, check_scaled_scores, check_unit_length_scores
from attnlib.checks import scaling as S
from helpers import (
    assert_accepted,
    assert_each_mistake_named,
    assert_mistakes_distinct,
    assert_named,
    assert_no_hint_quotes,
    stub,
)

# ---- Z = S / √d_k from Q and K in the sequence-first layout: (T_q, B, d_k), (T_k, B, d_k) → (B, T_q, T_k) -------

def scores_einsum(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K) / math.sqrt(Q.shape[-1])


def scores_permuted(Q, K):
    Qb, Kb = Q.permute(1, 0, 2), K.permute(1, 2, 0)          # (B, T_q, d_k), (B, d_k, T_k)
    return Qb @ Kb / Q.shape[-1] ** 0.5


def scores_loop(Q, K):  # one sequence at a time, into a table of the inputs' dtype
    out = Q.new_empty(Q.shape[1], Q.shape[0], K.shape[0])
    for b in range(Q.shape[1]):
        out[b] = Q[:, b] @ K[:, b].T / math.sqrt(Q.shape[-1])
    return out


def scores_batch_table(Q, K):        # the product taken on the sequence-first tensors as they come
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def scores_sequence_first(Q, K):
    return torch.einsum("ibd,jbd->ibj", Q, K) / math.sqrt(Q.shape[-1])


def scores_keys_on_rows(Q, K):
    return torch.einsum("ibd,jbd->bji", Q, K) / math.sqrt(Q.shape[-1])


def scores_no_transpose(Q, K):
    return Q.transpose(0, 1) @ K.transpose(0, 1) / math.sqrt(Q.shape[-1])


def scores_unscaled(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K)


def scores_by_d_k(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K) / Q.shape[-1]


def scores_times_sqrt(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K) * math.sqrt(Q.shape[-1])


def scores_float32(Q, K):            # a dtype trap: float64 inputs give float32 scores
    return scores_einsum(Q.float(), K.float())


def scores_loop_into_zeros(Q, K):    # a dtype trap: the table is created in the default dtype
    out = torch.zeros(Q.shape[1], Q.shape[0], K.shape[0])
    for b in range(Q.shape[1]):
        out[b] = Q[:, b] @ K[:, b].T / math.sqrt(Q.shape[-1])
    return out


def scores_transpose_in_place(Q, K):  # transpose_ turns the caller's Q around
    Q.transpose_(0, 1)
    return Q @ K.permute(1, 2, 0) / math.sqrt(Q.shape[-1])


def scores_scale_q_in_place(Q, K):
    Q /= math.sqrt(Q.shape[-1])
    return torch.einsum("ibd,jbd->bij", Q, K)


@pytest.mark.parametrize("fn", [scores_einsum, scores_permuted, scores_loop])
def test_scaled_scores_solutions_pass(fn):
    assert_accepted(check_scaled_scores(fn))


@pytest.mark.parametrize("fn, label", [
    (scores_batch_table, "batch-table"),
    (scores_sequence_first, "sequence-first-result"),
    (scores_keys_on_rows, "keys-on-rows"),
    (scores_no_transpose, "no-transpose"),
    (scores_unscaled, "no-scale"),
    (scores_by_d_k, "divide-by-d_k"),
    (scores_times_sqrt, "multiply-by-sqrt"),
    (stub, "stub"),
])
def test_scaled_scores_mistakes_are_named(fn, label):
    assert_named(check_scaled_scores(fn), label)


@pytest.mark.parametrize("fn", [scores_float32, scores_loop_into_zeros])
def test_scaled_scores_in_another_dtype_are_named_dtype(fn):
    assert_named(check_scaled_scores(fn), "dtype", "float32", "float64")


def test_scaled_scores_on_another_device_are_named_device():
    assert_named(check_scaled_scores(lambda Q, K: scores_einsum(Q, K).to("meta")), "device")


@pytest.mark.parametrize("fn", [scores_transpose_in_place, scores_scale_q_in_place])
def test_scaled_scores_that_change_q_in_place_are_named(fn):
    assert_named(check_scaled_scores(fn), "in-place", "Q")


def test_the_layout_cases_are_square_once_then_differ_and_include_float64():
    cases = S._scores_cases()
    Q, K = cases[0]
    assert Q.shape[0] == Q.shape[1] == Q.shape[2] == K.shape[0], "the square case lets layout slips run"
    assert any(Q.shape[0] != K.shape[0] for Q, K in cases), "T_q ≠ T_k somewhere"
    assert any(Q.dtype == torch.float64 for Q, _ in cases)


def test_a_mistake_that_matches_one_case_only_is_not_blamed():
    def unscaled_on_square_inputs_only(Q, K):
        s = scores_einsum(Q, K)
        return s * math.sqrt(Q.shape[-1]) if Q.shape[0] == Q.shape[1] else s

    assert_named(check_scaled_scores(unscaled_on_square_inputs_only), "values")


# ---- find the bug: the score table built by broadcasting ---------------------------------------------------------

def head_fixed(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) / math.sqrt(W_Q.shape[-1])


def head_matmul(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return Q @ K.transpose(-2, -1) / math.sqrt(W_Q.shape[1])


def head_folded_scale(X, W_Q, W_K):  # 1/√d_k folded into a new W_Q: the input is left alone
    return (X @ (W_Q / math.sqrt(W_Q.shape[1]))) @ (X @ W_K).transpose(-2, -1)


def head_scale_only_fixed(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return (K[..., :, None, :] * Q[..., None, :, :]).sum(-1) / math.sqrt(W_Q.shape[-1])


def head_rows_only_fixed(X, W_Q, W_K):
    Q, K = X @ W_Q, X @ W_K
    return (Q[..., :, None, :] * K[..., None, :, :]).sum(-1) / math.sqrt(X.shape[-1])


def head_by_d_k(X, W_Q, W_K):
    return head_matmul(X, W_Q, W_K) * math.sqrt(W_Q.shape[1]) / W_Q.shape[1]


def head_unscaled(X, W_Q, W_K):
    return head_matmul(X, W_Q, W_K) * math.sqrt(W_Q.shape[1])


def head_same_weights(X, W_Q, W_K):
    return head_matmul(X, W_Q, W_Q)


def head_float32(X, W_Q, W_K):
    return head_matmul(X.float(), W_Q.float(), W_K.float())


def head_folds_scale_in_place(X, W_Q, W_K):  # folds 1/√d_k into the caller's W_Q
    W_Q *= W_Q.shape[1] ** -0.5
    return (X @ W_Q) @ (X @ W_K).transpose(-2, -1)


@pytest.mark.parametrize("fn", [head_fixed, head_matmul, head_folded_scale])
def test_head_scores_solutions_pass(fn):
    assert_accepted(check_head_scores(fn))


@pytest.mark.parametrize("fn, label", [
    (S.buggy_head_scores, "as-given"),
    (head_scale_only_fixed, "rows-are-keys"),
    (head_rows_only_fixed, "sqrt-d_model"),
    (head_by_d_k, "divide-by-d_k"),
    (head_unscaled, "no-scale"),
    (head_same_weights, "same-weights"),
    (stub, "stub"),
])
def test_head_scores_mistakes_are_named(fn, label):
    assert_named(check_head_scores(fn), label)


def test_head_scores_in_float32_for_float64_inputs_are_named_dtype():
    assert_named(check_head_scores(head_float32), "dtype", "float64")


def test_folding_the_scale_into_the_callers_w_q_is_named_in_place():
    assert_named(check_head_scores(head_folds_scale_in_place), "in-place", "W_Q")


def test_the_bug_hunt_cases_have_d_k_apart_from_d_model_and_t():
    for X, W_Q, _ in S._head_cases():
        assert W_Q.shape[1] not in (X.shape[-1], X.shape[-2])


# ---- every function checker of the chapter -----------------------------------------------------------------------


# Mistakes that agree with the answer (or with another mistake) on the first case by design: a scale by √B, √T_q or
# √T_k and a reshape on the square case, a transpose of the first two axes on one sequence. A later case tells them.
LATER = {"reshape", "sqrt-B", "sqrt-T_q", "sqrt-T_k", "first-two-axes"}


def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for check, cases, reference, mistakes, later in [
        (check_scaled_scores, S._scores_cases(), S._scores_reference, S._SCORES_MISTAKES, 2),
        (check_head_scores, S._head_cases(), S._head_reference, S._HEAD_MISTAKES, 1),
    ]:
        assert_each_mistake_named(check, mistakes)
        assert_mistakes_distinct(cases[0], reference, [m for m in mistakes if m.label not in LATER])
        assert_mistakes_distinct(cases[later], reference, [m for m in mistakes if m.label in LATER])
        assert set(mistakes) <= set(check.mistakes), "every mistake the checker can name is registered"


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks._core import _close

    for wrong, cases, reference in [(S._planted_scores, S._scores_cases(), scores_einsum),
                                    (S._planted_head, S._head_cases(), head_matmul)]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), 1e-5), wrong.__name__


def test_the_references_keep_the_inputs_dtype():
    for Q, K in S._scores_cases():
        assert S._scores_reference(Q, K).dtype == Q.dtype
    for X, W_Q, W_K in S._head_cases():
        assert S._head_reference(X, W_Q, W_K).dtype == X.dtype


def test_the_second_hint_level_says_more_and_the_first_points_to_it():
    first, second = check_scaled_scores(scores_batch_table), check_scaled_scores(scores_batch_table, hint=2)
    assert_named(first, "batch-table", "hint=2")
    assert_named(second, "batch-table", "batch axis to the front")
    assert "hint=2" not in second.message


@pytest.mark.parametrize("check, solutions", [
    (check_scaled_scores, [scores_einsum, scores_permuted]),
    (check_head_scores, [head_fixed, head_matmul]),
])
def test_no_first_level_hint_holds_the_code_of_another_solution(check, solutions):
    assert_no_hint_quotes(check, solutions)


# ---- predict: the spread of Z when every query and key has length 1 -----------------------------------------------

def test_unit_length_stub_right_number_and_each_typical_guess():
    assert_named(check_unit_length_scores(...), "stub")
    assert_named(check_unit_length_scores(None), "stub")
    assert_accepted(check_unit_length_scores(1 / 64))
    assert_accepted(check_unit_length_scores(0.016))
    for g in S._GUESSES:
        v = check_unit_length_scores(g.value)
        assert_named(v, g.label)
        assert v.message.startswith("too high" if g.value > 1 / 64 else "too low"), (g.label, v)
    values = sorted(g.value for g in S._GUESSES) + [1 / 64]
    assert all(b > 1.2 * a for a, b in zip(sorted(values), sorted(values)[1:])), "every guess apart"
    assert_named(check_unit_length_scores(0.5), "values", "too high")
    assert_named(check_unit_length_scores([1 / 64]), "type")


# Wrong predictions written from the exercise's text, as a learner would compute them, with the verdict each must
# get ("values" where no typical slip fits: told its side, never a wrong name).
WRONG_PREDICTIONS = {
    "the division always gives spread 1": (1.0, "scaling-fixes-it"),
    "std of q·k, forgot to divide": (1 / math.sqrt(64), "unscaled"),
    "gave the variance 1/d_k²": (64 ** -2, "variance"),
    "divided the std by d_k": (math.sqrt(1 / 64) / 64, "divided-by-d_k"),
    "divided the variance by √d_k": (math.sqrt((1 / 64) / math.sqrt(64)), "variance-divided-by-sqrt"),
    "length 1 over d_model components": (math.sqrt(1 / 128) / math.sqrt(128), "width-d_model"),
    "divided by √d_model": (math.sqrt(1 / 64) / math.sqrt(128), "sqrt-d_model"),
    "divided by √T": (math.sqrt(1 / 64) / math.sqrt(32), "sqrt-T"),
    "divided by √B": (math.sqrt(1 / 64) / math.sqrt(4), "sqrt-B"),
    "one term's spread, divided by √d_k": (math.sqrt(64 ** -2) / 8, "divided-by-d_k"),
    "the spread of a softmax weight, 1/T": (1 / 32, "values"),
    "unit-variance components, no division: √d_k": (math.sqrt(64), "unit-variance"),
    "random directions are orthogonal: 0": (0, "orthogonal"),
}


@pytest.mark.parametrize("name", WRONG_PREDICTIONS)
def test_wrong_predictions_from_the_text_are_rejected_and_named_or_told_their_side(name):
    value, label = WRONG_PREDICTIONS[name]
    assert_named(check_unit_length_scores(value), label)


def test_most_wrong_predictions_are_named():
    named = [label for _, label in WRONG_PREDICTIONS.values() if label != "values"]
    assert len(named) >= 0.85 * len(WRONG_PREDICTIONS)


def test_no_first_level_guess_hint_gives_the_method_or_the_answer():
    for g in S._GUESSES:
        for method in ("1/d_k", "1/64", "0.0156", "divides their variance", "square root of"):
            assert method not in g.hint, (g.label, method)


def test_unit_length_std_is_measured_and_reported():
    measured = S._measured_unit_length_std(**S._UNIT)
    assert abs(measured - 1 / 64) < 0.02 / 64, measured
    assert f"measured {measured:.4g}" in check_unit_length_scores(1 / 64).message


def test_unit_length_check_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    want = torch.rand(2)
    torch.manual_seed(0)
    check_unit_length_scores(1 / 64)
    assert torch.equal(torch.rand(2), want)
