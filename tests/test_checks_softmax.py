"""The softmax chapter's checkers accept right answers and name each typical mistake.

For each checker: the solutions pass; every planted mistake of its table is named as itself, with its own
hint at the first level and its second at ``hint=2``; realistic wrong answers written here by hand (not the
planted functions) are named; an answer that changes its input in place, or returns another dtype than the
inputs', is told so; an answer the checker does not know gets a generic verdict, never a wrong name.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib.checks import check_attention_output, check_fixed_head, check_log_softmax, check_softmax_jacobian
from attnlib.checks import softmax as chapter
from attnlib.checks._core import AS_GIVEN, MORE, SAME_AS_GIVEN, _close
from helpers import assert_accepted, assert_named, stub

CHECKERS = [
    (check_log_softmax, chapter._LOG_SOFTMAX_MISTAKES, chapter._log_softmax_groups,
     chapter._log_softmax_reference),
    (check_attention_output, chapter._SEQ_FIRST_MISTAKES, chapter._seq_first_groups, chapter._seq_first_reference),
    (check_softmax_jacobian, chapter._JACOBIAN_MISTAKES, chapter._jacobian_groups, chapter._jacobian_reference),
    (check_fixed_head, chapter._FIXED_HEAD_MISTAKES, chapter._head_groups,
     lambda Q, K, V: chapter.attention(Q, K, V)),
]
NAMES = [c[0].__name__ for c in CHECKERS]


# ---- check_log_softmax: fn(z) -> log softmax along the last axis, in z's dtype --------------------------

def log_softmax_solution(z):
    m = z.amax(dim=-1, keepdim=True)
    shifted = z - m
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


def log_softmax_logsumexp(z):
    return z - z.logsumexp(dim=-1, keepdim=True)


def log_softmax_in_float32_and_back(z):
    return log_softmax_solution(z.float()).to(z.dtype)


def log_softmax_naive(z):
    return z - z.exp().sum(dim=-1, keepdim=True).log()


def log_softmax_log_of_naive_weights(z):
    return (z.exp() / z.exp().sum(dim=-1, keepdim=True)).log()


def log_softmax_log_of_weights(z):
    return torch.softmax(z, dim=-1).log()


def log_softmax_log_of_stable_weights(z):
    e = (z - z.amax(dim=-1, keepdim=True)).exp()
    return torch.log(e / e.sum(dim=-1, keepdim=True))


def log_softmax_minus_min(z):
    shifted = z - z.min(dim=-1, keepdim=True).values
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


def log_softmax_global_max(z):
    shifted = z - z.max()
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


def log_softmax_along(dim):
    def f(z):
        shifted = z - z.amax(dim=dim, keepdim=True)
        return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()
    return f


def log_softmax_no_keepdim(z):
    m = z.max(dim=-1).values
    return z - m - (z - m).exp().sum(dim=-1).log()


def log_softmax_no_keepdim_in_the_sum(z):   # the maximum kept right, the sum not: fails at the last step
    shifted = z - z.amax(dim=-1, keepdim=True)
    return shifted - shifted.exp().sum(dim=-1).log()


def log_softmax_max_dropped(z):
    m = z.amax(dim=-1, keepdim=True)
    return z - (z - m).exp().sum(dim=-1, keepdim=True).log()


def log_softmax_returns_weights(z):
    return torch.softmax(z, dim=-1)


def log_softmax_shift_only(z):
    return z - z.amax(dim=-1, keepdim=True)


def log_softmax_subtracts_in_place(z):
    z -= z.amax(dim=-1, keepdim=True)
    return z - z.exp().sum(dim=-1, keepdim=True).log()


def log_softmax_exp_in_place(z):
    shifted = z - z.amax(dim=-1, keepdim=True)
    lse = z.sub_(z.amax(dim=-1, keepdim=True)).exp_().sum(dim=-1, keepdim=True).log()   # exponentiates z itself
    return shifted - lse


def log_softmax_upcast(z):                 # computes in float32 and never casts back
    return log_softmax_solution(z.float())


def log_softmax_float32_sum(z):            # accumulates in float32: float16 - float32 is float32
    shifted = z - z.amax(dim=-1, keepdim=True)
    return shifted - shifted.exp().sum(dim=-1, keepdim=True, dtype=torch.float32).log()


@pytest.mark.parametrize("fn", [log_softmax_solution, log_softmax_logsumexp,
                                lambda z: torch.log_softmax(z, dim=-1), lambda z: F.log_softmax(z, -1)])
def test_log_softmax_solutions_pass(fn):
    assert_accepted(check_log_softmax(fn))


def test_a_float32_round_trip_is_judged_at_float64_accuracy():
    assert_named(check_log_softmax(log_softmax_in_float32_and_back), "precision", "float32 round trip")


@pytest.mark.parametrize("fn, label", [
    (log_softmax_naive, "naive"),
    (log_softmax_log_of_naive_weights, "naive"),
    (log_softmax_log_of_weights, "log-of-weights"),
    (log_softmax_log_of_stable_weights, "log-of-weights"),
    (log_softmax_minus_min, "subtract-min"),
    (log_softmax_global_max, "global-max"),
    (log_softmax_along(0), "wrong-axis"),
    (log_softmax_along(1), "wrong-axis"),        # right on a (rows, n) table, wrong on a batch (B, rows, n)
    (log_softmax_along(-2), "wrong-axis"),
    (log_softmax_no_keepdim, "no-keepdim"),
    (log_softmax_no_keepdim_in_the_sum, "no-keepdim"),      # the same error, at its last step
    (log_softmax_max_dropped, "max-dropped"),
    (log_softmax_returns_weights, "weights"),
    (log_softmax_shift_only, "not-normalised"),
    (stub, "stub"),
])
def test_log_softmax_mistakes_are_named(fn, label):
    assert_named(check_log_softmax(fn), label)


@pytest.mark.parametrize("fn", [log_softmax_subtracts_in_place, log_softmax_exp_in_place])
def test_log_softmax_that_changes_its_scores_in_place_is_told_so(fn):
    assert_named(check_log_softmax(fn), "in-place", "input z")


@pytest.mark.parametrize("fn, want, got", [
    (log_softmax_upcast, "float64", "float32"),           # the first dtype trap met: float64 in, float32 out
    (log_softmax_float32_sum, "float16", "float32"),      # float16 in, float32 out
    (lambda z: torch.log_softmax(z, dim=-1).float(), "float64", "float32"),
    (lambda z: torch.log_softmax(z, dim=-1).double(), "float32", "float64"),
])
def test_log_softmax_in_another_dtype_is_told_so(fn, want, got):
    v = check_log_softmax(fn)
    assert_named(v, "dtype", f"for {want} scores your answer comes back as {got}")
    assert_named(check_log_softmax(fn, hint=2), "dtype", "undone before returning")


def test_the_log_softmax_cases_hold_each_trap_in_each_dtype():
    """In float16, float32 and float64 alike: a row whose exp() overflows, and a weight that underflows to 0
    while its log is an ordinary number; the reference is finite everywhere."""
    by_dtype = {}
    for g in chapter._log_softmax_groups():
        for (z,) in g.cases:
            by_dtype.setdefault(z.dtype, []).append(z)
            assert chapter._log_softmax_reference(z).isfinite().all()
    assert set(by_dtype) == {torch.float16, torch.float32, torch.float64}
    for dtype, zs in by_dtype.items():
        assert any(not log_softmax_naive(z).isfinite().all() for z in zs), dtype
        assert any(not log_softmax_log_of_weights(z).isfinite().all() for z in zs), dtype


# ---- check_attention_output: one head in the (T, B, d) layout ---------------------------------------------

def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def batch_first(*xs):
    return [x.transpose(0, 1) for x in xs]


def head(Q, K, V, scale=None, mask=True, dim=-1, mixed=None, mask_after=False):
    """Batch-first attention with optional slips: Q, K (B, T, d_k), V (B, T, d_v)."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    if mask and not mask_after:
        Z = Z.masked_fill(future(T), float("-inf"))
    P = torch.softmax(Z, dim=dim)
    if mask_after:
        P = P.masked_fill(future(T), 0.0)
    return P @ (V if mixed is None else mixed)


