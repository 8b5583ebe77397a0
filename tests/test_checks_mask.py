"""The mask chapter's checkers accept right answers, name each typical mistake, and leave no hole: the mask's
dtype, weights in the scores' dtype, in-place changes of the inputs, and a mistake blamed only where it matches
every case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import causal_mask
from attnlib.checks import check_chunk_weights, check_packed_mask, check_padded_causal_weights, mask
from attnlib.checks._core import _close
from helpers import (
    assert_accepted,
    assert_each_mistake_named,
    assert_mistakes_distinct,
    assert_named,
    assert_no_hint_quotes,
    stub,
)

NEG_INF = float("-inf")



def lower(T, diagonal=0):
    return torch.ones(T, T, dtype=torch.bool).tril(diagonal)


# ---- check_packed_mask: fn(doc_ids) -> bool (..., T, T), True = may attend ----------------------------------------

def packed_solution(doc_ids):
    T = doc_ids.shape[-1]
    same_doc = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)
    return same_doc & lower(T)


def packed_solution_with_positions(doc_ids):
    pos = torch.arange(doc_ids.shape[-1])
    return (doc_ids[..., :, None] == doc_ids[..., None, :]) & (pos[None, :] <= pos[:, None])


def packed_causal_only(doc_ids):
    return lower(doc_ids.shape[-1])


def packed_documents_only(doc_ids):
    return doc_ids[..., :, None] == doc_ids[..., None, :]


def packed_blocked_convention(doc_ids):  # nn.MultiheadAttention's convention: True = blocked
    return ~packed_solution(doc_ids)


def packed_additive(doc_ids):
    return torch.zeros(packed_solution(doc_ids).shape).masked_fill(~packed_solution(doc_ids), NEG_INF)


def packed_wrong_triangle(doc_ids):
    T = doc_ids.shape[-1]
    return (doc_ids[..., :, None] == doc_ids[..., None, :]) & lower(T).T


def packed_diagonal_blocked(doc_ids):
    return (doc_ids[..., :, None] == doc_ids[..., None, :]) & lower(doc_ids.shape[-1], -1)


def packed_float_zero_one(doc_ids):
    return packed_solution(doc_ids).float()


def packed_numpy(doc_ids):   # through numpy: a float64 0/1 table
    ids = doc_ids.numpy()
    T = ids.shape[-1]
    same = (ids[..., :, None] == ids[..., None, :]) * np.tril(np.ones((T, T)))
    return torch.from_numpy(same)


def packed_int(doc_ids):
    return packed_solution(doc_ids).long()


def packed_for_one_row_only(doc_ids):   # pairs up the first axis: right for (T,), wrong for a batch
    same = doc_ids[:, None] == doc_ids[None, :]
    return same & lower(doc_ids.shape[-1])


def packed_two_axes_only(doc_ids):
    same = doc_ids[:, :, None] == doc_ids[:, None, :]
    return same & lower(doc_ids.shape[-1])


def packed_unsqueezes_in_place(doc_ids):
    rows = doc_ids.unsqueeze_(-1)           # changes the caller's doc_ids
    return (rows == rows.transpose(-2, -1)) & lower(rows.shape[-2])


@pytest.mark.parametrize("fn", [packed_solution, packed_solution_with_positions])
def test_packed_mask_solutions_pass(fn):
    assert_accepted(check_packed_mask(fn))


@pytest.mark.parametrize("fn, label", [
    (packed_causal_only, "causal-only"),
    (packed_documents_only, "documents-only"),
    (packed_blocked_convention, "blocked-convention"),
    (packed_additive, "additive"),
    (packed_wrong_triangle, "wrong-triangle"),
    (packed_diagonal_blocked, "diagonal-blocked"),
    (packed_for_one_row_only, "batch-axes"),
    (packed_two_axes_only, "batch-axes"),
    (stub, "stub"),
])
def test_packed_mask_mistakes_are_named(fn, label):
    assert_named(check_packed_mask(fn), label)


@pytest.mark.parametrize("fn, dtype", [(packed_float_zero_one, "torch.float32"), (packed_numpy, "torch.float64"),
                                       (packed_int, "torch.int64")])
def test_a_mask_of_numbers_where_a_boolean_one_is_asked_is_named(fn, dtype):
    assert_named(check_packed_mask(fn), "not-boolean", dtype)


def test_a_mask_on_another_device_is_named_device():
    assert_named(check_packed_mask(lambda d: packed_solution(d).to("meta")), "device")
    assert_named(check_chunk_weights(lambda Z, start: chunk_solution(Z, start).to("meta")), "device")


def test_a_blocked_convention_mask_of_numbers_is_named_for_its_convention():
    assert_named(check_packed_mask(lambda d: (~packed_solution(d)).float()), "blocked-convention")


def test_a_packed_mask_that_changes_doc_ids_in_place_is_named():
    assert_named(check_packed_mask(packed_unsqueezes_in_place), "in-place", "doc_ids")


def test_the_packed_cases_have_one_row_a_batch_and_two_leading_axes():
    shapes = [tuple(c[0].shape) for c in mask._packed_cases()]
    assert [len(s) for s in shapes] == [1, 2, 3], shapes
    assert all(c[0].dtype == torch.int64 for c in mask._packed_cases())
    assert mask._packed_reference(*mask._packed_cases()[0]).dtype == torch.bool


def test_the_packed_mask_works_with_sdpa():
    """The reference is a mask SDPA takes as it is: attention within each document equals each document alone."""
    doc_ids = torch.tensor([0, 0, 0, 1, 1])
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(5, 4, generator=g) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask._packed_reference(doc_ids))
    for lo, hi in [(0, 3), (3, 5)]:
        alone = torch.nn.functional.scaled_dot_product_attention(Q[lo:hi], K[lo:hi], V[lo:hi], is_causal=True)
        torch.testing.assert_close(out[lo:hi], alone)


# ---- check_chunk_weights: fn(Z, start) -> P (..., T_q, T_k) in the dtype of Z ------------------------------------

def future_of(Z, start):
    T_q, T_k = Z.shape[-2:]
    return torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + start)


def chunk_solution(Z, start):
    T_q, T_k = Z.shape[-2], Z.shape[-1]
    pos_q = torch.arange(start, start + T_q)[:, None]
    pos_k = torch.arange(T_k)[None, :]
    return torch.softmax(Z.masked_fill(pos_k > pos_q, NEG_INF), dim=-1)


def chunk_solution_additive(Z, start):   # an additive mask built in the scores' dtype
    M = torch.zeros(Z.shape[-2:], dtype=Z.dtype).masked_fill(future_of(Z, start), NEG_INF)
    return torch.softmax(Z + M, dim=-1)


def chunk_solution_finfo_min(Z, start):  # no row is ever empty, so the dtype's smallest number is fine
    return torch.softmax(Z.masked_fill(future_of(Z, start), torch.finfo(Z.dtype).min), dim=-1)


def chunk_library_mask(Z, start):        # causal_mask(T_q, T_k) places the queries at the last T_q positions
    return torch.softmax(Z + causal_mask(*Z.shape[-2:], dtype=Z.dtype), dim=-1)


def chunk_rows_are_positions(Z, start):
    return torch.softmax(Z.masked_fill(future_of(Z, 0), NEG_INF), dim=-1)


def chunk_self_blocked(Z, start):
    return torch.softmax(Z.masked_fill(future_of(Z, start - 1), NEG_INF), dim=-1)


def chunk_reads_next(Z, start):
    return torch.softmax(Z.masked_fill(future_of(Z, start + 1), NEG_INF), dim=-1)


def chunk_no_mask(Z, start):
    return torch.softmax(Z, dim=-1)


def chunk_after_softmax(Z, start):
    return torch.softmax(Z, dim=-1).masked_fill(future_of(Z, start), 0.0)


def chunk_wrong_axis(Z, start):
    return torch.softmax(Z.masked_fill(future_of(Z, start), NEG_INF), dim=-2)


def chunk_wrong_triangle(Z, start):
    T_q, T_k = Z.shape[-2:]
    past = torch.arange(T_k)[None, :] < torch.arange(start, start + T_q)[:, None]
    return torch.softmax(Z.masked_fill(past, NEG_INF), dim=-1)


def chunk_multiplied(Z, start):
    return torch.softmax(Z * ~future_of(Z, start), dim=-1)


def chunk_float32_mask(Z, start):        # a float32 mask added to float16 scores gives float32 weights
    M = torch.zeros(Z.shape[-2:]).masked_fill(future_of(Z, start), NEG_INF)
    return torch.softmax(Z + M, dim=-1)


def chunk_computed_in_float32(Z, start):
    return chunk_solution(Z.float(), start)


def chunk_fill_minus_1e9(Z, start):      # refused by masked_fill on float16 scores
    return torch.softmax(Z.masked_fill(future_of(Z, start), -1e9), dim=-1)


def chunk_adds_in_place(Z, start):
    Z += torch.zeros(Z.shape[-2:], dtype=Z.dtype).masked_fill(future_of(Z, start), NEG_INF)
    return torch.softmax(Z, dim=-1)


def chunk_fills_in_place(Z, start):
    return torch.softmax(Z.masked_fill_(future_of(Z, start), NEG_INF), dim=-1)


@pytest.mark.parametrize("fn", [chunk_solution, chunk_solution_additive, chunk_solution_finfo_min])
def test_chunk_weights_solutions_pass(fn):
    assert_accepted(check_chunk_weights(fn))


@pytest.mark.parametrize("fn, label", [
    (chunk_library_mask, "last-chunk"),
    (chunk_rows_are_positions, "row-is-position"),
    (chunk_self_blocked, "self-blocked"),
    (chunk_reads_next, "reads-next"),
    (chunk_no_mask, "no-mask"),
    (chunk_after_softmax, "after-softmax"),
    (chunk_wrong_axis, "wrong-axis"),
    (chunk_wrong_triangle, "wrong-triangle"),
    (chunk_multiplied, "multiplied"),
    (chunk_fill_minus_1e9, "finite"),
    (stub, "stub"),
])
def test_chunk_weights_mistakes_are_named(fn, label):
    assert_named(check_chunk_weights(fn), label)


@pytest.mark.parametrize("fn", [chunk_float32_mask, chunk_computed_in_float32])
def test_float16_scores_that_come_back_as_float32_weights_are_named(fn):
    assert_named(check_chunk_weights(fn), "upcast", "torch.float32", "torch.float16")


@pytest.mark.parametrize("fn", [chunk_adds_in_place, chunk_fills_in_place])
def test_weights_that_write_into_the_scores_are_named_in_place(fn):
    assert_named(check_chunk_weights(fn), "in-place", "Z")


def test_the_chunk_cases_hold_a_middle_the_last_and_the_first_chunk_and_float16():
    cases = mask._chunk_cases() + mask._chunk_half_cases()
    kinds = {("first" if start == 0 else "last" if start + Z.shape[-2] == Z.shape[-1] else "middle")
             for Z, start in cases}
    assert kinds == {"first", "middle", "last"}
    assert all(start + Z.shape[-2] <= Z.shape[-1] for Z, start in cases)
    assert any(Z.dtype == torch.float16 and Z.dim() == 4 for Z, _ in cases)
    for Z, start in cases:
        assert mask._chunk_reference(Z, start).dtype == Z.dtype


def test_the_chunk_reference_is_the_rows_of_full_causal_attention():
    """A chunk's weights are rows start … of the full causal weights, restricted to the keys they may reach."""
    g = torch.Generator().manual_seed(1)
    full = torch.randn(9, 9, generator=g, dtype=torch.float64)
    P = torch.softmax(full + causal_mask(9, dtype=torch.float64), dim=-1)
    torch.testing.assert_close(mask._chunk_reference(full[2:5], 2), P[2:5])


