"""Chapter 1: three ways to give attention a sense of order.

Sinusoidal and learned positions are *added* to X₀. RoPE instead *rotates* Q and K inside attention,
so the first layer's input stays the plain token embeddings.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_nonnegative, check_number, check_positions, check_positive, check_shape

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

    def forward(self, T: int, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rows offset … offset+T-1 of the table: the positions of T tokens that start at ``offset``.

        ``positions`` (B, T), an integer position per token (each row of a padded batch counting from its own
        first real token), picks those rows instead: the result is (B, T, d_model).
        """
        (T,), (offset,) = check_positive(T=T), check_nonnegative(offset=offset)
        if positions is not None:
            positions = check_positions(positions, T, batch=None)
            if positions.numel() and int(positions.max()) >= self.max_T:
                raise ValueError(f"position {int(positions.max())} exceeds the context length: positions must "
                                 f"be < max_T={self.max_T}")
            return self.table[positions.to(self.table.device)]
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
    return _angles(torch.arange(offset, offset + T, dtype=torch.float64), d, base)


def _angles(t: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """Positions t (..., T) in float64 → angles (..., T, d/2)."""
    return t[..., None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=t.device) / d)


def apply_rope(x: torch.Tensor, offset: int = 0, *, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate each pair (x[..., 2i], x[..., 2i+1]) of x (..., T, d) by the angle of its position.

    Applied to both Q and K, the score q_i · k_j then depends on the positions only through i − j.
    ``offset`` is the position of the first row (used when earlier positions are cached).
    ``positions`` (T,) or (B, T), with B = x's first axis, gives every row its own position instead
    (a padded batch: each sequence counts from its own first real token).
    """
    dims = check_shape(x, "x", "... T d")
    offset, = check_nonnegative(offset=offset)
    if positions is not None:
        if x.dim() < 3 and positions.dim() == 2:
            raise ValueError(f"positions (B, T) need x (B, ..., T, d), got x {tuple(x.shape)}")
        positions = check_positions(positions, dims["T"], batch=x.shape[0] if x.dim() >= 3 else None)
        theta = _angles(positions.to(x.device, torch.float64), dims["d"])   # (T, d/2) or (B, T, d/2)
        if positions.dim() == 2:
            theta = theta.reshape(x.shape[0], *[1] * (x.dim() - 3), dims["T"], dims["d"] // 2)
    else:
        theta = rope_angles(dims["T"], dims["d"], offset).to(x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