def seq_first_solution(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V).transpose(0, 1)


def seq_first_additive(Q, K, V):     # the book's solution: an additive mask in the scores' dtype
    Q, K, V = batch_first(Q, K, V)
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    return (torch.softmax(Z + chapter.causal_mask(T, dtype=Z.dtype), dim=-1) @ V).transpose(0, 1)


def seq_first_einsum(Q, K, V):
    T, d_k = Q.shape[0], Q.shape[-1]
    Z = torch.einsum("ibd,jbd->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z.masked_fill(future(T), float("-inf")), dim=-1)
    return torch.einsum("bij,jbd->ibd", P, V)


def seq_first_sdpa(Q, K, V):
    return F.scaled_dot_product_attention(*batch_first(Q, K, V), is_causal=True).transpose(0, 1)


def seq_first_permute(Q, K, V):
    Q, K, V = (x.permute(1, 0, 2) for x in (Q, K, V))
    return head(Q, K, V).permute(1, 0, 2).contiguous()


def seq_first_page_copy(Q, K, V):      # the page's batch-first cell, pasted: the batch taken for the positions
    T = Q.shape[-2]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    M = torch.full((T, T), float("-inf")).triu(1).to(Z.dtype)
    return torch.softmax(Z + M, dim=-1) @ V


def seq_first_positions_mask_only(Q, K, V):   # the positions counted right for the mask only: fails when T ≠ B
    T = Q.shape[0]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return torch.softmax(Z + chapter.causal_mask(T, dtype=Z.dtype), dim=-1) @ V


def seq_first_not_restored(Q, K, V):
    return head(*batch_first(Q, K, V))


def seq_first_times_K(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, mixed=K).transpose(0, 1)


def seq_first_no_scale(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, scale=1.0).transpose(0, 1)


def seq_first_scale_by_T(Q, K, V):
    T = Q.shape[0]
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, scale=math.sqrt(T)).transpose(0, 1)


