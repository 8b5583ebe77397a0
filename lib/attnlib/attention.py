"""Chapters 3–5: scores, scaling, the causal mask, softmax and the weighted sum of V.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + M) V

Row i of every (T_q, T_k) table below is a query position, column j a key position.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import (
    boundary,
    require_attention_mask,
    require_axis,
    require_batch,
    require_device,
    require_dtype,
    require_fits,
    require_flags,
    require_input,
    require_is_pad,
    require_mask,
    require_positive,
    require_same,
    require_shape,
)
from .projections import Projections

__all__ = [
    "scores", "scale", "causal_mask", "softmax", "attention_weights", "attend", "attention",
    "SingleHeadAttention", "padding_mask", "sliding_window_mask", "combine_masks",
]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _scores_args(Q, K) -> dict:
    d = require_shape(Q, "Q", "... T_q d_k")
    require_shape(K, "K", "... T_k d_k", d_k=d["d_k"])
    require_same(Q, K, "Q", "K")
    require_batch(Q, K, "Q", "K")


def _scale_args(S, d_k) -> dict:
    require_shape(S, "S", "...")
    d_k, = require_positive(d_k=d_k)
    return {"d_k": d_k}


def _causal_mask_args(T_q, T_k, dtype, device) -> dict:
    T_q, T_k = require_positive(T_q=T_q, T_k=T_q if T_k is None else T_k)
    if T_k < T_q:
        raise ValueError(f"T_k={T_k} must be at least T_q={T_q}: every query needs its own key")
    device = None if device is None else require_device(device)
    require_fits("this mask", {f"T_q={T_q}, T_k={T_k}": 2 * T_q * T_k}, what="numbers", device=device)
    return {"T_q": T_q, "T_k": T_k, "dtype": require_dtype(dtype, allow_bool=True), "device": device}


def _padding_mask_args(is_pad) -> None:
    require_is_pad(is_pad)


def _sliding_window_mask_args(T_q, T_k, window, dtype, device) -> dict:
    window, = require_positive(window=window)
    return {"window": window, **_causal_mask_args(T_q, T_k, dtype, device)}


def _combine_masks_args(mask, T_q, T_k, causal, device) -> dict:
    T_q, T_k = require_positive(T_q=T_q, T_k=T_k)
    causal, = require_flags(causal=causal)
    if causal and T_k < T_q:
        raise ValueError(f"T_k={T_k} must be at least T_q={T_q} for a causal mask: every query needs its own key")
    if mask is None:
        require_fits("this mask", {f"T_q={T_q}, T_k={T_k}": T_q * T_k}, what="numbers",
                     device=None if device is None else require_device(device))
    else:
        require_mask(mask, (T_q, T_k), free_batch=True)
    return {"T_q": T_q, "T_k": T_k, "causal": causal,
            "device": None if device is None or mask is not None else require_device(device)}


def _softmax_args(Z, dim) -> dict:
    require_shape(Z, "Z", "...")
    return {"dim": require_axis(dim, Z, "Z")}


def _attention_weights_args(Q, K, causal, mask) -> dict:
    causal, = require_flags(causal=causal)
    _scores_args(Q, K)
    if causal and K.shape[-2] < Q.shape[-2]:
        raise ValueError(f"T_k={K.shape[-2]} must be at least T_q={Q.shape[-2]} for causal attention: every query "
                         "needs its own key")
    if mask is not None:
        require_attention_mask(mask, (*Q.shape[:-1], K.shape[-2]), like=Q, causal=causal)
    return {"causal": causal}


def _attend_args(P, V) -> dict:
    d = require_shape(P, "P", "... T_q T_k")
    require_shape(V, "V", "... T_k d_v", T_k=d["T_k"])
    require_same(P, V, "P", "V")
    require_batch(P, V, "P", "V")


def _attention_args(Q, K, V, causal, return_weights, mask) -> dict:
    return_weights, = require_flags(return_weights=return_weights)
    args = _attention_weights_args(Q, K, causal, mask)
    require_shape(V, "V", "... T_k d_v", T_k=K.shape[-2])
    require_same(Q, V, "Q", "V")
    require_batch(Q, V, "Q", "V")
    return {**args, "return_weights": return_weights}


def _single_head_init_args(self, d_model, d_k, d_v) -> dict:
    d_model, d_k, d_v = require_positive(d_model=d_model, d_k=d_k, d_v=d_k if d_v is None else d_v)
    require_fits("this attention head", {f"d_model={d_model}, d_k={d_k}, d_v={d_v}": d_model * (2 * d_k + d_v)})
    return {"d_model": d_model, "d_k": d_k, "d_v": d_v}


def _single_head_forward_args(self, X, causal, return_weights) -> dict:
    require_input(X, "X", "... T d_model", self.proj.q.weight, d_model=self.d_model)
    causal, return_weights = require_flags(causal=causal, return_weights=return_weights)
    return {"causal": causal, "return_weights": return_weights}


@boundary(_scores_args)
def scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """S = Q Kᵀ: Q (..., T_q, d_k), K (..., T_k, d_k) → S (..., T_q, T_k); S[i, j] = q_i · k_j."""
    return Q @ K.transpose(-2, -1)   # (..., T_q, d_k) @ (..., d_k, T_k)


@boundary(_scale_args)
def scale(S: torch.Tensor, d_k: int) -> torch.Tensor:
    """Z = S / √d_k, which keeps the scores' spread near 1 when q and k have unit-variance components."""
    return S / math.sqrt(d_k)


