"""Decisions about the library's input boundary that a fuzz cannot state: conventions, bounds, empty batches.

test_fuzz.py checks that wrong inputs fail clearly and legitimate variants keep their result; this file fixes
what "legitimate" and "right" mean where a choice was made.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from attnlib import GPT, Block, MultiHeadAttention, ToyTokenizer, attention, causal_mask
from attnlib.costs import ops_called

# ---------------------------------------------------------------------------------------------- the mask


@pytest.mark.parametrize("T_q, T_k", [(1, 1), (4, 4), (3, 7), (1, 5), (6, 6)])
def test_a_boolean_causal_mask_means_may_attend_as_sdpa_reads_it(T_q, T_k):
    allowed = causal_mask(T_q, T_k, dtype=torch.bool)
    i, j = torch.arange(T_q)[:, None], torch.arange(T_k)[None, :]
    assert torch.equal(allowed, j <= i + (T_k - T_q))          # True on and below the (shifted) diagonal
    assert torch.equal(allowed, causal_mask(T_q, T_k) == 0)     # the same positions as the float mask M lets through
    g = torch.Generator().manual_seed(T_q * 10 + T_k)
    Q, K, V = (torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (T_q, T_k, T_k))
    with_bool = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    torch.testing.assert_close(with_bool, F.scaled_dot_product_attention(Q, K, V, attn_mask=causal_mask(
        T_q, T_k, dtype=torch.float64)))
    torch.testing.assert_close(with_bool, attention(Q, K, V))
    if T_q == T_k:
        torch.testing.assert_close(with_bool, F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_the_boolean_convention_is_named_in_the_docstring():
    doc = inspect.getdoc(causal_mask)
    assert "torch.bool" in doc and "may attend" in doc and "scaled_dot_product_attention" in doc


def _nan_at_key(where, j, T=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, T, 8, generator=g, dtype=dtype) for _ in range(3))
    {"K": K, "V": V}[where][0, j] = float("nan")
    return Q, K, V


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", ["K", "V"])
@pytest.mark.parametrize("j", [0, 2, 4])
def test_nan_is_not_rejected_and_reaches_every_query_that_may_read_its_key(where, j, dtype):
    """Decided: no finiteness scan at the boundary. A NaN in K or V at key j reaches every query i >= j.

    This is the library's own promise, and it is not compared with SDPA: what torch's fused kernels make of a NaN
    has changed between releases (2.14 returns zeros for a query whose only key is NaN; 2.15 leaves the queries
    that may not read the key finite), and the library promises its math, not one release's behaviour.
    """
    Q, K, V = _nan_at_key(where, j, dtype=dtype)
    reads_j = torch.arange(5) >= j                          # query i may read key j
    ours = attention(Q, K, V)                                # no error: nothing is scanned
    assert ours[0, reads_j].isnan().all()
    with_mask = attention(Q, K, V, mask=torch.ones(5, 5, dtype=torch.bool))
    assert with_mask[0, reads_j].isnan().all()
    assert "NaN" in inspect.getdoc(attention)


def test_a_nan_key_in_the_future_spreads_through_the_added_mask_and_is_dropped_by_mask():
    """The library's own math for the queries that may not read the NaN key (documented in attention()).

    Without ``mask`` the causal mask is *added*: NaN + (−inf) is NaN, so every row of weights becomes NaN.
    With ``mask`` the blocked scores are overwritten with −inf, so the earlier queries never see the NaN and
    give what they give with that key replaced by any finite one.
    """
    Q, K, V = _nan_at_key("K", 3)
    out, P = attention(Q, K, V, return_weights=True)
    assert P.isnan().all() and out.isnan().all()
    allowed = torch.ones(5, 5, dtype=torch.bool)
    out_m, P_m = attention(Q, K, V, mask=allowed, return_weights=True)
    assert not P_m[0, :3].isnan().any() and P_m[0, 3:].isnan().all()
    K_finite = K.nan_to_num(nan=0.5)
    torch.testing.assert_close(out_m[0, :3], attention(Q, K_finite, V, mask=allowed)[0, :3])


def test_a_nan_value_gets_weight_exactly_zero_from_the_queries_that_may_not_read_it():
    """The weights of a query never touch a future V row: P[i, j] is exactly 0 for j > i, whatever V holds.

    (Whether P @ V then turns 0 · NaN into NaN is up to the matrix-product kernel, so it is not promised.)
    """
    Q, K, V = _nan_at_key("V", 3)
    out, P = attention(Q, K, V, return_weights=True)
    assert torch.equal(P[0, :3, 3], torch.zeros(3, dtype=P.dtype)) and not P.isnan().any()
    assert out[0, 3:].isnan().all()


# ---------------------------------------------------------------------------------------------- empty batches


def test_an_empty_batch_works_in_every_module_and_gives_an_empty_batch():
    torch.manual_seed(0)
    x = torch.randn(0, 5, 8)
    assert MultiHeadAttention(8, 2)(x).shape == (0, 5, 8)
    assert Block(8, 2)(x).shape == (0, 5, 8)
    model = GPT(11, 8, 2, 1, max_T=8).eval()
    ids = torch.zeros(0, 5, dtype=torch.long)
    assert model(ids).shape == (0, 5, 11)
    assert model.generate(ids, 3).shape == (0, 8)
    assert model.generate(ids, 3, temperature=1.0, generator=torch.Generator()).shape == (0, 8)


def test_the_loss_of_nothing_is_an_error_not_nan():
    model = GPT(11, 8, 2, 1, max_T=8)
    ids = torch.zeros(0, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="at least one target"):
        model.loss(ids, ids)
    ids = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="at least one target"):
        model.loss(ids, torch.full_like(ids, -100))


def test_ignored_targets_are_skipped():
    torch.manual_seed(0)
    model = GPT(11, 8, 2, 1, max_T=8).eval()
    ids, targets = torch.tensor([[1, 2, 3]]), torch.tensor([[-100, 4, -100]])
    want = F.cross_entropy(model(ids)[0, 1:2], torch.tensor([4]))
    torch.testing.assert_close(model.loss(ids, targets), want)


# ---------------------------------------------------------------------------------------------- generation


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
def test_generate_fills_the_context_exactly(pos):
    """The last new token is returned, never fed back: a prompt of T and n_new = max_T - T + 1 fits."""
    torch.manual_seed(0)
    model = GPT(11, 8, 2, 2, max_T=6, pos=pos).eval()
    ids = torch.tensor([[1, 2]])
    cached, recomputed = model.generate(ids, 5), model.generate(ids, 5, use_cache=False)
    assert cached.shape == (1, 7) and torch.equal(cached, recomputed)
    with pytest.raises(ValueError, match="max_T=6"):
        model.generate(ids, 6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sampling_at_a_tiny_temperature_is_greedy(dtype):
    torch.manual_seed(0)
    model = GPT(13, 16, 2, 1, max_T=16).to(dtype).eval()
    ids = torch.tensor([[1, 2, 3]])
    sampled = model.generate(ids, 6, temperature=1e-6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, model.generate(ids, 6))


@pytest.mark.parametrize("temperature", [-1.0, float("nan"), float("inf"), "hot"])
def test_a_temperature_that_is_no_temperature_is_rejected(temperature):
    model = GPT(11, 8, 2, 1, max_T=8)
    with pytest.raises((ValueError, TypeError), match="temperature"):
        model.generate(torch.tensor([[1]]), 2, temperature=temperature)


# ---------------------------------------------------------------------------------------------- text and costs


def test_decode_drops_only_the_space_that_encode_added():
    tok = ToyTokenizer()
    assert tok.decode(tok.encode("the cat")) == "the cat"
    suffix = tok.id_of["s"]
    assert tok.decode([suffix]) == "s"            # a continuation piece keeps its first character
    assert tok.decode([]) == ""


def test_ops_called_takes_one_pattern_as_a_whole_word():
    x = torch.randn(4, 4)
    assert ops_called(lambda: x @ x, match="mm") == ops_called(lambda: x @ x, match=("mm",)) == ["mm"]
    assert ops_called(lambda: x @ x, match="am") == []     # not the letters 'a' and 'm' one by one
