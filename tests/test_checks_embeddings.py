"""Chapter 1's checkers accept the solutions, name each planted mistake at both hint levels, never give the fix
away at the first level, and have no holes: dtype, in-place writes, and blame only where a mistake matches."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib import apply_rope, rope_angles, sinusoidal_positions
from attnlib.checks import (
    check_embed_with_positions,
    check_lookup_grad,
    check_rotate_halves,
    check_shift_matrix,
)
from attnlib.checks import embeddings as M
from attnlib.checks._core import _GENERAL, _close
from helpers import assert_accepted, assert_mistakes_distinct, assert_named, assert_named_at_both_levels

CHECKERS = [check_lookup_grad, check_shift_matrix, check_rotate_halves, check_embed_with_positions]


# ---- right answers, in the book's form and in others ----------------------------------------------------------

def grad_index_add(ids, dX, vocab_size):
    d = dX.shape[-1]
    return torch.zeros(vocab_size, d, dtype=dX.dtype).index_add(0, ids.reshape(-1), dX.reshape(-1, d))


def grad_one_hot(ids, dX, vocab_size):
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(dX.dtype)
    return one_hot.T @ dX.reshape(-1, dX.shape[-1])


def grad_autograd(ids, dX, vocab_size):
    E = torch.zeros(vocab_size, dX.shape[-1], dtype=dX.dtype, requires_grad=True)
    (E[ids] * dX).sum().backward()
    return E.grad


def shift_blocks(k, d):
    """One 2 × 2 rotation per pair, put on the diagonal."""
    blocks = []
    for f in range(d // 2):
        b = k * 10000.0 ** (-2 * f / d)
        blocks.append(torch.tensor([[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]]))
    return torch.block_diag(*blocks)


def shift_from_the_table(k, d):
    """cos kω_f and sin kω_f read off row k of the library's table, then the one-step matrix k times over."""
    row = sinusoidal_positions(k + 1, d)[k]
    R = torch.zeros(d, d)
    for f in range(d // 2):
        s, c = row[2 * f], row[2 * f + 1]
        R[2 * f, 2 * f], R[2 * f, 2 * f + 1], R[2 * f + 1, 2 * f], R[2 * f + 1, 2 * f + 1] = c, -s, s, c
    return R


def shift_solved(k, d):
    """R solved from a long float64 table: PE[:-k] R = PE[k:] has one solution."""
    t = torch.arange(4000, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    PE = torch.stack([(t * omega).sin(), (t * omega).cos()], -1).flatten(-2)
    return torch.linalg.lstsq(PE[:-k], PE[k:]).solution.float()


def halves(x, theta):
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def halves_rotate_half(x, theta):
    """The Hugging Face form: x · cos + rotate_half(x) · sin, with the angles repeated for both halves."""
    cos, sin = torch.cat([theta.cos()] * 2, -1).to(x.dtype), torch.cat([theta.sin()] * 2, -1).to(x.dtype)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


def positions_as_given(ids, E, PE):
    positions = torch.arange(ids.numel()).view(ids.shape)
    return E[ids] + PE[positions]


def positions_right(ids, E, PE):
    return E[ids] + PE[torch.arange(ids.shape[-1])]


def positions_sliced(ids, E, PE):
    return E[ids] + PE[: ids.shape[-1]]


SOLUTIONS = [
    (check_lookup_grad, grad_index_add), (check_lookup_grad, grad_one_hot), (check_lookup_grad, grad_autograd),
    (check_shift_matrix, shift_blocks), (check_shift_matrix, shift_from_the_table),
    (check_shift_matrix, shift_solved),
    (check_rotate_halves, halves), (check_rotate_halves, halves_rotate_half),
    (check_embed_with_positions, positions_right), (check_embed_with_positions, positions_sliced),
]


@pytest.mark.parametrize("check, solution", SOLUTIONS, ids=[f"{c.__name__}-{s.__name__}" for c, s in SOLUTIONS])
def test_solution_is_accepted(check, solution):
    assert_accepted(check(solution))


# ---- every mistake of every table is named, with its first hint, then its second --------------------------------

TABLES = [(check_lookup_grad, M._GRAD_MISTAKES), (check_shift_matrix, M._SHIFT_MISTAKES),
          (check_rotate_halves, M._ROTATE_MISTAKES), (check_embed_with_positions, M._POSITIONS_MISTAKES)]
PLANTED = [(c, m) for c, ms in TABLES for m in ms]


@pytest.mark.parametrize("check, m", PLANTED, ids=[f"{c.__name__}-{m.label}" for c, m in PLANTED])
def test_each_planted_mistake_is_named_at_both_hint_levels(check, m):
    assert_named_at_both_levels(check, m)


def test_every_mistake_has_a_second_hint_and_is_registered():
    for check in CHECKERS:
        own = [m for m in check.mistakes if m not in _GENERAL]
        assert own and all(m.more for m in own), check.__name__
    for check, table in TABLES:
        assert set(table) <= set(check.mistakes), check.__name__
    assert M.GRAD_OVERWRITE in check_lookup_grad.mistakes and M.ANGLES_DTYPE in check_rotate_halves.mistakes
    assert M.ROTATE_ANGLES in check_rotate_halves.mistakes


def test_every_planted_mistake_differs_from_the_answer_and_from_the_others():
    # ignores-theta agrees with the answer on RoPE's own angles (case 0) by design, per-sentence on one
    # sentence, one-step on k = 1, the bug as given on one sentence, rows-from-ids where the largest ID is the
    # last row, own-table with the sinusoidal PE: compare on another case
    positions = M._positions_cases()
    for case, reference, mistakes in [
        (M._grad_cases()[1], M._lookup_grad, [m for m in M._GRAD_MISTAKES if m.label != "rows-from-ids"]),
        (M._grad_cases()[0], M._lookup_grad, [m for m in M._GRAD_MISTAKES if m.label != "per-sentence"]),
        (M._SHIFT_CASES[1], M._shift, M._SHIFT_MISTAKES),
        (M._rotate_cases()[1], M._rotate_halves, [m for m in M._ROTATE_MISTAKES if m.label != "low-precision-angles"]),
        (M._rotate_cases()[3], M._rotate_halves, [m for m in M._ROTATE_MISTAKES if m.label == "low-precision-angles"]),
        (positions[2], M._positions_reference,
         [m for m in M._POSITIONS_MISTAKES if m.label not in ("first-axis", "float", "second-axis", "own-table")]),
        (positions[3], M._positions_reference, [m for m in M._POSITIONS_MISTAKES if m.label == "own-table"]),
    ]:
        assert_mistakes_distinct(case, reference, mistakes)


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    for wrong, cases, reference, atol in [
        (M._lookup_grad, M._grad_cases(), grad_one_hot, 1e-5),
        (M._shift, M._SHIFT_CASES, shift_blocks, 1e-5),
        (M._rotate_halves, M._rotate_cases(), halves, 1e-5),
        (M._positions_reference, M._positions_cases(), positions_sliced, 1e-5),
    ]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), atol), wrong.__name__


