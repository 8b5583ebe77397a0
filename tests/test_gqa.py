"""Grouped-query attention (chapter 10): h_kv key/value heads shared by groups of h / h_kv query heads.

Checked against torch: SDPA with ``enable_gqa=True`` and a hand computation with ``repeat_interleave``, with
the library's own weights copied out. h_kv = h must be the old multi-head path bit for bit.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import GPT, Block, KVCache, MultiHeadAttention, split_heads
from attnlib.costs import attention_params, kv_cache_bytes
from attnlib.gpt2 import to_gpt2
from attnlib.heads import repeat_kv
from attnlib.model import GPTConfig

# (B, T, d_model, h, h_kv): MQA, GQA and MHA, with T ≠ d_head and odd T
SHAPES = [(1, 5, 16, 4, 1), (2, 7, 24, 6, 2), (2, 9, 32, 8, 4), (1, 6, 16, 4, 4), (3, 4, 12, 2, 1)]
TOL = {torch.float64: {"atol": 1e-12, "rtol": 1e-10}, torch.float32: {"atol": 1e-5, "rtol": 1e-4}}


def _layer(d_model, h, h_kv, dtype=torch.float64, seed=0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, h, h_kv=h_kv, **kw).to(dtype)


def _x(B, T, d_model, dtype=torch.float64, seed=1):
    return torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _hand_qkv(m: MultiHeadAttention, x):
    """Q (B, h, T, d_head), K and V (B, h_kv, T, d_head) from the layer's weights, by hand."""
    W, b = m.W_QKV.weight, m.W_QKV.bias
    d, d_kv = m.d_model, m.h_kv * m.d_head
    assert W.shape == (d + 2 * d_kv, d)
    Q = x @ W[:d].T + b[:d]
    K = x @ W[d:d + d_kv].T + b[d:d + d_kv]
    V = x @ W[d + d_kv:].T + b[d + d_kv:]
    return split_heads(Q, m.h), split_heads(K, m.h_kv), split_heads(V, m.h_kv)


def _merge_project(m, out):
    B, h, T, d_head = out.shape
    return out.transpose(1, 2).reshape(B, T, h * d_head) @ m.W_O.weight.T + m.W_O.bias


def _sdpa_gqa(Q, K, V):
    try:
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)
    except TypeError:   # pragma: no cover - torch older than 2.5
        pytest.skip(f"torch {torch.__version__} has no enable_gqa in scaled_dot_product_attention")


# ------------------------------------------------------------------------------------------------- repeat_kv


