"""The chapter 6 checkers accept the solution, name every planted mistake, and recognise the stub."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib import merge_heads, split_heads
from attnlib.attention import attention, attention_weights
from attnlib.checks import check_merge_heads, check_multi_head, check_split_heads


def stub(*args):
    raise NotImplementedError


# ------------------------------------------------------------------------------------------ split_heads
def split_ok(x, h):
    B, T, d_model = x.shape
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)


def split_no_transpose(x, h):
    B, T, d_model = x.shape
    return x.reshape(B, h, T, d_model // h)


def split_interleaved(x, h):
    B, T, d_model = x.shape
    return x.reshape(B, T, d_model // h, h).permute(0, 3, 1, 2)


def split_nothing(x, h):
    return x


@pytest.mark.parametrize("fn", [split_ok, split_heads])
def test_split_solution_is_accepted(fn):
    v = check_split_heads(fn)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(split_no_transpose, "no-transpose"), (split_interleaved, "interleaved"),
                                       (split_nothing, "no-split"), (stub, "stub")])
def test_split_mistakes_are_named(fn, label):
    v = check_split_heads(fn)
    assert not v.ok and v.mistake == label, v


# ------------------------------------------------------------------------------------------ merge_heads
def merge_ok(x):
    B, h, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_head)


def merge_no_transpose(x):
    B, h, T, d_head = x.shape
    return x.reshape(B, T, h * d_head)


def merge_interleaved(x):
    B, h, T, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, h * d_head)


def merge_reversed(x):
    return torch.cat([x[:, k] for k in reversed(range(x.shape[1]))], dim=-1)


@pytest.mark.parametrize("fn", [merge_ok, merge_heads, lambda x: torch.cat(list(x.unbind(1)), dim=-1)])
def test_merge_solution_is_accepted(fn):
    v = check_merge_heads(fn)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(merge_no_transpose, "no-transpose"), (merge_interleaved, "interleaved"),
                                       (merge_reversed, "wrong-order"), (stub, "stub")])
def test_merge_mistakes_are_named(fn, label):
    v = check_merge_heads(fn)
    assert not v.ok and v.mistake == label, v


# ------------------------------------------------------------------------------------------ multi-head
def mha_ok(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = ((X @ W).reshape(B, T, h, d_head).transpose(1, 2) for W in (W_Q, W_K, W_V))
    S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)
    S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(S, dim=-1) @ V
    return out.transpose(1, 2).reshape(B, T, d_model) @ W_O


def mha_per_head(X, W_Q, W_K, W_V, W_O, h):
    d_head = X.shape[-1] // h
    outs = []
    for k in range(h):
        cols = slice(k * d_head, (k + 1) * d_head)
        outs.append(attention(X @ W_Q[:, cols], X @ W_K[:, cols], X @ W_V[:, cols]))
    return torch.cat(outs, dim=-1) @ W_O


def mha_no_W_O(X, W_Q, W_K, W_V, W_O, h):
    return merge_heads(attention(*(split_heads(X @ W, h) for W in (W_Q, W_K, W_V))))


def mha_sqrt_d_model(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    S = Q @ K.transpose(-2, -1) / math.sqrt(d_model)
    S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return merge_heads(torch.softmax(S, -1) @ V) @ W_O


def mha_no_mask(X, W_Q, W_K, W_V, W_O, h):
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention_weights(Q, K, causal=False) @ V) @ W_O


def mha_no_transpose(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = ((X @ W).reshape(B, h, T, d_model // h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O


@pytest.mark.parametrize("fn", [mha_ok, mha_per_head])
def test_multi_head_solution_is_accepted(fn):
    v = check_multi_head(fn)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(mha_no_W_O, "no-W_O"), (mha_sqrt_d_model, "sqrt-d_model"),
                                       (mha_no_mask, "no-mask"), (mha_no_transpose, "no-transpose"),
                                       (stub, "stub")])
def test_multi_head_mistakes_are_named(fn, label):
    v = check_multi_head(fn)
    assert not v.ok and v.mistake == label, v
