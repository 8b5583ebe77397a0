"""Exercise checkers for the block chapter (chapter 7).

``check_layer_norm(fn)``, ``check_mlp(fn)``, ``check_pre_norm_block(fn)``: the parts of a Pre-Norm block.
``check_mlp_flops(n)``: a prediction of the FLOPs of the MLP, measured with ``FlopCounterMode``.
``check_rms_norm(fn)``: RMSNorm, an extension checked against ``torch.nn.functional.rms_norm``.

Every call builds its inputs and modules afresh (and ``judge`` hands each run its own deep copy), so an answer
that changes a module in place cannot change the reference or a later verdict.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ..block import MLP, Block
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number

__all__ = ["check_layer_norm", "check_mlp", "check_pre_norm_block", "check_mlp_flops", "check_rms_norm"]

EPS = 1e-5   # the LayerNorm epsilon of torch and of the library


def _not_callable(fn) -> Verdict:
    return judge(fn, [], None)      # judge's own verdict for an answer that is not a function


# ------------------------------------------------------------------------------------------------ LayerNorm
def _norm_cases():
    """(X, gamma, beta) built fresh: rows far from mean 0 and std 1, and one row of tiny variance (ε matters)."""
    cases = []
    for seed, (B, T, d_model) in ((71, (2, 5, 8)), (72, (1, 4, 6))):
        g = _gen(seed)
        X = 3 * torch.randn(B, T, d_model, generator=g) + 1
        gamma = 1 + 0.5 * torch.randn(d_model, generator=g)
        beta = 0.5 * torch.randn(d_model, generator=g)
        cases.append((X, gamma, beta))
    X = cases[1][0]
    X[0, 2] = 0.1 + 2e-3 * torch.randn(X.shape[-1], generator=_gen(70))   # variance ≈ 4e-6, below ε = 1e-5
    return cases


def _layer_norm(X, gamma, beta):
    return F.layer_norm(X, X.shape[-1:], gamma, beta, EPS)


def _ln_over(X, gamma, beta, dim: int = -1, unbiased: bool = False, eps_where: str = "inside"):
    mu = X.mean(dim, keepdim=True)
    var = X.var(dim, keepdim=True, unbiased=unbiased)
    spread = {"inside": torch.sqrt(var + EPS), "none": torch.sqrt(var), "outside": torch.sqrt(var) + EPS}[eps_where]
    return (X - mu) / spread * gamma + beta


_LN_MISTAKES = [
    Mistake("wrong-axis",
            "you normalised over the positions (axis T). LayerNorm normalises each token's own vector: take the "
            "mean and variance over the last axis, d_model (dim=-1, keepdim=True).",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, dim=-2)),
    Mistake("unbiased-variance",
            "you used the unbiased variance (dividing by d_model − 1). LayerNorm divides by d_model: use "
            "X.var(-1, unbiased=False, keepdim=True) or ((X - mu)**2).mean(-1, keepdim=True).",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, unbiased=True)),
    Mistake("no-eps",
            "ε is missing. On a row whose variance is tiny (one test row has variance ≈ 4e-6) dividing by √var "
            "blows the row up; divide by √(var + ε) with ε = 1e-5.",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, eps_where="none")),
    Mistake("eps-outside-sqrt",
            "ε belongs inside the square root: (X − mean) / √(var + ε), not / (√var + ε). The two differ on a "
            "row of tiny variance, like one of the test rows.",
            lambda X, gamma, beta: _ln_over(X, gamma, beta, eps_where="outside")),
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
    return judge(fn, _norm_cases(), _layer_norm, _LN_MISTAKES,
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
    Mistake("no-bias",
            "b_1 is missing: the hidden layer is GELU(X W_1 + b_1), with the bias added before the activation.",
            lambda X, W_1, b_1, W_2, b_2: F.gelu(X @ W_1) @ W_2 + b_2),
    Mistake("no-bias",
            "b_2 is missing: add it after the second product, GELU(X W_1 + b_1) W_2 + b_2.",
            lambda X, W_1, b_1, W_2, b_2: F.gelu(X @ W_1 + b_1) @ W_2),
]


@checker
def check_mlp(fn) -> Verdict:
    """Check ``fn(X, W_1, b_1, W_2, b_2)``: X (B, T, d_model), W_1 (d_model, d_ff), W_2 (d_ff, d_model)."""
    return judge(fn, _mlp_cases(), _mlp, _MLP_MISTAKES,
                 success="d_model → d_ff → GELU → d_model, the same for every position.")


# ------------------------------------------------------------------------------------------ Pre-Norm block
_BLOCK_CASES = ((75, 2, 5, 8, 2), (76, 1, 4, 12, 3))     # seed, B, T, d_model, h


def _fresh_block(i: int):
    """Case i: X (B, T, d_model) and a new Block with non-trivial LayerNorms; the same numbers on every call."""
    seed, B, T, d_model, h = _BLOCK_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = Block(d_model, h).eval()
        with torch.no_grad():
            for ln in (block.ln_1, block.ln_2):
                ln.weight.normal_(1.0, 0.3)
                ln.bias.normal_(0.0, 0.3)
        X = torch.randn(B, T, d_model)
    return X, block


_PRE_MISTAKES = [
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
    Mistake("residual-normed",
            "you added the sublayer's output to the normalised stream (H = LN₁(X) + Attention(LN₁(X))). The "
            "residual path carries X itself: H = X + Attention(LN₁(X)).",
            lambda X, b: (H := b.ln_1(X) + b.attn(b.ln_1(X))) + b.mlp(b.ln_2(H))),
]


@checker
def check_pre_norm_block(fn) -> Verdict:
    """Check ``fn(X, block)``: X (B, T, d_model) → X_next (B, T, d_model) using block.ln_1, attn, ln_2, mlp."""
    cases = [_fresh_block(i) for i in range(len(_BLOCK_CASES))]
    with torch.no_grad():
        return judge(fn, cases, lambda X, block: block(X), _PRE_MISTAKES,
                     success="H = X + Attention(LN₁(X)); X_next = H + MLP(LN₂(H)), as attnlib.Block computes.")


# ------------------------------------------------------------------------------------- predict: MLP FLOPs
_FLOPS_QUESTION = dict(T=10, d_model=48, d_ff=128)   # the MLP and input whose FLOPs the learner predicts


@checker(kind="predict")
def check_mlp_flops(n) -> Verdict:
    """Check a predicted number of FLOPs that ``FlopCounterMode`` counts for ``MLP(48, 128)`` on 10 tokens."""
    T, d, d_ff = _FLOPS_QUESTION["T"], _FLOPS_QUESTION["d_model"], _FLOPS_QUESTION["d_ff"]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        MLP(d, d_ff)(torch.zeros(1, T, d))
    want = counter.get_total_flops()                                  # measured, not computed
    guesses = [
        Guess("multiply-adds", "that counts each multiply-add once, or only one of the two matrices. A multiply-add "
                               "is two FLOPs (a multiply and an add), and the MLP multiplies by W_1 and then by W_2: "
                               "2 · 2 · d_model · d_ff FLOPs per token.", 2 * T * d * d_ff),
        Guess("one-token", "that is the count for one token. The MLP runs on each of the T = 10 positions, so the "
                           "work grows with T.", 4 * d * d_ff),
        Guess("one-matrix", "that is the multiply-adds of one matrix. The MLP has two, W_1 (d_model × d_ff) and "
                            "W_2 (d_ff × d_model), and each multiply-add is two FLOPs.", T * d * d_ff),
        Guess("d_model-squared", "W_1 is d_model × d_ff, not d_model × d_model: the hidden layer is d_ff = 128 "
                                 "wide.", 4 * T * d * d),
        Guess("activation-counted", "GELU, the biases and other elementwise work are not matrix products, and "
                                    "FlopCounterMode counts only matrix products.", 4 * T * d * d_ff + T * (d_ff + d)),
    ]
    success = "4 · d_model · d_ff FLOPs per token: two matrices, two FLOPs per multiply-add."
    return judge_number(n, want, guesses, rtol=1e-9, success=success,
                        again="count the multiply-adds of each matrix for one token, then scale.")


# --------------------------------------------------------------------------------------- extend: RMSNorm
def _rms_norm(X, gamma):
    return F.rms_norm(X, X.shape[-1:], gamma, eps=EPS)


def _rms_variant(X, gamma, *, center=False, eps_where="inside", mean=True, dim=-1):
    if center:
        X = X - X.mean(dim, keepdim=True)
    ms = (X * X).mean(dim, keepdim=True) if mean else (X * X).sum(dim, keepdim=True)
    spread = {"inside": torch.sqrt(ms + EPS), "none": torch.sqrt(ms), "outside": torch.sqrt(ms) + EPS}[eps_where]
    return X / spread * gamma


_RMS_MISTAKES = [
    Mistake("centered",
            "you subtracted the mean: that is LayerNorm without β. RMSNorm skips the centring and divides x "
            "itself by its root mean square √(mean(x²) + ε).",
            lambda X, gamma: _rms_variant(X, gamma, center=True)),
    Mistake("std-not-rms",
            "you divided by the standard deviation √(var + ε). RMSNorm divides by the root mean square "
            "√(mean(x²) + ε), which includes the mean: use (X * X).mean(-1, keepdim=True).",
            lambda X, gamma: X / torch.sqrt(X.var(-1, keepdim=True, unbiased=False) + EPS) * gamma),
    Mistake("no-eps",
            "ε is missing. One test row is tiny (root mean square ≈ 2e-3): divide by √(mean(x²) + ε), ε = 1e-5.",
            lambda X, gamma: _rms_variant(X, gamma, eps_where="none")),
    Mistake("eps-outside-sqrt",
            "ε belongs inside the square root: x / √(mean(x²) + ε), not x / (√mean(x²) + ε).",
            lambda X, gamma: _rms_variant(X, gamma, eps_where="outside")),
    Mistake("sum-not-mean",
            "you summed the squares over d_model; RMSNorm takes their mean (divide by d_model).",
            lambda X, gamma: _rms_variant(X, gamma, mean=False)),
    Mistake("no-gamma",
            "each row is normalised, but the learned scale γ is missing: multiply by gamma at the end.",
            lambda X, gamma: _rms_variant(X, torch.ones_like(gamma))),
    Mistake("wrong-axis",
            "you normalised over the positions (axis T). Like LayerNorm, RMSNorm works on each token's own "
            "vector: the mean of x² runs over the last axis, d_model.",
            lambda X, gamma: _rms_variant(X, gamma, dim=-2)),
]


def _rms_cases():
    """(X, gamma) built fresh: rows with a clear mean (so centring shows), and one tiny row (so ε shows)."""
    cases = []
    for seed, (B, T, d_model) in ((78, (2, 5, 8)), (79, (1, 4, 6))):
        g = _gen(seed)
        X = 2 * torch.randn(B, T, d_model, generator=g) + 1.5
        gamma = 1 + 0.5 * torch.randn(d_model, generator=g)
        cases.append((X, gamma))
    X = cases[1][0]
    X[0, 1] = 2e-3 * torch.randn(X.shape[-1], generator=_gen(80))   # mean(x²) ≈ 4e-6, below ε = 1e-5
    return cases


@checker
def check_rms_norm(fn) -> Verdict:
    """Check ``fn(X, gamma)``: X (B, T, d_model), gamma (d_model,) → (B, T, d_model), ε = 1e-5, against
    ``torch.nn.functional.rms_norm``."""
    return judge(fn, _rms_cases(), _rms_norm, _RMS_MISTAKES,
                 success="x / √(mean(x²) + ε) · γ for every token, as torch.nn.functional.rms_norm computes.")
