"""Chapter 8: a tiny, deterministic training loop for :class:`attnlib.model.GPT` on a shipped text."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validate import check_device, check_nonnegative, check_number, check_positive, check_shape

__all__ = ["next_token_windows", "random_batch", "train", "evaluate", "evaluate_prefix"]


def next_token_windows(data: torch.Tensor, starts: torch.Tensor, T: int):
    """Inputs (B, T) = data[s : s+T] and targets (B, T) = data[s+1 : s+T+1] for every start s in starts (B,).

    The target at position i is the token that comes right after input position i: the same window
    shifted by one to the left.
    """
    T, = check_positive(T=T)
    _check_data(data)
    check_shape(starts, "starts", "B", float_only=False)
    if starts.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"starts must be an integer tensor (B,), got dtype {starts.dtype}")
    starts = starts.to(data.device)
    if starts.numel() and (int(starts.min()) < 0 or int(starts.max()) + T + 1 > data.numel()):
        raise ValueError(f"every start s needs 0 <= s and s + T + 1 <= N={data.numel()} (T={T}), "
                         f"got starts from {int(starts.min())} to {int(starts.max())}")
    idx = starts[:, None] + torch.arange(T, device=data.device)
    return data[idx], data[idx + 1]


def _check_data(data) -> None:
    check_shape(data, "data", "N", float_only=False)
    if data.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"data must hold integer token IDs (N,), got dtype {data.dtype}")


def random_batch(data: torch.Tensor, T: int, B: int, generator: torch.Generator):
    """B random windows of data (N,): inputs (B, T) and targets (B, T), the same windows shifted by one."""
    T, B = check_positive(T=T, B=B)
    _check_data(data)
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator must be a CPU torch.Generator (the windows are drawn on the CPU), "
                        f"got {getattr(generator, 'device', type(generator).__name__)}")
    if data.numel() <= T:
        raise ValueError(f"data must be a 1-D tensor longer than T={T}, got shape {tuple(data.shape)}")
    start = torch.randint(0, data.numel() - T, (B,), generator=generator)
    return next_token_windows(data, start, T)


def train(model, data: torch.Tensor, *, steps: int = 300, T: int = 64, B: int = 32, lr: float = 3e-3,
          seed: int = 0, device=None) -> list[float]:
    """Train with AdamW on random windows of data (N,) and return the training loss of every step."""
    _check_model(model)
    (steps, T, B), (seed,) = check_positive(steps=steps, T=T, B=B), check_nonnegative(seed=seed)
    lr = check_number(lr, "lr", above=0)
    _check_data(data)
    device = next(model.parameters()).device if device is None else check_device(device)
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
    _check_model(model)
    (T, B, batches), (seed,) = check_positive(T=T, B=B, batches=batches), check_nonnegative(seed=seed)
    _check_data(data)
    g = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = (t.to(device) for t in random_batch(data, T, B, g))
        total += model.loss(x, y).item()
    return total / batches


@torch.no_grad()
def evaluate_prefix(model, data: torch.Tensor, *, T: int = 64, B: int = 32, batches: int = 8, seed: int = 1) -> float:
    """Mean loss when the prediction for position i is computed from tokens 0..i alone (one forward per prefix).

    The windows are those of :func:`evaluate` with the same arguments. This is how a model is used when it
    generates: the future does not exist yet. For a causal model it equals :func:`evaluate`; a model
    trained without the mask loses the future it learned to copy from.
    """
    _check_model(model)
    (T, B, batches), (seed,) = check_positive(T=T, B=B, batches=batches), check_nonnegative(seed=seed)
    _check_data(data)
    g = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = (t.to(device) for t in random_batch(data, T, B, g))
        logits = torch.stack([model(x[:, :i + 1])[:, -1] for i in range(T)], dim=1)   # (B, T, vocab_size)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / batches


def _check_model(model) -> None:
    """A model with parameters and a ``loss(ids, targets)`` method, such as :class:`attnlib.GPT`."""
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "loss", None)):
        raise TypeError(f"model must be a GPT (an nn.Module with a loss(ids, targets) method), "
                        f"got {type(model).__name__}")
    if next(model.parameters(), None) is None:
        raise ValueError("model has no parameters to train or to place on a device")
