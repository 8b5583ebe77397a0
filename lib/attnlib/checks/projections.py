"""Exercise checkers for chapter 2 (Q = X W_Q, K = X W_K, V = X W_V).

``check_load_projections(fn)``: ``fn(ckpt)``, a dict of W_Q, W_K, W_V, b_Q, b_K, b_V → a module returning (Q, K, V).
``check_split_fused(fn)``: ``fn(X, W_QKV, d_k)`` → (Q, K, V), the "find the bug" split of a fused product fixed.
``check_cross_qkv(fn)``: ``fn(X, X_kv, W_Q, W_KV, d_k)`` → cross-attention's (Q, K, V), K and V from one product.
``check_qkv_params(value)``: a predicted count of GPT-2 small's Q, K, V parameters in one layer.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from ..projections import Projections
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, shared_parameters, variants

__all__ = ["check_load_projections", "check_split_fused", "check_cross_qkv", "check_qkv_params"]


# --- build: load the book's W (d_model, d) into nn.Linear, which keeps weight (out, in): copied, transposed ---------

_NAMES = ("Q", "K", "V")


def _checkpoint(g, d_model, d_k, d_v, dtype) -> dict:
    widths = {"Q": d_k, "K": d_k, "V": d_v}
    return {f"{kind}_{n}": torch.randn(*((d_model,) if kind == "W" else ()), widths[n], generator=g, dtype=dtype)
            for n in _NAMES for kind in ("W", "b")}


def _load_cases() -> list[tuple]:
    g = _gen(20)
    return [
        (_checkpoint(g, 4, 4, 4, torch.float32),),    # square: copying W without the transpose still runs
        (_checkpoint(g, 6, 4, 3, torch.float64),),    # float64, as exported from numpy; d_v ≠ d_k
        (_checkpoint(g, 5, 2, 6, torch.float32),),    # d_v > d_model > d_k
    ]


def _probe(ckpt) -> torch.Tensor:
    """The input every loaded module is called on: (2, 3, d_model), in the checkpoint's dtype."""
    return torch.randn(2, 3, ckpt["W_Q"].shape[0], generator=_gen(23), dtype=ckpt["W_Q"].dtype)


def _load_reference(ckpt, flip=False):
    X = _probe(ckpt)
    return tuple(X @ (ckpt[f"W_{n}"].T if flip else ckpt[f"W_{n}"]) + ckpt[f"b_{n}"] for n in _NAMES)


LOAD_NOT_A_MODULE = Mistake("not-a-module",
    "your function returned a {got}, not a layer: what should a loaded checkpoint become, to be called on X?",
    more="return the new module itself, with the checkpoint's numbers in its layers; the checker calls it on an "
         "input X and expects (Q, K, V).")
LOAD_DTYPE = Mistake("module-dtype",
    "your layers hold {have} numbers, the checkpoint {want}. What dtype does a new nn.Linear get when nobody says?",
    more="nn.Linear is created in torch's default dtype, float32, and copying float64 numbers into it rounds them "
         "silently: create or convert the module in the checkpoint's dtype.")
LOAD_SHARED = Mistake("shared-checkpoint",
    "your layer's parameter {name} is the checkpoint's own memory: training the layer would change the "
    "checkpoint. Did you copy the numbers, or hand over the tensor?",
    more="your parameter {name} shares storage with a checkpoint tensor: nn.Parameter around it (or its transpose, a "
         "view) shares it, and so does assigning to .data. Copy the values into the layer's own parameters.")
LOAD_NO_TRANSPOSE = Mistake("no-transpose",
    "with the square checkpoint your module runs but computes other numbers. In which orientation does "
    "nn.Linear keep its weight, and the checkpoint W?",
    functools.partial(_load_reference, flip=True), where=lambda case: len(set(case[0]["W_Q"].shape)) == 1,
    more="you copied the book's W (d_model × d) into nn.Linear's weight as it is; nn.Linear keeps its weight as "
         "out × in and multiplies by its transpose.")
LOAD_BIAS = Mistake("bias",
    "the weights are right, but every row of your {which} is off by the same vector: what does the checkpoint add "
    "after the product?",
    more="your layers' biases are not the checkpoint's (left at their start values, or none): each layer needs a "
         "bias holding b_Q, b_K or b_V.")
LOAD_OUTPUT = Mistake("output", "your module, called on X, returned {got}. What should one call of it give?",
    more="calling the module on X must return three tensors, (Q, K, V), as the library's Projections does.")


class _Refused(Exception):
    """What the learner's function returned cannot be called as asked: carries the verdict that says why."""


