"""The costs appendix's checkers: the KV-cache prediction and the FLOPs of one cached generation step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import GPT, KVCache
from attnlib.checks import GPT2_SMALL, check_cached_step_flops, check_kv_cache_bytes
from conftest import assert_accepted, assert_mistakes_distinct, assert_named

# --- predict: the KV cache of a GPT-2-small-shaped model ------------------------------------------------------------

L, d_model, h, T = 12, 768, 12, 1024
RIGHT = 2 * L * T * d_model * 2                     # K and V, every layer, every position, 2 bytes each


def test_the_shape_is_gpt2_small():
    assert GPT2_SMALL == {"L": L, "d_model": d_model, "h": h, "T": T}


def test_kv_cache_bytes_stub_right_and_close():
    assert_named(check_kv_cache_bytes(...), "stub")
    assert_named(check_kv_cache_bytes(None), "stub")
    for value in (RIGHT, 37_748_736, 37.7e6, torch.tensor(RIGHT), np.int64(RIGHT)):
        assert_accepted(check_kv_cache_bytes(value))
    assert "37,748,736" in check_kv_cache_bytes(RIGHT).message


@pytest.mark.parametrize("value, label", [
    (L * T * d_model * 2, "half"),                   # K only
    (2 * L * T * d_model, "half"),                   # elements, not bytes
    (2 * L * T * d_model * 4, "float32"),
    (2 * T * d_model * 2, "one-layer"),
    (2 * L * T * (d_model // h) * 2, "one-layer"),   # one head's columns
    (2 * L * T * d_model * 2 * h, "times-h"),
    (L * h * T * T * 2, "T-squared"),
    (36, "units"),
    (37.7, "units"),
])
def test_kv_cache_bytes_typical_wrong_numbers(value, label):
    assert_named(check_kv_cache_bytes(value), label)


def test_kv_cache_bytes_other_answers():
    assert_named(check_kv_cache_bytes(1.0), "values")
    assert_named(check_kv_cache_bytes("a lot"), "type")


def test_the_formula_matches_a_cache_the_library_builds():
    model = GPT(20, 32, 4, 2, max_T=12).to(torch.float16).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 20, (1, 12)), caches)
    assert sum(c.K.nbytes + c.V.nbytes for c in caches) == 2 * 2 * 12 * 32 * 2


# --- extend: the FLOPs of one cached generation step ------------------------------------------------------------------

def step_flops(T_past, d_model, h, L, vocab_size):
    d = d_model
    return L * (6 * d * d + 2 * (T_past + 1) * d + 2 * (T_past + 1) * d + 2 * d * d + 16 * d * d) + 2 * d * vocab_size


def test_cached_step_flops_solution_and_stub():
    assert_accepted(check_cached_step_flops(step_flops))
    assert_accepted(check_cached_step_flops(lambda *a: np.int64(step_flops(*a))))
    assert_accepted(check_cached_step_flops(lambda *a: torch.tensor(step_flops(*a))))
    assert_named(check_cached_step_flops(lambda *a: None), "none")
    assert_named(check_cached_step_flops(lambda *a: 1 / 0), "error")


def full_forward(T_past, d, h, L, V):
    t = T_past + 1
    return L * (24 * t * d * d + 4 * t * t * d) + 2 * t * d * V


@pytest.mark.parametrize("fn, label", [
    (full_forward, "no-cache"),
    (lambda t, d, h, L, V: step_flops(t - 1, d, h, L, V), "own-key"),
    (lambda t, d, h, L, V: step_flops(t, d, h, L, V) + L * 4 * d * ((t + 1) ** 2 - (t + 1)), "quadratic"),
    (lambda t, d, h, L, V: step_flops(t, d, h, L, V) + L * 4 * (t + 1) * d * (h - 1), "times-h"),
    (lambda t, d, h, L, V: step_flops(t, d, h, 1, V), "one-layer"),
    (lambda t, d, h, L, V: step_flops(t, d, h, L, V) - 2 * d * V, "no-head"),
    (lambda t, d, h, L, V: step_flops(t, d, h, L, V) - L * 16 * d * d, "no-mlp"),
])
def test_cached_step_flops_mistakes(fn, label):
    assert_named(check_cached_step_flops(fn), label)


def test_a_full_forward_pass_is_much_dearer_than_a_cached_step():
    assert full_forward(1000, 64, 4, 2, 100) > 100 * step_flops(1000, 64, 4, 2, 100)


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import costs as M

    case = (5, 16, 4, 2, 54)
    assert float(M._step(*case)) == float(M._measured_step_flops(*case)) == step_flops(*case)
    assert_mistakes_distinct(case, M._measured_step_flops, M._STEP_MISTAKES)
