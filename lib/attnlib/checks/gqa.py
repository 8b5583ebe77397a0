"""Exercise checkers for chapter 10 (grouped-query attention).

``check_regrouped_heads(fn)``: ``fn(W_QKV, W_O, h, h_kv)`` → (W_QKV, W_O) of a layer whose query head n reads K/V
head n mod h_kv, reordered so that the library's grouping (n // (h / h_kv)) computes the same outputs.
``check_gqa_cache_bytes(value)``: a predicted number of KV-cache bytes per token for ``CACHE_QUESTION``.
``check_mean_pooled_kv(fn)``: ``fn(mha, h_kv)`` → a new ``MultiHeadAttention`` with mha's options and dtype, h_kv
key/value heads each the mean of its group, W_Q and W_O copied.
"""

from __future__ import annotations

import functools
import math

import torch

from ..attention import attention
from ..heads import MultiHeadAttention, merge_heads, repeat_kv, split_heads
from ._core import (
    SHARED,
    Guess,
    Mistake,
    Verdict,
    _gen,
    checker,
    describe,
    judge,
    judge_number,
    named,
    shared_parameters,
    variants,
)

__all__ = ["check_regrouped_heads", "check_gqa_cache_bytes", "check_mean_pooled_kv", "CACHE_QUESTION"]

f64 = torch.float64


# ----------------------------------------------------------------- build: a layer whose groups are strided
_REGROUP_SIZES = (   # d_model, h, h_kv, dtype
    (12, 6, 2, f64),             # groups of 3: the order and its inverse differ
    (16, 8, 4, f64),             # four groups of 2
    (8, 4, 1, torch.float32),    # multi-query: every order is right
)


def _regroup_cases():
    """(W_QKV, W_O, h, h_kv) built fresh, in the book's orientation: W_QKV (d_model, d_model + 2·d_kv)."""
    cases = []
    for seed, (d_model, h, h_kv, dtype) in enumerate(_REGROUP_SIZES):
        g = _gen(110 + seed)
        d_kv = h_kv * d_model // h
        W_QKV = torch.randn(d_model, d_model + 2 * d_kv, generator=g, dtype=dtype) / math.sqrt(d_model)
        W_O = torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model)
        cases.append((W_QKV, W_O, h, h_kv))
    return cases