@boundary(_causal_mask_args)
def causal_mask(T_q: int, T_k: int | None = None, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """M (T_q, T_k): 0 where key j may be read by query i, −inf where j lies in i's future.

    With T_k > T_q the queries are the *last* T_q positions (as when earlier K and V are cached),
    so query i sits at absolute position i + T_k − T_q.

    ``dtype=torch.bool`` returns the boolean mask in the convention of
    ``F.scaled_dot_product_attention``: **True where query i may attend to key j**, False in its future.
    (``nn.MultiheadAttention`` reads a boolean mask the other way round; give it the float M instead.)
    """
    T_k = T_q if T_k is None else T_k
    future = torch.ones(T_q, T_k, dtype=torch.bool, device=device).triu(1 + T_k - T_q)   # j > i + T_k − T_q
    if dtype == torch.bool:
        return ~future   # True = may attend, as scaled_dot_product_attention reads it
    return torch.zeros(T_q, T_k, dtype=dtype, device=device).masked_fill(future, float("-inf"))


@boundary(_padding_mask_args)
def padding_mask(is_pad: torch.Tensor) -> torch.Tensor:
    """is_pad (B, T), True at a padding token → boolean mask (B, 1, 1, T), **True where key j may be read**.

    The two axes of size 1 broadcast over the h heads and the T_q queries: padding is never *read*, by any
    query of its own sequence. (A padding query itself still computes something; nobody uses it.)
    """
    return ~is_pad[:, None, None, :]


@boundary(_sliding_window_mask_args)
def sliding_window_mask(T_q: int, T_k: int | None = None, *, window: int, dtype=torch.float32,
                        device=None) -> torch.Tensor:
    """The causal mask with a window: query i reads only keys i − window + 1 … i (``window`` keys at most).

    Same conventions as :func:`causal_mask`: float 0 / −inf by default, ``dtype=torch.bool`` gives True where
    query i may attend to key j. With T_k > T_q the queries are the last T_q positions.
    """
    allowed = causal_mask(T_q, T_k, dtype=torch.bool, device=device)   # (T_q, T_k): j ≤ i
    T_q, T_k = allowed.shape
    i = torch.arange(T_k - T_q, T_k, device=allowed.device)[:, None]  # absolute position of each query
    allowed &= torch.arange(T_k, device=allowed.device)[None, :] > i - window   # and not too old
    if dtype == torch.bool:
        return allowed
    return torch.zeros(T_q, T_k, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


@boundary(_combine_masks_args)
def combine_masks(mask: torch.Tensor | None, T_q: int, T_k: int, *, causal: bool = True,
                  device=None) -> torch.Tensor:
    """True where query i may read key j: ``mask`` (boolean, True = may attend) AND the causal mask.

    ``mask`` broadcasts to (..., T_q, T_k): a padding mask (B, 1, 1, T_k) AND causal (T_q, T_k) gives
    (B, 1, T_q, T_k), the same for every head. ``mask=None`` gives the causal mask alone (all True if not
    ``causal``).
    """
    if mask is not None:
        device = mask.device
    allowed = (causal_mask(T_q, T_k, dtype=torch.bool, device=device) if causal
               else torch.ones(T_q, T_k, dtype=torch.bool, device=device))   # (T_q, T_k)
    return allowed if mask is None else mask & allowed


@boundary(_softmax_args)
def softmax(Z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stable softmax: subtract the row maximum first, so exp never overflows. Rows of −inf give NaN."""
    Z = Z - Z.amax(dim=dim, keepdim=True)
    e = Z.exp()
    return e / e.sum(dim=dim, keepdim=True)


@boundary(_attention_weights_args)
def attention_weights(Q: torch.Tensor, K: torch.Tensor, causal: bool = True, *,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """P = softmax(Q Kᵀ / √d_k + M) of shape (..., T_q, T_k); every row sums to 1.

    ``mask`` (boolean, True = may attend, as SDPA reads it) blocks more keys, on top of the causal mask. It has
    all of the scores' axes, each of size 1 or equal (e.g. (B, 1, T_q, T_k)), or only (T_q, T_k). A row left
    with no key to read gets all-zero weights instead of NaN; a mask that leaves *no* row a key is an error
    (it is in the other convention, True = blocked). (With ``mask`` the blocked scores are overwritten with
    −inf, so a NaN score there is dropped.)
    """
    Z = scale(scores(Q, K), Q.shape[-1])   # (..., T_q, T_k): the scaled scores
    if mask is not None:
        allowed = combine_masks(mask, Z.shape[-2], Z.shape[-1], causal=causal)
        P = softmax(Z.masked_fill(~allowed, float("-inf")))
        return P.masked_fill(~allowed.any(-1, keepdim=True), 0.0)    # nothing to read: 0, not 0/0
    if causal:
        Z = Z + causal_mask(Z.shape[-2], Z.shape[-1], dtype=Z.dtype, device=Z.device)
    return softmax(Z)


@boundary(_attend_args)
def attend(P: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """P (..., T_q, T_k) @ V (..., T_k, d_v) → (..., T_q, d_v): each output is a weighted average of values."""
    return P @ V


@boundary(_attention_args)
def attention(Q, K, V, causal: bool = True, return_weights: bool = False, *, mask=None):
    """softmax(Q Kᵀ / √d_k + M) V, written out step by step. Returns (..., T_q, d_v) [, weights].

    ``mask``: optional boolean (..., T_q, T_k), True = may attend, ANDed with the causal mask (see
    :func:`attention_weights`); a query with nothing to read outputs zeros.

    Q, K (..., T_q or T_k, d_k) and V (..., T_k, d_v) must share their batch axes (nothing is broadcast).
    NaN or ±inf in Q, K or V are not looked for: a NaN reaches every query that may read its key. Without
    ``mask`` the causal mask is *added*, so a NaN score in a future position stays NaN after adding −inf and
    that query's whole row of weights becomes NaN; with ``mask`` blocked scores are overwritten and the NaN is
    dropped. (torch's fused kernels may skip the future instead, so those rows can differ from SDPA's.)
    """
    P = attention_weights(Q, K, causal, mask=mask)   # (..., T_q, T_k)
    out = attend(P, V)                               # (..., T_q, d_v)
    return (out, P) if return_weights else out


class SingleHeadAttention(nn.Module):
    """One head of causal self-attention: X (B, T, d_model) → (B, T, d_v)."""

    @boundary(_single_head_init_args)
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None):
        super().__init__()
        self.proj = Projections(d_model, d_k, d_v)
        self.d_model = d_model

    @boundary(_single_head_forward_args)
    def forward(self, X: torch.Tensor, causal: bool = True, return_weights: bool = False):
        Q, K, V = self.proj(X)   # (B, T, d_k), (B, T, d_k), (B, T, d_v)
        return attention(Q, K, V, causal=causal, return_weights=return_weights)
