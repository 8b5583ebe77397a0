"""Exercise checkers for the block chapter (chapter 7).

``check_layer_norm(fn)``: LayerNorm by hand for any number of leading axes, in float32, float64 and float16 (whose
range and precision cannot hold the statistics of a large row: the result must still be LayerNorm, rounded).
``check_mlp_in_chunks(fn)``: the MLP computed a few hidden columns at a time; a dispatch mode watches that no
tensor of the learner's holds more hidden columns than allowed.
``check_run_block(fn)``: :func:`run_block_as_given`, a block written as a loop over its two sublayers for either
layout, with its bug fixed.
``check_block_flops(n)``: a prediction of the FLOPs ``FlopCounterMode`` counts for one whole block.
``check_layer_norm_from_rms(fn)``: LayerNorm made from torch's ``rms_norm``, checked against ``layer_norm``.

Every call builds its inputs and modules afresh (and ``judge`` hands each run its own deep copy), so an answer
that changes an input or a module in place cannot change the reference or a later verdict; it is named.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from ..block import Block
from ._core import (
    Group,
    Guess,
    Mistake,
    Verdict,
    _close,
    _fresh,
    _gen,
    checker,
    judge,
    judge_number,
    named,
    named_on,
    variants,
)

__all__ = ["check_layer_norm", "check_mlp_in_chunks", "check_run_block", "check_block_flops",
           "check_layer_norm_from_rms", "run_block_as_given"]

EPS = 1e-5                                       # the LayerNorm epsilon of torch and of the library
_GENERIC = ("values", "dtype", "shape", "error")  # verdicts a diagnosis may improve on


class _Watch(TorchDispatchMode):
    """Records, while active, the names of the aten operators run and the shapes of the tensors they return."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(func.overloadpacket.__name__)
        self.shapes += [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out


def _watched(fn, seen: list[_Watch]):
    """``fn`` run under a :class:`_Watch`, appended to ``seen``; its signature stays the learner's."""
    if not callable(fn):
        return fn

    @functools.wraps(fn)
    def run(*args):
        watch = _Watch()
        seen.append(watch)
        with watch:
            return fn(*args)
    return run


def _runs(fn, cases):
    """The learner's outputs on fresh copies of ``cases`` (an exception where one raised)."""
    outs = []
    for case in cases:
        try:
            outs.append(fn(*_fresh(case)))
        except Exception as e:  # noqa: BLE001 - the learner's bug, judged by the caller
            outs.append(e)
    return outs


def _right(out, want, atol: float) -> bool:
    return isinstance(out, torch.Tensor) and _close(out, want, atol)


# ------------------------------------------------------------------------------------------------ LayerNorm
def _norm_groups():
    """(X, gamma, beta) built fresh, one group per tolerance.

    float32: rows far from mean 0 and std 1, one row of tiny variance (ε matters), and inputs of two and of four
    axes. float64: one case, so that lowering its precision shows. float16: rows with a large common offset (a
    mean that float16 holds only to a quarter) and rows with a large spread (squares beyond its 65504).
    """
    g = _gen(71)

    def case(*shape, dtype=torch.float32):
        d = shape[-1]
        X = 3 * torch.randn(*shape, generator=g, dtype=torch.float64) + 1
        gamma = 1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        beta = 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        return X, gamma, beta

    X, gamma, beta = case(5, 8)                                        # (T, d_model)
    X[2] = 0.1 + 2e-3 * torch.randn(8, generator=g, dtype=torch.float64)   # variance ≈ 4e-6, below ε = 1e-5
    fp32 = [tuple(t.float() for t in c) for c in (case(2, 5, 8), (X, gamma, beta), case(2, 2, 3, 6))]
    fp64 = [case(1, 4, 8)]
    X, gamma, beta = case(2, 4, 16)
    rows = torch.randn(4, 16, generator=g, dtype=torch.float64)
    X[0, 1], X[1, 2] = 300 + rows[0], -180 + 0.7 * rows[1]            # large offsets
    X[0, 3], X[1, 0] = 400 * rows[2], 50 + 300 * rows[3]              # large spreads
    fp16 = [(X.half(), gamma.half(), beta.half())]
    return [Group(fp32, 1e-5), Group(fp64, 1e-9), Group(fp16, 8e-3)]


def _cases(groups, dtype=None):
    return [c for grp in groups for c in grp.cases if dtype is None or c[0].dtype == dtype]


def _tolerance(dtype) -> float:
    return 8e-3 if dtype == torch.float16 else 1e-5


def _work(X) -> torch.dtype:
    """The dtype to compute in: float32 for float16 input, the input's own dtype otherwise."""
    return torch.promote_types(X.dtype, torch.float32)


def _layer_norm(X, gamma, beta):
    """The exact LayerNorm (computed in float64), rounded to the dtype of X."""
    d = X.shape[-1:]
    return F.layer_norm(X.double(), d, gamma.double(), beta.double(), EPS).to(X.dtype)


def _ln_variant(X, gamma, beta, *, dim=-1, unbiased=False, eps="inside", center=True, affine=True):
    """LayerNorm written out, computed in float32 or wider and rounded to X's dtype; every switch's default is
    right, any other value plants a mistake.

    ``dim``: the axis normalised (2: counted from the front). ``unbiased``: divide the variance by n − 1.
    ``eps``: "inside" √(var + ε), "none" or "outside" (√var + ε). ``center``: subtract the mean. ``affine``:
    scale by gamma, shift by beta.
    """
    x, gamma, beta = (t.to(_work(X)) for t in (X, gamma, beta))
    mu = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    spread = {"inside": torch.sqrt(var + EPS), "none": torch.sqrt(var), "outside": torch.sqrt(var) + EPS}[eps]
    Y = ((x - mu) if center else x) / spread
    return (Y * gamma + beta if affine else Y).to(X.dtype)


_LN_TABLE = variants(_ln_variant, [
    ("wrong-axis", dict(dim=-2),
     "change one token's vector: does only that token's row of your output change? Which axis do your mean "
     "and variance run over?",
     "you normalised over the positions, the second-to-last axis. LayerNorm normalises each token's own "
     "vector: the statistics run over d_model, the last axis, one mean and one variance per token."),
    ("fixed-axis", dict(dim=2),
     "your function fits a (B, T, d_model) input but not one with two or four axes. Which axis is d_model in "
     "a (T, d_model) or a (B, h, T, d_model) tensor, and how does your code name it?",
     "you named the feature axis by its place from the front (axis 2), which is d_model only when there are "
     "exactly three axes. Count it from the end: d_model is always the last axis."),
    ("unbiased-variance", dict(unbiased=True),
     "your rows come out with a standard deviation a little below 1. By how many numbers does your variance "
     "divide?",
     "you used the unbiased variance, which divides by d_model − 1; torch's own var does that unless told "
     "otherwise. LayerNorm's σ² is the plain mean of the squared deviations: divide by d_model."),
    ("no-eps", dict(eps="none"),
     "one test row has a variance of about 4e-6, below ε. What does your function do with it?",
     "ε is missing: on a row of tiny variance, dividing by √var blows the row up. ε = 1e-5 is added to the "
     "variance before the square root."),
    ("eps-outside-sqrt", dict(eps="outside"),
     "only the row of tiny variance is off. Where does ε enter your formula, before or after the square root?",
     "ε belongs under the square root, added to the variance; you added it to the standard deviation. The "
     "two differ on a row of tiny variance like one of the test rows."),
    ("no-gamma-beta", dict(affine=False),
     "every row of yours has mean 0 and standard deviation 1. What do gamma and beta do?",
     "the normalisation is right, but the learned scale and shift are missing: multiply by gamma, then add "
     "beta, feature by feature."),
    ("no-centering", dict(center=False),
     "do the rows of your result, before gamma and beta, have mean 0?",
     "you divided by the standard deviation without subtracting the mean first."),
])

HALF_STATISTICS = Mistake(
    "float16-statistics",
    "your function is right in float32 and float64 but not in float16, on the rows with a large offset or a "
    "large spread. Which of your intermediate numbers can float16 not hold, or not hold precisely enough? "
    "What are its largest number and its spacing near 300?",
    more="your mean and variance are computed in float16. A variance above 65504 overflows to inf, and a mean "
         "near 300 is rounded to a multiple of 0.25, which shifts the whole centred row. Do the arithmetic in "
         "float32 (float64 stays float64) and round to float16 only at the end.")

CANCELLATION = Mistake(
    "cancellation",
    "your function is right on ordinary rows, but on the float16 rows with a large offset it would be wrong "
    "even in float32. What happens when you subtract two large numbers that are nearly equal?",
    more="you compute the variance as the mean of the squares minus the square of the mean. For a row near 300 "
         "both are about 90 000 and their difference, about 1, keeps few correct digits (and in float16 the "
         "squares overflow). Subtract the mean first, then average the squared deviations.")

DTYPE_CHANGED = Mistake(
    "dtype-changed",
    "your numbers are right, but a {want} input X gets a {got} result. Which dtype should leave your "
    "function, and which of your lines changes it?",
    more="your result is {got} for a {want} input. Compute in a wider dtype where you need to, but give the "
         "caller back the dtype of X: float16 stays float16, and float64 is never lowered to float32.")

LN_LOWERED = Mistake(
    "float64-lowered",
    "your float64 result agrees with LayerNorm to only about seven digits, float32's precision. Where do your "
    "numbers pass through float32?",
    more="part of your computation runs in float32 for a float64 input (a fixed cast, or a tensor created "
         "without a dtype), so the result has float32's precision even where its dtype is float64. Compute "
         "in float32 only when X is narrower than that.")

CALLED_LAYER_NORM = Mistake(
    "called-layer-norm",
    "the values are right, but torch's own layer_norm did the work. The exercise is to compute it yourself: "
    "what does it do, step by step?",
    more="your function calls torch's layer_norm (or a LayerNorm module). Compute the mean and the variance of "
         "each token's vector yourself, then normalise, scale and shift.")

_LN_MISTAKES = [*_LN_TABLE, HALF_STATISTICS, CANCELLATION, DTYPE_CHANGED, LN_LOWERED, CALLED_LAYER_NORM]


def _dtype_changed(outputs) -> Verdict | None:
    """The verdict for a result of another dtype than X whose values are right, else None."""
    for case, out, _ in outputs:
        X = case[0]
        exact = _layer_norm(*(t.double() for t in case))
        if isinstance(out, torch.Tensor) and out.dtype != X.dtype and out.shape == X.shape \
                and _close(out, exact, max(_tolerance(out.dtype), _tolerance(X.dtype))):
            return named(DTYPE_CHANGED, got=str(out.dtype).removeprefix("torch."),
                         want=str(X.dtype).removeprefix("torch."))
    return None


@checker(mistakes=_LN_MISTAKES)
def check_layer_norm(fn) -> Verdict:
    """Check ``fn(X, gamma, beta)``: X (..., d_model) in float16, float32 or float64, gamma and beta (d_model,) of
    its dtype → LayerNorm with ε = 1e-5, of the shape and dtype of X."""
    groups = _norm_groups()

    def diagnose(verdict: Verdict, results) -> Verdict | None:
        if verdict.mistake == "precision":        # the core's float64 check: a float32 round trip
            return named(LN_LOWERED)
        if verdict.mistake not in _GENERIC:
            return None
        outputs = results.outputs()
        found = _dtype_changed(outputs)
        if found is not None:
            return found
        half = _cases(groups, torch.float16)
        wide_right = all(_right(o, _layer_norm(*c), 1e-5) for c, o, _ in outputs if c[0].dtype != torch.float16)
        upcast = [tuple(t.float() for t in c) for c in half]
        if wide_right and all(_right(o, _layer_norm(*c), 1e-5) for o, c in zip(_runs(fn, upcast), upcast)):
            return named(HALF_STATISTICS)
        exact = [tuple(t.double() for t in c) for c in half]
        if wide_right and all(_right(o, _layer_norm(*c), 1e-5) for o, c in zip(_runs(fn, exact), exact)):
            return named(CANCELLATION)
        # a mistake that float16 also blurs: named on the float32 and float64 cases
        return named_on(results, _LN_TABLE, _layer_norm, where=lambda case: case[0].dtype != torch.float16)

    seen: list[_Watch] = []
    verdict = judge(_watched(fn, seen), groups, _layer_norm, _LN_TABLE, diagnose=diagnose,
                    success="every token's vector is normalised over its last axis, in float16 too, and comes "
                            "back in the dtype it came in.")
    if verdict.ok and any("native_layer_norm" in w.ops for w in seen):
        return named(CALLED_LAYER_NORM)
    return verdict


# ------------------------------------------------------------------------------------------ MLP in chunks
def _mlp_cases():
    """(X, W_1, b_1, W_2, b_2, chunk) built fresh: d_ff never 4·d_model; one d_ff not a multiple of chunk, one
    that is, and a float64 case (whose result must stay float64) with chunk < d_model."""
    cases = []
    g = _gen(73)
    for lead, d_model, d_ff, chunk, dtype in (((2, 4), 6, 40, 16, torch.float32),
                                              ((5,), 4, 24, 8, torch.float32),
                                              ((1, 3), 8, 20, 6, torch.float64)):
        X = torch.randn(*lead, d_model, generator=g, dtype=torch.float64)
        W_1 = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_model ** 0.5
        b_1 = 0.5 * torch.randn(d_ff, generator=g, dtype=torch.float64)
        W_2 = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64) / d_ff ** 0.5
        b_2 = 0.5 * torch.randn(d_model, generator=g, dtype=torch.float64)
        cases.append((*(t.to(dtype) for t in (X, W_1, b_1, W_2, b_2)), chunk))
    return cases