# ---- check_padded_causal_weights: fn(Z, is_pad) -> P (B, T, T) in the dtype of Z ----------------------------------

def allowed_of(Z, is_pad):
    return lower(Z.shape[-1]) & ~is_pad[:, None, :]


def padded_solution(Z, is_pad):
    allowed = allowed_of(Z, is_pad)
    P = torch.softmax(Z.masked_fill(~allowed, NEG_INF), dim=-1)
    return P.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def padded_solution_nan_to_num(Z, is_pad):
    return torch.softmax(Z.masked_fill(~allowed_of(Z, is_pad), NEG_INF), dim=-1).nan_to_num(0.0)


def padded_solution_sdpa_style(Z, is_pad):  # additive masks in the scores' dtype, then empty rows zeroed
    T = Z.shape[-1]
    M = torch.zeros(T, T, dtype=Z.dtype).masked_fill(~lower(T), NEG_INF)
    pad = torch.zeros(is_pad.shape, dtype=Z.dtype).masked_fill(is_pad, NEG_INF)[:, None, :]
    P = torch.softmax(Z + M + pad, dim=-1)
    return torch.where(P.isnan(), torch.zeros_like(P), P)


def padded_float32_masks(Z, is_pad):        # the same with float32 masks: float16 scores give float32 weights
    T = Z.shape[-1]
    M = torch.zeros(T, T).masked_fill(~lower(T), NEG_INF)
    pad = torch.zeros(is_pad.shape).masked_fill(is_pad, NEG_INF)[:, None, :]
    return torch.softmax(Z + M + pad, dim=-1).nan_to_num(0.0)


