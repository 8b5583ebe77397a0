"""Exercise checkers for the block chapter (chapter 7): LayerNorm, the MLP and the Pre-Norm block."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..block import Block
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_layer_norm", "check_mlp", "check_pre_norm_block"]

EPS = 1e-5   # the LayerNorm epsilon of torch and of the library


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------ LayerNorm
def _layer_norm_cases():
    cases = []
    for seed, (B, T, d_model) in ((71, (2, 5, 8)), (72, (1, 4, 6))):
        g = _gen(seed)
        X = 3 * torch.randn(B, T, d_model, generator=g) + 1   # rows far from mean 0, std 1
        gamma = 1 + 0.5 * torch.randn(d_model, generator=g)
        beta = 0.5 * torch.randn(d_model, generator=g)
        cases.append((X, gamma, beta))
    return cases


def _layer_norm(X, gamma, beta):
    return F.layer_norm(X, X.shape[-1:], gamma, beta, EPS)


def _ln_over(X, gamma, beta, dim: int, unbiased: bool = False):
    mu = X.mean(dim, keepdim=True)
    var = X.var(dim, keepdim=True, unbiased=unbiased)
    return (X - mu) / torch.sqrt(var + EPS) * gamma + beta


_LN_MISTAKES = [
    Mistake("wrong-axis",
            "you normalised over the positions (axis T). LayerNorm normalises each token's own vector: take the "
            "mean and variance over the last axis, d_model (dim=-1, keepdim=True).",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, dim=-2)),
    Mistake("unbiased-variance",
            "you used the unbiased variance (dividing by d_model − 1). LayerNorm divides by d_model: use "
            "X.var(-1, unbiased=False, keepdim=True) or ((X - mu)**2).mean(-1, keepdim=True).",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, dim=-1, unbiased=True)),
    Mistake("no-gamma-beta",
            "each row is normalised, but the learned scale and shift are missing: multiply by gamma and add "
            "beta at the end.",
            lambda X, gamma, beta: F.layer_norm(X, X.shape[-1:], eps=EPS)),
    Mistake("no-centering",
            "you divided by the standard deviation but did not subtract the mean first: (X − mean) / √(var + ε).",
            lambda X, gamma, beta: X / torch.sqrt(X.var(-1, keepdim=True, unbiased=False) + EPS) * gamma + beta),
]


@checker
def check_layer_norm(fn) -> Verdict:
    """Check ``fn(X, gamma, beta)``: X (B, T, d_model), gamma and beta (d_model,) → (B, T, d_model), ε = 1e-5."""
    return judge(fn, _layer_norm_cases(), _layer_norm, _LN_MISTAKES,
                 success="every token's vector is normalised over d_model, then scaled by gamma and shifted by beta.")


# ------------------------------------------------------------------------------------------------------ MLP
def _mlp_cases():
    cases = []
    for seed, (B, T, d_model, d_ff) in ((73, (2, 4, 6, 24)), (74, (1, 5, 4, 16))):
        g = _gen(seed)
        X = torch.randn(B, T, d_model, generator=g)
        W_1 = torch.randn(d_model, d_ff, generator=g) / d_model ** 0.5
        b_1 = 0.5 * torch.randn(d_ff, generator=g)
        W_2 = torch.randn(d_ff, d_model, generator=g) / d_ff ** 0.5
        b_2 = 0.5 * torch.randn(d_model, generator=g)
        cases.append((X, W_1, b_1, W_2, b_2))
    return cases


def _mlp(X, W_1, b_1, W_2, b_2):
    return F.gelu(X @ W_1 + b_1) @ W_2 + b_2


_MLP_MISTAKES = [
    Mistake("relu",
            "you used ReLU. This course's MLP (like GPT-2's) uses GELU: F.gelu(...).",
            lambda X, W_1, b_1, W_2, b_2: F.relu(X @ W_1 + b_1) @ W_2 + b_2),
    Mistake("no-activation",
            "there is no activation between the two products, so the MLP collapses into one linear map. Apply "
            "F.gelu to the (B, T, d_ff) hidden layer.",
            lambda X, W_1, b_1, W_2, b_2: (X @ W_1 + b_1) @ W_2 + b_2),
    Mistake("activation-last",
            "GELU belongs on the wide hidden layer (after W_1, before W_2), not on the output.",
            lambda X, W_1, b_1, W_2, b_2: F.gelu((X @ W_1 + b_1) @ W_2 + b_2)),
    Mistake("tanh-gelu",
            "you used the tanh approximation of GELU. It is close, but the library and torch's default use the "
            "exact form: call F.gelu(x) without approximate='tanh'.",
            lambda X, W_1, b_1, W_2, b_2: F.gelu(X @ W_1 + b_1, approximate="tanh") @ W_2 + b_2),
]


@checker
def check_mlp(fn) -> Verdict:
    """Check ``fn(X, W_1, b_1, W_2, b_2)``: X (B, T, d_model), W_1 (d_model, d_ff), W_2 (d_ff, d_model)."""
    return judge(fn, _mlp_cases(), _mlp, _MLP_MISTAKES,
                 success="d_model → d_ff → GELU → d_model, the same for every position.")


# ------------------------------------------------------------------------------------------ Pre-Norm block
@functools.lru_cache(maxsize=1)
def _block_cases():
    """Two small blocks with non-trivial LayerNorm scales, built without touching the global random state."""
    cases = []
    with torch.random.fork_rng(devices=[]):
        for seed, (B, T, d_model, h) in ((75, (2, 5, 8, 2)), (76, (1, 4, 12, 3))):
            torch.manual_seed(seed)
            block = Block(d_model, h).eval()
            with torch.no_grad():
                for ln in (block.ln_1, block.ln_2):
                    ln.weight.normal_(1.0, 0.3)
                    ln.bias.normal_(0.0, 0.3)
            cases.append((torch.randn(B, T, d_model), block))
    return cases


def _block_forward(X, block):
    return block(X)


_BLOCK_MISTAKES = [
    Mistake("mlp-from-X",
            "your MLP reads LN₂(X). It must read the middle residual stream H = X + Attention(LN₁(X)), so "
            "that it sees what attention brought in: X_next = H + MLP(LN₂(H)).",
            lambda X, b: X + b.attn(b.ln_1(X)) + b.mlp(b.ln_2(X))),
    Mistake("post-norm",
            "that is the Post-Norm order (LayerNorm after each residual addition). Pre-Norm normalises the "
            "input of each sublayer and adds the sublayer's output to the un-normalised stream.",
            lambda X, b: b.ln_2((H := b.ln_1(X + b.attn(X))) + b.mlp(H))),
    Mistake("no-residual-attn",
            "the first residual addition is missing: H = X + Attention(LN₁(X)), not Attention(LN₁(X)).",
            lambda X, b: (A := b.attn(b.ln_1(X))) + b.mlp(b.ln_2(A))),
    Mistake("no-residual-mlp",
            "the second residual addition is missing: X_next = H + MLP(LN₂(H)), not MLP(LN₂(H)).",
            lambda X, b: b.mlp(b.ln_2(X + b.attn(b.ln_1(X))))),
    Mistake("norms-swapped",
            "ln_1 belongs before attention and ln_2 before the MLP; you swapped them.",
            lambda X, b: (H := X + b.attn(b.ln_2(X))) + b.mlp(b.ln_1(H))),
]


@checker
def check_pre_norm_block(fn) -> Verdict:
    """Check ``fn(X, block)``: X (B, T, d_model) → X_next (B, T, d_model) using block.ln_1, attn, ln_2, mlp."""
    return judge(fn, _block_cases(), _block_forward, _BLOCK_MISTAKES,
                 success="H = X + Attention(LN₁(X)); X_next = H + MLP(LN₂(H)), as attnlib.Block computes.")
