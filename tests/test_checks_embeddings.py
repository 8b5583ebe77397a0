"""Chapter 1's checkers accept the solution, name each planted mistake, and never raise."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib import apply_rope, rope_angles
from attnlib.checks import (
    Verdict,
    check_embed,
    check_embed_with_positions,
    check_rotate_pairs,
    check_sinusoidal,
    judge,
)
from conftest import assert_accepted, assert_mistakes_distinct, assert_named


def sinusoid(T, d, *, swap=False, pair_index=False, grow=False):
    t = torch.arange(T, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float32)
    exponent = (two_i / 2 if pair_index else two_i) / d
    freq = 10000.0 ** (exponent if grow else -exponent)
    PE = torch.zeros(T, d)
    first, second = torch.sin(t * freq), torch.cos(t * freq)
    PE[:, 0::2], PE[:, 1::2] = (second, first) if swap else (first, second)
    return PE


def rotate(x, theta, *, backwards=False, halves=False):
    c, s = theta.cos(), theta.sin() * (-1 if backwards else 1)
    if halves:
        a, b = x.chunk(2, dim=-1)
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    out = x.clone()
    out[..., 0::2], out[..., 1::2] = x[..., 0::2] * c - x[..., 1::2] * s, x[..., 0::2] * s + x[..., 1::2] * c
    return out


def rotate_own_angles(x, theta):
    """Ignores theta and uses RoPE's own angles: right for RoPE's angles only."""
    return apply_rope(x)


def rotate_own_wrong_schedule(x, theta):
    """Ignores theta and makes up angles with the exponent i/d (the frequency schedule needs 2i/d)."""
    T, d = x.shape[-2], x.shape[-1]
    angles = torch.arange(T)[:, None] * 10000.0 ** (-torch.arange(d // 2) / d)
    return rotate(x, angles.to(x.dtype))


# The "find the bug" function as the chapter prints it, and the wrong repairs.
def positions_as_given(ids, E, PE):
    T = ids.shape[0]
    return E[ids] + PE[:T]


def positions_right(ids, E, PE):
    T = ids.shape[-1]
    return E[ids] + PE[:T]


CASES = [
    (check_embed, lambda ids, E: E[ids], {
        "columns": lambda ids, E: E[:, ids],
        "columns-transposed": lambda ids, E: E[:, ids].transpose(0, -1),
        "one-hot-transposed": lambda ids, E: E.T @ F.one_hot(ids, E.shape[0]).float().transpose(-2, -1),
    }),
    (check_sinusoidal, lambda T, d: sinusoid(T, d), {
        "sin-cos-swapped": lambda T, d: sinusoid(T, d, swap=True),
        "exponent-i": lambda T, d: sinusoid(T, d, pair_index=True),
        "exponent-sign": lambda T, d: sinusoid(T, d, grow=True),
    }),
    (check_rotate_pairs, lambda x, theta: rotate(x, theta), {
        "identity": lambda x, theta: x,
        "wrong-direction": lambda x, theta: rotate(x, theta, backwards=True),
        "halves": lambda x, theta: rotate(x, theta, halves=True),
        "ignores-theta": rotate_own_angles,
        "own-schedule": rotate_own_wrong_schedule,
    }),
    (check_embed_with_positions, positions_right, {
        "unchanged": positions_as_given,
        "whole-table": lambda ids, E, PE: E[ids] + PE,
        "positions-by-id": lambda ids, E, PE: E[ids] + PE[ids],
        "no-positions": lambda ids, E, PE: E[ids],
    }),
]

SOLUTIONS = [(c, s) for c, s, _ in CASES]
MISTAKES = [(c, w, label) for c, _, ws in CASES for label, w in ws.items()]


@pytest.mark.parametrize("check, solution", SOLUTIONS, ids=lambda x: getattr(x, "__name__", ""))
def test_solution_is_accepted(check, solution):
    assert_accepted(check(solution))


@pytest.mark.parametrize("check, wrong, label", MISTAKES, ids=[f"{c.__name__}-{lab}" for c, _, lab in MISTAKES])
def test_planted_mistake_is_named(check, wrong, label):
    assert_named(check(wrong), label)


def test_every_planted_mistake_differs_from_the_answer_and_from_the_others():
    from attnlib.checks import embeddings as E

    for cases, reference, mistakes in [
        (E._embed_cases(), lambda ids, table: table[ids], E._EMBED_MISTAKES),
        ([(7, 8)], E.sinusoidal_positions, E._SINUSOID_MISTAKES),
        # ignores-theta agrees with the answer on RoPE's own angles (case 0) by design: compare on case 1
        (E._rotate_cases()[1:], E._rotate, E._ROTATE_MISTAKES),
        # the bug as given agrees with the answer on one unbatched sentence (case 0): compare on case 1
        (E._positions_cases()[1:], E._positions_reference, E._POSITIONS_MISTAKES[:1] + E._POSITIONS_MISTAKES[2:]),
    ]:
        assert_mistakes_distinct(cases[0], reference, mistakes)


def test_the_one_hot_product_is_an_accepted_embedding():
    assert check_embed(lambda ids, E: F.one_hot(ids, E.shape[0]).to(E) @ E).ok


def test_embed_checker_builds_fresh_inputs_on_every_call():
    def vandal(ids, E):
        out = E[ids].clone()
        E.zero_()                 # ruins the table it was handed
        ids.zero_()
        return out

    assert check_embed(vandal).ok
    assert check_embed(lambda ids, E: E[ids]).ok
    assert not check_embed(lambda ids, E: torch.zeros(*ids.shape, E.shape[1])).ok


def test_embed_checker_catches_columns_on_a_square_table():
    from attnlib.checks import embeddings as E

    ids, table = E._embed_cases()[1]
    assert table.shape[0] == table.shape[1]          # the case where picking columns has the right shape
    assert table[:, ids].T.shape == table[ids].shape


# ---- the holes of the old rotate checker: it ignored theta ------------------------------------------------------

def test_rotate_reference_is_the_librarys_rope_on_ropes_own_angles():
    from attnlib.checks import embeddings as E

    x, theta = E._rotate_cases()[0]
    torch.testing.assert_close(E._rotate(x, theta), apply_rope(x))


def test_rotate_checker_uses_the_angles_it_is_given():
    from attnlib.checks import embeddings as E

    x, theta = E._rotate_cases()[1]
    assert not torch.allclose(theta.double(), rope_angles(x.shape[-2], x.shape[-1]))
    assert theta.abs().max() <= math.pi and x.shape[-2] % 2 == 1      # arbitrary angles, odd T, a batch


def test_rotate_checker_rejects_an_identity_rotation_and_a_wrong_schedule():
    for wrong in (lambda x, theta: x.clone(), rotate_own_angles, rotate_own_wrong_schedule):
        assert not check_rotate_pairs(wrong).ok


def test_rotate_checker_accepts_a_batched_solution_using_theta():
    def with_theta(x, theta):
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()], -1).flatten(-2)

    assert check_rotate_pairs(with_theta).ok


# ---- the find-the-bug positions exercise ------------------------------------------------------------------------

def test_the_positions_bug_passes_one_sentence_and_fails_a_batch_of_one_silently():
    from attnlib.checks import embeddings as E

    (ids, table, PE), (batch, _, _) = E._positions_cases()[:2]
    torch.testing.assert_close(positions_as_given(ids, table, PE), positions_right(ids, table, PE))
    wrong = positions_as_given(batch, table, PE)             # runs, right shape, no word order
    assert wrong.shape == positions_right(batch, table, PE).shape
    torch.testing.assert_close(wrong[0] - table[batch[0]], PE[0].expand(batch.shape[-1], -1))


def test_judge_never_raises_and_explains_errors_and_shapes():
    ref = lambda x: x * 2   # noqa: E731
    case = [(torch.ones(3),)]
    assert_named(judge(lambda x: 1 / 0, case, ref), "error")
    assert_named(judge(lambda x: x[:2] * 2, case, ref), "shape")
    assert_named(judge(lambda x: x * 3, case, ref), "values")
    assert_named(judge(lambda x: "text", case, ref), "type")
    verdict = judge(lambda x: x * 2, case, ref)
    assert isinstance(verdict, Verdict) and verdict.ok and repr(verdict).startswith("✓")
    assert repr(judge(lambda x: x, case, ref)).startswith("✗ not yet")


def test_each_planted_function_with_no_switch_is_the_answer():
    """A table's planted function means "correct" by default, so a row's switches are the whole mistake."""
    from attnlib.checks import embeddings as E
    from attnlib.checks._core import _close

    for wrong, cases, reference, atol in [
        (E._sinusoid, [(7, 8), (3, 16)], sinusoid, 1e-4),
        (E._rotate, E._rotate_cases(), rotate, 1e-5),
        (E._positions_reference, E._positions_cases(), positions_right, 1e-5),
    ]:
        for case in cases:
            assert _close(wrong(*case), reference(*case), atol), wrong.__name__
