"""Chapter 2: Q = X W_Q, K = X W_K, V = X W_V.

``nn.Linear`` stores its weight as (out, in), so ``linear(x) == x @ linear.weight.T``; the properties
``W_Q``, ``W_K``, ``W_V`` return the matrices in the book's (d_model, d_k) orientation.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_batch, check_flags, check_input, check_positive, check_same, check_shape

__all__ = ["Projections", "FusedProjections", "project"]


def project(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """X (..., T, d_model) @ W (d_model, d_out) → (..., T, d_out)."""
    d = check_shape(W, "W", "d_model d_out")
    check_shape(X, "X", "... T d_model", d_model=d["d_model"])
    check_same(X, W, "X", "W")
    X, W = X.contiguous(), W.contiguous()   # any memory layout gives the bits of a plain copy
    return X @ W


class Projections(nn.Module):
    """Three separate projections of one head: X (B, T, d_model) → Q, K (B, T, d_k) and V (B, T, d_v)."""

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        d_model, d_k, d_v = check_positive(d_model=d_model, d_k=d_k, d_v=d_v)
        bias, = check_flags(bias=bias)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.q = nn.Linear(d_model, d_k, bias=bias)
        self.k = nn.Linear(d_model, d_k, bias=bias)
        self.v = nn.Linear(d_model, d_v, bias=bias)

    W_Q = property(lambda self: self.q.weight.T, doc="(d_model, d_k)")
    W_K = property(lambda self: self.k.weight.T, doc="(d_model, d_k)")
    W_V = property(lambda self: self.v.weight.T, doc="(d_model, d_v)")

    def forward(self, X: torch.Tensor, X_kv: torch.Tensor | None = None):
        """Q from X; K and V from ``X_kv`` (cross-attention) or from X itself (self-attention)."""
        check_input(X, "X", "... T d_model", self.q.weight, d_model=self.d_model)
        if X_kv is None:
            X_kv = X
        else:   # cross-attention: another sequence (any length T_kv), the same batch
            check_input(X_kv, "X_kv", "... T_kv d_model", self.q.weight, d_model=self.d_model)
            check_batch(X, X_kv, "X", "X_kv")
        X, X_kv = X.contiguous(), X_kv.contiguous()   # any memory layout gives the bits of a plain copy
        return self.q(X), self.k(X_kv), self.v(X_kv)


class FusedProjections(nn.Module):
    """One (d_model → 2·d_k + d_v) product, split into Q, K, V: the same maps as three, in one call."""

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        d_model, d_k, d_v = check_positive(d_model=d_model, d_k=d_k, d_v=d_v)
        bias, = check_flags(bias=bias)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.qkv = nn.Linear(d_model, 2 * d_k + d_v, bias=bias)

    @classmethod
    def from_separate(cls, p: Projections) -> FusedProjections:
        """Stack the three weight matrices of ``p`` into one; no weight is shared or changed."""
        if not isinstance(p, Projections):
            raise TypeError(f"p must be a Projections module, got {type(p).__name__}")
        fused = cls(p.d_model, p.d_k, p.d_v, bias=p.q.bias is not None)
        with torch.no_grad():
            fused.qkv.weight.copy_(torch.cat([p.q.weight, p.k.weight, p.v.weight]))
            if p.q.bias is not None:
                fused.qkv.bias.copy_(torch.cat([p.q.bias, p.k.bias, p.v.bias]))
        return fused

    def forward(self, X: torch.Tensor):
        """X (B, T, d_model) → Q, K (B, T, d_k), V (B, T, d_v)."""
        check_input(X, "X", "... T d_model", self.qkv.weight, d_model=self.d_model)
        X = X.contiguous()   # any memory layout gives the bits of a plain copy
        return self.qkv(X).split([self.d_k, self.d_k, self.d_v], dim=-1)
