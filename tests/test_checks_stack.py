"""The stack and capstone checkers accept the solution, reject the stub and name every planted mistake."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlib import Block
from attnlib.checks import (
    buggy_attention,
    check_build_blocks,
    check_fixed_attention,
    check_next_token_windows,
    check_run_stack,
)


def stub(*args):
    raise NotImplementedError


# --- build_blocks -------------------------------------------------------------------------------------------------

def build_ok(L, d_model, h):
    return nn.ModuleList(Block(d_model, h) for _ in range(L))


def build_same_block(L, d_model, h):
    block = Block(d_model, h)
    return [block for _ in range(L)]


def build_shared_attention(L, d_model, h):
    blocks = [Block(d_model, h) for _ in range(L)]
    for b in blocks:
        b.attn = blocks[0].attn
    return blocks


def build_shared_mlp(L, d_model, h):
    blocks = [Block(d_model, h) for _ in range(L)]
    for b in blocks[1:]:
        b.mlp = blocks[0].mlp
    return blocks


def build_too_few(L, d_model, h):
    return [Block(d_model, h) for _ in range(1, L)]


def build_too_many(L, d_model, h):
    return [Block(d_model, h) for _ in range(L + 1)]


@pytest.mark.parametrize("fn, label", [
    (build_same_block, "same-block"), (build_shared_attention, "shared-attention"),
    (build_shared_mlp, "shared-mlp"), (build_too_few, "wrong-count"), (build_too_many, "wrong-count"),
])
def test_build_blocks_mistakes(fn, label):
    v = check_build_blocks(fn)
    assert not v.ok and v.mistake == label, v


def test_build_blocks_solution_and_stub():
    assert check_build_blocks(build_ok).ok
    assert check_build_blocks(stub).mistake == "stub"


def test_build_blocks_leaves_the_random_state_alone():
    torch.manual_seed(3)
    a = torch.rand(3)
    torch.manual_seed(3)
    check_build_blocks(build_ok)
    assert torch.equal(torch.rand(3), a)


def test_build_blocks_rejects_other_modules():
    v = check_build_blocks(lambda L, d, h: [nn.Linear(d, d) for _ in range(L)])
    assert not v.ok and v.mistake == "error"


# --- run_stack ----------------------------------------------------------------------------------------------------

def run_ok(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X)
    return ln_f(X)


def run_x0(X0, blocks, ln_f):
    outs = [block(X0) for block in blocks]
    return ln_f(outs[-1])


def run_no_norm(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X)
    return X


def run_norm_every(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = ln_f(block(X))
    return X


def run_reversed(X0, blocks, ln_f):
    X = X0
    for block in reversed(list(blocks)):
        X = block(X)
    return ln_f(X)


def run_norm_first(X0, blocks, ln_f):
    X = ln_f(X0)
    for block in blocks:
        X = block(X)
    return X


@pytest.mark.parametrize("fn, label", [
    (run_x0, "x0-every-block"), (run_no_norm, "no-final-norm"), (run_norm_every, "norm-every-block"),
    (run_reversed, "reversed"), (run_norm_first, "norm-first"),
])
def test_run_stack_mistakes(fn, label):
    v = check_run_stack(fn)
    assert not v.ok and v.mistake == label, v


def test_run_stack_solution_and_stub():
    assert check_run_stack(run_ok).ok
    assert check_run_stack(stub).mistake == "stub"


# --- next_token_windows -------------------------------------------------------------------------------------------

def windows_ok(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y


def windows_no_shift(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    return x, x.clone()


def windows_wrong_way(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s - 1:s + T - 1] for s in starts.tolist()])
    return x, y


def windows_swapped(data, starts, T):
    x, y = windows_ok(data, starts, T)
    return y, x


def windows_by_two(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 2:s + T + 2] for s in starts.tolist()])
    return x, y


@pytest.mark.parametrize("fn, label", [
    (windows_no_shift, "no-shift"), (windows_wrong_way, "wrong-way"), (windows_swapped, "swapped"),
    (windows_by_two, "shift-by-two"),
])
def test_windows_mistakes(fn, label):
    v = check_next_token_windows(fn)
    assert not v.ok and v.mistake == label, v


def test_windows_solution_and_stub():
    assert check_next_token_windows(windows_ok).ok
    assert check_next_token_windows(stub).mistake == "stub"


# --- fixed attention (capstone) -----------------------------------------------------------------------------------

def _future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def attention_ok(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(_future(S.shape[-1]), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def attention_keys_on_rows(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = K @ Q.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(_future(S.shape[-1]), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def attention_mask_after(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    P = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)
    return P.masked_fill(_future(P.shape[-1]), 0.0) @ V


def attention_times_K(X, W_Q, W_K, W_V):
    Q, K = X @ W_Q, X @ W_K
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(_future(S.shape[-1]), float("-inf"))
    return torch.softmax(S, dim=-1) @ K


def attention_no_scale(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = (Q @ K.transpose(-2, -1)).masked_fill(_future(X.shape[-2]), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def attention_wrong_axis(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(_future(S.shape[-1]), float("-inf"))
    return torch.softmax(S, dim=-2) @ V


@pytest.mark.parametrize("fn, label", [
    (buggy_attention, "unchanged"), (attention_keys_on_rows, "keys-on-rows"),
    (attention_mask_after, "mask-after-softmax"), (attention_times_K, "weights-times-K"),
    (attention_no_scale, "no-scale"), (attention_wrong_axis, "softmax-wrong-axis"),
])
def test_fixed_attention_mistakes(fn, label):
    v = check_fixed_attention(fn)
    assert not v.ok and v.mistake == label, v


def test_fixed_attention_solution_and_stub():
    assert check_fixed_attention(attention_ok).ok
    assert check_fixed_attention(stub).mistake == "stub"
