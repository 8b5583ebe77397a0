"""The chapter 10 checkers accept the solutions and name every planted mistake (written here independently)."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib import MultiHeadAttention
from attnlib.checks import gqa as G
from attnlib.checks._core import MORE, _close
from attnlib.checks.gqa import CACHE_QUESTION, check_gqa_cache_bytes, check_mean_pooled_kv, check_regrouped_heads
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


def _allowed(T_q, T_k, shift=0):
    """True where query i (at position i + T_k − T_q) may read key j; ``shift`` moves the diagonal."""
    pos = torch.arange(T_q)[:, None] + (T_k - T_q) + shift
    return torch.arange(T_k)[None, :] <= pos


# ------------------------------------------------------------------------- a layer whose groups are strided
def _strided_output(W_QKV, W_O, h, h_kv, X):
    """The given layer, written without the library: query head n reads K/V head n mod h_kv."""
    d_model, d_head = X.shape[-1], W_O.shape[0] // h
    d_kv = h_kv * d_head
    Q, K, V = (X @ W_QKV).split([d_model, d_kv, d_kv], dim=-1)
    heads = []
    for n in range(h):
        g = n % h_kv
        q, k, v = Q[..., n * d_head:(n + 1) * d_head], K[..., g * d_head:(g + 1) * d_head], \
            V[..., g * d_head:(g + 1) * d_head]
        S = q @ k.mT / math.sqrt(d_head)
        heads.append(torch.softmax(S.masked_fill(~_allowed(X.shape[-2], X.shape[-2]), -INF), -1) @ v)
    return torch.cat(heads, dim=-1) @ W_O


def _q_cols(W_QKV, order, d_head):
    cols = torch.cat([torch.arange(n * d_head, (n + 1) * d_head) for n in order])
    return cols


def regroup_solution(W_QKV, W_O, h, h_kv):
    group, d_head = h // h_kv, W_O.shape[0] // h
    order = [r * h_kv + g for g in range(h_kv) for r in range(group)]
    cols = _q_cols(W_QKV, order, d_head)
    return torch.cat([W_QKV[:, cols], W_QKV[:, h * d_head:]], dim=1), W_O[cols]


def regroup_by_reshape(W_QKV, W_O, h, h_kv):
    d_model = W_QKV.shape[0]
    d_head = d_model // h
    W_Q = W_QKV[:, :d_model].reshape(d_model, h // h_kv, h_kv, d_head).transpose(1, 2).reshape(d_model, d_model)
    W_O = W_O.reshape(h // h_kv, h_kv, d_head, d_model).transpose(0, 1).reshape(d_model, d_model)
    return torch.cat([W_Q, W_QKV[:, d_model:]], dim=1), W_O


def regroup_reversed_in_groups(W_QKV, W_O, h, h_kv):
    """Another right answer: the heads of each group in the opposite order (the outputs are the same)."""
    group, d_head = h // h_kv, W_O.shape[0] // h
    order = [r * h_kv + g for g in range(h_kv) for r in reversed(range(group))]
    cols = _q_cols(W_QKV, order, d_head)
    return torch.cat([W_QKV[:, cols], W_QKV[:, h * d_head:]], dim=1), W_O[cols]


def regroup_unchanged(W_QKV, W_O, h, h_kv):
    return W_QKV.clone(), W_O.clone()


def regroup_queries_only(W_QKV, W_O, h, h_kv):
    W_new, _ = regroup_solution(W_QKV, W_O, h, h_kv)
    return W_new, W_O


def regroup_W_O_only(W_QKV, W_O, h, h_kv):
    return W_QKV, regroup_solution(W_QKV, W_O, h, h_kv)[1]


def regroup_inverse(W_QKV, W_O, h, h_kv):
    """new head n takes old head (n mod h_kv)·(h / h_kv) + n // h_kv: where old heads go, read as where they come
    from."""
    group, d_head = h // h_kv, W_O.shape[0] // h
    order = [(n % h_kv) * group + n // h_kv for n in range(h)]
    cols = _q_cols(W_QKV, order, d_head)
    return torch.cat([W_QKV[:, cols], W_QKV[:, h * d_head:]], dim=1), W_O[cols]


def regroup_W_O_columns(W_QKV, W_O, h, h_kv):
    W_new, _ = regroup_solution(W_QKV, W_O, h, h_kv)
    group, d_head = h // h_kv, W_O.shape[0] // h
    cols = _q_cols(W_QKV, [r * h_kv + g for g in range(h_kv) for r in range(group)], d_head)
    return W_new, W_O[:, cols]


def regroup_heads_as_fast_axis(W_QKV, W_O, h, h_kv):
    """Heads taken as the last axis of a (d_head, h) reshape: single columns n, n + h, … moved."""
    d_model = W_QKV.shape[0]
    d_head, group = d_model // h, h // h_kv
    order = [r * h_kv + g for g in range(h_kv) for r in range(group)]
    W_Q = W_QKV[:, :d_model].reshape(d_model, d_head, h)[..., order].reshape(d_model, d_model)
    W_O = W_O.reshape(d_head, h, d_model)[:, order].reshape(d_model, d_model)
    return torch.cat([W_Q, W_QKV[:, d_model:]], dim=1), W_O


def regroup_in_place(W_QKV, W_O, h, h_kv):
    W_new, W_O_new = regroup_solution(W_QKV, W_O, h, h_kv)
    W_QKV.copy_(W_new)
    W_O.copy_(W_O_new)
    return W_QKV, W_O


def regroup_into_float32(W_QKV, W_O, h, h_kv):
    """Filled into torch.empty (float32 by default)."""
    W_new, W_O_new = regroup_solution(W_QKV, W_O, h, h_kv)
    a, b = torch.empty(W_new.shape), torch.empty(W_O_new.shape)
    a.copy_(W_new), b.copy_(W_O_new)
    return a, b


def regroup_kv_expanded(W_QKV, W_O, h, h_kv):
    """K and V widened to h heads with repeat_interleave: a multi-head layer, of another shape."""
    d_model = W_QKV.shape[0]
    d_head = d_model // h
    K, V = W_QKV[:, d_model:].chunk(2, dim=1)
    K, V = (t.reshape(d_model, h_kv, d_head).repeat_interleave(h // h_kv, 1).reshape(d_model, -1) for t in (K, V))
    return torch.cat([W_QKV[:, :d_model], K, V], dim=1), W_O


def regroup_kv_heads_swapped(W_QKV, W_O, h, h_kv):
    """The K/V heads moved (their order reversed) instead of the query heads."""
    d_model = W_QKV.shape[0]
    d_head = d_model // h
    K, V = W_QKV[:, d_model:].chunk(2, dim=1)
    K, V = (t.reshape(d_model, h_kv, d_head).flip(1).reshape(d_model, -1) for t in (K, V))
    return torch.cat([W_QKV[:, :d_model], K, V], dim=1), W_O.clone()


def regroup_kv_heads_reversed_too(W_QKV, W_O, h, h_kv):
    """Another right answer: the K/V heads in reverse order, each group of query heads following its head."""
    group, d_model = h // h_kv, W_QKV.shape[0]
    d_head = d_model // h
    order = [r * h_kv + (h_kv - 1 - j) for j in range(h_kv) for r in range(group)]
    cols = _q_cols(W_QKV, order, d_head)
    K, V = W_QKV[:, d_model:].chunk(2, dim=1)
    K, V = (t.reshape(d_model, h_kv, d_head).flip(1).reshape(d_model, -1) for t in (K, V))
    return torch.cat([W_QKV[:, cols], K, V], dim=1), W_O[cols]


def regroup_book_to_weight(W_QKV, W_O, h, h_kv):
    """Returned in nn.Linear's (out, in) orientation."""
    a, b = regroup_solution(W_QKV, W_O, h, h_kv)
    return a.T, b.T


