"""Tiled attention and the online softmax (attnlib.tiled) agree with torch, keep the causal promise, and reject
bad input with a message that names what was expected."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import attention
from attnlib.tiled import (
    DIAGONAL,
    FULL,
    SKIPPED,
    TiledAttention,
    online_softmax,
    online_softmax_step,
    recomputing_tiled_attention,
    tile_plan,
    tiled_attention,
    tiled_attention_backward,
)

FAST = settings(max_examples=30, deadline=None, derandomize=True)


def qkv(*batch, T_q, T_k=None, d_k=4, d_v=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    T_k = T_q if T_k is None else T_k
    Q = torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
    K = torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
    V = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
    return Q, K, V


def brute_plan(T_q, T_k, b_q, b_k, causal=True):
    """The tile plan from the full boolean table: a tile is skipped when none of its entries may be read."""
    allowed = torch.ones(T_q, T_k, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(T_k - T_q)
    n_q, n_k = math.ceil(T_q / b_q), math.ceil(T_k / b_k)
    plan = torch.empty(n_q, n_k, dtype=torch.int64)
    for i in range(n_q):
        for j in range(n_k):
            tile = allowed[i * b_q:(i + 1) * b_q, j * b_k:(j + 1) * b_k]
            plan[i, j] = FULL if tile.all() else DIAGONAL if tile.any() else SKIPPED
    return plan


# ---------------------------------------------------------------------------------------- online softmax
def test_online_softmax_of_the_worked_example_is_softmax():
    z = torch.tensor([5.2, 0.3, 2.1], dtype=torch.float64)
    for block in (1, 2, 3, 5):
        assert (online_softmax(z, block) - torch.softmax(z, -1)).abs().max() <= 1e-15


def test_one_step_rescales_the_old_sum_when_the_max_grows():
    m, ell = torch.tensor([0.3], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    Z_blk = torch.tensor([[2.1, 5.2]], dtype=torch.float64)
    m_new, ell_new, rescale, P_blk = online_softmax_step(m, ell, Z_blk)
    assert m_new.item() == 5.2
    assert rescale.item() == pytest.approx(math.exp(0.3 - 5.2), rel=1e-15)
    assert ell_new.item() == pytest.approx(math.exp(0.3 - 5.2) + math.exp(2.1 - 5.2) + 1.0, rel=1e-15)
    assert torch.equal(P_blk, torch.exp(Z_blk - 5.2))


@FAST
@given(n=st.integers(1, 20), block=st.integers(1, 25), seed=st.integers(0, 10**6), spread=st.sampled_from([1, 30, 800]))
def test_online_softmax_equals_softmax_for_any_block(n, block, seed, spread):
    Z = spread * torch.randn(3, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(online_softmax(Z, block), torch.softmax(Z, -1), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------------------- agreement
SHAPES = [  # batch axes, T_q, T_k, block_q, block_k
    ((), 13, 13, 4, 5),          # T not a multiple of either block
    ((2,), 9, 9, 3, 3),
    ((2, 3), 11, 11, 4, 2),      # (B, h)
    ((1, 2), 7, 7, 64, 64),      # one block larger than T
    ((2,), 6, 6, 1, 1),          # blocks of one
    ((2, 2), 5, 12, 2, 5),       # T_q < T_k: the queries are the last positions
    ((1,), 17, 17, 16, 3),
]


@pytest.mark.parametrize("batch, T_q, T_k, b_q, b_k", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_equals_sdpa_and_the_plain_path_in_float64(batch, T_q, T_k, b_q, b_k, causal):
    Q, K, V = qkv(*batch, T_q=T_q, T_k=T_k)
    out = tiled_attention(Q, K, V, causal=causal, block_q=b_q, block_k=b_k)
    mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) if causal else None
    want = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    assert out.shape == want.shape == (*batch, T_q, V.shape[-1])
    assert (out - want).abs().max() <= 1e-12
    assert (out - attention(Q, K, V, causal=causal)).abs().max() <= 1e-12


def test_float32_is_close_to_sdpa():
    Q, K, V = qkv(2, 2, T_q=37, d_k=8, d_v=8, dtype=torch.float32, seed=3)
    out = tiled_attention(Q, K, V, block_q=8, block_k=16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_views_of_any_layout_give_the_same_result():
    Q, K, V = qkv(2, T_q=9, d_k=4, d_v=4)
    Qt = Q.transpose(-2, -1).contiguous().transpose(-2, -1)
    assert torch.equal(tiled_attention(Qt, K, V, block_q=4, block_k=3), tiled_attention(Q, K, V, block_q=4, block_k=3))


# ---------------------------------------------------------------------------------------- properties
@FAST
@given(T=st.integers(2, 12), b_q=st.integers(1, 6), b_k=st.integers(1, 6), seed=st.integers(0, 10**6),
       data=st.data())
def test_a_future_key_or_value_never_changes_an_earlier_output(T, b_q, b_k, seed, data):
    t = data.draw(st.integers(1, T - 1), label="changed position")
    Q, K, V = qkv(T_q=T, seed=seed)
    K2, V2 = K.clone(), V.clone()
    K2[t] += 3.0
    V2[t] -= 5.0
    a = tiled_attention(Q, K, V, block_q=b_q, block_k=b_k)
    b = tiled_attention(Q, K2, V2, block_q=b_q, block_k=b_k)
    assert torch.equal(a[:t], b[:t])
    assert not torch.equal(a[t:], b[t:])


@FAST
@given(T=st.integers(1, 12), b_q=st.integers(1, 6), b_k=st.integers(1, 6), seed=st.integers(0, 10**6),
       causal=st.booleans())
def test_the_weights_sum_to_one(T, b_q, b_k, seed, causal):
    Q, K, _ = qkv(T_q=T, seed=seed)
    ones = torch.ones(T, 2, dtype=torch.float64)
    torch.testing.assert_close(tiled_attention(Q, K, ones, causal=causal, block_q=b_q, block_k=b_k),
                               ones, rtol=0, atol=1e-14)


@FAST
@given(T=st.integers(2, 10), b_q=st.integers(1, 5), b_k=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_without_the_mask_a_permutation_of_the_tokens_permutes_the_outputs(T, b_q, b_k, seed):
    Q, K, V = qkv(T_q=T, seed=seed)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    out = tiled_attention(Q, K, V, causal=False, block_q=b_q, block_k=b_k)
    of_permuted = tiled_attention(Q[perm], K[perm], V[perm], causal=False, block_q=b_q, block_k=b_k)
    torch.testing.assert_close(of_permuted, out[perm], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------- the tile plan
@FAST
@given(T_q=st.integers(1, 20), extra=st.integers(0, 10), b_q=st.integers(1, 8), b_k=st.integers(1, 8),
       causal=st.booleans())
def test_the_plan_matches_the_mask_tile_by_tile(T_q, extra, b_q, b_k, causal):
    T_k = T_q + extra
    assert torch.equal(tile_plan(T_q, T_k, b_q, b_k, causal), brute_plan(T_q, T_k, b_q, b_k, causal))


def test_plan_counts_causal_and_full():
    plan = tile_plan(550, 550, 128, 64)
    assert plan.shape == (5, 9)
    assert int((plan != SKIPPED).sum()) == 29 and int((plan == DIAGONAL).sum()) == 9
    assert torch.equal(tile_plan(550, 550, 128, 64, causal=False), torch.full((5, 9), FULL))


def test_the_skipped_fraction_tends_to_one_half():
    fractions = []
    for n in (2, 4, 16, 64, 256):
        plan = tile_plan(64 * n, 64 * n, 64, 64)
        skipped = Fraction(int((plan == SKIPPED).sum()), plan.numel())
        assert skipped == Fraction(n - 1, 2 * n)                 # n(n − 1)/2 of n² tiles
        fractions.append(skipped)
    assert fractions == sorted(fractions) and abs(fractions[-1] - Fraction(1, 2)) < 0.002


# ---------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("blocks, error, words", [
    (dict(block_q=0), ValueError, "block_q must be a positive integer, got 0"),
    (dict(block_k=-2), ValueError, "block_k must be a positive integer, got -2"),
    (dict(block_q=2.5), TypeError, "block_q must be a positive integer, got 2.5"),
    (dict(block_k=True), TypeError, "block_k must be a positive integer"),
    (dict(block_q="8"), TypeError, "block_q must be a positive integer"),
])
def test_bad_block_sizes(blocks, error, words):
    Q, K, V = qkv(T_q=5)
    with pytest.raises(error, match=words):
        tiled_attention(Q, K, V, **blocks)
    with pytest.raises(error, match=words):
        tile_plan(5, 5, **{"block_q": 2, "block_k": 2, **blocks})


def test_bad_tensors():
    Q, K, V = qkv(2, T_q=5, d_k=4, d_v=3)
    with pytest.raises(ValueError, match=r"K must be \(\.\.\., T_k, d_k=4\), got \(2, 5, 6\)"):
        tiled_attention(Q, torch.randn(2, 5, 6, dtype=torch.float64), V)
    with pytest.raises(ValueError, match=r"V must be \(\.\.\., T_k=5, d_v\), got \(2, 4, 3\)"):
        tiled_attention(Q, K, V[:, :4])
    with pytest.raises(TypeError, match="Q has dtype torch.float64 but K has dtype torch.float32"):
        tiled_attention(Q, K.float(), V)
    with pytest.raises(TypeError, match="Q has dtype torch.float64 but V has dtype torch.float32"):
        tiled_attention(Q, K, V.float())
    with pytest.raises(ValueError, match="K must have the batch axes of Q"):
        tiled_attention(Q, K[:1], V[:1])
    with pytest.raises(TypeError, match="Q must be a torch.Tensor, got list"):
        tiled_attention([[1.0]], K, V)
    with pytest.raises(TypeError, match="causal must be True or False, got 1"):
        tiled_attention(Q, K, V, causal=1)
    with pytest.raises(ValueError, match="T_k=3 must be at least T_q=5"):
        tiled_attention(Q, K[:, :3], V[:, :3])


def test_bad_running_statistics():
    Z_blk = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"m must hold one number per row of Z_blk, shape \(3,\).*got \(4,\)"):
        online_softmax_step(torch.zeros(4), torch.zeros(3), Z_blk)
    with pytest.raises(TypeError, match="Z_blk has dtype torch.float32 but ell has dtype torch.float64"):
        online_softmax_step(torch.zeros(3), torch.zeros(3, dtype=torch.float64), Z_blk)
    with pytest.raises(ValueError, match="block must be a positive integer, got 0"):
        online_softmax(Z_blk, 0)


def test_gradients_flow_through_the_tiles_as_through_the_plain_path():
    Q, K, V = (t.requires_grad_() for t in qkv(2, T_q=7, seed=5))
    tiled_attention(Q, K, V, block_q=3, block_k=2).square().sum().backward()
    tiled_grads = [t.grad.clone() for t in (Q, K, V)]
    for t in (Q, K, V):
        t.grad = None
    attention(Q, K, V).square().sum().backward()
    for got, want in zip(tiled_grads, (Q.grad, K.grad, V.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------- the backward pass
def grads(fn, Q, K, V, dO):
    Q, K, V = (t.detach().requires_grad_() for t in (Q, K, V))
    out = fn(Q, K, V)
    return (out, *torch.autograd.grad(out, (Q, K, V), dO))


@pytest.mark.parametrize("batch, T_q, T_k, b_q, b_k", SHAPES)
@pytest.mark.parametrize("causal", [True, False])
def test_the_recomputing_backward_equals_autograd_through_the_plain_path(batch, T_q, T_k, b_q, b_k, causal):
    Q, K, V = qkv(*batch, T_q=T_q, T_k=T_k, seed=7)
    dO = torch.randn(*batch, T_q, V.shape[-1], generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    got = grads(lambda q, k, v: recomputing_tiled_attention(q, k, v, causal=causal, block_q=b_q, block_k=b_k),
                Q, K, V, dO)
    want = grads(lambda q, k, v: attention(q, k, v, causal=causal), Q, K, V, dO)
    for g, w in zip(got, want):
        assert g.shape == w.shape and (g - w).abs().max() <= 1e-12


def test_the_row_statistics_give_back_the_weights_and_the_backward_takes_them():
    Q, K, V = qkv(2, T_q=9, T_k=11, seed=2)
    out, m, ell = tiled_attention(Q, K, V, block_q=4, block_k=3, return_stats=True)
    assert m.shape == ell.shape == (2, 9) and torch.equal(out, tiled_attention(Q, K, V, block_q=4, block_k=3))
    Z = Q @ K.mT / math.sqrt(Q.shape[-1]) + torch.zeros(9, 11).masked_fill(
        torch.ones(9, 11, dtype=torch.bool).tril(2).logical_not(), float("-inf")).double()
    P = torch.exp(Z - m[..., None]) / ell[..., None]
    assert (P - attention(Q, K, V, return_weights=True)[1]).abs().max() <= 1e-14
    dO = torch.randn_like(out)
    dQ, dK, dV = tiled_attention_backward(Q, K, V, out, m, ell, dO, block_q=2, block_k=5)   # other tiles: same
    want = grads(lambda q, k, v: attention(q, k, v), Q, K, V, dO)[1:]
    for g, w in zip((dQ, dK, dV), want):
        assert (g - w).abs().max() <= 1e-12


def test_the_recomputing_path_keeps_only_q_k_v_o_and_two_numbers_per_row():
    T, d = 64, 8
    Q, K, V = (t.requires_grad_() for t in qkv(1, T_q=T, d_k=d, d_v=d, dtype=torch.float32))
    inputs = {t.untyped_storage().data_ptr() for t in (Q, K, V)}
    kept = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in inputs:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        recomputing_tiled_attention(Q, K, V, block_q=16, block_k=16)
    assert sum(kept.values()) == (T * d + 2 * T) * 4                  # O, m and ℓ
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attention(Q, K, V)
    assert sum(kept.values()) >= T * T * 4                            # the plain path keeps (T, T) tables


def test_bad_backward_arguments():
    Q, K, V = qkv(2, T_q=5)
    out, m, ell = tiled_attention(Q, K, V, return_stats=True)
    with pytest.raises(ValueError, match=r"dO must be"):
        tiled_attention_backward(Q, K, V, out, m, ell, out[:, :4])
    with pytest.raises(ValueError, match="m must hold one number per row of O"):
        tiled_attention_backward(Q, K, V, out, m[:, :4], ell, out)
    with pytest.raises(TypeError, match="return_stats must be True or False"):
        tiled_attention(Q, K, V, return_stats="yes")
    with pytest.raises(TypeError, match="causal must be True or False"):
        recomputing_tiled_attention(Q, K, V, causal=None)
    with pytest.raises(ValueError, match="block_q must be a positive integer, got 0"):
        TiledAttention.apply(Q, K, V, True, 0, 4)


def test_an_empty_batch_and_numpy_block_sizes_are_accepted():
    import numpy as np

    Q, K, V = qkv(0, T_q=5)
    assert tiled_attention(Q, K, V, block_q=2, block_k=3).shape == (0, 5, 3)
    Q, K, V = qkv(2, T_q=5)
    assert torch.equal(tiled_attention(Q, K, V, block_q=np.int64(2), block_k=np.int32(3)),
                       tiled_attention(Q, K, V, block_q=2, block_k=3))


# ---------------------------------------------------------------------------------------- rows that start blocked
def _left_padded_scores(block_pad: int, T: int = 7, seed: int = 0):
    """Scaled scores (B=3, h=2, T, T) with the blocked ones set to −inf, as chapter 11's padding mask blocks them:
    row 0 has ``block_pad`` pads before its prompt, row 1 none, row 2 all but its last token padding."""
    from attnlib.attention import combine_masks, padding_mask

    is_pad = torch.zeros(3, T, dtype=torch.bool)
    is_pad[0, :block_pad], is_pad[2, :-1] = True, True
    allowed = combine_masks(padding_mask(is_pad), T, T)                   # (3, 1, T, T)
    Z = torch.randn(3, 2, T, T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return Z.masked_fill(~allowed, float("-inf")), allowed


@pytest.mark.parametrize("pads, block", [(3, 2), (4, 1), (2, 3), (5, 5)])
def test_online_softmax_of_left_padded_rows_is_finite_and_equals_softmax(pads, block):
    """A row whose first block is all −inf (pads before the prompt) used to give NaN: exp(−inf − (−inf))."""
    from attnlib import softmax

    Z, allowed = _left_padded_scores(pads)
    readable = allowed.any(-1).expand(Z.shape[:-1])                      # rows with at least one key to read
    got, want = online_softmax(Z, block), softmax(Z)
    assert not got[readable].isnan().any()
    assert (got[readable] - want[readable]).abs().max() <= 1e-15
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15, equal_nan=True)   # no key at all: NaN in both


def test_a_first_block_of_only_minus_inf_keeps_m_at_minus_inf_and_the_sum_at_zero():
    inf = float("inf")
    m, ell = torch.full((2,), -inf, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    Z_blk = torch.tensor([[-inf, -inf], [-inf, 1.5]], dtype=torch.float64)
    m_new, ell_new, rescale, P_blk = online_softmax_step(m, ell, Z_blk)
    assert m_new.tolist() == [-inf, 1.5] and ell_new.tolist() == [0.0, 1.0]
    assert not rescale.isnan().any() and P_blk.tolist() == [[0.0, 0.0], [0.0, 1.0]]
    m2, ell2, rescale2, _ = online_softmax_step(m_new, ell_new, torch.tensor([[0.5, -inf], [0.0, 2.0]],
                                                                         dtype=torch.float64))
    assert m2.tolist() == [0.5, 2.0] and rescale2[0] == 0.0
    torch.testing.assert_close(ell2, torch.tensor([1.0, math.exp(-0.5) + math.exp(-2.0) + 1.0], dtype=torch.float64))


def test_online_softmax_of_a_sliding_window_row_equals_softmax():
    from attnlib import softmax
    from attnlib.attention import sliding_window_mask

    Z = torch.randn(2, 9, 9, generator=torch.Generator().manual_seed(4)) + sliding_window_mask(9, window=3)
    for block in (1, 2, 4):
        got = online_softmax(Z, block)
        assert not got.isnan().any()
        assert (got - softmax(Z)).abs().max() <= 1e-6
