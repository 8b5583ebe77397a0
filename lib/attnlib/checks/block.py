"""Exercise checkers for the block chapter (chapter 7).

``check_mlp_in_chunks(fn)``: ``fn(X, W_1, b_1, W_2, b_2, chunk)`` → the MLP, a few hidden columns at a time.
``check_run_block(fn)``: ``fn(X, block)``, :func:`run_block_as_given` with its bug fixed.
``check_parallel_block(fn)``: ``fn(X, block)`` → X + A + MLP(LN₁(X)), the parallel layout from a block's parts.
``check_block_flops(n)``: a predicted number of FLOPs ``FlopCounterMode`` counts for one block.
``check_layer_norm_from_rms(fn)``: ``fn(X, gamma, beta)`` → LayerNorm made from torch's ``rms_norm``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ..block import Block
from ._core import Guess, Mistake, Verdict, _gen, _smallest_case, _third, checker, judge, judge_number, named, variants

__all__ = ["check_mlp_in_chunks", "check_run_block", "check_parallel_block", "check_block_flops",
           "check_layer_norm_from_rms", "run_block_as_given"]

EPS = 1e-5                                       # the LayerNorm epsilon of torch and of the library


def _called(mistake: Mistake, name: str, where: str = "ops"):
    """The property "the learner's call ran ``name``" (an aten operator, or a Python function's qualified name)."""
    return lambda case, got, args, watch: named(mistake) if name in getattr(watch, where) else None


# ------------------------------------------------------------------------------------------ MLP in chunks
def _mlp_cases():
    """d_ff never 4·d_model; one d_ff not a multiple of chunk, one that is, and float64 with chunk < d_model."""
    cases, g = [], _gen(73)
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


_mlp = lambda X, W_1, b_1, W_2, b_2, chunk: F.gelu(X @ W_1 + b_1) @ W_2 + b_2


def _chunk_variant(X, W_1, b_1, W_2, b_2, chunk, *, act="gelu", gelu_on="hidden", b_2_each=False, tail=True,
                   width="W_1", whole=None):
    """The MLP in chunks of hidden columns; a switch off its default plants a mistake."""
    f = {"gelu": F.gelu, "tanh-gelu": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu, "none": lambda t: t}[act]
    d_ff = W_1.shape[1] if width == "W_1" else 4 * X.shape[-1]
    out = torch.zeros_like(X)
    for a in range(0, d_ff if tail else d_ff // chunk * chunk, chunk):
        bias = {"b_1": b_1, "no-b_1": 0}.get(whole, b_1[a:a + chunk])
        hidden = X @ W_1[:, a:a + chunk] + bias
        part = (f(hidden) if gelu_on == "hidden" else hidden) @ (W_2 if whole == "W_2" else W_2[a:a + chunk])
        out = out + (f(part) if gelu_on == "partial" else part) + (b_2 if b_2_each else 0)
    if gelu_on in ("sum", "sum+b_2"):
        return f(out) + b_2 if gelu_on == "sum" else f(out + b_2)
    return out if b_2_each else out + b_2


_GELU_AFTER = ("GELU acts on each hidden column, between W_1 and W_2: where does yours act?",
               "you applied GELU after the product with W_2, which makes a different function.")
_UNCUT = ("a chunk of the hidden layer met a piece of another width: did you cut every parameter that runs along "
          "d_ff?", "W_1's columns, b_1 and W_2's rows run along d_ff: each chunk takes the same columns of all three.")

_CHUNK_TABLE = variants(_chunk_variant, [
    ("b_2-each-chunk", dict(b_2_each=True), "your result is off by the same vector at every position, more so "
     "with more chunks: which term belongs to the output once?", "you added b_2 once per chunk, not once."),
    ("tail-dropped", dict(tail=False), "the case where chunk does not divide d_ff is off: do your chunks cover "
     "every hidden column?", "your chunks stop at the last whole multiple of chunk; the narrower last one is lost."),
    ("d_ff-assumed", dict(width="4·d_model"), "how wide is the hidden layer in these tests, and where do you "
     "take d_ff from?", "you took d_ff = 4·d_model; these MLPs have other widths: read d_ff from the weights."),
    *[("gelu-after-W_2", dict(gelu_on=on), *_GELU_AFTER) for on in ("partial", "sum", "sum+b_2")],
    ("relu", dict(act="relu"), "do small negative hidden values come out as exactly zero?",
     "you used ReLU; the MLP here (like GPT-2's) uses GELU, which lets small negative values through."),
    ("no-activation", dict(act="none"), "is there anything between your two products? Without it, what is the "
     "MLP?", "there is no activation, so the MLP collapses into one linear map."),
    ("tanh-gelu", dict(act="tanh-gelu"), "you are close everywhere, but not equal: which form of GELU do you use?",
     "you used the tanh approximation; the library uses the exact form, x·Φ(x), torch's default."),
    *[("uncut", dict(whole=part), *_UNCUT) for part in ("b_1", "W_2")],
    ("no-b_1", dict(whole="no-b_1"), "what is added to each chunk's hidden columns before GELU?",
     "the first bias b_1 is missing: each chunk's hidden columns get their part of b_1."),
])

FULL_HIDDEN = Mistake(
    "full-hidden", "the values are right, but your function held a tensor {width} numbers wide while chunk was "
    "{chunk}: which step fills more hidden columns at once?", more="the hidden layer was made in one go; make one "
    "chunk of hidden columns at a time and add its share of the output to a running sum.")


def _too_wide(case, got, args, watch) -> Verdict | None:
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
    """The exercise's function, with its planted bug: block(X) for either layout (block.norm)."""
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


def _block_cases(layout=None):
    """X (B, T, d_model) and a new Block with non-trivial LayerNorms per case (each in ``layout`` when given, else
    the table's); the same numbers on every call."""
    cases = []
    for seed, B, T, d_model, h, norm in _BLOCK_CASES:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            block = Block(d_model, h, norm=layout or norm).eval()
            for ln in (block.ln_1, block.ln_2):
                torch.nn.init.normal_(ln.weight, 1.0, 0.3)
                torch.nn.init.normal_(ln.bias, 0.0, 0.3)
            cases.append((2 * torch.randn(B, T, d_model) + 0.5, block))
    return cases


# one sublayer's line: (what it has, in words; the new stream from the stream s, its LayerNorm n, sublayer f, input X)
_LINES = {"pre": ("the LayerNorm before the sublayer", lambda s, n, f, X: s + f(n(s))),
          "post": ("the LayerNorm after the sum", lambda s, n, f, X: n(s + f(s))),
          "normed-output": ("the LayerNorm on the sublayer's output", lambda s, n, f, X: s + n(f(s))),
          "norm-after": ("a LayerNorm before the sublayer and one after the sum", lambda s, n, f, X: n(s + f(n(s)))),
          "from-X": ("the output added to the block's input X, not the stream", lambda s, n, f, X: X + f(n(s))),
          "reads-X": ("the sublayer reading the block's input X", lambda s, n, f, X: s + f(n(X))),
          "no-norm": ("no LayerNorm", lambda s, n, f, X: s + f(s)),
          "roles-swapped": ("the LayerNorm on the residual path", lambda s, n, f, X: n(s) + f(s)),
          "no-residual": ("no residual", lambda s, n, f, X: f(n(s)))}


def _block_variant(X, b, *, pre="pre", post="post", norms=None):
    """Both layouts from b's parts, a line per sublayer (one name: both); a switch off its default plants a mistake."""
    s, lines = X, pre if b.norm == "pre" else post
    for line, norm, f in zip((lines,) * 2 if isinstance(lines, str) else lines, (norms or {}).get(b.norm, "12"),
                             (b.attn, b.mlp)):
        s = _LINES[line][1](s, getattr(b, f"ln_{norm}"), f, X)
    return s


_RUN_MISTAKES = [
    Mistake("unchanged", "this gives what the function as given gives: right for Post-Norm blocks, not for "
            "Pre-Norm ones. If both sublayers of a Pre-Norm block added nothing, what should it return?",
            run_block_as_given, more="in the Pre-Norm branch the residual path carries LN(X) instead of X. The "
            "LayerNorm's output only feeds the sublayer; the addition takes the stream as it came in."),
    *variants(_block_variant, [
        ("post-broken", dict(post="pre"), "your Post-Norm blocks are wrong now: does your function still tell the "
         "two layouts apart?", "you compute Pre-Norm for every block; the Post-Norm branch was right as given."),
        ("pre-as-post", dict(pre="post"), "your Pre-Norm blocks get the Post-Norm formula: where does a Pre-Norm "
         "block normalise?", "a Pre-Norm block normalises each sublayer's input and adds its output to the stream."),
        ("mlp-reads-X", dict(pre=("pre", "reads-X")), "in your Pre-Norm branch, does the MLP see what attention has "
         "just added to the stream?", "your MLP reads the block's input X instead of the middle stream H."),
        ("no-residual", dict(pre="no-residual"), "in your Pre-Norm branch, what is each sublayer's output added "
         "to?", "your Pre-Norm branch replaces the stream by each sublayer's output; the residuals are gone."),
        ("normed-output", dict(pre="normed-output"), "in your Pre-Norm branch, does each sublayer read the stream "
         "or a normalised copy?", "you normalised the sublayers' outputs; in Pre-Norm the LayerNorm comes first."),
        ("no-norm", dict(pre="no-norm"), "in your Pre-Norm branch, is a LayerNorm still used at all?",
         "your sublayers read the raw stream: the LayerNorm before each sublayer is gone."),
        ("roles-swapped", dict(pre="roles-swapped"), "in your Pre-Norm branch, which tensor does the sublayer "
         "read, and which does the residual carry?", "your sublayer reads the raw stream, the residual the copy."),
        ("norms-swapped", dict(norms=dict(pre="21", post="21")), "does each sublayer get its own LayerNorm?",
         "ln_1 belongs to attention and ln_2 to the MLP; you paired them the other way round."),
        ("ln_1-for-mlp", dict(norms=dict(pre="11")), "in your Pre-Norm branch, which LayerNorm reads the stream "
         "before the MLP?", "you normalised the MLP's input with ln_1, attention's LayerNorm; the MLP has ln_2."),
        ("final-norm", dict(pre=("pre", "norm-after")), "your Pre-Norm blocks come out normalised: does a Pre-Norm "
         "block normalise its output?", "a Pre-Norm block returns the stream as it is; ln_f follows the last block."),
    ]),
]

CALLED_BLOCK = Mistake(
    "called-block", "the values are right, but the block computed itself: which of its four parts does each "
    "layout run, in which order?", more="your function calls block(X) (or block.forward); run ln_1, attn, ln_2 "
    "and mlp yourself.")
LAYOUT = Mistake("layout", "{said}. Where does that layout put its LayerNorm, and what does its residual add to?",
                 more="{said}: Pre-Norm normalises a sublayer's input, Post-Norm the sum added to the stream.")


def _layouts(verdict, run) -> Verdict | None:
    """Values that differ, named by the lines (of _LINES) that each layout's blocks match on all of its cases (where no
    pair matches, or a result is no tensor of the block's shape, this raises and the first verdict stays)."""
    said = []
    for k in ("pre", "post") if verdict.mistake == "values" else ():
        p = next(p for p in ((a, b) for a in _LINES for b in _LINES) if all(torch.allclose(
            got, _block_variant(*c, **{k: p}), atol=1e-5) for c, got, _ in run.outputs() if c[1].norm == k))
        bad = [f"{('attention', 'the MLP')[i]}'s line had {_LINES[line][0]}" for i, line in enumerate(p) if line != k]
        bad = [f"both lines had {_LINES[p[0]][0]}"] if len(bad) == 2 and p[0] == p[1] else bad
        said += [f"your {k.title()}-Norm blocks come out as if {' and '.join(bad)}"] if bad else []
    return _third(named(LAYOUT, said="; ".join(said)), _smallest_case(run, run.reference, 1e-5)) if said else None


@checker(mistakes=[*_RUN_MISTAKES, CALLED_BLOCK, LAYOUT])
def check_run_block(fn) -> Verdict:
    """``fn(X, block)``: run_block_as_given fixed, block(X) from the block's four parts, either layout."""
    with torch.no_grad():
        return judge(fn, _block_cases(), lambda X, block: block(X), _RUN_MISTAKES, watch=True, diagnose=_layouts,
                     properties=_called(CALLED_BLOCK, "Block.forward", "calls"),
                     success="each sublayer reads a normalised copy in Pre-Norm and the stream in Post-Norm; "
                             "the residual path carries the stream itself.")


# ------------------------------------------------------------------------------------------------ parallel block
def _parallel_reference(X, b):
    """GPT-J's layout from b's parts: both sublayers read one normalised copy, both outputs join X."""
    N = b.ln_1(X)
    return X + b.attn(N) + b.mlp(N)


def _parallel_variant(X, b, *, way):
    """The parallel block written wrongly, one way per row of the table below."""
    N = b.ln_1(X)
    if way in ("sequential", "sequential-ln_1"):
        H = X + b.attn(N)
        return H + b.mlp((b.ln_2 if way == "sequential" else b.ln_1)(H))
    return {"two-norms": lambda: X + b.attn(N) + b.mlp(b.ln_2(X)),
            "ln_2": lambda: X + b.attn(b.ln_2(X)) + b.mlp(b.ln_2(X)),
            "residual-twice": lambda: (X + b.attn(N)) + (X + b.mlp(N)),
            "normed-residual": lambda: N + b.attn(N) + b.mlp(N),
            "no-residual": lambda: b.attn(N) + b.mlp(N),
            "no-norm": lambda: X + b.attn(X) + b.mlp(X),
            "norm-after": lambda: b.ln_1(X + b.attn(X) + b.mlp(X)),
            "mlp-reads-X": lambda: X + b.attn(N) + b.mlp(X),
            "mlp-reads-A": lambda: X + b.attn(N) + b.mlp(b.attn(N)),
            "not-causal": lambda: X + b.attn(N, causal=False) + b.mlp(N),
            "averaged": lambda: X + (b.attn(N) + b.mlp(N)) / 2}[way]()


_SEQUENTIAL = ("does your MLP read what attention has just added? In this layout both sublayers read the same "
               "input.", "your MLP reads H = X + A, as in the sequential block; here it reads the normalised X, "
               "the very copy that attention reads.")

_PARALLEL_MISTAKES = variants(_parallel_variant, [
    *(("sequential", dict(way=w), *_SEQUENTIAL) for w in ("sequential", "sequential-ln_1")),
    ("two-norms", dict(way="two-norms"), "how many LayerNorms does your block use?",
     "your MLP reads ln_2's copy and attention ln_1's; this layout has one LayerNorm, ln_1, for both."),
    ("ln_2", dict(way="ln_2"), "which of the block's LayerNorms feeds your sublayers?",
     "you normalised with ln_2; the layout's one LayerNorm is the block's ln_1, and ln_2 goes unused."),
    ("residual-twice", dict(way="residual-twice"), "how many times does X itself enter your sum?",
     "X enters your sum twice, once with each sublayer; it is added once, with both outputs."),
    ("normed-residual", dict(way="normed-residual"), "which tensor does your residual path carry: X or its "
     "normalised copy?", "you added the outputs to LN₁(X); the copy only feeds the sublayers, X itself is added."),
    ("no-residual", dict(way="no-residual"), "if both sublayers added nothing, would your block return X?",
     "your block returns the two outputs alone: X itself is missing from the sum."),
    ("no-norm", dict(way="no-norm"), "do your sublayers read the stream itself or a normalised copy?",
     "the LayerNorm is missing: both sublayers read ln_1's copy of X, as in Pre-Norm."),
    ("norm-after", dict(way="norm-after"), "does your block normalise its output? Where does the LayerNorm stand in "
     "a Pre-Norm layout?", "you normalised the sum, as Post-Norm does; here ln_1 normalises the sublayers' input."),
    ("mlp-reads-X", dict(way="mlp-reads-X"), "does your MLP read the same input as attention?",
     "your MLP reads X itself, attention the normalised copy; both read ln_1's copy of X."),
    ("mlp-reads-attention", dict(way="mlp-reads-A"), "what does your MLP read: X's normalised copy, or what "
     "attention made of it?", "your MLP reads attention's output A; in this layout it reads the copy attention reads."),
    ("not-causal", dict(way="not-causal"), "may position 0 of your block's output change when a later token "
     "changes?", "your attention reads every position, later ones too: the block's attention is causal."),
    ("averaged", dict(way="averaged"), "by what does your block multiply the sum of the two outputs?",
     "you averaged the two sublayers' outputs; each is added to X in full, as each is in the sequential block."),
])


@checker(mistakes=_PARALLEL_MISTAKES)
def check_parallel_block(fn) -> Verdict:
    """``fn(X, block)``: X + block.attn(block.ln_1(X)) + block.mlp(block.ln_1(X)), from the block's parts."""
    with torch.no_grad():
        return judge(fn, _block_cases("pre"), _parallel_reference, _PARALLEL_MISTAKES,
                     success="both sublayers read one normalised copy of X, and both outputs join X once: the "
                             "MLP no longer reads what attention adds in the same block.")


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
    causal = ("a little too low, in attention's T × T part: does the plain backend skip the masked pairs?",
              "the mask is added to a full T × T table and the weights, zeros included, multiply all of V.")
    return [Guess(label, hint, value, more) for label, value, hint, more in [
        ("multiply-adds", right // 2, "too low by a factor of two, in every part alike: what does the counter "
         "count for one multiply-add?", "the counter counts each multiply-add as two FLOPs."),
        ("d_ff-assumed", right - mlp + 16 * T * d * d, "too high, only in the MLP's share: how wide is this "
         "block's hidden layer?", "you took d_ff = 4·d_model = 192; this block has d_ff = 128."),
        ("no-attention-products", right - scores, "too low, by a part that grows with T²: which products of "
         "attention have no weights?", "QKᵀ and the weighted sum of the values are matrix products too."),
        ("causal-half", right - scores + 2 * T * (T + 1) * d, *causal),
        ("causal-half", right - scores // 2, "too low by half of attention's T × T part: does the plain backend skip "
         "the masked pairs, and did you count both of its T × T products?", "the mask is added to a full T × T table "
         "(no pair is skipped), and QKᵀ and the weighted sum of V each cost 2·T·T·d_model."),
        ("one-head", right - scores + scores // h, "a little too low, in attention's T × T part: did you count it "
         "for every head?", "each of the h = 4 heads computes its own scores and weighted sum, d_head = 12 wide."),
        ("d_model-per-head", right - scores + scores * h, "too high, in attention's T × T part: how wide is each "
         "head's share?", "each head is d_head = 12 wide, not d_model = 48; together they are d_model wide."),
        ("no-W_O", right - out, "too low, in attention's projections: did you count the one after the heads?",
         "you left out W_O, the output projection that mixes the concatenated heads."),
        ("one-projection", right - qkv + qkv // 3, "too low, in attention's projections: how many columns does "
         "W_QKV have?", "W_QKV makes Q, K and V at once: three projections' worth of work."),
        ("one-mlp-matrix", right - mlp // 2, "too low, in the MLP's share: how many weight matrices does it have?",
         "the MLP multiplies by W_1 and then by W_2; you counted one of them."),
        ("mlp-only", mlp, "too low: that is about the MLP alone. What else does a block run?",
         "the block also runs attention: its projections and its two T × T products."),
        ("attention-only", qkv + out + scores, "too low: a whole sublayer is missing, the one with d_ff in it.",
         "you counted attention; the MLP's two matrices are missing."),
        ("one-token", right // T, "far too low: about one position's share. Every position runs through the "
         "block.", "that is the count divided by T."),
        ("elementwise-counted", right + T * (4 * d + d_ff + d), "a little too high: what does the counter leave "
         "out?", "the counter counts matrix products only: biases, GELU, LayerNorm and softmax add nothing."),
    ]]


@checker(kind="predict", mistakes=_flops_guesses(**_FLOPS_QUESTION))
def check_block_flops(n) -> Verdict:
    """A predicted FLOP count of ``Block(48, h=4, d_ff=128, backend="plain")`` on 10 tokens."""
    return judge_number(n, _block_flops(**_FLOPS_QUESTION), _flops_guesses(**_FLOPS_QUESTION), rtol=1e-9,
                        success="the four projections, the MLP's two matrices at its own d_ff, and QKᵀ and the "
                                "weighted sum over all T × T pairs: the mask saves no work here.",
                        again="go through the block's parts one at a time, and predict again.")


# ----------------------------------------------------------------------------- extend: LayerNorm from RMSNorm
def _ln_case(g, spread, offset, *shape):
    X = spread * torch.randn(*shape, generator=g, dtype=torch.float64) + offset
    return X, *(c + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64) for c in (1, 0))


def _rms_cases():
    """Rows with a clear mean, one row of tiny variance (so ε shows), and a float64 (T, d_model) case."""
    g = _gen(78)
    case = functools.partial(_ln_case, g, 2, 1.5)
    tiny = case(1, 4, 6)
    tiny[0][0, 1] = -0.4 + 2e-3 * torch.randn(6, generator=g, dtype=torch.float64)   # variance ≈ 4e-6 < ε
    return [tuple(t.float() for t in c) for c in (case(2, 5, 8), tiny)] + [case(6, 8)]


_layer_norm_same_dtype = lambda X, gamma, beta: F.layer_norm(X, X.shape[-1:], gamma, beta, EPS)


def _from_rms_variant(X, gamma, beta, *, center=-1, eps=EPS, shift=True, gamma_inside=True, swap=False, axes=1,
                      after=False, twice=False, beta_first=False):
    """LayerNorm from torch's rms_norm; a switch off its default plants a mistake."""
    gamma, beta = (beta, gamma) if swap else (gamma, beta)
    Xc = X if center is None or after else X - X.mean(center, keepdim=True)
    if axes != 1:
        Y = F.rms_norm(Xc, X.shape[-2:] if axes == 2 else X.shape[1:], eps=eps) * gamma
    else:
        Y = F.rms_norm(Xc, X.shape[-1:], gamma if gamma_inside and not after else None, eps=eps)
    Y = (Y - Y.mean(-1, keepdim=True)) * gamma if after else Y * gamma if twice else Y
    return (Y + beta) * gamma if beta_first else Y + beta if shift else Y


_WRONG_AXES = ("change one token's vector: does only that token's output change? Over which axes does rms_norm "
               "take its mean of squares?", "your normalized_shape covers more than d_model, the last axis.")
_CENTER_AXIS = ("change one token's vector: does only that token's output change? Over which axis is your mean "
                "taken?", "you subtracted a mean over another axis than d_model, the last one.")

_RMS_TABLE = variants(_from_rms_variant, [
    ("no-centering", dict(center=None), "rows whose mean is far from 0 come out wrong: what does RMSNorm's mean "
     "of squares measure then?", "rms_norm divides by the root mean square about 0; centre the row first."),
    ("eps-default", dict(eps=None), "only the row of tiny variance is off: which ε does rms_norm use when it is "
     "not told one?", "rms_norm's default ε is the dtype's machine epsilon (1.2e-7 in float32), not 1e-5."),
    ("eps-value", dict(eps=1e-6), "only the row of tiny variance is off, and you gave an ε: how large is it?",
     "your ε is 1e-6; LayerNorm here uses 1e-5."),
    ("no-beta", dict(shift=False), "each row is normalised and scaled right: what is missing from LayerNorm's "
     "formula?", "the shift beta is missing: RMSNorm has none, LayerNorm adds it at the end."),
    ("no-gamma", dict(gamma_inside=False), "each row is normalised and then shifted: is it scaled?",
     "the scale gamma is missing: it is rms_norm's weight, or multiplies before beta is added."),
    ("gamma-twice", dict(twice=True), "each row is normalised right, but scaled too much: how many times does "
     "gamma multiply it?", "gamma scales twice: as rms_norm's weight and once more by hand."),
    ("gamma-beta-swapped", dict(swap=True), "each row is normalised right, but scaled and shifted wrong: which of "
     "gamma and beta is the weight?", "you passed beta as the weight and added gamma; gamma is the scale."),
    ("beta-first", dict(gamma_inside=False, beta_first=True), "each row is normalised right, but its shift is "
     "scaled: in which order do gamma and beta act?", "you added beta before scaling by gamma, which scales beta too."),
    *[("center-wrong-axis", dict(center=c), *_CENTER_AXIS) for c in (-2, 0)],
    *[("rms-wrong-axes", dict(axes=a), *_WRONG_AXES) for a in (2, "tail")],
    ("centred-after", dict(after=True), "your rows have mean beta but the wrong spread: did you centre before "
     "rms_norm divides, or after?", "rms_norm must divide the centred row: its RMS is then the standard deviation."),
])

CALLED_LAYER_NORM_RMS = Mistake("called-layer-norm", "the values are right, but torch's layer_norm did the "
                                "work: how do LayerNorm and rms_norm differ?", more="use rms_norm for the "
                                "division, and do yourself what LayerNorm does beyond it.")


@checker(mistakes=[*_RMS_TABLE, CALLED_LAYER_NORM_RMS])
def check_layer_norm_from_rms(fn) -> Verdict:
    """``fn(X, gamma, beta)``: LayerNorm (ε = 1e-5) made from torch's rms_norm."""
    return judge(fn, _rms_cases(), _layer_norm_same_dtype, _RMS_TABLE, watch=True,
                 properties=_called(CALLED_LAYER_NORM_RMS, "native_layer_norm"),
                 success="centred first, RMSNorm is LayerNorm's division: its mean of squares is then the variance.")