def _load_then_call(fn):
    """The learner's loader, then its module called once on the probe: the run the checker judges."""
    def run(ckpt):
        module = fn(ckpt)
        if module is None:
            return None
        if not isinstance(module, nn.Module):
            raise _Refused(named(LOAD_NOT_A_MODULE, got=type(module).__name__))
        if shared := shared_parameters(module, ckpt):
            raise _Refused(named(LOAD_SHARED, name=shared[0].removeprefix("result.")))
        want = ckpt["W_Q"].dtype
        if have := sorted({str(p.dtype).removeprefix("torch.") for p in module.parameters() if p.dtype != want}):
            raise _Refused(named(LOAD_DTYPE, have=" and ".join(have), want=str(want).removeprefix("torch.")))
        with torch.no_grad():
            out = module(_probe(ckpt))
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            got = f"a tuple of {len(out)}" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
            raise _Refused(named(LOAD_OUTPUT, got=got))
        return tuple(out)
    return run


def _load_look(verdict: Verdict, results) -> Verdict | None:
    """Why the module could not be called, or whose biases are off (result − X W the same vector in every row,
    but not b)."""
    outputs = results.outputs()
    if (refused := next((e.args[0] for _, _, e in outputs if isinstance(e, _Refused)), None)) is not None:
        return refused
    biased = []
    for (ckpt,), got, _ in outputs:
        for n, Y in zip(_NAMES, got or ()):
            off = (Y.detach().to(ckpt["W_Q"].dtype) - _probe(ckpt) @ ckpt[f"W_{n}"]).reshape(-1, Y.shape[-1])
            if torch.allclose(off, off[:1].expand_as(off), atol=1e-4) and not torch.allclose(off[0], ckpt[f"b_{n}"]):
                biased.append(n)
    return named(LOAD_BIAS, which=", ".join(dict.fromkeys(biased))) if biased else None


@checker(mistakes=[LOAD_NOT_A_MODULE, LOAD_DTYPE, LOAD_SHARED, LOAD_NO_TRANSPOSE, LOAD_BIAS, LOAD_OUTPUT])
def check_load_projections(fn) -> Verdict:
    """``fn(ckpt)``: a dict of the book's W_Q, W_K, W_V and b_Q, b_K, b_V → a module returning (Q, K, V)."""
    return judge(_load_then_call(fn) if callable(fn) else fn, _load_cases(), _load_reference, [LOAD_NO_TRANSPOSE],
                 diagnose=_load_look,
                 success="a new module in the checkpoint's dtype, its own copy of every number, and on any X "
                         "it returns X W_Q + b_Q, X W_K + b_K and X W_V + b_V.")


# --- find the bug: X @ W_QKV, W_QKV = [W_Q | W_K | W_V]; the bug views the last axis as (d_k, 3), dealing columns ---

def _fused_cases() -> list[tuple]:
    g = _gen(21)
    return [(torch.randn(5, 6, generator=g), torch.randn(6, 3 * 4, generator=g), 4),
        (torch.randn(2, 3, 8, generator=g), torch.randn(8, 3 * 2, generator=g), 2),
        (torch.randn(2, 2, 4, 5, generator=g, dtype=torch.float64),                   # two batch axes, float64
         torch.randn(5, 3 * 3, generator=g, dtype=torch.float64), 3),
    ]


def _planted_split(X, W_QKV, d_k, *, order=(0, 1, 2), cut="blocks"):
    """(Q, K, V) in ``order``, the product cut as ``cut`` says; the defaults compute them."""
    QKV = X @ W_QKV
    lead = QKV.shape[:-1]
    Q, K, V = {   # a cut into other than three pieces fails here, as the learner's unpacking does
        "blocks": lambda: QKV.split(d_k, dim=-1),
        "dealt": lambda: QKV.view(*lead, d_k, 3).unbind(-1),                   # the bug
        "rows": lambda: QKV.chunk(3, dim=-2),
        "threes": lambda: QKV.split(3, dim=-1),
        "front": lambda: QKV.reshape(3, *lead, d_k).unbind(0),
        "axis-1": lambda: QKV.split(d_k, dim=1),                # axis 1: the columns of one table only
        "axis-1-thirds": lambda: QKV.chunk(3, dim=1),
        "axis-1-slices": lambda: [QKV[:, i * d_k:(i + 1) * d_k] for i in range(3)],
        "swap-first": lambda: QKV.view(*lead, 3, d_k).transpose(0, -2).unbind(0),
        "unbind-last": lambda: QKV.view(*lead, 3, d_k).unbind(-1),
    }[cut]()
    return tuple((Q, K, V)[i] for i in order)