def padded_nan_rows(Z, is_pad):
    return torch.softmax(Z.masked_fill(~allowed_of(Z, is_pad), NEG_INF), dim=-1)


def padded_uniform_rows(Z, is_pad):
    return torch.softmax(Z.masked_fill(~allowed_of(Z, is_pad), torch.finfo(Z.dtype).min), dim=-1)


def padded_queries(Z, is_pad):
    allowed = lower(Z.shape[-1]) & ~is_pad[:, :, None]
    return torch.softmax(Z.masked_fill(~allowed, NEG_INF), dim=-1).nan_to_num(0.0)


def padded_causal_only(Z, is_pad):
    return torch.softmax(Z.masked_fill(~lower(Z.shape[-1]), NEG_INF), dim=-1)


def padded_padding_only(Z, is_pad):
    P = torch.softmax(Z.masked_fill(is_pad[:, None, :], NEG_INF), dim=-1)
    return P.nan_to_num(0.0)


def padded_inverted(Z, is_pad):
    return padded_solution(Z, ~is_pad)


def padded_inverted_nan(Z, is_pad):
    return padded_nan_rows(Z, ~is_pad)


def padded_zeroed_after(Z, is_pad):
    P = torch.softmax(Z.masked_fill(~lower(Z.shape[-1]), NEG_INF), dim=-1)
    return P.masked_fill(is_pad[:, None, :], 0.0)


