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

from attnlib.checks import check_fixed_head, check_log_softmax, check_temperature, check_top_k_attention
from attnlib.checks import softmax as chapter
from attnlib.checks._core import AS_GIVEN, MORE, SAME_AS_GIVEN, _close
from helpers import assert_accepted, assert_named, stub

CHECKERS = [
    (check_log_softmax, chapter._LOG_SOFTMAX_MISTAKES, chapter._log_softmax_groups,
     chapter._log_softmax_reference),
    (check_top_k_attention, chapter._TOP_K_MISTAKES, chapter._top_k_groups, chapter._top_k_reference),
    (check_fixed_head, chapter._FIXED_HEAD_MISTAKES, chapter._head_groups,
     lambda Q, K, V: chapter.attention(Q, K, V)),
]
NAMES = [c[0].__name__ for c in CHECKERS]
GENERIC = {"values", "shape", "type", "length", "error"}   # verdicts that name no mistake


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
    assert_named(v, "dtype", f"right values but dtype torch.{got}, expected torch.{want}")
    assert_named(check_log_softmax(fn, hint=2), "dtype", "give back the dtype that came in")


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


# ---- check_temperature: a predicted τ for a two-to-one split of ' cat' and ' chase' -------------------------

def test_the_measured_temperature_gives_a_ratio_of_two():
    tau = chapter._measured_temperature()
    p = torch.softmax(torch.tensor([5.2, 0.3, 2.1], dtype=torch.float64) / tau, dim=-1)
    assert abs(p[0] / p[2] - 2) < 1e-9
    assert abs(tau - 3.1 / math.log(2)) < 1e-9


@pytest.mark.parametrize("value", [3.1 / math.log(2), 4.47, 4.5, 4.4, 3.1 / 0.693, torch.tensor(4.47)])
def test_temperature_predictions_close_to_the_measured_one_pass(value):
    assert_accepted(check_temperature(value))


# Wrong predictions written from the exercise text, each with the reasoning behind it.
WRONG_TEMPERATURES = [
    (3.1 / 2, "linear"),                           # ratio = gap / τ
    (2.0, "ratio-as-tau"),                         # "twice the weight": τ = 2
    (3.1 * math.log(2), "times-log"),              # solved gap / τ = ln 2 the wrong way
    (math.log(2) / 3.1, "inverted"),               # softmax(z · τ)
    (3.1, "gap-itself"),                           # τ = the gap
    (4.0, "read-table"),                           # the nearest row of the page's table
    ((5.2 - 0.3) / math.log(2), "wrong-pair"),     # ' cat' against ' the'
    (5.2 / math.log(2), "one-score"),              # e^(5.2 / τ) = 2
    (5.2 * math.sqrt(3) / math.log(2) - 2.1 * math.sqrt(3) / math.log(2), "raw-scores"),   # QKᵀ, not QKᵀ/√d_k
    (3.1 / math.log10(2), "log10"),                # log base 10
    (-3.1 / math.log(2), "sign"),                  # ln(1/2): ' chase' twice ' cat'
    (3.2 / math.log(2), None),                     # 5.2 − 2.1 taken as 3.2: an arithmetic slip
]


@pytest.mark.parametrize("value, label", WRONG_TEMPERATURES)
def test_wrong_temperatures_are_rejected_and_named_or_left_generic(value, label):
    v = check_temperature(value)
    assert not v.ok, v
    assert v.mistake == (label or "values"), (value, v)


def test_most_wrong_temperatures_are_named():
    named = [label for _, label in WRONG_TEMPERATURES if label]
    assert len(WRONG_TEMPERATURES) >= 5 and len(named) >= 0.85 * len(WRONG_TEMPERATURES)


@pytest.mark.parametrize("value, label", [(..., "stub"), (None, "stub"), ("4.47", "type")])
def test_a_temperature_that_is_not_yet_a_number_is_told_so(value, label):
    assert_named(check_temperature(value), label)


