"""Exercise checkers for the projections chapter (Q = X W_Q, K = X W_K, V = X W_V): loading a checkpoint into
nn.Linear layers, the find-the-bug split of a fused projection, cross-attention's fused K/V projection, and a
prediction of GPT-2 small's Q, K, V parameter count. Each checker's docstring gives its contract."""

from __future__ import annotations

import functools

import torch
from torch import nn

from ..projections import Projections
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, shared_parameters, variants

__all__ = ["check_load_projections", "check_split_fused", "check_cross_qkv", "check_qkv_params"]


# ------------------------------------------------------------------------------------------------
# Build: load a checkpoint of the book's matrices into nn.Linear layers. nn.Linear keeps its weight as (out, in)
# and computes x @ weight.T + bias, so each W (d_model, d) goes in transposed; the numbers are copied, not
# shared, and the layers keep the checkpoint's dtype.

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
    """The input every loaded module is called on: (B, T, d_model) = (2, 3, d_model), in the checkpoint's dtype."""
    W = ckpt["W_Q"]
    return torch.randn(2, 3, W.shape[0], generator=_gen(23), dtype=W.dtype)


def _load_reference(ckpt, flip=False):
    """(Q, K, V) of the probe: X W + b, or X Wᵀ + b with ``flip`` (W copied into nn.Linear untransposed)."""
    X = _probe(ckpt)
    return tuple(X @ (ckpt[f"W_{n}"].T if flip else ckpt[f"W_{n}"]) + ckpt[f"b_{n}"] for n in _NAMES)


def _square(case) -> bool:   # a non-square checkpoint cannot be copied untransposed at all
    return case[0]["W_Q"].shape[0] == case[0]["W_Q"].shape[1]


LOAD_NOT_A_MODULE = Mistake(
    "not-a-module",
    "your function returned a {got}, not a layer. What should a loaded checkpoint become, so that it can be "
    "called on X?",
    more="the function must return the new module itself, with the checkpoint's numbers in its layers, "
         "not its weights or its output; the checker calls it on an input X and expects (Q, K, V).")
LOAD_DTYPE = Mistake(
    "module-dtype",
    "your layers hold {have} numbers, the checkpoint {want}. What dtype does a new nn.Linear get when nobody "
    "says?",
    more="nn.Linear is created in torch's default dtype, float32, and copying float64 numbers into it rounds "
         "them without a word. Create the module in the checkpoint's dtype, or convert it, so it keeps every "
         "digit of the checkpoint.")
LOAD_SHARED = Mistake(
    "shared-checkpoint",
    "your layer's parameter {name} is the checkpoint's own memory: training the layer would change the "
    "checkpoint. Did you copy the numbers, or hand over the tensor?",
    more="your parameter {name} shares storage with a tensor of the checkpoint. Wrapping a checkpoint tensor "
         "in nn.Parameter shares it, and so does its transpose, which is a view of the same memory; so does "
         "assigning to a parameter's data. Copy the values into the layer's own parameters instead.")
LOAD_NO_TRANSPOSE = Mistake(
    "no-transpose",
    "with the square checkpoint your module runs but computes other numbers. In which orientation does "
    "nn.Linear keep its weight, and in which does the checkpoint hold W?",
    functools.partial(_load_reference, flip=True), where=_square,
    more="you copied the book's W (d_model × d) into nn.Linear's weight as it is. nn.Linear keeps its weight "
         "as out × in and multiplies by its transpose, so the weight must hold the transpose of W.")
LOAD_BIAS = Mistake(
    "bias",
    "the weights are right, but every row of your {which} is off by the same vector. What does the "
    "checkpoint add after the product?",
    more="the biases of your layers are not the checkpoint's: they were left at their starting values, or "
         "there are none. Each layer needs a bias, holding b_Q, b_K or b_V.")
