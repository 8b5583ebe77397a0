"""Exercise checkers for chapter 10 (grouped-query attention).

``check_gqa_attention(fn)``: ``fn(Q, K, V)`` with Q (..., h, T_q, d_k), K (..., h_kv, T_k, d_k) and
V (..., h_kv, T_k, d_v), T_k ≥ T_q, must be causal attention in which query head k reads key/value head
k // (h / h_kv), the queries being the last T_q of the T_k positions (a step of generation with a cache):
→ (..., h, T_q, d_v) in Q's dtype. The inputs have groups of three heads (where tiling the heads 0, 1, 0, 1, …
instead of repeating each in place gives another result), cache offsets, d_v ≠ d_k, two batch axes, one new
query against a multi-query cache, and a bfloat16 cache.
``check_gqa_cache_bytes(value)``: a prediction, the KV-cache bytes per token of the checkpoint that
``CACHE_QUESTION`` describes by its weight shapes.
``check_mean_pooled_kv(fn)``: ``fn(mha, h_kv)`` must turn a ``MultiHeadAttention`` with h_kv = h into a new one,
with mha's options and dtype, h query heads and h_kv key/value heads whose W_K and W_V rows (and biases) are
the means of each group of h / h_kv consecutive heads, W_Q and W_O copied.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..attention import attention
from ..costs import kv_cache_bytes
from ..heads import KVCache, MultiHeadAttention
from ..model import GPT
from ._core import (
    SHARED,
    Group,
    Guess,
    Mistake,
    Verdict,
    _gen,
    checker,
    judge,
    judge_number,
    named,
    shared_parameters,
    variants,
)

__all__ = ["check_gqa_attention", "check_gqa_cache_bytes", "check_mean_pooled_kv", "CACHE_QUESTION"]

f64 = torch.float64


# ------------------------------------------------------------------------------------- build: GQA attention
_GQA_SIZES = (   # batch axes, h, h_kv, T_q, T_k, d_k, d_v, dtype
    ((2,), 6, 2, 3, 7, 4, 5, f64),            # groups of 3, 3 new queries after 4 cached, d_v ≠ d_k
    ((1,), 4, 2, 5, 5, 3, 3, f64),            # no cache: T_q = T_k
    ((2, 3), 4, 2, 2, 6, 3, 2, f64),          # two batch axes (a batch of beams)
    ((1,), 3, 1, 1, 6, 4, 4, f64),            # multi-query, one new token
    ((1,), 4, 2, 3, 8, 8, 8, torch.bfloat16),  # a bfloat16 cache
)


def _gqa_cases():
    """(Q, K, V) built fresh on every call, in two groups: float64 (tight) and bfloat16 (its own tolerance)."""
    tight, loose = [], []
    for seed, (batch, h, h_kv, T_q, T_k, d_k, d_v, dtype) in enumerate(_GQA_SIZES):
        g = _gen(100 + seed)
        Q = torch.randn(*batch, h, T_q, d_k, generator=g, dtype=f64)
        K = torch.randn(*batch, h_kv, T_k, d_k, generator=g, dtype=f64)
        V = torch.randn(*batch, h_kv, T_k, d_v, generator=g, dtype=f64)
        (tight if dtype == f64 else loose).append(tuple(t.to(dtype) for t in (Q, K, V)))
    return [Group(tight, 1e-6), Group(loose, 3e-2)]


def _gqa_variant(Q, K, V, *, expand="in place", mask="cache", values="V", queries="all", scale="d_k"):
    """Grouped-query attention, computed in float64 and returned in Q's dtype; every switch's default is right.

    ``expand``: K and V repeated "in place" (0, 0, 1, 1, …), "tiled" (0, 1, 0, 1, …) or "none". ``mask``: the
    queries the last T_q positions ("cache"), the first ("top-left"), "none", or the diagonal one step off
    ("self-blocked": a query may not read its own key; "one-ahead": it may read the next). ``values``: what
    the weights multiply, "V" or "K". ``queries``: keep "all" h query heads, or only the "first" or the "mean"
    of each group. ``scale``: divide by √d_k or √"d_v".
    """
    dtype = Q.dtype
    Q, K, V = Q.double(), K.double(), V.double()
    n = Q.shape[-3] // K.shape[-3]
    if queries != "all":
        *batch, h, T, d = Q.shape
        Q = Q[..., ::n, :, :] if queries == "first" else Q.reshape(*batch, h // n, n, T, d).mean(-3)
    grow = {"in place": lambda t: t.repeat_interleave(n, dim=-3),
            "tiled": lambda t: torch.cat([t] * n, dim=-3), "none": lambda t: t}[expand]
    K, V = grow(K), grow(V)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    S = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1] if scale == "d_k" else V.shape[-1])
    first = {"cache": 1 + T_k - T_q, "top-left": 1, "self-blocked": T_k - T_q, "one-ahead": 2 + T_k - T_q}
    if mask != "none":
        S = S.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(first[mask]), -math.inf)
    return (torch.softmax(S, dim=-1) @ (V if values == "V" else K)).to(dtype)


def _gqa_reference(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    out = attention(Q.double(), K.double().repeat_interleave(n, dim=-3), V.double().repeat_interleave(n, dim=-3))
    return out.to(Q.dtype)


def _gqa_sdpa_not_expanded(Q, K, V):
    """SDPA without enable_gqa: raises when h_kv > 1 (its own message)."""
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


# Found by the diagnosis, not by a planted function: a planted function that raises on some inputs and is
# right on all the others would match any answer with the right values (a case on which a planted mistake
# raises is skipped), so these two are recognised from what the learner's function does on which inputs.
_MIXED = Mistake(
    "mixed-dtypes",
    "your function fails on the bfloat16 cache and only there: two tensors of different dtypes meet. Which "
    "tensor of yours is made in float32, whatever the dtype of the inputs?",
    more="a tensor made without a dtype (a mask, a constant table) is float32; added to bfloat16 scores it "
         "turns them into float32, which then cannot be multiplied by the bfloat16 V. Make it in the dtype "
         "of Q.")
_HEAD_AXIS = Mistake(
    "head-axis",
    "right with one batch axis, wrong with two (a batch of prompts, each with several beams): which axis "
    "holds the heads when more batch axes come in front of them?",
    more="the heads are the third axis from the end, whatever the number of batch axes: count them from the "
         "end (−3), not from the start.")

_NOT_EXPANDED = (
    "Q has h heads but K and V only h_kv, and the two head axes do not match. Which key/value head should "
    "each query head read, and how do you give every query head its own?",
    "expand K and V to h heads first, each key/value head repeated h / h_kv times in a row, so that query "
    "heads j·(h/h_kv) … (j+1)·(h/h_kv) − 1 read head j; then attend as usual.")

_GQA_MISTAKES = [
    Mistake("not-expanded", *_NOT_EXPANDED[:1], _gqa_sdpa_not_expanded, more=_NOT_EXPANDED[1]),
    *variants(_gqa_variant, [
        ("not-expanded", dict(expand="none"), *_NOT_EXPANDED),
        ("tiled", dict(expand="tiled"),
         "with groups of three heads (h = 6, h_kv = 2), query head 1 read key/value head 1. Which query heads "
         "form group 0, the one that shares key/value head 0?",
         "the heads were tiled 0, 1, 0, 1, … (as repeat does, or Q grouped as (…, h/h_kv, h_kv, …)). The groups "
         "are consecutive query heads: heads 0 … h/h_kv − 1 share key/value head 0. Repeat each key/value head "
         "in place instead, as repeat_kv does."),
        ("no-mask", dict(mask="none"),
         "the output depends on positions in the future of the queries: does every query head still have a "
         "causal mask on its scores, before softmax?",
         "add the causal mask to the scores of every query head before softmax: −∞ on the keys that lie after "
         "a query's position."),
        ("top-left", dict(mask="top-left"),
         "right when T_q = T_k, wrong with a cache: your mask lets query i read only keys 0 … i, as if the new "
         "queries were the first T_q positions. Which keys may the last new query read?",
         "the new queries are the last T_q of the T_k positions: query i sits at position i + T_k − T_q and "
         "reads every key up to that one. A square mask on the first T_q positions, or SDPA's is_causal with "
         "T_q ≠ T_k (it aligns the mask to the top left), cuts off the cache."),
        ("self-blocked", dict(mask="self-blocked"),
         "your mask is one diagonal off: a query may not read its own position. Which key is the last one a "
         "query may read?",
         "the mask must block only the keys after a query's own position: query i (at position i + T_k − T_q) "
         "reads its own key too. Yours blocks one key too many."),
        ("one-ahead", dict(mask="one-ahead"),
         "your mask is one diagonal off: every query reads one key of its future. Which key is the last one a "
         "query may read?",
         "the mask must block every key after a query's own position, i + T_k − T_q for query i. Yours lets "
         "each query read the next position as well."),
        ("weights-times-K", dict(values="K"),
         "the weights multiply K instead of V: with d_v ≠ d_k the result even has K's width. What do the "
         "weights average?",
         "the weights average the rows of V: expand V the same way as K and multiply the weights by it."),
        ("scale-d_v", dict(scale="d_v"),
         "right when d_k = d_v, wrong when they differ: the scores are scaled by the wrong width. Which size "
         "does the dot product of a query and a key add up over?",
         "the scores are divided by √d_k, the width of Q and K, not by √d_v."),
        ("fewer-queries", dict(queries="first", expand="none"),
         "your result has h_kv heads: you kept one query head per group. Does a query head lose its own "
         "output when it shares its key and value with others?",
         "every one of the h query heads keeps its own output; only K and V are shared. Expand K and V to h "
         "heads instead of shrinking Q."),
        ("mean-queries", dict(queries="mean", expand="none"),
         "your result has h_kv heads: you averaged the queries of each group. Does a query head lose its own "
         "output when it shares its key and value with others?",
         "every one of the h query heads keeps its own output; only K and V are shared. Expand K and V to h "
         "heads instead of averaging Q."),
    ]),
]


def _right(out, case, atol) -> bool:
    want = _gqa_reference(*case)
    return isinstance(out, torch.Tensor) and out.shape == want.shape and \
        torch.allclose(out.detach().double(), want.double(), atol=atol)


def _gqa_diagnosis(verdict: Verdict, results) -> Verdict | None:
    """Right on every float64 input but raising on the bfloat16 one: tensors of two dtypes met. Right on every
    input with one batch axis but not on the one with two: the heads were looked for on the second axis
    (whatever error or value that gave). Read from the cached results."""
    if verdict.mistake in ("in-place", "stub", "none", "not-callable", "dtype", "device"):
        return None
    outs = {id(case): (got, e) for case, got, e in results.outputs()}
    cases = [case for case, _ in results.cases]
    tight, loose = cases[:len(_gqa_cases()[0].cases)], cases[len(_gqa_cases()[0].cases):]

    def right(case, atol) -> bool:
        got, e = outs[id(case)]
        return e is None and _right(got, case, atol)

    if all(right(c, 1e-6) for c in tight) and any(outs[id(c)][1] is not None for c in loose):
        return named(_MIXED)
    one_axis = [c for c in tight + loose if c[0].dim() == 4]
    two_axes = [c for c in tight if c[0].dim() == 5]
    if all(right(c, 3e-2) for c in one_axis) and not all(right(c, 1e-6) for c in two_axes):
        return named(_HEAD_AXIS)
    return None


@checker(mistakes=[*_GQA_MISTAKES, _HEAD_AXIS, _MIXED])
def check_gqa_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V)``: Q (..., h, T_q, d_k), K (..., h_kv, T_k, d_k), V (..., h_kv, T_k, d_v) → causal
    output (..., h, T_q, d_v), the queries the last T_q positions."""
    return judge(fn, _gqa_cases(), _gqa_reference, _GQA_MISTAKES, diagnose=_gqa_diagnosis,
                 success="each key/value head serves its own group of consecutive query heads, the new queries "
                         "read the whole cache up to themselves, with two batch axes and in bfloat16.")


