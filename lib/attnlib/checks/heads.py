"""Exercise checkers for the heads chapter (chapter 6).

``check_per_head_writes(fn)``: ``fn(O, W_O)`` → (B, h, T, d_model), the term each head adds to the layer's output.
``check_heads_first(fn)``: causal multi-head attention from heads-first weights whose keys and values differ in
width (d_k ≠ d_v, h·d_v ≠ d_model).
``check_attention_parameters(n)``: a predicted parameter count of such a layer, with biases.
``check_folded_heads(fn)``: :func:`buggy_folded_attention` (the heads folded into the batch axis) with its bug fixed.
"""

from __future__ import annotations

import functools
import math

import torch

from ..attention import attention, causal_mask, softmax
from ..heads import merge_heads, multi_head_attention, split_heads
from ._core import Group, Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_per_head_writes", "check_heads_first", "check_attention_parameters", "check_folded_heads",
           "buggy_folded_attention"]

# The merge by a reshape alone, in the heads-first layer and in the folded heads.
_NO_TRANSPOSE = ("A reshape reads memory in order, so each merged row holds pieces of several positions: the "
                 "position axis has to come before the head axis first.")


# -------------------------------------------------------------------------------------------------- head writes
def _writes_cases():
    """(O, W_O) built fresh on every call, B ≠ h: the chapter's widths (h·d_v = d_model), then h·d_v < d_model."""
    g, cases = _gen(61), []
    for B, h, T, d_v, d_model, dtype in ((2, 3, 4, 4, 12, torch.float32), (1, 2, 5, 3, 6, torch.float64),
                                         (2, 3, 5, 2, 9, torch.float32), (3, 2, 4, 3, 10, torch.float32)):
        W_O = torch.nn.Linear(h * d_v, d_model, dtype=dtype)
        with torch.no_grad():
            for p in W_O.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=dtype))
        cases.append((torch.randn(B, h, T, d_v, generator=g, dtype=dtype), W_O))
    return cases


def _writes_reference(O, W_O):
    """Head n's term O_n · W_O[rows of head n], every head at once: (B, h, T, d_model)."""
    h, d_v = O.shape[1], O.shape[-1]
    return O @ W_O.weight.T.reshape(h, d_v, -1)


def _writes_variant(O, W_O, *, rows="blocks", bias="none", axis="after B", merge="transpose"):
    """The per-head terms; a switch off its default plants a mistake."""
    B, h, T, d_v = O.shape
    W = {"blocks": W_O.weight.T.reshape(h, d_v, -1), "stored": W_O.weight.reshape(h, d_v, -1),
         "strided": W_O.weight.T.reshape(d_v, h, -1).transpose(0, 1),
         "stored rows": W_O.weight[:h * d_v].reshape(h, d_v, -1)}[rows]
    O = O.reshape(B, T, h, d_v).transpose(1, 2) if merge == "reshape" else O
    terms = O @ W                                                    # (B, h, T, d_model)
    terms = terms + {"none": 0, "each": W_O.bias, "shared": W_O.bias / h,
                     "first": torch.stack([W_O.bias * (n == 0) for n in range(h)])[:, None]}[bias]
    return {"after B": terms, "front": terms.transpose(0, 1), "after T": terms.transpose(1, 2),
            "summed": terms.sum(1), "layer": terms.sum(1) + W_O.bias}[axis]


_CHAPTER_WIDTHS = lambda case: case[0].shape[1] * case[0].shape[3] == case[1].out_features   # h·d_v = d_model
_ORIENTATION = ("which axis of W_O.weight runs over the h·d_v numbers of the concatenated heads? An nn.Linear "
                "stores its matrix as (out, in).",
                "you cut the stored weight, (d_model, h·d_v), as if it were W_O, (h·d_v, d_model): its rows are "
                "output features. Head n's numbers run along the stored weight's other axis.")
_NO_HEAD_AXIS = ("your result has no head axis: what does one head add on its own, before the sum?",
                 "you added the heads up (the layer's work); keep one term per head, on an axis of its own.")
_PER_HEAD_BIAS = "the bias is added once, after the sum of the heads' terms, and belongs to no head: leave it out."