_FUSED_MISTAKES = variants(_planted_split, [
    ("unchanged", {"cut": "dealt"},
     "this is still the function as given. Every shape is right, but each of your Q, K and V mixes numbers from "
     "all three matrices: which columns of the product end up in your Q? Try your reshaping on a row of column "
     "numbers 0, 1, 2, …",
     "viewing the last axis as (d_k, 3) deals the columns out in turn, like cards: Q gets columns 0, 3, 6, …. "
     "The three matrices sit side by side as blocks of d_k consecutive columns."),
    ("order", {"order": (1, 0, 2)}, "your Q is what K should be, and your K is Q: in what order do the blocks stand?",
     "Q and K came out swapped: the columns of W_QKV are [W_Q | W_K | W_V], in that order."),
    ("reversed", {"order": (2, 1, 0)}, "your Q is what V should be, and your V is Q: in what order do blocks stand?",
     "the blocks came out reversed: the columns of W_QKV are [W_Q | W_K | W_V], read left to right."),
    ("kv-swapped", {"order": (0, 2, 1)}, "your K is V's, your V is K's: in what order do you return them?",
     "K and V came out swapped: the columns of W_QKV are [W_Q | W_K | W_V], returned as (Q, K, V)."),
    *[("axis-1", {"cut": cut}, "right for one table (T, d_model), wrong with batch axes in front: which axis of the "
       "product holds the columns of W_Q, W_K and W_V then?", "axis 1 holds the columns of a single table only; "
       "with batch axes in front it is another axis. The three blocks sit side by side in the last axis, whatever "
       "axes come before it.") for cut in ("axis-1", "axis-1-thirds", "axis-1-slices")],
    ("batch-axis", {"cut": "swap-first"},
     "right for a single sequence, wrong with a batch axis: after your view, which axis do you swap with the axis "
     "of size 3?", "swapping it with axis 0 puts it in front only without a batch axis; take the three blocks from the "
     "second-last axis, counted from the end."),
    ("rows", {"cut": "rows"}, "each of your Q, K and V holds a third of the positions: along which axis do they sit?",
     "you cut along the positions (T); the projections sit side by side in the last axis, each keeping all T."),
    ("split-count", {"cut": "threes"}, "right only when d_k = 3: is split's number how many pieces, or how wide each?",
     "split's number is the size of each piece: 3 gives pieces of 3 columns, and Q, K, V are d_k columns each."),
    ("reshape-front", {"cut": "front"},
     "your shapes are right, but which positions and columns does your Q hold? Try your reshaping on a small "
     "table of numbered entries.",
     "reshaping (..., T, 3·d_k) to (3, ..., T, d_k) reads memory in order: the first third of the rows becomes Q. "
     "The three blocks sit side by side in the last axis: cut that axis."),
    ("unbind-last", {"cut": "unbind-last"}, "your view has the right sizes, but which axis holds the three blocks?",
     "viewing the last axis as (3, d_k) puts the blocks on the second-last axis; unbinding the last axis splits "
     "it into d_k pieces of 3 columns."),
])
FUSED_EDGES = Mistake(
    "off-by-one", "each of your Q, K and V is a run of consecutive columns of the product, but the edges of {which} "
    "are one column off. Counting from 0, where does each block begin, and is the end of a slice included?",
    more="block i holds columns i·d_k up to, not including, (i + 1)·d_k: each starts where the previous one ended.")


def _fused_edges(verdict: Verdict, results) -> Verdict | None:
    """Every piece a run of columns of X W_QKV, each edge within one column of its block's; some edge off."""
    off = []
    for (X, W, d_k), got, _ in results.outputs():
        if len(got) != 3 or verdict.mistake not in ("values", "shape"):
            return None
        for i, (name, piece) in enumerate(zip(_NAMES, got)):
            F, w = X @ W, piece.shape[-1]
            at = [s for s in range(max(i * d_k - 1, 0), i * d_k + 2) if w and abs(s + w - i * d_k - d_k) <= 1
                  and F[..., s:s + w].shape == piece.shape and torch.allclose(F[..., s:s + w], piece, atol=1e-4)]
            if not at:
                return None
            off += [name] if i * d_k not in at or w != d_k else []
    return named(FUSED_EDGES, which=", ".join(dict.fromkeys(off))) if off else None


