"""The scaling chapter's checkers accept the solutions, name each planted mistake, and leave no hole: dtype,
in-place changes of the inputs, and a mistake blamed only where it matches every case."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib import scale, scores
from attnlib.checks import check_fp16_scores, check_head_scores, check_unit_length_scores
from attnlib.checks import scaling as S
from attnlib.checks._core import Group
from helpers import (
    assert_accepted,
    assert_each_mistake_named,
    assert_mistakes_distinct,
    assert_named,
    assert_no_hint_quotes,
    stub,
)

# ---- Z = Q Kᵀ / √d_k in float16, where Q Kᵀ passes 65504 but Z fits ---------------------------------------------

def fp16_scale_q(Q, K):
    return (Q / math.sqrt(Q.shape[-1])) @ K.transpose(-2, -1)


def fp16_split(Q, K):                 # d_k^¼ on each side
    r = Q.shape[-1] ** -0.25
    return (Q * r) @ (K * r).transpose(-2, -1)


def fp16_einsum_scale_k(Q, K):
    return torch.einsum("...id,...jd->...ij", Q, K / math.sqrt(K.shape[-1]))


def fp16_library(Q, K):               # the chapter's own functions, the scale put on Q
    return scores(scale(Q, Q.shape[-1]), K)


def fp16_float32_widened(Q, K):       # float32 goes through float64 and back: wider than what came in
    if Q.dtype == torch.float32:
        return fp16_scale_q(Q.double(), K.double()).float()
    return fp16_scale_q(Q, K)


def fp16_after(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def fp16_by_d_k_after(Q, K):
    return Q @ K.mT / Q.shape[-1]


def fp16_both(Q, K):
    d = math.sqrt(Q.shape[-1])
    return (Q / d) @ (K / d).mT


def fp16_q_by_d_k(Q, K):              # the same numbers as scaling both sides
    return (Q / Q.shape[-1]) @ K.mT


def fp16_quarter_once(Q, K):
    return (Q / Q.shape[-1] ** 0.25) @ K.mT


def fp16_clamped(Q, K):
    big = torch.finfo(Q.dtype).max
    return (Q @ K.mT).clamp(-big, big) / math.sqrt(Q.shape[-1])


def fp16_upcast_k(Q, K):
    return (Q / math.sqrt(Q.shape[-1])) @ K.float().mT


def fp16_transpose_01(Q, K):
    return (Q / math.sqrt(Q.shape[-1])) @ K.transpose(0, 1)


def fp16_upcast_and_back(Q, K):
    return fp16_after(Q.float(), K.float()).to(Q.dtype)


def fp16_upcast_float32_out(Q, K):
    return fp16_after(Q.float(), K.float())


def fp16_bfloat16(Q, K):              # bfloat16 has float32's range, but it is not the dtype that came in
    return fp16_after(Q.bfloat16(), K.bfloat16()).to(Q.dtype)


def fp16_always_half(Q, K):           # "float16 out" read as: always float16
    return fp16_scale_q(Q, K).half()


def fp16_scale_q_in_place(Q, K):
    Q /= math.sqrt(Q.shape[-1])
    return Q @ K.mT


@pytest.mark.parametrize("fn", [fp16_scale_q, fp16_split, fp16_einsum_scale_k, fp16_library, S._planted_fp16])
def test_fp16_scores_solutions_pass(fn):
    assert_accepted(check_fp16_scores(fn))


@pytest.mark.parametrize("fn, label, fragments", [
    (fp16_after, "scale-after", ["65504"]),
    (fp16_by_d_k_after, "scale-after", ["65504"]),
    (fp16_both, "scaled-twice", []),
    (fp16_q_by_d_k, "scaled-twice", []),
    (fp16_quarter_once, "fourth-root-once", []),
    (fp16_clamped, "clamped", []),
    (fp16_upcast_k, "upcast-K", []),
    (fp16_transpose_01, "last-two-axes", []),
    (fp16_upcast_and_back, "wider-dtype", ["float32"]),
    (fp16_upcast_float32_out, "wider-dtype", ["float32"]),
    (fp16_bfloat16, "wider-dtype", ["bfloat16"]),
    (fp16_float32_widened, "wider-dtype", ["float64 tensor from float32"]),
    (fp16_always_half, "dtype", ["float16", "float32"]),
    (fp16_scale_q_in_place, "in-place", ["Q"]),
    (lambda Q, K: fp16_scale_q(Q, K).to("meta"), "device", []),
    (stub, "stub", []),
])
def test_fp16_scores_mistakes_are_named(fn, label, fragments):
    assert_named(check_fp16_scores(fn), label, *fragments)


def test_the_fp16_cases_overflow_before_the_division_only():
    """Each float16 case has raw scores past 65504 and none near it, every |Z| below half of it, some raw scores
    that fit, and two to four axes; float32 and float64 follow."""
    groups = S._fp16_groups()
    half = [g.cases[0] for g in groups if g.cases[0][0].dtype == torch.float16]
    assert sorted(Q.dim() for Q, _ in half) == [2, 3, 4]
    for Q, K in half:
        raw = Q.double() @ K.double().mT
        assert (raw.abs() > 65504).any() and (raw.abs() < 65504).any()
        assert ((raw.abs() / 65504 - 1).abs() > 0.1).all(), "no raw score near the edge"
        assert (raw / math.sqrt(Q.shape[-1])).abs().max() < 65504 / 2
    assert {Q.dtype for g in groups for Q, _ in g.cases} == {torch.float16, torch.float32, torch.float64}


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


# A score scaled by a wrong constant is one class whatever the constant: the checkers measure the factor.
def fp16_cube_root(Q, K):             # the split written with a third root on one side only
    return (Q * Q.shape[-1] ** (-1 / 3)) @ K.mT


def fp16_width_of_k_rows(Q, K):       # √T_k, the other table axis
    return Q @ (K / math.sqrt(K.size(-2))).transpose(-1, -2)


def head_precedence(X, W_Q, W_K):     # ** binds before /: d_k / 2
    return (X @ W_Q) @ (X @ W_K).mT / W_Q.shape[1] ** 1 / 2


def head_by_log(X, W_Q, W_K):         # a natural log where the square root belongs
    return torch.einsum("...id,...jd->...ij", X @ W_Q, X @ W_K) / math.log(W_K.shape[-1])


@pytest.mark.parametrize("check, fn", [(check_fp16_scores, fp16_cube_root), (check_fp16_scores, fp16_width_of_k_rows),
                                       (check_head_scores, head_precedence), (check_head_scores, head_by_log)])
def test_a_score_scaled_by_any_wrong_constant_is_named_with_its_factor(check, fn):
    verdict = check(fn)
    assert_named(verdict, "scale-factor", "times")
    assert "divisor" in verdict.hint(2).message


def test_a_transpose_that_reverses_every_axis_is_named():
    assert_named(check_fp16_scores(lambda Q, K: torch.matmul(Q / Q.shape[-1] ** 0.5, K.T)), "every-axis-reversed")
    assert_named(check_head_scores(lambda X, W_Q, W_K: (X @ W_Q / math.sqrt(W_Q.shape[1])) @ (X @ W_K).T),
                 "every-axis-reversed")


def test_head_scores_in_float32_for_float64_inputs_are_named_dtype():
    assert_named(check_head_scores(head_float32), "dtype", "float64")


def test_folding_the_scale_into_the_callers_w_q_is_named_in_place():
    assert_named(check_head_scores(head_folds_scale_in_place), "in-place", "W_Q")


def test_the_bug_hunt_cases_have_d_k_apart_from_d_model_and_t():
    for X, W_Q, _ in S._head_cases():
        assert W_Q.shape[1] not in (X.shape[-1], X.shape[-2])


# ---- every function checker of the chapter -----------------------------------------------------------------------


# Mistakes that agree with the answer on the first case by design (a transpose of the first two axes on one
# sequence) or raise on a later one (that transpose of K, and K in float32, on a batch): a later case tells them.
LATER = {"first-two-axes", "last-two-axes", "upcast-K", "every-axis-reversed"}
RAISE = {"last-two-axes", "upcast-K", "every-axis-reversed"}   # named with the error they raise added to the hint


def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for check, cases, reference, mistakes in [
        (check_fp16_scores, [g.cases[0] for g in S._fp16_groups()], S._fp16_reference, S._FP16_MISTAKES),
        (check_head_scores, S._head_cases(), S._head_reference, S._HEAD_MISTAKES),
    ]:
        assert_each_mistake_named(check, [m for m in mistakes if m.label not in RAISE])
        assert_each_mistake_named(check, [m for m in mistakes if m.label in RAISE], exact=False)
        assert_mistakes_distinct(cases[0], reference, list({m.label: m for m in mistakes
                                                              if m.label not in LATER}.values()))
        assert_mistakes_distinct(cases[1], reference, [m for m in mistakes if m.label in LATER - RAISE])
        assert set(mistakes) <= set(check.mistakes), "every mistake the checker can name is registered"


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks._core import _close

    for wrong, groups, reference in [(S._planted_fp16, S._fp16_groups(), S._fp16_reference),
                                     (S._planted_head, [Group(S._head_cases(), 1e-5)], head_matmul)]:
        for group in groups:
            for case in group.cases:
                assert _close(wrong(*case), reference(*case), group.atol), wrong.__name__


def test_the_references_keep_the_inputs_dtype():
    for group in S._fp16_groups():
        for Q, K in group.cases:
            assert S._fp16_reference(Q, K).dtype == Q.dtype
    for X, W_Q, W_K in S._head_cases():
        assert S._head_reference(X, W_Q, W_K).dtype == X.dtype


def test_the_second_hint_level_says_more_and_the_first_points_to_it():
    first, second = check_fp16_scores(fp16_after), check_fp16_scores(fp16_after, hint=2)
    assert_named(first, "scale-after", "hint=2")
    assert_named(second, "scale-after", "moved it once already")
    assert "hint=2" not in second.message


@pytest.mark.parametrize("check, solutions", [
    (check_fp16_scores, [fp16_scale_q, fp16_split, fp16_einsum_scale_k]),
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
