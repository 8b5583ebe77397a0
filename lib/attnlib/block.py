"""Chapter 7: the Transformer block.

Pre-Norm (GPT-2 and most current models):   H = X + Attention(LN₁(X));   X_next = H + MLP(LN₂(H))
Post-Norm (the 2017 paper):                  H = LN₁(X + Attention(X));   X_next = LN₂(H + MLP(H))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import (
    boundary,
    require_choice,
    require_fits,
    require_flags,
    require_input,
    require_number,
    require_positive,
)
from .heads import KVCache, MultiHeadAttention, _layer_call_args, _mha_init_args

__all__ = ["MLP", "Block"]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _mlp_init_args(self, d_model, d_ff, bias, gelu) -> dict:
    d_model, d_ff = require_positive(d_model=d_model, d_ff=d_ff)
    bias, = require_flags(bias=bias)
    require_fits("this MLP", {f"d_model={d_model}, d_ff={d_ff}": 2 * d_model * d_ff})
    return {"d_model": d_model, "d_ff": d_ff, "bias": bias, "gelu": require_choice(gelu, "gelu", ("exact", "tanh"))}


def _mlp_forward_args(self, x) -> dict:
    require_input(x, "x", "... d_model", self.W_1.weight, d_model=self.d_model)


def _block_init_args(self, d_model, h, d_ff, norm, rope, backend, bias, gelu, eps, h_kv) -> dict:
    d_model, = require_positive(d_model=d_model)
    norm = require_choice(norm, "norm", ("pre", "post"))
    bias, = require_flags(bias=bias)
    eps = require_number(eps, "eps", above=0)
    attn = _mha_init_args(None, d_model, h, h_kv, bias, rope, backend)
    mlp = _mlp_init_args(None, d_model, 4 * d_model if d_ff is None else d_ff, bias, gelu)
    return {**attn, **mlp, "norm": norm, "eps": eps}


def _block_forward_args(self, x, causal, cache, mask, positions) -> dict:
    require_input(x, "x", "B T d_model", self.ln_1.weight, d_model=self.d_model)
    return _layer_call_args(self.attn, x, causal, cache, mask, positions)


class MLP(nn.Module):
    """Position-wise feed-forward network: (B, T, d_model) → d_ff → GELU → (B, T, d_model), each position alone.

    ``gelu="exact"`` uses GELU(x) = x·Φ(x); ``gelu="tanh"`` its tanh approximation (GPT-2's ``gelu_new``).
    ``bias=False`` drops the two bias vectors.
    """

    @boundary(_mlp_init_args)
    def __init__(self, d_model: int, d_ff: int, *, bias: bool = True, gelu: str = "exact"):
        super().__init__()
        self.d_model, self.d_ff, self.gelu = d_model, d_ff, gelu
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)

    @boundary(_mlp_forward_args)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d_model) → (..., d_model): the same two-layer network at every position."""
        approximate = "tanh" if self.gelu == "tanh" else "none"
        return self.W_2(F.gelu(self.W_1(x), approximate=approximate))   # (..., d_model) → (..., d_ff) → back


class Block(nn.Module):
    """Attention and MLP sublayers, each with a residual addition: x (B, T, d_model) → (B, T, d_model).

    ``bias=False`` removes every bias (projections, MLP, LayerNorm shifts); ``eps`` is both LayerNorms' ε;
    ``gelu`` is the MLP's GELU flavour ("exact" or "tanh"); ``h_kv`` the attention's key/value heads
    (default h; chapter 10).
    """

    @boundary(_block_init_args)
    def __init__(self, d_model: int, h: int, d_ff: int | None = None, *, norm: str = "pre",
                 rope: bool = False, backend: str = "sdpa", bias: bool = True, gelu: str = "exact",
                 eps: float = 1e-5, h_kv: int | None = None):
        super().__init__()
        self.norm, self.d_model = norm, d_model
        self.ln_1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.attn = MultiHeadAttention(d_model, h, h_kv=h_kv, bias=bias, rope=rope, backend=backend)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.mlp = MLP(d_model, 4 * d_model if d_ff is None else d_ff, bias=bias, gelu=gelu)

    @boundary(_block_forward_args)
    def forward(self, x: torch.Tensor, *, causal: bool = True, cache: KVCache | None = None,
                mask: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, d_model) → (B, T, d_model). ``mask`` and ``positions``: see MultiHeadAttention.forward."""
        extra = dict(cache=cache, mask=mask, positions=positions)
        if self.norm == "pre":
            H = x + self.attn(self.ln_1(x), causal=causal, **extra)   # (B, T, d_model)
            return H + self.mlp(self.ln_2(H))
        H = self.ln_1(x + self.attn(x, causal=causal, **extra))
        return self.ln_2(H + self.mlp(H))