def test_the_stored_verdict_of_the_find_the_bug_stub_names_no_axis():
    verdict = check_embed_with_positions(positions_as_given)
    assert_named(verdict, "unchanged")
    assert not re.search(r"shape\[|last axis|\[-1\]|arange", verdict.message), verdict


# ---- the gradient of a lookup ---------------------------------------------------------------------------------

@pytest.mark.parametrize("write", ["assign", "add-through-index", "index_copy"])
def test_an_indexed_write_that_keeps_one_position_per_token_is_named(write):
    def overwrite(ids, dX, vocab_size):
        dE = torch.zeros(vocab_size, dX.shape[-1], dtype=dX.dtype)
        flat, rows = ids.reshape(-1), dX.reshape(-1, dX.shape[-1])
        if write == "assign":
            dE[flat] = rows
        elif write == "add-through-index":
            dE[flat] += rows              # looks like accumulation; writes each row once
        else:
            dE.index_copy_(0, flat, rows)
        return dE

    assert_named(check_lookup_grad(overwrite), "overwrite")
    assert_named(check_lookup_grad(overwrite, hint=2), "overwrite", "+= through an index")


def test_keeping_the_first_position_of_a_repeated_token_is_named_too():
    def first_wins(ids, dX, vocab_size):
        dE = torch.zeros(vocab_size, dX.shape[-1], dtype=dX.dtype)
        flat, rows = ids.reshape(-1).flip(0), dX.reshape(-1, dX.shape[-1]).flip(0)
        dE[flat] = rows
        return dE

    assert_named(check_lookup_grad(first_wins), "overwrite")