def _mlp(X, W_1, b_1, W_2, b_2, chunk):
    return F.gelu(X @ W_1 + b_1) @ W_2 + b_2


def _chunk_variant(X, W_1, b_1, W_2, b_2, chunk, *, act="gelu", gelu_on="hidden", b_2_each=False, tail=True,
                   width="W_1"):
    """The MLP in chunks of hidden columns; every switch's default is right, any other value plants a mistake.

    ``act``: "gelu", "tanh-gelu", "relu" or "none". ``gelu_on``: "hidden" (right), "partial" (each chunk's
    product with W_2), "sum" or "sum+b_2" (the summed output, before or after b_2). ``b_2_each``: add b_2 in
    every chunk. ``tail``: keep the last, shorter chunk. ``width``: d_ff read from W_1, or assumed "4·d_model".
    """
    f = {"gelu": F.gelu, "tanh-gelu": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu,
         "none": lambda t: t}[act]
    d_ff = W_1.shape[1] if width == "W_1" else 4 * X.shape[-1]
    stop = d_ff if tail else d_ff // chunk * chunk
    out = torch.zeros_like(X)
    for a in range(0, stop, chunk):
        hidden = X @ W_1[:, a:a + chunk] + b_1[a:a + chunk]
        part = (f(hidden) if gelu_on == "hidden" else hidden) @ W_2[a:a + chunk]
        out = out + (f(part) if gelu_on == "partial" else part) + (b_2 if b_2_each else 0)
    if gelu_on == "sum":
        return f(out) + b_2
    if gelu_on == "sum+b_2":
        return f(out + b_2)
    return out if b_2_each else out + b_2


