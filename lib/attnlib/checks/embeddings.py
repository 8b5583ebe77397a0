"""Exercise checkers for chapter 1: embedding lookup, sinusoidal positions, rotary pairs."""

from __future__ import annotations

import torch

from ..position import apply_rope, rope_angles, sinusoidal_positions
from ._core import Mistake, checker, judge

__all__ = ["check_embed", "check_sinusoidal", "check_rotate_pairs"]

_g = torch.Generator().manual_seed(1)
_TABLE = torch.randn(11, 6, generator=_g)          # vocab_size=11 ≠ d_model=6, so rows and columns differ
_IDS = [torch.tensor([3, 0, 5, 3, 1]), torch.tensor([3, 0, 7, 3, 10]), torch.tensor([[1, 2], [9, 9]])]


@checker
def check_embed(fn) -> object:
    """``fn(ids, table)``: ids (T,) or (B, T), table (vocab_size, d_model) → (…, T, d_model)."""
    mistakes = [
        Mistake("columns", "you picked columns of the table. Each token owns a *row* of the (vocab_size, d_model) "
                "table: index the first axis, table[ids].", lambda ids, t: t[:, ids]),
        Mistake("columns-transposed", "you indexed columns and transposed. Each token owns a *row*: table[ids].",
                lambda ids, t: t[:, ids].transpose(0, -1)),
        Mistake("one-hot-transposed", "your one-hot matrix multiplies the table from the wrong side: "
                "one_hot(ids) has shape (T, vocab_size), so one_hot(ids) @ table is (T, d_model).",
                lambda ids, t: t.T @ torch.nn.functional.one_hot(ids, t.shape[0]).to(t).transpose(-2, -1)),
    ]
    return judge(fn, [(ids, _TABLE) for ids in _IDS], lambda ids, t: t[ids], mistakes,
                 success="every token got its own row of the table.")


def _sinusoid(T, d, swap=False, freq_step=2, sign=-1):
    t = torch.arange(T, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    freq = 10000.0 ** (sign * (i if freq_step == 2 else i / 2) / d)
    P = torch.zeros(T, d)
    P[:, 0::2], P[:, 1::2] = (torch.cos(t * freq), torch.sin(t * freq)) if swap else (torch.sin(t * freq),
                                                                                      torch.cos(t * freq))
    return P


@checker
def check_sinusoidal(fn) -> object:
    """``fn(T, d_model)`` → (T, d_model) sinusoidal position table."""
    mistakes = [
        Mistake("sin-cos-swapped", "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos.",
                lambda T, d: _sinusoid(T, d, swap=True)),
        Mistake("exponent-i", "the frequency exponent uses the pair index i where it needs the column index 2i: "
                "freq = 10000 ** (-2i / d_model).", lambda T, d: _sinusoid(T, d, freq_step=1)),
        Mistake("exponent-sign", "the frequencies grow instead of shrink: divide the position by 10000^(2i/d_model), "
                "i.e. multiply by 10000 ** (-2i / d_model).", lambda T, d: _sinusoid(T, d, sign=1)),
    ]
    return judge(fn, [(7, 8), (3, 16)], sinusoidal_positions, mistakes, atol=1e-4,
                 success="the table matches sin/cos at every position and frequency.")


def _rotate(x, theta, sign=1, halves=False):
    if halves:
        a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    c, s = theta.cos(), sign * theta.sin()
    out = torch.empty_like(x)
    if halves:
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


@checker
def check_rotate_pairs(fn) -> object:
    """``fn(x, theta)``: x (T, d), theta (T, d/2) → x with each pair (x[2i], x[2i+1]) rotated by theta[:, i]."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 8, generator=g)
    theta = rope_angles(5, 8).float()
    mistakes = [
        Mistake("wrong-direction", "you rotate by −θ: the new pair is (a·cosθ − b·sinθ, a·sinθ + b·cosθ).",
                lambda x, th: _rotate(x, th, sign=-1)),
        Mistake("halves", "you paired the first half with the second half. This course pairs neighbours: "
                "(x[0], x[1]), (x[2], x[3]), … i.e. x[..., 0::2] with x[..., 1::2].",
                lambda x, th: _rotate(x, th, halves=True)),
    ]
    return judge(fn, [(x, theta)], lambda x, th: apply_rope(x), mistakes,
                 success="every pair is rotated by its angle, exactly as apply_rope does.")
