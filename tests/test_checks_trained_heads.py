"""The trained-heads page's exercises: the prediction's number is accepted, close approximations too, and each
typical wrong number is named as its own mistake; the targets of every earlier copy are accepted however they are
written, and each planted mistake is named."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib.checks import check_all_induction_targets, check_uniform_induction_score
from attnlib.checks import trained_heads as TH
from helpers import (
    assert_accepted,
    assert_each_mistake_named,
    assert_mistakes_distinct,
    assert_named,
    assert_no_hint_quotes,
    stub,
)


def test_ln_2_and_long_block_values_are_accepted():
    assert check_uniform_induction_score(math.log(2)).ok
    assert check_uniform_induction_score(0.69).ok
    assert check_uniform_induction_score(1000 * TH._measured(1000)).ok      # measured at a long block: close enough


@pytest.mark.parametrize("label, wrong", [
    ("all-queries", math.log(2) / 2),                                 # averaged over every query
    ("no-mask", 0.5),                                                 # rows spread over the whole sequence
    ("one-block", 1.0),                                               # rows spread over one block
    ("score-itself", 0),                                              # the limit of the score, not of r × score
    ("page-demo", 0.64),                                              # 4 × the hand-made table's 0.16
    ("finite-r", 7 * TH._measured(7)),                                # r × score at one r
    ("page-r16", 16 * TH._measured(16)),                              # r × score at the page's r = 16
    # each class in another spelling than the wrong answers' own
    ("score-at-one-r", 0.0941),                                       # the score at r = 7, not × 7
    ("score-at-one-r", sum(1 / k for k in range(5, 9)) / 4),          # the score at r = 4, summed by hand
    ("one-mean-count", 0.667),                                        # every row counted as reading 1.5 r keys
    ("inverted", 1.44),                                               # 1 / ln 2, rounded
    ("log10", 0.3),                                                   # log10 2, rounded
])
def test_each_typical_wrong_number_is_named(label, wrong):
    assert_named(check_uniform_induction_score(wrong), label)


@pytest.mark.parametrize("wrong", [0.8, 2.0, -0.7])
def test_other_numbers_are_rejected_without_a_wrong_name(wrong):
    verdict = check_uniform_induction_score(wrong)
    assert not verdict.ok and verdict.mistake == "values", verdict


def targets_later_by_comparison(ids):     # triu(1) written as a comparison: the copies after the query
    i = torch.arange(ids.shape[-1])
    return F.pad((ids[..., :, None] == ids[..., None, :]) & (i[:, None] < i[None, :]), (1, -1))


def targets_one_sequence(ids):           # unsqueeze on the first axis: right for one sequence only
    T = ids.shape[-1]
    earlier = torch.ones(T, T, dtype=torch.bool).tril(-1)
    return F.pad(torch.logical_and(ids.unsqueeze(1) == ids.unsqueeze(0), earlier), (1, -1))


def targets_one_sequence_eq(ids):
    i = torch.arange(ids.shape[-1])
    return F.pad(torch.eq(ids[:, None], ids[None]) & (i[None, :] < i[:, None]), (1, -1))


@pytest.mark.parametrize("fn, label", [(targets_later_by_comparison, "later-copies"), (targets_one_sequence,
                                       "one-sequence"), (targets_one_sequence_eq, "one-sequence")])
def test_target_classes_in_other_spellings_are_named(fn, label):
    assert_named(check_all_induction_targets(fn), label)


def test_the_guesses_are_far_enough_apart_to_name_one_mistake_each():
    values = [math.log(2)] + [g.value for g in TH._GUESSES]
    for a in range(len(values)):
        for b in range(a + 1, len(values)):
            assert abs(values[a] - values[b]) > 0.01 * max(values[a], values[b]), (values[a], values[b])


# ---- check_all_induction_targets: ids (…, T) → bool (…, T, T), True at (i, j + 1) for every earlier copy j ----------

def targets_solution(ids):   # the page's solution
    T = ids.shape[-1]
    i = torch.arange(T, device=ids.device)
    earlier = i[None, :] < i[:, None]
    same = (ids[..., :, None] == ids[..., None, :]) & earlier
    target = torch.zeros_like(same)
    target[..., 1:] = same[..., :-1]
    return target


def targets_by_roll(ids):    # the last column of `same` is always False, so rolling it round is safe
    same = (ids.unsqueeze(-1) == ids.unsqueeze(-2)).tril(-1)
    return same.roll(1, dims=-1)


def targets_by_pad(ids):
    same = (ids[..., :, None] == ids[..., None, :]) & torch.ones(ids.shape[-1], ids.shape[-1]).tril(-1).bool()
    return torch.nn.functional.pad(same, (1, 0))[..., :-1]


def targets_by_loops(ids):
    flat = ids.reshape(-1, ids.shape[-1])
    T = flat.shape[-1]
    out = torch.zeros(flat.shape[0], T, T, dtype=torch.bool)
    for b, row in enumerate(flat.tolist()):
        for i in range(T):
            for j in range(i):
                if row[j] == row[i]:
                    out[b, i, j + 1] = True
    return out.reshape(*ids.shape, T)


@pytest.mark.parametrize("fn", [targets_solution, targets_by_roll, targets_by_pad, targets_by_loops])
def test_every_correct_way_of_writing_the_targets_is_accepted(fn):
    assert_accepted(check_all_induction_targets(fn))


def test_the_stub_and_each_planted_targets_mistake_are_named():
    assert_named(check_all_induction_targets(stub), "stub")
    assert_each_mistake_named(check_all_induction_targets, TH._TARGETS_MISTAKES, exact=False)


def test_the_first_case_tells_every_targets_mistake_apart():
    distinct = [m for m in TH._TARGETS_MISTAKES if (m.label != "query-counted" or "copies" not in m.wrong.keywords)
                and m.label != "one-sequence"]   # right on one sequence by design: the batches tell it
    assert_mistakes_distinct(TH._targets_cases()[0], TH._targets_reference, distinct)


def test_no_first_hint_quotes_another_correct_answer():
    assert_no_hint_quotes(check_all_induction_targets, [targets_by_roll, targets_by_pad, targets_by_loops])


def test_the_pages_latest_copy_targets_are_rejected_for_what_they_are():
    from attnlib.induction import induction_targets
    assert_named(check_all_induction_targets(induction_targets), "latest-only")


def test_numbers_instead_of_booleans_are_named_as_a_dtype():
    verdict = check_all_induction_targets(lambda ids: targets_solution(ids).float())
    assert not verdict.ok and verdict.mistake == "dtype", verdict
