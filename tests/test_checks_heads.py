"""The chapter 6 checkers accept the solutions, name every planted mistake, and recognise the stub; they
compare dtypes, notice inputs changed in place, blame a mistake only when it matches on every case, and no
first-level hint holds the code of the book's solution."""

from __future__ import annotations

import math
import re

import nbformat
import pytest
import torch

from attnlib import merge_heads, split_heads
from attnlib.attention import attention, causal_mask, softmax
from attnlib.checks import (
    buggy_qkv_attention,
    check_attention_parameters,
    check_fixed_qkv_attention,
    check_heads_first,
    check_split_heads,
    heads,
)
from attnlib.checks._core import _GENERAL, _LEVEL, MORE, Group, _close
from helpers import BOOK, assert_accepted, assert_named, stub


def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def assert_not_named(verdict, label):
    assert not verdict.ok and verdict.mistake != label, (label, verdict)


# ------------------------------------------------------------------------------------------ split_heads
def split_ok(x, h):
    *lead, T, d_model = x.shape
    return x.reshape(*lead, T, h, d_model // h).transpose(-3, -2)


def split_unflatten(x, h):
    return x.unflatten(-1, (h, -1)).movedim(-2, -3)


def split_flatten_and_back(x, h):
    *lead, T, d_model = x.shape
    return split_heads(x.reshape(-1, T, d_model), h).reshape(*lead, h, T, d_model // h)


def split_no_transpose(x, h):
    *lead, T, d_model = x.shape
    return x.view(*lead, h, T, d_model // h)


def split_interleaved(x, h):
    *lead, T, d_model = x.shape
    return x.unflatten(-1, (-1, h)).movedim(-1, -3)


def split_wrong_axes(x, h):
    *lead, T, d_model = x.shape
    return x.reshape(*lead, T, h, d_model // h).transpose(-3, -2).transpose(-2, -1)


def split_front_axes(x, h):
    *lead, T, d_model = x.shape
    return x.reshape(*lead, T, h, d_model // h).transpose(1, 2)


def split_heads_first(x, h):
    *lead, T, d_model = x.shape
    return x.reshape(*lead, T, h, d_model // h).permute(-2, *range(len(lead)), -3, -1)


def split_flattened(x, h):
    T, d_model = x.shape[-2:]
    return split_heads(x.reshape(-1, T, d_model), h)


def split_unpacks_three(x, h):
    B, T, d_model = x.shape
    return x.reshape(B, T, h, d_model // h).transpose(1, 2)


def split_indexes_three(x, h):
    """The page's split with the sizes read one by one: an IndexError, not the planted unpacking error."""
    B, T, d = x.shape[0], x.shape[1], x.shape[2]
    return x.reshape(B, T, h, d // h).transpose(1, 2)


def split_keeps_two_sizes(x, h):
    """Right for three axes; with two it cannot reshape, with four it splits the wrong axis, without raising."""
    return x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 2)


@pytest.mark.parametrize("fn", [split_ok, split_unflatten, split_flatten_and_back, heads._split_reference])
def test_split_solutions_are_accepted(fn):
    assert_accepted(check_split_heads(fn))


@pytest.mark.parametrize("fn, label", [
    (split_no_transpose, "no-transpose"), (lambda x, h: torch.stack(x.chunk(h, -1), dim=-2), "not-moved"),
    (split_interleaved, "interleaved"), (split_wrong_axes, "wrong-axes"),
    (split_front_axes, "fixed-axes"), (split_heads_first, "heads-in-front"), (split_flattened, "lead-flattened"),
    (lambda x, h: x.clone(), "no-split"), (split_unpacks_three, "three-axes"),
    (split_indexes_three, "three-axes"), (split_keeps_two_sizes, "three-axes"), (stub, "stub"),
])
def test_split_mistakes_are_named(fn, label):
    assert_named(check_split_heads(fn), label)


def test_split_compares_the_dtype():
    verdict = check_split_heads(lambda x, h: split_ok(x, h).float())    # the float64 case comes back float32
    assert_named(verdict, "dtype", "float32", "float64")


def test_split_names_an_input_changed_in_place():
    def split_in_place(x, h):
        *lead, T, d_model = x.shape
        x.unsqueeze_(-2)                          # x itself gains an axis
        return x.reshape(*lead, T, h, d_model // h).transpose(-3, -2)

    assert_named(check_split_heads(split_in_place), "in-place", "x")


def test_split_blames_a_mistake_only_when_it_matches_every_case():
    def no_transpose_only_with_two_leading_axes(x, h):
        return split_no_transpose(x, h) if x.dim() == 4 else split_ok(x, h)

    verdict = check_split_heads(no_transpose_only_with_two_leading_axes)
    assert_not_named(verdict, "no-transpose")
    assert_named(verdict, "values")


def test_split_tests_T_equal_to_d_head_and_not():
    shapes = [(x.shape[-2], x.shape[-1] // h) for x, h in heads._split_cases()]
    assert any(T == d for T, d in shapes) and any(T != d for T, d in shapes)
    assert {x.dim() for x, _ in heads._split_cases()} == {2, 3, 4}


# ------------------------------------------------------------------------------------------ heads-first
def hf_einsum(X, W_Q, W_K, W_V, W_O):
    d_k, T = W_Q.shape[-1], X.shape[1]
    Q, K = torch.einsum("btm,hmk->bhtk", X, W_Q), torch.einsum("btm,hmk->bhtk", X, W_K)
    V = torch.einsum("btm,hmv->bhtv", X, W_V)
    Z = (Q @ K.mT / math.sqrt(d_k)).masked_fill(future(T), float("-inf"))
    return torch.einsum("bhtv,hvm->btm", torch.softmax(Z, -1) @ V, W_O)


def hf_per_head(X, W_Q, W_K, W_V, W_O):
    outs = [attention(X @ W_Q[k], X @ W_K[k], X @ W_V[k]) for k in range(W_Q.shape[0])]
    return torch.cat(outs, dim=-1) @ W_O.flatten(0, 1)


def hf_sum_of_heads(X, W_Q, W_K, W_V, W_O):
    return sum(attention(X @ W_Q[k], X @ W_K[k], X @ W_V[k]) @ W_O[k] for k in range(W_Q.shape[0]))


def hf_broadcast(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (X[:, None] @ W for W in (W_Q, W_K, W_V))     # (B, 1, T, d) @ (h, d, w) → (B, h, T, w)
    return (attention(Q, K, V)[..., None, :] @ W_O[:, None]).squeeze(-2).sum(1)


def hf_fused_by_reshape(X, W_Q, W_K, W_V, W_O):
    h, d_model, _ = W_Q.shape
    Q, K, V = (split_heads(X @ W.reshape(d_model, -1), h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O.reshape(-1, d_model)


def hf_W_O_interleaved(X, W_Q, W_K, W_V, W_O):
    h, d_v, d_model = W_O.shape
    fuse = lambda W: W.permute(1, 0, 2).reshape(W.shape[1], -1)   # noqa: E731
    Q, K, V = (split_heads(X @ fuse(W), h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O.permute(1, 0, 2).reshape(h * d_v, d_model)


def hf_scaled(width):
    def fn(X, W_Q, W_K, W_V, W_O):
        T = X.shape[1]
        Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
        d = {"d_v": W_V.shape[-1], "d_model": X.shape[-1], "d_model / h": X.shape[-1] // W_Q.shape[0]}[width]
        Z = (Q @ K.mT / math.sqrt(d)).masked_fill(future(T), float("-inf"))
        return torch.einsum("bhtv,hvm->btm", torch.softmax(Z, -1) @ V, W_O)
    return fn


def hf_no_mask(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
    return torch.einsum("bhtv,hvm->btm", attention(Q, K, V, causal=False), W_O)


def hf_scores_transposed(X, W_Q, W_K, W_V, W_O):
    d_k, T = W_Q.shape[-1], X.shape[1]
    Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
    Z = torch.einsum("bhqd,bhkd->bhkq", Q, K) / math.sqrt(d_k)         # the output indices swapped
    P = torch.softmax(Z.masked_fill(future(T), float("-inf")), dim=-1)
    return torch.einsum("bhtv,hvm->btm", P @ V, W_O)


def hf_mean(X, W_Q, W_K, W_V, W_O):
    return hf_sum_of_heads(X, W_Q, W_K, W_V, W_O) / W_Q.shape[0]


def hf_apart(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
    return attention(Q, K, V) @ W_O


def hf_page_widths(X, W_Q, W_K, W_V, W_O):
    """The chapter's layer written for d_head = d_model / h: fails when the widths differ."""
    h, d_model, _ = W_Q.shape
    B, T, _ = X.shape
    d_head = d_model // h
    Q, K, V = (torch.einsum("btm,hmk->bthk", X, W).reshape(B, T, h, d_head).transpose(1, 2)
               for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)).reshape(B, T, d_model) @ W_O.reshape(-1, d_model)


def hf_float32_mask(X, W_Q, W_K, W_V, W_O):
    d_k, T = W_Q.shape[-1], X.shape[1]
    Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
    P = softmax(Q @ K.mT / math.sqrt(d_k) + causal_mask(T))     # float32 mask: float16 scores turn float32
    return torch.einsum("bhtv,hvm->btm", P @ V, W_O)


@pytest.mark.parametrize("fn", [hf_einsum, hf_per_head, hf_sum_of_heads, hf_broadcast,
                                heads._heads_first_reference, heads._hf_variant])
def test_heads_first_solutions_are_accepted(fn):
    assert_accepted(check_heads_first(fn))


@pytest.mark.parametrize("fn, label", [
    (hf_fused_by_reshape, "fused-by-reshape"), (hf_W_O_interleaved, "W_O-interleaved"),
    (hf_scaled("d_v"), "scale-d_v"), (hf_scaled("d_model"), "scale-d_model"), (hf_no_mask, "no-mask"),
    (hf_scores_transposed, "scores-transposed"), (hf_mean, "mean-heads"), (hf_apart, "heads-apart"),
    (hf_scaled("d_model / h"), "widths"), (hf_page_widths, "widths"), (stub, "stub"),
])
def test_heads_first_mistakes_are_named(fn, label):
    assert_named(check_heads_first(fn), label)


def test_heads_first_names_a_float32_mask_on_float16_inputs():
    assert_named(check_heads_first(hf_float32_mask), "float16")     # P @ V then mixes float32 and float16


def test_heads_first_compares_the_dtype():
    def computes_in_float32(X, W_Q, W_K, W_V, W_O):
        return hf_einsum(*(t.float() for t in (X, W_Q, W_K, W_V, W_O)))

    assert_named(check_heads_first(computes_in_float32), "dtype", "float32", "float64")


def test_heads_first_names_a_weight_scaled_in_place():
    def fold_the_scale_into_W_Q(X, W_Q, W_K, W_V, W_O):
        W_Q /= math.sqrt(W_Q.shape[-1])         # the scale folded into W_Q, in the caller's tensor
        Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
        P = softmax(Q @ K.mT + causal_mask(X.shape[1], dtype=X.dtype))
        return torch.einsum("bhtv,hvm->btm", P @ V, W_O)

    assert_named(check_heads_first(fold_the_scale_into_W_Q), "in-place", "W_Q")


def test_heads_first_accepts_in_place_work_on_its_own_tensors():
    def masked_fill_in_place(X, W_Q, W_K, W_V, W_O):
        Q, K, V = (torch.einsum("btm,hmk->bhtk", X, W) for W in (W_Q, W_K, W_V))
        Z = Q @ K.mT
        Z /= math.sqrt(W_Q.shape[-1])
        Z.masked_fill_(future(X.shape[1]), float("-inf"))
        return torch.einsum("bhtv,hvm->btm", Z.softmax(-1) @ V, W_O)

    assert_accepted(check_heads_first(masked_fill_in_place))


def test_heads_first_blames_a_mistake_only_when_it_matches_every_case():
    def mean_only_in_float32(X, W_Q, W_K, W_V, W_O):
        return hf_mean(X, W_Q, W_K, W_V, W_O) if X.dtype == torch.float32 else hf_einsum(X, W_Q, W_K, W_V, W_O)

    assert_not_named(check_heads_first(mean_only_in_float32), "mean-heads")


def test_heads_first_cases_keep_every_width_apart():
    for group in heads._hf_cases():
        X, W_Q, W_K, W_V, W_O = group.cases[0]
        h, d_model, d_k = W_Q.shape
        d_v = W_V.shape[-1]
        assert len({d_k, d_v, d_model // h}) == 3 and d_model not in (h * d_k, h * d_v), (d_k, d_v, h, d_model)
    assert {g.cases[0][0].dtype for g in heads._hf_cases()} == {torch.float16, torch.float32, torch.float64}


# ------------------------------------------------------------------------------------------ predict: parameters
WANT = 8 * (96 * 16 * 2 + 96 * 24 * 2) + 8 * (16 + 16 + 24) + 96


def test_parameter_prediction():
    assert WANT == 61_984
    assert_named(check_attention_parameters(...), "stub")
    v = check_attention_parameters(WANT)
    assert v.ok and "61,984" in v.message, v
    assert not check_attention_parameters(WANT + 1).ok           # a count is exact
    assert_named(check_attention_parameters(12345), "values", "too low")
    assert_named(check_attention_parameters(10 ** 6), "values", "too high")
    assert_named(check_attention_parameters("many"), "type")


@pytest.mark.parametrize("guess, label", [
    (4 * 96 * 96 + 4 * 96, "chapter-layer"), (WANT - 8 * 56 - 96, "no-bias"),
    (WANT - 8 * 56 - 96 + 4 * 96, "biases-d_model"), (WANT - 96 + 8 * 24, "output-bias-wide"),
    (3 * (96 * 128 + 128) + 128 * 96 + 96, "values-as-keys"), (2 * (96 * 128 + 128) + 96 * 192 + 192 + 96 * 96 + 96,
                                                               "output-square"),
    (2 * (96 * 16 + 16) + 96 * 24 + 24 + 24 * 96 + 96, "one-head"), (8 * WANT, "heads-twice"),
])
def test_parameter_guesses_are_named(guess, label):
    v = check_attention_parameters(guess)
    assert_named(v, label)
    assert f"{guess:,}" in v.message


def test_a_parameter_verdict_says_which_side_and_never_the_formula():
    for g in check_attention_parameters.mistakes:
        if g in _GENERAL:
            continue
        for level in (1, 2):
            token = _LEVEL.set(level)
            try:
                text = g.say()
            finally:
                _LEVEL.reset(token)
            assert re.match(r"(far )?too (high|low)", text), (g.label, text)
            assert not re.search(r"[+·*]|\d", text), (g.label, text)     # no formula, no number to plug in


# ------------------------------------------------------------------------------------------ find the bug
def qkv_fixed(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d = d_model // h
    q, k, v = (X @ W_QKV).view(B, T, 3, h, d).permute(2, 0, 3, 1, 4)
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d ** 0.5
    P = Z.masked_fill(future(T), float("-inf")).softmax(dim=-1)
    return torch.einsum("bhij,bhjd->bihd", P, v).reshape(B, T, d_model) @ W_O


def qkv_the_page_way(X, W_QKV, W_O, h):
    Q, K, V = (split_heads(t, h) for t in (X @ W_QKV).chunk(3, dim=-1))
    return merge_heads(attention(Q, K, V)) @ W_O


def qkv_stale_permute(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d = d_model // h
    q, k, v = (X @ W_QKV).view(B, T, 3, h, d).permute(3, 0, 2, 1, 4)
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d ** 0.5
    P = Z.masked_fill(future(T), float("-inf")).softmax(dim=-1)
    return torch.einsum("bhij,bhjd->bihd", P, v).reshape(B, T, d_model) @ W_O


def qkv_no_head_move(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    d = d_model // h
    q, k, v = (X @ W_QKV).view(B, T, 3, h, d).unbind(dim=2)
    Z = torch.einsum("bhid,bhjd->bhij", q, k) / d ** 0.5
    P = Z.masked_fill(future(T), float("-inf")).softmax(dim=-1)
    return torch.einsum("bhij,bhjd->bihd", P, v).reshape(B, T, d_model) @ W_O


def qkv_merge_changed(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = (split_heads(t, h) for t in (X @ W_QKV).chunk(3, dim=-1))
    return attention(Q, K, V).reshape(B, T, d_model) @ W_O


def qkv_no_transpose(X, W_QKV, W_O, h):
    B, T, d_model = X.shape
    Q, K, V = (t.reshape(B, h, T, d_model // h) for t in (X @ W_QKV).chunk(3, dim=-1))
    return merge_heads(attention(Q, K, V)) @ W_O


@pytest.mark.parametrize("fn", [qkv_fixed, qkv_the_page_way])
def test_fixed_qkv_attention_accepts_the_fix(fn):
    assert_accepted(check_fixed_qkv_attention(fn))


@pytest.mark.parametrize("fn, label", [
    (buggy_qkv_attention, "unchanged"), (qkv_stale_permute, "stale-permute"), (qkv_no_head_move, "no-head-move"),
    (qkv_merge_changed, "merge-changed"), (qkv_no_transpose, "no-transpose"), (stub, "stub"),
])
def test_fixed_qkv_attention_mistakes_are_named(fn, label):
    assert_named(check_fixed_qkv_attention(fn), label)


def test_fixed_qkv_attention_compares_the_dtype():
    assert_named(check_fixed_qkv_attention(lambda *a: qkv_fixed(*a).float()), "dtype", "float64")


def test_fixed_qkv_attention_blames_a_mistake_only_when_it_matches_every_case():
    def no_transpose_only_when_h_is_3(X, W_QKV, W_O, h):
        return (qkv_no_transpose if h == 3 else qkv_fixed)(X, W_QKV, W_O, h)

    assert_not_named(check_fixed_qkv_attention(no_transpose_only_when_h_is_3), "no-transpose")


def test_the_buggy_function_runs_silently_and_is_wrong():
    for X, W_QKV, W_O, h in heads._qkv_cases():
        out = buggy_qkv_attention(X, W_QKV, W_O, h)
        assert out.shape == X.shape and not _close(out, qkv_the_page_way(X, W_QKV, W_O, h), 1e-3)


# ---- the tables of mistakes ---------------------------------------------------------------------------
TABLES = [
    (check_split_heads, heads._split_cases, heads._split_reference),
    (check_heads_first, lambda: [c for g in heads._hf_cases() for c in g.cases], heads._heads_first_reference),
    (check_fixed_qkv_attention, heads._qkv_cases, heads._qkv_reference),
]


def outcome(fn, case):
    try:
        return fn(*case)
    except Exception as e:  # noqa: BLE001 - an error is an outcome of its own
        return f"{type(e).__name__}: {e}"


def differ(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a != b
    return not _close(a, b, 1e-3)


@pytest.mark.parametrize("check, cases, reference", TABLES, ids=[t[0].__name__ for t in TABLES])
def test_every_planted_mistake_is_named_as_itself_and_differs_from_the_others(check, cases, reference):
    own = [m for m in check.mistakes if m not in _GENERAL and m.wrong is not None]
    for m in own:
        verdict = check(m.wrong)
        assert_named(verdict, m.label)
        assert verdict.message.startswith(m.hint) and verdict.message.endswith(MORE), (m.label, verdict)
    fns = [reference] + [m.wrong for m in own]
    for i in range(len(fns)):
        for j in range(i + 1, len(fns)):
            assert any(differ(outcome(fns[i], c), outcome(fns[j], c)) for c in cases()), (i, j)


def test_the_variants_with_their_default_switches_are_the_references():
    for group in heads._hf_cases():
        for case in group.cases:
            assert _close(heads._hf_variant(*case), heads._heads_first_reference(*case), group.atol)
    for case in heads._qkv_cases():
        assert _close(heads._qkv_variant(*case), heads._qkv_reference(*case), 1e-5)


def test_the_references_keep_the_inputs_dtype():
    for x, h in heads._split_cases():
        assert heads._split_reference(x, h).dtype == x.dtype
    for group in heads._hf_cases():
        assert isinstance(group, Group)
        X = group.cases[0][0]
        assert heads._heads_first_reference(*group.cases[0]).dtype == X.dtype
    for case in heads._qkv_cases():
        assert heads._qkv_reference(*case).dtype == case[0].dtype


def test_the_notebooks_buggy_function_is_the_librarys():
    nb = nbformat.read(BOOK / "06_multi_head.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code"
                  and c.source.startswith("def attention_from_W_QKV") and "solution" not in c.metadata.get("tags", []))
    space = {"torch": torch, "math": math, "check_fixed_qkv_attention": lambda fn: None}
    source = source.replace("    raise NotImplementedError  # delete this line once you have fixed the bug\n", "")
    exec(source, space)
    for case in heads._qkv_cases():
        assert torch.equal(space["attention_from_W_QKV"](*case), buggy_qkv_attention(*case))