# --------------------------------------------------------------------------------- predict: cache bytes/token
CACHE_QUESTION = {"L": 24, "W_QKV": (3072, 2048), "W_O": (2048, 2048), "d_head": 128, "bytes_per_number": 4}
"""A checkpoint described by its weights: 24 blocks, each with a fused W_QKV.weight of shape (3072, 2048) and a
W_O.weight of (2048, 2048), heads of 128, the cache kept in float32. Hidden in the shapes: d_model = 2048, h = 16
query heads and h_kv = 4 key/value heads."""


def _question_layer() -> MultiHeadAttention:
    """The attention layer of ``CACHE_QUESTION``, built on the meta device (shapes only): h = 16, h_kv = 4."""
    with torch.device("meta"):
        return MultiHeadAttention(2048, 16, h_kv=4, bias=False)


def _measured_bytes_per_token(L: int, d_model: int, h: int, h_kv: int, T: int = 3) -> int:
    """Bytes per token of the K and V that the library's GPT (float32, a small stand-in) caches for T tokens."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(11, d_model, h, L, max_T=T, h_kv=h_kv).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 11, (1, T), generator=_gen(0)), caches)
    return sum(c.K.nbytes + c.V.nbytes for c in caches) // T


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
        Guess("K-only",
              "too low by a factor of 2: which tensors does each layer cache for every token?",
              kv // 2 * L * b,
              more="each layer keeps a K row and a V row for every token, both of the same width."),
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
    small = dict(L=2, d_model=32, h=8, h_kv=2)   # the same group size h / h_kv = 4, measured in milliseconds
    measured = _measured_bytes_per_token(**small)
    formula = kv_cache_bytes(small["L"], small["h_kv"], small["d_model"] // small["h"], bytes_per_number=4)
    layer = _question_layer()
    s = CACHE_QUESTION
    want = kv_cache_bytes(s["L"], layer.h_kv, layer.d_head, bytes_per_number=s["bytes_per_number"])
    if measured != formula or tuple(layer.W_QKV.weight.shape) != s["W_QKV"] or want != _CACHE_WANT:
        raise AssertionError(f"the checker's formula disagrees with a measured cache ({measured} bytes per "
                             f"token at {small}) or with the question's layer; please report this.")
    return judge_number(value, want, _CACHE_GUESSES, rtol=0.01,
                        success=f"W_QKV's 3072 rows are W_Q's 2048 (d_model, from W_O) and 1024 for K and V, "
                                f"so h_kv = 1024 / (2 · 128) = 4 key/value heads for 16 query heads. Every token "
                                f"adds those 1024 numbers to each of the 24 blocks, at 4 bytes: {want:,} bytes "
                                f"({want // 1024} KiB), a quarter of what 16 key/value heads would need. A small "
                                f"float32 model of the library measures {measured:,} bytes per token, as the "
                                f"formula says.")


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
    """What a converted layer is judged by: the rows of W_Q, W_K, W_V, then W_O, their biases (None without),
    and its output on x."""
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
    """convert(mha, h_kv) judged by its summary (its structure was checked before)."""
    def summary(mha, h_kv, x):
        layer = convert(mha, h_kv)
        return None if layer is None else _summary(layer, x)
    return summary


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
_PART_BIAS = Mistake(
    "kv-biases",
    "the weights are right, the biases of K or V are not. Are the biases grouped like the weights?",
    more="the biases of K and V belong to heads too (d_head numbers per head): pool them over each group "
         "exactly as the rows of the weights.")


def _structure(fn) -> Verdict | None:
    """The new layer's type, head counts, options, dtype and device, and whether its parameters are its own,
    on every case; None when they are right (or when fn fails, which judge then describes)."""
    for mha, h_kv, _ in _mean_pool_cases():
        try:
            new = fn(mha, h_kv)
        except Exception:  # noqa: BLE001 - judge names the error
            return None
        if new is None:
            return None
        if not isinstance(new, MultiHeadAttention):
            return named(_NOT_A_LAYER, got=type(new).__name__)
        want_rows = (mha.h + 2 * h_kv) * mha.d_head
        rows = new.W_QKV.weight.shape[0]
        if (new.h, new.h_kv, new.d_model, rows) != (mha.h, h_kv, mha.d_model, want_rows):
            return named(_HEADS, h=mha.h, h_kv=h_kv, got_h=new.h, got_h_kv=new.h_kv, rows=rows, d=mha.d_model,
                         want_rows=want_rows)
        has, got = mha.W_QKV.bias is not None, new.W_QKV.bias is not None
        if got != has or (new.W_O.bias is not None) != (mha.W_O.bias is not None):
            return named(_BIAS, what="has" if not has else "lacks", has="has none" if not has else "has them")
        if new.rope != mha.rope:
            return named(_OPTIONS, got=new.rope, want=mha.rope)
        p, q = next(new.parameters()), mha.W_O.weight
        if any(t.dtype != q.dtype or t.device != q.device for t in new.parameters()):
            return named(_LAYER_DTYPE, got=f"{p.dtype} on {p.device}", want=f"{q.dtype} on {q.device}")
        shared = shared_parameters(new, (mha,))
        if shared:
            return named(SHARED, name=shared[0].removeprefix("result."))
    return None


def _part_diagnosis(fn):
    """Which part of the new layer differs (W_Q, K/V rows, W_O, biases) when no planted mistake matches."""
    def diagnose(verdict: Verdict) -> Verdict | None:
        if verdict.mistake != "values":
            return None
        for case in _mean_pool_cases():
            got, want = _judged(fn)(*case), _pooled_summary(*case)
            bad = [name for name, g, w in zip(_PARTS, got, want)
                   if (g is None) != (w is None) or (g is not None and not torch.allclose(g, w, atol=1e-5))]
            if not bad:
                continue
            if {"W_Q", "b_Q"} & set(bad):
                return named(_PART_Q)
            if {"W_O", "b_O"} & set(bad):
                return named(_PART_O)
            if {"W_K", "W_V"} & set(bad):
                return named(_PART_KV)
            if {"b_K", "b_V"} & set(bad):
                return named(_PART_BIAS)
            return None
        return None
    return diagnose


_STRUCTURE_MISTAKES = [_NOT_A_LAYER, _HEADS, _BIAS, _OPTIONS, _LAYER_DTYPE, _PART_Q, _PART_O, _PART_KV, _PART_BIAS]


@checker(mistakes=[*_POOL_MISTAKES, *_STRUCTURE_MISTAKES])
def check_mean_pooled_kv(fn) -> Verdict:
    """Check ``fn(mha, h_kv)``: a new MultiHeadAttention with h_kv key/value heads, each the mean of its group,
    mha's options and dtype, and parameters of its own."""
    success = ("a new layer of its own, with mha's options and dtype: W_Q and W_O copied, and each key/value "
               "head the mean of its group of h / h_kv consecutive heads (biases too), the conversion used to "
               "start training a GQA model from an MHA one.")
    if not callable(fn):
        return judge(fn, _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES, success=success)
    return _structure(fn) or judge(_judged(fn), _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES,
                                   success=success, diagnose=_part_diagnosis(fn))
