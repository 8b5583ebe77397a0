"""The chapter 6 checkers accept the solution, name every planted mistake, and recognise the stub."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib import MultiHeadAttention, merge_heads, split_heads
from attnlib.attention import attention, attention_weights
from attnlib.checks import (
    buggy_multi_head,
    check_attention_parameters,
    check_fixed_multi_head,
    check_merge_heads,
    check_multi_head,
    check_split_heads,
)
from conftest import assert_accepted, assert_each_mistake_named, assert_mistakes_distinct, assert_named, stub


def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


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


def split_last_two_swapped(x, h):
    B, T, d_model = x.shape
    return x.view(B, T, h, d_model // h).transpose(1, 2).transpose(2, 3)


def split_nothing(x, h):
    return x


@pytest.mark.parametrize("fn", [split_ok, split_heads])
def test_split_solution_is_accepted(fn):
    v = check_split_heads(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(split_no_transpose, "no-transpose"), (split_interleaved, "interleaved"),
                                       (split_last_two_swapped, "wrong-axes"), (split_nothing, "no-split"),
                                       (stub, "stub")])
def test_split_mistakes_are_named(fn, label):
    v = check_split_heads(fn)
    assert_named(v, label)


def test_split_tests_T_equal_to_d_head_and_not():
    """An answer right only when T ≠ d_head (or only when T = d_head) must fail."""
    def right_only_if_T_is_not_d_head(x, h):
        out = split_ok(x, h)
        return out if x.shape[1] != x.shape[2] // h else out.transpose(-2, -1)

    def right_only_if_T_is_d_head(x, h):
        out = split_ok(x, h)
        return out if x.shape[1] == x.shape[2] // h else out + 1

    assert not check_split_heads(right_only_if_T_is_not_d_head).ok
    assert not check_split_heads(right_only_if_T_is_d_head).ok


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


def merge_last_two_swapped(x):
    B, h, T, d_head = x.shape
    return x.mT.reshape(B, T, h * d_head)


def merge_reversed(x):
    return torch.cat([x[:, k] for k in reversed(range(x.shape[1]))], dim=-1)


@pytest.mark.parametrize("fn", [merge_ok, merge_heads, lambda x: torch.cat(list(x.unbind(1)), dim=-1)])
def test_merge_solution_is_accepted(fn):
    v = check_merge_heads(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(merge_no_transpose, "no-transpose"), (merge_interleaved, "interleaved"),
                                       (merge_last_two_swapped, "wrong-axes"), (merge_reversed, "wrong-order"),
                                       (stub, "stub")])
def test_merge_mistakes_are_named(fn, label):
    v = check_merge_heads(fn)
    assert_named(v, label)


# ------------------------------------------------------------------------------------------ multi-head
def mha_ok(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = ((X @ W).reshape(B, T, h, d_head).transpose(1, 2) for W in (W_Q, W_K, W_V))
    S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)
    S = S.masked_fill(future(T), float("-inf"))
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
    S = S.masked_fill(future(T), float("-inf"))
    return merge_heads(torch.softmax(S, -1) @ V) @ W_O


def mha_no_mask(X, W_Q, W_K, W_V, W_O, h):
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention_weights(Q, K, causal=False) @ V) @ W_O


def mha_no_transpose(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = ((X @ W).reshape(B, h, T, d_model // h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O


def mha_QtK(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    S = (Q.mT @ K / math.sqrt(d_model // h)).masked_fill(future(T), float("-inf"))
    return merge_heads(torch.softmax(S, -1) @ V) @ W_O


@pytest.mark.parametrize("fn", [mha_ok, mha_per_head])
def test_multi_head_solution_is_accepted(fn):
    v = check_multi_head(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(mha_no_W_O, "no-W_O"), (mha_sqrt_d_model, "sqrt-d_model"),
                                       (mha_no_mask, "no-mask"), (mha_no_transpose, "no-transpose"),
                                       (mha_QtK, "scores-QtK"), (stub, "stub")])
def test_multi_head_mistakes_are_named(fn, label):
    v = check_multi_head(fn)
    assert_named(v, label)


# ------------------------------------------------------------------------------------------ find the bug
def fixed_v_still_wrong(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    d = d_model // h
    Q = (X @ W_Q).reshape(B, T, h, d).transpose(1, 2)
    K = (X @ W_K).reshape(B, T, h, d).transpose(1, 2)
    V = (X @ W_V).reshape(B, h, T, d)
    S = (Q @ K.mT / math.sqrt(d)).masked_fill(future(T), float("-inf"))
    return (torch.softmax(S, -1) @ V).transpose(1, 2).reshape(B, T, d_model) @ W_O


def fixed_merge_broken(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return attention(Q, K, V).reshape(B, T, d_model) @ W_O


def fixed_wrong_axes(X, W_Q, W_K, W_V, W_O, h):
    B, T, d_model = X.shape
    d = d_model // h
    Q, K, V = ((X @ W).view(B, T, h, d).permute(0, 2, 3, 1) for W in (W_Q, W_K, W_V))
    S = (Q @ K.mT / math.sqrt(d)).masked_fill(future(T), float("-inf"))
    return (torch.softmax(S, -1) @ V).transpose(1, 2).reshape(B, T, d_model) @ W_O


def test_fixed_multi_head_accepts_the_fix():
    assert check_fixed_multi_head(mha_ok).ok
    assert check_fixed_multi_head(mha_per_head).ok


@pytest.mark.parametrize("fn, label", [(buggy_multi_head, "unchanged"), (fixed_v_still_wrong, "v-unfixed"),
                                       (fixed_merge_broken, "merge-broken"), (fixed_wrong_axes, "wrong-axes"),
                                       (stub, "stub")])
def test_fixed_multi_head_mistakes_are_named(fn, label):
    v = check_fixed_multi_head(fn)
    assert_named(v, label)


def test_the_buggy_multi_head_runs_silently_and_is_wrong():
    X, Ws = torch.randn(2, 5, 12), [torch.randn(12, 12) for _ in range(4)]
    out = buggy_multi_head(X, *Ws, 3)
    assert out.shape == (2, 5, 12) and not torch.allclose(out, mha_ok(X, *Ws, 3))


# ------------------------------------------------------------------------------------------ predict: parameters
def test_parameter_prediction():
    d, h = 96, 8
    assert sum(p.numel() for p in MultiHeadAttention(d, h).parameters()) == 4 * d * d + 4 * d
    assert_named(check_attention_parameters(...), "stub")
    v = check_attention_parameters(4 * d * d + 4 * d)
    assert v.ok and "37,248" in v.message, v
    assert not check_attention_parameters(4 * d * d + 4 * d + 1).ok          # a count is exact
    assert_named(check_attention_parameters(12345), "values")
    assert_named(check_attention_parameters("many"), "type")


@pytest.mark.parametrize("guess, label", [
    (96 * 96 * 4, "no-bias"), (8 * (4 * 96 * 96 + 4 * 96), "times-h"), (3 * 96 * 96 + 3 * 96, "no-W_O"),
    (4 * 96 * 12 + 4 * 12, "one-head"), (8 * 4 * (12 * 12 + 12), "d_head-squared"),
])
def test_parameter_guesses_are_named(guess, label):
    v = check_attention_parameters(guess)
    assert_named(v, label)
    assert f"{guess:,}" in v.message


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    from attnlib.checks import heads

    for check, mistakes, cases, reference in [
        (check_split_heads, heads._SPLIT_MISTAKES, heads._split_cases(), split_heads),
        (check_merge_heads, heads._MERGE_MISTAKES, heads._merge_cases(), merge_heads),
        (check_multi_head, heads._MHA_MISTAKES, heads._mha_cases(), heads._multi_head_reference),
        (check_fixed_multi_head, heads._FIX_MISTAKES, heads._mha_cases(), heads._multi_head_reference),
    ]:
        assert_each_mistake_named(check, mistakes)
        assert_mistakes_distinct(cases[0], reference, mistakes)


def test_the_variant_with_its_default_switches_is_the_reference():
    from attnlib.checks import heads
    from attnlib.checks._core import _close

    for case in heads._mha_cases():
        assert _close(heads._mha_variant(*case), heads._multi_head_reference(*case), 1e-5)
    assert_accepted(check_multi_head(heads._mha_variant))