@checker(mistakes=[*_FUSED_MISTAKES, FUSED_EDGES])
def check_split_fused(fn) -> Verdict:
    """``fn(X, W_QKV, d_k)`` with X (..., T, d_model), W_QKV (d_model, 3·d_k) → (Q, K, V), each (..., T, d_k)."""
    return judge(fn, _fused_cases(), _planted_split, _FUSED_MISTAKES, diagnose=_fused_edges,
                 success="one product, cut into blocks of d_k consecutive columns, gives Q, K and V.")


# --- extend: cross-attention, Q from X, K and V from X_kv through one product with W_KV = [W_K | W_V] ---------------

def _cross_cases() -> list[tuple]:
    g = _gen(22)

    def case(shape_x, shape_kv, d_k, d_v, dtype=torch.float32):
        return (torch.randn(*shape_x, generator=g, dtype=dtype), torch.randn(*shape_kv, generator=g, dtype=dtype),
                torch.randn(shape_x[-1], d_k, generator=g, dtype=dtype),
                torch.randn(shape_kv[-1], d_k + d_v, generator=g, dtype=dtype), d_k)

    return [
        case((3, 6), (5, 6), 4, 6),             # d_v > d_k: pieces of d_k columns do not fit
        case((2, 4, 8), (2, 7, 5), 3, 2),       # a batch; the other sequence has its own width, 5 ≠ 8
        case((2, 6, 6), (2, 3, 6), 4, 4, torch.float64),   # T_q > T_k, d_v = d_k, float64
    ]


def _planted_cross(X, X_kv, W_Q, W_KV, d_k, *, q_from="X", kv_from="X_kv", cut="sizes", order=(0, 1, 2),
                   q_scaled=False):
    """(Q, K, V) of cross-attention, or a planted slip; the defaults compute them."""
    seq = {"X": X, "X_kv": X_kv}
    Q, KV = seq[q_from] @ W_Q / (d_k ** 0.5 if q_scaled else 1), seq[kv_from] @ W_KV
    d = KV.shape[-1]
    K, V = {"sizes": lambda: KV.split([d_k, d - d_k], dim=-1),
        "equal": lambda: KV.split(d_k, dim=-1),
        "d_k-twice": lambda: KV.split([d_k, d_k], dim=-1),
        "d_k-slices": lambda: (KV[..., :d_k], KV[..., d_k:2 * d_k]),
        "end": lambda: (KV[..., -d_k:], KV[..., :-d_k]),
        "v-from-start": lambda: (KV[..., :d_k], KV[..., :d - d_k]),
        "halves": lambda: KV.chunk(2, dim=-1),
        "sizes-swapped": lambda: KV.split([d - d_k, d_k], dim=-1),
        "dealt": lambda: KV.view(*KV.shape[:-1], -1, 2).unbind(-1),          # the chapter's bug, on K and V
        "dealt-d_k": lambda: KV.view(*KV.shape[:-1], d_k, 2).unbind(-1),
        "dealt-rest": lambda: (KV[..., :2 * d_k:2],   # K from the even columns, V the others
                               torch.cat([KV[..., 1:2 * d_k:2], KV[..., 2 * d_k:]], -1)[..., :d - d_k]),
    }[cut]()
    return tuple((Q, K, V)[i] for i in order)


_CROSS_MISTAKES = variants(_planted_cross, [
    ("kv-from-queries", {"kv_from": "X"}, "your K and V have a row per position of X: which sequence do they describe?",
     "in cross-attention the keys and values come from the other sequence, X_kv: T_k rows, and W_KV is as tall "
     "as X_kv is wide."),
    ("q-from-other", {"q_from": "X_kv"}, "your Q has one row per position of X_kv: whose positions ask the questions?",
     "the queries come from X, one per position of the sequence being updated; only K and V come from X_kv."),
    *[("equal-pieces", {"cut": cut}, "are K and V the same width here? What is d_v, and where can you read it?",
       "you took d_k columns for V as well; d_v need not be d_k: it is what is left of W_KV's columns after the "
       "first d_k.") for cut in ("equal", "d_k-twice", "d_k-slices")],
    ("k-from-the-end", {"cut": "end"}, "your K is d_k wide, but in what order do W_K and W_V stand in W_KV?",
     "W_KV is [W_K | W_V]: K is the FIRST d_k columns of the product, V the rest."),
    ("v-from-start", {"cut": "v-from-start"}, "your V has the right width, but which column does it start at?",
     "W_KV is [W_K | W_V]: V is the columns after K's first d_k, not the first d_v."),
    ("q-scaled", {"q_scaled": True}, "your Q is off by a constant factor: does this step divide by √d_k?",
     "Q is the plain product X W_Q; dividing by √d_k belongs to the scores, a step later."),
    ("halves", {"cut": "halves"}, "you cut the product with W_KV into two equal halves: is W_K as wide as W_V here?",
     "two equal halves give K its d_k columns only when d_v = d_k. K is the first d_k columns, V the rest."),
    ("order", {"order": (0, 2, 1)}, "your second and third results are swapped: in what order should they come back?",
     "the function returns (Q, K, V): your K is in the place of V and your V in the place of K."),
    ("sizes-swapped", {"cut": "sizes-swapped"}, "your K is as wide as V should be, and your V as wide as K: in what "
     "order do the sizes of your cut come?", "W_KV is [W_K | W_V]: the product's first d_k columns are K and the d_v "
     "after them V; your cut takes d_v columns first."),
    *[("dealt", {"cut": cut}, "your K and V take turns: K gets every other column of the product. Where do W_K's "
       "columns stand in W_KV?", "viewing the last axis as (…, 2) deals the columns out in turn, like cards: K gets "
       "columns 0, 2, 4, …. W_K and W_V are blocks side by side: K is the first d_k columns, V the rest.")
      for cut in ("dealt", "dealt-d_k", "dealt-rest")],
])


