"""The chapter 10 checkers accept the solutions and name every planted mistake (written here independently)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlib import MultiHeadAttention
from attnlib.checks import gqa as G
from attnlib.checks._core import MORE, _close
from attnlib.checks.gqa import CACHE_QUESTION, check_gqa_attention, check_gqa_cache_bytes, check_mean_pooled_kv
from helpers import assert_accepted, assert_named, stub

INF = math.inf


def assert_each_separated(cases, reference, mistakes):
    """Every planted mistake differs from the answer, and from every other mistake, on at least one case (a
    mistake that raises differs from one that does not)."""
    def outputs(fn):
        out = []
        for c in cases:
            try:
                out.append(fn(*c))
            except Exception as e:  # noqa: BLE001
                out.append(repr(e))
        return out

    def differ(x, y):
        if isinstance(x, str) or isinstance(y, str):
            return x != y
        return not _close(x, y, 1e-3)

    outs = [outputs(reference)] + [outputs(m.wrong) for m in mistakes]
    names = ["answer"] + [m.label for m in mistakes]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert any(differ(x, y) for x, y in zip(outs[i], outs[j])), (names[i], names[j])


# ------------------------------------------------------------------------------------------ GQA attention
def _allowed(T_q, T_k, shift=0):
    """True where query i (at position i + T_k − T_q) may read key j; ``shift`` moves the diagonal."""
    pos = torch.arange(T_q)[:, None] + (T_k - T_q) + shift
    return torch.arange(T_k)[None, :] <= pos


def _attend(Q, K, V, allowed=None, scale=None):
    """Causal attention (queries last) on equal head counts, written without the library."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    allowed = _allowed(T_q, T_k) if allowed is None else allowed
    S = Q @ K.mT / math.sqrt(Q.shape[-1] if scale is None else scale)
    return torch.softmax(S.masked_fill(~allowed, -INF), dim=-1) @ V


def gqa_solution(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, K.repeat_interleave(n, dim=-3), V.repeat_interleave(n, dim=-3))


def gqa_grouped_einsum(Q, K, V):
    """Q reshaped into groups, K and V broadcast: no copy (the chapter's second way), with the cache offset."""
    *batch, h, T_q, d = Q.shape
    h_kv, T_k = K.shape[-3], K.shape[-2]
    Qg = Q.reshape(*batch, h_kv, h // h_kv, T_q, d)
    S = torch.einsum("...gnqd,...gkd->...gnqk", Qg, K) / math.sqrt(d)
    P = torch.softmax(S.masked_fill(~_allowed(T_q, T_k), -INF), dim=-1)
    return torch.einsum("...gnqk,...gkd->...gnqd", P, V).reshape(*batch, h, T_q, V.shape[-1])


def gqa_torch(Q, K, V):
    mask = _allowed(Q.shape[-2], K.shape[-2])
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)


def gqa_tiled(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, torch.cat([K] * n, dim=-3), torch.cat([V] * n, dim=-3))


def gqa_Q_grouped_strided(Q, K, V):
    *batch, h, T, d = Q.shape
    h_kv = K.shape[-3]
    out = _attend(Q.reshape(*batch, h // h_kv, h_kv, T, d), K.unsqueeze(-4), V.unsqueeze(-4))
    return out.reshape(*batch, h, T, V.shape[-1])


def gqa_no_mask(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, K.repeat_interleave(n, -3), V.repeat_interleave(n, -3),
                   allowed=torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool))


def gqa_square_mask(Q, K, V):
    """triu(1) on (T_q, T_k): the new queries treated as positions 0 … T_q − 1."""
    n = Q.shape[-3] // K.shape[-3]
    allowed = ~torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool).triu(1)
    return _attend(Q, K.repeat_interleave(n, -3), V.repeat_interleave(n, -3), allowed=allowed)


def gqa_sdpa_is_causal(Q, K, V):
    """SDPA's is_causal with T_q ≠ T_k aligns its mask to the top left."""
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)


def gqa_blocks_itself(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, K.repeat_interleave(n, -3), V.repeat_interleave(n, -3),
                   allowed=_allowed(Q.shape[-2], K.shape[-2], shift=-1))