def seq_first_no_mask(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, mask=False).transpose(0, 1)


def seq_first_mask_after(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, mask_after=True).transpose(0, 1)


def seq_first_wrong_axis(Q, K, V):
    Q, K, V = batch_first(Q, K, V)
    return head(Q, K, V, dim=-2).transpose(0, 1)


def seq_first_float32_mask(Q, K, V):   # the page's mask, built in the default dtype: float16 + float32 = float32
    Q, K, V = batch_first(Q, K, V)
    T = Q.shape[-2]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    M = torch.full((T, T), float("-inf")).triu(1)
    return (torch.softmax(Z + M, dim=-1) @ V).transpose(0, 1)


def seq_first_scales_Q_in_place(Q, K, V):
    Qb, Kb, Vb = batch_first(Q, K, V)    # views: writing into Qb writes into Q
    Qb /= math.sqrt(Q.shape[-1])
    Z = Qb @ Kb.transpose(-2, -1)
    return (torch.softmax(Z.masked_fill(future(Q.shape[0]), float("-inf")), dim=-1) @ Vb).transpose(0, 1)


@pytest.mark.parametrize("fn", [seq_first_solution, seq_first_additive, seq_first_einsum, seq_first_sdpa,
                                seq_first_permute])
def test_attention_output_solutions_pass(fn):
    assert_accepted(check_attention_output(fn))


@pytest.mark.parametrize("fn, label", [
    (seq_first_page_copy, "batch-as-positions"),
    (seq_first_positions_mask_only, "batch-as-positions"),
    (seq_first_not_restored, "not-restored"),
    (seq_first_times_K, "times-K"),
    (seq_first_no_scale, "no-scale"),
    (seq_first_scale_by_T, "scale-by-T"),
    (seq_first_no_mask, "no-mask"),
    (seq_first_mask_after, "after-softmax"),
    (seq_first_wrong_axis, "wrong-axis"),
    (stub, "stub"),
])
def test_attention_output_mistakes_are_named(fn, label):
    assert_named(check_attention_output(fn), label)


