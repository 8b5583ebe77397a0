"""torch's own modules with weights copied from ours, so the library can be checked against code
nobody here wrote: ``nn.MultiheadAttention`` (chapter 6) and ``nn.TransformerEncoderLayer`` (chapter 7).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import boundary
from .block import Block
from .heads import MultiHeadAttention

__all__ = ["to_torch_mha", "to_torch_layer"]


def _mha_args(mha) -> None:
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attnlib MultiHeadAttention, got {type(mha).__name__}")
    if mha.rope:
        raise ValueError("torch's MultiheadAttention has no RoPE; compare a module built with rope=False")
    if mha.h_kv != mha.h:
        raise ValueError(f"torch's MultiheadAttention has one key/value head per query head (h_kv = h = "
                         f"{mha.h}); this layer has h_kv={mha.h_kv} for h={mha.h} (grouped-query attention): "
                         f"compare a layer built with h_kv=None")


def _layer_args(block) -> None:
    if not isinstance(block, Block):
        raise TypeError(f"block must be an attnlib Block, got {type(block).__name__}")
    _mha_args(block.attn)


@boundary(_mha_args)
def to_torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention(batch_first=True)`` computing the same function as ``mha``.

    torch keeps the fused (3·d_model, d_model) input weight in the same Q, K, V order as ``W_QKV``.
    """
    w = mha.W_QKV.weight
    ref = nn.MultiheadAttention(mha.d_model, mha.h, bias=mha.W_QKV.bias is not None, batch_first=True,
                                dtype=w.dtype, device=w.device)
    with torch.no_grad():
        ref.in_proj_weight.copy_(w)
        ref.out_proj.weight.copy_(mha.W_O.weight)
        if mha.W_QKV.bias is not None:
            ref.in_proj_bias.copy_(mha.W_QKV.bias)
            ref.out_proj.bias.copy_(mha.W_O.bias)
    return ref.eval()


@boundary(_layer_args)
def to_torch_layer(block: Block) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` (GELU, no dropout) computing the same function as ``block``.

    Call it with a causal mask: ``ref(x, src_mask=causal_mask(T), is_causal=True)`` (the float mask M:
    this layer reads a boolean mask the other way round from scaled_dot_product_attention).
    """
    w = block.mlp.W_1.weight
    bias = block.mlp.W_1.bias is not None
    activation = functools.partial(F.gelu, approximate="tanh") if block.mlp.gelu == "tanh" else "gelu"
    ref = nn.TransformerEncoderLayer(
        block.d_model, block.attn.h, dim_feedforward=w.shape[0], dropout=0.0, activation=activation,
        layer_norm_eps=block.ln_1.eps, batch_first=True, norm_first=block.norm == "pre", bias=bias,
        dtype=w.dtype, device=w.device)
    ref.self_attn = to_torch_mha(block.attn)
    pairs = [(ref.linear1, block.mlp.W_1), (ref.linear2, block.mlp.W_2), (ref.norm1, block.ln_1),
             (ref.norm2, block.ln_2)]
    with torch.no_grad():
        for theirs, ours in pairs:
            theirs.weight.copy_(ours.weight)
            if ours.bias is not None:
                theirs.bias.copy_(ours.bias)
    return ref.eval()
