"""Exercise checkers for the heads chapter (chapter 6).

``check_split_heads(fn)``: ``fn(x, h)`` splits x (..., T, d_model) into heads for any number of leading axes.
``check_heads_first(fn)``: causal multi-head attention from heads-first weights whose keys and values differ in
width (d_k ≠ d_v, h·d_v ≠ d_model).
``check_attention_parameters(n)``: a predicted parameter count of such a layer, with biases.
``check_fixed_qkv_attention(fn)``: :func:`buggy_qkv_attention` with its planted bug fixed.

Each function checker runs cases chosen to tell its mistakes apart: a case where the shape hides a swap of two
axes (T = d_head, T = h), and cases where it does not.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import attention, causal_mask, softmax
from ..heads import merge_heads, split_heads
from ._core import Group, Guess, Mistake, Verdict, _close, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_split_heads", "check_heads_first", "check_attention_parameters", "check_fixed_qkv_attention",
           "buggy_qkv_attention"]

_GENERIC = ("error", "values", "shape", "type", "length")   # verdicts a diagnosis may improve on


def _right(fn, case: tuple, reference, atol: float) -> bool:
    """Whether ``fn`` gives the reference's values (any dtype) on a copy of ``case``; an error is not right."""
    try:
        got = fn(*(c.clone() if isinstance(c, torch.Tensor) else c for c in case))
    except Exception:  # noqa: BLE001 - a failing answer is simply not right here
        return False
    return _close(got, reference(*case), atol)


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
    d = d_model // h
    if way == "no-transpose":
        return x.reshape(*lead, h, T, d)
    if way == "not-moved":
        return x.reshape(*lead, T, h, d)                          # cut, but the heads after the positions
    if way == "interleaved":
        return x.reshape(*lead, T, d, h).movedim(-1, -3)
    if way == "wrong-axes":
        return x.reshape(*lead, T, h, d).movedim(-3, -1)          # (..., h, d_head, T)
    if way == "fixed-axes":
        return x.reshape(*lead, T, h, d).transpose(1, 2)          # right for three axes only
    if way == "heads-in-front":
        return x.reshape(*lead, T, h, d).movedim(-2, 0)           # (h, ..., T, d_head)
    if way == "lead-flattened":
        return _split_reference(x.reshape(-1, T, d_model), h)
    return x                                                      # "no-split"


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