def test_attention_output_with_a_float32_mask_is_told_its_dtype():
    """float16 scores + a float32 mask give float32 weights, and float32 weights @ float16 values is refused."""
    assert_named(check_attention_output(seq_first_float32_mask), "mixed-dtypes",
                 "for float16 inputs your function stops with an error about dtypes", "RuntimeError")
    assert_named(check_attention_output(seq_first_float32_mask, hint=2), "mixed-dtypes", "float32; mixed with")


def test_attention_output_that_returns_float32_weights_times_float32_values_is_told_its_dtype():
    def f(Q, K, V):     # V cast to the weights' dtype: float16 inputs come back float32
        return seq_first_float32_mask(Q, K, V.to(torch.promote_types(V.dtype, torch.float32)))
    assert_named(check_attention_output(f), "dtype", "for float16 inputs your output is float32")
    assert_named(check_attention_output(f, hint=2), "dtype", "float16 with float32")


def test_attention_output_that_scales_Q_in_place_is_told_so():
    assert_named(check_attention_output(seq_first_scales_Q_in_place), "in-place", "input Q")


def test_the_seq_first_cases_have_T_equal_to_B_and_T_different_from_B():
    cases = [case for g in chapter._seq_first_groups() for case in g.cases]
    shapes = [(Q.shape[0], Q.shape[1], Q.shape[2], V.shape[2]) for Q, K, V in cases]
    T, B, d_k, d_v = shapes[0]
    assert T == B == d_k == d_v, shapes
    assert any(T != B and d_k != d_v for T, B, d_k, d_v in shapes[1:]), shapes
    assert {Q.dtype for Q, _, _ in cases} == {torch.float16, torch.float32, torch.float64}


def test_a_mix_across_the_batch_is_caught_even_where_the_shapes_agree():
    """Where T = B the page's batch-first code runs on (T, B, d) tensors with the right shape: only the values
    tell, and they are what the diagnosis names."""
    (Q, K, V), = chapter._seq_first_groups()[0].cases[:1]
    out = seq_first_page_copy(Q, K, V)
    assert out.shape == seq_first_solution(Q, K, V).shape
    assert not _close(out, seq_first_solution(Q, K, V), 1e-5)


# ---- check_softmax_jacobian: fn(z) -> J (..., n, n) -----------------------------------------------------

def stable(z):
    return torch.softmax(z, dim=-1)


def jacobian_solution(z):
    p = stable(z)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_solution_einsum(z):
    p = stable(z)
    eye = torch.eye(z.shape[-1], dtype=z.dtype)
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


def jacobian_filled_in_float32(z):     # zeros made in the default dtype, then filled: float64 comes back float32
    p = stable(z)
    J = torch.zeros(*z.shape, z.shape[-1])
    J[...] = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    return J


def jacobian_exp_in_place(z):          # the stable softmax written into z itself
    p = z.sub_(z.amax(dim=-1, keepdim=True)).exp_()
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


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


def test_softmax_jacobian_in_float32_for_float64_scores_is_told_so():
    assert_named(check_softmax_jacobian(jacobian_filled_in_float32), "dtype", "for float64 scores your J is float32")


def jacobian_eye_in_float32(z):         # an identity made in the default dtype: * and einsum promote it
    p = stable(z)
    return torch.einsum("...i,ij->...ij", p, torch.eye(z.shape[-1])) - torch.einsum("...i,...j->...ij", p, p)


def test_softmax_jacobian_with_a_float32_identity_is_right_since_einsum_promotes_it():
    assert_accepted(check_softmax_jacobian(jacobian_eye_in_float32))


def test_softmax_jacobian_that_exponentiates_its_scores_in_place_is_told_so():
    assert_named(check_softmax_jacobian(jacobian_exp_in_place), "in-place", "input z")