_WRITES_MISTAKES = [*variants(_writes_variant, [
    *(("orientation", dict(rows=r), *_ORIENTATION) for r in ("stored", "stored rows")),
    ("strided", dict(rows="strided"), "which rows of W_O does your head n read: one block of d_v neighbouring rows?",
     "yours reads every h-th row. The concatenation puts head 0's d_v numbers first, then head 1's, so head n's "
     "rows of W_O form one block."),
    ("bias-each", dict(bias="each"), "add your terms over the heads: how many times does your sum hold the bias?",
     "you added the bias to every head's term, h times in all; " + _PER_HEAD_BIAS),
    ("bias-shared", dict(bias="shared"), "is the bias part of what any one head writes?",
     "you gave each head an h-th of the bias; " + _PER_HEAD_BIAS),
    ("bias-head-0", dict(bias="first"), "your head 0 writes something the others do not: is the bias head 0's?",
     "you put the bias in head 0's term; " + _PER_HEAD_BIAS),
    ("heads-in-front", dict(axis="front"), "which axis of your result is the batch, which the heads?",
     "your head axis stands before the batch axis; per-head tensors carry it right after the batch: (B, h, …)."),
    ("heads-after-T", dict(axis="after T"), "is the second axis of your result the heads, the third the positions?",
     "your head axis stands after the positions; per-head tensors carry it right after the batch: (B, h, T, …)."),
    *(("summed", dict(axis=a), *_NO_HEAD_AXIS) for a in ("summed", "layer")),
    ("merge-no-transpose", dict(merge="reshape"), "is row t of what meets head n's rows still position t? In "
     "which order do the head and position axes stand in O?",
     "you read O as if it were laid out (B, T, h, d_v), so each row mixes pieces of several positions and heads. "
     "O is (B, h, T, d_v): each head is already apart."),
]), Mistake("widths", "your function is right when every head is d_model / h wide, as in this chapter, and wrong "
            "here. Where does your code take a head's width from?", _writes_reference,
            more="here h·d_v ≠ d_model. Read d_v from the shape of O: W_O has h·d_v rows, d_v for each head.",
            where=_CHAPTER_WIDTHS)]   # last: right only on a subset of the cases


@checker(mistakes=_WRITES_MISTAKES)
def check_per_head_writes(fn) -> Verdict:
    """Check ``fn(O, W_O)``: O (B, h, T, d_v) and the layer's nn.Linear W_O → (B, h, T, d_model), head n's term."""
    return judge(fn, _writes_cases(), _writes_reference, _WRITES_MISTAKES, success="each head's term reads its own "
                 "block of d_v rows of W_O; summed over the heads, plus the bias once, they are the layer's output.")


# -------------------------------------------------------------------------------------------------- heads-first
# W_Q, W_K (h, d_model, d_k); W_V (h, d_model, d_v); W_O (h, d_v, d_model): W_O[k] reads head k's output.
_HF_SIZES = [  # (dtype, tolerance, (B, T, d_model, h, d_k, d_v)): d_k ≠ d_v, h·d_k ≠ d_model, h·d_v ≠ d_model
    (torch.float32, 1e-5, (2, 5, 12, 3, 2, 5)),
    (torch.float64, 1e-5, (1, 6, 8, 2, 6, 3)),
    (torch.float16, 1e-2, (1, 4, 8, 2, 3, 5)),
    (torch.float32, 1e-5, (2, 5, 12, 3, 4, 4)),   # last, the chapter's own widths: d_k = d_v = d_model / h
]


def _hf_cases():
    g, groups = _gen(66), []
    for dtype, atol, (B, T, d_model, h, d_k, d_v) in _HF_SIZES:
        X = torch.randn(B, T, d_model, generator=g)
        W_Q, W_K, W_V = (torch.randn(h, d_model, d, generator=g) / math.sqrt(d_model) for d in (d_k, d_k, d_v))
        W_O = torch.randn(h, d_v, d_model, generator=g) / math.sqrt(h * d_v)
        groups.append(Group([tuple(t.to(dtype) for t in (X, W_Q, W_K, W_V, W_O))], atol))
    return groups


def _heads_first_reference(X, W_Q, W_K, W_V, W_O):
    """The chapter's layer on the fused (d_model, h·d) matrices: split, attention, merge, then W_O."""
    Q, K, V = (split_heads(X @ W.transpose(0, 1).reshape(W.shape[1], -1), W_Q.shape[0]) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O.reshape(-1, W_O.shape[-1])


def _hf_variant(X, W_Q, W_K, W_V, W_O, *, fuse="right", scale="d_k", mask="before", scores="queries first",
                heads="sum", out="right", merge="right", over="keys"):
    """Heads-first attention in einsum; each switch's default is right, any other value plants a mistake."""
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
    "widths", "your function is right when every head is d_model / h wide, as in this chapter, and wrong here. "
    "Where does your code take a head's width from?",
    more="here d_k, d_v and d_model / h differ. Take each width from the shape of its own weight: W_Q and W_K "
         "for queries and keys, W_V for values.",
    wrong=_heads_first_reference, where=lambda case: case[1].shape[0] * case[1].shape[2] == case[0].shape[-1])