def padded_fill_in_place(Z, is_pad):
    Z.masked_fill_(~allowed_of(Z, is_pad), NEG_INF)
    return torch.softmax(Z, dim=-1).nan_to_num(0.0)


def padded_fill_minus_1e9(Z, is_pad):
    P = torch.softmax(Z.masked_fill(~allowed_of(Z, is_pad), -1e9), dim=-1)
    return P.masked_fill(~allowed_of(Z, is_pad).any(-1, keepdim=True), 0.0)


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
    (padded_fill_minus_1e9, "finite"),
    (stub, "stub"),
])
def test_padded_causal_mistakes_are_named(fn, label):
    assert_named(check_padded_causal_weights(fn), label)


def test_padded_weights_from_float32_masks_on_float16_scores_are_named_upcast():
    assert_named(check_padded_causal_weights(padded_float32_masks), "upcast", "torch.float32")


def test_padded_weights_that_fill_the_scores_in_place_are_named():
    assert_named(check_padded_causal_weights(padded_fill_in_place), "in-place", "Z")


def test_the_padding_cases_include_a_query_with_nothing_to_read_and_float16():
    for Z, is_pad in mask._padded_cases()[:1] + mask._padded_half_cases():
        empty = ~allowed_of(Z, is_pad).any(-1)
        assert empty.any(), "no left-padded sequence: the NaN-row mistake would pass"
    Z, is_pad = mask._padded_cases()[0]
    assert (~is_pad).all(-1).any(), "no unpadded sequence in the batch"
    for Z, is_pad in mask._padded_cases() + mask._padded_half_cases():
        assert mask._padded_reference(Z, is_pad).dtype == Z.dtype