def test_the_jacobian_reference_is_autograd_in_the_dtype_of_z_and_vanishes_on_a_saturated_row():
    z = torch.tensor([[0.5, -1.0, 2.0], [12.0, 0.0, -1.0]], dtype=torch.float64)
    J = chapter._jacobian_reference(z)
    torch.testing.assert_close(J, jacobian_solution(z))
    assert J[1].abs().max() < 1e-4 < J[0].abs().max()
    assert chapter._jacobian_reference(z.float()).dtype == torch.float32


# ---- check_fixed_head: the einsum head of "find the bug", repaired --------------------------------------

def einsum_head_as_given(Q, K, V):
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_fixed(Q, K, V):
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bjd->bid", P, V)


def einsum_head_P_transposed(Q, K, V):      # the last line kept, P transposed: a right fix too
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P.transpose(-2, -1), V)


def einsum_head_mask_transposed(Q, K, V):   # the mask moved to the other triangle, the last line kept
    T = Q.shape[-2]
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z + chapter.causal_mask(T).T, dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_mask_tril(Q, K, V):         # the same, written with tril
    T = Q.shape[-2]
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(torch.ones(T, T, dtype=torch.bool).tril(-1), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_scores_transposed(Q, K, V):
    Z = torch.einsum("bid,bjd->bji", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_softmax_dim0(Q, K, V):
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-2)
    return torch.einsum("bij,bid->bjd", P, V)


def einsum_head_column_sum(Q, K, V):
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return torch.einsum("bij,bjd->bjd", P, V)


def einsum_head_times_K(Q, K, V):
    return head(Q, K, V, mixed=K)


def einsum_head_no_mask(Q, K, V):
    return head(Q, K, V, mask=False)


def einsum_head_built_in_float32(Q, K, V):  # the output written into float32 zeros: float64 comes back float32
    out = torch.zeros(V.shape)
    out[...] = einsum_head_fixed(Q, K, V)
    return out


@pytest.mark.parametrize("fn", [einsum_head_fixed, einsum_head_P_transposed, lambda Q, K, V: head(Q, K, V),
                                lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, is_causal=True)])
def test_fixed_head_solutions_pass(fn):
    assert_accepted(check_fixed_head(fn))


@pytest.mark.parametrize("fn, label", [
    (einsum_head_as_given, "unchanged"),
    (einsum_head_mask_transposed, "mask-transposed"),
    (einsum_head_mask_tril, "mask-transposed"),
    (einsum_head_scores_transposed, "transposed-scores"),
    (einsum_head_softmax_dim0, "softmax-over-queries"),
    (einsum_head_column_sum, "column-sum"),
    (einsum_head_times_K, "times-K"),
    (einsum_head_no_mask, "no-mask"),
    (stub, "stub"),
])
def test_fixed_head_mistakes_are_named(fn, label):
    assert_named(check_fixed_head(fn), label)


def test_fixed_head_in_float32_for_float64_inputs_is_told_so():
    assert_named(check_fixed_head(einsum_head_built_in_float32), "dtype", "for float64 inputs your output is float32")


def test_the_unfixed_head_does_not_give_the_answer_away():
    for level in (1, 2):
        v = check_fixed_head(einsum_head_as_given, hint=level)
        assert "bjd->bid" not in v.message and "bij,bjd" not in v.message, v


