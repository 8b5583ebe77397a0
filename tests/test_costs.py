"""The cost formulas of attnlib.costs agree with what torch counts and with the tensors the library makes."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attnlib import GPT, Block, FusedProjections, GPTConfig, MultiHeadAttention, Projections, attention, softmax
from attnlib.costs import (
    activation_elements,
    attention_flops,
    block_flops,
    block_params,
    count_flops,
    count_ops,
    elementwise_ops,
    model_flops,
    model_params,
    ops_called,
    peak_memory,
    time_fn,
    time_interleaved,
)

SHAPES = [(1, 5, 16, 4), (2, 16, 32, 4), (3, 9, 24, 3)]


@pytest.mark.parametrize("B, T, d_model, h", SHAPES)
def test_attention_flops_match_torch_flop_counter(B, T, d_model, h):
    torch.manual_seed(0)
    x = torch.randn(B, T, d_model)
    mha = MultiHeadAttention(d_model, h, backend="plain")
    f = attention_flops(B, T, d_model, h)
    assert count_flops(lambda: mha(x)) == sum(f.values())
    assert count_flops(lambda: mha.W_QKV(x)) == f["qkv"]
    Q, K, V = mha.qkv(x)
    assert count_flops(lambda: Q @ K.transpose(-2, -1)) == f["scores"]
    assert count_flops(lambda: mha.W_O(x)) == f["W_O"]


@pytest.mark.parametrize("B, T, d_model, h", SHAPES)
def test_sdpa_math_backend_is_counted_as_the_two_full_products(B, T, d_model, h):
    torch.manual_seed(0)
    x = torch.randn(B, T, d_model)
    mha = MultiHeadAttention(d_model, h, backend="sdpa")
    with sdpa_kernel(SDPBackend.MATH):
        assert count_flops(lambda: mha(x)) == sum(attention_flops(B, T, d_model, h).values())


@pytest.mark.parametrize("d_ff", [None, 24])
def test_block_flops_match_torch_flop_counter(d_ff):
    B, T, d_model, h = 2, 7, 16, 4
    block = Block(d_model, h, d_ff, backend="plain")
    x = torch.randn(B, T, d_model)
    f = block_flops(B, T, d_model, h, d_ff)
    assert count_flops(lambda: block(x)) == f["block"]
    assert count_flops(lambda: block.mlp(x)) == f["mlp"]


def test_model_flops_forward_and_backward_match_torch_flop_counter():
    B, T, d_model, h, L, V = 2, 8, 16, 2, 3, 11
    torch.manual_seed(0)
    model = GPT(GPTConfig(V, d_model, h, L, max_T=T, backend="plain"))
    ids = torch.randint(0, V, (B, T))
    assert count_flops(lambda: model(ids)) == model_flops(B, T, d_model, h, L, V)["model"]
    assert count_flops(lambda: model.loss(ids, ids).backward()) == model_flops(B, T, d_model, h, L, V,
                                                                               backward=True)["model"]


@pytest.mark.parametrize("pos", ["learned", "rope", None])
def test_parameter_formulas_match_the_modules(pos):
    model = GPT(GPTConfig(13, 16, 4, 2, d_ff=20, max_T=10, pos=pos))
    p = model_params(13, 16, 2, 10, d_ff=20, pos=pos)
    assert sum(t.numel() for t in model.parameters()) == p["model"]
    assert sum(t.numel() for t in model.blocks[0].parameters()) == block_params(16, 20)["block"]
    mha = model.blocks[0].attn
    assert mha.W_QKV.weight.numel() + mha.W_QKV.bias.numel() == block_params(16, 20)["qkv"]


def test_activation_formulas_match_tensor_sizes():
    B, T, d_model, h = 2, 6, 16, 4
    mha = MultiHeadAttention(d_model, h)
    x = torch.randn(B, T, d_model)
    a = activation_elements(B, T, d_model, h)
    _, P = mha(x, return_weights=True)
    assert P.numel() == a["weights"] == a["scores"]
    assert sum(t.numel() for t in mha.qkv(x)) == a["qkv"]
    assert mha(x).numel() == a["W_O"] == a["X"]
    assert Block(d_model, h).mlp.W_1(x).numel() == a["mlp_hidden"]
    model = GPT(GPTConfig(7, d_model, h, L=1, max_T=T + 1))
    from attnlib import KVCache
    cache = KVCache()
    model(torch.zeros(B, T, dtype=torch.long), [cache])
    assert cache.K.numel() + cache.V.numel() == a["kv_cache"]


class ElementWork(TorchDispatchMode):
    """An independent count of elementwise work: for every arithmetic operator (pointwise or reduction, not a copy
    or a view), the number of elements of its largest input or output, grouped by what that tensor is."""

    def __init__(self, n_scores: int):
        super().__init__()
        self.n_scores = n_scores
        self.work = {"scores": 0, "gelu": 0, "layer_norm": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        largest = max((t.numel() for t in tensors), default=0)
        if name == "gelu":
            self.work["gelu"] += largest
        elif name == "native_layer_norm":
            self.work["layer_norm"] += largest
        elif ((torch.Tag.pointwise in func.tags or torch.Tag.reduction in func.tags)
              and name not in ("clone", "copy_") and largest == self.n_scores):
            self.work["scores"] += largest               # scale, mask, and each step of the book's softmax
        return out


@pytest.mark.parametrize("B, T, d_model, h, d_ff", [(2, 7, 16, 4, 24), (1, 10, 16, 2, None), (3, 5, 12, 6, 20)])
def test_elementwise_ops_match_the_elements_the_block_touches(B, T, d_model, h, d_ff):
    """elementwise_ops against what a plain Block really runs: one operation per score for the scale, the mask and
    each of the softmax's max, subtract, exp, sum and divide; GELU and LayerNorm at the documented 8 per element."""
    torch.manual_seed(0)
    e = elementwise_ops(B, T, d_model, h, d_ff)
    counter = ElementWork(n_scores=B * h * T * T)
    with torch.no_grad(), counter:
        Block(d_model, h, d_ff, backend="plain")(torch.randn(B, T, d_model))
    assert counter.work["scores"] == e["scale_mask"] + e["softmax"]
    assert e["gelu"] == 8 * counter.work["gelu"] and counter.work["gelu"] > 0
    assert e["layernorms"] == 8 * counter.work["layer_norm"] and counter.work["layer_norm"] > 0
    softmax_only = ElementWork(n_scores=B * h * T * T)
    with softmax_only:
        softmax(torch.randn(B, h, T, T))
    assert softmax_only.work["scores"] == e["softmax"]


