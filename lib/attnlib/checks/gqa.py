"""Exercise checkers for chapter 10 (grouped-query attention).

``check_gqa_attention(fn)``: ``fn(Q, K, V)`` with Q (B, h, T, d_head) and K, V (B, h_kv, T, d_head) must be causal
attention in which query head k reads key/value head k // (h / h_kv). One input has h_kv = 2 and h / h_kv = 3,
where tiling the heads (0, 1, 0, 1, …) instead of repeating each in place (0, 0, 1, 1, …) gives another result.
``check_gqa_cache_bytes(value)``: a prediction, the KV-cache bytes per token of the shape ``GQA_SHAPE``.
``check_mean_pooled_kv(fn)``: ``fn(mha, h_kv)`` must turn a ``MultiHeadAttention`` with h_kv = h into one with
h_kv key/value heads whose W_K and W_V rows (and biases) are the means of each group of h / h_kv heads.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention
from ..costs import kv_cache_bytes
from ..heads import KVCache, MultiHeadAttention, repeat_kv
from ..model import GPT
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_gqa_attention", "check_gqa_cache_bytes", "check_mean_pooled_kv", "GQA_SHAPE"]


# ------------------------------------------------------------------------------------- build: GQA attention
def _gqa_cases():
    """(Q, K, V) built fresh on every call: groups of 2 (h_kv = 2), groups of 3, and multi-query (h_kv = 1)."""
    cases = []
    for seed, (B, h, h_kv, T, d) in enumerate(((1, 4, 2, 5, 3), (2, 6, 2, 4, 4), (1, 3, 1, 6, 2))):
        g = _gen(100 + seed)
        Q = torch.randn(B, h, T, d, generator=g, dtype=torch.float64)
        K, V = (torch.randn(B, h_kv, T, d, generator=g, dtype=torch.float64) for _ in range(2))
        cases.append((Q, K, V))
    return cases


def _gqa_reference(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    return attention(Q, repeat_kv(K, n), repeat_kv(V, n), causal=True)


def _gqa_variant(Q, K, V, *, expand="in place", causal=True, values="V", queries="all"):
    """Grouped-query attention; every switch's default is right, any other value plants a mistake.

    ``expand``: K and V repeated "in place" (0, 0, 1, 1, …), "tiled" (0, 1, 0, 1, …) or "none". ``causal``: mask
    the future. ``values``: what the weights multiply, "V" or "K". ``queries``: keep "all" h query heads, or only
    the "first" or the "mean" of each group (then K and V stay as they are).
    """
    n = Q.shape[1] // K.shape[1]
    if queries != "all":
        B, h, T, d = Q.shape
        Q = Q[:, ::n] if queries == "first" else Q.reshape(B, h // n, n, T, d).mean(2)
    grow = {"in place": lambda t: repeat_kv(t, n), "tiled": lambda t: t.repeat(1, n, 1, 1), "none": lambda t: t}
    K, V = grow[expand](K), grow[expand](V)
    return attention(Q, K, V if values == "V" else K, causal=causal)


def _gqa_not_expanded_torch(Q, K, V):
    T = Q.shape[-2]
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])   # raises unless h_kv = 1 (then it broadcasts)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.softmax(S.masked_fill(future, float("-inf")), dim=-1) @ V


_NOT_EXPANDED = ("Q has h heads but K and V only h_kv: expand K and V to h heads first (each one repeated "
                 "h // h_kv times in place, `.repeat_interleave(h // h_kv, dim=1)`), then attend as usual.")

_GQA_MISTAKES = [
    Mistake("not-expanded", _NOT_EXPANDED, _gqa_not_expanded_torch),
    *variants(_gqa_variant, [
        ("not-expanded", dict(expand="none"), _NOT_EXPANDED),
        ("tiled", dict(expand="tiled"),
         "query head k read key/value head k mod h_kv: the heads were tiled 0, 1, 0, 1, … (`.repeat`, or Q "
         "grouped as (B, h/h_kv, h_kv, T, d)). The groups are consecutive query heads: heads 0 … h/h_kv − 1 "
         "share key/value head 0. Repeat each K and V head in place: `.repeat_interleave(h // h_kv, dim=1)`."),
        ("no-mask", dict(causal=False),
         "the output depends on future positions: every query head still needs the causal mask on its "
         "scores, before softmax."),
        ("weights-times-K", dict(values="K"),
         "the weights multiply K instead of V: expand V the same way as K and use it after softmax."),
        ("fewer-queries", dict(queries="first", expand="none"),
         "your result has h_kv heads: you kept one query per group. Every one of the h query heads keeps "
         "its own output; only K and V are shared. Expand K and V to h heads instead of shrinking Q."),
        ("mean-queries", dict(queries="mean", expand="none"),
         "your result has h_kv heads: you averaged the queries of each group. Every one of the h query "
         "heads keeps its own output; only K and V are shared. Expand K and V to h heads instead."),
    ]),
]


@checker
def check_gqa_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V)``: Q (B, h, T, d_head), K and V (B, h_kv, T, d_head) → causal output (B, h, T, d_head)."""
    return judge(fn, _gqa_cases(), _gqa_reference, _GQA_MISTAKES,
                 success="each key/value head serves its own group of consecutive query heads, as in the library.")