@checker(mistakes=_CROSS_MISTAKES)
def check_cross_qkv(fn) -> Verdict:
    """``fn(X, X_kv, W_Q, W_KV, d_k)`` → Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v)."""
    return judge(fn, _cross_cases(), _planted_cross, _CROSS_MISTAKES,
                 success="Q from X; K and V from X_kv in one product, cut at d_k: T_k rows each, whatever "
                         "the length and the width of X, and d_v read from W_KV.")


# --- predict: the parameters of the Q, K, V projections of one GPT-2 small layer ------------------------------------

_D, _H = 768, 12


def _qkv_params(d_model: int, h: int) -> int:
    """The parameters of h heads' Projections(d_model, d_head, bias=True), built on the meta device."""
    with torch.device("meta"):
        return sum(p.numel() for _ in range(h) for p in Projections(d_model, d_model // h, bias=True).parameters())


def _guesses() -> list[Guess]:
    d, h, d_head = _D, _H, _D // _H
    return [Guess("one-head", "too low: that is what a single head holds. How many heads does the layer have?",
              3 * (d * d_head + d_head), more=f"each of the h = {h} heads of the layer has its own W_Q, W_K, W_V "
                                              "and biases."),
        Guess("one-head-no-bias", "too low, on two counts: a single head, and something left out of each "
              "projection.", 3 * d * d_head,
              more=f"you counted one head without biases; there are h = {h} heads, and each projection has a bias."),
        Guess("no-bias", "a little too low: the weights are all there. What else does each projection add?",
              3 * d * d, more="every projection also has a bias, one number per output column, for every head."),
        Guess("full-width-heads", "far too high: how wide is one head's W_Q?", h * 3 * (d * d + d),
              more=f"each head's matrices are d_model × d_head, {d} by {d_head}, not d_model × d_model."),
        Guess("one-head-bias-width", "too low, on two counts: a single head, and each of its biases as long as "
              "d_model.", 3 * (d * d_head + d), more=f"h = {h} heads each have W_Q, W_K, W_V; a head's bias has "
              f"d_head = {d_head} numbers, not d_model = {d}."),
        Guess("bias-width", "a little too high: the weights are right. How long is one head's bias?",
              h * 3 * (d * d_head + d), more=f"a head's bias has one number per output column, d_head = {d_head}, "
                                             f"not d_model = {d}."),
        Guess("with-W_O", "too high: did you count a fourth matrix? Only Q, K and V count here.", 4 * (d * d + d),
              more="that count includes the output projection W_O, which comes after the heads (chapter 6)."),
        Guess("one-matrix", "too low: queries, keys and values do not share one projection.", d * d + d,
              more="that is one matrix with its bias, for all heads; Q, K and V each have their own."),
    ]


@checker(kind="predict", mistakes=_guesses())
def check_qkv_params(value) -> Verdict:
    """A predicted count: weights and biases of W_Q, W_K, W_V for all heads of one layer, d_model = 768, h = 12."""
    count = _qkv_params(_D, _H)
    return judge_number(value, count, _guesses(), rtol=1e-6,
                        success=f"{count:,} parameters. The h heads of width d_model / h together are as wide "
                                f"as one d_model × d_model matrix (and its bias) for each of Q, K and V.")
