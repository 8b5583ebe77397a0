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
from . import _core
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_regrouped_heads", "check_gqa_cache_bytes", "check_mean_pooled_kv", "CACHE_QUESTION"]


# ----------------------------------------------------------------- build: a layer whose groups are strided
_REGROUP_SIZES = (   # d_model, h, h_kv, dtype
    (12, 6, 2, torch.float64),   # groups of 3: the order and its inverse differ
    (16, 8, 4, torch.float64),   # four groups of 2
    (8, 4, 1, torch.float32),    # multi-query: every order is right
)


def _regroup_cases():
    """(W_QKV, W_O, h, h_kv) in the book's orientation: W_QKV (d_model, d_model + 2·d_kv)."""
    cases = []
    for seed, (d_model, h, h_kv, dtype) in enumerate(_REGROUP_SIZES):
        g = _gen(110 + seed)
        W_QKV = torch.randn(d_model, d_model * (h + 2 * h_kv) // h, generator=g, dtype=dtype) / math.sqrt(d_model)
        W_O = torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model)
        cases.append((W_QKV, W_O, h, h_kv))
    return cases


def _grouped_output(W_QKV, W_O, h, h_kv, *, strided=False):
    """Causal GQA with these weights on a fixed X (2, 5, d_model): query head n reads K/V head n // (h/h_kv),
    or n mod h_kv when ``strided``."""
    d_model, d_kv = W_O.shape[1], (W_QKV.shape[1] - W_O.shape[1]) // 2
    X = torch.randn(2, 5, d_model, generator=_gen(120), dtype=torch.float64).to(W_QKV.dtype)
    Q, K, V = (X @ W_QKV).split([d_model, d_kv, d_kv], -1)
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
        want, kv = _strided_reference(W_QKV, W_O, h, h_kv), W_QKV[:, W_O.shape[0]:].clone()
        got = fn(W_QKV, W_O, h, h_kv)
        if got is None:
            return None
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)
                and [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in (W_QKV, W_O)]):
            shapes = f"{_core.describe(W_QKV)} and {_core.describe(W_O)}"
            return _Returned(named(_PAIR, shapes=shapes, got=_core.describe(got)))
        out = _grouped_output(*got, h, h_kv)
        moved = not torch.equal(got[0][:, W_O.shape[0]:], kv)   # wrong and K/V changed: a K/V head was moved
        return _Returned(named(_KV_MOVED)) if moved and not torch.allclose(out, want, atol=1e-5) else out
    return regrouped


def _regroup(W_QKV, W_O, h, h_kv, *, order="blocked", q=True, o=True, layout="heads"):
    """The weights reordered for the library's grouping; the other switches plant mistakes."""
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
     "your weights compute what they did before, read through the other grouping. Which query heads read K/V "
     "head 0 in the given layer, and which in the library's?",
     "with h = 6 and h_kv = 2 the given layer pairs query heads 0, 2, 4 with K/V head 0, the library heads "
     "0, 1, 2. The K/V heads cannot move; the query heads can, if W_O follows them."),
    ("inverse-order", dict(order="inverse"),
     "your order says where each old head goes, not which old head comes. Which old head must new head 1 be?",
     "new head g·(h / h_kv) + r is the r-th old query head reading K/V head g: with h = 6 and h_kv = 2, old heads "
     "0, 2, 4, then 1, 3, 5. Yours gives 0, 3, 1, 4, 2, 5."),
    ("W_O-not-reordered", dict(o=False),
     "the query heads were reordered, W_O was not. Which rows of W_O does each head's output meet?",
     "head n meets W_O's rows n·d_head … (n+1)·d_head − 1: when a head moves, its rows move with it."),
    ("W_Q-not-reordered", dict(q=False),
     "W_O's rows were reordered, the queries were not. Which columns of W_QKV make query head n?",
     "query head n is W_QKV's columns n·d_head … (n+1)·d_head − 1 (W_Q first): reorder them as W_O's rows."),
    ("W_O-columns", dict(o="o-columns"),
     "you reordered W_O's columns, the output features. Which axis of W_O meets the heads?",
     "out = concat(heads) · W_O, W_O (h·d_head, d_model): the heads meet its rows, in blocks of d_head."),
    ("head-layout", dict(layout="interleaved"),
     "you gave head n the columns n, n + h, n + 2h, …. Which columns of W_Q does one head own?",
     "split_heads gives head n the d_head consecutive columns n·d_head … (n+1)·d_head − 1: move whole blocks."),
])
# each judged, like the learner's, by what the library's grouping computes with the weights it returns
_REGROUP_MISTAKES = [Mistake(m.label, m.hint, _through_layer(m.wrong), m.more) for m in _REGROUP_PLANTED]

