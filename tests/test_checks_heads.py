"""The chapter 6 checkers accept the solutions, name every planted mistake, and recognise the stub; they
compare dtypes, notice inputs changed in place, blame a mistake only when it matches on every case, and no
first-level hint holds the code of the book's solution."""

from __future__ import annotations

import functools
import math
import re

import nbformat
import pytest
import torch

from attnlib import MultiHeadAttention, merge_heads, show_source, split_heads
from attnlib.attention import attention, causal_mask, softmax
from attnlib.checks import (
    buggy_folded_attention,
    check_attention_parameters,
    check_folded_heads,
    check_heads_first,
    check_per_head_writes,
    heads,
)
from attnlib.checks._core import _GENERAL, _LEVEL, AS_GIVEN, MORE, Group, _close
from attnlib.heads import multi_head_attention
from helpers import BOOK, assert_accepted, assert_named, stub


def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


_GENERIC_LABELS = ("values", "shape", "error", "type")   # verdicts that name no mistake


def assert_not_named(verdict, label):
    assert not verdict.ok and verdict.mistake != label, (label, verdict)


# ------------------------------------------------------------------------------------------ per-head writes
def writes_loop(O, W_O):
    d_v, W = O.shape[-1], W_O.weight.T                   # W: (h·d_v, d_model), the book's W_O
    return torch.stack([O[:, n] @ W[n * d_v:(n + 1) * d_v] for n in range(O.shape[1])], dim=1)


def writes_einsum(O, W_O):
    B, h, T, d_v = O.shape
    return torch.einsum("bhtv,hvm->bhtm", O, W_O.weight.T.unflatten(0, (h, d_v)))


def writes_linear(O, W_O):
    """Each head through torch's linear, with its columns of the stored weight and no bias."""
    d_v = O.shape[-1]
    return torch.stack([torch.nn.functional.linear(O[:, n], W_O.weight[:, n * d_v:(n + 1) * d_v])
                        for n in range(O.shape[1])], dim=1)


def writes_one_head_at_a_time(O, W_O):
    """Each head alone through the whole layer (the other heads zeroed), the bias taken off again."""
    alone = torch.eye(O.shape[1], dtype=O.dtype)[:, None, :, None, None] * O      # (h, B, h, T, d_v)
    return torch.stack([W_O(merge_heads(o)) - W_O.bias for o in alone], dim=1)


def writes_stored_rows(O, W_O):
    d_v = O.shape[-1]
    return torch.stack([O[:, n] @ W_O.weight[n * d_v:(n + 1) * d_v] for n in range(O.shape[1])], dim=1)


def writes_linear_with_bias(O, W_O):
    d_v = O.shape[-1]
    return torch.stack([torch.nn.functional.linear(O[:, n], W_O.weight[:, n * d_v:(n + 1) * d_v], W_O.bias)
                        for n in range(O.shape[1])], dim=1)


def writes_d_head(O, W_O):
    h = O.shape[1]
    d_head = W_O.out_features // h                       # the chapter's width, not O's
    W = W_O.weight.T
    return torch.stack([O[:, n] @ W[n * d_head:(n + 1) * d_head] for n in range(h)], dim=1)


def writes_stacked_first(O, W_O):
    return writes_loop(O, W_O).transpose(0, 1)


def writes_float32_buffer(O, W_O):
    out = torch.zeros(*O.shape[:-1], W_O.out_features)
    d_v = O.shape[-1]
    for n in range(O.shape[1]):
        out[:, n] = O[:, n] @ W_O.weight.T[n * d_v:(n + 1) * d_v]
    return out


def writes_merged_by_reshape(O, W_O):
    B, h, T, d_v = O.shape
    concat = O.reshape(B, T, h * d_v)                    # the heads side by side, without the transpose
    W = W_O.weight.T
    return torch.stack([concat[..., n * d_v:(n + 1) * d_v] @ W[n * d_v:(n + 1) * d_v] for n in range(h)], dim=1)


def writes_through_float32(O, W_O):
    return (O.float() @ W_O.weight.T.float().unflatten(0, (O.shape[1], -1))).to(O.dtype)


def writes_in_place(O, W_O):
    O.mul_(2)                                            # O is scaled where it lies, then divided back out
    return writes_loop(O, W_O) / 2


