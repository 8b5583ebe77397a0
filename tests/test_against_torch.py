"""The library agrees with torch's own operators, with copied weights, over several shapes and dtypes.

float64 and float32 agree to rounding; float16 and bfloat16 (CPU kernels) agree within a few units of the
dtype's machine epsilon. RoPE is checked against an independent formulation (complex multiplication).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib import (
    GPT,
    Block,
    FusedProjections,
    GPTConfig,
    KVCache,
    MultiHeadAttention,
    Projections,
    SingleHeadAttention,
    apply_rope,
    attention,
    causal_mask,
    merge_heads,
    rope_angles,
    softmax,
    split_heads,
)
from attnlib.reference import to_torch_layer, to_torch_mha

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SHAPES = [(1, 1, 8, 1), (2, 5, 16, 4), (3, 17, 32, 8), (2, 64, 48, 6)]   # (B, T, d_model, h)


def tol(dtype):
    """Tolerances per dtype. For the half types: a few units of machine epsilon (fp16 ≈ 9.8e-4, bf16 ≈ 7.8e-3),
    absolute and relative, since two correct implementations round differently at every step."""
    if dtype == torch.float64:
        return {"atol": 1e-12, "rtol": 1e-10}
    if dtype == torch.float32:
        return {"atol": 1e-5, "rtol": 1e-4}
    eps = torch.finfo(dtype).eps
    return {"atol": 4 * eps, "rtol": 4 * eps}


def cpu_can(dtype, what, fn):
    """Run ``fn()``; if CPU torch has no kernel for ``dtype`` there, skip with the reason instead of failing."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented for" in str(e) or "Could not run" in str(e):
            pytest.skip(f"CPU torch {torch.__version__} cannot run {what} in {dtype}: {str(e).splitlines()[0]}")
        raise


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,d_k,d_v", [(1, 1, 4, 4), (2, 7, 8, 8), (3, 33, 16, 5)])
def test_step_by_step_attention_equals_sdpa(B, T, d_k, d_v, dtype):
    g = torch.Generator().manual_seed(T)
    Q, K = torch.randn(2, B, T, d_k, generator=g, dtype=dtype).unbind(0)
    V = torch.randn(B, T, d_v, generator=g, dtype=dtype)
    for causal in (True, False):
        ours = attention(Q, K, V, causal=causal)
        theirs = cpu_can(dtype, "scaled_dot_product_attention",
                         lambda c=causal: F.scaled_dot_product_attention(Q, K, V, is_causal=c))
        torch.testing.assert_close(ours, theirs, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_head_module_equals_sdpa_with_its_own_projections(dtype):
    torch.manual_seed(0)
    head = SingleHeadAttention(16, 8, 6).to(dtype)
    X = torch.randn(2, 9, 16, dtype=dtype)
    Q, K, V = X @ head.proj.W_Q, X @ head.proj.W_K, X @ head.proj.W_V
    torch.testing.assert_close(head(X), F.scaled_dot_product_attention(Q, K, V, is_causal=True), **tol(dtype))


def test_softmax_equals_torch_softmax_even_on_huge_scores():
    S = torch.tensor([[1000.0, 999.0, -5.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(softmax(S), torch.softmax(S, -1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,d_model,h", SHAPES)
@pytest.mark.parametrize("backend", ["sdpa", "plain"])
def test_multi_head_equals_torch_multihead_attention(B, T, d_model, h, backend, dtype):
    torch.manual_seed(T)
    mha = MultiHeadAttention(d_model, h, backend=backend).to(dtype)
    with torch.no_grad():   # non-zero biases, so a bias bug would show
        mha.W_QKV.bias.normal_()
        mha.W_O.bias.normal_()
    x = torch.randn(B, T, d_model, dtype=dtype)
    ref = to_torch_mha(mha)
    want, _ = cpu_can(dtype, "nn.MultiheadAttention",
                      lambda: ref(x, x, x, attn_mask=causal_mask(T, dtype=dtype), need_weights=False))
    torch.testing.assert_close(mha(x), want, **tol(dtype))
    want_full, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(mha(x, causal=False), want_full, **tol(dtype))


def test_returned_weights_equal_torch_per_head_weights():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(2, 6, 16)
    _, P = mha(x, return_weights=True)
    _, P_ref = to_torch_mha(mha)(x, x, x, attn_mask=causal_mask(6), average_attn_weights=False)
    torch.testing.assert_close(P, P_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,d_model,h", SHAPES)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_equals_torch_transformer_encoder_layer(B, T, d_model, h, norm, dtype):
    torch.manual_seed(T + d_model)
    block = Block(d_model, h, 3 * d_model, norm=norm).to(dtype)
    with torch.no_grad():
        for ln in (block.ln_1, block.ln_2):   # not the identity initialisation
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.normal_()
    x = torch.randn(B, T, d_model, dtype=dtype)
    ref = to_torch_layer(block)
    assert ref.norm_first == (norm == "pre")
    want = cpu_can(dtype, "nn.TransformerEncoderLayer",
                   lambda: ref(x, src_mask=causal_mask(T, dtype=dtype), is_causal=True))
    torch.testing.assert_close(block(x), want, **tol(dtype))


@pytest.mark.parametrize("options", [dict(gelu="tanh", eps=1e-6), dict(bias=False), dict(bias=False, gelu="tanh")],
                         ids=["tanh-gelu-eps", "no-bias", "no-bias-tanh"])
def test_gpt2_style_block_options_equal_torch_transformer_encoder_layer(options):
    """The options GPT-2 needs (tanh GELU, ε, no biases) are carried over to torch's layer and agree with it."""
    torch.manual_seed(7)
    block = Block(16, 4, **options).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    want = to_torch_layer(block)(x, src_mask=causal_mask(5, dtype=torch.float64), is_causal=True)
    torch.testing.assert_close(block(x), want, rtol=1e-12, atol=1e-12)
    plain = Block(16, 4).double()                      # the default layer is a different function
    plain.load_state_dict(block.state_dict(), strict=False)
    if options.get("gelu") == "tanh":
        assert not torch.allclose(to_torch_layer(plain)(x, src_mask=causal_mask(5, dtype=torch.float64),
                                                        is_causal=True), want, rtol=0, atol=1e-9)


def test_fused_and_separate_projections_agree_exactly():
    torch.manual_seed(0)
    for bias in (False, True):
        sep = Projections(16, 8, 5, bias=bias)
        fused = FusedProjections.from_separate(sep)
        X = torch.randn(3, 7, 16)
        for a, b in zip(sep(X), fused(X)):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_split_then_merge_is_the_identity_and_heads_are_column_slices():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])
    torch.testing.assert_close(merge_heads(heads), x)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", None])
def test_cached_generation_equals_full_recomputation(pos):
    torch.manual_seed(0)
    model = GPT(GPTConfig(30, 32, 4, 2, max_T=40, pos=pos)).eval()
    ids = torch.randint(0, 30, (2, 6))
    assert torch.equal(model.generate(ids, 12, use_cache=True), model.generate(ids, 12, use_cache=False))


def test_stack_forward_equals_a_chain_of_torch_layers():
    torch.manual_seed(3)
    model = GPT(GPTConfig(20, 16, 2, 3, max_T=16, pos="learned")).eval()
    ids = torch.randint(0, 20, (2, 9))
    X = model.embed_tokens(ids)
    for block in model.blocks:
        X = to_torch_layer(block)(X, src_mask=causal_mask(9), is_causal=True)
    torch.testing.assert_close(model(ids), model.head(model.ln_f(X)), atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# Cached queries: T_q new positions attend to all T_k ≥ T_q positions (the last T_q of them are the queries')
# ----------------------------------------------------------------------------------------------------------------

def may_attend(T_q: int, T_k: int) -> torch.Tensor:
    """SDPA's boolean mask (True = may attend): query i sits at absolute position T_k − T_q + i."""
    return torch.arange(T_k)[None, :] <= (T_k - T_q + torch.arange(T_q))[:, None]


CACHED = [(1, 1, 6, 4, 4), (2, 3, 8, 8, 5), (2, 5, 5, 8, 8), (3, 7, 20, 16, 16)]   # (B, T_q, T_k, d_k, d_v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T_q,T_k,d_k,d_v", CACHED)
def test_cached_queries_equal_sdpa_with_an_explicit_boolean_mask(B, T_q, T_k, d_k, d_v, dtype):
    g = torch.Generator().manual_seed(T_q * 100 + T_k)
    Q = torch.randn(B, T_q, d_k, generator=g).to(dtype)
    K = torch.randn(B, T_k, d_k, generator=g).to(dtype)
    V = torch.randn(B, T_k, d_v, generator=g).to(dtype)
    theirs = cpu_can(dtype, "scaled_dot_product_attention with a boolean mask",
                     lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=may_attend(T_q, T_k)))
    torch.testing.assert_close(attention(Q, K, V), theirs, **tol(dtype))
    if T_q < T_k:   # control: SDPA's is_causal aligns the mask top-left, which is not the cached case
        top_left = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
        assert not torch.allclose(top_left.double(), theirs.double(), **tol(dtype))


@pytest.mark.parametrize("backend", ["sdpa", "plain"])
@pytest.mark.parametrize("B,T_q,T_k", [(1, 1, 6), (2, 3, 8), (2, 4, 9)])
def test_multi_head_with_a_kv_cache_equals_sdpa_with_an_explicit_boolean_mask(B, T_q, T_k, backend):
    torch.manual_seed(T_k)
    mha = MultiHeadAttention(16, 4, backend=backend).double()
    x = torch.randn(B, T_k, 16, dtype=torch.float64)
    cache = KVCache()
    mha(x[:, :T_k - T_q], cache=cache)                       # the past, cached
    ours = mha(x[:, T_k - T_q:], cache=cache)                # only the T_q new positions
    Q, K, V = (split_heads(t, 4) for t in mha.W_QKV(x).chunk(3, dim=-1))
    theirs = F.scaled_dot_product_attention(Q[..., T_k - T_q:, :], K, V, attn_mask=may_attend(T_q, T_k))
    torch.testing.assert_close(ours, mha.W_O(merge_heads(theirs)), **tol(torch.float64))
    assert len(cache) == T_k


# ----------------------------------------------------------------------------------------------------------------
# RoPE against an independent formulation: each pair (x[2k], x[2k+1]) is the complex number x[2k] + i·x[2k+1],
# multiplied by e^{i·t·θ_k} with θ_k = base^(−2k/d)
# ----------------------------------------------------------------------------------------------------------------

def rope_by_complex_numbers(x: torch.Tensor, offset: int = 0, base: float = 10000.0,
                            exponent=lambda k, d: -2 * k / d) -> torch.Tensor:
    *_, T, d = x.shape
    theta = torch.tensor([base ** exponent(k, d) for k in range(d // 2)], dtype=torch.float64)
    t = torch.arange(offset, offset + T, dtype=torch.float64)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones(T, d // 2, dtype=torch.float64), t[:, None] * theta)
    return torch.view_as_real(rotated).reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T,d,offset", [(1, 2, 0), (7, 8, 0), (50, 16, 0), (5, 64, 37), (3, 6, 1000)])
def test_rope_is_complex_multiplication_of_consecutive_pairs(T, d, offset, dtype):
    x = torch.randn(2, 3, T, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    want = rope_by_complex_numbers(x, offset)
    torch.testing.assert_close(apply_rope(x.to(dtype), offset).double(), want, **tol(dtype))
    k = torch.arange(d // 2, dtype=torch.float64)
    t = torch.arange(offset, offset + T, dtype=torch.float64)
    torch.testing.assert_close(rope_angles(T, d, offset), t[:, None] * 10000.0 ** (-2 * k / d))


def test_rope_is_not_the_identity_and_its_schedule_is_told_apart():
    """Controls: the rotation moves every vector after position 0, and another frequency schedule (θ_k = base^(−k/d))
    or another pairing (first half with second half) would fail the comparison above."""
    T, d = 12, 16
    x = torch.randn(T, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rotated = apply_rope(x)
    torch.testing.assert_close(rotated[0], x[0])                          # position 0: angle 0
    assert all(not torch.allclose(rotated[t], x[t]) for t in range(1, T))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))      # a rotation keeps lengths
    other_schedule = rope_by_complex_numbers(x, exponent=lambda k, d: -k / d)
    assert not torch.allclose(rotated, other_schedule)
    half = torch.cat([x[:, 0::2], x[:, 1::2]], dim=-1)                    # pairs (k, k + d/2) instead
    other_pairing = rope_by_complex_numbers(half)
    other_pairing = torch.stack([other_pairing[:, 0::2], other_pairing[:, 1::2]], dim=-1).reshape(T, d)
    assert not torch.allclose(rotated, other_pairing)
    slowest = 10000.0 ** (-2 * (d // 2 - 1) / d)                          # the last pair turns slowest
    assert math.isclose(rope_angles(2, d)[1, -1].item(), slowest)


def test_multi_head_rope_rotates_each_heads_q_and_k_by_its_d_head_schedule():
    torch.manual_seed(0)
    d_model, h, T = 16, 2, 9
    rope = MultiHeadAttention(d_model, h, rope=True).double()
    x = torch.randn(1, T, d_model, dtype=torch.float64)
    Q, K, V = rope.qkv(x)
    Q0, K0, V0 = (split_heads(t, h) for t in rope.W_QKV(x).chunk(3, dim=-1))
    torch.testing.assert_close(Q, rope_by_complex_numbers(Q0))           # d = d_head = 8, not d_model
    torch.testing.assert_close(K, rope_by_complex_numbers(K0))
    torch.testing.assert_close(V, V0)                                     # values are not rotated
    Q3, _, _ = rope.qkv(x[:, :3], offset=T - 3)
    torch.testing.assert_close(Q3, rope_by_complex_numbers(Q0[..., :3, :], offset=T - 3))