def test_a_gradient_from_numpy_in_float64_is_a_dtype_mistake():
    def with_numpy(ids, dX, vocab_size):
        dE = np.zeros((vocab_size, dX.shape[-1]))                          # float64
        np.add.at(dE, ids.numpy().reshape(-1), dX.numpy().reshape(-1, dX.shape[-1]))
        return torch.from_numpy(dE)

    assert_named(check_lookup_grad(with_numpy), "dtype", "float64", "numpy")


def test_a_float32_gradient_for_a_float64_dX_is_a_dtype_mistake():
    def always_float32(ids, dX, vocab_size):
        return grad_index_add(ids, dX.float(), vocab_size)

    assert_named(check_lookup_grad(always_float32), "dtype", "float32", "expected torch.float64")


def test_a_gradient_that_scales_dX_in_place_is_named():
    def scales_dX(ids, dX, vocab_size):
        dX.mul_(1.0)                      # changes nothing in value, but writes into the caller's tensor
        dX.add_(0.0)
        dX[..., 0] = dX[..., 0] + 1
        return grad_index_add(ids, dX, vocab_size)

    assert_named(check_lookup_grad(scales_dX), "in-place", "dX")


def test_averaging_only_in_a_batch_is_not_blamed_on_the_mean():
    """Misleading blame: an answer that matches "mean" on one case only is not told it averages."""
    def mean_in_batches(ids, dX, vocab_size):
        return M._lookup_grad(ids, dX, vocab_size, reduce="mean" if ids.dim() == 2 else "sum")

    verdict = check_lookup_grad(mean_in_batches)
    assert not verdict.ok and verdict.mistake == "values", verdict


# ---- a shift of position is one matrix ----------------------------------------------------------------------

def test_the_answer_moves_every_row_of_the_table_and_keeps_their_dot_products():
    PE = sinusoidal_positions(64, 16)
    for k in (1, 5, 12):
        R = M._shift(k, 16)
        torch.testing.assert_close(PE[:-k] @ R, PE[k:], atol=1e-5, rtol=0)
        torch.testing.assert_close(R @ R.T, torch.eye(16), atol=1e-6, rtol=0)     # a rotation
    assert [k for k, _ in M._SHIFT_CASES][0] == 1 and len({d for _, d in M._SHIFT_CASES}) == 3


def _omega(d, dtype=torch.float32):
    return 10000.0 ** (-torch.arange(0, d, 2, dtype=dtype) / d)


