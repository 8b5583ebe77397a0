"""Chapter 1: token IDs → embeddings. An embedding is a row lookup in a (vocab_size, d_model) table."""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_positive, check_tensor

__all__ = ["TokenEmbedding", "check_ids", "one_hot_embedding", "running_X0"]


def check_ids(ids, vocab_size: int, name: str = "ids") -> torch.Tensor:
    """Check that ``ids`` is an integer tensor of shape (T,) or (B, T) with values in 0..vocab_size-1."""
    check_tensor(ids, name)
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor (torch.long), got dtype {ids.dtype}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"{name} must be (T,) or (B, T), got {tuple(ids.shape)}")
    if ids.shape[-1] == 0:
        raise ValueError(f"{name} is an empty sequence: T must be at least 1, got shape {tuple(ids.shape)}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"token id {bad} is outside the vocabulary 0..{vocab_size - 1}")
    return ids


def one_hot_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The same lookup written as a matrix product: one_hot(ids) (…, T, vocab) @ table (vocab, d_model)."""
    check_tensor(table, "table")
    check_ids(ids, table.shape[0])
    one_hot = torch.nn.functional.one_hot(ids, table.shape[0]).to(table.dtype)
    return one_hot @ table


class TokenEmbedding(nn.Module):
    """A learned (vocab_size, d_model) table; ids (B, T) or (T,) → X₀ (B, T, d_model) or (T, d_model)."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        check_positive(vocab_size=vocab_size, d_model=d_model)
        self.vocab_size, self.d_model = vocab_size, d_model
        self.table = nn.Parameter(torch.randn(vocab_size, d_model) * 0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_ids(ids, self.vocab_size)
        return self.table[ids]


def running_X0(d_model: int = 16, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """X₀ (1, T, d_model) of the running example and its T token pieces.

    Token embeddings from a table seeded with ``seed`` plus sinusoidal positions: chapter 1 builds it
    step by step, later chapters start from it.
    """
    from .position import sinusoidal_positions
    from .text import ToyTokenizer, example_ids

    ids, pieces = example_ids()
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(ToyTokenizer().vocab_size, d_model, generator=g)
    return (table[ids] + sinusoidal_positions(len(pieces), d_model))[None], pieces
