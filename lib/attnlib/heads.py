"""Chapter 6: multi-head attention.

h heads, each with its own slice of W_Q, W_K, W_V (d_head = d_model / h columns each). One fused
(d_model → 3·d_model) product computes all of them at once; reshape to (B, T, h, d_head) and transpose
to (B, h, T, d_head) put every head in its own batch entry. Outputs are concatenated and projected by W_O.

Chapter 10: grouped-query attention. With ``h_kv`` < h key/value heads, W_K and W_V have only h_kv·d_head
columns each and every K/V head serves a group of h / h_kv consecutive query heads (h_kv = 1: multi-query
attention). The KV cache keeps the h_kv heads; :func:`repeat_kv` expands them for the h query heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    boundary,
    require_attention_mask,
    require_cache,
    require_choice,
    require_divisible,
    require_fits,
    require_flags,
    require_input,
    require_kv_heads,
    require_like,
    require_nonnegative,
    require_positions_on,
    require_positive,
    require_same,
    require_shape,
)
from .attention import attention, causal_mask, combine_masks
from .position import apply_rope

__all__ = ["split_heads", "merge_heads", "multi_head_attention", "repeat_kv", "KVCache", "MultiHeadAttention"]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _split_heads_args(x, h) -> dict:
    d = require_shape(x, "x", "B T d_model")
    require_divisible(d["d_model"], h)
    return {"h": int(h)}   # a NumPy integer checked by require_divisible


def _merge_heads_args(x) -> None:
    require_shape(x, "x", "B h T d_head")


def _multi_head_attention_args(X, W_QKV, W_O, h) -> dict:
    m = require_shape(X, "X", "B T d_model")["d_model"]
    require_shape(W_QKV, "W_QKV", "d_model 3·d_model", **{"d_model": m, "3·d_model": 3 * m})
    require_shape(W_O, "W_O", "d_model d_model", d_model=m)
    require_same(X, W_QKV, "X", "W_QKV")
    require_same(X, W_O, "X", "W_O")
    h, = require_positive(h=h)
    require_divisible(m, h)
    return {"h": h}


def _repeat_kv_args(x, n_rep) -> dict:
    require_shape(x, "x", "B h_kv T d_head")
    n_rep, = require_positive(n_rep=n_rep)
    require_fits("repeat_kv", {f"x {tuple(x.shape)} repeated n_rep={n_rep} times": x.numel() * n_rep},
                 what="numbers", device=x.device)
    return {"n_rep": n_rep}


def _kv_cache_args(self) -> None:
    require_cache(self, "KVCache")


def _extend_args(self, K_new, V_new) -> None:
    require_cache(self, "cache")
    held = {} if self.K is None else dict(zip(("B", "h", "d_head"), self.K.shape[:2] + self.K.shape[3:]))
    d = require_shape(K_new, "K_new", "B h T_q d_head", **held)   # h here: the layer's h_kv key/value heads
    require_shape(V_new, "V_new", "B h T_q d_head", **d)
    require_same(K_new, V_new, "K_new", "V_new")
    require_cache(self, "cache", B=d["B"], h=d["h"], d_head=d["d_head"], like=K_new)


def _mha_init_args(self, d_model, h, h_kv, bias, rope, backend) -> dict:
    """The options of one attention layer (also checked by Block, whose layer then skips them)."""
    (d_model, h), (bias, rope) = require_positive(d_model=d_model, h=h), require_flags(bias=bias, rope=rope)
    d_head = require_divisible(d_model, h)
    h_kv = require_kv_heads(h, h_kv)
    backend = require_choice(backend, "backend", ("sdpa", "plain"))
    if rope and d_head % 2:
        raise ValueError(f"rope=True rotates pairs of dimensions, so d_head = d_model / h must be even, "
                         f"got d_head={d_head} (d_model={d_model}, h={h})")
    require_fits("this attention layer", {f"d_model={d_model}": 2 * d_model * d_model + 2 * d_model * h_kv * d_head})
    return {"d_model": d_model, "h": h, "h_kv": h_kv, "bias": bias, "rope": rope, "backend": backend}


def _positions_args(x, positions) -> None:
    """RoPE positions (T,) or (B, T) for x (B, T, d_model): checked with or without RoPE, so a bad one never hides."""
    if positions is not None:
        require_positions_on(positions, x.shape[1], x.device, batch=x.shape[0])


def _qkv_args(self, x, offset, positions) -> dict:
    require_input(x, "x", "B T d_model", self.W_QKV.weight, d_model=self.d_model)
    offset, = require_nonnegative(offset=offset)
    _positions_args(x, positions)
    return {"offset": offset}


def _layer_call_args(layer, x, causal, cache, mask, positions) -> dict:
    """What one attention layer is called with (x checked already): also checked by Block.forward."""
    causal, = require_flags(causal=causal)
    B, T, _ = x.shape
    T_past = 0 if cache is None else require_cache(cache, B=B, h=layer.h_kv, d_head=layer.d_head, like=x,
                                                   h_query=layer.h)
    if mask is not None:
        require_attention_mask(mask, (B, layer.h, T, T_past + T), like=x, causal=causal)
    _positions_args(x, positions)
    return {"causal": causal}


def _mha_forward_args(self, x, causal, cache, return_weights, mask, positions) -> dict:
    require_input(x, "x", "B T d_model", self.W_QKV.weight, d_model=self.d_model)
    return_weights, = require_flags(return_weights=return_weights)
    return {**_layer_call_args(self, x, causal, cache, mask, positions), "return_weights": return_weights}


@boundary(_split_heads_args)
def split_heads(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, d_model) → (B, h, T, d_head). The transpose matters: a reshape alone mixes
    positions."""
    B, T, d_model = x.shape
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)   # cut, then heads before T


