"""Chapter 2: Q = X W_Q, K = X W_K, V = X W_V.

``nn.Linear`` stores its weight as (out, in), so ``linear(x) == x @ linear.weight.T``; the properties
``W_Q``, ``W_K``, ``W_V`` return the matrices in the book's (d_model, d_k) orientation.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    boundary,
    require_batch,
    require_fits,
    require_flags,
    require_input,
    require_positive,
    require_same,
    require_shape,
)

__all__ = ["Projections", "FusedProjections", "project"]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _project_args(X, W) -> dict:
    d = require_shape(W, "W", "d_model d_out")
    require_shape(X, "X", "... T d_model", d_model=d["d_model"])
    require_same(X, W, "X", "W")


def _init_args(self, d_model, d_k, d_v, bias) -> dict:
    d_model, d_k, d_v = require_positive(d_model=d_model, d_k=d_k, d_v=d_k if d_v is None else d_v)
    bias, = require_flags(bias=bias)
    require_fits("this projection layer", {f"d_model={d_model}, d_k={d_k}, d_v={d_v}": d_model * (2 * d_k + d_v)})
    return {"d_model": d_model, "d_k": d_k, "d_v": d_v, "bias": bias}


def _forward_args(self, X, X_kv=None) -> dict:
    weight = self.q.weight if isinstance(self, Projections) else self.qkv.weight
    require_input(X, "X", "... T d_model", weight, d_model=self.d_model)
    if X_kv is None:
        return None
    # cross-attention: another sequence (any length T_kv), the same batch
    require_input(X_kv, "X_kv", "... T_kv d_model", weight, d_model=self.d_model)
    require_batch(X, X_kv, "X", "X_kv")


def _from_separate_args(cls, p) -> None:
    if not isinstance(p, Projections):
        raise TypeError(f"p must be a Projections module, got {type(p).__name__}")


@boundary(_project_args)
def project(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """X (..., T, d_model) @ W (d_model, d_out) → (..., T, d_out)."""
    return X @ W


class Projections(nn.Module):
    """Three separate projections of one head: X (B, T, d_model) → Q, K (B, T, d_k) and V (B, T, d_v)."""

    @boundary(_init_args)
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.q = nn.Linear(d_model, d_k, bias=bias)
        self.k = nn.Linear(d_model, d_k, bias=bias)
        self.v = nn.Linear(d_model, d_v, bias=bias)

    W_Q = property(lambda self: self.q.weight.T, doc="(d_model, d_k)")
    W_K = property(lambda self: self.k.weight.T, doc="(d_model, d_k)")
    W_V = property(lambda self: self.v.weight.T, doc="(d_model, d_v)")

    @boundary(_forward_args)
    def forward(self, X: torch.Tensor, X_kv: torch.Tensor | None = None):
        """Q from X; K and V from ``X_kv`` (cross-attention) or from X itself (self-attention)."""
        X_kv = X if X_kv is None else X_kv
        return self.q(X), self.k(X_kv), self.v(X_kv)   # (B, T_q, d_k), (B, T_k, d_k), (B, T_k, d_v)


class FusedProjections(nn.Module):
    """One (d_model → 2·d_k + d_v) product, split into Q, K, V: the same maps as three, in one call."""

    @boundary(_init_args)
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.qkv = nn.Linear(d_model, 2 * d_k + d_v, bias=bias)

    @classmethod
    @boundary(_from_separate_args)
    def from_separate(cls, p: Projections) -> FusedProjections:
        """Stack the three weight matrices of ``p`` into one; no weight is shared or changed."""
        fused = cls(p.d_model, p.d_k, p.d_v, bias=p.q.bias is not None)
        with torch.no_grad():
            fused.qkv.weight.copy_(torch.cat([p.q.weight, p.k.weight, p.v.weight]))   # (2·d_k + d_v, d_model)
            if p.q.bias is not None:
                fused.qkv.bias.copy_(torch.cat([p.q.bias, p.k.bias, p.v.bias]))
        return fused

    @boundary(_forward_args)
    def forward(self, X: torch.Tensor):
        """X (B, T, d_model) → Q, K (B, T, d_k), V (B, T, d_v)."""
        return self.qkv(X).split([self.d_k, self.d_k, self.d_v], dim=-1)