@pytest.mark.parametrize("fn", [writes_loop, writes_einsum, writes_linear, writes_one_head_at_a_time,
                                heads._writes_reference])
def test_writes_solutions_are_accepted(fn):
    assert_accepted(check_per_head_writes(fn))


@pytest.mark.parametrize("fn, label", [
    (writes_stored_rows, "orientation"), (writes_linear_with_bias, "bias-each"), (writes_d_head, "widths"),
    (writes_stacked_first, "heads-in-front"), (lambda O, W_O: W_O(merge_heads(O)), "summed"),
    (writes_merged_by_reshape, "merge-no-transpose"),
    (writes_float32_buffer, "dtype"), (writes_through_float32, "precision"),
    (writes_in_place, "in-place"), (stub, "stub"),
])
def test_writes_mistakes_are_named(fn, label):
    assert_named(check_per_head_writes(fn), label)


def test_writes_blames_a_mistake_only_when_it_matches_every_case():
    def bias_each_on_the_chapters_widths_only(O, W_O):
        wide = O.shape[1] * O.shape[-1] == W_O.out_features
        return writes_linear_with_bias(O, W_O) if wide else writes_loop(O, W_O)

    verdict = check_per_head_writes(bias_each_on_the_chapters_widths_only)
    assert_not_named(verdict, "bias-each")
    assert_named(verdict, "values")


def test_writes_cases_have_both_widths_and_the_terms_sum_to_the_layer():
    cases = heads._writes_cases()
    assert {heads._CHAPTER_WIDTHS(c) for c in cases} == {True, False}
    assert all(O.shape[0] != O.shape[1] for O, _ in cases) and any(O.dtype == torch.float64 for O, _ in cases)
    for O, W_O in cases:
        with torch.no_grad():
            assert _close(heads._writes_reference(O, W_O).sum(1) + W_O.bias, W_O(merge_heads(O)), 1e-5)


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