def test_the_strided_reference_is_the_layer_written_out():
    for W_QKV, W_O, h, h_kv in G._regroup_cases():
        X = torch.randn(2, 5, W_QKV.shape[0], generator=G._gen(120), dtype=torch.float64).to(W_QKV.dtype)
        torch.testing.assert_close(G._strided_reference(W_QKV, W_O, h, h_kv), _strided_output(W_QKV, W_O, h, h_kv, X))


@pytest.mark.parametrize("fn", [regroup_solution, regroup_by_reshape, regroup_reversed_in_groups,
                                regroup_kv_heads_reversed_too,
                                lambda W_QKV, W_O, h, h_kv: list(G._regroup(W_QKV, W_O, h, h_kv))])
def test_regrouping_is_accepted(fn):
    assert_accepted(check_regrouped_heads(fn))


# written from the exercise text, each one verified wrong on the checker's inputs
REGROUP_WRONG = [
    (regroup_unchanged, "unchanged"), (regroup_queries_only, "W_O-not-reordered"),
    (regroup_W_O_only, "W_Q-not-reordered"), (regroup_inverse, "inverse-order"),
    (regroup_W_O_columns, "W_O-columns"), (regroup_heads_as_fast_axis, "head-layout"),
    (regroup_in_place, "in-place"), (regroup_into_float32, "pair"), (regroup_kv_expanded, "pair"),
    (regroup_book_to_weight, "pair"), (regroup_kv_heads_swapped, "kv-moved"),
]


