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
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_layer_norm", "check_mlp", "check_pre_norm_block", "check_mlp_flops", "check_rms_norm"]

EPS = 1e-5   # the LayerNorm epsilon of torch and of the library


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


def _ln_variant(X, gamma, beta, *, dim=-1, unbiased=False, eps="inside", center=True, affine=True):
    """LayerNorm written out; every switch's default is right, any other value plants a mistake.

    ``dim``: the axis normalised. ``unbiased``: divide the variance by n − 1. ``eps``: "inside" √(var + ε),
    "none" or "outside" (√var + ε). ``center``: subtract the mean. ``affine``: scale by gamma, shift by beta.
    """
    mu = X.mean(dim, keepdim=True)
    var = X.var(dim, keepdim=True, unbiased=unbiased)
    spread = {"inside": torch.sqrt(var + EPS), "none": torch.sqrt(var), "outside": torch.sqrt(var) + EPS}[eps]
    Y = ((X - mu) if center else X) / spread
    return Y * gamma + beta if affine else Y


_LN_MISTAKES = variants(_ln_variant, [
    ("wrong-axis", dict(dim=-2),
     "you normalised over the positions (axis T). LayerNorm normalises each token's own vector: take the "
     "mean and variance over the last axis, d_model (dim=-1, keepdim=True)."),
    ("unbiased-variance", dict(unbiased=True),
     "you used the unbiased variance (dividing by d_model − 1). LayerNorm divides by d_model: use "
     "X.var(-1, unbiased=False, keepdim=True) or ((X - mu)**2).mean(-1, keepdim=True)."),
    ("no-eps", dict(eps="none"),
     "ε is missing. On a row whose variance is tiny (one test row has variance ≈ 4e-6) dividing by √var "
     "blows the row up; divide by √(var + ε) with ε = 1e-5."),
    ("eps-outside-sqrt", dict(eps="outside"),
     "ε belongs inside the square root: (X − mean) / √(var + ε), not / (√var + ε). The two differ on a "
     "row of tiny variance, like one of the test rows."),
    ("no-gamma-beta", dict(affine=False),
     "each row is normalised, but the learned scale and shift are missing: multiply by gamma and add "
     "beta at the end."),
    ("no-centering", dict(center=False),
     "you divided by the standard deviation but did not subtract the mean first: (X − mean) / √(var + ε)."),
])


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


def _mlp_variant(X, W_1, b_1, W_2, b_2, *, act="gelu", act_last=False, bias_1=True, bias_2=True):
    """The MLP written out; every switch's default is right, any other value plants a mistake.

    ``act``: "gelu", "tanh-gelu", "relu" or "none". ``act_last``: apply it to the output instead of the hidden
    layer. ``bias_1``, ``bias_2``: add b_1, b_2.
    """
    f = {"gelu": F.gelu, "tanh-gelu": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu,
         "none": lambda t: t}[act]
    hidden = X @ W_1 + b_1 if bias_1 else X @ W_1
    out = (hidden if act_last else f(hidden)) @ W_2
    out = out + b_2 if bias_2 else out
    return f(out) if act_last else out


_MLP_MISTAKES = variants(_mlp_variant, [
    ("relu", dict(act="relu"),
     "you used ReLU. This course's MLP (like GPT-2's) uses GELU: F.gelu(...)."),
    ("no-activation", dict(act="none"),
     "there is no activation between the two products, so the MLP collapses into one linear map. Apply "
     "F.gelu to the (B, T, d_ff) hidden layer."),
    ("activation-last", dict(act_last=True),
     "GELU belongs on the wide hidden layer (after W_1, before W_2), not on the output."),
    ("tanh-gelu", dict(act="tanh-gelu"),
     "you used the tanh approximation of GELU. It is close, but the library and torch's default use the "
     "exact form: call F.gelu(x) without approximate='tanh'."),
    ("no-bias", dict(bias_1=False),
     "b_1 is missing: the hidden layer is GELU(X W_1 + b_1), with the bias added before the activation."),
    ("no-bias", dict(bias_2=False),
     "b_2 is missing: add it after the second product, GELU(X W_1 + b_1) W_2 + b_2."),
])


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