def _grouped_output(W_QKV, W_O, h, h_kv, *, strided=False):
    """Causal GQA with these weights on fixed X (2, 5, d_model): query head n reads K/V head n // (h/h_kv),
    or n mod h_kv when ``strided``."""
    d_model = W_O.shape[1]
    X = torch.randn(2, 5, d_model, generator=_gen(120), dtype=torch.float64).to(W_QKV.dtype)
    Q, K, V = (X @ W_QKV).split([d_model, (W_QKV.shape[1] - d_model) // 2, (W_QKV.shape[1] - d_model) // 2], -1)
    Q, K, V = split_heads(Q, h), split_heads(K, h_kv), split_heads(V, h_kv)
    K, V = ((t.repeat(1, h // h_kv, 1, 1) if strided else repeat_kv(t, h // h_kv)) for t in (K, V))
    return merge_heads(attention(Q, K, V)) @ W_O


_strided_reference = functools.partial(_grouped_output, strided=True)


class _Returned:
    """A result that is not what the exercise asks for, with the verdict that says so."""

    def __init__(self, verdict: Verdict):
        self.verdict = verdict


def _returned(verdict: Verdict, results) -> Verdict | None:
    """The verdict of the first cached :class:`_Returned`, unless the engine has named an error or the stub."""
    if verdict.mistake in ("error", "in-place", "stub", "none", "not-callable"):
        return None
    return next((got.verdict for _, got, _ in results.outputs() if isinstance(got, _Returned)), None)


def _through_layer(fn):
    """fn(W_QKV, W_O, h, h_kv) judged by what the library's grouping computes with the weights it returns."""
    def regrouped(W_QKV, W_O, h, h_kv):
        shapes, dtype = (W_QKV.shape, W_O.shape), W_QKV.dtype
        want = _strided_reference(W_QKV, W_O, h, h_kv)
        kv = W_QKV[:, W_O.shape[0]:].clone()
        got = fn(W_QKV, W_O, h, h_kv)
        if got is None:
            return None
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)
                and tuple(t.shape for t in got) == shapes and all(t.dtype == dtype for t in got)):
            return _Returned(named(_PAIR, shapes=f"{describe(W_QKV)} and {describe(W_O)}", got=describe(got)))
        out = _grouped_output(*got, h, h_kv)
        moved = not torch.equal(got[0][:, W_O.shape[0]:], kv)   # wrong and K/V changed: a K/V head was moved
        return _Returned(named(_KV_MOVED)) if moved and not torch.allclose(out, want, atol=1e-5) else out
    return regrouped


def _regroup(W_QKV, W_O, h, h_kv, *, order="blocked", q=True, o=True, layout="heads"):
    """The weights reordered for the library's grouping, with the planted mistakes' switches."""
    d_model, n = W_O.shape[0], h // h_kv
    d_head = d_model // h
    order = {"blocked": torch.arange(h).reshape(n, h_kv).T, "inverse": torch.arange(h).reshape(h_kv, n).T,
             "unchanged": torch.arange(h)}[order].reshape(h)
    if layout == "heads":
        cols = (order[:, None] * d_head + torch.arange(d_head)).reshape(-1)
    else:
        cols = (torch.arange(d_head)[None, :] * h + order[:, None]).T.reshape(-1)
    W_Q = W_QKV[:, :d_model][:, cols] if q else W_QKV[:, :d_model]
    W_O = W_O[cols] if o is True else W_O[:, cols] if o == "o-columns" else W_O
    return torch.cat([W_Q, W_QKV[:, d_model:]], dim=1), W_O


_REGROUP_PLANTED = variants(_regroup, [
    ("unchanged", dict(order="unchanged"),
     "your weights compute what they computed before, but read through the other grouping. In the layer you "
     "were given, which query heads read K/V head 0, and which read them in the library's layer?",
     "with h = 6 and h_kv = 2 the given layer pairs query heads 0, 2, 4 with K/V head 0, and the library pairs "
     "heads 0, 1, 2 with it. The K/V heads cannot move (each serves a whole group); the query heads can, "
     "if W_O follows them."),
    ("inverse-order", dict(order="inverse"),
     "your new order of the query heads is the inverse of the one needed: it says where each old head goes, "
     "not which old head comes. Which old head must the new head 1 be?",
     "new head g·(h / h_kv) + r must be the r-th of the old query heads that read K/V head g: with h = 6 and "
     "h_kv = 2, old heads 0, 2, 4, then 1, 3, 5. Yours gives 0, 3, 1, 4, 2, 5; the two orders agree only "
     "when one is its own inverse, as with h = 4 and h_kv = 2."),
    ("W_O-not-reordered", dict(o=False),
     "the query heads were reordered, W_O was not. Which rows of W_O does each head's output meet?",
     "the concatenated heads are multiplied by W_O: head n meets rows n·d_head … (n+1)·d_head − 1. When a head "
     "moves to a new place, its rows of W_O must move with it."),
    ("W_Q-not-reordered", dict(q=False),
     "W_O's rows were reordered, the queries were not. Which columns of W_QKV make query head n?",
     "query head n is made by W_QKV's columns n·d_head … (n+1)·d_head − 1 (W_Q comes first): reorder those "
     "head blocks exactly as you reordered W_O's rows."),
    ("W_O-columns", dict(o="o-columns"),
     "you reordered W_O's columns, which are the output features, not its rows. Which axis of W_O meets the "
     "heads?",
     "out = concat(heads) · W_O, with W_O of shape (h·d_head, d_model) in the book's orientation: the heads meet "
     "its rows. Reorder the rows, in blocks of d_head."),
    ("head-layout", dict(layout="interleaved"),
     "you moved single columns, taking head n to own columns n, n + h, n + 2h, …. Which columns of W_Q does "
     "one head own?",
     "split_heads cuts the h·d_head columns into h blocks of d_head consecutive columns: head n owns "
     "n·d_head … (n+1)·d_head − 1. Reorder those whole blocks."),
])
# each judged, like the learner's, by what the library's grouping computes with the weights it returns
_REGROUP_MISTAKES = [Mistake(m.label, m.hint, _through_layer(m.wrong), m.more) for m in _REGROUP_PLANTED]

_KV_MOVED = Mistake(
    "kv-moved",
    "your weights change the columns of K or V. Each key/value head serves a whole group of query heads: "
    "which heads can move to a new place without changing what any other head reads?",
    more="the K/V heads stay where they are, W_QKV's last 2·d_kv columns unchanged; only the query heads move "
         "(W_Q's column blocks), and W_O's row blocks with them.")
_PAIR = Mistake(
    "pair",
    "return the pair (W_QKV, W_O): two tensors of the inputs' shapes and dtype, {shapes}; got {got}. Does "
    "moving the query heads to new places change any shape or dtype?",
    more="reordering the query heads moves columns of W_QKV and rows of W_O without changing any shape or "
         "dtype: return them as (W_QKV, W_O), {shapes}; got {got}.")


@checker(mistakes=[*_REGROUP_MISTAKES, _PAIR, _KV_MOVED])
def check_regrouped_heads(fn) -> Verdict:
    """``fn(W_QKV, W_O, h, h_kv)`` → (W_QKV, W_O) regrouped for the library's grouping of query heads."""
    judged = _through_layer(fn) if callable(fn) else fn
    return judge(judged, _regroup_cases(), _strided_reference, _REGROUP_MISTAKES, diagnose=_returned,
                 success="with your weights the library's grouping computes what the strided layer computed: for "
                         "groups of three and of two query heads and for one key/value head, K and V untouched.")


# --------------------------------------------------------------------------------- predict: cache bytes/token
CACHE_QUESTION = {"L": 24, "W_QKV": (3072, 2048), "W_O": (2048, 2048), "d_head": 128, "bytes_per_number": 4}
"""A checkpoint described by its weights: 24 blocks, each with a fused W_QKV.weight of shape (3072, 2048) and a
W_O.weight of (2048, 2048), heads of 128, the cache kept in float32. Hidden in the shapes: d_model = 2048, h = 16
query heads and h_kv = 4 key/value heads."""


def _cache_guesses(want: int) -> list[Guess]:
    s = CACHE_QUESTION
    L, b = s["L"], s["bytes_per_number"]
    rows, d_model = s["W_QKV"][0], s["W_O"][0]
    kv = rows - d_model                                    # the K and V rows of one layer
    return [
        Guess("with-queries",
              "too high: your count keeps every row of W_QKV's output for every token. Which of Q, K and V does "
              "a cache keep, and which is used once and thrown away?",
              rows * L * b,
              more="only K and V are cached: a query is used by its own position only. Of W_QKV's rows, those "
                   "of W_Q (as many as d_model) produce no cache."),
        Guess("as-if-mha",
              "too high: that is the cache of K and V as wide as the queries, as if every query head had its "
              "own key/value head. How wide are K and V in this checkpoint?",
              2 * d_model * L * b,
              more="read the widths of K and V off the fused weight: it holds W_Q first (d_model rows), then "
                   "W_K and W_V, which are narrower here. The cache keeps those."),
        Guess("numbers",
              "too low, by the size of one number: did you count numbers or bytes?",
              kv * L,
              more="the cache is kept in float32: every number takes 4 bytes."),
        Guess("half",
              "too low by a factor of 2: which tensors does each layer cache for every token, and how many "
              "bytes does each of their numbers take?",
              kv // 2 * L * b,
              more="each layer keeps a K row and a V row for every token, both of the same width, and the cache "
                   "is kept in float32: 4 bytes a number, not float16's 2."),
        Guess("kv-twice",
              "too high by a factor of 2: the rows of W_QKV after W_Q's hold K and V together. How wide is K "
              "alone?",
              2 * kv * L * b,
              more="W_QKV's rows are W_Q's (d_model of them), then W_K's, then W_V's, the last two of equal "
                   "width: the rows after W_Q's are 2 · d_kv, and the cache keeps exactly those."),
        Guess("kib",
              "too low: that is the answer in KiB. The question asks for bytes: how many bytes are in a KiB?",
              want // 1024,
              more="1 KiB is 1024 bytes; give the count of bytes itself."),
        Guess("one-layer",
              "too low: that is the cache of one block. How many blocks keep a cache of their own?",
              kv * b,
              more=f"each of the L = {L} blocks keeps its own K and V for every token."),
        Guess("one-layer-numbers",
              "too low: that counts the numbers of one block. Which two things did your count leave out?",
              kv,
              more=f"every one of the L = {L} blocks keeps its own K and V, and every float32 number takes 4 "
                   "bytes."),
        Guess("bits",
              "too high by a factor of 8: did you count bits instead of bytes?",
              kv * L * b * 8,
              more="a float32 number is 32 bits, which is 4 bytes."),
    ]


_CACHE_WANT = (CACHE_QUESTION["W_QKV"][0] - CACHE_QUESTION["W_O"][0]) * CACHE_QUESTION["L"] \
    * CACHE_QUESTION["bytes_per_number"]
_CACHE_GUESSES = _cache_guesses(_CACHE_WANT)


@checker(kind="predict", mistakes=_CACHE_GUESSES)
def check_gqa_cache_bytes(value) -> Verdict:
    """Check a predicted number of KV-cache bytes per token for the checkpoint of ``CACHE_QUESTION``."""
    want = _CACHE_WANT   # agrees with kv_cache_bytes and with a measured cache (tests/test_checks_gqa.py)
    return judge_number(value, want, _CACHE_GUESSES, rtol=0.01,
                        success=f"W_QKV's 3072 rows are W_Q's 2048 (d_model, from W_O) and 1024 for K and V, "
                                f"so h_kv = 1024 / (2 · 128) = 4 key/value heads for 16 query heads. Every token "
                                f"adds those 1024 numbers to each of the 24 blocks, at 4 bytes: {want:,} bytes "
                                f"({want // 1024} KiB), a quarter of what 16 key/value heads would need.")


# ------------------------------------------------------------------------------ extend: MHA → GQA by pooling
def _pool_rows(W: torch.Tensor, h: int, h_kv: int, *, how: str = "mean") -> torch.Tensor:
    """Rows of h heads (h·d_head, ...) → rows of h_kv heads, each the mean (or another pooling) of a group."""
    d_head = W.shape[0] // h
    n = h // h_kv
    if how == "strided":    # group j = heads j, j + h_kv, j + 2·h_kv, …
        heads = W.reshape(n, h_kv, d_head, *W.shape[1:]).mean(0)
    else:                   # group j = heads j·n … (j+1)·n − 1
        heads = W.reshape(h_kv, n, d_head, *W.shape[1:])
        heads = {"mean": heads.mean(1), "sum": heads.sum(1), "first": heads[:, 0]}[how]
    return heads.reshape(h_kv * d_head, *W.shape[1:])


def _pooled(mha: MultiHeadAttention, h_kv: int, how: str = "mean") -> MultiHeadAttention:
    d, h = mha.d_model, mha.h
    bias = mha.W_QKV.bias is not None
    out = MultiHeadAttention(d, h, h_kv=h_kv, bias=bias, rope=mha.rope, backend=mha.backend).to(mha.W_O.weight)
    with torch.no_grad():
        for name in ("weight", "bias") if bias else ("weight",):
            W = getattr(mha.W_QKV, name)
            Q, K, V = W[:d], W[d:2 * d], W[2 * d:]
            getattr(out.W_QKV, name).copy_(torch.cat([Q, _pool_rows(K, h, h_kv, how=how),
                                                      _pool_rows(V, h, h_kv, how=how)]))
            getattr(out.W_O, name).copy_(getattr(mha.W_O, name))
    return out


_POOL_SIZES = (   # d_model, h, h_kv, bias, rope, dtype
    (16, 4, 2, True, False, torch.float32),    # groups of 2, with biases
    (24, 6, 2, False, True, torch.float32),    # groups of 3, no biases, RoPE
    (12, 3, 1, True, False, f64),              # multi-query, float64
)


def _mean_pool_cases():
    """(mha, h_kv, x) built fresh; ``x`` is what the converted layer's output is judged on."""
    cases = []
    for seed, (d_model, h, h_kv, bias, rope, dtype) in enumerate(_POOL_SIZES):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(200 + seed)
            mha = MultiHeadAttention(d_model, h, bias=bias, rope=rope).to(dtype)
        x = torch.randn(2, 5, d_model, generator=_gen(300 + seed), dtype=dtype)
        cases.append((mha, h_kv, x))
    return cases


_PARTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "output")


def _summary(layer: MultiHeadAttention, x: torch.Tensor) -> tuple:
    """A layer's W_Q, W_K, W_V, W_O rows, their biases (None without) and its output on x."""
    q, k, v = layer.qkv_sizes
    with torch.no_grad():
        parts = []
        for W in (layer.W_QKV.weight, layer.W_QKV.bias):
            parts += [None] * 3 if W is None else [W[:q].detach(), W[q:q + k].detach(), W[q + k:].detach()]
        parts.insert(3, layer.W_O.weight.detach())
        parts.insert(7, None if layer.W_O.bias is None else layer.W_O.bias.detach())
        parts.append(layer(x).detach())
    return tuple(parts)


def _judged(convert):
    """convert(mha, h_kv) judged by the new layer's summary, or by what is wrong with its structure."""
    def converted(mha, h_kv, x):
        new = convert(mha, h_kv)
        if new is None:
            return None
        problem = _structure(new, mha, h_kv)
        return _Returned(problem) if problem else _summary(new, x)
    return converted


def _pooled_summary(mha, h_kv, x, *, how="mean"):
    """The summary of the conversion that pools each group ``how`` says: the reference, or a planted mistake."""
    return _summary(_pooled(mha, h_kv, how), x)


_POOL_MISTAKES = variants(_pooled_summary, [
    ("sum", dict(how="sum"),
     "your key and value heads are h / h_kv times too large: the scores of a group come out that much "
     "larger. Is a head of the new layer the sum of its group or its mean?",
     "you summed the heads of each group; the exercise asks for the mean: divide by the group size, "
     "h / h_kv."),
    ("strided-groups", dict(how="strided"),
     "you pooled heads that are h_kv apart (j, j + h_kv, …). Which query heads share key/value head j in "
     "the library's grouped layer?",
     "the library's groups are consecutive: key/value head j serves query heads j·(h/h_kv) … "
     "(j+1)·(h/h_kv) − 1, so those are the heads whose keys and values to average."),
    ("first-head", dict(how="first"),
     "each new key/value head is the first head of its group, not the mean of the group. What does the "
     "exercise ask a new head to be?",
     "you kept the first head of each group. That is a valid conversion too, but it throws away what the "
     "other heads of the group learned; the exercise asks for the mean over the group."),
])

_NOT_A_LAYER = Mistake(
    "type",
    "return a new grouped-query layer (a MultiHeadAttention), got {got}.",
    more="build the new layer with the same d_model and h as mha and h_kv key/value heads, fill its weights, "
         "and return it; got {got}.")
_HEADS = Mistake(
    "heads",
    "the new layer must keep h = {h} query heads and have h_kv = {h_kv} key/value heads; yours has h = {got_h}, "
    "h_kv = {got_h_kv} (its fused weight has {rows} rows). How many key/value heads does the new layer get?",
    more="build the new layer with h_kv = {h_kv} (and h = {h}, d_model = {d}): its fused W_QKV then has "
         "(h + 2·h_kv)·d_head = {want_rows} rows.")
_BIAS = Mistake(
    "bias",
    "the new layer {what} biases, while the layer passed in {has}. Which of mha's options does the new layer "
    "take over?",
    more="give the new layer biases exactly when the layer passed in has them, then pool the biases of K and V "
         "as the weights and copy the others.")
_OPTIONS = Mistake(
    "options",
    "the new layer has rope = {got}, the layer passed in has rope = {want}: its outputs differ even with "
    "the right weights. Which of mha's options does the new layer take over?",
    more="build the new layer with the options of the layer passed in (its biases, its RoPE, its backend), so "
         "that only the number of key/value heads changes.")
_LAYER_DTYPE = Mistake(
    "dtype",
    "the new layer's parameters are {got}, the layer passed in is {want}. In which dtype is a newly built "
    "layer made?",
    more="a new layer is made in the default dtype (float32) on the CPU; move it to the dtype and device of "
         "the layer passed in (for example with .to on one of mha's weights) before filling it.")
_PART_Q = Mistake(
    "queries-changed",
    "the query rows of the fused weight (or their biases) are not mha's. Which part of the layer does "
    "grouping change, and which stays as it was?",
    more="W_Q keeps all h heads: its rows (the first d_model rows of W_QKV, and the first d_model biases) are "
         "copied unchanged; only the rows of K and V are pooled.")
_PART_O = Mistake(
    "W_O-not-copied",
    "the output projection W_O (or its bias) is not mha's. Did every part of the new layer get mha's "
    "numbers?",
    more="copy mha's W_O weight and bias into the new layer; a new layer starts with random ones.")
_PART_KV = Mistake(
    "kv-rows",
    "the rows of K or V in the fused weight are not the means of their groups. Which rows of W_QKV belong "
    "to key head k, and which to value head k?",
    more="W_QKV's rows are W_Q's d_model rows, then W_K's, then W_V's, each head owning d_head consecutive "
         "rows; the new K/V head j is the mean of the old heads j·(h/h_kv) … (j+1)·(h/h_kv) − 1, in W_K's "
         "rows and in W_V's.")
_BIASES = Mistake(
    "biases-not-copied",
    "the weights are right, but the biases of several parts are not mha's (nor their group means). Did the "
    "new layer get mha's biases, or keep the ones it was built with?",
    more="a new layer starts with random biases: copy W_Q's and W_O's biases from mha, and pool the biases of "
         "K and V over each group as the weights.")
_STALE = Mistake(
    "changed-after-built",
    "the new layer's own sizes (qkv_sizes {got}) do not fit its fused weight of {rows} rows: it was changed "
    "after it was built. Which argument, when a layer is built, sets its number of key/value heads?",
    more="a layer fixes its sizes (h_kv, qkv_sizes) when it is built; setting h_kv or W_QKV on a copy later "
         "leaves them describing the old layer. Build a new layer with h_kv key/value heads and copy the "
         "numbers into it.")
_PART_BIAS = Mistake(
    "kv-biases",
    "the weights are right, the biases of K or V are not. Are the biases grouped like the weights?",
    more="the biases of K and V belong to heads too (d_head numbers per head): pool them over each group "
         "exactly as the rows of the weights.")


def _structure(new, mha: MultiHeadAttention, h_kv: int) -> Verdict | None:
    """What is wrong with the new layer's type, head counts, options, dtype, device or ownership; else None."""
    if not isinstance(new, MultiHeadAttention):
        return named(_NOT_A_LAYER, got=type(new).__name__)
    want_rows = (mha.h + 2 * h_kv) * mha.d_head
    rows = new.W_QKV.weight.shape[0]
    if (new.h, new.h_kv, new.d_model, rows) != (mha.h, h_kv, mha.d_model, want_rows):
        return named(_HEADS, h=mha.h, h_kv=h_kv, got_h=new.h, got_h_kv=new.h_kv, rows=rows, d=mha.d_model,
                     want_rows=want_rows)
    if sum(new.qkv_sizes) != rows:
        return named(_STALE, got=tuple(new.qkv_sizes), rows=rows)
    has, got = mha.W_QKV.bias is not None, new.W_QKV.bias is not None
    if got != has or (new.W_O.bias is not None) != (mha.W_O.bias is not None):
        return named(_BIAS, what="has" if not has else "lacks", has="has none" if not has else "has them")
    if new.rope != mha.rope:
        return named(_OPTIONS, got=new.rope, want=mha.rope)
    p, q = next(new.parameters()), mha.W_O.weight
    if any(t.dtype != q.dtype or t.device != q.device for t in new.parameters()):
        return named(_LAYER_DTYPE, got=f"{p.dtype} on {p.device}", want=f"{q.dtype} on {q.device}")
    shared = shared_parameters(new, (mha,))
    return named(SHARED, name=shared[0].removeprefix("result.")) if shared else None


def _pool_diagnosis(verdict: Verdict, results) -> Verdict | None:
    """A wrong structure, or from the cached summaries the part of the layer that differs."""
    found = _returned(verdict, results)
    if found is not None or verdict.mistake != "values":
        return found
    for case, got, e in results.outputs():
        if e is not None or not isinstance(got, tuple):
            continue
        bad = {name for name, g, w in zip(_PARTS, got, _pooled_summary(*case))
               if (g is None) != (w is None) or (g is not None and not torch.allclose(g, w, atol=1e-5))}
        if not bad & {"W_Q", "W_K", "W_V", "W_O"} and len({n[-1] for n in bad if n[:2] == "b_"} - {"V"}) > 1:
            return named(_BIASES)
        for parts, m in (({"W_Q", "b_Q"}, _PART_Q), ({"W_O", "b_O"}, _PART_O), ({"W_K", "W_V"}, _PART_KV),
                         ({"b_K", "b_V"}, _PART_BIAS)):
            if parts & bad:
                return named(m)
        if bad:
            return None
    return None


_STRUCTURE_MISTAKES = [_NOT_A_LAYER, _HEADS, _STALE, _BIAS, _OPTIONS, _LAYER_DTYPE, _PART_Q, _PART_O, _PART_KV,
                       _PART_BIAS, _BIASES]


@checker(mistakes=[*_POOL_MISTAKES, *_STRUCTURE_MISTAKES])
def check_mean_pooled_kv(fn) -> Verdict:
    """``fn(mha, h_kv)`` → a new MultiHeadAttention with h_kv key/value heads, each its group's mean."""
    success = ("a new layer of its own, with mha's options and dtype: W_Q and W_O copied, and each key/value "
               "head the mean of its group of h / h_kv consecutive heads (biases too), the conversion used to "
               "start training a GQA model from an MHA one.")
    return judge(_judged(fn) if callable(fn) else fn, _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES,
                 success=success, diagnose=_pool_diagnosis)