def gqa_reads_one_ahead(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, K.repeat_interleave(n, -3), V.repeat_interleave(n, -3),
                   allowed=_allowed(Q.shape[-2], K.shape[-2], shift=1))


def gqa_times_K(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    K = K.repeat_interleave(n, dim=-3)
    return _attend(Q, K, K)


def gqa_scaled_by_d_v(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q, K.repeat_interleave(n, -3), V.repeat_interleave(n, -3), scale=V.shape[-1])


def gqa_not_expanded(Q, K, V):
    return _attend(Q, K, V)


def gqa_sdpa_not_expanded(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


def gqa_one_query_per_group(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    return _attend(Q[..., ::n, :, :], K, V)


def gqa_mean_queries(Q, K, V):
    *batch, h, T, d = Q.shape
    return _attend(Q.reshape(*batch, K.shape[-3], -1, T, d).mean(-3), K, V)


def gqa_heads_on_axis_1(Q, K, V):
    n = Q.shape[1] // K.shape[1]
    return _attend(Q, K.repeat_interleave(n, dim=1), V.repeat_interleave(n, dim=1))


def gqa_heads_on_axis_1_einsum(Q, K, V):
    """The same slip, raising another error (einsum's): found by the diagnosis, not by the planted error."""
    n = Q.shape[1] // K.shape[1]
    K, V = K.repeat_interleave(n, dim=1), V.repeat_interleave(n, dim=1)
    S = torch.einsum("bhqd,bhkd->bhqk", Q, K) / math.sqrt(Q.shape[-1])
    P = torch.softmax(S.masked_fill(~_allowed(Q.shape[-2], K.shape[-2]), -INF), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", P, V)


def gqa_float_mask(Q, K, V):
    """The additive mask made in float32: bfloat16 scores plus it become float32, and meet the bfloat16 V."""
    n = Q.shape[-3] // K.shape[-3]
    K, V = K.repeat_interleave(n, -3), V.repeat_interleave(n, -3)
    M = torch.zeros(Q.shape[-2], K.shape[-2]).masked_fill(~_allowed(Q.shape[-2], K.shape[-2]), -INF)
    return torch.softmax(Q @ K.mT / math.sqrt(Q.shape[-1]) + M, dim=-1) @ V


def gqa_float_mask_einsum(Q, K, V):
    """The same slip, raising einsum's error: found by the diagnosis."""
    n = Q.shape[-3] // K.shape[-3]
    K, V = K.repeat_interleave(n, -3), V.repeat_interleave(n, -3)
    M = torch.zeros(Q.shape[-2], K.shape[-2]).masked_fill(~_allowed(Q.shape[-2], K.shape[-2]), -INF)
    P = torch.softmax(torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1]) + M, dim=-1)
    return torch.einsum("...qk,...kd->...qd", P, V)


def gqa_in_float32(Q, K, V):
    """Computed in float32 and returned so: right values, wrong dtype for float64 and bfloat16 inputs."""
    return gqa_solution(Q.float(), K.float(), V.float())


def gqa_scales_Q_in_place(Q, K, V):
    n = Q.shape[-3] // K.shape[-3]
    Q /= math.sqrt(Q.shape[-1])
    S = Q @ K.repeat_interleave(n, -3).mT
    return torch.softmax(S.masked_fill(~_allowed(Q.shape[-2], K.shape[-2]), -INF), -1) @ V.repeat_interleave(n, -3)


def gqa_masks_its_own_scores_in_place(Q, K, V):
    """In-place work on a tensor of its own is fine: only the inputs must be left as they came."""
    n = Q.shape[-3] // K.shape[-3]
    S = Q @ K.repeat_interleave(n, -3).mT / math.sqrt(Q.shape[-1])
    S.masked_fill_(~_allowed(Q.shape[-2], K.shape[-2]), -INF)
    return torch.softmax(S, -1) @ V.repeat_interleave(n, -3)


@pytest.mark.parametrize("fn", [gqa_solution, gqa_grouped_einsum, gqa_torch, gqa_masks_its_own_scores_in_place])
def test_gqa_solutions_are_accepted(fn):
    assert_accepted(check_gqa_attention(fn))


@pytest.mark.parametrize("fn, label", [
    (gqa_tiled, "tiled"), (gqa_Q_grouped_strided, "tiled"), (gqa_no_mask, "no-mask"),
    (gqa_square_mask, "top-left"), (gqa_sdpa_is_causal, "top-left"), (gqa_blocks_itself, "self-blocked"),
    (gqa_reads_one_ahead, "one-ahead"), (gqa_times_K, "weights-times-K"), (gqa_scaled_by_d_v, "scale-d_v"),
    (gqa_not_expanded, "not-expanded"), (gqa_sdpa_not_expanded, "not-expanded"),
    (gqa_one_query_per_group, "fewer-queries"), (gqa_mean_queries, "mean-queries"),
    (gqa_heads_on_axis_1, "head-axis"), (gqa_heads_on_axis_1_einsum, "head-axis"),
    (gqa_float_mask, "mixed-dtypes"), (gqa_float_mask_einsum, "mixed-dtypes"), (gqa_in_float32, "dtype"),
    (gqa_scales_Q_in_place, "in-place"), (stub, "stub"),
])
def test_gqa_mistakes_are_named(fn, label):
    assert_named(check_gqa_attention(fn), label)


def test_gqa_dtype_verdict_names_both_dtypes():
    assert_named(check_gqa_attention(gqa_in_float32), "dtype", "torch.float32", "torch.float64")
    assert_named(check_gqa_attention(lambda Q, K, V: gqa_solution(Q, K, V).double()), "dtype", "torch.bfloat16")


def test_an_answer_right_in_values_is_never_blamed_on_a_mistake_that_raises_elsewhere():
    """A planted mistake that raises on some inputs and is right on the others would match every answer with
    the right values (a case on which a planted mistake raises is skipped): the table holds none, except K and
    V left unexpanded, which is right for multi-query attention and is named only through its own error, where
    the diagnosis (heads on the second axis) has the last word."""
    assert_named(check_gqa_attention(gqa_heads_on_axis_1), "head-axis")
    for m in G._GQA_MISTAKES:
        if m.label == "not-expanded" and m.wrong is not G._gqa_sdpa_not_expanded:
            continue
        cases = [c for group in G._gqa_cases() for c in group.cases]
        ran = []
        for c in cases:
            try:
                ran.append(_close(m.wrong(*c), G._gqa_reference(*c), 3e-2))
            except Exception:  # noqa: BLE001
                pass
        assert not all(ran), m.label


def test_gqa_mask_hints_are_not_blamed_on_the_heads():
    """A mask one diagonal off or aligned to the top left is told about the mask, not about K and V."""
    for fn in (gqa_square_mask, gqa_blocks_itself, gqa_reads_one_ahead):
        v = check_gqa_attention(fn)
        assert "mask" in v.message and "expand" not in v.message, v


def test_gqa_checker_does_not_raise_on_garbage():
    for fn in (lambda Q, K, V: None, lambda Q, K, V: 1 / 0, lambda Q, K, V: Q, 3):
        v = check_gqa_attention(fn)
        assert not v.ok and str(v).startswith("✗ not yet: ")


def test_gqa_reference_is_in_the_dtype_of_Q():
    for group in G._gqa_cases():
        for Q, K, V in group.cases:
            assert G._gqa_reference(Q, K, V).dtype == Q.dtype


# ---------------------------------------------------------------------------------- predict: cache bytes
def test_cache_bytes_prediction_is_accepted():
    rows, d_model = CACHE_QUESTION["W_QKV"][0], CACHE_QUESTION["W_O"][0]
    h, d_head = d_model // CACHE_QUESTION["d_head"], CACHE_QUESTION["d_head"]
    h_kv = (rows - h * d_head) // (2 * d_head)
    assert (h, h_kv) == (16, 4)
    right = 2 * CACHE_QUESTION["L"] * h_kv * d_head * 4
    assert right == 98304
    v = check_gqa_cache_bytes(right)
    assert v.ok and "98,304" in str(v)
    assert check_gqa_cache_bytes(torch.tensor(float(right))).ok


@pytest.mark.parametrize("label, value", [
    ("with-queries", 3072 * 24 * 4),            # Q's rows cached too
    ("as-if-mha", 2 * 2048 * 24 * 4),           # K and V as wide as d_model
    ("numbers", 1024 * 24),                     # a unit left off: numbers, not bytes
    ("K-only", 512 * 24 * 4),                   # K or V only
    ("one-layer", 1024 * 4),                    # per layer, not all layers
    ("one-layer-numbers", 1024),
    ("bits", 1024 * 24 * 32),
    ("values", 12345), ("stub", ...), ("stub", None), ("type", "98304"),
])
def test_cache_bytes_wrong_predictions_are_named(label, value):
    assert_named(check_gqa_cache_bytes(value), label)


def test_cache_bytes_verdicts_say_too_high_or_too_low_and_give_no_formula():
    want = 98304
    for g in G._CACHE_GUESSES:
        assert g.hint.startswith("too high" if g.value > want else "too low"), g
        assert g.more, g
        for formula in ("·", "=", "h_kv", "d_head", "512", "1024"):
            assert formula not in g.hint, (formula, g)
    assert len({g.value for g in G._CACHE_GUESSES}) == len(G._CACHE_GUESSES)
    assert "too high" in str(check_gqa_cache_bytes(200000)) and "too low" in str(check_gqa_cache_bytes(50000))


# ------------------------------------------------------------------------------ extend: mean-pooled K/V
def convert(mha, h_kv, *, pool="mean", bias=None, rope=None, to_dtype=True, share=None, copy_O=True,
            keep_Q=True, pool_biases=True, kv_rows="right"):
    """A GQA copy of mha whose K/V head j pools the heads of group j, written independently; each keyword
    plants one slip."""
    d, h, d_head = mha.d_model, mha.h, mha.d_head
    has_bias = mha.W_QKV.bias is not None
    new = MultiHeadAttention(d, h, h_kv=h_kv, bias=has_bias if bias is None else bias,
                             rope=mha.rope if rope is None else rope)
    if to_dtype:
        new = new.to(dtype=mha.W_O.weight.dtype)
    n = h // h_kv
    groups = ([list(range(j, h, h_kv)) for j in range(h_kv)] if pool == "strided"
              else [list(range(j * n, (j + 1) * n)) for j in range(h_kv)])
    reduce = {"mean": lambda t: t.mean(0), "strided": lambda t: t.mean(0), "sum": lambda t: t.sum(0),
              "first": lambda t: t[0]}[pool]
    with torch.no_grad():
        for name in ("weight", "bias") if has_bias and new.W_QKV.bias is not None else ("weight",):
            W = getattr(mha.W_QKV, name).to(getattr(new.W_QKV, name).dtype)
            Q_rows = W[:d] if keep_Q else W[:d].flip(0)
            if name == "bias" and not pool_biases:
                new.W_QKV.bias[:d].copy_(Q_rows)                  # K's and V's biases stay as built
                continue
            parts = [Q_rows]
            K_part, V_part = (W[d:2 * d], W[2 * d:]) if kv_rows == "right" else (W[:d], W[d:2 * d])
            for block in (K_part, V_part):
                heads = torch.stack([block[k * d_head:(k + 1) * d_head] for k in range(h)])
                parts += [reduce(heads[members]) for members in groups]
            getattr(new.W_QKV, name).copy_(torch.cat(parts))
        if copy_O:
            new.W_O.weight.copy_(mha.W_O.weight)
            if new.W_O.bias is not None and mha.W_O.bias is not None:
                new.W_O.bias.copy_(mha.W_O.bias)
    if share == "module":
        new.W_O = mha.W_O
    elif share == "parameter":
        new.W_O.weight = torch.nn.Parameter(mha.W_O.weight.data)
    return new


def test_mean_pooling_is_accepted():
    assert_accepted(check_mean_pooled_kv(convert))
    assert "copied" in check_mean_pooled_kv(convert).message


@pytest.mark.parametrize("kwargs, label", [
    (dict(pool="sum"), "sum"), (dict(pool="strided"), "strided-groups"), (dict(pool="first"), "first-head"),
    (dict(copy_O=False), "W_O-not-copied"), (dict(keep_Q=False), "queries-changed"),
    (dict(kv_rows="shifted"), "kv-rows"), (dict(pool_biases=False), "kv-biases"),
    (dict(rope=False), "options"), (dict(to_dtype=False), "dtype"),
])
def test_mean_pooling_mistakes_are_named(kwargs, label):
    assert_named(check_mean_pooled_kv(lambda m, k: convert(m, k, **kwargs)), label)


def test_a_layer_with_extra_biases_is_told_about_the_biases_not_a_tuple():
    v = check_mean_pooled_kv(lambda m, k: convert(m, k, bias=True))
    assert_named(v, "bias", "has biases", "has none")
    assert "tuple" not in v.message
    assert_named(check_mean_pooled_kv(lambda m, k: convert(m, k, bias=False)), "bias", "lacks biases")


@pytest.mark.parametrize("share", ["module", "parameter"])
def test_a_layer_sharing_its_parameters_with_mha_is_refused_not_called_a_copy(share):
    v = check_mean_pooled_kv(lambda m, k: convert(m, k, share=share))
    assert_named(v, "shared-parameters", "W_O.weight")
    assert "copied" not in v.message


def test_mean_pooling_checker_explains_wrong_returns():
    assert_named(check_mean_pooled_kv(stub), "stub")
    assert_named(check_mean_pooled_kv(lambda m, k: None), "none")
    assert_named(check_mean_pooled_kv(lambda m, k: m.W_QKV), "type", "Linear")
    assert_named(check_mean_pooled_kv(lambda m, k: m), "heads")
    assert_named(check_mean_pooled_kv(lambda m, k: MultiHeadAttention(m.d_model, m.h, h_kv=1)), "heads")
    assert_named(check_mean_pooled_kv(3), "not-callable")


def test_mean_pooling_checker_is_not_fooled_by_a_learner_who_changes_the_input():
    def sneaky(mha, h_kv):
        new = convert(mha, h_kv)
        with torch.no_grad():
            mha.W_QKV.weight.zero_()
        return new

    assert_named(check_mean_pooled_kv(sneaky), "in-place", "mha.W_QKV.weight")


def test_mean_pooling_hints_have_two_levels():
    fn = lambda m, k: convert(m, k, to_dtype=False)  # noqa: E731
    first, second = check_mean_pooled_kv(fn), check_mean_pooled_kv(fn, hint=2)
    assert first.message.endswith(MORE) and second.mistake == "dtype" and second.message != first.message


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for m in G._GQA_MISTAKES:
        assert m.wrong is not None, m.label
        v = check_gqa_attention(m.wrong)
        assert_named(v, m.label)
        assert v.message.startswith(m.hint), (m.label, v)      # an error's verdict adds what was raised
    cases = [c for group in G._gqa_cases() for c in group.cases]
    runs = [m for m in G._GQA_MISTAKES if m.wrong is not G._gqa_sdpa_not_expanded]
    assert_each_separated(cases, G._gqa_reference, [m for m in runs if m.label != "not-expanded"])
    for m in G._POOL_MISTAKES:
        how = m.wrong.keywords["how"]
        v = check_mean_pooled_kv(lambda mha, h_kv, how=how: G._pooled(mha, h_kv, how))
        assert_named(v, m.label)
        assert v.message.startswith(m.hint), (m.label, v)
    assert_each_separated(G._mean_pool_cases(), G._pooled_summary, G._POOL_MISTAKES)


def test_each_variant_with_its_default_switches_is_the_reference():
    assert_accepted(check_gqa_attention(G._gqa_variant))
    assert_accepted(check_mean_pooled_kv(G._pooled))


def test_every_mistake_the_checkers_name_is_registered_with_two_hint_levels():
    tables = ((check_gqa_attention, [*G._GQA_MISTAKES, G._HEAD_AXIS, G._MIXED]),
              (check_gqa_cache_bytes, G._CACHE_GUESSES),
              (check_mean_pooled_kv, [*G._POOL_MISTAKES, *G._STRUCTURE_MISTAKES]))
    for check, table in tables:
        assert {m.label for m in table} <= {m.label for m in check.mistakes}
        assert all(m.more for m in table), check.__name__
