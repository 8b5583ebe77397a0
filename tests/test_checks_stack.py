"""The stack checkers accept the solution, reject the stub and name every planted mistake."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib import Block, KVCache, attention, merge_heads
from attnlib.checks import (
    check_build_blocks,
    check_cached_generation,
    check_next_token_windows,
    check_run_stack,
)
from conftest import assert_accepted, assert_each_mistake_named, assert_mistakes_distinct, assert_named, stub

# --- build_blocks -------------------------------------------------------------------------------------------------

def build_ok(L, d_model, h):
    return nn.ModuleList(Block(d_model, h) for _ in range(L))


def build_same_block(L, d_model, h):
    block = Block(d_model, h)
    return nn.ModuleList([block for _ in range(L)])


def build_shared_attention(L, d_model, h):
    blocks = nn.ModuleList(Block(d_model, h) for _ in range(L))
    for b in blocks:
        b.attn = blocks[0].attn
    return blocks


def build_shared_mlp(L, d_model, h):
    blocks = nn.ModuleList(Block(d_model, h) for _ in range(L))
    for b in blocks[1:]:
        b.mlp = blocks[0].mlp
    return blocks


def build_shared_norm(L, d_model, h):
    blocks = nn.ModuleList(Block(d_model, h) for _ in range(L))
    for b in blocks[1:]:
        b.ln_2 = blocks[0].ln_2
    return blocks


def build_too_few(L, d_model, h):
    return nn.ModuleList(Block(d_model, h) for _ in range(1, L))


def build_too_many(L, d_model, h):
    return nn.ModuleList(Block(d_model, h) for _ in range(L + 1))


def build_wide_mlp(L, d_model, h):
    return nn.ModuleList(Block(d_model, h, d_ff=2 * d_model) for _ in range(L))


def build_plain_list(L, d_model, h):
    return [Block(d_model, h) for _ in range(L)]


def build_generator(L, d_model, h):
    return (Block(d_model, h) for _ in range(L))


@pytest.mark.parametrize("fn, label", [
    (build_same_block, "same-block"), (build_shared_attention, "shared-attention"),
    (build_shared_mlp, "shared-mlp"), (build_shared_norm, "shared-parameters"), (build_too_few, "wrong-count"),
    (build_too_many, "wrong-count"), (build_wide_mlp, "parameter-count"), (build_plain_list, "not-modulelist"),
    (build_generator, "not-modulelist"), (lambda L, d, h: tuple(build_ok(L, d, h)), "not-modulelist"),
])
def test_build_blocks_mistakes(fn, label):
    v = check_build_blocks(fn)
    assert_named(v, label)


def test_build_blocks_reports_a_parameter_count_as_a_count():
    v = check_build_blocks(build_wide_mlp)
    per_block = sum(p.numel() for p in Block(16, 4, d_ff=32).parameters())
    want = sum(p.numel() for p in Block(16, 4).parameters())
    assert f"your stack has {3 * per_block:,} parameters, expected {3 * want:,}" in v.message, v


def test_build_blocks_says_what_a_plain_list_hides():
    v = check_build_blocks(build_plain_list)
    assert "sees 0 of its" in v.message, v


def test_build_blocks_solution_and_stub():
    assert check_build_blocks(build_ok).ok
    assert_named(check_build_blocks(stub), "stub")


def test_build_blocks_leaves_the_random_state_alone():
    torch.manual_seed(3)
    a = torch.rand(3)
    torch.manual_seed(3)
    check_build_blocks(build_ok)
    assert torch.equal(torch.rand(3), a)


@pytest.mark.parametrize("fn", [lambda L, d, h: [nn.Linear(d, d) for _ in range(L)], lambda L, d, h: Block(d, h),
                                lambda L, d, h: 3])
def test_build_blocks_rejects_other_things(fn):
    v = check_build_blocks(fn)
    assert_named(v, "type")


# --- run_stack ----------------------------------------------------------------------------------------------------

def run_ok(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X)
    return ln_f(X)


def run_x0(X0, blocks, ln_f):
    outs = [block(X0) for block in blocks]
    return ln_f(outs[-1])


def run_no_norm(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = block(X)
    return X


def run_norm_every(X0, blocks, ln_f):
    X = X0
    for block in blocks:
        X = ln_f(block(X))
    return X


def run_reversed(X0, blocks, ln_f):
    X = X0
    for block in reversed(list(blocks)):
        X = block(X)
    return ln_f(X)


def run_norm_first(X0, blocks, ln_f):
    X = ln_f(X0)
    for block in blocks:
        X = block(X)
    return X


@pytest.mark.parametrize("fn, label", [
    (run_x0, "x0-every-block"), (run_no_norm, "no-final-norm"), (run_norm_every, "norm-every-block"),
    (run_reversed, "reversed"), (run_norm_first, "norm-first"),
])
def test_run_stack_mistakes(fn, label):
    v = check_run_stack(fn)
    assert_named(v, label)


def test_run_stack_solution_and_stub():
    assert check_run_stack(run_ok).ok
    assert_named(check_run_stack(stub), "stub")


def test_a_run_stack_answer_that_mutates_the_modules_cannot_pass_or_change_later_verdicts():
    def make_ln_f_plain(X0, blocks, ln_f):
        with torch.no_grad():
            ln_f.weight.fill_(1.0)
            ln_f.bias.zero_()
        return run_ok(X0, blocks, torch.nn.LayerNorm(X0.shape[-1]))   # right only for the ln_f it has changed

    assert not check_run_stack(make_ln_f_plain).ok
    assert check_run_stack(run_ok).ok
    assert_named(check_run_stack(run_no_norm), "no-final-norm")


# --- next_token_windows -------------------------------------------------------------------------------------------

def windows_ok(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y


def windows_no_shift(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    return x, x.clone()


def windows_wrong_way(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s - 1:s + T - 1] for s in starts.tolist()])
    return x, y


def windows_swapped(data, starts, T):
    x, y = windows_ok(data, starts, T)
    return y, x


def windows_by_two(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 2:s + T + 2] for s in starts.tolist()])
    return x, y


@pytest.mark.parametrize("fn, label", [
    (windows_no_shift, "no-shift"), (windows_wrong_way, "wrong-way"), (windows_swapped, "swapped"),
    (windows_by_two, "shift-by-two"),
])
def test_windows_mistakes(fn, label):
    v = check_next_token_windows(fn)
    assert_named(v, label)


def test_windows_solution_and_stub():
    assert check_next_token_windows(windows_ok).ok
    assert_named(check_next_token_windows(stub), "stub")


# --- cached generation (extend) ----------------------------------------------------------------------------------

def generate_cached(model, ids, n_new):
    past = [None] * len(model.blocks)                # per layer: (K, V), each (B, h, T_past, d_head)
    new = ids
    for _ in range(n_new):
        offset = ids.shape[1] - new.shape[1]
        X = model.embed_tokens(new, offset)
        for l, block in enumerate(model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), offset)
            if past[l] is not None:
                K, V = torch.cat([past[l][0], K], -2), torch.cat([past[l][1], V], -2)
            past[l] = (K, V)
            X = X + block.attn.W_O(merge_heads(attention(Q, K, V)))
            X = X + block.mlp(block.ln_2(X))
        new = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, new], dim=1)
    return ids


def generate_with_library_cache(model, ids, n_new):
    """Also right: the learner's own loop over the blocks, keeping K and V in the library's KVCache."""
    caches = [KVCache() for _ in model.blocks]
    new = ids
    for _ in range(n_new):
        X = model.embed_tokens(new, len(caches[0]))
        for block, cache in zip(model.blocks, caches):
            X = block(X, cache=cache)
        new = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, new], dim=1)
    return ids


def _variant(mistake):
    """generate_cached with one typical mistake planted (written out again here, not imported)."""
    def generate(model, ids, n_new):
        past = [None] * len(model.blocks)
        new = ids
        for _ in range(n_new):
            offset = 0 if mistake == "no-offset" else ids.shape[1] - new.shape[1]
            X = model.embed_tokens(new, offset)
            for l, block in enumerate(model.blocks):
                Q, K_new, V_new = block.attn.qkv(block.ln_1(X), offset)
                K, V = K_new, V_new
                if past[l] is not None:
                    K, V = torch.cat([past[l][0], K_new], -2), torch.cat([past[l][1], V_new], -2)
                if mistake == "not-self" and past[l] is not None:
                    out = attention(Q, past[l][0], past[l][1], causal=False)
                elif mistake == "top-left-mask":
                    out = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
                elif mistake == "prompt-unmasked" and past[l] is None:
                    out = attention(Q, K, V, causal=False)
                else:
                    out = attention(Q, K, V)
                if past[l] is None or mistake != "cache-not-updated":
                    past[l] = (K, V)
                X = X + block.attn.W_O(merge_heads(out))
                X = X + block.mlp(block.ln_2(X))
            new = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, new], dim=1)
        return ids
    return generate


def generate_recomputing(model, ids, n_new):
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("fn", [generate_cached, generate_with_library_cache])
def test_cached_generation_solution_is_accepted(fn):
    v = check_cached_generation(fn)
    assert_accepted(v)


@pytest.mark.parametrize("label", ["no-offset", "top-left-mask", "not-self", "cache-not-updated",
                                   "prompt-unmasked"])
def test_cached_generation_mistakes_are_named(label):
    v = check_cached_generation(_variant(label))
    assert_named(v, label)


@pytest.mark.parametrize("fn, label", [
    (generate_recomputing, "no-cache"), (lambda m, ids, n: m.generate(ids, n), "shortcut"),
    (lambda m, ids, n: generate_cached(m, ids, n)[:, ids.shape[1]:], "prompt-missing"),
    (lambda m, ids, n: generate_cached(m, ids, n - 1), "shape"),
    (lambda m, ids, n: generate_cached(m, ids, n).tolist(), "type"), (stub, "stub"),
])
def test_cached_generation_other_failures(fn, label):
    v = check_cached_generation(fn)
    assert_named(v, label)


def test_cached_generation_cases_have_clear_greedy_choices():
    """Every greedy choice in the checker's cases wins by a clear margin, so float noise cannot flip a token."""
    from attnlib.checks.stack import _GEN_CASES, _fresh_model

    for i, case in enumerate(_GEN_CASES):
        model, ids = _fresh_model(i)
        with torch.no_grad():
            seq = model.generate(ids, case[7], use_cache=False)
            logits = torch.stack([model(seq[:, :t])[0, -1] for t in range(ids.shape[1], seq.shape[1])])
        top2 = logits.topk(2, dim=-1).values
        assert (top2[:, 0] - top2[:, 1]).min() > 0.1
        assert len(set(seq[0, ids.shape[1]:].tolist())) >= 3      # the choices depend on the context


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    from attnlib.checks import stack

    for check, mistakes, cases, reference in [
        (check_run_stack, stack._RUN_MISTAKES, [stack._fresh_stack(0)], stack._run),
        (check_next_token_windows, stack._WINDOWS_MISTAKES, stack._windows_cases(), stack.next_token_windows),
    ]:
        assert_each_mistake_named(check, mistakes)
        with torch.no_grad():
            assert_mistakes_distinct(cases[0], reference, mistakes)
    assert_mistakes_distinct((3, 16, 4), stack._stack, stack._BUILD_MISTAKES)
    for m in stack._GEN_VARIANTS:
        v = check_cached_generation(m.wrong)
        assert_named(v, m.label)
        assert v.message == m.hint, (m.label, v)
    with torch.no_grad():
        assert_mistakes_distinct((0,), stack._recomputed, stack._GEN_MISTAKES[:-2])   # the last two raise


def test_each_variant_with_its_default_switches_is_the_reference():
    from attnlib.checks import stack

    assert_accepted(check_run_stack(stack._run))
    assert_accepted(check_next_token_windows(stack._slices))
    assert_accepted(check_cached_generation(stack._generate_variant))
    assert stack._stack(3, 16, 4) == stack._summary(nn.ModuleList(Block(16, 4) for _ in range(3)))