@boundary(_merge_heads_args)
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, d_head) → (B, T, h·d_head): heads side by side for every position."""
    B, h, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_head)   # T before heads, then join


@boundary(_multi_head_attention_args)
def multi_head_attention(X: torch.Tensor, W_QKV: torch.Tensor, W_O: torch.Tensor,
                         h: int) -> torch.Tensor:
    """Causal multi-head attention X (B, T, d_model) → (B, T, d_model), no biases:
    W_QKV = [W_Q | W_K | W_V] (d_model, 3·d_model), W_O (d_model, d_model).
    :class:`MultiHeadAttention` takes the same steps, weights in nn.Linear layers."""
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)            # project: each (B, T, d_model)
    Q, K, V = (split_heads(t, h) for t in (Q, K, V))  # split: each (B, h, T, d_head)
    out = attention(Q, K, V)                          # attend: all heads, causal
    return merge_heads(out) @ W_O                     # merge: (B, T, d_model); mix: W_O


@boundary(_repeat_kv_args)
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, h_kv, T, d_head) → (B, h_kv·n_rep, T, d_head): each K or V head repeated n_rep times in a row.

    Heads 0, 0, …, 1, 1, …: key/value head g serves query heads g·n_rep … (g+1)·n_rep − 1, the same as
    ``x.repeat_interleave(n_rep, dim=1)``. With n_rep = 1 it returns x itself.
    """
    if n_rep == 1:
        return x
    B, h_kv, T, d_head = x.shape
    x = x[:, :, None].expand(B, h_kv, n_rep, T, d_head)   # (B, h_kv, n_rep, T, d_head), no copy yet
    return x.reshape(B, h_kv * n_rep, T, d_head)


@dataclass
class KVCache:
    """K and V of the positions seen so far, each (B, h_kv, T_past, d_head); filled by one layer during generation.

    It keeps the layer's h_kv key/value heads (h_kv = h unless the layer groups its queries, chapter 10).

    A cache belongs to one layer and one batch: every block gets its own, ``[KVCache() for _ in model.blocks]``.
    """

    K: torch.Tensor | None = None
    V: torch.Tensor | None = None

    @boundary(_kv_cache_args)
    def __post_init__(self):
        """K and V given at construction are checked by the spec (both or neither, one shape, dtype and device)."""

    def __len__(self) -> int:
        return 0 if self.K is None else self.K.shape[-2]

    @boundary(_extend_args)
    def extend(self, K_new: torch.Tensor, V_new: torch.Tensor):
        """Append the new positions' K and V and return the full (B, h_kv, T_past + T_q, d_head) tensors."""
        self.K = K_new if self.K is None else torch.cat([self.K, K_new], dim=-2)
        self.V = V_new if self.V is None else torch.cat([self.V, V_new], dim=-2)
        return self.K, self.V