def _pairs(angle, upper=-1, lower=1, dtype=torch.float32):
    """A learner's loop: the block [[cos, upper·sin], [lower·sin, cos]] on columns 2f, 2f + 1."""
    d = 2 * len(angle)
    c, s = angle.cos(), angle.sin()
    R = torch.zeros(d, d, dtype=dtype)
    for f in range(d // 2):
        i, j = 2 * f, 2 * f + 1
        R[i, i], R[i, j], R[j, i], R[j, j] = c[f], upper * s[f], lower * s[f], c[f]
    return R


# Wrong answers written from the exercise's text, each as a learner would write it, with the verdict it must get
# ("values" where no mistake fits: a generic verdict, never a wrong name).
WRONG_SHIFTS = {
    "textbook-block-for-rows": (lambda k, d: _pairs(k * _omega(d), upper=1, lower=-1), "backwards"),
    "column-vector-habit": (lambda k, d: shift_blocks(k, d).T.contiguous(), "backwards"),
    "same-angle-everywhere": (lambda k, d: _pairs(torch.full((d // 2,), float(k))), "one-frequency"),
    "pair-index-exponent": (lambda k, d: _pairs(k / 10000 ** (torch.arange(d // 2) / d)), "exponent-f"),
    "frequency-upside-down": (lambda k, d: _pairs(k * 10000.0 ** (torch.arange(0, d, 2) / d)), "wrong-angles"),
    "base-1000": (lambda k, d: _pairs(k * 1000.0 ** (-torch.arange(0, d, 2) / d)), "wrong-angles"),
    "forgot-the-minus": (lambda k, d: _pairs(k * _omega(d), upper=1), "no-minus"),
    "cosines-only": (lambda k, d: torch.diag(torch.cos(k * _omega(d)).repeat_interleave(2)), "diagonal"),
    "halves-blocks": (lambda k, d: torch.cat([
        torch.cat([torch.diag(torch.cos(k * _omega(d))), torch.diag(-torch.sin(k * _omega(d)))], 1),
        torch.cat([torch.diag(torch.sin(k * _omega(d))), torch.diag(torch.cos(k * _omega(d)))], 1)]), "halves"),
    "k-forgotten": (lambda k, d: _pairs(_omega(d)), "one-step"),
    "rope-angles-in-float64": (lambda k, d: _pairs(rope_angles(k + 1, d)[k], dtype=torch.float64), "dtype"),
    "shift-the-columns": (lambda k, d: torch.roll(torch.eye(d), k, dims=1), "values"),
}


@pytest.mark.parametrize("name", WRONG_SHIFTS)
def test_wrong_shift_matrices_from_the_text_are_rejected_and_named_or_left_generic(name):
    fn, label = WRONG_SHIFTS[name]
    assert_named(check_shift_matrix(fn), label)


def test_most_wrong_shift_matrices_are_named():
    named = [label for _, label in WRONG_SHIFTS.values() if label != "values"]
    assert len(WRONG_SHIFTS) >= 5 and len(named) >= 0.85 * len(WRONG_SHIFTS)


# ---- RoPE in the halves layout --------------------------------------------------------------------------------

def test_rotating_by_float64_angles_without_a_cast_is_named():
    def promotes(x, theta):
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        return torch.cat([a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()], dim=-1)

    assert_named(check_rotate_halves(promotes), "angles-dtype")
    assert_named(check_rotate_halves(promotes, hint=2), "angles-dtype", "float64")


def test_a_float32_result_for_a_float64_x_is_a_dtype_mistake():
    assert_named(check_rotate_halves(lambda x, theta: halves(x.float(), theta)), "dtype", "expected torch.float64")


@pytest.mark.parametrize("how", ["slices", "copy_", "mul_"])
def test_an_answer_that_writes_into_x_is_named(how):
    def into_x(x, theta):
        out = halves(x, theta)
        if how == "slices":
            h = x.shape[-1] // 2
            x[..., :h], x[..., h:] = out[..., :h], out[..., h:]
        elif how == "copy_":
            x.copy_(out)
        else:
            x.mul_(1.0).add_(out - x)
        return x

    assert_named(check_rotate_halves(into_x), "in-place", "x")


@pytest.mark.parametrize("angles", [
    lambda theta: theta.reshape(theta.shape[1], theta.shape[0]).T,   # theta read as (d/2, T)
    lambda theta: theta.roll(1, 0),                                   # each row given the previous row's angles
    lambda theta: theta.flip(-1),                                     # the pairs' angles in the reverse order
])
def test_rotating_the_right_pairs_by_other_angles_is_named(angles):
    assert_named(check_rotate_halves(lambda x, theta: halves(x, angles(theta))), "other-angles")


def angles_in_x_dtype(x, theta):
    """The angles rounded to x's dtype before cos and sin: exact near position 0, wrong in the thousands."""
    t = theta.type_as(x)
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * torch.cos(t) - b * torch.sin(t), b * torch.cos(t) + a * torch.sin(t)), dim=-1)


def angles_to_x(x, theta):
    h = x.shape[-1] // 2
    c, s = torch.cos(theta.to(x)), torch.sin(theta.to(x))
    return torch.cat([x[..., :h] * c - x[..., h:] * s, x[..., :h] * s + x[..., h:] * c], -1)


@pytest.mark.parametrize("answer", [angles_in_x_dtype, angles_to_x])
def test_angles_rounded_to_x_dtype_before_cos_and_sin_are_named_at_far_positions(answer):
    assert_named(check_rotate_halves(answer), "low-precision-angles", "thousands")
    assert_named(check_rotate_halves(answer, hint=2), "low-precision-angles", "float16")


def test_angles_always_rounded_to_float32_are_told_of_the_float32_round_trip():
    # the float64 case comes before the far positions: a float32 round trip, which it is, in every dtype
    assert_named(check_rotate_halves(lambda x, theta: angles_in_x_dtype(x, theta.float()).to(x.dtype)), "precision")


def test_a_result_whose_pairs_change_length_is_not_blamed_on_the_angles():
    assert_named(check_rotate_halves(lambda x, theta: 1.5 * halves(x, theta)), "values")


def test_the_chapters_apply_rope_is_the_neighbours_mistake_on_ropes_angles():
    x, theta = M._rotate_cases()[0]
    torch.testing.assert_close(M._rotate_halves(x, theta, layout="neighbours"), apply_rope(x))


def test_the_rotate_cases_use_arbitrary_angles_float64_angles_and_a_batch_of_heads():
    (x0, th0), (x1, th1), (x2, th2), (x3, th3), (x4, th4) = M._rotate_cases()
    assert th3[:, 0].min() >= 3000 <= th4[:, 0].min() and x3.dtype == torch.float32 and x4.dtype == torch.float16
    assert th0.dtype == torch.float64 and x0.dtype == torch.float32
    assert not torch.allclose(th1.double(), rope_angles(x1.shape[-2], x1.shape[-1])) and x1.dim() == 4
    assert th1.abs().max() <= math.pi and x2.dtype == th2.dtype == torch.float64


def test_the_halves_layout_keeps_scores_a_function_of_the_offset():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, generator=g, dtype=torch.float64)
    theta = rope_angles(6, 8)
    S = halves(q.expand(6, 8), theta) @ halves(k.expand(6, 8), theta).T
    for offset in range(6):
        d = torch.diagonal(S, -offset)
        torch.testing.assert_close(d, d[0].expand_as(d))


# ---- find the bug: positions for a batch ----------------------------------------------------------------------

def test_the_bug_passes_one_sentence_and_a_batch_of_one_and_fails_a_batch_of_three_silently():
    (one, E, PE), (batch1, _, _), (batch3, _, _), _ = M._positions_cases()
    for ids in (one, batch1):
        torch.testing.assert_close(positions_as_given(ids, E, PE), positions_right(ids, E, PE))
    wrong = positions_as_given(batch3, E, PE)                            # runs, right shape, wrong rows
    assert wrong.shape == positions_right(batch3, E, PE).shape
    assert not torch.allclose(wrong[1:], positions_right(batch3, E, PE)[1:])


@pytest.mark.parametrize("answer, label", [
    (lambda ids, E, PE: E[ids] + PE[torch.arange(0.0, ids.shape[-1])], "float"),
    (lambda ids, E, PE: E[ids] + PE[torch.linspace(0, ids.shape[-1] - 1, ids.shape[-1])], "float"),
    (lambda ids, E, PE: E[ids] + PE[: len(ids)], "first-axis"),
    (lambda ids, E, PE: E[ids] + PE[: ids.shape[0]], "first-axis"),
    (lambda ids, E, PE: E[ids] + PE[torch.arange(1, ids.shape[-1] + 1)], "from-one"),
    (lambda ids, E, PE: E[ids] + PE[ids], "by-id"),
    (lambda ids, E, PE: E[ids], "no-positions"),
    (lambda ids, E, PE: E[ids] + PE[torch.arange(ids.shape[-1] - 1, -1, -1)], "reversed-positions"),
    (lambda ids, E, PE: E[ids] + PE[: ids.shape[-1]].flipud(), "reversed-positions"),
])
def test_the_usual_wrong_repairs_are_named(answer, label):
    assert_named(check_embed_with_positions(answer), label)


def test_a_repair_that_casts_to_float32_fails_the_float64_tables():
    verdict = check_embed_with_positions(lambda ids, E, PE: (E[ids] + PE[: ids.shape[-1]]).float())
    assert_named(verdict, "dtype", "expected torch.float64")


def test_a_repair_that_writes_into_the_table_is_named():
    def into_E(ids, E, PE):
        E += 1                            # the caller's table, written in place
        return positions_right(ids, E - 1, PE)

    assert_named(check_embed_with_positions(into_E), "in-place", "E")


def test_a_repair_off_by_one_only_in_batches_is_not_blamed_on_counting_from_one():
    """Misleading blame: "from-one" is named only where it matches on every case."""
    def odd(ids, E, PE):
        start = 1 if ids.dim() == 2 else 0
        return E[ids] + PE[start: start + ids.shape[-1]]

    verdict = check_embed_with_positions(odd)
    assert not verdict.ok and verdict.mistake == "values", verdict