_KV_MOVED = Mistake(
    "kv-moved", "your weights change the columns of K or V. Each K/V head serves a whole group: which heads can "
    "move without changing what another head reads?",
    more="the K/V heads stay where they are, W_QKV's last 2·d_kv columns unchanged; only the query heads (W_Q's "
         "column blocks) move, and W_O's row blocks with them.")
_PAIR = Mistake(
    "pair", "return the pair (W_QKV, W_O): two tensors of the inputs' shapes and dtype, {shapes}; got {got}. Does "
    "moving the query heads change any shape or dtype?",
    more="reordering the query heads changes no shape or dtype: return (W_QKV, W_O), {shapes}; got {got}.")


@checker(mistakes=[*_REGROUP_MISTAKES, _PAIR, _KV_MOVED])
def check_regrouped_heads(fn) -> Verdict:
    """``fn(W_QKV, W_O, h, h_kv)`` → (W_QKV, W_O) regrouped for the library's grouping of query heads."""
    return judge(_through_layer(fn) if callable(fn) else fn, _regroup_cases(), _strided_reference,
                 _REGROUP_MISTAKES, diagnose=_returned,
                 success="with your weights the library's grouping computes what the strided layer computed: for "
                         "groups of three and of two query heads and for one key/value head, K and V untouched.")


# --------------------------------------------------------------------------------- predict: cache bytes/token
CACHE_QUESTION = {"L": 24, "W_QKV": (3072, 2048), "W_O": (2048, 2048), "d_head": 128, "bytes_per_number": 4}
"""A checkpoint described by its weights: 24 blocks, each with a fused W_QKV.weight of shape (3072, 2048) and a
W_O.weight of (2048, 2048), heads of 128, the cache kept in float32. Hidden in the shapes: d_model = 2048, h = 16
query heads and h_kv = 4 key/value heads."""

_L, _B = CACHE_QUESTION["L"], CACHE_QUESTION["bytes_per_number"]
_ROWS, _D = CACHE_QUESTION["W_QKV"][0], CACHE_QUESTION["W_O"][0]
_KV = _ROWS - _D                                           # the K and V rows of one layer
_CACHE_WANT = _KV * _L * _B

_CACHE_GUESSES = [
    Guess("with-queries", "too high: your count keeps every row of W_QKV's output. Which of Q, K and V does a "
          "cache keep?", _ROWS * _L * _B,
          more="only K and V are cached; a query is used by its own position only, so W_Q's rows make no cache."),
    Guess("as-if-mha", "too high: that caches K and V as wide as the queries. How wide are they here?",
          2 * _D * _L * _B,
          more="W_QKV holds W_Q first (d_model rows), then W_K and W_V, narrower here; the cache keeps those."),
    Guess("numbers", "too low, by the size of one number: did you count numbers or bytes?", _KV * _L,
          more="the cache is kept in float32: every number takes 4 bytes."),
    Guess("half", "too low by a factor of 2: which tensors does each layer cache per token, at how many bytes?",
          _KV // 2 * _L * _B,
          more="each layer keeps a K row and a V row per token, of equal width, in float32: 4 bytes a number."),
    Guess("kv-twice", "too high by a factor of 2: the rows after W_Q's hold K and V together. How wide is K?",
          2 * _KV * _L * _B, more="the rows after W_Q's are 2 · d_kv, and the cache keeps exactly those."),
    Guess("kib", "too low: that is the answer in KiB. How many bytes are in a KiB?", _CACHE_WANT // 1024,
          more="1 KiB is 1024 bytes; give the count of bytes itself."),
    Guess("one-layer", "too low: that is the cache of one block. How many blocks keep a cache?", _KV * _B,
          more=f"each of the L = {_L} blocks keeps its own K and V for every token."),
    Guess("one-layer-numbers", "too low: that counts the numbers of one block. Which two things are left out?",
          _KV, more=f"each of the L = {_L} blocks keeps its own K and V, and a float32 number takes 4 bytes."),
    Guess("bits", "too high by a factor of 8: did you count bits instead of bytes?", _KV * _L * _B * 8,
          more="a float32 number is 32 bits, which is 4 bytes."),
]


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
    d_head, n = W.shape[0] // h, h // h_kv
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
            K, V = (_pool_rows(t, h, h_kv, how=how) for t in (W[d:2 * d], W[2 * d:]))
            getattr(out.W_QKV, name).copy_(torch.cat([W[:d], K, V]))
            getattr(out.W_O, name).copy_(getattr(mha.W_O, name))
    return out


