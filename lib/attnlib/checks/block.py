"""Exercise checkers for the block chapter (chapter 7).

``check_layer_norm(fn)``: ``fn(X, gamma, beta)`` → LayerNorm by hand, in float16, float32 and float64.
``check_mlp_in_chunks(fn)``: ``fn(X, W_1, b_1, W_2, b_2, chunk)`` → the MLP, a few hidden columns at a time.
``check_run_block(fn)``: ``fn(X, block)``, :func:`run_block_as_given` with its bug fixed.
``check_block_flops(n)``: a predicted number of FLOPs ``FlopCounterMode`` counts for one block.
``check_layer_norm_from_rms(fn)``: ``fn(X, gamma, beta)`` → LayerNorm made from torch's ``rms_norm``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ..block import Block
from ._core import Group, Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_layer_norm", "check_mlp_in_chunks", "check_run_block", "check_block_flops",
           "check_layer_norm_from_rms", "run_block_as_given"]

EPS = 1e-5                                       # the LayerNorm epsilon of torch and of the library


def _called(mistake: Mistake, name: str, where: str = "ops"):
    """The property "the learner's call ran ``name``" (an aten operator, or a Python function's qualified name)."""
    return lambda case, got, args, watch: named(mistake) if name in getattr(watch, where) else None


# ------------------------------------------------------------------------------------------------ LayerNorm
def _ln_case(g, spread, offset, *shape):
    """float64 (X, gamma, beta) with X (*shape) drawn around ``offset``, gamma around 1 and beta around 0."""
    X = spread * torch.randn(*shape, generator=g, dtype=torch.float64) + offset
    gamma = 1 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    beta = 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    return X, gamma, beta


def _norm_groups():
    """(X, gamma, beta) built fresh, one group per tolerance: a row of tiny variance (ε matters), float64,
    and float16 rows with a large offset or spread (also run in float32, where only cancellation fails)."""
    g = _gen(71)
    case = functools.partial(_ln_case, g, 3, 1)
    X, gamma, beta = case(5, 8)                                        # (T, d_model)
    X[2] = 0.1 + 2e-3 * torch.randn(8, generator=g, dtype=torch.float64)   # variance ≈ 4e-6, below ε = 1e-5
    fp32 = [tuple(t.float() for t in c) for c in (case(2, 5, 8), (X, gamma, beta), case(2, 2, 3, 6))]
    fp64 = [case(1, 4, 8)]
    X, gamma, beta = case(2, 4, 16)
    rows = torch.randn(4, 16, generator=g, dtype=torch.float64)
    X[0, 1], X[1, 2] = 300 + rows[0], -180 + 0.7 * rows[1]            # large offsets
    X[0, 3], X[1, 0] = 400 * rows[2], 50 + 300 * rows[3]              # large spreads
    fp16 = (X.half(), gamma.half(), beta.half())
    return [Group(fp32, 1e-5), Group([tuple(t.float() for t in fp16)], 1e-4), Group(fp64, 1e-9),
            Group([fp16], 8e-3)]


def _layer_norm(X, gamma, beta):
    """The exact LayerNorm (computed in float64), rounded to the dtype of X."""
    return F.layer_norm(X.double(), X.shape[-1:], gamma.double(), beta.double(), EPS).to(X.dtype)


def _ln_variant(X, gamma, beta, *, dim=-1, unbiased=False, eps="inside", value=EPS, center=True, affine=True,
                swap=False):
    """LayerNorm written out, computed in float32 or wider and rounded to X's dtype; every switch's default is
    right, any other value plants a mistake (``dim`` 2 counts the axis from the front)."""
    x, gamma, beta = (t.to(torch.promote_types(X.dtype, torch.float32)) for t in (X, gamma, beta))
    gamma, beta = (beta, gamma) if swap else (gamma, beta)
    mu = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    spread = {"inside": torch.sqrt(var + value), "none": torch.sqrt(var), "outside": torch.sqrt(var) + value}[eps]
    Y = ((x - mu) if center else x) / spread
    return (Y * gamma + beta if affine else Y).to(X.dtype)


def _not_half(case) -> bool:
    return case[0].dtype != torch.float16


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
    ("eps-value", dict(value=1e-6),
     "only the row of tiny variance is off, and ε sits in the right place. How large is your ε?",
     "your ε is 1e-6; this LayerNorm (like torch's default) uses ε = 1e-5, which matters on a row whose variance "
     "is about as small."),
    ("no-gamma-beta", dict(affine=False),
     "every row of yours has mean 0 and standard deviation 1. What do gamma and beta do?",
     "the normalisation is right, but the learned scale and shift are missing: multiply by gamma, then add "
     "beta, feature by feature."),
    ("gamma-beta-swapped", dict(swap=True),
     "the normalised rows are right, but the scale and the shift are not: which of gamma and beta multiplies?",
     "you multiplied by beta and added gamma. gamma is the scale (it multiplies), beta the shift (it is added)."),
    ("no-centering", dict(center=False),
     "do the rows of your result, before gamma and beta, have mean 0?",
     "you divided by the standard deviation without subtracting the mean first."),
], where=_not_half)         # float16 blurs these; they are named on the wider cases

