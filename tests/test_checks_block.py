"""The chapter 7 checkers accept the solution, name every planted mistake, and recognise the stub."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib.checks import check_layer_norm, check_mlp, check_mlp_flops, check_pre_norm_block, check_rms_norm
from conftest import assert_accepted, assert_each_mistake_named, assert_mistakes_distinct, assert_named, stub


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


def ln_no_eps(X, gamma, beta):
    mu = X.mean(-1, keepdim=True)
    return (X - mu) / ((X - mu) ** 2).mean(-1, keepdim=True).sqrt() * gamma + beta


def ln_eps_outside(X, gamma, beta):
    mu = X.mean(-1, keepdim=True)
    return (X - mu) / (X.std(-1, keepdim=True, unbiased=False) + 1e-5) * gamma + beta


def ln_no_affine(X, gamma, beta):
    mu = X.mean(-1, keepdim=True)
    return (X - mu) / torch.sqrt(((X - mu) ** 2).mean(-1, keepdim=True) + 1e-5)


def ln_no_centering(X, gamma, beta):
    var = X.var(-1, keepdim=True, unbiased=False)
    return X / torch.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.parametrize("fn", [ln_ok, lambda X, g, b: F.layer_norm(X, X.shape[-1:], g, b)])
def test_layer_norm_solution_is_accepted(fn):
    v = check_layer_norm(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(ln_wrong_axis, "wrong-axis"), (ln_unbiased, "unbiased-variance"),
                                       (ln_no_eps, "no-eps"), (ln_eps_outside, "eps-outside-sqrt"),
                                       (ln_no_affine, "no-gamma-beta"), (ln_no_centering, "no-centering"),
                                       (stub, "stub")])
def test_layer_norm_mistakes_are_named(fn, label):
    v = check_layer_norm(fn)
    assert_named(v, label)


def test_layer_norm_with_another_epsilon_fails():
    """ε = 1e-6 differs from 1e-5 only on a row of tiny variance: the checker has one."""
    v = check_layer_norm(lambda X, g, b: F.layer_norm(X, X.shape[-1:], g, b, eps=1e-6))
    assert not v.ok, v


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


def mlp_no_b1(X, W_1, b_1, W_2, b_2):
    return F.gelu(X @ W_1) @ W_2 + b_2


def mlp_no_b2(X, W_1, b_1, W_2, b_2):
    return F.gelu(X @ W_1 + b_1) @ W_2


def test_mlp_solution_is_accepted():
    v = check_mlp(mlp_ok)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(mlp_relu, "relu"), (mlp_linear, "no-activation"),
                                       (mlp_activation_last, "activation-last"), (mlp_tanh, "tanh-gelu"),
                                       (mlp_no_b1, "no-bias"), (mlp_no_b2, "no-bias"), (stub, "stub")])
def test_mlp_mistakes_are_named(fn, label):
    v = check_mlp(fn)
    assert_named(v, label)


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


def block_residual_normed(X, block):
    Z = block.ln_1(X)
    H = Z + block.attn(Z)
    return H + block.mlp(block.ln_2(H))


@pytest.mark.parametrize("fn", [block_ok, lambda X, block: block(X)])
def test_block_solution_is_accepted(fn):
    v = check_pre_norm_block(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(block_mlp_from_X, "mlp-from-X"), (block_post_norm, "post-norm"),
                                       (block_no_residual_attn, "no-residual-attn"),
                                       (block_no_residual_mlp, "no-residual-mlp"),
                                       (block_norms_swapped, "norms-swapped"),
                                       (block_residual_normed, "residual-normed"), (stub, "stub")])
def test_block_mistakes_are_named(fn, label):
    v = check_pre_norm_block(fn)
    assert_named(v, label)


def test_a_block_answer_that_mutates_the_block_cannot_pass_or_change_later_verdicts():
    def drop_the_mlp(X, block):
        with torch.no_grad():
            for p in block.mlp.parameters():
                p.zero_()
        return X + block.attn(block.ln_1(X))         # right only for the block it has just broken

    v = check_pre_norm_block(drop_the_mlp)
    assert not v.ok, v
    assert check_pre_norm_block(block_ok).ok
    assert not check_pre_norm_block(block_mlp_from_X).ok


# ------------------------------------------------------------------------------------------ predict: MLP FLOPs
T, D, D_FF = 10, 48, 128          # the question: MLP(d_model=48, d_ff=128) on T = 10 tokens


def test_mlp_flops_prediction():
    assert_named(check_mlp_flops(...), "stub")
    v = check_mlp_flops(4 * T * D * D_FF)          # two matrices, 2 FLOPs per multiply-add, every token
    assert v.ok and "245,760" in v.message, v
    assert not check_mlp_flops(4 * T * D * D_FF + 2).ok
    assert_named(check_mlp_flops(100_000), "values")
    assert_named(check_mlp_flops("245760"), "type")


def test_the_mlp_flops_are_measured():
    from torch.utils.flop_counter import FlopCounterMode

    from attnlib import MLP

    with FlopCounterMode(display=False) as counter:
        MLP(D, D_FF)(torch.zeros(1, T, D))
    assert counter.get_total_flops() == 4 * T * D * D_FF


@pytest.mark.parametrize("guess, label", [
    (2 * T * D * D_FF, "multiply-adds"), (4 * D * D_FF, "one-token"), (T * D * D_FF, "one-matrix"),
    (4 * T * D * D, "d_model-squared"), (4 * T * D * D_FF + T * (D + D_FF), "activation-counted"),
])
def test_mlp_flops_guesses_are_named(guess, label):
    v = check_mlp_flops(guess)
    assert_named(v, label)
    assert f"{guess:,}" in v.message


# ------------------------------------------------------------------------------------------ extend: RMSNorm
def rms_ok(X, gamma):
    return X / torch.sqrt((X ** 2).mean(-1, keepdim=True) + 1e-5) * gamma


def rms_centered(X, gamma):
    Xc = X - X.mean(-1, keepdim=True)
    return Xc / torch.sqrt((Xc ** 2).mean(-1, keepdim=True) + 1e-5) * gamma


def rms_std(X, gamma):
    return X / torch.sqrt(X.var(-1, keepdim=True, unbiased=False) + 1e-5) * gamma


def rms_no_eps(X, gamma):
    return X / X.pow(2).mean(-1, keepdim=True).sqrt() * gamma


def rms_eps_outside(X, gamma):
    return X / (X.pow(2).mean(-1, keepdim=True).sqrt() + 1e-5) * gamma


def rms_sum(X, gamma):
    return X / torch.sqrt((X ** 2).sum(-1, keepdim=True) + 1e-5) * gamma


def rms_no_gamma(X, gamma):
    return X / torch.sqrt((X ** 2).mean(-1, keepdim=True) + 1e-5)


def rms_over_T(X, gamma):
    return X / torch.sqrt((X ** 2).mean(1, keepdim=True) + 1e-5) * gamma


@pytest.mark.parametrize("fn", [rms_ok, lambda X, g: X * torch.rsqrt(X.square().mean(-1, keepdim=True) + 1e-5) * g])
def test_rms_norm_solution_is_accepted(fn):
    v = check_rms_norm(fn)
    assert_accepted(v)


@pytest.mark.parametrize("fn, label", [(rms_centered, "centered"), (rms_std, "std-not-rms"),
                                       (rms_no_eps, "no-eps"), (rms_eps_outside, "eps-outside-sqrt"),
                                       (rms_sum, "sum-not-mean"), (rms_no_gamma, "no-gamma"),
                                       (rms_over_T, "wrong-axis"), (stub, "stub")])
def test_rms_norm_mistakes_are_named(fn, label):
    v = check_rms_norm(fn)
    assert_named(v, label)


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    from attnlib.checks import block

    blocks = [block._fresh_block(i) for i in range(len(block._BLOCK_CASES))]
    for check, mistakes, cases, reference in [
        (check_layer_norm, block._LN_MISTAKES, block._norm_cases(), block._layer_norm),
        (check_mlp, block._MLP_MISTAKES, block._mlp_cases(), block._mlp),
        (check_pre_norm_block, block._PRE_MISTAKES, blocks, lambda X, b: b(X)),
        (check_rms_norm, block._RMS_MISTAKES, block._rms_cases(), block._rms_norm),
    ]:
        assert_each_mistake_named(check, mistakes)
        with torch.no_grad():
            assert_mistakes_distinct(cases[1], reference, mistakes)


def test_each_variant_with_its_default_switches_is_the_reference():
    from attnlib.checks import block

    for check, variant in [(check_layer_norm, block._ln_variant), (check_mlp, block._mlp_variant),
                           (check_pre_norm_block, block._pre_norm_variant), (check_rms_norm, block._rms_variant)]:
        assert_accepted(check(variant))