FLOAT16 = Mistake(
    "float16", "your function is right on float32 and float64 inputs but not on float16 ones. Which tensor of "
    "yours is made in a dtype of its own?",
    more="a tensor you create (a mask, a table) is float32 unless you say otherwise; mixed with float16 scores "
         "it turns them float32. Make it in the dtype of the inputs.",
    wrong=_heads_first_reference, where=lambda case: case[0].dtype != torch.float16)

_HF_MISTAKES = [*variants(_hf_variant, [
    ("fused-by-reshape", dict(fuse="reshape"),
     "your heads read the wrong numbers of W_Q, W_K and W_V. In the (d_model, h·d) matrix you built, is row i "
     "still input feature i, for every head?",
     "a plain reshape of a heads-first weight cuts it in memory order, head axis first, so its rows are no "
     "longer input features. Move the head axis next to the head-width axis before joining them."),
    ("W_O-interleaved", dict(out="interleaved"),
     "the heads are right up to W_O. Does row r of your output matrix read number r of the concatenated heads?",
     "your W_O interleaves the heads; the heads-first W_O, joined as stored, has head 0's rows first."),
    ("scale-d_v", dict(scale="d_v"), "how many terms does one score add up? Is that the width under your square root?",
     "you divided by √d_v. A score is a query-key dot product, d_k terms; the values' width plays no part."),
    ("scale-d_model", dict(scale="d_model"),
     "how many terms does one head's score add up? Is that the width under your square root?",
     "you divided by √d_model, a token's width; one head's queries and keys are d_k wide."),
    ("no-scale", dict(scale="none"),
     "are your weights sharper than they should be? What is each score divided by before softmax?",
     "your scores reach softmax unscaled; each head divides them by the square root of its query width."),
    ("mask-after-softmax", dict(mask="after"),
     "do the weights in each row still add up to 1 over the keys a query may read?",
     "you blocked the future after softmax, so its share is lost. The mask goes on the scores, before softmax."),
    ("mask-diagonal", dict(mask="diagonal"),
     "may a query read its own key? Which keys are left for query 0 under your mask?",
     "your mask blocks the diagonal too, so query 0 has no key and its row is NaN. Only keys j > i are blocked."),
    ("mask-past", dict(mask="past"), "which triangle does your mask block: the keys after each query, or before it?",
     "your mask blocks the past and lets every query read the future."),
    ("no-mask", dict(mask="none"),
     "does the output at position 0 change when you change the last token? It should not.",
     "the future is not blocked: every head's scores need the causal mask before softmax."),
    ("scores-transposed", dict(scores="keys first"),
     "in your score table, which axis holds the queries? Does row i read only keys up to i?",
     "your score table has keys on its rows, so the mask and softmax act along the wrong axis."),
    ("softmax-over-queries", dict(over="queries"),
     "does each row of your weight tables add up to 1? Along which axis does your softmax normalise?",
     "your softmax normalises each column, over the queries; it runs along the key axis, the last one."),
    ("mean-heads", dict(heads="mean"),
     "your output is off by the same factor everywhere. What do concatenation and W_O do with the heads?",
     "you averaged the heads. Each head passes through its own rows of W_O and the h results are summed."),
    ("merge-no-transpose", dict(merge="reshape"),
     "each of your output rows mixes numbers from several positions. After P @ V, in which order do the head "
     "axis and the position axis stand, and in which order does a reshape read them?",
     "you merged the heads with a reshape of the (B, h, T, d_v) tensor. " + _NO_TRANSPOSE),
    ("heads-apart", dict(heads="apart"),
     "your result still has a head axis. What does W_O do with the h heads of one position?",
     "W_O adds up what each head contributes through its own rows; your result keeps the heads apart."),
    ]), FLOAT16, WIDTHS]   # last: right only on a subset of the cases


