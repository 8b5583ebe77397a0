"""Chapter 8: a tiny, deterministic training loop for :class:`attnlib.model.GPT` on a shipped text."""

from __future__ import annotations

import math

import torch

from ._validate import check_positive

__all__ = ["random_batch", "train", "evaluate"]


def random_batch(data: torch.Tensor, T: int, B: int, generator: torch.Generator):
    """B random windows of data (N,): inputs (B, T) and targets (B, T), the same windows shifted by one."""
    check_positive(T=T, B=B)
    if data.dim() != 1 or data.numel() <= T:
        raise ValueError(f"data must be a 1-D tensor longer than T={T}, got shape {tuple(data.shape)}")
    start = torch.randint(0, data.numel() - T, (B,), generator=generator)
    idx = start[:, None] + torch.arange(T)
    return data[idx], data[idx + 1]


def train(model, data: torch.Tensor, *, steps: int = 300, T: int = 64, B: int = 32, lr: float = 3e-3,
          seed: int = 0, device=None) -> list[float]:
    """Train with AdamW on random windows of data (N,) and return the training loss of every step."""
    check_positive(steps=steps)
    device = device or next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    losses = []
    for _ in range(steps):
        x, y = (t.to(device) for t in random_batch(data, T, B, g))
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def evaluate(model, data: torch.Tensor, *, T: int = 64, B: int = 32, batches: int = 8, seed: int = 1) -> float:
    """Mean loss over a fixed set of random windows of data (N,)."""
    g = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = (t.to(device) for t in random_batch(data, T, B, g))
        total += model.loss(x, y).item()
    return total / batches