_GELU_AFTER = ("GELU acts on each hidden column, between W_1 and W_2. Where does yours act?",
               "you applied GELU after the product with W_2, to the output (or to each chunk's share of it). "
               "It belongs on the hidden columns, before they are multiplied by W_2; after W_2 it is a "
               "different function.")

_CHUNK_TABLE = variants(_chunk_variant, [
    ("b_2-each-chunk", dict(b_2_each=True),
     "your result is off by the same vector at every position, and more so where there are more chunks. "
     "Which term belongs to the output once, not to each chunk?",
     "you added b_2 once per chunk. The chunks' products with W_2 add up to the full product, but b_2 is "
     "added to the output only once, after the sum."),
    ("tail-dropped", dict(tail=False),
     "the case with d_ff = 40 and chunk = 16 is off, the one where chunk divides d_ff is right. Do your "
     "chunks cover every hidden column?",
     "your chunks stop at the last whole multiple of chunk, so the last, shorter chunk of hidden columns is "
     "left out. Let the chunks run up to d_ff; the last one may be narrower."),
    ("d_ff-assumed", dict(width="4·d_model"),
     "how wide is the hidden layer in these tests? Where does your function take d_ff from?",
     "you took d_ff = 4·d_model, the usual choice, but these MLPs have other widths. Read d_ff from the "
     "shape of the weights."),
    ("gelu-after-W_2", dict(gelu_on="partial"), *_GELU_AFTER),
    ("gelu-after-W_2", dict(gelu_on="sum"), *_GELU_AFTER),
    ("gelu-after-W_2", dict(gelu_on="sum+b_2"), *_GELU_AFTER),
    ("relu", dict(act="relu"),
     "in your hidden layer, do small negative values come out as exactly zero? Which activation does this "
     "course's MLP use?",
     "you used ReLU. The MLP here (like GPT-2's) uses GELU, which lets small negative values through."),
    ("no-activation", dict(act="none"),
     "is there anything between your two products? Without it, what is the MLP?",
     "there is no activation between the two products, so the MLP collapses into one linear map. GELU "
     "acts on the hidden columns."),
    ("tanh-gelu", dict(act="tanh-gelu"),
     "you are close everywhere, but not equal. Which form of GELU do you use?",
     "you used the tanh approximation of GELU. The library uses the exact form, x·Φ(x), torch's default."),
])

