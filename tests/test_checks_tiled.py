"""The chapter 9 checkers accept the solution, name every planted mistake, and recognise the stub.

The wrong answers are written out here, independently of the checker's own planted mistakes."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import buggy_tiled_attention, check_fixed_tiled_attention, check_online_step, check_tile_count
from conftest import assert_accepted, assert_mistakes_distinct, assert_named, stub


# ------------------------------------------------------------------------------------------ one online step
def step_ok(m, l, S_blk):
    m_new = torch.maximum(m, S_blk.max(dim=-1).values)
    return m_new, l * torch.exp(m - m_new) + torch.exp(S_blk - m_new.unsqueeze(-1)).sum(-1)


def step_forgets_to_rescale(m, l, S_blk):
    m_new = torch.maximum(m, S_blk.max(dim=-1).values)
    return m_new, l + torch.exp(S_blk - m_new.unsqueeze(-1)).sum(-1)


def step_wrong_sign(m, l, S_blk):
    m_new = torch.maximum(m, S_blk.max(dim=-1).values)
    return m_new, l / torch.exp(m - m_new) + torch.exp(S_blk - m_new.unsqueeze(-1)).sum(-1)


def step_without_the_max(m, l, S_blk):
    m_new = torch.maximum(m, S_blk.max(dim=-1).values)
    return m_new, l * torch.exp(m - m_new) + S_blk.exp().sum(-1)


def step_shifts_by_the_old_max(m, l, S_blk):
    m_new = torch.maximum(m, S_blk.max(dim=-1).values)
    return m_new, l * torch.exp(m - m_new) + torch.exp(S_blk - m.unsqueeze(-1)).sum(-1)


def step_keeps_only_the_block_max(m, l, S_blk):
    m_new = S_blk.max(dim=-1).values
    return m_new, l * torch.exp(m - m_new) + torch.exp(S_blk - m_new.unsqueeze(-1)).sum(-1)


def test_online_step_solution_is_accepted():
    assert_accepted(check_online_step(step_ok))


def test_online_step_in_place_answer_is_accepted():
    def in_place(m, l, S_blk):
        m_new = torch.maximum(m, S_blk.amax(-1))
        l.mul_(torch.exp(m - m_new)).add_(torch.exp(S_blk - m_new[..., None]).sum(-1))
        return m_new, l
    assert_accepted(check_online_step(in_place))


@pytest.mark.parametrize("fn, label", [
    (step_forgets_to_rescale, "no-rescale"), (step_wrong_sign, "wrong-sign"), (step_without_the_max, "no-max"),
    (step_shifts_by_the_old_max, "old-max"), (step_keeps_only_the_block_max, "block-max-only"), (stub, "stub"),
])
def test_online_step_mistakes_are_named(fn, label):
    assert_named(check_online_step(fn), label)


def test_online_step_returning_only_the_sum_is_told_the_shape_of_the_answer():
    v = check_online_step(lambda m, l, S_blk: step_ok(m, l, S_blk)[1])
    assert not v.ok and "tuple of 2" in v.message, v


# ------------------------------------------------------------------------------------------ predict: tiles
def count_tiles(T, b_q, b_k):
    """Tiles computed by causal tiled attention, counted one query block at a time (written independently)."""
    total = 0
    for q0 in range(0, T, b_q):
        last_query = min(q0 + b_q, T) - 1
        total += last_query // b_k + 1          # key blocks 0 … the one holding the last query
    return total


def test_tile_count_right_number_is_accepted():
    n = count_tiles(550, 128, 64)
    assert n == 29
    assert_accepted(check_tile_count(n))
    assert_accepted(check_tile_count(torch.tensor(29)))


@pytest.mark.parametrize("value, label", [
    (math.ceil(550 / 128) * math.ceil(550 / 64), "no-skip"),              # 45: every tile
    (45 - 29, "skipped"),                                                 # 16
    (45 / 2, "half"),                                                     # 22.5
    (9, "diagonal-only"),                                                 # one straddling tile per key block
    (count_tiles(512, 128, 64), "floor"),                                 # 20: the partial blocks dropped
    (5 * 6 // 2, "square"),                                               # 15: n(n + 1)/2 for n = 5
    (30, "values"), (28, "values"),
    (..., "stub"), (None, "stub"), ("29", "type"),
])
def test_tile_count_wrong_numbers_are_named(value, label):
    assert_named(check_tile_count(value), label)


# ------------------------------------------------------------------------------------------ find the bug
def _tiles(Q, K, V, block, update):
    T, d_k = Q.shape[-2], Q.shape[-1]
    rows_out = []
    for q0 in range(0, T, block):
        q1 = min(q0 + block, T)
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -math.inf, dtype=Q.dtype)
        l = torch.zeros_like(m)
        O = torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)
        for k0 in range(0, q1, block):
            k1 = min(k0 + block, T)
            S = (Q[..., q0:q1, :] @ K[..., k0:k1, :].mT) / math.sqrt(d_k)
            keep = torch.arange(k0, k1)[None, :] <= torch.arange(q0, q1)[:, None]
            S = torch.where(keep, S, -math.inf)
            m_new = torch.maximum(m, S.amax(-1))
            P = (S - m_new[..., None]).exp()
            alpha = (m - m_new).exp()
            m, l, O = m_new, *update(l, O, alpha, P, P @ V[..., k0:k1, :])
        rows_out.append(O / l[..., None])
    return torch.cat(rows_out, dim=-2)


def fixed_ok(Q, K, V, block):
    return _tiles(Q, K, V, block, lambda l, O, a, P, PV: (a * l + P.sum(-1), a[..., None] * O + PV))


def fixed_wrong_sign(Q, K, V, block):
    return _tiles(Q, K, V, block, lambda l, O, a, P, PV: (a * l + P.sum(-1), O / a[..., None] + PV))


def fixed_after_adding(Q, K, V, block):
    return _tiles(Q, K, V, block, lambda l, O, a, P, PV: (a * l + P.sum(-1), a[..., None] * (O + PV)))


def fixed_but_l_no_longer_rescaled(Q, K, V, block):
    return _tiles(Q, K, V, block, lambda l, O, a, P, PV: (l + P.sum(-1), a[..., None] * O + PV))


def test_fixed_tiled_attention_solution_is_accepted():
    assert_accepted(check_fixed_tiled_attention(fixed_ok))


@pytest.mark.parametrize("fn, label", [
    (buggy_tiled_attention, "unchanged"), (fixed_wrong_sign, "wrong-sign"),
    (fixed_after_adding, "rescale-after-add"), (fixed_but_l_no_longer_rescaled, "moved-rescale"), (stub, "stub"),
])
def test_fixed_tiled_attention_mistakes_are_named(fn, label):
    assert_named(check_fixed_tiled_attention(fn), label)


def test_the_planted_bug_shows_only_when_a_row_spans_two_key_blocks():
    """The bug is invisible with one block (the checker must not rely on such a case) and visible otherwise."""
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(buggy_tiled_attention(Q, K, V, 8), fixed_ok(Q, K, V, 8))
    assert not torch.allclose(buggy_tiled_attention(Q, K, V, 2), fixed_ok(Q, K, V, 2))


def test_a_fix_right_only_for_T_a_multiple_of_the_block_fails():
    def only_full_blocks(Q, K, V, block):
        out = fixed_ok(Q, K, V, block)
        return out if Q.shape[-2] % block == 0 else out + 1e-3
    assert not check_fixed_tiled_attention(only_full_blocks).ok


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import tiled as M
    from attnlib.checks._core import _close

    for cases, variant, reference, mistakes in [(M._step_cases, M._step, M._step_reference, M._STEP_MISTAKES),
                                                (M._fix_cases, M._tiled_variant, M._fixed_reference,
                                                 M._FIX_MISTAKES)]:
        for case in cases():
            assert _close(variant(*case), reference(*case), 1e-9)
        assert_mistakes_distinct(cases()[0], reference, mistakes)