def test_every_temperature_guess_is_named_at_both_levels_and_far_from_the_answer():
    want = chapter._measured_temperature()
    for g in chapter._TEMPERATURE_GUESSES:
        assert abs(g.value - want) > 0.05 * want, g.label
        assert_named(check_temperature(g.value), g.label, "too ")
        assert_named(check_temperature(g.value, hint=2), g.label, g.more)


# ---- check_top_k_attention: each query reads its k best keys -----------------------------------------------

def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def head(Q, K, V, mask=True, mixed=None):
    """Batch-first causal attention (the fixed einsum head's rewrites): Q, K (B, T, d_k), V (B, T, d_v)."""
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask:
        Z = Z.masked_fill(future(Z.shape[-1]), float("-inf"))
    return torch.softmax(Z, dim=-1) @ (V if mixed is None else mixed)


def kept(Z, k):
    return Z >= Z.topk(k, dim=-1).values[..., -1:]


def top_k_solution(Z, V, k):
    kth = Z.topk(k, dim=-1).values[..., -1:]
    return torch.softmax(Z.masked_fill(Z < kth, float("-inf")), dim=-1) @ V


def top_k_scatter(Z, V, k):              # exactly k positions kept: a key tied with the k-th is dropped
    values, where = Z.topk(k, dim=-1)
    return torch.softmax(torch.full_like(Z, float("-inf")).scatter(-1, where, values), dim=-1) @ V


def top_k_gather(Z, V, k):               # the k weights meet their own values; a tie at the k-th is dropped
    values, where = Z.topk(k, dim=-1)
    w = torch.softmax(values, dim=-1)                                  # (..., T_q, k)
    Vx = V.unsqueeze(-3).expand(*Z.shape, V.shape[-1])                # (..., T_q, T_k, d_v)
    picked = Vx.gather(-2, where[..., None].expand(*where.shape, V.shape[-1]))
    return (w[..., None] * picked).sum(-2)


def top_k_renormalised(Z, V, k):         # softmax over every key, the rest zeroed, then divided by the sum
    P = torch.softmax(Z, dim=-1) * kept(Z, k)
    return P / P.sum(dim=-1, keepdim=True) @ V


def top_k_sorted(Z, V, k):
    threshold = Z.sort(dim=-1, descending=True).values[..., k - 1:k]
    return torch.softmax(torch.where(Z >= threshold, Z, float("-inf")), dim=-1) @ V


def top_k_lowest_number(Z, V, k):        # the smallest number of the dtype instead of −inf
    return torch.softmax(Z.masked_fill(~kept(Z, k), torch.finfo(Z.dtype).min), dim=-1) @ V


@pytest.mark.parametrize("fn", [top_k_solution, top_k_renormalised, top_k_sorted, top_k_lowest_number])
def test_top_k_solutions_pass(fn):
    assert_accepted(check_top_k_attention(fn))


def top_k_softmax_then_zero(Z, V, k):
    return torch.softmax(Z, dim=-1).masked_fill(~kept(Z, k), 0.0) @ V


def top_k_zero_fill(Z, V, k):
    return torch.softmax(Z.masked_fill(~kept(Z, k), 0.0), dim=-1) @ V


def top_k_times_mask(Z, V, k):
    return torch.softmax(Z * kept(Z, k), dim=-1) @ V


def top_k_first_values(Z, V, k):          # the top k weights with the first k values
    return torch.softmax(Z.topk(k, dim=-1).values, dim=-1) @ V[..., :k, :]


def top_k_indexed(Z, V, k):               # V[idx]: written for one table
    values, where = Z.topk(k, dim=-1)
    return (torch.softmax(values, dim=-1).unsqueeze(-1) * V[where]).sum(dim=-2)


def top_k_kthvalue(Z, V, k):
    threshold = torch.kthvalue(Z, k, dim=-1, keepdim=True).values
    return torch.softmax(Z.masked_fill(Z < threshold, float("-inf")), dim=-1) @ V


def top_k_sorted_one_too_far(Z, V, k):    # index k of a row sorted from the top is the (k + 1)-th largest
    threshold = Z.sort(dim=-1, descending=True).values[..., k].unsqueeze(-1)
    return torch.softmax(Z.masked_fill(Z < threshold, float("-inf")), dim=-1) @ V


