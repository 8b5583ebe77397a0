"""Chapter 1: token IDs → embeddings. An embedding is a row lookup in a (vocab_size, d_model) table."""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_ids, check_nonnegative, check_positive, check_shape

__all__ = ["TokenEmbedding", "check_ids", "one_hot_embedding", "running_X0"]


def one_hot_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The same lookup written as a matrix product: one_hot(ids) (…, T, vocab) @ table (vocab, d_model)."""
    d = check_shape(table, "table", "vocab_size d_model")
    check_ids(ids, d["vocab_size"], like=table)
    one_hot = torch.nn.functional.one_hot(ids.long(), d["vocab_size"]).to(table.dtype)
    return one_hot @ table.contiguous()   # any memory layout gives the bits of a plain copy


class TokenEmbedding(nn.Module):
    """A learned (vocab_size, d_model) table; ids (B, T) or (T,) → X₀ (B, T, d_model) or (T, d_model)."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        vocab_size, d_model = check_positive(vocab_size=vocab_size, d_model=d_model)
        self.vocab_size, self.d_model = vocab_size, d_model
        self.table = nn.Parameter(torch.randn(vocab_size, d_model) * 0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_ids(ids, self.vocab_size, like=self.table)
        return self.table[ids]


def running_X0(d_model: int = 16, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """X₀ (1, T, d_model) of the running example and its T token pieces.

    Token embeddings from a table seeded with ``seed`` plus sinusoidal positions: chapter 1 builds it
    step by step, later chapters start from it.
    """
    from .position import sinusoidal_positions
    from .text import ToyTokenizer, example_ids

    d_model, = check_positive(d_model=d_model)
    seed, = check_nonnegative(seed=seed)
    ids, pieces = example_ids()
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(ToyTokenizer().vocab_size, d_model, generator=g)
    return (table[ids] + sinusoidal_positions(len(pieces), d_model))[None], pieces
