"""The softmax chapter's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import math

import pytest
import torch

from attnlib.checks import check_attention_output, check_stable_softmax

# ---- check_stable_softmax: fn(z) -> softmax along the last axis -----------------------------------------


def softmax_solution(z):
    e = (z - z.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_solution_logsumexp(z):
    return (z - z.logsumexp(dim=-1, keepdim=True)).exp()


def softmax_naive(z):
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def softmax_minus_min(z):
    e = (z - z.min(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_global_max(z):
    e = (z - z.max()).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_dim0(z):
    e = (z - z.amax(dim=0, keepdim=True)).exp()
    return e / e.sum(dim=0, keepdim=True)


def softmax_dim1(z):  # right on a (rows, n) table, wrong on a batch (B, rows, n)
    e = (z - z.amax(dim=1, keepdim=True)).exp()
    return e / e.sum(dim=1, keepdim=True)


def softmax_unnormalised(z):
    return (z - z.amax(dim=-1, keepdim=True)).exp()


def stub_softmax(z):
    raise NotImplementedError


@pytest.mark.parametrize("fn", [softmax_solution, softmax_solution_logsumexp, lambda z: torch.softmax(z, dim=-1)])
def test_stable_softmax_solutions_pass(fn):
    v = check_stable_softmax(fn)
    assert v.ok, v


@pytest.mark.parametrize("fn, label", [
    (softmax_naive, "naive"),
    (softmax_minus_min, "subtract-min"),
    (softmax_global_max, "global-max"),
    (softmax_dim0, "wrong-axis"),
    (softmax_dim1, "wrong-axis"),
    (softmax_unnormalised, "not-normalised"),
    (stub_softmax, "stub"),
])
def test_stable_softmax_mistakes_are_named(fn, label):
    v = check_stable_softmax(fn)
    assert not v.ok and v.mistake == label, v


# ---- check_attention_output: fn(Q, K, V) -> (..., T, d_v) -----------------------------------------------

def future(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def weights(Q, K, scale=None, mask=True, dim=-1):
    d_k, T = Q.shape[-1], Q.shape[-2]
    S = Q @ K.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    if mask:
        S = S.masked_fill(future(T), float("-inf"))
    return torch.softmax(S, dim=dim)


def output_solution(Q, K, V):
    return weights(Q, K) @ V


def output_sdpa(Q, K, V):
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)


def output_times_K(Q, K, V):
    return weights(Q, K) @ K


def output_no_scale(Q, K, V):
    return weights(Q, K, scale=1.0) @ V


def output_scale_dk(Q, K, V):
    return weights(Q, K, scale=Q.shape[-1]) @ V


def output_no_mask(Q, K, V):
    return weights(Q, K, mask=False) @ V


def output_mask_after(Q, K, V):
    P = weights(Q, K, mask=False).masked_fill(future(Q.shape[-2]), 0.0)
    return P @ V


def output_wrong_axis(Q, K, V):
    return weights(Q, K, dim=-2) @ V


def stub_output(Q, K, V):
    raise NotImplementedError


@pytest.mark.parametrize("fn", [output_solution, output_sdpa])
def test_attention_output_solutions_pass(fn):
    v = check_attention_output(fn)
    assert v.ok, v


@pytest.mark.parametrize("fn, label", [
    (output_times_K, "times-K"),
    (output_no_scale, "no-scale"),
    (output_scale_dk, "scale-by-dk"),
    (output_no_mask, "no-mask"),
    (output_mask_after, "after-softmax"),
    (output_wrong_axis, "wrong-axis"),
    (stub_output, "stub"),
])
def test_attention_output_mistakes_are_named(fn, label):
    v = check_attention_output(fn)
    assert not v.ok and v.mistake == label, v


def test_an_unrecognised_answer_gets_a_generic_verdict():
    assert check_stable_softmax(lambda z: torch.zeros_like(z)).mistake == "values"
    assert check_attention_output(lambda Q, K, V: Q).mistake == "shape"


def test_every_planted_mistake_is_recognised_as_itself():
    from attnlib.checks import softmax

    for check, mistakes in [(check_stable_softmax, softmax._SOFTMAX_MISTAKES),
                            (check_attention_output, softmax._ATTENTION_MISTAKES)]:
        for m in mistakes:
            v = check(m.wrong)
            assert not v.ok and v.mistake == m.label and v.message == m.hint, (m.label, v)