_LN_MISTAKES = [*_LN_TABLE, Mistake(
    "float16-statistics",
    "your function is right in float32 and float64 but not in float16, on the rows with a large offset or a "
    "large spread. Which of your intermediate numbers can float16 not hold, or not hold precisely enough? "
    "What are its largest number and its spacing near 300?", _layer_norm,
    more="your mean and variance are computed in float16. A variance above 65504 overflows to inf, and a mean "
         "near 300 is rounded to a multiple of 0.25, which shifts the whole centred row. Do the arithmetic in "
         "float32 (float64 stays float64) and round to float16 only at the end.", where=_not_half), Mistake(
    "cancellation",
    "your function is right on ordinary rows, but on the rows with a large offset it is wrong even in "
    "float32. What happens when you subtract two large numbers that are nearly equal?", _layer_norm,
    more="you compute the variance as the mean of the squares minus the square of the mean. For a row near 300 "
         "both are about 90 000 and their difference, about 1, keeps few correct digits (and in float16 the "
         "squares overflow). Subtract the mean first, then average the squared deviations.",
    where=lambda case: bool(case[0].abs().max() < 100))]

CALLED_LAYER_NORM = Mistake(
    "called-layer-norm",
    "the values are right, but torch's own layer_norm did the work. The exercise is to compute it yourself: "
    "what does it do, step by step?",
    more="your function calls torch's layer_norm (or a LayerNorm module). Compute the mean and the variance of "
         "each token's vector yourself, then normalise, scale and shift.")


@checker(mistakes=[*_LN_MISTAKES, CALLED_LAYER_NORM])
def check_layer_norm(fn) -> Verdict:
    """``fn(X, gamma, beta)``: X (..., d_model) in float16, float32 or float64 → LayerNorm (ε = 1e-5), X's dtype."""
    return judge(fn, _norm_groups(), _layer_norm, _LN_MISTAKES, watch=True,
                 properties=_called(CALLED_LAYER_NORM, "native_layer_norm"),
                 success="every token's vector is normalised over its last axis, in float16 too, and comes "
                         "back in the dtype it came in.")


# ------------------------------------------------------------------------------------------ MLP in chunks
def _mlp_cases():
    """d_ff never 4·d_model; one d_ff not a multiple of chunk, one that is, and float64 with chunk < d_model."""
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
                   width="W_1", whole=None):
    """The MLP in chunks of hidden columns; every switch's default is right, any other value plants a mistake."""
    f = {"gelu": F.gelu, "tanh-gelu": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu,
         "none": lambda t: t}[act]
    d_ff = W_1.shape[1] if width == "W_1" else 4 * X.shape[-1]
    stop = d_ff if tail else d_ff // chunk * chunk
    out = torch.zeros_like(X)
    for a in range(0, stop, chunk):
        hidden = X @ W_1[:, a:a + chunk] + (b_1 if whole == "b_1" else b_1[a:a + chunk])
        part = (f(hidden) if gelu_on == "hidden" else hidden) @ (W_2 if whole == "W_2" else W_2[a:a + chunk])
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
_UNCUT = ("a chunk of the hidden layer met a piece of another width. Which of the MLP's four parameters run along "
          "d_ff, and did you cut each of them along that axis, at the same hidden columns?",
          "W_1's columns, b_1 and W_2's rows all run along the hidden axis, d_ff long; each chunk needs the same "
          "hidden columns of all three, while X and b_2 are used whole.")

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
    *[("gelu-after-W_2", dict(gelu_on=on), *_GELU_AFTER) for on in ("partial", "sum", "sum+b_2")],
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
    *[("uncut", dict(whole=part), *_UNCUT) for part in ("b_1", "W_2")],
])