@checker(mistakes=_HF_MISTAKES)
def check_heads_first(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O)``: X (B, T, d_model) → (B, T, d_model), causal, no biases; W_Q, W_K
    (h, d_model, d_k), W_V (h, d_model, d_v), W_O (h, d_v, d_model), with d_k ≠ d_v."""
    return judge(fn, _hf_cases(), _heads_first_reference, _HF_MISTAKES, success="every head scales by its own d_k, "
                 "reads its own slices, and W_O adds the heads up, whatever the widths.")


# --------------------------------------------------------------------------------------- predict: parameters
_QUESTION = dict(d_model=96, h=8, d_k=16, d_v=24)   # the heads-first layer whose parameters the learner predicts


def _heads_first_shapes(d_model: int, h: int, d_k: int, d_v: int) -> dict:
    return dict(W_Q=(h, d_model, d_k), b_Q=(h, d_k), W_K=(h, d_model, d_k), b_K=(h, d_k),
                W_V=(h, d_model, d_v), b_V=(h, d_v), W_O=(h, d_v, d_model), b_O=(d_model,))


def _parameter_guesses(d_model: int, h: int, d_k: int, d_v: int) -> list[Guess]:
    d = d_model
    q = d * h * d_k + h * d_k              # one query (or key) projection with its bias
    v = d * h * d_v + h * d_v
    o = h * d_v * d + d
    matrices = 2 * d * h * d_k + 2 * d * h * d_v
    short = "too low, by a little: the matrices are right, but some biases are too short."
    long = "too high, by a little: the matrices are right, but one bias is too long."
    w_o = "too low: the queries, keys and values are right. Look at W_O's input side."
    square = ("too low: none of the four matrices is d_model × d_model here, because the heads together are wider "
              "than d_model.")
    return [
        Guess("chapter-layer", "too low: that counts four d_model × d_model matrices, as in this chapter. Are they, "
              "in this layer?", 4 * d * d + 4 * d, more=square + " Every bias but the output's is off too."),
        Guess("no-bias", "too low, by a little: the matrices are right; what about the biases?", matrices,
              more="too low by all four biases: the matrices are right, the biases are missing."),
        Guess("biases-d_model", short, matrices + 4 * d,
              more="too low: a bias of the queries, keys or values is as long as every head's q, k or v together."),
        Guess("biases-one-head", short, matrices + 2 * d_k + d_v + d,
              more="too low: every head has its own bias for q, k and v, so the head axis is in their shapes."),
        Guess("no-output-bias", "too low, by a little: the matrices and the heads' biases are right. Is every bias "
              "counted?", matrices + 2 * h * d_k + h * d_v,
              more="too low: the output projection has a bias too, added to the layer's output."),
        Guess("output-bias-per-head", long, matrices + 2 * h * d_k + h * d_v + h * d,
              more="too high: the output's bias is added once, to the layer's output; the heads share it."),
        Guess("output-bias-wide", long, matrices + 2 * h * d_k + 2 * h * d_v,
              more="too high: the output's bias is added to one token vector, not to the concatenated heads."),
        Guess("values-as-keys", "too low: the queries and keys are right. Look at the value side, V and W_O.",
              3 * q + h * d_k * d + d, more="too low: V and W_O are counted with the keys' width, not the values'."),
        Guess("output-square", w_o, 2 * q + v + d * d + d,
              more="too low: W_O reads the concatenated heads, whose width here is not d_model."),
        Guess("output-one-head", w_o, 2 * q + v + d_v * d + d,
              more="too low: W_O reads the concatenated heads of every head, not one head's output."),
        Guess("no-output", "too low: the queries, keys and values are right. Are all four projections counted?",
              2 * q + v, more="too low: the output projection W_O, with its bias, is part of the layer."),
        Guess("square-matrices", "too low: the biases are right, but are the four matrices d_model × d_model here?",
              4 * d * d + 2 * h * d_k + h * d_v + d, more=square),
        Guess("one-head", "far too low: that is about one head's share of the layer.",
              2 * (d * d_k + d_k) + (d * d_v + d_v) + d_v * d + d,
              more="far too low: you counted one head; the head axis is in every weight's shape but the output bias."),
        Guess("heads-twice", "far too high: were the heads counted twice?", h * (2 * q + v + o),
              more="far too high: every weight already holds all the heads; multiplying again counts each twice."),
    ]


@checker(kind="predict", mistakes=_parameter_guesses(**_QUESTION))
def check_attention_parameters(n) -> Verdict:
    """Check a predicted number of parameters of the heads-first layer with d_model = 96, h = 8, d_k = 16,
    d_v = 24 and a bias on every projection."""
    want = sum(math.prod(shape) for shape in _heads_first_shapes(**_QUESTION).values())   # counted, not computed
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
    """:func:`buggy_folded_attention` fixed (the defaults) or fixed wrongly: ``fold``/``unfold`` order B·h as
    "B h" or "h B" (fold="reshape": a reshape alone), ``merge`` joins the heads, ``scale`` under the root."""
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
    """One sequence (where the order of the fold cannot show), then batches with B ≠ h, one in float64."""
    g = _gen(65)
    cases = []
    for B, T, d_model, h, dtype in ((1, 5, 12, 3, torch.float32), (2, 5, 12, 3, torch.float32),
                                    (3, 4, 8, 2, torch.float64)):
        X = torch.randn(B, T, d_model, generator=g)
        W_QKV = torch.randn(d_model, 3 * d_model, generator=g) / math.sqrt(d_model)
        W_O = torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        cases.append((X.to(dtype), W_QKV.to(dtype), W_O.to(dtype), h))
    return cases


_ONE_SEQUENCE = lambda case: case[0].shape[0] == 1   # the case where the given code is right

_FOLD_MISTAKES = [Mistake("unchanged",
            "this is still the function as given: right on one sequence, wrong on a batch. Entry e of the folded "
            "axis B·h: which sequence and head does the fold put there, and which does the unfolding read?",
            buggy_folded_attention,
            more="the fold puts the sequences outer and the heads inner; the unfolding reads the heads as outer, "
                 "so a sequence gets heads computed from other sequences. Unfold in the order of the fold."),
    *variants(_folded_variant, [
        ("stale-permute", dict(merge="stale"),
         "your unfolding reads B·h in the right order now. Does the permute after it give (B, T, h, d_head)?",
         "you kept the permute written for the old order, so the batch axis lands third. After the unfolding "
         "only the head axis and the position axis trade places."),
        ("merge-no-transpose", dict(merge="reshape"),
         "each head now comes back to its own sequence. Is row t of your merged tensor still position t?",
         "you joined the heads with a reshape while the head axis stood before the position axis. " + _NO_TRANSPOSE),
        ("both-swapped", dict(fold="h B", unfold="B h"),
         "you changed both the fold and the unfolding. Does your unfolding read B·h in the order your fold wrote it?",
         "you now fold with the heads outer and unfold with the sequences outer: the same mismatch, reversed."),
        *(("fold-by-reshape", dict(fold="reshape", unfold=unfold),
           "is row i of one folded head still position i, and are its numbers one head's slice?",
           "you fold Q, K and V by a reshape alone, so one folded entry mixes several heads and positions: cut "
           "each vector into h pieces and move the head axis in front of the positions first.")
          for unfold in ("B h", "h B")),
        ("merge-interleaved", dict(merge="interleaved"),
         "is each head's slice of a merged row still one block of d_head neighbouring numbers?",
         "your permute puts d_head before h, interleaving the heads. Only the head and position axes trade places."),
        ("view-of-transposed", dict(merge="view"),
         "can a view join two axes whose numbers no longer lie next to each other in memory?",
         "after a transpose one position's numbers are scattered, and a view only relabels memory as it lies. "
         "The join needs an operation that may copy."),
    ]),
    Mistake("scale-d_model",
            "your function differs even on one sequence, where the given code was right. How many terms does "
            "one head's score add up?", functools.partial(_folded_variant, scale="d_model"),
            more="you divide by √d_model; a head's scores are sums of d_head terms, as the given scale said.",
            where=_ONE_SEQUENCE),
    Mistake("sequences-mixed",
            "your function is right on one sequence and wrong on a batch. Does sequence 0's output change when "
            "you change only sequence 1?", multi_head_attention,
            more="with one sequence the order of the batch and head axes cannot show. Follow one entry of every "
                 "axis you fold, reshape or permute: which sequence and head go in, which come out.",
            where=_ONE_SEQUENCE),
]


@checker(mistakes=_FOLD_MISTAKES)
def check_folded_heads(fn) -> Verdict:
    """Check ``fn(X, W_QKV, W_O, h)`` is :func:`buggy_folded_attention` with its bug fixed: (B, T, d_model)."""
    return judge(fn, _folded_cases(), multi_head_attention, _FOLD_MISTAKES,
                 success="every entry of the folded axis is read back as the sequence and head it was made from.")
