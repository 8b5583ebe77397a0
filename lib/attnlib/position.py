"""Chapter 1: three ways to give attention a sense of order.

Sinusoidal and learned positions are *added* to X₀. RoPE instead *rotates* Q and K inside attention,
so the first layer's input stays the plain token embeddings.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    boundary,
    require_fits,
    require_nonnegative,
    require_number,
    require_positions_on,
    require_positive,
    require_shape,
)

__all__ = ["sinusoidal_positions", "LearnedPositions", "rope_angles", "apply_rope"]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _sinusoidal_args(T, d_model, base) -> dict:
    T, d_model = require_positive(T=T, d_model=d_model)
    base = require_number(base, "base", minimum=1)
    if d_model % 2:
        raise ValueError(f"d_model must be even for sin/cos pairs, got d_model={d_model}")
    require_fits("this table of positions", {f"T={T}, d_model={d_model}": 2 * T * d_model}, what="numbers")
    return {"T": T, "d_model": d_model, "base": base}


def _learned_init_args(self, max_T, d_model) -> dict:
    max_T, d_model = require_positive(max_T=max_T, d_model=d_model)
    require_fits("this position table", {f"max_T={max_T}, d_model={d_model}": max_T * d_model})
    return {"max_T": max_T, "d_model": d_model}


def _learned_forward_args(self, T, offset, positions) -> dict:
    (T,), (offset,) = require_positive(T=T), require_nonnegative(offset=offset)
    if positions is not None:
        positions = require_positions_on(positions, T, self.table.device, batch=None, of="the table")
        if positions.numel() and int(positions.max()) >= self.max_T:
            raise ValueError(f"position {int(positions.max())} exceeds the context length: positions must "
                             f"be < max_T={self.max_T}")
    elif offset + T > self.max_T:
        raise ValueError(f"T={offset + T} exceeds the context length max_T={self.max_T}")
    return {"T": T, "offset": offset}


def _even(d: int) -> int:
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions, so d must be even, got d={d}")
    return d


def _rope_angles_args(T, d, offset, base) -> dict:
    (T, d), (offset,) = require_positive(T=T, d=d), require_nonnegative(offset=offset)
    if offset + T > 2**53:
        raise ValueError(f"offset + T must be at most 2**53, the last position float64 counts exactly, got "
                         f"offset={offset}, T={T}")
    require_fits("this table of angles", {f"T={T}, d={d}": 2 * T * d}, what="numbers")
    return {"T": T, "d": _even(d), "offset": offset, "base": require_number(base, "base", minimum=1)}


def _apply_rope_args(x, offset, positions) -> dict:
    dims = require_shape(x, "x", "... T d")
    offset, = require_nonnegative(offset=offset)
    _even(dims["d"])
    if positions is not None:
        if x.dim() < 3 and getattr(positions, "ndim", 0) == 2:
            raise ValueError(f"positions (B, T) need x (B, ..., T, d), got x {tuple(x.shape)}")
        require_positions_on(positions, dims["T"], x.device, batch=x.shape[0] if x.dim() >= 3 else None)
    return {"offset": offset}


@boundary(_sinusoidal_args)
def sinusoidal_positions(T: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(T, d_model) table PE with PE[t, 2f] = sin(t / base^(2f/d_model)) and PE[t, 2f+1] = cos(same)."""
    t = torch.arange(T, dtype=torch.float32)[:, None]                                # (T, 1)
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)   # (d_model/2,)
    PE = torch.zeros(T, d_model)
    PE[:, 0::2] = torch.sin(t * freq)
    PE[:, 1::2] = torch.cos(t * freq)
    return PE


class LearnedPositions(nn.Module):
    """A learned (max_T, d_model) table; ``forward(T)`` returns its first T rows, shape (T, d_model)."""

    @boundary(_learned_init_args)
    def __init__(self, max_T: int, d_model: int):
        super().__init__()
        self.max_T = max_T
        self.table = nn.Parameter(torch.randn(max_T, d_model) * 0.02)

    @boundary(_learned_forward_args)
    def forward(self, T: int, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rows offset … offset+T-1 of the table: the positions of T tokens that start at ``offset``.

        ``positions`` (B, T), an integer position per token (each row of a padded batch counting from its own
        first real token), picks those rows instead: the result is (B, T, d_model).
        """
        if positions is not None:
            return self.table[positions.to(self.table.device)]   # (B, T) → (B, T, d_model)
        return self.table[offset:offset + T]   # (T, d_model)


@boundary(_rope_angles_args)
def rope_angles(T: int, d: int, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """(T, d/2) rotation angles θ[t, f] = (offset + t) · base^(-2f/d) for the d/2 pairs f of a vector."""
    # float64 so that far positions keep exact angles; callers cast to their own dtype
    return _angles(torch.arange(offset, offset + T, dtype=torch.float64), d, base)


def _angles(t: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """Positions t (..., T) in float64 → angles (..., T, d/2)."""
    return t[..., None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=t.device) / d)


@boundary(_apply_rope_args)
def apply_rope(x: torch.Tensor, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate each pair f, (x[..., 2f], x[..., 2f+1]), of x (..., T, d) by the angle θ[t, f] of its position t.

    Applied to both Q and K, the score q_i · k_j then depends on the positions only through i − j.
    ``offset`` is the position of the first row (used when earlier positions are cached).
    ``positions`` (T,) or (B, T), with B = x's first axis, gives every row its own position instead
    (a padded batch: each sequence counts from its own first real token).
    """
    T, d = x.shape[-2:]
    if positions is None:
        theta = rope_angles(T, d, offset).to(x.device)   # (T, d/2)
    else:
        theta = _angles(positions.to(x.device, torch.float64), d)   # (T, d/2) or (B, T, d/2)
        if positions.dim() == 2:   # (B, T, d/2) → (B, 1, …, T, d/2): the same positions for every head
            theta = theta.reshape(x.shape[0], *[1] * (x.dim() - 3), T, d // 2)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