FULL_HIDDEN = Mistake(
    "full-hidden",
    "the values are right, but your function held a tensor {width} numbers wide while chunk was {chunk}. "
    "Which of your steps fills more hidden columns at once than chunk?",
    more="a tensor of yours had {width} columns on its last axis, more than chunk = {chunk}: the hidden layer "
         "(or a product as wide) was made in one go. Cut W_1's columns, b_1 and W_2's rows the same way, one "
         "chunk of hidden columns at a time, and add each chunk's share of the output to a running sum.")

UNCUT = Mistake(
    "uncut",
    "a chunk of the hidden layer met a piece of another width. Which of the MLP's four parameters run along "
    "d_ff, and did you cut each of them along that axis, at the same hidden columns?",
    more="W_1's columns, b_1 and W_2's rows all run along the hidden axis, d_ff long; each chunk needs the same "
         "hidden columns of all three, while X and b_2 are used whole.")

ACCUMULATOR_DTYPE = Mistake(
    "accumulator-dtype",
    "your numbers are right, but a {want} input gets a {got} result. Where is your running sum created, and "
    "which dtype does a new tensor get when you do not say?",
    more="a tensor created without a dtype is float32, and adding into it in place keeps it float32. Create "
         "the running sum with the dtype (and device) of X, or start it from a tensor that already has them.")