@pytest.mark.parametrize("fn, label", REGROUP_WRONG + [(stub, "stub")])
def test_regrouping_mistakes_are_named(fn, label):
    assert_named(check_regrouped_heads(fn), label)


def test_regrouping_wrong_answers_are_wrong_on_the_checkers_inputs():
    for fn, _ in REGROUP_WRONG:
        outs = []
        for W_QKV, W_O, h, h_kv in G._regroup_cases():
            got = fn(W_QKV.clone(), W_O.clone(), h, h_kv)
            same = tuple(t.shape for t in got) == (W_QKV.shape, W_O.shape) and got[0].dtype == W_QKV.dtype
            outs.append(same and _close(G._grouped_output(*got, h, h_kv), G._strided_reference(W_QKV, W_O, h, h_kv),
                                        1e-6))
        assert not all(outs) or fn is regroup_in_place, fn.__name__


def test_a_pair_of_the_wrong_kind_is_told_the_shapes_and_dtype_to_return():
    v = check_regrouped_heads(regroup_book_to_weight)
    assert_named(v, "pair", "float64 (12, 20)", "float64 (20, 12)")
    assert "_Returned" not in v.message and "tensor, got" not in v.message
    assert_named(check_regrouped_heads(regroup_into_float32), "pair", "float32 (12, 20)")
    assert_named(check_regrouped_heads(lambda W_QKV, W_O, h, h_kv: W_QKV), "pair", "got float64 (12, 20)")


def test_regrouping_runs_the_learners_function_once_per_case():
    calls = []

    def counted(W_QKV, W_O, h, h_kv):
        calls.append(h)
        return regroup_unchanged(W_QKV, W_O, h, h_kv)

    check_regrouped_heads(counted)
    assert len(calls) == len(G._regroup_cases()), calls


def test_regrouping_checker_does_not_raise_on_garbage():
    for fn in (lambda *a: None, lambda *a: 1 / 0, lambda *a: (1, 2), 3, lambda W_QKV, W_O: W_QKV):
        v = check_regrouped_heads(fn)
        assert not v.ok and str(v).startswith("✗ not yet: "), v


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
    ("half", 512 * 24 * 4),                     # K or V only
    ("half", 1024 * 24 * 2),                    # float16's 2 bytes a number
    ("kv-twice", 2 * 1024 * 24 * 4),            # the 1024 rows taken as K's alone
    ("kib", 96),                                # in KiB
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


def convert_keeping_built_biases(mha, h_kv):
    new = convert(mha, h_kv)
    if new.W_QKV.bias is not None:
        with torch.no_grad():
            new.W_QKV.bias.uniform_(-1, 1), new.W_O.bias.uniform_(-1, 1)
    return new


