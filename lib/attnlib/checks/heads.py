"""Exercise checkers for the heads chapter (chapter 6).

``check_split_heads(fn)``: ``fn(x, h)`` splits x (..., T, d_model) into heads for any number of leading axes.
``check_heads_first(fn)``: causal multi-head attention from heads-first weights whose keys and values differ in
width (d_k ≠ d_v, h·d_v ≠ d_model).
``check_attention_parameters(n)``: a predicted parameter count of such a layer, with biases.
``check_folded_heads(fn)``: :func:`buggy_folded_attention` (the heads folded into the batch axis) with its bug fixed.

Each function checker runs cases chosen to tell its mistakes apart: a case where the shape hides a swap of two
axes (T = d_head, T = h), and cases where it does not.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from ..attention import attention, causal_mask, softmax
from ..heads import merge_heads, multi_head_attention, split_heads
from ._core import Group, Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_split_heads", "check_heads_first", "check_attention_parameters", "check_folded_heads",
           "buggy_folded_attention"]

_GENERIC = ("error", "values", "shape", "type", "length")   # verdicts a diagnosis may improve on


# ------------------------------------------------------------------------------------------------------- split
def _split_cases():
    """(x, h) built fresh on every call: no batch axis, one, and two (there T = d_head, in float64)."""
    g = _gen(61)
    return [
        (torch.randn(6, 8, generator=g), 2),                              # (T, d_model): T = 6, d_head = 4
        (torch.randn(2, 5, 12, generator=g), 3),                          # (B, T, d_model): T = 5, d_head = 4
        (torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64), 2),   # (L, B, T, d_model): T = 4 = d_head
    ]


def _split_reference(x, h):
    """Head k is the k-th block of d_head columns, stacked on a new axis just before the positions."""
    return torch.stack(x.split(x.shape[-1] // h, dim=-1), dim=-3)


def _split_way(x, h, *, way):
    """A planted wrong split, for any number of leading axes."""
    *lead, T, d_model = x.shape
    cut = x.reshape(*lead, T, h, d_model // h)                    # (..., T, h, d_head): right so far
    return {"no-transpose": x.reshape(*lead, h, T, d_model // h),
            "not-moved": cut,                                    # the heads left after the positions
            "interleaved": x.reshape(*lead, T, d_model // h, h).movedim(-1, -3),
            "wrong-axes": cut.movedim(-3, -1),                   # (..., h, d_head, T)
            "heads-last": cut.transpose(-2, -1),                 # (..., T, d_head, h)
            "fixed-axes": cut.transpose(1, 2),                   # right for three axes only
            "heads-in-front": cut.movedim(-2, 0),                # (h, ..., T, d_head)
            "lead-flattened": _split_reference(x.reshape(-1, T, d_model), h),
            "no-split": x}[way]


def _split_three_axes(x, h):
    """The split of this chapter, which takes exactly three axes."""
    B, T, d_model = x.shape
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)


THREE_AXES = Mistake(
    "three-axes",
    "your function works for one batch axis but fails with none or with two. Which line of yours assumes the "
    "input has exactly three axes?",
    _split_three_axes,
    more="unpacking the shape into three names, or swapping axes counted from the front, only fits a "
         "three-axis input. Name only the last two sizes and keep the leading ones, however many, as they are.")

NO_LEAD = Mistake(
    "no-lead",
    "your function is right with one leading axis or two, but not with none. What does it return for an input "
    "of shape (T, d_model)?",
    _split_reference,
    more="with no leading axes, (T, d_model) must become (h, T, d_head): no axis in front of the heads, none "
         "added and none lost.",
    where=lambda case: case[0].dim() > 2)

_SPLIT_MISTAKES = [THREE_AXES, NO_LEAD, *variants(_split_way, [
    ("no-transpose", dict(way="no-transpose"),
     "is row i of one of your heads still position i? Fill x with the position each number comes from and "
     "look at one head.",
     "you cut the numbers into heads and then positions straight away. A reshape keeps memory order, so the "
     "rows of one head mix pieces of several positions. Cut each position's vector into h pieces first, then "
     "move the head axis in front of the position axis."),
    ("not-moved", dict(way="not-moved"),
     "your heads are cut right. Where is the head axis of your result: before the position axis, or after "
     "it?",
     "you cut each position's vector into h pieces but left the head axis after the position axis. It has to "
     "move in front of the position axis, so that each head holds a table with one row per position."),
    ("interleaved", dict(way="interleaved"),
     "which columns of x does your head 0 hold? Are they one block of d_head neighbouring columns?",
     "your head 0 takes every h-th column. Head k owns one contiguous block of d_head columns: cut the last "
     "axis into h blocks of d_head, the head being the outer of the two."),
    ("wrong-axes", dict(way="wrong-axes"),
     "in one test T = d_head, so the shape hides it there: in your result, is the second-to-last axis the "
     "position, and the last one the head's d_head numbers?",
     "your heads come out with the positions on the last axis: you moved the position axis past d_head. "
     "Only the head axis and the position axis trade places."),
    ("heads-last", dict(way="heads-last"),
     "your heads are cut right, but which axis did your head axis trade places with? Is the second-to-last "
     "axis of your result the position?",
     "you swapped the head axis with the d_head axis, so the heads ended up last. The head axis trades places "
     "with the position axis instead."),
    ("fixed-axes", dict(way="fixed-axes"),
     "your answer fits an input with exactly one batch axis. Which two axes does it swap when there is no "
     "batch axis, or two of them?",
     "you swap two axes counted from the front, so they are the right two only for a three-axis input. "
     "Counted from the last axis, the head axis and the position axis are always in the same places."),
    ("heads-in-front", dict(way="heads-in-front"),
     "where did your head axis go: before the leading axes, or after them?",
     "you moved the head axis to the very front. It belongs after every leading axis, right before the "
     "position axis."),
    ("lead-flattened", dict(way="lead-flattened"),
     "compare the shape of your result with the shape of x: is every leading axis still there, with its own "
     "size?",
     "you flattened the leading axes into one and did not restore them. The result keeps each leading axis "
     "as it came in."),
    ("no-split", dict(way="no-split"),
     "your result still has the heads side by side in its last axis. Where is the head axis?",
     "x came back unsplit. Each head needs an axis of its own, just before the positions."),
])]


@checker(mistakes=_SPLIT_MISTAKES)
def check_split_heads(fn) -> Verdict:
    """Check ``fn(x, h)``: x (..., T, d_model) → (..., h, T, d_head), any number of leading axes (even none)."""
    def diagnose(verdict: Verdict, results) -> Verdict | None:
        # right with exactly one batch axis, wrong (or failing) both with none and with two
        if verdict.mistake not in _GENERIC:
            return None
        right = [results.right(case, 1e-6) for case, _ in results.cases]
        return named(THREE_AXES) if right == [False, True, False] else None

    return judge(fn, _split_cases(), _split_reference, _SPLIT_MISTAKES, diagnose=diagnose,
                 success="every head gets its own block of columns, every row is still one position, and "
                         "the leading axes stay as they came.")


# -------------------------------------------------------------------------------------------------- heads-first
# The layout: W_Q, W_K (h, d_model, d_k); W_V (h, d_model, d_v); W_O (h, d_v, d_model). W_Q[k] is head k's own
# query matrix; W_O[k] holds the d_v rows of the fused W_O that read head k's output.
_HF_SIZES = [  # (dtype, tolerance, (B, T, d_model, h, d_k, d_v)): d_k ≠ d_v, h·d_k ≠ d_model, h·d_v ≠ d_model
    (torch.float32, 1e-5, (2, 5, 12, 3, 2, 5)),
    (torch.float64, 1e-5, (1, 6, 8, 2, 6, 3)),
    (torch.float16, 1e-2, (1, 4, 8, 2, 3, 5)),
    (torch.float32, 1e-5, (2, 5, 12, 3, 4, 4)),   # last, the chapter's own widths: d_k = d_v = d_model / h
]


def _hf_case(g, dtype, B, T, d_model, h, d_k, d_v):
    X = torch.randn(B, T, d_model, generator=g)
    W_Q, W_K = (torch.randn(h, d_model, d_k, generator=g) / math.sqrt(d_model) for _ in range(2))
    W_V = torch.randn(h, d_model, d_v, generator=g) / math.sqrt(d_model)
    W_O = torch.randn(h, d_v, d_model, generator=g) / math.sqrt(h * d_v)
    return tuple(t.to(dtype) for t in (X, W_Q, W_K, W_V, W_O))


def _hf_cases():
    """One group per case, built fresh on every call: float16 needs a wider tolerance."""
    g = _gen(66)
    return [Group([_hf_case(g, dtype, *sizes)], atol) for dtype, atol, sizes in _HF_SIZES]


def _fuse(W):
    """A heads-first (h, d_model, d) weight laid out as this chapter's (d_model, h·d): head k's columns k·d …"""
    return W.transpose(0, 1).reshape(W.shape[1], -1)


def _heads_first_reference(X, W_Q, W_K, W_V, W_O):
    """The chapter's layer on the fused matrices: split, attention (scaled by √d_k), merge, then W_O."""
    h = W_Q.shape[0]
    Q, K, V = (split_heads(X @ _fuse(W), h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O.reshape(-1, W_O.shape[-1])


def _hf_variant(X, W_Q, W_K, W_V, W_O, *, fuse="right", scale="d_k", mask="before", scores="queries first",
                heads="sum", out="right", merge="right", over="keys"):
    """Heads-first attention written with einsum; every switch's default is right, any other value plants a
    mistake. ``fuse="reshape"``: the weights read as (d_model, h·d) by a plain reshape. ``scale``: the width
    under the square root ("none": no scale). ``mask``: "before" softmax (right), "after" it (the future's
    weights zeroed), "diagonal" (each query's own key blocked too), "past" (the wrong triangle) or "none".
    ``over="queries"``: softmax down the columns. ``scores="keys first"``: the table has keys on its rows.
    ``heads``: "sum" (right), "mean" or "apart" (one output per head). ``out="interleaved"``: W_O's rows taken
    in the wrong order. ``merge="reshape"``: the chapter's bug, the heads merged by a reshape of (B, h, T, d_v)
    with no transpose."""
    h, d_model, d_k = W_Q.shape
    d_v, T = W_V.shape[-1], X.shape[1]
    if fuse == "right":
        Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    else:
        Q, K, V = (split_heads(X @ W.reshape(d_model, -1), h) for W in (W_Q, W_K, W_V))
    S = Q @ K.transpose(-2, -1) if scores == "queries first" else K @ Q.transpose(-2, -1)
    Z = S / math.sqrt({"d_k": d_k, "d_v": d_v, "d_model": d_model, "none": 1}[scale])
    blocked = torch.ones(T, T, dtype=torch.bool).triu(0 if mask == "diagonal" else 1)   # the future: j > i
    blocked = blocked.T if mask == "past" else blocked
    P = softmax(Z if mask in ("after", "none") else Z.masked_fill(blocked, float("-inf")),
                dim=-1 if over == "keys" else -2)
    P = P.tril() if mask == "after" else P
    heads_out = P @ V                                                    # (B, h, T, d_v)
    W = W_O if out == "right" else W_O.transpose(0, 1).reshape(h, d_v, d_model)
    if merge == "reshape":
        return heads_out.reshape(X.shape[0], T, h * d_v) @ W.reshape(h * d_v, d_model)
    if heads == "apart":
        return torch.einsum("bhtv,hvm->bhtm", heads_out, W)
    Y = torch.einsum("bhtv,hvm->btm", heads_out, W)
    return Y / h if heads == "mean" else Y


WIDTHS = Mistake(
    "widths",
    "your function is right when every head is d_model / h wide, as in this chapter, and wrong here. Where does "
    "your code take a head's width from?",
    more="here d_k, d_v and d_model / h are three different numbers. Take each width from the shape of the "
         "weight it belongs to: the queries' and keys' from W_Q and W_K, the values' from W_V.",
    wrong=_heads_first_reference, where=lambda case: case[1].shape[0] * case[1].shape[2] == case[0].shape[-1])

FLOAT16 = Mistake(
    "float16",
    "your function is right on float32 and float64 inputs but not on float16 ones. Which tensor of yours is "
    "made in a dtype of its own instead of the inputs' dtype?",
    more="a tensor you create (a mask, a constant table) is float32 unless you say otherwise. Mixed with "
         "float16 scores it turns them into float32, and a later product with a float16 tensor fails or "
         "the result comes back float32. Make it in the dtype of the inputs.",
    wrong=_heads_first_reference, where=lambda case: case[0].dtype != torch.float16)

_HF_MISTAKES = [*variants(_hf_variant, [
    ("fused-by-reshape", dict(fuse="reshape"),
     "your heads read the wrong numbers of W_Q, W_K and W_V. In the (d_model, h·d) matrix you built, is row i "
     "still the weights of input feature i, for every head?",
     "a plain reshape of a heads-first weight to d_model rows cuts it in memory order, where the head axis "
     "comes first: its rows are no longer input features. The head axis has to move next to the head-width "
     "axis before the two are joined."),
    ("W_O-interleaved", dict(out="interleaved"),
     "the heads are right up to W_O. Is row r of the output matrix you built the one that reads number r of "
     "the concatenated heads, head 0's numbers first?",
     "your W_O interleaves the heads: its row r reads a different head than column r of the concatenation. "
     "The heads-first W_O, joined in the order it is stored, already has head 0's rows first."),
    ("scale-d_v", dict(scale="d_v"),
     "how many terms does one score add up? Is that the width under your square root?",
     "you divided the scores by the square root of d_v. A score is the dot product of a query and a key, d_k "
     "terms; the width of the values plays no part in it."),
    ("scale-d_model", dict(scale="d_model"),
     "how many terms does one head's score add up? Is that the width under your square root?",
     "you divided the scores by the square root of d_model, the width of a token, not of one head's query "
     "and key: those are d_k wide."),
    ("no-scale", dict(scale="none"),
     "are your weights sharper than they should be? What does each score get divided by before softmax?",
     "your scores reach softmax unscaled. Every head divides its scores by the square root of the number of "
     "terms in one score, the width of its queries and keys."),
    ("mask-after-softmax", dict(mask="after"),
     "do the weights in each row of your tables still add up to 1 over the keys a query may read?",
     "you blocked the future after softmax, so each row's weights no longer sum to 1: the future's share is "
     "lost, not given to the past. The mask goes on the scores, before softmax."),
    ("mask-diagonal", dict(mask="diagonal"),
     "may a query read its own key? Which keys are left for query 0 under your mask?",
     "your mask blocks the diagonal too, so query 0 has no key left and its row of weights is NaN. Only the "
     "keys after the query, j > i, are the future."),
    ("mask-past", dict(mask="past"),
     "which triangle does your mask block: the keys after each query, or the keys before it?",
     "your mask blocks the past and lets every query read the future. The blocked entries are those with "
     "the key after the query, above the diagonal."),
    ("no-mask", dict(mask="none"),
     "does the output at position 0 change when you change the last token? It should not.",
     "the future is not blocked: every head's scores need the causal mask before softmax."),
    ("scores-transposed", dict(scores="keys first"),
     "in your score table, which axis holds the queries? Does row i of your weights read only keys at or "
     "before i?",
     "your score table has the keys on its rows and the queries on its columns, so the mask and the softmax "
     "act along the wrong axis. The query index comes first, the key index second."),
    ("softmax-over-queries", dict(over="queries"),
     "does each row of your weight tables add up to 1? Along which axis does your softmax normalise?",
     "your softmax normalises each column, over the queries. Each query's weights are one distribution "
     "over the keys it may read: the softmax runs along the key axis, the last one."),
    ("mean-heads", dict(heads="mean"),
     "your output is off by the same factor everywhere. What do concatenation and W_O do with the h heads' "
     "contributions to one position?",
     "you averaged the heads' contributions. Concatenating and projecting adds them up: each head passes "
     "through its own rows of W_O, and the h results are summed, not averaged."),
    ("merge-no-transpose", dict(merge="reshape"),
     "each of your output rows mixes numbers from several positions. After P @ V, in which order do the head "
     "axis and the position axis stand, and in which order does a reshape read them?",
     "you merged the heads with a reshape of the (B, h, T, d_v) tensor. A reshape reads the numbers in "
     "memory order, so row t of the merged tensor holds pieces of other positions and heads. The position "
     "axis has to come before the head axis before the last two axes are joined."),
    ("heads-apart", dict(heads="apart"),
     "your result still has a head axis. What does W_O do with the h heads of one position?",
     "W_O mixes the heads: a position's output is the sum of what each head contributes through its rows of "
     "W_O. Your result keeps the heads apart instead."),
    ]), FLOAT16, WIDTHS]   # last: right only on a subset of the cases


@checker(mistakes=_HF_MISTAKES)
def check_heads_first(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O)``: X (B, T, d_model) → (B, T, d_model), causal, no biases; W_Q, W_K
    (h, d_model, d_k), W_V (h, d_model, d_v), W_O (h, d_v, d_model), with d_k ≠ d_v."""
    return judge(fn, _hf_cases(), _heads_first_reference, _HF_MISTAKES,
                 success="every head scales by its own d_k, reads its own slices, and W_O adds the heads up, "
                         "whatever the widths.")


# --------------------------------------------------------------------------------------- predict: parameters
_QUESTION = dict(d_model=96, h=8, d_k=16, d_v=24)   # the heads-first layer whose parameters the learner predicts


def _heads_first_layer(d_model: int, h: int, d_k: int, d_v: int) -> nn.ParameterDict:
    """The weights of a heads-first attention layer with a bias on every projection's output."""
    shapes = dict(W_Q=(h, d_model, d_k), b_Q=(h, d_k), W_K=(h, d_model, d_k), b_K=(h, d_k),
                  W_V=(h, d_model, d_v), b_V=(h, d_v), W_O=(h, d_v, d_model), b_O=(d_model,))
    return nn.ParameterDict({name: nn.Parameter(torch.zeros(shape)) for name, shape in shapes.items()})


def _parameter_guesses(d_model: int, h: int, d_k: int, d_v: int) -> list[Guess]:
    """The typical wrong counts, each with what it gets wrong (never how to count)."""
    d = d_model
    q = d * h * d_k + h * d_k              # one query (or key) projection with its bias
    v = d * h * d_v + h * d_v
    o = h * d_v * d + d
    matrices = 2 * d * h * d_k + 2 * d * h * d_v
    short = "too low, by a little: the matrices are right, but some biases are too short."
    long = "too high, by a little: the matrices are right, but one bias is too long."
    w_o = "too low: the queries, keys and values are right. Look at W_O's input side."
    return [
        Guess("chapter-layer",
              "too low: that is the count of a layer whose four matrices are all d_model × d_model, as in this "
              "chapter. Are they, in this layer?", 4 * d * d + 4 * d,
              more="too low: none of the four matrices is d_model × d_model here, because the heads together "
                   "are wider than d_model. Every matrix and every bias but the output's is off."),
        Guess("no-bias", "too low, by a little: the matrices are right; what about the biases?", matrices,
              more="too low by all four biases: the matrices are right, the biases are missing."),
        Guess("biases-d_model", short, matrices + 4 * d,
              more="too low: the biases of the queries, keys and values are as long as what they are added "
                   "to, every head's q, k or v, which here is not d_model numbers."),
        Guess("biases-one-head", short, matrices + 2 * d_k + d_v + d,
              more="too low: every head has a bias of its own for its q, k and v, so the head axis is part of "
                   "those biases' shapes, as it is of the weights'."),
        Guess("no-output-bias", "too low, by a little: the matrices and the heads' biases are right. Is every "
              "bias counted?", matrices + 2 * h * d_k + h * d_v,
              more="too low: the output projection has a bias too, added to the layer's output."),
        Guess("output-bias-per-head", long, matrices + 2 * h * d_k + h * d_v + h * d,
              more="too high: the output's bias is added once, to the layer's output; the heads share it."),
        Guess("output-bias-wide", long, matrices + 2 * h * d_k + 2 * h * d_v,
              more="too high: the output's bias is added to the layer's output, one token vector, not to the "
                   "concatenated heads."),
        Guess("values-as-keys", "too low: the queries and keys are right. Look at the value side, V and W_O.",
              3 * q + h * d_k * d + d,
              more="too low: V and W_O are counted with the keys' width; the value heads are d_v wide."),
        Guess("output-square", w_o, 2 * q + v + d * d + d,
              more="too low: W_O reads the concatenated heads, whose width here is not d_model."),
        Guess("output-one-head", w_o, 2 * q + v + d_v * d + d,
              more="too low: W_O reads the concatenated heads of every head, not one head's output."),
        Guess("no-output", "too low: the queries, keys and values are right. Are all four projections counted?",
              2 * q + v,
              more="too low: the output projection W_O, with its bias, is part of the layer."),
        Guess("square-matrices", "too low: the biases are right, but are the four matrices all d_model × d_model "
              "in this layer?", 4 * d * d + 2 * h * d_k + h * d_v + d,
              more="too low: the heads together are wider than d_model here, so none of the four matrices is "
                   "d_model × d_model."),
        Guess("one-head", "far too low: that is about one head's share of the layer.",
              2 * (d * d_k + d_k) + (d * d_v + d_v) + d_v * d + d,
              more="far too low: you counted one head; the head axis is part of every weight's shape but "
                   "the output's bias."),
        Guess("heads-twice", "far too high: were the heads counted twice?", h * (2 * q + v + o),
              more="far too high: every weight already holds all h heads in its shape; multiplying by h "
                   "again counts each head h times."),
    ]


@checker(kind="predict", mistakes=_parameter_guesses(**_QUESTION))
def check_attention_parameters(n) -> Verdict:
    """Check a predicted number of parameters of the heads-first layer with d_model = 96, h = 8, d_k = 16,
    d_v = 24 and a bias on every projection."""
    want = sum(p.numel() for p in _heads_first_layer(**_QUESTION).parameters())   # counted, not computed
    return judge_number(n, want, _parameter_guesses(**_QUESTION), rtol=1e-9,
                        success="queries and keys are h·d_k wide, values h·d_v, and W_O reads h·d_v numbers.",
                        again="look at each of the four projections in turn, its weight and its bias, and "
                              "predict again.")


# -------------------------------------------------------------------------------------------- find the bug
def buggy_folded_attention(X, W_QKV, W_O, h):
    """Causal multi-head attention from the fused [W_Q | W_K | W_V] (d_model, 3·d_model) and W_O, the heads folded
    into the batch axis for ``torch.bmm``, with one planted bug: X (B, T, d_model) → (B, T, d_model)."""
    B, T, d_model = X.shape
    d_head = d_model // h
    Q, K, V = (X @ W_QKV).chunk(3, dim=-1)                   # each (B, T, d_model)
    # torch.bmm takes three axes: fold every sequence's heads into one axis of B·h
    Q, K, V = (t.reshape(B, T, h, d_head).transpose(1, 2).reshape(B * h, T, d_head)
               for t in (Q, K, V))                           # each (B·h, T, d_head)
    Z = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d_head)  # (B·h, T, T)
    P = torch.softmax(Z + causal_mask(T, dtype=X.dtype, device=X.device), dim=-1)
    out = torch.bmm(P, V)                                    # (B·h, T, d_head)
    out = out.reshape(h, B, T, d_head).permute(1, 2, 0, 3)  # (B, T, h, d_head)
    return out.reshape(B, T, d_model) @ W_O


def _folded_variant(X, W_QKV, W_O, h, *, fold="B h", unfold="B h", merge="transpose", scale="d_head"):
    """The function of :func:`buggy_folded_attention` fixed (the defaults) or fixed wrongly. ``fold`` and
    ``unfold``: the order in which the batch and head axes are folded into B·h and read back ("B h", "h B"), or
    fold="reshape" (the heads cut by a reshape alone). ``merge``: how (B, h, T, d_head) becomes (B, T, d_model):
    "transpose" (right), "reshape" (no transpose), "stale" (the permute written for the given (h, B) order),
    "interleaved" (d_head before h) or "view" (a view of the transposed tensor, which raises). ``scale``: the
    width under the square root."""
    B, T, d_model = X.shape
    d_head = d_model // h

    def folded(t):
        if fold == "reshape":
            return t.reshape(B * h, T, d_head)
        t = t.reshape(B, T, h, d_head).transpose(1, 2)                   # (B, h, T, d_head)
        return (t if fold == "B h" else t.transpose(0, 1)).reshape(B * h, T, d_head)

    Q, K, V = (folded(t) for t in (X @ W_QKV).chunk(3, dim=-1))
    out = attention(Q * math.sqrt(d_head / {"d_head": d_head, "d_model": d_model}[scale]), K, V)  # (B·h, T, d_head)
    out = out.reshape(B, h, T, d_head) if unfold == "B h" else out.reshape(h, B, T, d_head).transpose(0, 1)
    if merge == "view":
        return out.transpose(1, 2).view(B, T, d_model) @ W_O
    out = {"transpose": out.transpose(1, 2), "reshape": out, "stale": out.permute(1, 2, 0, 3),
           "interleaved": out.permute(0, 2, 3, 1)}[merge]
    return out.reshape(B, T, d_model) @ W_O


def _folded_cases():
    """Fresh inputs on every call: one sequence (where the order of the fold cannot show), then batches with
    B ≠ h, one in float64."""
    g = _gen(65)
    cases = []
    for B, T, d_model, h, dtype in ((1, 5, 12, 3, torch.float32), (2, 5, 12, 3, torch.float32),
                                    (3, 4, 8, 2, torch.float64)):
        X = torch.randn(B, T, d_model, generator=g)
        W_QKV = torch.randn(d_model, 3 * d_model, generator=g) / math.sqrt(d_model)
        W_O = torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        cases.append((X.to(dtype), W_QKV.to(dtype), W_O.to(dtype), h))
    return cases


_FOLD_MISTAKES = [
    Mistake("unchanged",
            "this is still the function as given: right on one sequence, wrong on a batch. Entry e of the folded "
            "axis of B·h: which sequence and which head does the fold put there, and which does the unfolding "
            "read it as?",
            buggy_folded_attention,
            more="the fold puts the sequences outer and the heads inner: entry b·h + n is head n of sequence b. "
                 "The unfolding reads the same axis as if the heads were outer, so one sequence's rows get heads "
                 "computed from other sequences. Read the axis back in the order it was folded."),
    *variants(_folded_variant, [
        ("stale-permute", dict(merge="stale"),
         "your unfolding reads the folded axis in the right order now. Which axes does the permute on the next "
         "line give you: (B, T, h, d_head)?",
         "you changed the order of the unfolding but kept the permute written for the old order, so the batch "
         "axis lands third and each merged row glues together pieces of other sequences and positions. After "
         "the unfolding only the head axis and the position axis have to trade places."),
        ("merge-no-transpose", dict(merge="reshape"),
         "each head now comes back to its own sequence. Is row t of your merged tensor still position t? In "
         "which order do the head axis and the position axis stand when you join them?",
         "you joined the heads with a reshape while the head axis still stood before the position axis. A "
         "reshape reads memory in order, so each merged row holds pieces of several positions: the position "
         "axis has to come before the head axis first."),
        ("both-swapped", dict(fold="h B", unfold="B h"),
         "you changed both the fold and the unfolding. Entry e of the folded axis: which sequence and head does "
         "your fold put there, and which does your unfolding read it as?",
         "you now fold with the heads outer and unfold with the sequences outer: the same mismatch as before, "
         "the other way round. Either order works, as long as the unfolding reads the axis in the order the "
         "fold wrote it."),
        *(("fold-by-reshape", dict(fold="reshape", unfold=unfold),
           "is row i of one folded head still position i, and are its numbers one head's slice? Fill X with "
           "numbers you can recognise and look at one entry of the folded axis.",
           "you fold Q, K and V by a reshape alone. A reshape keeps memory order, so one folded entry holds the "
           "slices of several heads at several positions: cut each position's vector into h pieces and move the "
           "head axis in front of the positions before you fold.") for unfold in ("B h", "h B")),
        ("merge-interleaved", dict(merge="interleaved"),
         "each head comes back to its own sequence. Is each head's slice of a merged row still one block of "
         "d_head neighbouring numbers?",
         "your permute puts d_head before h, so the merged row interleaves the heads: number r of it is not "
         "number r of the concatenated heads. Only the head axis and the position axis trade places."),
        ("view-of-transposed", dict(merge="view"),
         "the merge fails on the transposed tensor. Can a view join two axes whose numbers no longer lie next "
         "to each other in memory?",
         "after a transpose the numbers of one position are scattered through memory, and a view only "
         "relabels memory as it lies. The join needs an operation that may copy the numbers into order."),
    ]),
    Mistake("scale-d_model",
            "your function differs from the layer even on one sequence, where the given code was right. What "
            "else did you change: how many terms does one head's score add up?",
            functools.partial(_folded_variant, scale="d_model"),
            more="you divide the scores by the square root of d_model. A head's query and key are d_head wide, "
                 "so its scores are sums of d_head terms; the scale was right as given.",
            where=lambda case: case[0].shape[0] == 1),
    Mistake("sequences-mixed",
            "your function is right on a single sequence and wrong on a batch of several. What in your code "
            "depends on the batch: does the output of sequence 0 change when you change only sequence 1?",
            multi_head_attention,
            more="with one sequence the order of the batch and head axes cannot show; with several it does. Follow "
                 "one entry of every axis you fold, reshape or permute: which sequence and head go in, and which "
                 "come out.",
            where=lambda case: case[0].shape[0] == 1),
]


@checker(mistakes=_FOLD_MISTAKES)
def check_folded_heads(fn) -> Verdict:
    """Check ``fn(X, W_QKV, W_O, h)`` is :func:`buggy_folded_attention` with its bug fixed: (B, T, d_model)."""
    return judge(fn, _folded_cases(), multi_head_attention, _FOLD_MISTAKES,
                 success="every entry of the folded axis is read back as the sequence and head it was made from.")