CHUNK_LOWERED = Mistake(
    "float64-lowered",
    "the float64 case is right only to about seven digits, float32's precision. Which of your tensors is "
    "float32?",
    more="numbers that pass through a float32 tensor keep only float32's precision, even when the result "
         "is promoted back to float64. A tensor created without a dtype (a running sum of zeros?) is float32: "
         "create it with the dtype of X.")

_CHUNK_MISTAKES = [*_CHUNK_TABLE, FULL_HIDDEN, UNCUT, ACCUMULATOR_DTYPE, CHUNK_LOWERED]


def _too_wide(watch: _Watch, case) -> int | None:
    """The widest last axis, above chunk, among the tensors made while watching (inputs' shapes and d_model
    wide tensors excepted): the hidden layer held whole."""
    X, *_, chunk = case
    given = {tuple(t.shape) for t in case[:5]}
    widths = [s[-1] for s in watch.shapes if s and s not in given and s[-1] > chunk and s[-1] != X.shape[-1]]
    return max(widths, default=None)


@checker(mistakes=_CHUNK_MISTAKES)
def check_mlp_in_chunks(fn) -> Verdict:
    """Check ``fn(X, W_1, b_1, W_2, b_2, chunk)``: GELU(X W_1 + b_1) W_2 + b_2 for X (..., d_model), W_1 (d_model,
    d_ff), W_2 (d_ff, d_model), with no tensor of the learner's more than ``chunk`` hidden columns wide."""
    cases = _mlp_cases()

    def diagnose(verdict: Verdict, results) -> Verdict | None:
        if verdict.mistake == "error" and any(s in verdict.message for s in (
                "must match the size", "cannot be multiplied", "size mismatch", "shapes cannot")):
            return named(UNCUT, f" ({verdict.message})")
        if verdict.mistake == "precision":        # the core's float64 check: a float32 round trip
            return named(CHUNK_LOWERED)
        if verdict.mistake != "dtype":
            return None
        for case, out, _ in results.outputs():
            X = case[0]
            if isinstance(out, torch.Tensor) and out.dtype != X.dtype:
                return named(ACCUMULATOR_DTYPE, got=str(out.dtype).removeprefix("torch."),
                             want=str(X.dtype).removeprefix("torch."))
        return None

    seen: list[_Watch] = []
    verdict = judge(_watched(fn, seen), cases, _mlp, _CHUNK_TABLE, diagnose=diagnose,
                    success="one chunk of hidden columns at a time, each adding its share of the output, b_2 "
                            "once; the same numbers as the whole MLP.")
    if verdict.ok:
        for case, watch in zip(cases, seen):      # a correct answer ran once on each case, in order
            width = _too_wide(watch, case)
            if width is not None:
                return named(FULL_HIDDEN, width=width, chunk=case[-1])
    return verdict


# ------------------------------------------------------------------------------- find the bug: one loop, two layouts
def run_block_as_given(X, block):
    """What block(X) computes, for a Pre-Norm or a Post-Norm block (block.norm): the exercise's function, with
    its planted bug."""
    stream = X
    for norm, sublayer in ((block.ln_1, block.attn), (block.ln_2, block.mlp)):
        if block.norm == "post":
            stream = norm(stream + sublayer(stream))
        else:
            stream = norm(stream)
            stream = stream + sublayer(stream)
    return stream


_BLOCK_CASES = ((75, 2, 5, 8, 2, "pre"), (76, 1, 4, 12, 3, "post"), (77, 1, 6, 12, 3, "pre"),
                (78, 2, 3, 8, 2, "post"))     # seed, B, T, d_model, h, layout


def _fresh_block(i: int):
    """Case i: X (B, T, d_model) and a new Block with non-trivial LayerNorms; the same numbers on every call."""
    seed, B, T, d_model, h, norm = _BLOCK_CASES[i]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = Block(d_model, h, norm=norm).eval()
        with torch.no_grad():
            for ln in (block.ln_1, block.ln_2):
                ln.weight.normal_(1.0, 0.3)
                ln.bias.normal_(0.0, 0.3)
        X = 2 * torch.randn(B, T, d_model) + 0.5
    return X, block


def _block_cases():
    return [_fresh_block(i) for i in range(len(_BLOCK_CASES))]


