"""The costs appendix's checkers: when a batch's KV cache outgrows the weights, and the FLOPs of T_q tokens
after a cache. Each accepts the right answer in any numeric type, and names each typical wrong one without
giving the formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import GPT, GPTConfig, KVCache
from attnlib.checks import GPT2_SERVING, check_cache_outgrows_weights, check_chunk_flops
from helpers import assert_accepted, assert_named, stub

# --- predict: the batch's cache against the weights -----------------------------------------------------------------

L, d_model, h, B, PARAMS = 12, 768, 12, 8, 124_439_808
WEIGHT_BYTES = 2 * PARAMS                                      # float16
CACHE_BYTES_PER_TOKEN = B * 2 * L * d_model * 2                # K and V, every block, every sequence, float16
RIGHT = WEIGHT_BYTES / CACHE_BYTES_PER_TOKEN                   # ≈ 843.9 tokens per sequence


def test_the_setting_is_gpt2_small_serving_eight_sequences():
    assert GPT2_SERVING == {"L": L, "d_model": d_model, "h": h, "vocab_size": 50257, "max_T": 1024,
                            "params": PARAMS, "B": B}
    assert 843 < RIGHT < 844


def test_the_parameter_count_is_gpt2_smalls_with_its_head_tied():
    model = GPT(GPTConfig(50, 32, 4, 2, max_T=12, tie=True))
    from attnlib.checks.costs import _tied_params

    assert sum(p.numel() for p in model.parameters()) == _tied_params(50, 32, 2, 12)
    assert _tied_params(50257, 768, 12, 1024) == PARAMS


def test_cache_outgrows_weights_stub_right_and_close():
    assert_named(check_cache_outgrows_weights(...), "stub")
    assert_named(check_cache_outgrows_weights(None), "stub")
    for value in (RIGHT, 844, 843.9, 840, torch.tensor(844.0), np.int64(844), np.float32(843.9)):
        assert_accepted(check_cache_outgrows_weights(value))
    assert "844" in check_cache_outgrows_weights(844).message


@pytest.mark.parametrize("value, label, side", [
    (2 * RIGHT, "half-the-cache", "high"),                                 # K only
    (WEIGHT_BYTES / (B * 2 * L * d_model), "half-the-cache", "high"),      # the cache in numbers: unit left off
    (PARAMS / CACHE_BYTES_PER_TOKEN, "unit-left-off", "low"),              # the weights in numbers
    (WEIGHT_BYTES / (2 * L * d_model * 2), "no-batch", "high"),
    (WEIGHT_BYTES / (B * 2 * d_model * 2), "one-layer-or-head", "high"),   # one block
    (WEIGHT_BYTES / (B * 2 * L * 64 * 2), "one-layer-or-head", "high"),    # one head's columns
    (RIGHT / h, "times-h", "low"),
    (WEIGHT_BYTES, "bytes-not-tokens", "high"),
])
def test_cache_outgrows_weights_typical_wrong_numbers(value, label, side):
    v = check_cache_outgrows_weights(value)
    assert_named(v, label, f"too {side}" if label != "bytes-not-tokens" else "bytes")
    hint = v.message.split(" (you said")[0]
    assert "·" not in hint and "=" not in hint                       # no formula at the first level


def test_cache_outgrows_weights_other_answers():
    assert_named(check_cache_outgrows_weights(1.0), "values")
    assert_named(check_cache_outgrows_weights("a lot"), "type")


def test_the_formulas_match_a_cache_the_library_builds():
    model = GPT(GPTConfig(20, 32, 4, 2, max_T=12)).to(torch.float16).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 20, (1, 12)), caches)
    assert sum(c.K.nbytes + c.V.nbytes for c in caches) == 12 * 2 * 2 * 32 * 2


# --- extend: the FLOPs of T_q tokens after T_past cached ones -----------------------------------------------------

def chunk_flops(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    d, keys = d_model, T_past + T_q
    block = T_q * (6 * d * d + 2 * d * d + 4 * d * d_ff) + 2 * T_q * keys * d + 2 * T_q * keys * d
    return L * block + 2 * T_q * d * vocab_size


def test_chunk_flops_solution_in_any_numeric_type_and_stub():
    assert_accepted(check_chunk_flops(chunk_flops))
    assert_accepted(check_chunk_flops(lambda *a: float(chunk_flops(*a))))
    assert_accepted(check_chunk_flops(lambda *a: np.int64(chunk_flops(*a))))
    assert_accepted(check_chunk_flops(lambda *a: torch.tensor(chunk_flops(*a))))          # an int64 tensor
    assert_accepted(check_chunk_flops(lambda *a: torch.tensor([float(chunk_flops(*a))])))  # one element
    assert_named(check_chunk_flops(stub), "stub")
    assert_named(check_chunk_flops(lambda *a: None), "none")
    assert_named(check_chunk_flops(lambda *a: 1 / 0), "error")
    assert_named(check_chunk_flops(3), "not-callable")


def full_forward(T_past, T_q, d, h, L, d_ff, V):
    t = T_past + T_q
    return L * (8 * t * d * d + 4 * t * d * d_ff + 4 * t * t * d) + 2 * t * d * V


def with_(**change):
    """chunk_flops with one part of the count changed, written here independently of the checker's table."""
    def f(t, n, d, h, L, ff, V):
        keys = t if change.get("cached_keys_only") else t + n
        rows = 1 if change.get("one_row") else n
        attn = 4 * rows * keys * d
        if change.get("kept"):
            attn = 4 * (n * t + n * (n + 1) // 2) * d
        if change.get("square"):
            attn = 4 * (t + n) ** 2 * d
        width = 4 * d if change.get("assume_4d") else ff
        mlp = 0 if change.get("no_mlp") else 4 * rows * d * width
        block = 8 * rows * d * d + attn * change.get("heads", 1) + mlp
        head_rows = {"all": rows, "last": 1, "none": 0}[change.get("head", "all")]
        total = (1 if change.get("one_layer") else L) * block + 2 * head_rows * d * V
        return total / 2 if change.get("madd") else total
    return f


@pytest.mark.parametrize("fn, label", [
    (full_forward, "no-cache"),
    (with_(cached_keys_only=True), "own-keys"),
    (with_(kept=True), "masked-skipped"),
    (with_(square=True), "quadratic"),
    (lambda t, n, d, h, L, ff, V: with_(heads=h)(t, n, d, h, L, ff, V), "times-h"),
    (with_(one_layer=True), "one-layer"),
    (with_(head="none"), "no-head"),
    (with_(head="last"), "head-once"),
    (with_(no_mlp=True), "no-mlp"),
    (with_(assume_4d=True), "d_ff-assumed"),
    (with_(madd=True), "multiply-adds"),
    (with_(one_row=True), "one-new-token"),
    # K and V projected again over the cached rows, in two spellings
    (lambda t, n, d, h, L, ff, V: chunk_flops(t, n, d, h, L, ff, V) + 4 * L * t * d * d, "kv-recomputed"),
    (lambda t, n, d, h, L, ff, V: L * (2 * (t + n) * d * 2 * d + 4 * n * d * d + 4 * n * (t + n) * d + 4 * n * d * ff)
     + 2 * n * d * V, "kv-recomputed"),
])
def test_chunk_flops_mistakes(fn, label):
    assert_named(check_chunk_flops(fn), label)


def test_chunk_flops_first_hints_give_no_formula():
    from attnlib.checks import costs as M

    for m in M._CHUNK_MISTAKES:
        assert "·" not in m.hint and "=" not in m.hint and "**" not in m.hint, m.label


def test_chunk_flops_a_partly_right_count_is_not_blamed_on_a_mistake_it_matches_only_once():
    # right on the generation step and the prompt, off on the chunk after a cache: no mistake matches everywhere
    def off_on_the_chunk(t, n, d, h, L, ff, V):
        return chunk_flops(t, n, d, h, L, ff, V) + (1000 if t and n > 1 else 0)

    assert_named(check_chunk_flops(off_on_the_chunk), "values")


def test_a_full_forward_pass_is_much_dearer_than_a_cached_step():
    assert full_forward(1000, 1, 64, 4, 2, 256, 100) > 100 * chunk_flops(1000, 1, 64, 4, 2, 256, 100)


def test_the_tables_switches_default_to_the_answer_and_each_plants_its_own_mistake():
    from attnlib.checks import costs as M
    from attnlib.checks._core import _close

    for case in M._chunk_cases():
        assert float(M._chunk(*case)) == float(M._measured_chunk_flops(*case)) == chunk_flops(*case)
    outs = [[f(*c) for f in (M._measured_chunk_flops, *(m.wrong for m in M._CHUNK_MISTAKES))]
            for c in M._chunk_cases()]
    for a in range(len(outs[0])):
        for b in range(a + 1, len(outs[0])):
            assert any(not _close(o[a], o[b], 1e-9) for o in outs), (a, b)
    assert set(M._CHUNK_MISTAKES) <= set(check_chunk_flops.mistakes)


def test_wrong_answers_from_the_texts_are_named():
    from test_checks_mask import assert_wrong_answers

    flops = [(full_forward, "no-cache"), (with_(cached_keys_only=True), "own-keys"),
             (with_(kept=True), "masked-skipped"), (with_(one_layer=True), "one-layer"),
             (with_(head="last"), "head-once"), (with_(madd=True), "multiply-adds"),
             (with_(assume_4d=True), "d_ff-assumed"), (with_(no_mlp=True), "no-mlp")]
    assert_wrong_answers(check_chunk_flops, flops)
    numbers = [2 * RIGHT, PARAMS / CACHE_BYTES_PER_TOKEN, B * RIGHT, L * RIGHT, RIGHT / h, WEIGHT_BYTES, 1000]
    assert_wrong_answers(check_cache_outgrows_weights, [(g, None) for g in numbers])