def test_the_planted_bug_runs_silently_and_reads_the_future():
    Q, K, V = (torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    V2 = V.clone()
    V2[0, -1] += 1.0
    change = (einsum_head_as_given(Q, K, V2) - einsum_head_as_given(Q, K, V)).abs().amax(-1)[0]
    assert change[0] > 0                       # output 0 moved when the last value changed
    assert (einsum_head_fixed(Q, K, V2) - einsum_head_fixed(Q, K, V))[0, :-1].abs().max() == 0


def test_the_transposed_mask_passes_the_exercises_test_and_is_still_wrong():
    """The mistake the named hint is for: the "which outputs move" test of the exercise passes, the values do not."""
    Q, K, V = (torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    V2 = V.clone()
    V2[0, -1] += 1.0
    moved = (einsum_head_mask_transposed(Q, K, V2) - einsum_head_mask_transposed(Q, K, V)).abs().amax(-1)[0]
    assert moved[:-1].max() == 0 < moved[-1]
    assert not _close(einsum_head_mask_transposed(Q, K, V), einsum_head_fixed(Q, K, V), 1e-5)


# ---- every checker -------------------------------------------------------------------------------------

def test_an_unrecognised_answer_gets_a_generic_verdict():
    assert_named(check_log_softmax(lambda z: torch.zeros_like(z)), "values")
    assert_named(check_attention_output(lambda Q, K, V: Q[..., :1]), "shape")
    assert_named(check_softmax_jacobian(lambda z: torch.zeros(*z.shape, z.shape[-1], dtype=z.dtype)), "values")
    assert_named(check_fixed_head(lambda Q, K, V: torch.zeros_like(V)), "values")


@pytest.mark.parametrize("check, mistakes, groups, reference", CHECKERS, ids=NAMES)
def test_every_planted_mistake_is_named_as_itself_at_both_hint_levels(check, mistakes, groups, reference):
    for m in mistakes:
        first, second = check(m.wrong), check(m.wrong, hint=2)
        assert_named(first, m.label)
        assert_named(second, m.label)
        # a planted copy of a mistake is not the function as given: it is told it computes the same
        hint, more = (text.replace(AS_GIVEN, SAME_AS_GIVEN) for text in (m.hint, m.more))
        # a mistake recognised by the error it raises says that error after its hint
        assert first.message.startswith(hint) and first.message.endswith(MORE), (m.label, first)
        assert second.message.startswith(more) and MORE not in second.message, (m.label, second)


@pytest.mark.parametrize("check, mistakes, groups, reference", CHECKERS, ids=NAMES)
def test_every_mistake_is_registered_on_its_checker(check, mistakes, groups, reference):
    assert set(mistakes) <= set(check.mistakes)
    assert all(m.more and m.more != m.hint for m in check.mistakes if m.label not in
               ("stub", "none", "not-callable", "in-place", "shared-parameters", "type")), check.__name__


@pytest.mark.parametrize("check, mistakes, groups, reference", CHECKERS, ids=NAMES)
def test_the_answer_and_the_planted_mistakes_differ_pairwise_on_some_case(check, mistakes, groups, reference):
    """So that no wrong answer matches two of them on every case, and the answer matches none."""
    cases = [(case, g.atol) for g in groups() for case in g.cases]

    def run(f, case):
        try:
            return f(*case)
        except RuntimeError as e:
            return str(e)

    outs = [[run(f, case) for case, _ in cases] for f in [reference] + [m.wrong for m in mistakes]]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            same = [a == b if isinstance(a, str) or isinstance(b, str) else _close(a, b, atol)
                    for a, b, (_, atol) in zip(outs[i], outs[j], cases)]
            assert not all(same), (i, j)


@pytest.mark.parametrize("check, mistakes, groups, reference", CHECKERS, ids=NAMES)
def test_each_planted_function_with_no_switch_is_the_answer(check, mistakes, groups, reference):
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    planted = {check_log_softmax: chapter._planted_log_softmax, check_attention_output: chapter._planted_seq_first,
               check_softmax_jacobian: chapter._planted_jacobian, check_fixed_head: chapter._einsum_head}[check]
    for g in groups():
        for case in g.cases:
            assert _close(planted(*case), reference(*case), g.atol), planted.__name__


@pytest.mark.parametrize("check, mistakes, groups, reference", CHECKERS, ids=NAMES)
def test_each_reference_returns_the_dtype_of_its_inputs(check, mistakes, groups, reference):
    for g in groups():
        for case in g.cases:
            assert reference(*case).dtype == case[0].dtype


def test_a_mistake_made_on_one_case_only_is_not_blamed_on_the_others():
    """The naive form in float16 alone matches the planted "naive" on one case only: no name, a generic verdict."""
    def naive_in_float16_only(z):
        return log_softmax_naive(z) if z.dtype == torch.float16 else log_softmax_solution(z)
    v = check_log_softmax(naive_in_float16_only)
    assert not v.ok and v.mistake == "values", v