def _block_variant(X, b, *, pre="right", post="right", swap_norms=False):
    """Both layouts written out from b's parts; every switch's default is right, any other value plants a
    mistake. ``pre``: "right", "normed-residual" (the function as given), "mlp-reads-X", "no-residual",
    "normed-output" (each sublayer reads the raw stream, its output normalised) or "post" (the Post-Norm
    formula). ``post``: "right" or "pre" (the Pre-Norm formula). ``swap_norms``: ln_2 with attention, ln_1
    with the MLP."""
    ln_1, ln_2 = (b.ln_2, b.ln_1) if swap_norms else (b.ln_1, b.ln_2)
    way = pre if b.norm == "pre" else {"right": "post", "pre": "right"}[post]
    if way == "right":
        H = X + b.attn(ln_1(X))
        return H + b.mlp(ln_2(H))
    if way == "post":
        H = ln_1(X + b.attn(X))
        return ln_2(H + b.mlp(H))
    if way == "normed-residual":
        H = ln_1(X) + b.attn(ln_1(X))
        return ln_2(H) + b.mlp(ln_2(H))
    if way == "mlp-reads-X":
        return X + b.attn(ln_1(X)) + b.mlp(ln_2(X))
    if way == "no-residual":
        return b.mlp(ln_2(b.attn(ln_1(X))))
    H = X + ln_1(b.attn(X))                              # "normed-output"
    return H + ln_2(b.mlp(H))


_RUN_MISTAKES = [
    Mistake("unchanged",
            "this gives what the function as given gives: right for Post-Norm blocks, not for Pre-Norm ones. "
            "If both sublayers of a Pre-Norm block added nothing, what should the block return, and what does "
            "this function return?",
            run_block_as_given,
            more="in the Pre-Norm branch the stream is replaced by its normalised copy before the residual "
                 "addition, so the residual path carries LN(X) instead of X, and nothing passes the block "
                 "un-normalised. The LayerNorm's output should only feed the sublayer; the addition takes the "
                 "stream as it came in."),
    *variants(_block_variant, [
        ("post-broken", dict(post="pre"),
         "your Pre-Norm blocks are right now, but the Post-Norm ones are not. Does your function still tell "
         "the two layouts apart?",
         "your function computes the Pre-Norm formula for every block. The Post-Norm branch was right as "
         "given: a Post-Norm block normalises after each residual addition."),
        ("pre-as-post", dict(pre="post"),
         "your Post-Norm blocks are right, but your Pre-Norm blocks get the Post-Norm formula. Where does a "
         "Pre-Norm block normalise?",
         "both branches compute Post-Norm now. A Pre-Norm block normalises the input of each sublayer and "
         "adds the sublayer's output to the stream itself."),
        ("mlp-reads-X", dict(pre="mlp-reads-X"),
         "in your Pre-Norm branch, does the MLP see what attention has just added to the stream?",
         "your MLP reads the block's input X instead of the middle stream H, so it never sees what attention "
         "brought in from other positions. The loop has to feed each sublayer the stream as it is after the "
         "previous one."),
        ("no-residual", dict(pre="no-residual"),
         "in your Pre-Norm branch, what is each sublayer's output added to?",
         "your Pre-Norm branch replaces the stream by each sublayer's output; the residual additions are "
         "gone, and with them the straight path from X to the output."),
        ("normed-output", dict(pre="normed-output"),
         "in your Pre-Norm branch, which tensor does each sublayer read: the stream, or a normalised copy?",
         "your sublayers read the raw stream and their outputs are normalised. In Pre-Norm the LayerNorm "
         "comes before the sublayer: it reads a normalised copy, and its output is added as it is."),
        ("norms-swapped", dict(swap_norms=True),
         "does each sublayer get its own LayerNorm, the one the block keeps for it?",
         "ln_1 belongs to attention and ln_2 to the MLP; you paired them the other way round."),
    ]),
]

CALLED_BLOCK = Mistake(
    "called-block",
    "the values are right, but your function lets the block compute itself. The exercise is to compute it "
    "from the four parts: which of them does each layout run, in which order?",
    more="your function calls block(X) (or block.forward). Fix the loop instead: run ln_1, attn, ln_2 and "
         "mlp yourself, in the order each layout gives.")


def _calls_recorded(fn, seen: list[int]):
    """``fn`` with the block's own forward replaced (on the learner's copy) by one that counts its calls."""
    if not callable(fn):
        return fn

    @functools.wraps(fn)
    def run(X, block, *rest):
        forward = block.forward

        def counted(*args, **kwargs):
            seen.append(1)
            return forward(*args, **kwargs)

        block.forward = counted
        try:
            return fn(X, block, *rest)
        finally:
            del block.forward
    return run


