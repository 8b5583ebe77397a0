"""Chapter 1: token IDs → embeddings. An embedding is a row lookup in a (vocab_size, d_model) table."""

from __future__ import annotations

import torch
from torch import nn

from ._validate import (
    boundary,
    require_fits,
    require_ids,
    require_nonnegative,
    require_positive,
    require_readable,
    require_shape,
)

__all__ = ["TokenEmbedding", "require_ids", "one_hot_embedding", "running_X0"]


# ------------------------------------------------------------------------------------------ argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _ids_args(ids, table) -> None:
    """Token IDs for a (vocab_size, d_model) table: on its device, then (only then) their values are read."""
    if isinstance(ids, torch.Tensor) and ids.device == table.device:
        require_readable(ids, "ids")   # a model on 'meta' has no values to look up, nor have its ids
    require_ids(ids, table.shape[0], like=table)


def _one_hot_args(ids, table) -> dict:
    require_shape(table, "table", "vocab_size d_model")
    _ids_args(ids, table)


def _init_args(self, vocab_size, d_model) -> dict:
    vocab_size, d_model = require_positive(vocab_size=vocab_size, d_model=d_model)
    require_fits("this embedding table", {f"vocab_size={vocab_size}, d_model={d_model}": vocab_size * d_model})
    return {"vocab_size": vocab_size, "d_model": d_model}


def _forward_args(self, ids) -> None:
    _ids_args(ids, self.table)


def _running_X0_args(d_model, seed) -> dict:
    d_model, = require_positive(d_model=d_model)
    seed, = require_nonnegative(seed=seed)
    from .text import ToyTokenizer, example_ids

    T, V = len(example_ids()[1]), ToyTokenizer().vocab_size
    require_fits("running_X0", {f"d_model={d_model}": (V + 3 * T) * d_model}, what="numbers")
    return {"d_model": d_model, "seed": seed}


@boundary(_one_hot_args)
def one_hot_embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The same lookup written as a matrix product: one_hot(ids) (…, T, vocab) @ table (vocab, d_model)."""
    one_hot = torch.nn.functional.one_hot(ids.long(), table.shape[0]).to(table.dtype)   # (..., T, vocab_size)
    return one_hot @ table   # (..., T, d_model)


class TokenEmbedding(nn.Module):
    """A learned (vocab_size, d_model) table; ids (B, T) or (T,) → X₀ (B, T, d_model) or (T, d_model)."""

    @boundary(_init_args)
    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        self.table = nn.Parameter(torch.randn(vocab_size, d_model) * 0.02)

    @boundary(_forward_args)
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]   # (B, T) → (B, T, d_model): row ids[b, t] of the table


@boundary(_running_X0_args)
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