FULL_HIDDEN = Mistake(
    "full-hidden",
    "the values are right, but your function held a tensor {width} numbers wide while chunk was {chunk}. "
    "Which of your steps fills more hidden columns at once than chunk?",
    more="a tensor of yours had {width} columns on its last axis, more than chunk = {chunk}: the hidden layer "
         "(or a product as wide) was made in one go. Cut W_1's columns, b_1 and W_2's rows the same way, one "
         "chunk of hidden columns at a time, and add each chunk's share of the output to a running sum.")


def _too_wide(case, got, args, watch) -> Verdict | None:
    """FULL_HIDDEN when a tensor made while watching, other than the inputs, is wider than chunk and d_model."""
    X, *_, chunk = case
    given = {tuple(t.shape) for t in case[:5]}
    widths = [s[-1] for s in watch.shapes if s and s not in given and s[-1] > chunk and s[-1] != X.shape[-1]]
    return named(FULL_HIDDEN, width=max(widths), chunk=chunk) if widths else None


@checker(mistakes=[*_CHUNK_TABLE, FULL_HIDDEN])
def check_mlp_in_chunks(fn) -> Verdict:
    """``fn(X, W_1, b_1, W_2, b_2, chunk)``: the MLP, no tensor more than ``chunk`` hidden columns wide."""
    return judge(fn, _mlp_cases(), _mlp, _CHUNK_TABLE, watch=True, properties=_too_wide,
                 success="one chunk of hidden columns at a time, each adding its share of the output, b_2 "
                         "once; the same numbers as the whole MLP.")


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


def _block_cases():
    """X (B, T, d_model) and a new Block with non-trivial LayerNorms per case; the same numbers on every call."""
    cases = []
    for seed, B, T, d_model, h, norm in _BLOCK_CASES:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            block = Block(d_model, h, norm=norm).eval()
            with torch.no_grad():
                for ln in (block.ln_1, block.ln_2):
                    ln.weight.normal_(1.0, 0.3)
                    ln.bias.normal_(0.0, 0.3)
            cases.append((2 * torch.randn(B, T, d_model) + 0.5, block))
    return cases


def _block_variant(X, b, *, pre="right", post="right", swap_norms=False):
    """Both layouts written out from b's parts; every switch's default is right, any other value plants a
    mistake."""
    ln_1, ln_2 = (b.ln_2, b.ln_1) if swap_norms else (b.ln_1, b.ln_2)
    way = pre if b.norm == "pre" else {"right": "post", "pre": "right"}[post]
    if way in ("right", "no-norm"):
        ln_1, ln_2 = (ln_1, ln_2) if way == "right" else (torch.nn.Identity(), torch.nn.Identity())
        H = X + b.attn(ln_1(X))
        return H + b.mlp(ln_2(H))
    if way == "post":
        H = ln_1(X + b.attn(X))
        return ln_2(H + b.mlp(H))
    if way == "normed-residual":
        H = ln_1(X) + b.attn(ln_1(X))
        return ln_2(H) + b.mlp(ln_2(H))
    if way == "roles-swapped":
        H = ln_1(X) + b.attn(X)
        return ln_2(H) + b.mlp(H)
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
        ("no-norm", dict(pre="no-norm"),
         "in your Pre-Norm branch, is a LayerNorm still used at all?",
         "your Pre-Norm branch adds each sublayer's output to the stream, but the sublayer reads the raw "
         "stream: the LayerNorm that comes before each sublayer is gone."),
        ("roles-swapped", dict(pre="roles-swapped"),
         "in your Pre-Norm branch, which tensor does the sublayer read, and which one does the residual carry?",
         "the two roles are swapped: your sublayer reads the raw stream while the residual path carries the "
         "normalised copy. The normalised copy only feeds the sublayer; the residual carries the stream."),
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


@checker(mistakes=[*_RUN_MISTAKES, CALLED_BLOCK])
def check_run_block(fn) -> Verdict:
    """``fn(X, block)``: run_block_as_given fixed, block(X) from the block's four parts, either layout."""
    with torch.no_grad():
        return judge(fn, _block_cases(), lambda X, block: block(X), _RUN_MISTAKES, watch=True,
                     properties=_called(CALLED_BLOCK, "Block.forward", "calls"),
                     success="each sublayer reads a normalised copy in Pre-Norm and the stream in Post-Norm; "
                             "the residual path carries the stream itself.")


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
    """A predicted FLOP count of ``Block(48, h=4, d_ff=128, backend="plain")`` on 10 tokens."""
    want = _block_flops(**_FLOPS_QUESTION)                               # measured, not computed
    return judge_number(n, want, _flops_guesses(**_FLOPS_QUESTION), rtol=1e-9,
                        success="the four projections, the MLP's two matrices at its own d_ff, and QKᵀ and the "
                                "weighted sum over all T × T pairs: the mask saves no work here.",
                        again="go through the block's parts one at a time, and predict again.")