_POOL_SIZES = (   # d_model, h, h_kv, bias, rope, dtype
    (16, 4, 2, True, False, torch.float32),    # groups of 2, with biases
    (24, 6, 2, False, True, torch.float32),    # groups of 3, no biases, RoPE
    (12, 3, 1, True, False, torch.float64),    # multi-query, float64
)


def _mean_pool_cases():
    """(mha, h_kv, x) built fresh; ``x`` is what the converted layer's output is judged on."""
    cases = []
    for seed, (d_model, h, h_kv, bias, rope, dtype) in enumerate(_POOL_SIZES):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(200 + seed)
            mha = MultiHeadAttention(d_model, h, bias=bias, rope=rope).to(dtype)
        cases.append((mha, h_kv, torch.randn(2, 5, d_model, generator=_gen(300 + seed), dtype=dtype)))
    return cases


_PARTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "output")


def _summary(layer: MultiHeadAttention, x: torch.Tensor) -> tuple:
    """A layer's W_Q, W_K, W_V, W_O rows, their biases (None without) and its output on x, as _PARTS."""
    q, k, _ = layer.qkv_sizes
    with torch.no_grad():
        parts = []
        for W, O in ((layer.W_QKV.weight, layer.W_O.weight), (layer.W_QKV.bias, layer.W_O.bias)):
            parts += [None] * 3 if W is None else [W[:q].detach(), W[q:q + k].detach(), W[q + k:].detach()]
            parts.append(None if O is None else O.detach())
        return (*parts, layer(x).detach())


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
    return _summary(_pooled(mha, h_kv, how), x)


_POOL_MISTAKES = variants(_pooled_summary, [("sum", dict(how="sum"),
     "your key and value heads are h / h_kv times too large. Is a new head the sum of its group or its mean?",
     "you summed the heads of each group; the exercise asks for the mean: divide by the group size h / h_kv."),
    ("strided-groups", dict(how="strided"),
     "you pooled heads h_kv apart (j, j + h_kv, …). Which query heads share K/V head j in the library's layer?",
     "the library's groups are consecutive: K/V head j serves query heads j·(h/h_kv) … (j+1)·(h/h_kv) − 1."),
    ("first-head", dict(how="first"),
     "each new key/value head is the first head of its group. What does the exercise ask a new head to be?",
     "a valid conversion too, but it throws away what the other heads learned; the exercise asks for the mean."),
])