def test_elementwise_work_is_quadratic_in_T_for_scores_only():
    work = {}
    for T in (10, 20):
        counter = ElementWork(n_scores=4 * T * T)
        with torch.no_grad(), counter:
            Block(16, 4, backend="plain")(torch.randn(1, T, 16))
        work[T] = counter.work
    assert work[20]["scores"] == 4 * work[10]["scores"]
    assert work[20]["gelu"] == 2 * work[10]["gelu"] and work[20]["layer_norm"] == 2 * work[10]["layer_norm"]


@pytest.mark.parametrize("backend", ["plain", "sdpa"])
def test_measured_flops_do_not_depend_on_the_number_of_heads(backend):
    """h heads of d_model / h columns do the work of one head of d_model columns: measured, not assumed."""
    B, T, d_model = 2, 8, 16
    x = torch.randn(B, T, d_model)
    counts = {}
    for h in (1, 4, 16):
        mha = MultiHeadAttention(d_model, h, backend=backend)
        with sdpa_kernel(SDPBackend.MATH):
            counts[h] = count_flops(lambda m=mha: m(x))
    assert counts[1] == counts[4] == counts[16] == sum(attention_flops(B, T, d_model, 4).values())
    assert counts[1] != count_flops(lambda: MultiHeadAttention(d_model, 4, backend=backend)(x[:, :T // 2]))


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="not divisible"):
        attention_flops(1, 4, 10, 3)
    with pytest.raises(ValueError, match="T must be a positive integer"):
        attention_flops(1, 0, 8, 2)


def test_peak_memory_counts_new_tensors_only():
    x = torch.randn(256, 256)
    assert peak_memory(lambda: x.t()) == 0                   # a view allocates nothing
    assert peak_memory(lambda: x + 1) == x.numel() * 4       # one new float32 result
    assert peak_memory(lambda: (x + 1) * 2) == 2 * x.numel() * 4   # two alive at the same time, briefly


def test_plain_attention_peak_memory_grows_like_T_squared_and_sdpa_does_not():
    torch.manual_seed(0)
    d_model, h = 16, 4
    peaks = {}
    for backend in ("plain", "sdpa"):
        mha = MultiHeadAttention(d_model, h, backend=backend)
        for T in (64, 128):
            x = torch.randn(1, T, d_model)
            with torch.no_grad():
                peaks[backend, T] = peak_memory(lambda m=mha, x=x: m(x))
    weights_bytes = activation_elements(1, 128, d_model, h)["weights"] * 4
    assert peaks["plain", 128] >= weights_bytes
    assert peaks["plain", 128] / peaks["plain", 64] > 3.5
    assert peaks["sdpa", 128] / peaks["sdpa", 64] < 2.5
    assert peaks["sdpa", 128] < weights_bytes


def test_timers_return_one_positive_time_per_repeat():
    t = time_fn(lambda: torch.ones(10).sum(), repeat=3, warmup=1)
    assert len(t) == 3 and all(s > 0 for s in t)
    ts = time_interleaved({"a": lambda: None, "b": lambda: None}, repeat=4)
    assert set(ts) == {"a", "b"} and all(len(v) == 4 for v in ts.values())


def test_ops_called_names_the_attention_kernel():
    x = torch.randn(1, 8, 16)
    with torch.no_grad():
        assert any("scaled_dot_product" in op for op in ops_called(lambda: MultiHeadAttention(16, 4)(x)))
        assert ops_called(lambda: MultiHeadAttention(16, 4, backend="plain")(x)) == []
        assert "bmm" in ops_called(lambda: MultiHeadAttention(16, 4, backend="plain")(x), match=("mm",))


def test_count_ops_counts_every_operator_call():
    x = torch.randn(4, 4)
    assert count_ops(lambda: x @ x) == 1
    assert count_ops(lambda: (x @ x) @ x) == 2
    assert count_ops(lambda: None) == 0
    q = torch.randn(1, 1, 256, 64)   # large enough for torch's fused CPU kernel: one operator
    assert count_ops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)) == 1
    assert count_ops(lambda: attention(q, q, q)) > 10       # the book's step-by-step path