# ----------------------------------------------------------------------------- extend: LayerNorm from RMSNorm
def _rms_cases():
    """Rows with a clear mean, one row of tiny variance (so ε shows), and a float64 (T, d_model) case."""
    g = _gen(78)
    case = functools.partial(_ln_case, g, 2, 1.5)
    tiny = case(1, 4, 6)
    tiny[0][0, 1] = -0.4 + 2e-3 * torch.randn(6, generator=g, dtype=torch.float64)   # variance ≈ 4e-6 < ε
    return [tuple(t.float() for t in c) for c in (case(2, 5, 8), tiny)] + [case(6, 8)]


_layer_norm_same_dtype = lambda X, gamma, beta: F.layer_norm(X, X.shape[-1:], gamma, beta, EPS)


def _from_rms_variant(X, gamma, beta, *, center=-1, eps=EPS, shift=True, gamma_inside=True, swap=False, axes=1,
                      after=False):
    """LayerNorm from torch's rms_norm; every switch's default is right, any other value plants a mistake."""
    gamma, beta = (beta, gamma) if swap else (gamma, beta)
    Xc = X if center is None or after else X - X.mean(center, keepdim=True)
    if axes == 2:
        Y = F.rms_norm(Xc, X.shape[-2:], eps=eps) * gamma
    else:
        Y = F.rms_norm(Xc, X.shape[-1:], gamma if gamma_inside and not after else None, eps=eps)
    Y = (Y - Y.mean(-1, keepdim=True)) * gamma if after else Y
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
    ("eps-value", dict(eps=1e-6),
     "every row is right but the one of tiny variance, and you did give rms_norm an ε. How large is it?",
     "your ε is 1e-6; LayerNorm here uses ε = 1e-5, which matters on a row whose variance is about as small."),
    ("no-beta", dict(shift=False),
     "each row is normalised and scaled right. What is missing from LayerNorm's formula?",
     "the shift beta is missing: RMSNorm has no shift, LayerNorm adds beta at the end."),
    ("no-gamma", dict(gamma_inside=False),
     "each row is normalised and then shifted. Is it scaled?",
     "the scale gamma is missing: give it to rms_norm as its weight, or multiply by it before adding beta."),
    ("gamma-beta-swapped", dict(swap=True),
     "each row is normalised right, but scaled and shifted wrong: which of gamma and beta is the weight?",
     "you passed beta as rms_norm's weight and added gamma. gamma is the scale (the weight), beta the shift."),
    ("center-wrong-axis", dict(center=-2),
     "change one token's vector: does only that token's output change? Over which axis is your mean taken?",
     "you subtracted the mean over the positions, the second-to-last axis. Each token's vector is centred "
     "by its own mean, over d_model."),
    ("rms-wrong-axes", dict(axes=2),
     "change one token's vector: does only that token's output change? Over which axes does your rms_norm "
     "take its mean of squares?",
     "your normalized_shape covers the last two axes, so rms_norm divides by one root mean square over the "
     "whole (T, d_model) slice. LayerNorm normalises each token's vector alone: the last axis only."),
    ("centred-after", dict(after=True),
     "your output rows have mean beta, but their spread is off. Did you centre the row before rms_norm divides "
     "it, or after?",
     "you subtracted the mean from rms_norm's output. rms_norm must divide the centred row: its root mean "
     "square is then the standard deviation. Centre first, then call rms_norm."),
])

CALLED_LAYER_NORM_RMS = Mistake(
    "called-layer-norm",
    "the values are right, but torch's layer_norm did the work. The exercise is to get LayerNorm out of "
    "rms_norm: how do the two formulas differ?",
    more="your function calls torch's layer_norm (or a LayerNorm module). Use rms_norm for the division, and "
         "do yourself what LayerNorm does beyond it.")


@checker(mistakes=[*_RMS_TABLE, CALLED_LAYER_NORM_RMS])
def check_layer_norm_from_rms(fn) -> Verdict:
    """``fn(X, gamma, beta)``: LayerNorm (ε = 1e-5) made from torch's rms_norm."""
    return judge(fn, _rms_cases(), _layer_norm_same_dtype, _RMS_TABLE, watch=True,
                 properties=_called(CALLED_LAYER_NORM_RMS, "native_layer_norm"),
                 success="centred first, RMSNorm is LayerNorm's division: its mean of squares is then the "
                         "variance.")