@pytest.mark.parametrize("n_rep", [1, 2, 3])
def test_repeat_kv_is_repeat_interleave_on_the_head_axis(n_rep):
    x = torch.randn(2, 3, 5, 4, generator=torch.Generator().manual_seed(n_rep))
    got = repeat_kv(x, n_rep)
    assert torch.equal(got, x.repeat_interleave(n_rep, dim=1))
    # heads 0, 0, 1, 1, …: query head k reads key/value head k // n_rep (not k % h_kv, as .repeat would give)
    for k in range(3 * n_rep):
        assert torch.equal(got[:, k], x[:, k // n_rep])
    if n_rep > 1:
        assert not torch.equal(got, x.repeat(1, n_rep, 1, 1))


def test_repeat_kv_rejects_bad_input():
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(torch.randn(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match=r"\(B, h_kv, T, d_head\)"):
        repeat_kv(torch.randn(2, 3, 4), 2)


# ------------------------------------------------------------------------------------- against torch, by hand


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("backend", ["sdpa", "plain"])
@pytest.mark.parametrize("B,T,d_model,h,h_kv", SHAPES)
def test_layer_equals_sdpa_enable_gqa_and_repeat_interleave(B, T, d_model, h, h_kv, backend, dtype):
    m = _layer(d_model, h, h_kv, dtype, backend=backend)
    x = _x(B, T, d_model, dtype)
    Q, K, V = _hand_qkv(m, x)
    assert K.shape == V.shape == (B, h_kv, T, d_model // h)
    with torch.no_grad():
        ours = m(x)
        by_torch_gqa = _merge_project(m, _sdpa_gqa(Q, K, V))
        n = h // h_kv
        by_repeat = _merge_project(m, F.scaled_dot_product_attention(
            Q, K.repeat_interleave(n, 1), V.repeat_interleave(n, 1), is_causal=True))
    torch.testing.assert_close(ours, by_torch_gqa, **TOL[dtype])
    torch.testing.assert_close(ours, by_repeat, **TOL[dtype])


def test_grouped_queries_equal_reshaping_Q_into_groups():
    """The other way round: Q reshaped to (B, h_kv, h/h_kv, T, d_head), each group against its own K and V."""
    m = _layer(24, 6, 2)
    x = _x(2, 7, 24)
    Q, K, V = _hand_qkv(m, x)
    B, h, T, d = Q.shape
    Qg = Q.reshape(B, 2, 3, T, d)                                  # group j = query heads 3j, 3j+1, 3j+2
    out = F.scaled_dot_product_attention(Qg, K[:, :, None], V[:, :, None], is_causal=True)
    with torch.no_grad():
        torch.testing.assert_close(m(x), _merge_project(m, out.reshape(B, h, T, d)), **TOL[torch.float64])


def test_the_last_query_group_reads_the_last_key_value_head():
    """Change only K/V head 1's weights: exactly query heads 3, 4, 5 (the second group of three) change."""
    m = _layer(24, 6, 2, backend="plain")
    x = _x(1, 5, 24)
    with torch.no_grad():
        _, P = m(x, return_weights=True)
        rows = slice(24 + 4, 24 + 8)                             # W_K's rows of key/value head 1 (d_head = 4)
        m.W_QKV.weight[rows] += 0.5
        _, P2 = m(x, return_weights=True)
    changed = [k for k in range(6) if not torch.equal(P[0, k], P2[0, k])]
    assert changed == [3, 4, 5]


@pytest.mark.parametrize("B,T,d_model,h,h_kv", SHAPES)
def test_backends_agree(B, T, d_model, h, h_kv):
    a = _layer(d_model, h, h_kv, backend="sdpa")
    b = _layer(d_model, h, h_kv, backend="plain")
    x = _x(B, T, d_model)
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x), **TOL[torch.float64])
        torch.testing.assert_close(a(x, causal=False), b(x, causal=False), **TOL[torch.float64])


# ---------------------------------------------------------------------------------- h_kv = h: nothing changed


@pytest.mark.parametrize("d_model,h", [(16, 4), (24, 3), (8, 1)])
def test_h_kv_equal_to_h_is_the_old_multi_head_path_bit_for_bit(d_model, h):
    torch.manual_seed(3)
    old_weights = torch.nn.Linear(d_model, 3 * d_model)               # what W_QKV always was
    a = _layer(d_model, h, None, torch.float32, seed=3)
    b = _layer(d_model, h, h, torch.float32, seed=3)
    assert a.W_QKV.weight.shape == (3 * d_model, d_model)
    assert torch.equal(a.W_QKV.weight, old_weights.weight) and torch.equal(a.W_QKV.bias, old_weights.bias)
    x = _x(2, 6, d_model, torch.float32)
    with torch.no_grad():
        Q, K, V = (split_heads(t, h) for t in a.W_QKV(x).chunk(3, dim=-1))   # the old split
        old = a.W_O(F.scaled_dot_product_attention(Q, K, V, is_causal=True).transpose(1, 2).reshape(2, 6, d_model))
        assert torch.equal(a(x), old) and torch.equal(b(x), old)


def test_default_gpt_is_unchanged_by_the_new_option():
    torch.manual_seed(5)
    a = GPT(GPTConfig(30, 16, 4, 2, max_T=16))
    torch.manual_seed(5)
    b = GPT(GPTConfig(30, 16, 4, 2, max_T=16, h_kv=4))
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.config.h_kv == b.config.h_kv == 4 and a.config == b.config   # None is filled in: h_kv = h


# -------------------------------------------------------------------------------------- cache and generation


@pytest.mark.parametrize("backend", ["sdpa", "plain"])
@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("h_kv", [1, 2, 4])
def test_cached_layer_equals_full_recomputation(h_kv, rope, backend):
    m = _layer(32, 4, h_kv, rope=rope, backend=backend)
    x = _x(2, 9, 32)
    cache = KVCache()
    with torch.no_grad():
        full = m(x)
        parts = [m(x[:, a:b], cache=cache) for a, b in ((0, 4), (4, 5), (5, 9))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **TOL[torch.float64])
    assert cache.K.shape == cache.V.shape == (2, h_kv, 9, 8)        # the cache keeps h_kv heads, not h


@pytest.mark.parametrize("h_kv,pos", [(1, "rope"), (2, "learned")])
def test_gpt_generates_the_same_tokens_with_and_without_cache(h_kv, pos):
    torch.manual_seed(7)
    model = GPT(GPTConfig(23, 32, 4, 2, max_T=24, pos=pos, h_kv=h_kv)).eval()
    ids = torch.randint(0, 23, (2, 5), generator=torch.Generator().manual_seed(8))
    with_cache = model.generate(ids, 8)
    assert torch.equal(with_cache, model.generate(ids, 8, use_cache=False))
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(ids, caches)
    assert all(c.K.shape == (2, h_kv, 5, 8) for c in caches)


@pytest.mark.parametrize("h,h_kv,d_head", [(4, 4, 8), (4, 2, 8), (4, 1, 8), (6, 3, 4)])
def test_measured_cache_bytes_match_the_formula(h, h_kv, d_head):
    L, T = 3, 5
    torch.manual_seed(0)
    model = GPT(GPTConfig(11, h * d_head, h, L, max_T=8, h_kv=h_kv)).to(torch.float16).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.zeros(1, T, dtype=torch.long), caches)
    measured = sum(c.K.nbytes + c.V.nbytes for c in caches)
    assert measured == T * kv_cache_bytes(L, h_kv, d_head, bytes_per_number=2)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("d_model,h,h_kv", [(16, 4, None), (16, 4, 2), (48, 12, 3), (48, 12, 1)])
def test_parameter_formula_matches_the_module(d_model, h, h_kv, bias):
    m = MultiHeadAttention(d_model, h, h_kv=h_kv, bias=bias)
    p = attention_params(d_model, h, h_kv, bias=bias)
    assert p["attention"] == sum(t.numel() for t in m.parameters())
    assert m.W_QKV.weight.shape == (d_model + 2 * (h_kv or h) * (d_model // h), d_model)
    if h_kv is None:
        assert p["attention"] == 4 * d_model ** 2 + (4 * d_model if bias else 0)


def test_block_and_config_carry_h_kv():
    block = Block(16, 4, h_kv=2)
    assert block.attn.h_kv == 2 and block.attn.W_QKV.weight.shape == (16 + 2 * 2 * 4, 16)
    model = GPT(GPTConfig(10, 16, 4, 2, h_kv=1))
    assert all(b.attn.h_kv == 1 for b in model.blocks)
    again = GPT(model.config)
    assert again.config == model.config and again.blocks[1].attn.h_kv == 1
    assert dataclasses.replace(GPTConfig(10), h_kv=2).h_kv == 2


# ------------------------------------------------------------------------------------------------ properties


@settings(max_examples=30, derandomize=True, deadline=None)
@given(seed=st.integers(0, 1000), T=st.integers(2, 9), shape=st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 2)]),
       backend=st.sampled_from(["sdpa", "plain"]), data=st.data())