# ---- every checker of the chapter ---------------------------------------------------------------------------------

CHECKERS = [
    (check_packed_mask, mask._PACKED_MISTAKES, mask._packed_cases(), mask._packed_reference),
    (check_chunk_weights, mask._CHUNK_MISTAKES, mask._chunk_cases(), mask._chunk_reference),
    (check_padded_causal_weights, mask._PADDED_MISTAKES, mask._padded_cases(), mask._padded_reference),
]


def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for check, mistakes, cases, reference in CHECKERS:
        assert_each_mistake_named(check, mistakes)
        # the batch of packed rows tells the two forms of the causal-only mask apart, one row does not
        assert_mistakes_distinct(cases[1 if check is check_packed_mask else 0], reference, mistakes)
        assert set(mistakes) <= set(check.mistakes), "every mistake the checker can name is registered"


def test_the_diagnosed_mistakes_are_registered():
    labels = {c.__name__: {m.label for m in c.mistakes} for c, *_ in CHECKERS}
    assert {"not-boolean", "batch-axes"} <= labels["check_packed_mask"]
    assert {"upcast", "finite"} <= labels["check_chunk_weights"] & labels["check_padded_causal_weights"]


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    for wrong, cases, reference, atol in [
        (mask._planted_packed, mask._packed_cases(), packed_solution, 0.0),
        (mask._planted_chunk, mask._chunk_cases(), chunk_solution, 1e-5),
        (mask._planted_chunk, mask._chunk_half_cases(), chunk_solution, 3e-3),
        (mask._planted_padded, mask._padded_cases(), padded_solution, 1e-5),
        (mask._planted_padded, mask._padded_half_cases(), padded_solution, 3e-3),
    ]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), atol), wrong.__name__


def test_a_mistake_that_matches_some_cases_only_is_not_blamed():
    def library_mask_on_float32_only(Z, start):   # right on the float16 case, "last-chunk" elsewhere
        return chunk_solution(Z, start) if Z.dtype == torch.float16 else chunk_library_mask(Z, start)

    assert_named(check_chunk_weights(library_mask_on_float32_only), "values")


def test_the_second_hint_level_says_more_and_the_first_points_to_it():
    first = check_chunk_weights(chunk_library_mask)
    second = check_chunk_weights(chunk_library_mask, hint=2)
    assert_named(first, "last-chunk", "hint=2")
    assert_named(second, "last-chunk", "KV cache")
    assert "hint=2" not in second.message


@pytest.mark.parametrize("check, solutions", [
    (check_packed_mask, [packed_solution, packed_solution_with_positions]),
    (check_chunk_weights, [chunk_solution, chunk_solution_additive]),
    (check_padded_causal_weights, [padded_solution, padded_solution_sdpa_style]),
])
def test_no_first_level_hint_holds_the_code_of_another_solution(check, solutions):
    assert_no_hint_quotes(check, solutions)