LOAD_OUTPUT = Mistake(
    "output",
    "your module, called on X, returned {got}. What should one call of it give?",
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
        shared = shared_parameters(module, ckpt)
        if shared:
            raise _Refused(named(LOAD_SHARED, name=shared[0].removeprefix("result.")))
        want = ckpt["W_Q"].dtype
        have = sorted({str(p.dtype).removeprefix("torch.") for p in module.parameters() if p.dtype != want})
        if have:
            raise _Refused(named(LOAD_DTYPE, have=" and ".join(have), want=str(want).removeprefix("torch.")))
        with torch.no_grad():
            out = module(_probe(ckpt))
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            got = f"a tuple of {len(out)}" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
            raise _Refused(named(LOAD_OUTPUT, got=got))
        return tuple(out)
    return run


def _load_look(verdict: Verdict, results) -> Verdict | None:
    """From the cached runs: why the module could not be called, or which layers' biases are off (every row of
    the result minus X W the same vector, but not b)."""
    outputs = results.outputs()
    refused = next((e.args[0] for _, _, e in outputs if isinstance(e, _Refused)), None)
    if refused is not None:
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


# ------------------------------------------------------------------------------------------------
# Find the bug: splitting a fused projection. X @ W_QKV with W_QKV = [W_Q | W_K | W_V] of shape
# (d_model, 3·d_k); the planted bug reshapes the last axis to (d_k, 3), which deals the columns out in turn.

def _fused_cases() -> list[tuple]:
    g = _gen(21)
    return [
        (torch.randn(5, 6, generator=g), torch.randn(6, 3 * 4, generator=g), 4),
        (torch.randn(2, 3, 8, generator=g), torch.randn(8, 3 * 2, generator=g), 2),
        (torch.randn(2, 2, 4, 5, generator=g, dtype=torch.float64),                   # two batch axes, float64
         torch.randn(5, 3 * 3, generator=g, dtype=torch.float64), 3),
    ]


def _planted_split(X, W_QKV, d_k, *, order=(0, 1, 2), cut="blocks"):
    """(Q, K, V) from X @ W_QKV, with a planted slip; the defaults compute them. ``order`` is the order the
    blocks are returned in; ``cut`` is "blocks" (d_k consecutive columns each), "dealt" (the bug: the last
    axis viewed as (d_k, 3)), "rows" (the positions cut into three), "threes" (split into pieces of 3 columns),
    "front" (reshaped to (3, ..., T, d_k)), "early" (K and V start one column early), "swap-first" (viewed as
    (3, d_k), then its axis of 3 swapped with the first axis) or "unbind-last" (viewed as (3, d_k), then unbound
    along the wrong axis)."""
    QKV = X @ W_QKV
    if cut == "blocks":
        blocks = QKV.split(d_k, dim=-1)
    elif cut == "dealt":
        blocks = QKV.view(*QKV.shape[:-1], d_k, 3).unbind(-1)
    elif cut == "rows":
        blocks = QKV.chunk(3, dim=-2)
    elif cut == "threes":
        Q, K, V = QKV.split(3, dim=-1)
        blocks = Q, K, V
    elif cut == "front":
        blocks = QKV.reshape(3, *QKV.shape[:-1], d_k).unbind(0)
    elif cut == "early":
        blocks = [QKV[..., max(i * d_k - 1, 0):max(i * d_k - 1, 0) + d_k] for i in range(3)]
    elif cut == "swap-first":
        blocks = QKV.view(*QKV.shape[:-1], 3, d_k).transpose(0, -2).unbind(0)
    else:
        Q, K, V = QKV.view(*QKV.shape[:-1], 3, d_k).unbind(-1)
        blocks = Q, K, V
    return tuple(blocks[i] for i in order)


_FUSED_MISTAKES = variants(_planted_split, [
    ("unchanged", {"cut": "dealt"},
     "this is still the function as given. Every shape is right, but each of your Q, K and V mixes numbers "
     "from all three matrices. Which columns of the fused product end up in your Q? Try the same reshaping "
     "on a row of column numbers 0, 1, 2, …",
     "viewing the last axis as (d_k, 3) deals the columns out in turn, like cards: Q gets columns 0, 3, 6, …, "
     "one from each block in turn. The three matrices sit side by side as blocks of d_k consecutive columns, "
     "so the last axis must be cut into consecutive pieces."),
    ("order", {"order": (1, 0, 2)},
     "your Q is what K should be, and your K is Q. In what order do the three blocks of W_QKV's columns "
     "stand?",
     "Q and K came out swapped. The columns of W_QKV are [W_Q | W_K | W_V] in that order, so the first d_k "
     "columns of the product are Q, the next d_k are K, the last are V."),
    ("reversed", {"order": (2, 1, 0)},
     "your Q is what V should be, and your V is Q. In what order do the three blocks of W_QKV's columns "
     "stand?",
     "the blocks came out reversed: the columns of W_QKV are [W_Q | W_K | W_V], read left to right."),
    ("kv-swapped", {"order": (0, 2, 1)},
     "your K is what V should be, and your V is K. In what order do the three blocks of W_QKV's columns "
     "stand, and in what order do you return them?",
     "K and V came out swapped: the columns of W_QKV are [W_Q | W_K | W_V], and the function returns "
     "(Q, K, V) in that order."),
    ("off-by-one", {"cut": "early"},
     "your Q is right, but your K and V start one column early. Where does each block of d_k columns begin, "
     "and is the end of a slice included?",
     "block i holds columns i·d_k up to, not including, (i + 1)·d_k: a slice's end is left out, so the next "
     "block starts exactly where the previous one's slice ended."),
    ("batch-axis", {"cut": "swap-first"},
     "right for a single sequence, wrong with a batch axis: after your view, which axis do you swap with the "
     "axis of size 3?",
     "swapping the axis of size 3 with axis 0 puts it in front only when X has no batch axis; with one, the "
     "batch and position axes trade places. Take the three blocks from the second-last axis, counted from "
     "the end."),
    ("rows", {"cut": "rows"},
     "each of your Q, K and V holds a third of the positions. Along which axis do the three projections sit "
     "side by side?",
     "you cut along the positions (the T axis). The three projections sit side by side in the last axis, "
     "d_k columns each, and every one of them keeps all T positions."),
    ("split-count", {"cut": "threes"},
     "right only when d_k = 3. The number you pass to split: is it how many pieces you want, or how wide each "
     "one is?",
     "split's number is the size of each piece, not how many pieces: 3 gives pieces of 3 columns. Q, K and V "
     "are d_k columns each."),
    ("reshape-front", {"cut": "front"},
     "your shapes are right, but which positions and columns does your Q hold? Try your reshaping on a small "
     "table of numbered entries.",
     "reshaping (..., T, 3·d_k) to (3, ..., T, d_k) reads the numbers in memory order: the first third of the "
     "rows, not the first d_k columns of every row, becomes Q. The three blocks sit side by side in the last "
     "axis: cut that axis."),
    ("unbind-last", {"cut": "unbind-last"},
     "your view has the right sizes, but after it, which axis holds the three blocks and which the d_k "
     "columns of one block?",
     "viewing the last axis as (3, d_k) puts the three blocks on the second-last axis; unbinding the last "
     "axis instead splits it into d_k pieces of 3 columns. Unbind the axis of size 3."),
])


@checker(mistakes=_FUSED_MISTAKES)
def check_split_fused(fn) -> Verdict:
    """``fn(X, W_QKV, d_k)`` with X (..., T, d_model), W_QKV (d_model, 3·d_k) → (Q, K, V), each (..., T, d_k)."""
    return judge(fn, _fused_cases(), _planted_split, _FUSED_MISTAKES,
                 success="one product, cut into blocks of d_k consecutive columns, gives Q, K and V.")


# ------------------------------------------------------------------------------------------------
# Extend: cross-attention with a fused K/V projection. Q comes from X; K and V from the other sequence X_kv,
# through one product with W_KV = [W_K | W_V], whose two blocks may differ in width (d_k ≠ d_v).

def _cross_cases() -> list[tuple]:
    g = _gen(22)

    def case(shape_x, shape_kv, d_k, d_v, dtype=torch.float32):
        d_model, d_kv = shape_x[-1], shape_kv[-1]
        return (torch.randn(*shape_x, generator=g, dtype=dtype), torch.randn(*shape_kv, generator=g, dtype=dtype),
                torch.randn(d_model, d_k, generator=g, dtype=dtype),
                torch.randn(d_kv, d_k + d_v, generator=g, dtype=dtype), d_k)

    return [
        case((3, 6), (5, 6), 4, 6),             # d_v > d_k: pieces of d_k columns do not fit
        case((2, 4, 8), (2, 7, 5), 3, 2),       # a batch; the other sequence has its own width, 5 ≠ 8
        case((2, 6, 6), (2, 3, 6), 4, 4, torch.float64),   # T_q > T_k, d_v = d_k, float64
    ]


def _planted_cross(X, X_kv, W_Q, W_KV, d_k, *, q_from="X", kv_from="X_kv", cut="sizes", order=(0, 1, 2),
                   q_scaled=False):
    """(Q, K, V) of cross-attention, or a planted slip; the defaults compute them. ``q_from``, ``kv_from``
    name the sequence each projection reads; ``cut`` is "sizes" (d_k, then the rest), "equal" (pieces of d_k),
    "d_k-twice" (d_k and d_k), "d_k-slices" (the same, sliced), "end" (K the last d_k columns), "v-from-start"
    (V read from column 0) or "halves"; ``order`` is the order of the results; ``q_scaled`` divides Q by √d_k."""
    seq = {"X": X, "X_kv": X_kv}
    Q, KV = seq[q_from] @ W_Q / (d_k ** 0.5 if q_scaled else 1), seq[kv_from] @ W_KV
    if cut == "sizes":
        K, V = KV.split([d_k, KV.shape[-1] - d_k], dim=-1)
    elif cut == "equal":
        K, V = KV.split(d_k, dim=-1)
    elif cut == "d_k-twice":
        K, V = KV.split([d_k, d_k], dim=-1)
    elif cut == "d_k-slices":
        K, V = KV[..., :d_k], KV[..., d_k:2 * d_k]
    elif cut == "end":
        K, V = KV[..., -d_k:], KV[..., :-d_k]
    elif cut == "v-from-start":
        K, V = KV[..., :d_k], KV[..., :KV.shape[-1] - d_k]
    else:
        K, V = KV.chunk(2, dim=-1)
    out = (Q, K, V)
    return tuple(out[i] for i in order)


_CROSS_MISTAKES = variants(_planted_cross, [
    ("kv-from-queries", {"kv_from": "X"},
     "your K and V have one row per position of X. Which sequence do keys and values describe in "
     "cross-attention?",
     "you projected K and V from X, the queries' sequence. In cross-attention the keys and values come from "
     "the other sequence, X_kv: they have T_k rows, and W_KV is as tall as X_kv is wide."),
    ("q-from-other", {"q_from": "X_kv"},
     "your Q has one row per position of X_kv. Whose positions ask the questions?",
     "you projected Q from X_kv. The queries come from X, one per position of the sequence being updated; "
     "only K and V come from the other sequence."),
    ("equal-pieces", {"cut": "equal"},
     "are K and V the same width here? What is d_v, and where can you read it?",
     "you cut the product with W_KV into pieces of d_k columns. V is d_v wide and d_v need not be d_k: it "
     "is what is left of W_KV's columns after the first d_k, the columns of W_K."),
    *[("equal-pieces", {"cut": cut},
       "are K and V the same width here? What is d_v, and where can you read it?",
       "you took d_k columns for V as well. V is d_v wide and d_v need not be d_k: it is what is left of "
       "W_KV's columns after the first d_k, the columns of W_K.") for cut in ("d_k-twice", "d_k-slices")],
    ("k-from-the-end", {"cut": "end"},
     "your K is d_k wide, but which columns of the product with W_KV are they? In what order do W_K and W_V "
     "stand in W_KV?",
     "W_KV is [W_K | W_V]: K is the FIRST d_k columns of the product, V the rest. You took K from the end."),
    ("v-from-start", {"cut": "v-from-start"},
     "your K is right and your V has the right width, but which columns of the product does it start at?",
     "W_KV is [W_K | W_V]: V is the columns after K's first d_k, not the first d_v columns of the product."),
    ("q-scaled", {"q_scaled": True},
     "your Q is off by a constant factor. Does this step divide by √d_k, or does that come later?",
     "Q is the plain product X W_Q. Dividing by √d_k belongs to the scores, QKᵀ / √d_k, a step after this "
     "one."),
    ("halves", {"cut": "halves"},
     "you cut the product with W_KV into two equal halves. Is W_K as wide as W_V here?",
     "two equal halves give K its d_k columns only when d_v = d_k. K is the first d_k columns, V the rest."),
    ("order", {"order": (0, 2, 1)},
     "your second and third results are swapped. In what order should they come back?",
     "the function returns (Q, K, V): your K is in the place of V and your V in the place of K."),
])


@checker(mistakes=_CROSS_MISTAKES)
def check_cross_qkv(fn) -> Verdict:
    """``fn(X, X_kv, W_Q, W_KV, d_k)`` → Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v)."""
    return judge(fn, _cross_cases(), _planted_cross, _CROSS_MISTAKES,
                 success="Q from X; K and V from X_kv in one product, cut at d_k: T_k rows each, whatever "
                         "the length and the width of X, and d_v read from W_KV.")


# ------------------------------------------------------------------------------------------------
# Predict: the parameters of the Q, K, V projections of one GPT-2 small layer.

_GPT2 = {"d_model": 768, "h": 12}


def _qkv_params(d_model: int, h: int) -> int:
    """Count the parameters of h heads' Projections(d_model, d_head, bias=True), built on the meta device
    (no memory, no random numbers)."""
    with torch.device("meta"):
        heads = [Projections(d_model, d_model // h, bias=True) for _ in range(h)]
    return sum(p.numel() for head in heads for p in head.parameters())


def _guesses() -> list[Guess]:
    d, h = _GPT2["d_model"], _GPT2["h"]
    d_head = d // h
    return [
        Guess("one-head", "too low: that is what a single head holds. How many heads does the layer have, each "
              "with its own matrices?", 3 * (d * d_head + d_head),
              more=f"you counted one head's W_Q, W_K and W_V and their biases; each of the h = {h} heads of the "
                   "layer has its own."),
        Guess("one-head-no-bias", "too low, on two counts: that is a single head, and it leaves something out of "
              "each projection.", 3 * d * d_head,
              more=f"you counted one head without biases. There are h = {h} heads, and each projection also "
                   "has a bias, as nn.Linear has by default."),
        Guess("no-bias", "a little too low: the weights are all there. What else does each projection add to "
              "its output?", 3 * d * d,
              more="every projection also has a bias, one number per output column, for every head."),
        Guess("full-width-heads", "far too high: how wide is one head's W_Q?", h * 3 * (d * d + d),
              more=f"each head's matrices are d_model × d_head, {d} by {d_head}, not d_model × d_model."),
        Guess("bias-width", "a little too high: the weights are right. How long is one head's bias?",
              h * 3 * (d * d_head + d),
              more=f"each head's bias has one number per output column of that head, d_head = {d_head}, not "
                   f"d_model = {d}."),
        Guess("with-W_O", "too high: did you count a fourth matrix? Only the query, key and value projections "
              "count here.", 4 * (d * d + d),
              more="that count includes the output projection W_O, which comes after the heads (chapter 6)."),
        Guess("one-matrix", "too low: queries, keys and values do not share one projection.", d * d + d,
              more="that is one matrix with its bias, for all heads; Q, K and V each have their own."),
    ]


@checker(kind="predict", mistakes=_guesses())
def check_qkv_params(value) -> Verdict:
    """A predicted count: weights and biases of W_Q, W_K, W_V for all heads of one layer, d_model = 768, h = 12."""
    count = _qkv_params(_GPT2["d_model"], _GPT2["h"])
    return judge_number(value, count, _guesses(), rtol=1e-6,
                        success=f"{count:,} parameters. The h heads of width d_model / h together are as wide "
                                f"as one d_model × d_model matrix (and its bias) for each of Q, K and V.")
