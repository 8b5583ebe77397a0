"""The mask chapter's checkers accept right answers, name each typical mistake, and leave no hole: the mask's
dtype, weights in the scores' dtype, in-place changes of the inputs, and a mistake blamed only where it matches
every case."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import attention, causal_mask
from attnlib.checks import check_chunk_weights, check_packed_mask, check_sealed_attention, mask
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


# ---- check_sealed_attention: fn(Q, K, V) -> out, row i as its prefix alone gives it ---------------------------------

def sealed_solution(Q, K, V):
    T = Q.shape[-2]
    future = ~lower(T)
    P = torch.softmax((Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).masked_fill(future, NEG_INF), dim=-1)
    return (P[..., :, :, None] * V[..., None, :, :]).masked_fill(future[:, :, None], 0.0).sum(-2)


def sealed_by_prefixes(Q, K, V):   # the promise itself: one query and its prefix at a time
    return torch.cat([attention(Q[..., i:i + 1, :], K[..., :i + 1, :], V[..., :i + 1, :])
                      for i in range(Q.shape[-2])], dim=-2)


def sealed_with_where(Q, K, V):    # the future values replaced by 0 for each row, then an einsum
    T = Q.shape[-2]
    P = torch.softmax((Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5).masked_fill(~lower(T), NEG_INF), dim=-1)
    Vs = torch.where(lower(T)[:, :, None], V[..., None, :, :], torch.zeros((), dtype=V.dtype))   # (..., T, T, d_v)
    return torch.einsum("...ij,...ijd->...id", P, Vs)


# Wrong answers written from the exercise text (what a learner gets wrong), each with the mistake it makes.
def sealed_sdpa(Q, K, V):                      # torch's head, as the chapter calls it
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


def sealed_library(Q, K, V):                   # the library's head
    return attention(Q, K, V)


def sealed_fill_then_product(Q, K, V):          # the scores fixed, the values not
    T = Q.shape[-2]
    Z = (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).masked_fill(~lower(T), NEG_INF)
    return Z.softmax(-1) @ V


def sealed_cleaned_like_the_page(Q, K, V):     # the page's fix of the data: zero what is not finite
    return sealed_solution(Q.nan_to_num(0.0, 0.0, 0.0), K.nan_to_num(0.0, 0.0, 0.0), V.nan_to_num(0.0, 0.0, 0.0))


def sealed_values_cleaned(Q, K, V):
    return sealed_solution(Q, K, V.masked_fill(~V.isfinite(), 0.0))


def sealed_output_nan_to_num(Q, K, V):
    return sealed_fill_then_product(Q, K, V).nan_to_num(0.0)


def sealed_additive_then_sealed(Q, K, V):      # an added mask, the values kept out
    T = Q.shape[-2]
    M = torch.zeros(T, T, dtype=Q.dtype).masked_fill(~lower(T), NEG_INF)
    P = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]) + M, dim=-1)
    return (P[..., :, :, None] * V[..., None, :, :]).masked_fill(~lower(T)[:, :, None], 0.0).sum(-2)


def sealed_scaled_by_T(Q, K, V):
    T = Q.shape[-2]
    P = torch.softmax((Q @ K.transpose(-2, -1) / math.sqrt(T)).masked_fill(~lower(T), NEG_INF), dim=-1)
    return (P[..., :, :, None] * V[..., None, :, :]).masked_fill(~lower(T)[:, :, None], 0.0).sum(-2)


def sealed_scaled_by_T_and_product(Q, K, V):   # two slips: the scale shows on the clean inputs
    T = Q.shape[-2]
    return torch.softmax((Q @ K.transpose(-2, -1) / math.sqrt(T)).masked_fill(~lower(T), NEG_INF), -1) @ V


def sealed_unscaled(Q, K, V):
    return sealed_solution(Q * math.sqrt(Q.shape[-1]), K, V)


def sealed_mask_after_softmax(Q, K, V):
    T = Q.shape[-2]
    return (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).softmax(-1).masked_fill(~lower(T), 0.0) @ V


def sealed_strict_triangle(Q, K, V):           # triu(0): the diagonal blocked too
    T = Q.shape[-2]
    blocked = torch.ones(T, T, dtype=torch.bool).triu(0)
    P = torch.softmax((Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).masked_fill(blocked, NEG_INF), dim=-1)
    return (P[..., :, :, None] * V[..., None, :, :]).masked_fill(blocked[:, :, None], 0.0).sum(-2)


def sealed_no_mask(Q, K, V):
    return (Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])).softmax(-1) @ V


def sealed_fills_K_in_place(Q, K, V):
    K.nan_to_num_(0.0)
    return sealed_solution(Q, K, V)


def sealed_prefix_one_short(Q, K, V):         # row i over K[:i], row 0 over key 0: the range end excluded
    rows = []
    for i in range(Q.shape[-2]):
        k, v = K[..., :i or 1, :], V[..., :i or 1, :]
        w = torch.softmax(torch.einsum("...d,...jd->...j", Q[..., i, :], k) / Q.shape[-1] ** 0.5, -1)
        rows.append(torch.einsum("...j,...jd->...d", w, v))
    return torch.stack(rows, -2)


def sealed_below_diagonal(Q, K, V):            # tril(-1) and a lone key for row 0, then the values kept out
    T = Q.shape[-2]
    keep = torch.ones(T, T, dtype=torch.bool).tril(-1)
    keep[0, 0] = True
    P = torch.softmax((Q @ K.mT / math.sqrt(Q.shape[-1])).masked_fill(~keep, float("-inf")), -1)
    return (P[..., None] * V[..., None, :, :]).masked_fill(~keep[..., None], 0.0).sum(-2)


SEALED_WRONG = [
    (sealed_prefix_one_short, "own-key-left-out"), (sealed_below_diagonal, "own-key-left-out"),
    (sealed_sdpa, "as-on-the-page"), (sealed_library, "as-on-the-page"),
    (sealed_fill_then_product, "zero-times-nan"), (sealed_cleaned_like_the_page, None),
    (sealed_values_cleaned, "cleaned-values"), (sealed_output_nan_to_num, "nan-hidden"),
    (sealed_additive_then_sealed, "additive-mask"), (sealed_scaled_by_T, "scale-T"),
    (sealed_scaled_by_T_and_product, "scale-T"), (sealed_unscaled, "no-scale"),
    (sealed_mask_after_softmax, "mask-after-softmax"), (sealed_strict_triangle, "diagonal-blocked"),
    (sealed_no_mask, "no-mask"), (sealed_fills_K_in_place, "in-place"),
]


@pytest.mark.parametrize("fn", [sealed_solution, sealed_by_prefixes, sealed_with_where])
def test_sealed_attention_solutions_pass(fn):
    assert_accepted(check_sealed_attention(fn))


def test_sealed_attention_wrong_answers_from_the_text_are_named():
    assert_wrong_answers(check_sealed_attention, SEALED_WRONG)


def test_the_sealed_cases_hold_nan_and_inf_in_keys_and_values_a_clean_case_and_float64():
    cases = mask._sealed_cases()
    bad = [(~K.isfinite()).any() for _, K, _ in cases], [(~V.isfinite()).any() for *_, V in cases]
    assert any(bad[0]) and any(bad[1]) and not all(bad[0])
    assert any(Q.dtype == torch.float64 for Q, *_ in cases)
    assert any(K.shape[-1] != V.shape[-1] != K.shape[-2] for _, K, V in cases)


def assert_wrong_answers(check, answers, share=0.85):
    """Wrong answers (functions, or predicted numbers) written from an exercise's text: none accepted, none named
    as a mistake it does not make (label None: any specific verdict is fine), and at least ``share`` named."""
    generic = {"values", "shape", "type", "length", "error"}
    verdicts = [(i, label, check(answer)) for i, (answer, label) in enumerate(answers)]
    assert not [n for n, _, v in verdicts if v.ok], "accepted"
    misnamed = [(n, label, v.mistake) for n, label, v in verdicts
                if label is not None and v.mistake not in generic and v.mistake != label]
    assert not misnamed, misnamed
    named_ = sum(v.mistake not in generic for _, _, v in verdicts)
    assert named_ >= share * len(verdicts), [(n, v.mistake) for n, _, v in verdicts]


# ---- every checker of the chapter ---------------------------------------------------------------------------------

CHECKERS = [
    (check_packed_mask, mask._PACKED_MISTAKES, mask._packed_cases(), mask._packed_reference),
    (check_chunk_weights, mask._CHUNK_MISTAKES, mask._chunk_cases(), mask._chunk_reference),
    (check_sealed_attention, mask._SEALED_MISTAKES + mask._HEAD_SLIPS, mask._sealed_cases(), mask._sealed_reference),
]


def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for check, mistakes, cases, reference in CHECKERS:
        assert_each_mistake_named(check, mistakes)
        # the batch of packed rows tells the two forms of the causal-only mask apart, one row does not; a mistake
        # whose empty rows are zeroed differs from its twin only on a case that has an empty row or column
        emptied = [m for m in mistakes if getattr(m.wrong, "keywords", {}).get("emptied")]
        plain = [m for m in mistakes if m not in emptied]
        assert_mistakes_distinct(cases[1 if check is check_packed_mask else 0], reference, plain)
        for m in emptied:
            twin = functools.partial(m.wrong.func, **{**m.wrong.keywords, "emptied": False})
            assert all(any(not _close(m.wrong(*c), f(*c), 1e-5) for c in cases) for f in (reference, twin))
        assert set(mistakes) <= set(check.mistakes), "every mistake the checker can name is registered"


def test_the_diagnosed_mistakes_are_registered():
    labels = {c.__name__: {m.label for m in c.mistakes} for c, *_ in CHECKERS}
    assert {"not-boolean", "batch-axes"} <= labels["check_packed_mask"]
    assert {"upcast", "finite"} <= labels["check_chunk_weights"]


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    for wrong, cases, reference, atol in [
        (mask._planted_packed, mask._packed_cases(), packed_solution, 0.0),
        (mask._planted_chunk, mask._chunk_cases(), chunk_solution, 1e-5),
        (mask._planted_chunk, mask._chunk_half_cases(), chunk_solution, 3e-3),
        (mask._planted_sealed, mask._sealed_cases(), sealed_by_prefixes, 1e-5),
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
    (check_sealed_attention, [sealed_solution, sealed_by_prefixes, sealed_with_where]),
])
def test_no_first_level_hint_holds_the_code_of_another_solution(check, solutions):
    assert_no_hint_quotes(check, solutions)


# ---- wrong answers written from the texts of the packed-documents and chunk exercises ------------------------------

def _same_doc(d):
    return d[..., :, None] == d[..., None, :]


PACKED_FROM_TEXT = [
    (lambda d: _same_doc(d) & lower(d.shape[-1]).T, "wrong-triangle"),                      # triu: the future
    (lambda d: _same_doc(d) & lower(d.shape[-1], -1), "diagonal-blocked"),                   # "earlier" read as j < i
    (lambda d: ~(_same_doc(d) & lower(d.shape[-1])), "blocked-convention"),
    (lambda d: _same_doc(d), "documents-only"),
    (lambda d: lower(d.shape[-1]).expand(*d.shape, d.shape[-1]), "causal-only"),
    (lambda d: (_same_doc(d) & lower(d.shape[-1])).float(), "not-boolean"),
    (lambda d: (d[:, None] == d[None, :]) & lower(d.shape[-1]), None),                     # one row only
    (lambda d: torch.zeros(d.shape + d.shape[-1:]).masked_fill(~(_same_doc(d) & lower(d.shape[-1])), NEG_INF),
     "additive"),
    # the float causal mask read as booleans: its −inf future becomes True, its 0 past False
    (lambda d: _same_doc(d) & causal_mask(d.shape[-1]).to(torch.bool), "future-only"),
    (lambda d: torch.logical_and(_same_doc(d), causal_mask(d.shape[-1], d.shape[-1]) != 0), "future-only"),
]


def chunk_future(Z, start, first=None):
    T_q, T_k = Z.shape[-2:]
    first = start if first is None else first
    return torch.arange(T_k)[None, :] > torch.arange(first, first + T_q)[:, None]


CHUNK_FROM_TEXT = [
    (lambda Z, s: Z.masked_fill(~causal_mask(Z.shape[-2], Z.shape[-1], dtype=torch.bool), NEG_INF).softmax(-1),
     "last-chunk"),                                                                          # the library's mask
    (lambda Z, s: Z.masked_fill(chunk_future(Z, s, 0), NEG_INF).softmax(-1), "row-is-position"),
    (lambda Z, s: Z.masked_fill(chunk_future(Z, s, s - 1), NEG_INF).softmax(-1), "self-blocked"),   # j >= start + i
    (lambda Z, s: Z.masked_fill(chunk_future(Z, s, s + 1), NEG_INF).softmax(-1), "reads-next"),
    (lambda Z, s: Z.softmax(-1).masked_fill(chunk_future(Z, s), 0.0), "after-softmax"),
    (lambda Z, s: Z.masked_fill(chunk_future(Z, s), NEG_INF).softmax(-2), "wrong-axis"),
    (lambda Z, s: (Z * ~chunk_future(Z, s)).softmax(-1), "multiplied"),
    (lambda Z, s: Z.masked_fill(chunk_future(Z, s), -1e9).softmax(-1), "finite"),
    (lambda Z, s: (Z + torch.zeros(Z.shape[-2:]).masked_fill(chunk_future(Z, s), NEG_INF)).softmax(-1), "upcast"),
]


@pytest.mark.parametrize("check, answers", [(check_packed_mask, PACKED_FROM_TEXT),
                                            (check_chunk_weights, CHUNK_FROM_TEXT)])
def test_wrong_answers_from_the_exercise_texts_are_named(check, answers):
    assert_wrong_answers(check, answers)


def test_a_float32_round_trip_is_named_where_some_rows_are_nan_too():
    """The float64 case plants a NaN: its broken rows must not hide that the other rows hold float32 numbers."""
    def sealed_in_float32(Q, K, V):
        return sealed_by_prefixes(Q.float(), K.float(), V.float()).to(Q.dtype)

    assert check_sealed_attention(sealed_in_float32).mistake == "precision"
