"""The chapter 7 checkers accept the solution, name every planted mistake, and recognise the stub."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib.checks import check_layer_norm, check_mlp, check_pre_norm_block


def stub(*args):
    raise NotImplementedError


# ------------------------------------------------------------------------------------------ LayerNorm
def ln_ok(X, gamma, beta):
    mu = X.mean(-1, keepdim=True)
    var = ((X - mu) ** 2).mean(-1, keepdim=True)
    return (X - mu) / torch.sqrt(var + 1e-5) * gamma + beta


def ln_wrong_axis(X, gamma, beta):
    mu = X.mean(1, keepdim=True)
    var = ((X - mu) ** 2).mean(1, keepdim=True)
    return (X - mu) / torch.sqrt(var + 1e-5) * gamma + beta


def ln_unbiased(X, gamma, beta):
    return (X - X.mean(-1, keepdim=True)) / torch.sqrt(X.var(-1, keepdim=True) + 1e-5) * gamma + beta


def ln_no_affine(X, gamma, beta):
    mu = X.mean(-1, keepdim=True)
    return (X - mu) / torch.sqrt(((X - mu) ** 2).mean(-1, keepdim=True) + 1e-5)


def ln_no_centering(X, gamma, beta):
    var = X.var(-1, keepdim=True, unbiased=False)
    return X / torch.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.parametrize("fn", [ln_ok, lambda X, g, b: F.layer_norm(X, X.shape[-1:], g, b)])
def test_layer_norm_solution_is_accepted(fn):
    v = check_layer_norm(fn)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(ln_wrong_axis, "wrong-axis"), (ln_unbiased, "unbiased-variance"),
                                       (ln_no_affine, "no-gamma-beta"), (ln_no_centering, "no-centering"),
                                       (stub, "stub")])
def test_layer_norm_mistakes_are_named(fn, label):
    v = check_layer_norm(fn)
    assert not v.ok and v.mistake == label, v


# ------------------------------------------------------------------------------------------ MLP
def mlp_ok(X, W_1, b_1, W_2, b_2):
    return F.gelu(X @ W_1 + b_1) @ W_2 + b_2


def mlp_relu(X, W_1, b_1, W_2, b_2):
    return torch.relu(X @ W_1 + b_1) @ W_2 + b_2


def mlp_linear(X, W_1, b_1, W_2, b_2):
    return (X @ W_1 + b_1) @ W_2 + b_2


def mlp_activation_last(X, W_1, b_1, W_2, b_2):
    return F.gelu((X @ W_1 + b_1) @ W_2 + b_2)


def mlp_tanh(X, W_1, b_1, W_2, b_2):
    return F.gelu(X @ W_1 + b_1, approximate="tanh") @ W_2 + b_2


def test_mlp_solution_is_accepted():
    v = check_mlp(mlp_ok)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(mlp_relu, "relu"), (mlp_linear, "no-activation"),
                                       (mlp_activation_last, "activation-last"), (mlp_tanh, "tanh-gelu"),
                                       (stub, "stub")])
def test_mlp_mistakes_are_named(fn, label):
    v = check_mlp(fn)
    assert not v.ok and v.mistake == label, v


# ------------------------------------------------------------------------------------------ Pre-Norm block
def block_ok(X, block):
    H = X + block.attn(block.ln_1(X))
    return H + block.mlp(block.ln_2(H))


def block_mlp_from_X(X, block):
    A = block.attn(block.ln_1(X))
    return X + A + block.mlp(block.ln_2(X))


def block_post_norm(X, block):
    H = block.ln_1(X + block.attn(X))
    return block.ln_2(H + block.mlp(H))


def block_no_residual_attn(X, block):
    H = block.attn(block.ln_1(X))
    return H + block.mlp(block.ln_2(H))


def block_no_residual_mlp(X, block):
    H = X + block.attn(block.ln_1(X))
    return block.mlp(block.ln_2(H))


def block_norms_swapped(X, block):
    H = X + block.attn(block.ln_2(X))
    return H + block.mlp(block.ln_1(H))


@pytest.mark.parametrize("fn", [block_ok, lambda X, block: block(X)])
def test_block_solution_is_accepted(fn):
    v = check_pre_norm_block(fn)
    assert v.ok and v.mistake is None, v


@pytest.mark.parametrize("fn, label", [(block_mlp_from_X, "mlp-from-X"), (block_post_norm, "post-norm"),
                                       (block_no_residual_attn, "no-residual-attn"),
                                       (block_no_residual_mlp, "no-residual-mlp"),
                                       (block_norms_swapped, "norms-swapped"), (stub, "stub")])
def test_block_mistakes_are_named(fn, label):
    v = check_pre_norm_block(fn)
    assert not v.ok and v.mistake == label, v