def test_changing_a_future_position_never_changes_an_earlier_output(seed, T, shape, backend, data):
    h, h_kv = shape
    m = _layer(2 * h, h, h_kv, seed=seed, backend=backend)
    x = _x(1, T, 2 * h, seed=seed)
    i = data.draw(st.integers(1, T - 1), label="changed position")
    y = x.clone()
    y[:, i] += torch.randn(2 * h, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        a, b = m(x), m(y)
    assert torch.equal(a[:, :i], b[:, :i])
    assert not torch.equal(a[:, i:], b[:, i:])


# ------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("h_kv,fragments", [
    (3, ["h=8", "h_kv=3", "divisible"]),
    (0, ["h_kv", "positive", "0"]),
    (-2, ["h_kv", "positive", "-2"]),
    (16, ["h_kv=16", "h=8"]),
])
def test_bad_h_kv_is_rejected_naming_both_numbers(h_kv, fragments):
    for build in (lambda: MultiHeadAttention(32, 8, h_kv=h_kv), lambda: Block(32, 8, h_kv=h_kv),
                  lambda: GPT(GPTConfig(10, 32, 8, 1, h_kv=h_kv)), lambda: attention_params(32, 8, h_kv)):
        with pytest.raises(ValueError) as e:
            build()
        for f in fragments:
            assert f in str(e.value), (f, str(e.value))