def convert_by_editing_a_copy(mha, h_kv):
    """mha deep-copied, then h_kv and the fused weight replaced: the copy's own sizes still describe h_kv = h."""
    import copy
    new, right = copy.deepcopy(mha), convert(mha, h_kv)
    new.h_kv, new.W_QKV = h_kv, right.W_QKV
    return new


def test_biases_left_as_built_and_a_copy_edited_after_it_was_built_are_named():
    assert_named(check_mean_pooled_kv(convert_keeping_built_biases), "biases-not-copied")
    assert_named(check_mean_pooled_kv(convert_by_editing_a_copy), "changed-after-built", "qkv_sizes")


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


def test_mean_pooling_runs_the_learners_function_once_per_case():
    calls = []

    def counted(mha, h_kv):
        calls.append(h_kv)
        return convert(mha, h_kv, pool="first") if len(calls) > 1 else mha    # wrong structure, then values

    assert_named(check_mean_pooled_kv(counted), "heads")
    assert len(calls) == len(G._mean_pool_cases()), calls


def test_mean_pooling_hints_have_two_levels():
    fn = lambda m, k: convert(m, k, to_dtype=False)  # noqa: E731
    first, second = check_mean_pooled_kv(fn), check_mean_pooled_kv(fn, hint=2)
    assert first.message.endswith(MORE) and second.mistake == "dtype" and second.message != first.message


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for m in G._REGROUP_PLANTED:
        v = check_regrouped_heads(m.wrong)
        assert_named(v, m.label)
        assert v.message == m.hint + MORE, (m.label, v)
    assert_each_separated(G._regroup_cases(), G._strided_reference, G._REGROUP_MISTAKES)
    for m in G._POOL_MISTAKES:
        how = m.wrong.keywords["how"]
        v = check_mean_pooled_kv(lambda mha, h_kv, how=how: G._pooled(mha, h_kv, how))
        assert_named(v, m.label)
        assert v.message.startswith(m.hint), (m.label, v)
    assert_each_separated(G._mean_pool_cases(), G._pooled_summary, G._POOL_MISTAKES)


def test_each_variant_with_its_default_switches_is_the_reference():
    assert_accepted(check_regrouped_heads(G._regroup))
    assert_accepted(check_mean_pooled_kv(G._pooled))


def test_every_mistake_the_checkers_name_is_registered_with_two_hint_levels():
    tables = ((check_regrouped_heads, [*G._REGROUP_MISTAKES, G._PAIR, G._KV_MOVED]),
              (check_gqa_cache_bytes, G._CACHE_GUESSES),
              (check_mean_pooled_kv, [*G._POOL_MISTAKES, *G._STRUCTURE_MISTAKES]))
    for check, table in tables:
        assert {m.label for m in table} <= {m.label for m in check.mistakes}
        assert all(m.more for m in table), check.__name__


def test_the_cache_question_agrees_with_the_formula_and_a_measured_cache():
    """The answer of check_gqa_cache_bytes is what kv_cache_bytes gives for the question's layer, and the formula
    is what the library's GPT caches (measured on a small stand-in with the same group size h / h_kv = 4)."""
    from attnlib.costs import kv_cache_bytes
    from attnlib.heads import KVCache
    from attnlib.model import GPT, GPTConfig

    L, d_model, h, h_kv, T = 2, 32, 8, 2, 3
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(GPTConfig(11, d_model, h, L, max_T=T, h_kv=h_kv)).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 11, (1, T), generator=G._gen(0)), caches)
    measured = sum(c.K.nbytes + c.V.nbytes for c in caches) // T
    assert measured == kv_cache_bytes(L, h_kv, d_model // h, bytes_per_number=4)
    with torch.device("meta"):
        layer = MultiHeadAttention(2048, 16, h_kv=4, bias=False)
    s = CACHE_QUESTION
    assert tuple(layer.W_QKV.weight.shape) == s["W_QKV"]
    assert G._CACHE_WANT == kv_cache_bytes(s["L"], layer.h_kv, layer.d_head, bytes_per_number=s["bytes_per_number"])