def top_k_strictly_above(Z, V, k):        # the k-th largest itself dropped
    kth = Z.topk(k, dim=-1).values[..., -1:]
    return torch.softmax(Z.masked_fill(Z <= kth, float("-inf")), dim=-1) @ V


def top_k_columns(Z, V, k):
    kth = Z.topk(k, dim=-2).values[..., -1:, :]
    return torch.softmax(Z.masked_fill(Z < kth, float("-inf")), dim=-1) @ V


def top_k_softmax_over_queries(Z, V, k):
    return torch.softmax(Z.masked_fill(~kept(Z, k), float("-inf")), dim=-2) @ V


def top_k_minus_1e9(Z, V, k):             # a finite stand-in for −inf: does not fit in float16
    return torch.softmax(Z.masked_fill(~kept(Z, k), -1e9), dim=-1) @ V


def top_k_float32_mask(Z, V, k):          # a mask made in the default dtype, added to the scores
    M = torch.zeros(Z.shape)
    M[~kept(Z, k)] = float("-inf")
    return torch.softmax(Z + M, dim=-1) @ V


def top_k_in_float32(Z, V, k):            # computed in float32 for accuracy, never cast back
    return top_k_solution(Z.float(), V.float(), k)


def top_k_fills_Z_in_place(Z, V, k):
    Z.masked_fill_(~kept(Z, k), float("-inf"))
    return torch.softmax(Z, dim=-1) @ V


def top_k_gathered_along_the_wrong_axis(Z, V, k):   # gather on V itself: its axes do not line up with the rows
    values, where = Z.topk(k, dim=-1)
    return torch.softmax(values, dim=-1) @ V.gather(-2, where)


# Wrong answers written from the exercise text: (answer, the label it should get, None where generic is fine).
WRONG_TOP_K = [
    (top_k_softmax_then_zero, "not-renormalised"),
    (top_k_zero_fill, "zeroed-scores"),
    (top_k_times_mask, "zeroed-scores"),
    (top_k_first_values, "first-k-values"),
    (top_k_indexed, "batch-indexed"),
    (top_k_kthvalue, "kthvalue"),
    (top_k_sorted_one_too_far, "k-plus-one"),
    (top_k_strictly_above, "k-minus-one"),
    (top_k_columns, "columns"),
    (top_k_softmax_over_queries, "softmax-axis"),
    (top_k_minus_1e9, "finite"),
    (top_k_float32_mask, "mixed-dtypes"),
    (top_k_in_float32, "dtype"),
    (top_k_fills_Z_in_place, "in-place"),
    (top_k_gathered_along_the_wrong_axis, None),
    (top_k_scatter, "ties-dropped"),
    (top_k_gather, "ties-dropped"),
    (stub, "stub"),
]


@pytest.mark.parametrize("fn, label", WRONG_TOP_K, ids=[f.__name__ for f, _ in WRONG_TOP_K])
def test_wrong_top_k_answers_are_rejected_and_named_or_left_generic(fn, label):
    v = check_top_k_attention(fn)
    assert not v.ok, v
    if label is None:
        assert v.mistake in GENERIC, v
    else:
        assert_named(v, label)


def test_most_wrong_top_k_answers_are_named():
    verdicts = [check_top_k_attention(fn) for fn, _ in WRONG_TOP_K if fn is not stub]
    named = [v for v in verdicts if v.mistake not in GENERIC]
    assert len(verdicts) >= 5 and len(named) >= 0.85 * len(verdicts), [v.mistake for v in verdicts]


def test_a_minus_1e9_fill_in_float16_blames_the_fill_value():
    v = check_top_k_attention(top_k_minus_1e9)
    assert_named(v, "finite", "fill value")
    assert "two of your tensors" not in v.message


def test_a_float32_mask_is_told_its_dtype():
    assert_named(check_top_k_attention(top_k_float32_mask), "mixed-dtypes",
                 "for float16 inputs your function stops with an error about dtypes")
    assert_named(check_top_k_attention(top_k_in_float32), "dtype", "dtype torch.float32, expected torch.float64")


