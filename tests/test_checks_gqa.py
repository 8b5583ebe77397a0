"""The chapter 10 checkers accept the solutions and name every planted mistake (written here independently)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlib import MultiHeadAttention
from attnlib.checks.gqa import GQA_SHAPE, check_gqa_attention, check_gqa_cache_bytes, check_mean_pooled_kv
from conftest import assert_accepted, assert_mistakes_distinct, assert_named, stub

# ------------------------------------------------------------------------------------------ GQA attention


def _causal(Q, K, V):
    T = Q.shape[-2]
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    S = S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def gqa_solution(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    return _causal(Q, K.repeat_interleave(n, dim=1), V.repeat_interleave(n, dim=1))


def gqa_torch(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)


def gqa_tiled(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    return _causal(Q, torch.cat([K] * n, dim=1), torch.cat([V] * n, dim=1))


def gqa_Q_grouped_strided(Q, K, V):
    B, h, T, d = Q.shape
    h_kv = K.shape[1]
    out = _causal(Q.reshape(B, h // h_kv, h_kv, T, d), K[:, None], V[:, None])
    return out.reshape(B, h, T, d)


def gqa_no_mask(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    K, V = K.repeat_interleave(n, dim=1), V.repeat_interleave(n, dim=1)
    return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V


def gqa_times_K(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    K = K.repeat_interleave(n, dim=1)
    return _causal(Q, K, K)


def gqa_not_expanded(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


def gqa_one_query_per_group(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    return _causal(Q[:, ::n], K, V)


def gqa_mean_queries(Q, K, V):
    B, h, T, d = Q.shape
    return _causal(Q.reshape(B, K.shape[1], -1, T, d).mean(2), K, V)


def test_gqa_solutions_are_accepted():
    for fn in (gqa_solution, gqa_torch):
        v = check_gqa_attention(fn)
        assert v.ok, v


def test_gqa_mistakes_are_named():
    for fn, label in ((gqa_tiled, "tiled"), (gqa_Q_grouped_strided, "tiled"), (gqa_no_mask, "no-mask"),
                      (gqa_times_K, "weights-times-K"), (gqa_not_expanded, "not-expanded"),
                      (gqa_one_query_per_group, "fewer-queries"), (gqa_mean_queries, "mean-queries"),
                      (stub, "stub")):
        v = check_gqa_attention(fn)
        assert_named(v, label)


def test_gqa_checker_does_not_raise_on_garbage():
    for fn in (lambda Q, K, V: None, lambda Q, K, V: 1 / 0, lambda Q, K, V: Q, 3):
        v = check_gqa_attention(fn)
        assert not v.ok and str(v).startswith("✗ not yet: ")


# ---------------------------------------------------------------------------------- predict: cache bytes


def test_cache_bytes_prediction():
    s = GQA_SHAPE
    d_head = s["d_model"] // s["h"]
    right = 2 * s["L"] * s["h_kv"] * d_head * 2
    assert right == 49152
    assert_named(check_gqa_cache_bytes(...), "stub")
    assert_named(check_gqa_cache_bytes(None), "stub")
    v = check_gqa_cache_bytes(right)
    assert v.ok and "49,152" in str(v)
    assert check_gqa_cache_bytes(torch.tensor(float(right))).ok
    wrong = [
        ("h-not-h_kv", 2 * s["L"] * s["h"] * d_head * 2),
        ("h-not-h_kv", 2 * s["L"] * s["d_model"] * 2),   # K and V d_model wide: the same number
        ("half", s["L"] * s["h_kv"] * d_head * 2),
        ("float32", 2 * s["L"] * s["h_kv"] * d_head * 4),
        ("bits", 2 * s["L"] * s["h_kv"] * d_head * 16),
        ("one-layer", 2 * s["h_kv"] * d_head * 2),
    ]
    for label, value in wrong:
        v = check_gqa_cache_bytes(value)
        assert_named(v, label)
    assert_named(check_gqa_cache_bytes(12345), "values")
    assert_named(check_gqa_cache_bytes("49152"), "type")


# ------------------------------------------------------------------------------ extend: mean-pooled K/V


def _convert(mha, h_kv, pool):
    """A GQA copy of mha whose K/V head j is pool([the heads of group j]); groups as _groups says."""
    d, h, d_head = mha.d_model, mha.h, mha.d_head
    has_bias = mha.W_QKV.bias is not None
    new = MultiHeadAttention(d, h, h_kv=h_kv, bias=has_bias)
    groups = _groups(h, h_kv, strided=pool is strided_mean)
    with torch.no_grad():
        for name in ("weight", "bias") if has_bias else ("weight",):
            W = getattr(mha.W_QKV, name)
            parts = [W[:d]]
            for block in (W[d:2 * d], W[2 * d:]):                 # W_K's rows, then W_V's
                heads = [block[k * d_head:(k + 1) * d_head] for k in range(h)]
                parts += [pool([heads[k] for k in members]) for members in groups]
            getattr(new.W_QKV, name).copy_(torch.cat(parts))
            getattr(new.W_O, name).copy_(getattr(mha.W_O, name))
    return new


def _groups(h, h_kv, strided=False):
    n = h // h_kv
    if strided:
        return [list(range(j, h, h_kv)) for j in range(h_kv)]
    return [list(range(j * n, (j + 1) * n)) for j in range(h_kv)]


def mean(parts):
    return torch.stack(parts).mean(0)


def strided_mean(parts):
    return torch.stack(parts).mean(0)


def total(parts):
    return torch.stack(parts).sum(0)


def first(parts):
    return parts[0]


def test_mean_pooling_is_accepted_and_mistakes_are_named():
    v = check_mean_pooled_kv(lambda m, k: _convert(m, k, mean))
    assert v.ok, v
    for pool, label in ((total, "sum"), (strided_mean, "strided-groups"), (first, "first-head")):
        v = check_mean_pooled_kv(lambda m, k, pool=pool: _convert(m, k, pool))
        assert_named(v, label)


def test_mean_pooling_checker_explains_wrong_returns():
    assert_named(check_mean_pooled_kv(stub), "stub")
    assert_named(check_mean_pooled_kv(lambda m, k: None), "none")
    assert_named(check_mean_pooled_kv(lambda m, k: m.W_QKV), "type")
    assert_named(check_mean_pooled_kv(lambda m, k: m), "heads")


def test_mean_pooling_checker_is_not_fooled_by_a_learner_who_changes_the_input():
    def sneaky(mha, h_kv):
        with torch.no_grad():
            mha.W_QKV.weight.zero_()
        return _convert(mha, h_kv, mean)

    v = check_mean_pooled_kv(sneaky)
    assert not v.ok
    assert check_mean_pooled_kv(lambda m, k: _convert(m, k, mean)).ok


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    from attnlib.checks import gqa

    for m in gqa._GQA_MISTAKES:
        v = check_gqa_attention(m.wrong)
        assert_named(v, m.label)
        assert v.message.startswith(m.hint), (m.label, v)      # an error's verdict adds what was raised
    runs = [m for m in gqa._GQA_MISTAKES if m.label != "not-expanded"]   # without expanding, h_kv = 2 raises
    assert_mistakes_distinct(gqa._gqa_cases()[0], gqa._gqa_reference, runs)
    for m in gqa._POOL_MISTAKES:
        how = m.wrong.keywords["how"]
        v = check_mean_pooled_kv(lambda mha, h_kv, how=how: gqa._pooled(mha, h_kv, how))
        assert_named(v, m.label)
        assert v.message == m.hint, (m.label, v)
    assert_mistakes_distinct(gqa._mean_pool_cases()[0], gqa._pooled_summary, gqa._POOL_MISTAKES)


def test_each_variant_with_its_default_switches_is_the_reference():
    from attnlib.checks import gqa

    assert_accepted(check_gqa_attention(gqa._gqa_variant))
    assert_accepted(check_mean_pooled_kv(gqa._pooled))