# Found by _structure and _pool_diagnosis, not by a planted function: (label, hint, more).
_STRUCTURE_MISTAKES = [Mistake(label, hint, more=more) for label, hint, more in [
    ("type", "return a new grouped-query layer (a MultiHeadAttention), got {got}.",
     "build a layer with mha's d_model and h and h_kv key/value heads, fill its weights, return it; got {got}."),
    ("heads", "the new layer must keep h = {h} query heads and have h_kv = {h_kv} key/value heads; yours has h = "
     "{got_h}, h_kv = {got_h_kv} (its fused weight has {rows} rows). How many key/value heads does it get?",
     "build the new layer with h_kv = {h_kv} (and h = {h}, d_model = {d}): its fused W_QKV then has "
     "(h + 2·h_kv)·d_head = {want_rows} rows."),
    ("changed-after-built", "the new layer's own sizes (qkv_sizes {got}) do not fit its fused weight of {rows} "
     "rows: it was changed after it was built. Which argument sets a layer's number of key/value heads?",
     "a layer fixes h_kv and qkv_sizes when it is built; setting them on a copy later leaves them stale. Build a "
     "new layer with h_kv key/value heads and copy the numbers into it."),
    ("bias", "the new layer {what} biases, while the layer passed in {has}. Which of mha's options does it take over?",
     "give the new layer biases exactly when mha has them; pool K's and V's biases as the weights, copy the rest."),
    ("options", "the new layer has rope = {got}, the layer passed in rope = {want}: its outputs differ even with "
     "the right weights. Which of mha's options does it take over?",
     "build the new layer with mha's options (biases, RoPE, backend): only the number of K/V heads changes."),
    ("dtype", "the new layer's parameters are {got}, the layer passed in is {want}. In which dtype is a new layer "
     "made?", "a new layer is float32 on the CPU; move it to mha's dtype and device (.to on one of mha's weights) "
     "before filling it."),
    ("queries-changed", "the query rows of the fused weight (or their biases) are not mha's. Which part does "
     "grouping change?", "W_Q keeps all h heads: the first d_model rows of W_QKV (and biases) are copied; only K "
     "and V are pooled."),
    ("W_O-not-copied", "the output projection W_O (or its bias) is not mha's. Did every part get mha's numbers?",
     "copy mha's W_O weight and bias into the new layer; a new layer starts with random ones."),
    ("kv-rows", "the rows of K or V in the fused weight are not their groups' means. Which rows belong to key "
     "head k, and which to value head k?",
     "W_QKV's rows are W_Q's d_model rows, then W_K's, then W_V's, d_head per head; new K/V head j is the mean "
     "of old heads j·(h/h_kv) … (j+1)·(h/h_kv) − 1, in W_K's rows and in W_V's."),
    ("kv-biases", "the weights are right, the biases of K or V are not. Are the biases grouped like the weights?",
     "K's and V's biases belong to heads too (d_head numbers each): pool them over each group as the weights."),
    ("biases-not-copied", "the weights are right, but the biases of several parts are not mha's (nor their group "
     "means). Did the new layer keep the biases it was built with?",
     "a new layer starts with random biases: copy W_Q's and W_O's from mha, and pool K's and V's over each group "
     "as the weights."),
]]
_NOT_A_LAYER, _HEADS, _STALE, _BIAS, _OPTIONS, _LAYER_DTYPE, _PART_Q, _PART_O, _PART_KV, _PART_BIAS, _BIASES = \
    _STRUCTURE_MISTAKES


def _structure(new, mha: MultiHeadAttention, h_kv: int) -> Verdict | None:
    """What is wrong with the new layer's type, head counts, options, dtype, device or ownership; else None."""
    if not isinstance(new, MultiHeadAttention):
        return named(_NOT_A_LAYER, got=type(new).__name__)
    want_rows, rows = (mha.h + 2 * h_kv) * mha.d_head, new.W_QKV.weight.shape[0]
    if (new.h, new.h_kv, new.d_model, rows) != (mha.h, h_kv, mha.d_model, want_rows):
        return named(_HEADS, h=mha.h, h_kv=h_kv, got_h=new.h, got_h_kv=new.h_kv, rows=rows, d=mha.d_model,
                     want_rows=want_rows)
    if sum(new.qkv_sizes) != rows:
        return named(_STALE, got=tuple(new.qkv_sizes), rows=rows)
    has = mha.W_QKV.bias is not None
    if (new.W_QKV.bias is not None) != has or (new.W_O.bias is not None) != (mha.W_O.bias is not None):
        return named(_BIAS, what="lacks" if has else "has", has="has them" if has else "has none")
    if new.rope != mha.rope:
        return named(_OPTIONS, got=new.rope, want=mha.rope)
    p, q = next(new.parameters()), mha.W_O.weight
    if any(t.dtype != q.dtype or t.device != q.device for t in new.parameters()):
        return named(_LAYER_DTYPE, got=f"{p.dtype} on {p.device}", want=f"{q.dtype} on {q.device}")
    shared = _core.shared_parameters(new, (mha,))
    return named(_core.SHARED, name=shared[0].removeprefix("result.")) if shared else None


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


@checker(mistakes=[*_POOL_MISTAKES, *_STRUCTURE_MISTAKES])
def check_mean_pooled_kv(fn) -> Verdict:
    """``fn(mha, h_kv)`` → a new MultiHeadAttention with h_kv key/value heads, each its group's mean."""
    return judge(_judged(fn) if callable(fn) else fn, _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES,
                 diagnose=_pool_diagnosis,
                 success="a new layer of its own, with mha's options and dtype: W_Q and W_O copied, and each "
                         "key/value head the mean of its group of h / h_kv consecutive heads (biases too), the "
                         "conversion used to start training a GQA model from an MHA one.")
