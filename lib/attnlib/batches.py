"""Chapter 11: many prompts at once. Prompts of different lengths are padded to one length T.

``is_pad`` (B, T) marks the padding tokens (True = padding). Right padding (pads at the end) suits training:
inputs and targets line up and the pads' targets are ignored. Left padding (pads at the start) suits
generation: every row's newest token sits in the last column. Either way the padding must never be read
(:func:`attnlib.attention.padding_mask`), and each row counts its positions from its own first real token
(:func:`position_ids`).
"""

from __future__ import annotations

import torch

from ._validate import _show, boundary, require_choice, require_is_pad, require_nonnegative, require_tensor

__all__ = ["pad_prompts", "position_ids"]


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _pad_prompts_args(prompts, pad_id, side):
    """Prompts: (T_b,) integer tensors, T_b ≥ 1, all on one device, every ID ≥ 0 (read once for the batch)."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError(f"prompts must be a non-empty list of (T,) token-ID tensors, got {_show(prompts)}")
    pad_id, = require_nonnegative(pad_id=pad_id)
    side = require_choice(side, "side", ("left", "right"))
    for k, p in enumerate(prompts):
        name = f"prompts[{k}]"
        require_tensor(p, name)
        if p.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name} must be an integer tensor (torch.long), got dtype {p.dtype}")
        if p.dim() != 1:
            raise ValueError(f"{name} must be one sequence (T,), got {tuple(p.shape)}")
        if len(p) == 0:
            raise ValueError(f"{name} is an empty sequence: T must be at least 1, got shape {tuple(p.shape)}")
        if p.device != prompts[0].device:
            raise ValueError(f"{name} is on {p.device} but prompts[0] is on {prompts[0].device}; put every "
                             f"prompt on one device")
    if prompts[0].device.type == "meta":
        raise ValueError("prompts are on the meta device, which holds no values: expected token IDs on a device "
                         "such as 'cpu' or 'cuda'")
    _require_no_negative_ids(prompts)
    return {"pad_id": pad_id, "side": side}


def _require_no_negative_ids(prompts) -> None:
    """Every ID ≥ 0, or an error naming the prompt and the position; one read of the values (one GPU sync)."""
    negative = torch.cat([p < 0 for p in prompts])                      # (Σ T_b,)
    if bool(negative.any()):
        at = int(negative.nonzero()[0])
        for k, p in enumerate(prompts):
            if at < len(p):
                raise ValueError(f"prompts[{k}] holds token id {int(p[at])} at position {at}: token IDs must be "
                                 f"integers ≥ 0")
            at -= len(p)


def _position_ids_args(is_pad):
    return {"is_pad": require_is_pad(is_pad)}


@boundary(_pad_prompts_args)
def pad_prompts(prompts, pad_id: int, side: str = "left") -> tuple[torch.Tensor, torch.Tensor]:
    """A list of B prompts, each a (T_b,) tensor of token IDs → ids (B, T) and is_pad (B, T), T = max T_b.

    ``side="left"`` puts the pads before each prompt (for generation), ``"right"`` after it (for training).
    """
    B, T, device = len(prompts), max(len(p) for p in prompts), prompts[0].device
    ids = torch.full((B, T), pad_id, dtype=torch.long, device=device)      # (B, T), pads everywhere at first
    is_pad = torch.ones(B, T, dtype=torch.bool, device=device)             # (B, T)
    for b, p in enumerate(prompts):
        cols = slice(T - len(p), T) if side == "left" else slice(0, len(p))
        ids[b, cols], is_pad[b, cols] = p, False
    return ids, is_pad


@boundary(_position_ids_args)
def position_ids(is_pad: torch.Tensor) -> torch.Tensor:
    """is_pad (B, T) → positions (B, T): each real token's index among its row's real tokens.

    positions = cumsum(real) − 1, so a row's first real token is at position 0 however many pads come
    before it; pads before it get 0 too (clamped: −1 would index the last row of a table).
    """
    return ((~is_pad).long().cumsum(-1) - 1).clamp(min=0)