@pytest.mark.parametrize("bias", [True, False])
def test_count_ops_with_a_match_counts_only_those_operators(bias):
    """Chapter 2 counts the matrix products of three projections against one fused projection."""
    x = torch.randn(2, 6, 16)
    three = Projections(16, 8, bias=bias)
    fused = FusedProjections.from_separate(three)
    assert count_ops(lambda: three(x), match="mm") == 3
    assert count_ops(lambda: fused(x), match=("mm",)) == 1
    assert count_ops(lambda: fused(x), match="mm") < count_ops(lambda: fused(x))
    assert count_ops(lambda: x + 1, match="mm") == 0
    with pytest.raises(TypeError, match="match"):
        count_ops(lambda: None, match=5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("d_ff", [None, 20])
def test_block_params_count_the_parameters_of_the_block_with_and_without_biases(bias, d_ff):
    """block_params(bias=False) once still counted the MLP's biases and the LayerNorms' shifts."""
    block = Block(16, 4, d_ff, bias=bias)
    p = block_params(16, d_ff, bias=bias)
    assert p["block"] == sum(t.numel() for t in block.parameters())
    assert p["qkv"] == sum(t.numel() for t in block.attn.W_QKV.parameters())
    assert p["W_O"] == sum(t.numel() for t in block.attn.W_O.parameters())
    assert p["mlp"] == sum(t.numel() for t in block.mlp.parameters())
    assert p["layernorms"] == sum(t.numel() for ln in (block.ln_1, block.ln_2) for t in ln.parameters())
    from attnlib.costs import attention_params
    assert attention_params(16, 4, bias=bias)["attention"] == sum(t.numel() for t in block.attn.parameters())