# --------------------------------------------------------------------------------- predict: cache bytes/token
GQA_SHAPE = {"L": 24, "d_model": 2048, "h": 16, "h_kv": 4, "bytes_per_number": 2}
"""The model whose KV cache per token the learner predicts: 24 layers, d_model 2048, 16 query heads, 4 key/value
heads, 16-bit numbers (bfloat16)."""


def _measured_bytes_per_token(L: int, d_model: int, h: int, h_kv: int, T: int = 3) -> int:
    """Bytes per token of the K and V that the library's GPT (bfloat16, a small stand-in) caches for T tokens."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(11, d_model, h, L, max_T=T, h_kv=h_kv).to(torch.bfloat16).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 11, (1, T), generator=_gen(0)), caches)
    return sum(c.K.nbytes + c.V.nbytes for c in caches) // T


@checker(kind="predict")
def check_gqa_cache_bytes(value) -> Verdict:
    """Check a predicted number of KV-cache bytes per token for a model of ``GQA_SHAPE``."""
    small = dict(L=2, d_model=32, h=8, h_kv=2)   # same group size h / h_kv = 4, measured in milliseconds
    measured = _measured_bytes_per_token(**small)
    formula = kv_cache_bytes(small["L"], small["h_kv"], small["d_model"] // small["h"])
    if measured != formula:
        return Verdict(False, f"the checker's formula disagrees with a measured cache ({measured} bytes per "
                              f"token at {small}); please report this.", "error")
    s = GQA_SHAPE
    d_head = s["d_model"] // s["h"]
    want = kv_cache_bytes(s["L"], s["h_kv"], d_head, bytes_per_number=s["bytes_per_number"])
    guesses = [
        Guess("h-not-h_kv",
              f"that is the cache of the same model with h = {s['h']} key/value heads (K and V d_model = "
              f"{s['d_model']} wide), multi-head attention. Only the h_kv = {s['h_kv']} key/value heads are "
              f"cached, h_kv · d_head = {s['h_kv'] * d_head} numbers each for K and V: the query heads keep nothing.",
              want * s["h"] // s["h_kv"]),
        Guess("half",
              "that is half: either only K is counted (V is cached too, a factor 2), or numbers are counted "
              "instead of bytes (a 16-bit number takes 2 bytes).", want / 2),
        Guess("float32", "that is twice too much: a 16-bit number takes 2 bytes, not 4.", want * 2),
        Guess("bits", "that is 8 times too much: you counted bits. A 16-bit number is 2 bytes.", want * 8),
        Guess("one-layer",
              f"that is one layer's cache. Each of the L = {s['L']} layers keeps its own K and V.", want / s["L"]),
    ]
    return judge_number(value, want, guesses, rtol=0.01,
                        success=f"2 (K and V) · L · h_kv · d_head · 2 bytes = 2 · {s['L']} · {s['h_kv']} · "
                                f"{d_head} · 2 = {want:,} bytes per token ({want // 1024} KiB), a quarter of "
                                f"what h = {s['h']} key/value heads would need. A small bfloat16 model of the "
                                f"library measures {measured:,} bytes per token, as the formula says.")


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


def _mean_pool_cases():
    """(mha, h_kv, x) built fresh: groups of 2 with biases, groups of 3 without, and multi-query (h_kv = 1)."""
    cases = []
    for seed, (d_model, h, h_kv, bias) in enumerate(((16, 4, 2, True), (24, 6, 2, False), (12, 3, 1, True))):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(200 + seed)
            mha = MultiHeadAttention(d_model, h, bias=bias)
        x = torch.randn(2, 5, d_model, generator=_gen(300 + seed))
        cases.append((mha, h_kv, x))
    return cases


def _summary(layer, x):
    """What a converted layer is judged by: its fused W_QKV (and bias), W_O, and its output on x."""
    with torch.no_grad():
        parts = [layer.W_QKV.weight, layer.W_O.weight, layer(x)]
        if layer.W_QKV.bias is not None:
            parts[1:1] = [layer.W_QKV.bias]
    return tuple(p.detach() for p in parts)


def _judged(convert):
    """convert(mha, h_kv) judged by its summary; anything that is not a layer is passed on as it is."""
    def summary(mha, h_kv, x):
        layer = convert(mha, h_kv)
        return _summary(layer, x) if isinstance(layer, MultiHeadAttention) else layer
    return summary


def _pooled_summary(mha, h_kv, x, *, how="mean"):
    """The summary of the conversion that pools each group ``how`` says: the reference, or a planted mistake."""
    return _summary(_pooled(mha, h_kv, how), x)


_POOL_MISTAKES = variants(_pooled_summary, [
    ("sum", dict(how="sum"),
     "your K and V heads are the sums of their groups, not the means: the scores of a group of n heads "
     "come out n times too large. Divide by the group size, h / h_kv."),
    ("strided-groups", dict(how="strided"),
     "you pooled heads j, j + h_kv, j + 2·h_kv, … together. The library's groups are consecutive: key/"
     "value head j serves query heads j·(h/h_kv) … (j+1)·(h/h_kv) − 1, so pool those."),
    ("first-head", dict(how="first"),
     "you kept the first head of each group instead of their mean. That is a valid conversion too, but "
     "it throws away what the other heads of the group had learned; the exercise asks for the mean."),
])


def _what_is_wrong(fn) -> Verdict | None:
    """A clearer verdict when ``fn`` returns something other than a layer with h query and h_kv K/V heads."""
    mha, h_kv, _ = _mean_pool_cases()[0]
    got = fn(mha, h_kv)         # an error here keeps judge's verdict, which has described it already
    if not isinstance(got, MultiHeadAttention):
        return Verdict(False, f"return a new MultiHeadAttention(d_model, h, h_kv=h_kv), got {type(got).__name__}.",
                       "type")
    if got.h_kv != h_kv or got.h != mha.h:
        return Verdict(False, f"the new layer must keep h = {mha.h} query heads and have h_kv = {h_kv} key/value "
                              f"heads, got h = {got.h}, h_kv = {got.h_kv}: build it with "
                              "MultiHeadAttention(d_model, h, h_kv=h_kv).", "heads")
    return None


@checker
def check_mean_pooled_kv(fn) -> Verdict:
    """Check ``fn(mha, h_kv)``: a MultiHeadAttention with h_kv key/value heads, each the mean of its group."""
    success = ("W_Q and W_O are copied, and each key/value head is the mean of its group of h / h_kv heads "
               "(biases too): the conversion used to start training a GQA model from an MHA one.")
    if not callable(fn):
        return judge(fn, _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES, success=success)
    return judge(_judged(fn), _mean_pool_cases(), _pooled_summary, _POOL_MISTAKES, success=success,
                 diagnose=lambda verdict: _what_is_wrong(fn) if verdict.mistake in ("type", "length", "shape")
                 else None)