@checker(mistakes=[*_RUN_MISTAKES, CALLED_BLOCK])
def check_run_block(fn) -> Verdict:
    """Check ``fn(X, block)`` is :func:`run_block_as_given` with its bug fixed: what block(X) computes, for
    Pre-Norm and Post-Norm blocks, X (B, T, d_model) → (B, T, d_model), built from the block's four parts."""
    seen: list[int] = []
    with torch.no_grad():
        verdict = judge(_calls_recorded(fn, seen), _block_cases(), lambda X, block: block(X), _RUN_MISTAKES,
                        success="each sublayer reads a normalised copy in Pre-Norm and the stream in Post-Norm; "
                                "the residual path carries the stream itself.")
    if verdict.ok and seen:
        return named(CALLED_BLOCK)
    return verdict


# ---------------------------------------------------------------------------------- predict: a block's FLOPs
_FLOPS_QUESTION = dict(T=10, d_model=48, h=4, d_ff=128)   # Block(48, h=4, d_ff=128, backend="plain"), 10 tokens


def _block_flops(T: int, d_model: int, h: int, d_ff: int) -> int:
    """What FlopCounterMode counts for one forward pass of the block on one sequence of T tokens: measured."""
    with torch.random.fork_rng(devices=[]):
        block = Block(d_model, h, d_ff, backend="plain")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        block(torch.zeros(1, T, d_model))
    return counter.get_total_flops()


def _flops_guesses(T: int, d_model: int, h: int, d_ff: int) -> list[Guess]:
    """The typical wrong counts, each with which part of the count is off (never how to count)."""
    d = d_model
    qkv, out, mlp, scores = 6 * T * d * d, 2 * T * d * d, 4 * T * d * d_ff, 4 * T * T * d
    right = qkv + out + mlp + scores
    return [
        Guess("multiply-adds",
              "too low by a factor of two, in every part of the block alike. What does FlopCounterMode count for "
              "one multiply-add?", right // 2,
              more="you counted multiply-adds. The counter counts each as two FLOPs, a multiply and an add."),
        Guess("d_ff-assumed",
              "too high, and only the MLP's share is off: how wide is this block's hidden layer?",
              right - mlp + 4 * T * d * 4 * d,
              more="you took the usual d_ff = 4·d_model = 192; this block was built with d_ff = 128."),
        Guess("no-attention-products",
              "too low, by a part that grows with T². Your count covers the layers with weights; which matrix "
              "products of attention have none?", right - scores,
              more="the scores QKᵀ and the weighted sum of the values are matrix products too, over all T × T "
                   "pairs of every head; your count leaves both out."),
        Guess("causal-half",
              "a little too low, in attention's T × T part. Does the plain backend skip the masked pairs?",
              right - scores + 2 * T * (T + 1) * d,
              more="the mask is added to a full T × T score table and the weights, zeros included, multiply "
                   "all of V: the counter sees every pair, not only the allowed ones."),
        Guess("one-head",
              "a little too low, in attention's T × T part. Did you count it for every head?",
              right - scores + scores // h,
              more="each of the h = 4 heads computes its own scores and weighted sum, d_head = 12 wide; "
                   "together they are d_model wide."),
        Guess("no-W_O", "too low, in attention's projections: did you count the one after the heads?",
              right - out,
              more="you left out W_O, the output projection that mixes the concatenated heads."),
        Guess("one-projection",
              "too low, in attention's projections: how many columns does W_QKV have?", right - qkv + qkv // 3,
              more="W_QKV makes Q, K and V at once: it is d_model × 3·d_model, three projections' worth of "
                   "work, not one."),
        Guess("one-mlp-matrix", "too low, in the MLP's share: how many weight matrices does the MLP have?",
              right - mlp // 2,
              more="the MLP multiplies by W_1 and then by W_2; you counted one of them."),
        Guess("mlp-only", "too low: that is about the MLP alone. What else does a block run?", mlp,
              more="the block also runs attention: its projections and its two T × T products."),
        Guess("attention-only", "too low: a whole sublayer is missing, the one with d_ff in it.",
              qkv + out + scores,
              more="you counted attention; the MLP's two matrices are missing."),
        Guess("one-token", "far too low: about one position's share. Every position runs through the block.",
              right // T,
              more="that is the count divided by T. Every one of the T positions goes through the "
                   "projections and the MLP, and attention's T × T part grows faster still."),
        Guess("elementwise-counted",
              "a little too high. What does the counter leave out?",
              right + T * (4 * d + d_ff + d),
              more="FlopCounterMode counts matrix products only: biases, GELU, LayerNorm and softmax add nothing "
                   "to its count."),
    ]