def _pre_norm_variant(X, b, *, residual_1="X", mlp_reads="H", residual_2=True, swap_norms=False):
    """A Pre-Norm block written out from b's parts; every switch's default is right, any other value plants a
    mistake.

    ``residual_1``: what attention's output is added to: "X", "LN₁(X)" or "nothing". ``mlp_reads``: the MLP
    normalises "H" or "X". ``residual_2``: add the MLP's output to H. ``swap_norms``: ln_2 before attention and
    ln_1 before the MLP.
    """
    ln_1, ln_2 = (b.ln_2, b.ln_1) if swap_norms else (b.ln_1, b.ln_2)
    A = b.attn(ln_1(X))
    H = {"X": X + A, "LN₁(X)": ln_1(X) + A, "nothing": A}[residual_1]
    M = b.mlp(ln_2(H if mlp_reads == "H" else X))
    return H + M if residual_2 else M


_PRE_MISTAKES = [
    *variants(_pre_norm_variant, [
        ("mlp-from-X", dict(mlp_reads="X"),
         "your MLP reads LN₂(X). It must read the middle residual stream H = X + Attention(LN₁(X)), so "
         "that it sees what attention brought in: X_next = H + MLP(LN₂(H))."),
        ("no-residual-attn", dict(residual_1="nothing"),
         "the first residual addition is missing: H = X + Attention(LN₁(X)), not Attention(LN₁(X))."),
        ("no-residual-mlp", dict(residual_2=False),
         "the second residual addition is missing: X_next = H + MLP(LN₂(H)), not MLP(LN₂(H))."),
        ("norms-swapped", dict(swap_norms=True),
         "ln_1 belongs before attention and ln_2 before the MLP; you swapped them."),
        ("residual-normed", dict(residual_1="LN₁(X)"),
         "you added the sublayer's output to the normalised stream (H = LN₁(X) + Attention(LN₁(X))). The "
         "residual path carries X itself: H = X + Attention(LN₁(X))."),
    ]),
    Mistake("post-norm",
            "that is the Post-Norm order (LayerNorm after each residual addition). Pre-Norm normalises the "
            "input of each sublayer and adds the sublayer's output to the un-normalised stream.",
            lambda X, b: b.ln_2((H := b.ln_1(X + b.attn(X))) + b.mlp(H))),
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


def _rms_variant(X, gamma, *, center=False, divide_by="rms", eps="inside", mean=True, dim=-1, scale=True):
    """RMSNorm written out; every switch's default is right, any other value plants a mistake.

    ``center``: subtract the mean first. ``divide_by``: "rms" or "std" (the spread about the mean). ``eps``:
    "inside" √(… + ε), "none" or "outside". ``mean``: the mean of the squares, or their sum. ``dim``: the axis
    normalised. ``scale``: multiply by gamma.
    """
    if center:
        X = X - X.mean(dim, keepdim=True)
    ms = (X * X).mean(dim, keepdim=True) if mean else (X * X).sum(dim, keepdim=True)
    if divide_by == "std":
        ms = X.var(dim, keepdim=True, unbiased=False)
    spread = {"inside": torch.sqrt(ms + EPS), "none": torch.sqrt(ms), "outside": torch.sqrt(ms) + EPS}[eps]
    return X / spread * gamma if scale else X / spread


_RMS_MISTAKES = variants(_rms_variant, [
    ("centered", dict(center=True),
     "you subtracted the mean: that is LayerNorm without β. RMSNorm skips the centring and divides x "
     "itself by its root mean square √(mean(x²) + ε)."),
    ("std-not-rms", dict(divide_by="std"),
     "you divided by the standard deviation √(var + ε). RMSNorm divides by the root mean square "
     "√(mean(x²) + ε), which includes the mean: use (X * X).mean(-1, keepdim=True)."),
    ("no-eps", dict(eps="none"),
     "ε is missing. One test row is tiny (root mean square ≈ 2e-3): divide by √(mean(x²) + ε), ε = 1e-5."),
    ("eps-outside-sqrt", dict(eps="outside"),
     "ε belongs inside the square root: x / √(mean(x²) + ε), not x / (√mean(x²) + ε)."),
    ("sum-not-mean", dict(mean=False),
     "you summed the squares over d_model; RMSNorm takes their mean (divide by d_model)."),
    ("no-gamma", dict(scale=False),
     "each row is normalised, but the learned scale γ is missing: multiply by gamma at the end."),
    ("wrong-axis", dict(dim=-2),
     "you normalised over the positions (axis T). Like LayerNorm, RMSNorm works on each token's own "
     "vector: the mean of x² runs over the last axis, d_model."),
])


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
