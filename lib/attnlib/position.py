"""Chapter 1: three ways to give attention a sense of order.

Sinusoidal and learned positions are *added* to X₀. RoPE instead *rotates* Q and K inside attention,
so the first layer's input stays the plain token embeddings.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_nonnegative, check_number, check_positive, check_shape

__all__ = ["sinusoidal_positions", "LearnedPositions", "rope_angles", "apply_rope"]


def sinusoidal_positions(T: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(T, d_model) table PE with PE[t, 2i] = sin(t / base^(2i/d_model)) and PE[t, 2i+1] = cos(same)."""
    T, d_model = check_positive(T=T, d_model=d_model)
    base = check_number(base, "base", minimum=1)
    if d_model % 2:
        raise ValueError(f"d_model must be even for sin/cos pairs, got d_model={d_model}")
    t = torch.arange(T, dtype=torch.float32)[:, None]
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    PE = torch.zeros(T, d_model)
    PE[:, 0::2] = torch.sin(t * freq)
    PE[:, 1::2] = torch.cos(t * freq)
    return PE


class LearnedPositions(nn.Module):
    """A learned (max_T, d_model) table; ``forward(T)`` returns its first T rows, shape (T, d_model)."""

    def __init__(self, max_T: int, d_model: int):
        super().__init__()
        max_T, d_model = check_positive(max_T=max_T, d_model=d_model)
        self.max_T = max_T
        self.table = nn.Parameter(torch.randn(max_T, d_model) * 0.02)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        """Rows offset … offset+T-1 of the table: the positions of T tokens that start at ``offset``."""
        (T,), (offset,) = check_positive(T=T), check_nonnegative(offset=offset)
        if offset + T > self.max_T:
            raise ValueError(f"T={offset + T} exceeds the context length max_T={self.max_T}")
        return self.table[offset:offset + T]


def rope_angles(T: int, d: int, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """(T, d/2) rotation angles θ[t, i] = (offset + t) · base^(-2i/d) for the d/2 pairs of a vector."""
    (T, d), (offset,) = check_positive(T=T, d=d), check_nonnegative(offset=offset)
    base = check_number(base, "base", minimum=1)
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions, so d must be even, got d={d}")
    # float64 so that far positions keep exact angles; callers cast to their own dtype
    t = torch.arange(offset, offset + T, dtype=torch.float64)[:, None]
    return t * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def apply_rope(x: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) of x (..., T, d) by the angle of its position.

    Applied to both Q and K, the score q_i · k_j then depends on the positions only through i − j.
    ``offset`` is the position of the first row (used when earlier positions are cached).
    """
    dims = check_shape(x, "x", "... T d")
    offset, = check_nonnegative(offset=offset)
    theta = rope_angles(dims["T"], dims["d"], offset).to(x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