def _attend_heads_args(self, Q, K, V, causal, mask, return_weights) -> dict:
    causal, return_weights = require_flags(causal=causal, return_weights=return_weights)
    d = require_shape(Q, "Q", "B h T d_head", h=self.h, d_head=self.d_head)
    k = require_shape(K, "K", "B h T_k d_head", B=d["B"], h=self.h, d_head=self.d_head)
    require_shape(V, "V", "B h T_k d_head", B=d["B"], h=self.h, T_k=k["T_k"], d_head=self.d_head)
    require_like(Q, self.W_O.weight, "Q")
    require_same(Q, K, "Q", "K")
    require_same(Q, V, "Q", "V")
    if causal and k["T_k"] < d["T"]:
        raise ValueError(f"T_k={k['T_k']} must be at least T_q={d['T']} for causal attention: every query needs "
                         "its own key")
    if mask is not None:
        require_attention_mask(mask, (*Q.shape[:-1], k["T_k"]), like=Q, causal=causal)
    return {"causal": causal, "return_weights": return_weights}


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention: x (B, T, d_model) → (B, T, d_model).

    ``backend="sdpa"`` calls ``torch.nn.functional.scaled_dot_product_attention`` (fast, O(T) memory when a
    fused kernel is available); ``backend="plain"`` runs the book's step-by-step :func:`attention`, which
    materialises the (B, h, T, T) weights. ``rope=True`` rotates Q and K by position (chapter 1).
    ``h_kv`` (default h) key/value heads: each serves a group of h / h_kv query heads (chapter 10).
    """

    @boundary(_mha_init_args)
    def __init__(self, d_model: int, h: int, *, h_kv: int | None = None, bias: bool = True, rope: bool = False,
                 backend: str = "sdpa"):
        super().__init__()
        self.d_model, self.h, self.rope, self.backend = d_model, h, rope, backend
        self.h_kv = h if h_kv is None else h_kv
        self.d_head = d_model // h
        self.qkv_sizes = (h * self.d_head, self.h_kv * self.d_head, self.h_kv * self.d_head)
        self.W_QKV = nn.Linear(d_model, sum(self.qkv_sizes), bias=bias)   # rows: all of W_Q, then W_K, then W_V
        self.W_O = nn.Linear(d_model, d_model, bias=bias)

    @boundary(_qkv_args)
    def qkv(self, x: torch.Tensor, offset: int = 0, *, positions: torch.Tensor | None = None):
        """x (B, T, d_model) → Q (B, h, T, d_head), K and V (B, h_kv, T, d_head); RoPE on Q and K if enabled.

        ``offset`` is the position of x's first row (the length of the cache when earlier K and V are kept).
        ``positions`` (B, T) gives every row its own RoPE position instead (a padded batch, chapter 11).
        """
        Q, K, V = self.W_QKV(x).split(self.qkv_sizes, dim=-1)   # widths h·d_head, h_kv·d_head, h_kv·d_head
        Q, K, V = split_heads(Q, self.h), split_heads(K, self.h_kv), split_heads(V, self.h_kv)
        if self.rope:
            Q, K = apply_rope(Q, offset, positions=positions), apply_rope(K, offset, positions=positions)
        return Q, K, V

    @boundary(_mha_forward_args)
    def forward(self, x: torch.Tensor, *, causal: bool = True, cache: KVCache | None = None,
                return_weights: bool = False, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None):
        """x (B, T, d_model) → (B, T, d_model) [, weights (B, h, T, T_k)].

        With ``cache``, x holds only the new positions; their K and V are appended to the cache and the
        queries attend to every cached position as well.
        ``mask``: boolean, True = may attend, (B|1, h|1, T, T_k) (e.g. a padding mask (B, 1, 1, T_k)) or
        (T, T_k), ANDed with the causal mask; a query with nothing to read outputs zeros.
        ``positions`` (B, T): RoPE positions of x's rows, one per token (chapter 11).
        """
        T_past = 0 if cache is None else len(cache)
        Q, K, V = self.qkv(x, offset=T_past, positions=positions)   # (B, h, T, d_head), K, V (B, h_kv, T, d_head)
        if cache is not None:                                       # chapter 8: earlier K and V are kept
            K, V = cache.extend(K, V)                               # (B, h_kv, T_past + T, d_head)
        K, V = repeat_kv(K, self.h // self.h_kv), repeat_kv(V, self.h // self.h_kv)   # chapter 10: (B, h, T_k, d_head)
        out, weights = self.attend_heads(Q, K, V, causal=causal, mask=mask, return_weights=return_weights)
        out = self.W_O(merge_heads(out))                            # (B, h, T, d_head) → (B, T, d_model)
        return (out, weights) if return_weights else out

    @boundary(_attend_heads_args)
    def attend_heads(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, *, causal: bool = True,
                     mask: torch.Tensor | None = None, return_weights: bool = False):
        """Every head attends at once: Q (B, h, T, d_head), K and V (B, h, T_k, d_head) → out (B, h, T, d_head) and
        the weights (B, h, T, T_k) where asked for (else None). ``mask`` as in :meth:`forward`."""
        weights = None
        if self.backend == "plain" or return_weights:
            out, weights = attention(Q, K, V, causal=causal, return_weights=True, mask=mask)
        elif mask is not None:   # padding or a window: one boolean mask; nothing readable gives 0, not NaN
            allowed = combine_masks(mask, Q.shape[-2], K.shape[-2], causal=causal)   # (B|1, h|1, T, T_k)
            out = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
            out = out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
        elif causal and K.shape[-2] != Q.shape[-2]:   # cached: queries are the last positions
            mask = causal_mask(Q.shape[-2], K.shape[-2], dtype=Q.dtype, device=Q.device)
            out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)   # (B, h, T, d_head)
        return out, weights