@pytest.mark.parametrize("h_kv", [2.0, "2", True])
def test_h_kv_must_be_an_integer(h_kv):
    with pytest.raises(TypeError, match="h_kv must be a positive integer"):
        MultiHeadAttention(32, 8, h_kv=h_kv)


def test_a_cache_with_the_wrong_head_count_is_rejected_naming_both():
    mha = _layer(16, 4, 4)
    cache = KVCache()
    with torch.no_grad():
        mha(_x(1, 3, 16), cache=cache)                              # holds 4 heads
    gqa = _layer(16, 4, 2)
    with pytest.raises(ValueError) as e:
        gqa(_x(1, 1, 16), cache=cache)
    message = str(e.value)
    for f in ("cache.K", "holds 4 key/value heads", "h_kv=2", "h=4", "(1, 4, 3, 4)"):
        assert f in message, (f, message)


def test_gpt_caches_with_the_wrong_head_count_are_rejected():
    model = GPT(GPTConfig(10, 16, 4, 2, h_kv=1))
    full = GPT(GPTConfig(10, 16, 4, 2))
    caches = [KVCache() for _ in full.blocks]
    ids = torch.zeros(1, 3, dtype=torch.long)
    with torch.no_grad():
        full(ids, caches)
    with pytest.raises(ValueError) as e:
        model(ids[:, :1], caches)
    assert "caches[0]" in str(e.value) and "h_kv=1" in str(e.value) and "holds 4" in str(e.value)


def test_gpt2_has_no_grouped_query_attention():
    model = GPT(GPTConfig(10, 16, 4, 1, max_T=8, h_kv=2))
    with pytest.raises(ValueError, match=r"h_kv=2.*h=4"):
        to_gpt2(model)


@pytest.mark.parametrize("kwargs,error", [
    (dict(L=0, h_kv=1, d_head=4), ValueError), (dict(L=2, h_kv=1, d_head=4, bytes_per_number=0), ValueError),
    (dict(L=2, h_kv=1.5, d_head=4), TypeError),
])
def test_kv_cache_bytes_rejects_bad_sizes(kwargs, error):
    with pytest.raises(error):
        kv_cache_bytes(**kwargs)


def test_kv_cache_bytes_by_hand():
    # Llama-2-7B-like: L = 32, h = 32, d_head = 128, 16-bit numbers → 512 KiB per token; h_kv = 8 → 128 KiB
    assert kv_cache_bytes(32, 32, 128) == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert kv_cache_bytes(32, 8, 128) == 128 * 1024
    assert kv_cache_bytes(12, 12, 64, bytes_per_number=4) == 2 * 12 * 12 * 64 * 4