def test_heads_first_cases_keep_every_width_apart_but_the_last():
    widths = []
    for group in heads._hf_cases():
        X, W_Q, W_K, W_V, W_O = group.cases[0]
        h, d_model, d_k = W_Q.shape
        widths.append((len({d_k, W_V.shape[-1], d_model // h}), d_model in (h * d_k, h * W_V.shape[-1])))
    assert widths == [(3, False)] * 3 + [(1, True)]     # the last: the chapter's d_k = d_v = d_model / h
    assert [g.cases[0][0].dtype for g in heads._hf_cases()] == [torch.float32, torch.float64, torch.float16,
                                                                 torch.float32]


# Wrong answers written from the exercise text (loops, SDPA, einsum): the common slips, each named.
def hf_loop_unscaled(X, W_Q, W_K, W_V, W_O):
    T = X.shape[1]
    return sum(torch.softmax((X @ W_Q[n]) @ (X @ W_K[n]).mT + causal_mask(T, dtype=X.dtype), -1) @ (X @ W_V[n])
               @ W_O[n] for n in range(W_Q.shape[0]))


def hf_tril_after_softmax(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    P = torch.softmax(Q @ K.mT / math.sqrt(W_Q.shape[-1]), -1).tril()
    return torch.einsum("bhtv,hvm->btm", P @ V, W_O)


def hf_sdpa_merged_by_reshape(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)
    return out.reshape(X.shape[0], X.shape[1], -1) @ W_O.flatten(0, 1)


def hf_loop_scaled_by_d_v(X, W_Q, W_K, W_V, W_O):
    T, d_v = X.shape[1], W_V.shape[-1]
    heads_ = [softmax((X @ W_Q[n]) @ (X @ W_K[n]).mT / math.sqrt(d_v) + causal_mask(T, dtype=X.dtype))
              @ (X @ W_V[n]) for n in range(W_Q.shape[0])]
    return torch.cat(heads_, -1) @ W_O.reshape(-1, W_O.shape[-1])


def hf_weights_reshaped(X, W_Q, W_K, W_V, W_O):
    h, d_model, _ = W_Q.shape
    Q, K, V = (split_heads(X @ W.reshape(d_model, -1), h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O.reshape(-1, d_model)


def hf_mean_of_heads(X, W_Q, W_K, W_V, W_O):
    return torch.stack([attention(X @ W_Q[n], X @ W_K[n], X @ W_V[n]) @ W_O[n] for n in range(len(W_Q))]).mean(0)


def hf_sdpa_not_causal(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    return torch.einsum("bhtv,hvm->btm", torch.nn.functional.scaled_dot_product_attention(Q, K, V), W_O)


def hf_loop_float32_mask(X, W_Q, W_K, W_V, W_O):
    T, d_k = X.shape[1], W_Q.shape[-1]
    return sum(torch.softmax((X @ W_Q[n]) @ (X @ W_K[n]).mT / math.sqrt(d_k) + causal_mask(T), -1)
               @ (X @ W_V[n]) @ W_O[n] for n in range(W_Q.shape[0]))


def hf_scaled_by_chapter_width(X, W_Q, W_K, W_V, W_O):
    h, d_model, _ = W_Q.shape
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    P = softmax(Q @ K.mT / math.sqrt(d_model // h) + causal_mask(X.shape[1], dtype=X.dtype))
    return torch.einsum("bhtv,hvm->btm", P @ V, W_O)


def hf_softmax_over_queries(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    Z = Q @ K.mT / math.sqrt(W_Q.shape[-1]) + causal_mask(X.shape[1], dtype=X.dtype)
    return torch.einsum("bhtv,hvm->btm", torch.softmax(Z, dim=-2) @ V, W_O)


HEADS_FIRST_WRONG = [
    (hf_loop_unscaled, "no-scale"), (hf_tril_after_softmax, "mask-after-softmax"),
    (hf_sdpa_merged_by_reshape, "merge-no-transpose"), (hf_loop_scaled_by_d_v, "scale-d_v"),
    (hf_weights_reshaped, "fused-by-reshape"), (hf_mean_of_heads, "mean-heads"), (hf_sdpa_not_causal, "no-mask"),
    (hf_loop_float32_mask, "float16"), (hf_scaled_by_chapter_width, "widths"),
    (hf_softmax_over_queries, "softmax-over-queries"),
]


def test_heads_first_names_the_common_slips_written_from_the_text():
    verdicts = [(check_heads_first(fn), label) for fn, label in HEADS_FIRST_WRONG]
    assert not any(v.ok for v, _ in verdicts)
    assert all(v.mistake == label for v, label in verdicts if label), [(v.mistake, l) for v, l in verdicts]
    assert all(v.mistake in _GENERIC_LABELS for v, label in verdicts if not label), verdicts   # never misnamed
    assert sum(bool(label) for _, label in verdicts) / len(verdicts) >= 0.85


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
    (WANT - 8 * 56 + 56, "biases-one-head"), (WANT - 96, "no-output-bias"),
    (WANT - 96 + 8 * 96, "output-bias-per-head"),
    (WANT - 8 * 24 * 96 + 24 * 96, "output-one-head"), (WANT - 8 * 24 * 96 - 96, "no-output"),
    (4 * 96 * 96 + 8 * 56 + 96, "square-matrices"),
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
def folded(fold, unfold):
    """The exercise's function with its fold of (B, h) into B·h and its unfolding written as given."""
    def fn(X, W_QKV, W_O, h):
        B, T, d_model = X.shape
        d = d_model // h
        Q, K, V = (fold(t, B, T, h, d) for t in (X @ W_QKV).chunk(3, dim=-1))
        P = torch.softmax(torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(d) + causal_mask(T, dtype=X.dtype), dim=-1)
        return unfold(torch.bmm(P, V), B, T, h, d).reshape(B, T, d_model) @ W_O
    return fn


def fold_right(t, B, T, h, d):
    return t.reshape(B, T, h, d).transpose(1, 2).reshape(B * h, T, d)


def fold_heads_outer(t, B, T, h, d):
    return t.reshape(B, T, h, d).permute(2, 0, 1, 3).reshape(h * B, T, d)


def unfold_right(o, B, T, h, d):
    return o.reshape(B, h, T, d).permute(0, 2, 1, 3)


def unfold_as_given(o, B, T, h, d):
    return o.reshape(h, B, T, d).permute(1, 2, 0, 3)


def folded_per_sequence(X, W_QKV, W_O, h):
    """Right on one sequence, so run one sequence at a time."""
    return torch.cat([buggy_folded_attention(X[b:b + 1], W_QKV, W_O, h) for b in range(X.shape[0])])


def folded_the_page_way(X, W_QKV, W_O, h):
    Q, K, V = (split_heads(t, h) for t in (X @ W_QKV).chunk(3, dim=-1))
    return merge_heads(attention(Q, K, V)) @ W_O


@pytest.mark.parametrize("fn", [
    folded(fold_right, unfold_right), folded(fold_heads_outer, unfold_as_given), folded_per_sequence,
    folded_the_page_way, folded(fold_right, lambda o, B, T, h, d: o.unflatten(0, (B, h)).transpose(1, 2)),
    multi_head_attention,
])
def test_folded_heads_accepts_the_fix(fn):
    assert_accepted(check_folded_heads(fn))


# Wrong answers written from the exercise text: what a learner who edits the given cell would write.
FOLDED_WRONG = [
    (folded(fold_right, unfold_as_given), "unchanged"),                                   # comments edited only
    (folded(fold_right, lambda o, B, T, h, d: o.view(h, B, T, d).transpose(0, 1).transpose(1, 2)), "unchanged"),
    (folded(fold_right, lambda o, B, T, h, d: o.reshape(B, h, T, d).permute(1, 2, 0, 3)), "stale-permute"),
    (folded(fold_right, lambda o, B, T, h, d: o.reshape(B, h, T, d)), "merge-no-transpose"),
    (folded(fold_right, lambda o, B, T, h, d: o.view(B, T, h, d)), "merge-no-transpose"),
    (folded(fold_heads_outer, unfold_right), "both-swapped"),
    (folded(lambda t, B, T, h, d: t.reshape(B * h, T, d), unfold_right), "fold-by-reshape"),
    (folded(lambda t, B, T, h, d: t.reshape(B, T, h, d).transpose(1, 2).reshape(B * h, T, d),
            lambda o, B, T, h, d: o.reshape(h, B, T, d).transpose(0, 1).transpose(1, 2)), "unchanged"),
    (folded(fold_right, lambda o, B, T, h, d: o.reshape(B, h, T, d).permute(0, 2, 3, 1)), "merge-interleaved"),
    (functools.partial(heads._folded_variant, scale="d_model"), "scale-d_model"),
    (functools.partial(heads._folded_variant, unfold="h B", scale="d_model"), "scale-d_model"),
]


def test_realistic_wrong_fixes_are_rejected_and_mostly_named():
    verdicts = [(check_folded_heads(fn), label) for fn, label in FOLDED_WRONG]
    assert not any(v.ok for v, _ in verdicts)
    assert all(v.mistake == label for v, label in verdicts if label), [(v.mistake, l) for v, l in verdicts]
    assert all(v.mistake in _GENERIC_LABELS for v, label in verdicts if not label), verdicts   # never misnamed
    assert sum(bool(label) for _, label in verdicts) / len(verdicts) >= 0.85


def test_folded_heads_names_any_answer_right_on_one_sequence_only():
    def mixes_sequences(X, W_QKV, W_O, h):
        return folded_the_page_way(X.flip(0), W_QKV, W_O, h)       # each sequence gets another's output
    assert_named(check_folded_heads(mixes_sequences), "sequences-mixed")


@pytest.mark.parametrize("fn, label", [(buggy_folded_attention, "unchanged"), (stub, "stub")])
def test_folded_heads_knows_the_given_function_and_the_stub(fn, label):
    assert_named(check_folded_heads(fn), label)
    assert check_folded_heads(buggy_folded_attention).message.startswith(AS_GIVEN)


def test_folded_heads_compares_the_dtype():
    assert_named(check_folded_heads(lambda *a: folded_the_page_way(*a).float()), "dtype", "float64")


def test_the_buggy_function_is_right_on_one_sequence_and_wrong_on_a_batch():
    for X, W_QKV, W_O, h in heads._folded_cases():
        out, want = buggy_folded_attention(X, W_QKV, W_O, h), folded_the_page_way(X, W_QKV, W_O, h)
        assert out.shape == X.shape and _close(out, want, 1e-5) == (X.shape[0] == 1)
    assert {X.shape[0] for X, *_ in heads._folded_cases()} >= {1, 2, 3}


def test_the_chapters_listing_is_its_step_and_equals_the_layer():
    source = show_source(multi_head_attention).data
    assert "@boundary" not in source and "require_" not in source and len(source.splitlines()) <= 15
    mha = MultiHeadAttention(16, 4, bias=False, backend="plain")
    X = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert _close(multi_head_attention(X, mha.W_QKV.weight.T, mha.W_O.weight.T, 4), mha(X), 1e-6)


# ---- the tables of mistakes ---------------------------------------------------------------------------
TABLES = [
    (check_per_head_writes, heads._writes_cases, heads._writes_reference),
    (check_heads_first, lambda: [c for g in heads._hf_cases() for c in g.cases], heads._heads_first_reference),
    (check_folded_heads, heads._folded_cases, multi_head_attention),
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
    own = [m for m in check.mistakes if m not in _GENERAL and m.wrong is not None and m.where is None]
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
    for case in heads._folded_cases():
        assert _close(heads._folded_variant(*case), multi_head_attention(*case), 1e-5)


def test_the_references_keep_the_inputs_dtype():
    for O, W_O in heads._writes_cases():
        assert heads._writes_reference(O, W_O).dtype == O.dtype
    for group in heads._hf_cases():
        assert isinstance(group, Group)
        X = group.cases[0][0]
        assert heads._heads_first_reference(*group.cases[0]).dtype == X.dtype
    for case in heads._folded_cases():
        assert multi_head_attention(*case).dtype == case[0].dtype


def test_the_notebooks_buggy_function_is_the_librarys():
    nb = nbformat.read(BOOK / "06_multi_head.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "solution" not in c.metadata.get("tags", [])
                  and c.source.startswith("def folded_heads_attention"))
    space = {"torch": torch, "math": math, "causal_mask": causal_mask, "check_folded_heads": lambda fn: None}
    source = source.replace("    raise NotImplementedError  # delete this line once you have fixed the bug\n", "")
    exec(source, space)
    for case in heads._folded_cases():
        assert torch.equal(space["folded_heads_attention"](*case), buggy_folded_attention(*case))
    verdict = check_folded_heads(space["folded_heads_attention"])                      # the page's copy
    assert verdict.mistake == "unchanged" and verdict.message.startswith(AS_GIVEN), verdict


# ---- classes of wrong answers that must keep their names -------------------------------------------------------
def hf_stacked_heads_merged_by_reshape(X, W_Q, W_K, W_V, W_O):   # (B, h, T, d_v) joined by a reshape alone
    heads_ = torch.stack([attention(X @ W_Q[n], X @ W_K[n], X @ W_V[n]) for n in range(len(W_Q))], dim=1)
    return heads_.reshape(X.shape[0], X.shape[1], -1) @ W_O.reshape(-1, W_O.shape[-1])


def hf_einsum_merged_by_view(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    out = attention(Q, K, V)                                        # (B, h, T, d_v), contiguous
    return out.view(X.shape[0], X.shape[1], -1) @ W_O.flatten(0, 1)


def hf_fill_minus_1e9(X, W_Q, W_K, W_V, W_O):
    Q, K, V = (torch.einsum("btm,hmd->bhtd", X, W) for W in (W_Q, W_K, W_V))
    Z = (Q @ K.mT / math.sqrt(W_Q.shape[-1])).masked_fill(future(X.shape[1]), -1e9)
    return torch.einsum("bhtv,hvm->btm", torch.softmax(Z, -1) @ V, W_O)


@pytest.mark.parametrize("fn", [hf_sdpa_merged_by_reshape, hf_stacked_heads_merged_by_reshape,
                                hf_einsum_merged_by_view])
def test_heads_merged_by_a_reshape_without_transpose_are_named_at_both_levels(fn):
    merge = next(m for m in check_heads_first.mistakes if m.label == "merge-no-transpose")
    for level, text in ((1, merge.hint), (2, merge.more)):
        v = check_heads_first(fn, hint=level)
        assert_named(v, "merge-no-transpose")
        assert v.message.startswith(text), v


def test_heads_first_blames_a_minus_1e9_fill_in_float16_on_the_fill_value():
    for level in (1, 2):
        v = check_heads_first(hf_fill_minus_1e9, hint=level)
        assert_named(v, "finite")
        assert "dtype of its own" not in v.message and "two of your tensors" not in v.message, v
