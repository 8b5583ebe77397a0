"""Exercise checkers for the heads chapter (chapter 6): splitting into heads, merging them, the whole layer."""

from __future__ import annotations

import math

import torch

from ..attention import attention, attention_weights
from ..heads import merge_heads, split_heads
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------- split
# (B, T, d_model) with h heads; d_head ≠ h and T ≠ h so every wrong layout gives different numbers.
_SPLIT_CASES = [
    (torch.randn(2, 5, 12, generator=_gen(61)), 3),    # d_head = 4
    (torch.randn(1, 4, 10, generator=_gen(62)), 2),    # d_head = 5
]

_SPLIT_MISTAKES = [
    Mistake("no-transpose",
            "you reshaped (B, T, d_model) straight to (B, h, T, d_head). That cuts the numbers in memory order, "
            "so one 'row' of a head mixes pieces of several positions. Reshape to (B, T, h, d_head) first, "
            "then swap the T and h axes with .transpose(1, 2).",
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h)),
    Mistake("interleaved",
            "your heads take every h-th column (reshape to (B, T, d_head, h)). Head k owns one contiguous "
            "block of d_head columns, k·d_head … (k+1)·d_head − 1: reshape to (B, T, h, d_head).",
            lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2)),
    Mistake("no-split",
            "the result still has the heads side by side in the last axis. Reshape to (B, T, h, d_head) and "
            "transpose to (B, h, T, d_head).",
            lambda x, h: x),
]


@checker
def check_split_heads(fn) -> Verdict:
    """Check ``fn(x, h)``: x (B, T, d_model) → (B, h, T, d_head) with d_head = d_model / h."""
    return judge(fn, _SPLIT_CASES, split_heads, _SPLIT_MISTAKES,
                 success="every head gets its own block of columns, and every row is still one position.")


# ---------------------------------------------------------------------------------------------------- merge
_MERGE_CASES = [
    (torch.randn(2, 3, 5, 4, generator=_gen(63)),),    # (B, h, T, d_head)
    (torch.randn(1, 2, 4, 3, generator=_gen(64)),),
]


def _merge_no_transpose(x):
    B, h, T, d_head = x.shape
    return x.reshape(B, T, h * d_head)


def _merge_interleaved(x):
    B, h, T, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, d_head * h)


def _merge_reversed(x):
    return merge_heads(x.flip(1))


_MERGE_MISTAKES = [
    Mistake("no-transpose",
            "you reshaped (B, h, T, d_head) straight to (B, T, h·d_head), which glues rows of different "
            "positions together. Move the head axis next to d_head first: .transpose(1, 2), then reshape.",
            _merge_no_transpose),
    Mistake("interleaved",
            "your output interleaves the heads (head 0's first number, head 1's first number, …). Concatenate "
            "them side by side: transpose to (B, T, h, d_head), then reshape to (B, T, h·d_head).",
            _merge_interleaved),
    Mistake("wrong-order",
            "the heads are concatenated in reverse order. Head 0 must come first, so W_O's first d_head rows "
            "read head 0.",
            _merge_reversed),
]


@checker
def check_merge_heads(fn) -> Verdict:
    """Check ``fn(x)``: x (B, h, T, d_head) → (B, T, h·d_head), heads side by side for every position."""
    return judge(fn, _MERGE_CASES, merge_heads, _MERGE_MISTAKES,
                 success="every position gets its h head outputs side by side, head 0 first.")


# ------------------------------------------------------------------------------------------------ multi-head
def _multi_head_reference(X, W_Q, W_K, W_V, W_O, h: int, causal: bool = True):
    """Causal multi-head attention with explicit (d_model, d_model) matrices: X (B, T, d_model) → (B, T, d_model)."""
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V, causal=causal)) @ W_O


def _mha_no_W_O(X, W_Q, W_K, W_V, W_O, h):
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V))


def _mha_sqrt_d_model(X, W_Q, W_K, W_V, W_O, h):
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    # attention_weights divides by √d_head; multiply back and divide by √d_model instead.
    P = attention_weights(Q * math.sqrt(Q.shape[-1] / X.shape[-1]), K)
    return merge_heads(P @ V) @ W_O


def _mha_no_mask(X, W_Q, W_K, W_V, W_O, h):
    return _multi_head_reference(X, W_Q, W_K, W_V, W_O, h, causal=False)


def _mha_no_transpose(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = ((X @ W).reshape(B, h, T, d_model // h) for W in (W_Q, W_K, W_V))
    return attention(Q, K, V).transpose(1, 2).reshape(B, T, d_model) @ W_O


def _mha_cases():
    g = _gen(65)
    cases = []
    for B, T, d_model, h in ((1, 5, 12, 3), (2, 4, 8, 2)):
        X = torch.randn(B, T, d_model, generator=g)
        Ws = [torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(4)]
        cases.append((X, *Ws, h))
    return cases


_MHA_CASES = _mha_cases()

_MHA_MISTAKES = [
    Mistake("no-W_O",
            "the heads are concatenated but never mixed: multiply the (B, T, d_model) concatenation by W_O "
            "at the end.",
            _mha_no_W_O),
    Mistake("sqrt-d_model",
            "you scaled the scores by √d_model. Each head's dot products have d_head terms, so divide by "
            "√d_head = √(d_model / h).",
            _mha_sqrt_d_model),
    Mistake("no-mask",
            "the output depends on future tokens: add the causal mask to every head's scores before softmax.",
            _mha_no_mask),
    Mistake("no-transpose",
            "you reshaped to (B, h, T, d_head) without the transpose, so a head's rows are not positions. "
            "Reshape to (B, T, h, d_head) and .transpose(1, 2) (and back before W_O).",
            _mha_no_transpose),
]


@checker
def check_multi_head(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O, h)``: X (B, T, d_model) → (B, T, d_model); W_… are (d_model, d_model)."""
    return judge(fn, _MHA_CASES, _multi_head_reference, _MHA_MISTAKES,
                 success="h causal heads, concatenated and projected by W_O, exactly as the library computes.")
