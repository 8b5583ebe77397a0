"""The library agrees with torch's own operators, with copied weights, over several shapes and dtypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib import (
    GPT,
    Block,
    FusedProjections,
    MultiHeadAttention,
    Projections,
    SingleHeadAttention,
    attention,
    causal_mask,
    merge_heads,
    softmax,
    split_heads,
)
from attnlib.reference import to_torch_layer, to_torch_mha

DTYPES = [torch.float32, torch.float64]
SHAPES = [(1, 1, 8, 1), (2, 5, 16, 4), (3, 17, 32, 8), (2, 64, 48, 6)]   # (B, T, d_model, h)


def tol(dtype):
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-10}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T,d_k,d_v", [(1, 1, 4, 4), (2, 7, 8, 8), (3, 33, 16, 5)])
def test_step_by_step_attention_equals_sdpa(B, T, d_k, d_v, dtype):
    g = torch.Generator().manual_seed(T)
    Q, K = torch.randn(2, B, T, d_k, generator=g, dtype=dtype).unbind(0)
    V = torch.randn(B, T, d_v, generator=g, dtype=dtype)
    for causal in (True, False):
        ours = attention(Q, K, V, causal=causal)
        theirs = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
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
    want, _ = ref(x, x, x, attn_mask=causal_mask(T, dtype=dtype), need_weights=False)
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
    want = ref(x, src_mask=causal_mask(T, dtype=dtype), is_causal=True)
    torch.testing.assert_close(block(x), want, **tol(dtype))


def test_fused_and_separate_projections_agree_exactly():
    torch.manual_seed(0)
    for bias in (False, True):
        sep = Projections(16, 8, 5, bias=bias)
        fused = FusedProjections.from_separate(sep)
        X = torch.randn(3, 7, 16)
        for a, b in zip(sep(X), fused(X)):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_linear_weight_is_out_by_in():
    lin = nn.Linear(16, 8, bias=False)
    x = torch.randn(4, 16)
    assert lin.weight.shape == (8, 16)
    torch.testing.assert_close(lin(x), x @ lin.weight.T)


def test_split_then_merge_is_the_identity_and_heads_are_column_slices():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])
    torch.testing.assert_close(merge_heads(heads), x)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", None])
def test_cached_generation_equals_full_recomputation(pos):
    torch.manual_seed(0)
    model = GPT(30, 32, 4, 2, max_T=40, pos=pos).eval()
    ids = torch.randint(0, 30, (2, 6))
    assert torch.equal(model.generate(ids, 12, use_cache=True), model.generate(ids, 12, use_cache=False))


def test_stack_forward_equals_a_chain_of_torch_layers():
    torch.manual_seed(3)
    model = GPT(20, 16, 2, 3, max_T=16, pos="learned").eval()
    ids = torch.randint(0, 20, (2, 9))
    X = model.embed_tokens(ids)
    for block in model.blocks:
        X = to_torch_layer(block)(X, src_mask=causal_mask(9), is_causal=True)
    torch.testing.assert_close(model(ids), model.head(model.ln_f(X)), atol=1e-5, rtol=1e-4)
