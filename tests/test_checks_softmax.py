"""The softmax chapter's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import check_attention_output, check_fixed_head, check_softmax_jacobian, check_stable_softmax
from conftest import assert_accepted, assert_named, stub

# ---- check_stable_softmax: fn(z) -> softmax along the last axis -----------------------------------------


def softmax_solution(z):
    e = (z - z.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_solution_logsumexp(z):
    return (z - z.logsumexp(dim=-1, keepdim=True)).exp()


def softmax_naive(z):
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def softmax_minus_min(z):
    e = (z - z.min(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_global_max(z):
    e = (z - z.max()).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_dim0(z):
    e = (z - z.amax(dim=0, keepdim=True)).exp()
    return e / e.sum(dim=0, keepdim=True)


def softmax_dim1(z):  # right on a (rows, n) table, wrong on a batch (B, rows, n)
    e = (z - z.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)


def softmax_unnormalised(z):
    return (z - z.amax(dim=-1, keepdim=True)).exp()


@pytest.mark.parametrize("fn", [softmax_solution, softmax_solution_logsumexp, lambda z: torch.softmax(z, dim=-1)])
def test_stable_softmax_solutions_pass(fn):
    v = check_stable_softmax(fn)
    assert v.ok, v


@pytest.mark.parametrize("fn, label", [
    (softmax_naive, "naive"),
    (softmax_minus_min, "subtract-min"),
    (softmax_global_max, "global-max"),
    (softmax_dim0, "wrong-axis"),
    (softmax_dim1, "wrong-axis"),
    (softmax_unnormalised, "not-normalised"),
    (stub, "stub"),
])
def test_stable_softmax_mistakes_are_named(fn, label):
    v = check_stable_softmax(fn)
    assert_named(v, label)


# ---- check_attention_output: fn(Q, K, V) -> (..., T, d_v) -----------------------------------------------

def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def weights(Q, K, scale=None, mask=True, dim=-1):
    d_k, T = Q.shape[-1], Q.shape[-2]
    S = Q @ K.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    if mask:
        S = S.masked_fill(future(T), float("-inf"))
    return torch.softmax(S, dim=dim)


def output_solution(Q, K, V):
    return weights(Q, K) @ V


def output_sdpa(Q, K, V):
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)


def output_times_K(Q, K, V):
    return weights(Q, K) @ K


def output_no_scale(Q, K, V):
    return weights(Q, K, scale=1.0) @ V


def output_scale_dk(Q, K, V):
    return weights(Q, K, scale=Q.shape[-1]) @ V


def output_no_mask(Q, K, V):
    return weights(Q, K, mask=False) @ V


def output_mask_after(Q, K, V):
    P = weights(Q, K, mask=False).masked_fill(future(Q.shape[-2]), 0.0)
    return P @ V


def output_wrong_axis(Q, K, V):
    return weights(Q, K, dim=-2) @ V


def output_scale_by_T(Q, K, V):
    return weights(Q, K, scale=math.sqrt(Q.shape[-2])) @ V


def output_QtK(Q, K, V):
    T = Q.shape[-2]
    S = (Q.transpose(-2, -1) @ K / math.sqrt(Q.shape[-1])).masked_fill(future(T), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


@pytest.mark.parametrize("fn", [output_solution, output_sdpa])
def test_attention_output_solutions_pass(fn):
    v = check_attention_output(fn)
    assert v.ok, v


@pytest.mark.parametrize("fn, label", [
    (output_times_K, "times-K"),
    (output_no_scale, "no-scale"),
    (output_scale_dk, "scale-by-dk"),
    (output_no_mask, "no-mask"),
    (output_mask_after, "after-softmax"),
    (output_wrong_axis, "wrong-axis"),
    (output_scale_by_T, "scale-by-T"),
    (output_QtK, "Qt-K"),
    (stub, "stub"),
])
def test_attention_output_mistakes_are_named(fn, label):
    v = check_attention_output(fn)
    assert_named(v, label)


def test_the_attention_cases_have_T_equal_to_d_k_first_and_T_different_from_d_k():
    from attnlib.checks import softmax

    shapes = [(Q.shape[-2], Q.shape[-1], V.shape[-1]) for Q, K, V in softmax._attention_cases()]
    T, d_k, d_v = shapes[0]
    assert T == d_k == d_v, shapes
    assert any(T != d_k and T % 2 for T, d_k, _ in shapes[1:]), shapes


# ---- check_softmax_jacobian: fn(z) -> J (..., n, n) -----------------------------------------------------

def stable(z):
    return torch.softmax(z, dim=-1)


def jacobian_solution(z):
    p = stable(z)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_solution_einsum(z):
    p = stable(z)
    eye = torch.eye(z.shape[-1])
    return torch.einsum("...i,ij->...ij", p, eye) - torch.einsum("...i,...j->...ij", p, p)


def jacobian_diag_p(z):
    return torch.diag_embed(stable(z))


def jacobian_minus_outer(z):
    p = stable(z)
    return -torch.einsum("...i,...j->...ij", p, p)


def jacobian_diag_only(z):
    p = stable(z)
    return torch.diag_embed(p - p * p)


def jacobian_flipped(z):
    return -jacobian_solution(z)


def jacobian_naive(z):
    p = z.exp() / z.exp().sum(dim=-1, keepdim=True)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_one_row(z):
    p = stable(z)
    return torch.diag(p) - torch.outer(p, p)


def jacobian_one_row_broadcast(z):
    p = stable(z)
    return torch.diag(p) - p.unsqueeze(1) * p.unsqueeze(0)


@pytest.mark.parametrize("fn", [jacobian_solution, jacobian_solution_einsum])
def test_softmax_jacobian_solutions_pass(fn):
    assert_accepted(check_softmax_jacobian(fn))


@pytest.mark.parametrize("fn, label", [
    (jacobian_diag_p, "missing-outer"),
    (jacobian_minus_outer, "missing-diag"),
    (jacobian_diag_only, "diagonal-only"),
    (jacobian_flipped, "sign"),
    (jacobian_naive, "naive-softmax"),
    (jacobian_one_row, "not-batched"),
    (jacobian_one_row_broadcast, "not-batched"),
    (stub, "stub"),
])
def test_softmax_jacobian_mistakes_are_named(fn, label):
    assert_named(check_softmax_jacobian(fn), label)


def test_the_jacobian_reference_is_autograd_and_vanishes_on_a_saturated_row():
    from attnlib.checks import softmax

    z = torch.tensor([[0.5, -1.0, 2.0], [12.0, 0.0, -1.0]], dtype=torch.float64)
    J = softmax._jacobian_reference(z)
    torch.testing.assert_close(J, jacobian_solution(z))
    assert J[1].abs().max() < 1e-4 < J[0].abs().max()


# ---- check_fixed_head: the einsum head of "find the bug", repaired --------------------------------------

def einsum_head_as_given(Q, K, V):
    S = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(future(S.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_fixed(Q, K, V):
    S = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(future(S.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bjd->bid", P, V)


def einsum_head_scores_transposed(Q, K, V):
    S = torch.einsum("bid,bjd->bji", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(future(S.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_softmax_dim0(Q, K, V):
    S = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(future(S.shape[-1]), float("-inf")), dim=-2)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_column_sum(Q, K, V):
    S = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(future(S.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bjd->bjd", P, V)


def einsum_head_times_K(Q, K, V):
    return weights(Q, K) @ K


def einsum_head_no_mask(Q, K, V):
    return weights(Q, K, mask=False) @ V


@pytest.mark.parametrize("fn", [einsum_head_fixed, output_solution, output_sdpa])
def test_fixed_head_solutions_pass(fn):
    assert_accepted(check_fixed_head(fn))


@pytest.mark.parametrize("fn, label", [
    (einsum_head_as_given, "unchanged"),
    (einsum_head_scores_transposed, "transposed-scores"),
    (einsum_head_softmax_dim0, "softmax-over-queries"),
    (einsum_head_column_sum, "column-sum"),
    (einsum_head_times_K, "times-K"),
    (einsum_head_no_mask, "no-mask"),
    (stub, "stub"),
])
def test_fixed_head_mistakes_are_named(fn, label):
    assert_named(check_fixed_head(fn), label)


def test_the_unfixed_head_does_not_give_the_answer_away():
    v = check_fixed_head(einsum_head_as_given)
    assert "bjd->bid" not in v.message and "bij,bjd" not in v.message, v


def test_the_planted_bug_runs_silently_and_reads_the_future():
    Q, K, V = (torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    V2 = V.clone()
    V2[0, -1] += 1.0
    change = (einsum_head_as_given(Q, K, V2) - einsum_head_as_given(Q, K, V)).abs().amax(-1)[0]
    assert change[0] > 0                       # output 0 moved when the last value changed
    assert (einsum_head_fixed(Q, K, V2) - einsum_head_fixed(Q, K, V))[0, :-1].abs().max() == 0


def test_an_unrecognised_answer_gets_a_generic_verdict():
    assert_named(check_stable_softmax(lambda z: torch.zeros_like(z)), "values")
    assert_named(check_attention_output(lambda Q, K, V: Q[..., :1]), "shape")
    assert_named(check_fixed_head(lambda Q, K, V: torch.zeros_like(V)), "values")


def test_every_planted_mistake_is_recognised_as_itself():
    from attnlib.checks import softmax

    reference = lambda Q, K, V: output_solution(Q, K, V)  # noqa: E731
    for check, mistakes, cases, ref in [
        (check_stable_softmax, softmax._SOFTMAX_MISTAKES, softmax._softmax_cases()[1:], stable),
        (check_attention_output, softmax._ATTENTION_MISTAKES, softmax._attention_cases(), reference),
        (check_softmax_jacobian, softmax._JACOBIAN_MISTAKES, softmax._jacobian_cases(), jacobian_solution),
        (check_fixed_head, softmax._FIXED_HEAD_MISTAKES, softmax._attention_cases(), reference),
    ]:
        for m in mistakes:
            v = check(m.wrong)
            assert_named(v, m.label)
            assert v.message.startswith(m.hint), v
        assert_distinct_on_some_case(cases, ref, mistakes)


def assert_distinct_on_some_case(cases, reference, mistakes):
    """The answer and every planted mistake differ pairwise on at least one case (raising counts as different)."""
    from attnlib.checks._core import _close

    def run(f, case):
        try:
            return f(*case)
        except RuntimeError:
            return None

    outs = [[run(f, case) for case in cases] for f in [reference] + [m.wrong for m in mistakes]]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            same = [a is not None and b is not None and _close(a, b, 1e-5) for a, b in zip(outs[i], outs[j])]
            assert not all(same), (i, j)


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks import softmax
    from attnlib.checks._core import _close

    for wrong, cases, reference in [
        (softmax._planted_softmax, softmax._softmax_cases(), stable),
        (softmax._planted_attention, softmax._attention_cases(), output_solution),
        (softmax._planted_jacobian, softmax._jacobian_cases(), jacobian_solution),
        (softmax._einsum_head, softmax._attention_cases(), output_solution),
    ]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), 1e-5), wrong.__name__


def test_no_wrong_jacobian_matches_two_planted_mistakes():
    """Where two planted mistakes both differ from the answer, they differ from each other: the first one that
    matches names the learner's mistake, whatever the order of the list."""
    from attnlib.checks import softmax
    from attnlib.checks._core import _close

    for case in softmax._jacobian_cases():
        want = softmax._jacobian_reference(*case)
        outs = []
        for m in softmax._JACOBIAN_MISTAKES:
            try:
                out = m.wrong(*case)
            except RuntimeError:
                continue
            if not _close(out, want, 1e-5):
                outs.append((m.label, out))
        for i, (a, out_a) in enumerate(outs):
            for b, out_b in outs[i + 1:]:
                assert not _close(out_a, out_b, 1e-5), (a, b)