_SPLIT_MISTAKES = [THREE_AXES, *variants(_split_way, [
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
]


def _hf_case(g, dtype, B, T, d_model, h, d_k, d_v):
    X = torch.randn(B, T, d_model, generator=g)
    W_Q, W_K = (torch.randn(h, d_model, d_k, generator=g) / math.sqrt(d_model) for _ in range(2))
    W_V = torch.randn(h, d_model, d_v, generator=g) / math.sqrt(d_model)
    W_O = torch.randn(h, d_v, d_model, generator=g) / math.sqrt(h * d_v)
    return tuple(t.to(dtype) for t in (X, W_Q, W_K, W_V, W_O))


def _hf_cases():
    """One group per dtype, built fresh on every call: float16 needs a wider tolerance."""
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


def _hf_variant(X, W_Q, W_K, W_V, W_O, *, fuse="right", scale="d_k", causal=True, scores="queries first",
                heads="sum", out="right", merge="right"):
    """Heads-first attention written with einsum; every switch's default is right, any other value plants a
    mistake. ``fuse="reshape"``: the weights read as (d_model, h·d) by a plain reshape. ``scale``: the width
    under the square root. ``scores="keys first"``: the table has keys on its rows. ``heads``: "sum" (right),
    "mean" or "apart" (one output per head). ``out="interleaved"``: W_O's rows taken in the wrong order.
    ``merge="reshape"``: the chapter's bug, the heads merged by a reshape of (B, h, T, d_v) with no transpose."""
    h, d_model, d_k = W_Q.shape
    d_v, T = W_V.shape[-1], X.shape[1]
    if fuse == "right":
        Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    else:
        Q, K, V = (split_heads(X @ W.reshape(d_model, -1), h) for W in (W_Q, W_K, W_V))
    S = Q @ K.transpose(-2, -1) if scores == "queries first" else K @ Q.transpose(-2, -1)
    Z = S / math.sqrt({"d_k": d_k, "d_v": d_v, "d_model": d_model}[scale])
    P = softmax(Z + causal_mask(T, dtype=Z.dtype) if causal else Z)
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
         "weight it belongs to: the queries' and keys' from W_Q and W_K, the values' from W_V.")

FLOAT16 = Mistake(
    "float16",
    "your function is right on float32 and float64 inputs but not on float16 ones. Which tensor of yours is "
    "made in a dtype of its own instead of the inputs' dtype?",
    more="a tensor you create (a mask, a constant table) is float32 unless you say otherwise. Mixed with "
         "float16 scores it turns them into float32, and a later product with a float16 tensor fails or "
         "the result comes back float32. Make it in the dtype of the inputs.")

_HF_MISTAKES = [WIDTHS, FLOAT16, *variants(_hf_variant, [
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
    ("no-mask", dict(causal=False),
     "does the output at position 0 change when you change the last token? It should not.",
     "the future is not blocked: every head's scores need the causal mask before softmax."),
    ("scores-transposed", dict(scores="keys first"),
     "in your score table, which axis holds the queries? Does row i of your weights read only keys at or "
     "before i?",
     "your score table has the keys on its rows and the queries on its columns, so the mask and the softmax "
     "act along the wrong axis. The query index comes first, the key index second."),
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
])]


def _hf_probe():
    """The chapter's own case, d_k = d_v = d_model / h, in float32."""
    return _hf_case(_gen(67), torch.float32, 2, 5, 12, 3, 4, 4)


@checker(mistakes=_HF_MISTAKES)
def check_heads_first(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O)``: X (B, T, d_model) → (B, T, d_model), causal, no biases; W_Q, W_K
    (h, d_model, d_k), W_V (h, d_model, d_v), W_O (h, d_v, d_model), with d_k ≠ d_v."""
    def diagnose(verdict: Verdict, results) -> Verdict | None:
        if verdict.mistake not in _GENERIC:
            return None
        right = [results.right(case) for case, _ in results.cases]
        if right == [True, True, False]:        # float32 and float64 right, float16 not: a dtype of its own
            return named(FLOAT16)
        if not right[0] and _right(fn, _hf_probe(), _heads_first_reference, 1e-5):
            return named(WIDTHS)                # right only where every head is d_model / h wide
        return None

    return judge(fn, _hf_cases(), _heads_first_reference, _HF_MISTAKES, diagnose=diagnose,
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
    return [
        Guess("chapter-layer",
              "too low: that is the count of a layer whose four matrices are all d_model × d_model, as in this "
              "chapter. Are they, in this layer?", 4 * d * d + 4 * d,
              more="too low: none of the four matrices is d_model × d_model here, because the heads together "
                   "are wider than d_model. Every matrix and every bias but the output's is off."),
        Guess("no-bias", "too low, by a little: the matrices are right; what about the biases?", matrices,
              more="too low by all four biases: the matrices are right, the biases are missing."),
        Guess("biases-d_model", "too low, by a little: the matrices are right, but some biases are too short.",
              matrices + 4 * d,
              more="too low: the biases of the queries, keys and values are as long as what they are added "
                   "to, every head's q, k or v, which here is not d_model numbers."),
        Guess("output-bias-wide", "too high, by a little: the matrices are right, but one bias is too long.",
              matrices + 2 * h * d_k + 2 * h * d_v,
              more="too high: the output's bias is added to the layer's output, one token vector, not to the "
                   "concatenated heads."),
        Guess("values-as-keys", "too low: the queries and keys are right. Look at the value side, V and W_O.",
              3 * q + h * d_k * d + d,
              more="too low: V and W_O are counted with the keys' width; the value heads are d_v wide."),
        Guess("output-square", "too low: the queries, keys and values are right. Look at W_O's input side.",
              2 * q + v + d * d + d,
              more="too low: W_O reads the concatenated heads, whose width here is not d_model."),
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
def buggy_qkv_attention(X, W_QKV, W_O, h):
    """Causal multi-head attention from the fused [W_Q | W_K | W_V] (d_model, 3·d_model) and W_O, with one
    planted bug: X (B, T, d_model) → (B, T, d_model)."""
    B, T, d_model = X.shape
    d_head = d_model // h
    qkv = (X @ W_QKV).view(B, T, h, 3, d_head)
    q, k, v = qkv.permute(3, 0, 2, 1, 4)                     # each (B, h, T, d_head)
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d_head ** 0.5
    future = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(1)
    P = Z.masked_fill(future, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhij,bhjd->bihd", P, v)              # (B, T, h, d_head)
    return out.reshape(B, T, d_model) @ W_O


def _qkv_variant(X, W_QKV, W_O, h, *, cut="right", merge="right"):
    """The function of :func:`buggy_qkv_attention` with its bug fixed (the defaults) or fixed wrongly.

    ``cut``: "stale-permute" (the view fixed, the permute not), "no-head-move" (q, k, v taken along the axis of
    three but the head axis left after the positions), "no-transpose" (Q, K, V reshaped straight to
    (B, h, T, d_head)). ``merge="heads-first"``: the output einsum gives (B, h, T, d_head) before the reshape.
    """
    B, T, d_model = X.shape
    d_head = d_model // h
    QKV = X @ W_QKV
    if cut == "right":
        q, k, v = QKV.view(B, T, 3, h, d_head).permute(2, 0, 3, 1, 4)
    elif cut == "stale-permute":
        q, k, v = QKV.view(B, T, 3, h, d_head).permute(3, 0, 2, 1, 4)
    elif cut == "no-head-move":
        q, k, v = QKV.view(B, T, 3, h, d_head).unbind(2)
    else:
        q, k, v = (t.reshape(B, h, T, d_head) for t in QKV.chunk(3, dim=-1))
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d_head ** 0.5
    future = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(1)
    P = Z.masked_fill(future, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhij,bhjd->" + ("bihd" if merge == "right" else "bhid"), P, v)
    return out.reshape(B, T, d_model) @ W_O


def _qkv_reference(X, W_QKV, W_O, h):
    """The chapter's layer: [W_Q | W_K | W_V] chunked into its three blocks, each split into heads."""
    Q, K, V = (split_heads(t, h) for t in (X @ W_QKV).chunk(3, dim=-1))
    return merge_heads(attention(Q, K, V)) @ W_O


def _qkv_cases():
    """Fresh inputs on every call: h = 3 (a permute of the wrong axes still unpacks into three), T = h, and
    a float64 case with T ≠ h."""
    g = _gen(65)
    cases = []
    for B, T, d_model, h, dtype in ((2, 5, 12, 3, torch.float32), (1, 4, 8, 4, torch.float32),
                                    (1, 6, 16, 2, torch.float64)):
        X = torch.randn(B, T, d_model, generator=g)
        W_QKV = torch.randn(d_model, 3 * d_model, generator=g) / math.sqrt(d_model)
        W_O = torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        cases.append((X.to(dtype), W_QKV.to(dtype), W_O.to(dtype), h))
    return cases


_FIX_MISTAKES = [
    Mistake("unchanged",
            "this is still the function as given: it runs and has the right shape. Which columns of X @ W_QKV "
            "end up in head 0's k, and which of W_Q, W_K and W_V do they belong to?",
            buggy_qkv_attention,
            more="the view cuts each position's 3·d_model numbers as h groups of a q piece, a k piece and a v "
                 "piece, but W_QKV holds all of Q's columns first, then all of K's, then all of V's: head 0's "
                 "k is really head 1's query. The axis of size three has to come before the head axis."),
    *variants(_qkv_variant, [
        ("stale-permute", dict(cut="stale-permute"),
         "after your new view, along which axis does the unpacking into q, k and v go? Count the axes of the "
         "view again.",
         "you changed the view but kept the reordering written for the old one. The axis you unpack into q, "
         "k and v must be the one of size three, and the head axis must come right after the batch."),
        ("no-head-move", dict(cut="no-head-move"),
         "what shape do your q, k and v have? In the einsum, is the second axis the heads and the third the "
         "positions?",
         "your q, k and v keep the position axis before the head axis, so the einsum takes positions for "
         "heads and heads for positions. Move the head axis in front of the position axis."),
        ("merge-changed", dict(merge="heads-first"),
         "the end of the function was right as given. After your change, which axis follows the batch in the "
         "output of the last einsum, and is that what the reshape needs?",
         "your output has the head axis before the position axis when it is reshaped, so each row glues "
         "together pieces of different positions. The last einsum as given already put the positions first."),
        ("no-transpose", dict(cut="no-transpose"),
         "is row i of a head's q still position i?",
         "you reshaped each of Q, K and V straight into heads and then positions. A reshape keeps memory "
         "order, so a head's rows mix pieces of several positions: cut each position's vector into heads "
         "first, then move the head axis in front of the positions."),
    ]),
]


@checker(mistakes=_FIX_MISTAKES)
def check_fixed_qkv_attention(fn) -> Verdict:
    """Check ``fn(X, W_QKV, W_O, h)`` is :func:`buggy_qkv_attention` with its bug fixed: (B, T, d_model)."""
    return judge(fn, _qkv_cases(), _qkv_reference, _FIX_MISTAKES,
                 success="each head's q, k and v come from W_Q's, W_K's and W_V's own columns again.")