@checker(kind="predict", mistakes=_flops_guesses(**_FLOPS_QUESTION))
def check_block_flops(n) -> Verdict:
    """Check a predicted number of FLOPs that ``FlopCounterMode`` counts for ``Block(48, h=4, d_ff=128,
    backend="plain")`` on one sequence of 10 tokens."""
    want = _block_flops(**_FLOPS_QUESTION)                               # measured, not computed
    return judge_number(n, want, _flops_guesses(**_FLOPS_QUESTION), rtol=1e-9,
                        success="the four projections, the MLP's two matrices at its own d_ff, and QKᵀ and the "
                                "weighted sum over all T × T pairs: the mask saves no work here.",
                        again="go through the block's parts one at a time, and predict again.")


# ----------------------------------------------------------------------------- extend: LayerNorm from RMSNorm
def _rms_cases():
    """(X, gamma, beta) built fresh: rows with a clear mean (so centring shows), one row of tiny variance (so ε
    shows, and torch's default ε differs), and a float64 (T, d_model) case."""
    g = _gen(78)

    def case(*shape):
        X = 2 * torch.randn(*shape, generator=g, dtype=torch.float64) + 1.5
        gamma = 1 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
        beta = 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
        return X, gamma, beta

    tiny = case(1, 4, 6)
    tiny[0][0, 1] = -0.4 + 2e-3 * torch.randn(6, generator=g, dtype=torch.float64)   # variance ≈ 4e-6 < ε
    return [tuple(t.float() for t in c) for c in (case(2, 5, 8), tiny)] + [case(6, 8)]


def _layer_norm_same_dtype(X, gamma, beta):
    return F.layer_norm(X, X.shape[-1:], gamma, beta, EPS)


def _from_rms_variant(X, gamma, beta, *, center=-1, eps=EPS, shift=True, gamma_inside=True):
    """LayerNorm from torch's rms_norm; every switch's default is right, any other value plants a mistake.

    ``center``: the axis whose mean is subtracted (None: no centring). ``eps``: rms_norm's ε (None: its default,
    the dtype's machine epsilon). ``shift``: add beta. ``gamma_inside``: gamma given to rms_norm, or left out.
    """
    Xc = X if center is None else X - X.mean(center, keepdim=True)
    Y = F.rms_norm(Xc, X.shape[-1:], gamma if gamma_inside else None, eps=eps)
    return Y + beta if shift else Y


_RMS_TABLE = variants(_from_rms_variant, [
    ("no-centering", dict(center=None),
     "rows whose mean is far from 0 come out wrong. What does RMSNorm's mean of squares measure when a row's "
     "mean is not 0, and what does LayerNorm's variance measure?",
     "rms_norm divides by the root mean square about 0, LayerNorm by the spread about the row's mean. Once "
     "the row is centred, its mean of squares is its variance, and the two agree."),
    ("eps-default", dict(eps=None),
     "every row is right but the one of tiny variance. Which ε does torch's rms_norm use when it is not told "
     "one?",
     "rms_norm's default ε is the machine epsilon of the dtype (about 1.2e-7 in float32), not LayerNorm's "
     "1e-5. Pass LayerNorm's ε explicitly."),
    ("no-beta", dict(shift=False),
     "each row is normalised and scaled right. What is missing from LayerNorm's formula?",
     "the shift beta is missing: RMSNorm has no shift, LayerNorm adds beta at the end."),
    ("no-gamma", dict(gamma_inside=False),
     "each row is normalised and then shifted. Is it scaled?",
     "the scale gamma is missing: give it to rms_norm as its weight, or multiply by it before adding beta."),
    ("center-wrong-axis", dict(center=-2),
     "change one token's vector: does only that token's output change? Over which axis is your mean taken?",
     "you subtracted the mean over the positions, the second-to-last axis. Each token's vector is centred "
     "by its own mean, over d_model."),
])

CALLED_LAYER_NORM_RMS = Mistake(
    "called-layer-norm",
    "the values are right, but torch's layer_norm did the work. The exercise is to get LayerNorm out of "
    "rms_norm: how do the two formulas differ?",
    more="your function calls torch's layer_norm (or a LayerNorm module). Use rms_norm for the division, and "
         "do yourself what LayerNorm does beyond it.")


@checker(mistakes=[*_RMS_TABLE, CALLED_LAYER_NORM_RMS])
def check_layer_norm_from_rms(fn) -> Verdict:
    """Check ``fn(X, gamma, beta)``: LayerNorm with ε = 1e-5 for X (..., d_model), gamma and beta (d_model,),
    against ``torch.nn.functional.layer_norm``, in float32 and float64."""
    seen: list[_Watch] = []
    verdict = judge(_watched(fn, seen), _rms_cases(), _layer_norm_same_dtype, _RMS_TABLE,
                    success="centred first, RMSNorm is LayerNorm's division: its mean of squares is then the "
                            "variance.")
    if verdict.ok and any("native_layer_norm" in w.ops for w in seen):
        return named(CALLED_LAYER_NORM_RMS)
    return verdict
