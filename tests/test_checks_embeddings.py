"""Chapter 1's checkers accept the solution, name each planted mistake, and never raise."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib.checks import Verdict, check_embed, check_rotate_pairs, check_sinusoidal, judge


def sinusoid(T, d, *, swap=False, pair_index=False, grow=False):
    t = torch.arange(T, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float32)
    exponent = (two_i / 2 if pair_index else two_i) / d
    freq = 10000.0 ** (exponent if grow else -exponent)
    P = torch.zeros(T, d)
    first, second = torch.sin(t * freq), torch.cos(t * freq)
    P[:, 0::2], P[:, 1::2] = (second, first) if swap else (first, second)
    return P


def rotate(x, theta, *, backwards=False, halves=False):
    c, s = theta.cos(), theta.sin() * (-1 if backwards else 1)
    if halves:
        a, b = x.chunk(2, dim=-1)
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    out = x.clone()
    out[..., 0::2], out[..., 1::2] = x[..., 0::2] * c - x[..., 1::2] * s, x[..., 0::2] * s + x[..., 1::2] * c
    return out


CASES = [
    (check_embed, lambda ids, table: table[ids], {
        "columns": lambda ids, table: table[:, ids],
        "columns-transposed": lambda ids, table: table[:, ids].transpose(0, -1),
        "one-hot-transposed": lambda ids, table: table.T @ F.one_hot(ids, table.shape[0]).float().transpose(-2, -1),
    }),
    (check_sinusoidal, lambda T, d: sinusoid(T, d), {
        "sin-cos-swapped": lambda T, d: sinusoid(T, d, swap=True),
        "exponent-i": lambda T, d: sinusoid(T, d, pair_index=True),
        "exponent-sign": lambda T, d: sinusoid(T, d, grow=True),
    }),
    (check_rotate_pairs, lambda x, theta: rotate(x, theta), {
        "wrong-direction": lambda x, theta: rotate(x, theta, backwards=True),
        "halves": lambda x, theta: rotate(x, theta, halves=True),
    }),
]


@pytest.mark.parametrize("checker,solution,mistakes", CASES, ids=[c[0].__name__ for c in CASES])
def test_checker_accepts_the_solution_and_names_each_mistake(checker, solution, mistakes):
    assert checker(solution).ok
    for label, wrong in mistakes.items():
        verdict = checker(wrong)
        assert not verdict.ok and verdict.mistake == label, (label, verdict)


def test_the_one_hot_product_is_an_accepted_embedding():
    assert check_embed(lambda ids, table: F.one_hot(ids, table.shape[0]).to(table) @ table).ok


def test_judge_never_raises_and_explains_errors_and_shapes():
    ref = lambda x: x * 2   # noqa: E731
    case = [(torch.ones(3),)]
    assert judge(lambda x: 1 / 0, case, ref).mistake == "error"
    assert judge(lambda x: x[:2] * 2, case, ref).mistake == "shape"
    assert judge(lambda x: x * 3, case, ref).mistake == "values"
    assert judge(lambda x: "text", case, ref).mistake == "type"
    verdict = judge(lambda x: x * 2, case, ref)
    assert isinstance(verdict, Verdict) and verdict.ok and repr(verdict).startswith("✓")
    assert repr(judge(lambda x: x, case, ref)).startswith("✗ not yet")