def test_the_top_k_cases_hold_each_trap():
    """A single table and a batch with T_q ≠ T_k, rows that see fewer than k keys, k = T_k, float16 and float64;
    k ≤ T_q (a top k down the columns runs); the finite scores of a row differ (no tie at the k-th), but in the
    last case, where every key comes twice and every row has a tie at the k-th, whichever of the two wins it."""
    cases = [case for g in chapter._top_k_groups() for case in g.cases]
    assert any(Z.dim() == 2 for Z, _, _ in cases) and any(Z.dim() == 3 and Z.shape[0] > 1 for Z, _, _ in cases)
    assert any(Z.shape[-2] != Z.shape[-1] for Z, _, _ in cases)
    assert any((Z.isfinite().sum(-1) < k).any() for Z, _, k in cases)
    assert any(k == Z.shape[-1] for Z, _, k in cases)
    assert {Z.dtype for Z, _, _ in cases} == {torch.float16, torch.float32, torch.float64}
    for Z, V, k in cases[:-1]:
        assert k <= Z.shape[-2] and V.dtype == Z.dtype
        rows = Z.reshape(-1, Z.shape[-1])
        for row in rows:
            finite = row[row.isfinite()]
            assert finite.unique().numel() == finite.numel()
    Z, V, k = cases[-1]
    assert k % 2 and torch.equal(Z[..., ::2], Z[..., 1::2]) and torch.equal(V[..., ::2, :], V[..., 1::2, :])


def test_top_k_with_k_equal_to_T_k_is_attention():
    Q, K, V = (torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    Z = Q @ K.transpose(-2, -1) / 2 + chapter.causal_mask(5)
    torch.testing.assert_close(top_k_solution(Z, V, 5), chapter.attention(Q, K, V))


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
    assert_named(check_fixed_head(einsum_head_built_in_float32), "dtype", "dtype torch.float32, expected torch.float64")


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
    assert_named(check_top_k_attention(lambda Z, V, k: Z[..., :1]), "shape")
    assert_named(check_top_k_attention(lambda Z, V, k: torch.zeros_like(Z[..., :1]) + V.mean(-2, keepdim=True)),
                 "values")
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
        except Exception as e:  # noqa: BLE001 - an error is an outcome like any other
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
    planted = {check_log_softmax: chapter._planted_log_softmax, check_top_k_attention: chapter._planted_top_k,
               check_fixed_head: chapter._einsum_head}[check]
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


# ---- classes of wrong answers that must keep their names -------------------------------------------------------

def einsum_head_P_transposed_times_V(Q, K, V):   # the bug as given, written as Pᵀ @ V: edited code, same mistake
    Z = torch.einsum("bid,bjd->bij", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(Z.masked_fill(future(Z.shape[-1]), float("-inf")), dim=-1)
    return P.transpose(-2, -1) @ V


def test_an_edited_head_computing_P_transposed_V_is_not_told_it_is_the_function_as_given():
    for level in (1, 2):
        v = check_fixed_head(einsum_head_P_transposed_times_V, hint=level)
        assert_named(v, "unchanged")
        assert AS_GIVEN not in v.message, v
    assert check_fixed_head(einsum_head_P_transposed_times_V).message.startswith(SAME_AS_GIVEN)


def top_k_minus_1e9_in_a_new_tensor(Z, V, k):   # the finite stand-in written with full_like, in Z's dtype
    return torch.softmax(torch.where(kept(Z, k), Z, torch.full_like(Z, -1e9)), dim=-1) @ V


@pytest.mark.parametrize("fn", [top_k_minus_1e9, top_k_minus_1e9_in_a_new_tensor])
def test_a_minus_1e9_fill_in_float16_is_blamed_on_the_fill_value_at_both_levels(fn):
    for level in (1, 2):
        v = check_top_k_attention(fn, hint=level)
        assert_named(v, "finite")
        assert "two of your tensors" not in v.message and "different dtypes" not in v.message, v
    assert "fill value" in check_top_k_attention(fn).message
