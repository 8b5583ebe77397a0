"""Chapter 11: many prompts at once. Prompts of different lengths are padded to one length T.

``is_pad`` (B, T) marks the padding tokens (True = padding). Right padding (pads at the end) suits training:
inputs and targets line up and the pads' targets are ignored. Left padding (pads at the start) suits
generation: every row's newest token sits in the last column. Either way the padding must never be read
(:func:`attnlib.attention.padding_mask`), and each row counts its positions from its own first real token
(:func:`position_ids`).
"""

from __future__ import annotations

import torch

from ._validate import _show, check_choice, check_ids, check_is_pad, check_nonnegative

__all__ = ["pad_prompts", "position_ids"]


def pad_prompts(prompts, pad_id: int, side: str = "left") -> tuple[torch.Tensor, torch.Tensor]:
    """A list of B prompts, each a (T_b,) tensor of token IDs → ids (B, T) and is_pad (B, T), T = max T_b.

    ``side="left"`` puts the pads before each prompt (for generation), ``"right"`` after it (for training).
    """
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"prompts must be a non-empty list of (T,) token-ID tensors, got {_show(prompts)}")
    pad_id, = check_nonnegative(pad_id=pad_id)
    side = check_choice(side, "side", ("left", "right"))
    for k, p in enumerate(prompts):
        check_ids(p, torch.iinfo(torch.int64).max, f"prompts[{k}]")   # any ID ≥ 0
        if p.dim() != 1:
            raise ValueError(f"prompts[{k}] must be one sequence (T,), got {tuple(p.shape)}")
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long, device=prompts[0].device)
    is_pad = torch.ones(len(prompts), T, dtype=torch.bool, device=prompts[0].device)
    for b, p in enumerate(prompts):
        cols = slice(T - len(p), T) if side == "left" else slice(0, len(p))
        ids[b, cols], is_pad[b, cols] = p.to(ids.device), False
    return ids, is_pad


def position_ids(is_pad: torch.Tensor) -> torch.Tensor:
    """is_pad (B, T) → positions (B, T): each real token's index among its row's real tokens.

    positions = cumsum(real) − 1, so a row's first real token is at position 0 however many pads come
    before it; pads before it get 0 too (clamped: −1 would index the last row of a table).
    """
    is_pad = check_is_pad(is_pad)
    return ((~is_pad).long().cumsum(-1) - 1).clamp(min=0)
