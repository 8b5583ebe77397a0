"""The stack checkers accept the solution, reject the stub and name every planted mistake, and each hole class of
issue 20 (structure of built modules, parameters shared with the inputs, in-place changes, dtype, misleading
blame) has failing examples here."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib import Block, KVCache, attention, causal_mask, merge_heads
from attnlib.checks import _core, check_cached_generation, check_deepen, check_logit_lens, check_text_windows, stack
from helpers import assert_accepted, assert_each_mistake_named, assert_mistakes_distinct, assert_named, stub

# --- deepen: copies and identity blocks -----------------------------------------------------------------------


def _zero(block, which=("attn.W_O", "mlp.W_2"), bias=True):
    """Zero the parameters of ``block`` whose names start with one of ``which`` (weights only if not ``bias``)."""
    with torch.no_grad():
        for name, p in block.named_parameters():
            if any(name.startswith(w) for w in which) and (bias or name.endswith("weight")):
                p.zero_()
    return block


def _like(block, **changes):
    """A fresh Block with ``block``'s settings (in its dtype), some of them changed."""
    s = dict(d_model=block.d_model, h=block.attn.h, d_ff=block.mlp.d_ff, rope=block.attn.rope,
             dtype=next(block.parameters()).dtype)
    s.update(changes)
    return Block(s["d_model"], s["h"], s["d_ff"], rope=s["rope"]).to(s["dtype"])


def deepen_ok(blocks):
    deeper = nn.ModuleList()
    for block in blocks:
        new = copy.deepcopy(block)
        with torch.no_grad():
            for p in [*new.attn.W_O.parameters(), *new.mlp.W_2.parameters()]:
                p.zero_()
        deeper.extend([copy.deepcopy(block), new])
    return deeper


def deepen_fresh_ok(blocks):
    """Also right: a fresh block with every setting repeated (h, d_ff, RoPE, dtype), its output layers zeroed."""
    return nn.ModuleList(b for block in blocks for b in (copy.deepcopy(block), _zero(_like(block))))


def _pairs(first, second):
    """A deepen answer whose entries are first(block), second(block) for every given block."""
    return lambda blocks: nn.ModuleList(b for block in blocks for b in (first(block), second(block)))


_copy = copy.deepcopy


def _loaded(block, **changes):
    fresh = _like(block, **changes)
    fresh.load_state_dict(block.state_dict())
    return fresh


def _shares_norm(blocks):
    deeper = deepen_ok(blocks)
    for k in range(1, len(deeper), 2):
        deeper[k].ln_1 = deeper[k - 1].ln_1
    return deeper


def _twice(blocks):
    deeper = nn.ModuleList()
    for block in blocks:
        c = copy.deepcopy(block)
        deeper.extend([c, c])
    return deeper


def _grad_error(blocks):
    deeper = nn.ModuleList()
    for block in blocks:
        new = copy.deepcopy(block)
        new.attn.W_O.weight.zero_()                  # a parameter that requires grad, outside no_grad
        deeper.extend([copy.deepcopy(block), new])
    return deeper


def _partial_copy(block):
    fresh = _like(block)
    fresh.attn.load_state_dict(block.attn.state_dict())
    fresh.mlp.load_state_dict(block.mlp.state_dict())   # the LayerNorms are left at 1 and 0
    return fresh


@pytest.mark.parametrize("fn, label", [
    # parameters shared with the input, or between entries
    (_pairs(lambda b: b, lambda b: _zero(_copy(b))), "shared-parameters"),
    (_twice, "same-block"),
    (_shares_norm, "shared-between"),
    # structure that no parameter count sees
    (_pairs(_copy, lambda b: _zero(_like(b, h=4))), "wrong-heads"),
    (_pairs(lambda b: _loaded(b, h=4), lambda b: _zero(_copy(b))), "wrong-heads"),    # copied into h = 4
    (_pairs(_copy, lambda b: _zero(_like(b, d_ff=4 * b.d_model))), "wrong-d_ff"),
    (_pairs(_copy, lambda b: _zero(_like(b, dtype=torch.float32))), "wrong-dtype"),
    (_pairs(_copy, lambda b: _zero(_like(b, rope=False))), "wrong-structure"),
    # what the entries compute
    (_pairs(lambda b: _zero(_copy(b)), _copy), "order"),
    (lambda blocks: nn.ModuleList([_copy(b) for b in blocks] + [_zero(_copy(b)) for b in blocks]), "order"),
    (_pairs(_partial_copy, lambda b: _zero(_copy(b))), "copy-differs"),
    (_pairs(_copy, lambda b: _zero(_copy(b), bias=False)), "constant-added"),
    (_pairs(_copy, lambda b: _zero(_copy(b), which=("attn.W_QKV", "mlp.W_1"))), "constant-added"),
    (_pairs(_copy, lambda b: _zero(_copy(b), which=("ln_1", "ln_2"))), "constant-added"),
    (_pairs(_copy, _like), "not-identity"),
    (_pairs(_copy, lambda b: _zero(_copy(b), which=("",))), "dead-block"),
    (_pairs(_copy, lambda b: _zero(_copy(b), which=("attn", "mlp.W_2"))), "dead-block"),
    # the container
    (lambda blocks: list(deepen_ok(blocks)), "not-modulelist"),
    (lambda blocks: tuple(deepen_ok(blocks)), "not-modulelist"),
    (lambda blocks: nn.ModuleList([*deepen_ok(blocks), _copy(blocks[0])]), "wrong-count"),
    (lambda blocks: nn.ModuleList(_copy(b) for b in blocks), "wrong-count"),
    (lambda blocks: blocks[0], "type"),
    (lambda blocks: 3, "type"),
    (_grad_error, "in-place-with-grad"),
])
def test_deepen_mistakes_are_named(fn, label):
    assert_named(check_deepen(fn), label)


def test_deepen_solution_stub_and_other_right_answers():
    assert_accepted(check_deepen(deepen_ok))
    assert_accepted(check_deepen(deepen_fresh_ok))
    assert_named(check_deepen(stub), "stub")
    assert_named(check_deepen(lambda blocks: None), "none")


def test_deepen_a_shallow_copy_changes_the_given_blocks_and_is_told_so():
    """copy.copy(block) shares the parameters: zeroing its W_O zeroes the given block's, an in-place change."""
    v = check_deepen(_pairs(_copy, lambda b: _zero(copy.copy(b))))
    assert_named(v, "in-place", "blocks.0.attn.W_O")


def test_deepen_an_answer_that_zeroes_the_given_blocks_is_told_so():
    def vandal(blocks):
        deeper = nn.ModuleList()
        for block in blocks:
            deeper.append(copy.deepcopy(block))
            deeper.append(copy.deepcopy(_zero(block)))
        return deeper

    assert_named(check_deepen(vandal), "in-place")
    assert_accepted(check_deepen(deepen_ok))                 # and a later verdict is unchanged


def test_deepen_names_the_entry_the_block_and_the_setting():
    v = check_deepen(_pairs(_copy, lambda b: _zero(_like(b, h=4))))
    assert "entry 1 has 4 heads, block 0 has 2" in v.message, v
    v = check_deepen(_pairs(lambda b: b, lambda b: _zero(_copy(b))))
    assert "entry 0" in v.message and "block 0 that was passed in" in v.message, v
    v = check_deepen(lambda blocks: list(deepen_ok(blocks)))
    assert "sees 0 of its" in v.message, v


def test_deepen_success_message_says_what_was_checked_and_nothing_else():
    v = check_deepen(deepen_ok)
    assert "shares a parameter with the given blocks" in v.message and "copied" not in v.message, v


def test_deepen_cases_catch_the_chapters_sizes():
    """The checker's blocks have h ≠ 4 and d_ff ≠ 4·d_model, and one stack is float64, so a block built from the
    chapter's numbers or in the default dtype differs from them."""
    for i in range(len(stack._DEEPEN_CASES)):
        blocks, = stack._fresh_blocks(i)
        for b in blocks:
            assert b.attn.h != 4 and b.mlp.d_ff != 4 * b.d_model
    assert {next(stack._fresh_blocks(i)[0].parameters()).dtype for i in range(2)} == {torch.float32,
                                                                                          torch.float64}


# --- logit lens --------------------------------------------------------------------------------------------------

def lens_ok(X0, blocks, ln_f, head):
    X, reads = X0, [head(ln_f(X0))]
    for block in blocks:
        X = block(X)
        reads.append(head(ln_f(X)))
    return torch.stack(reads)


def lens_normed_stream(X0, blocks, ln_f, head):
    X, reads = ln_f(X0), []
    reads.append(head(X))
    for block in blocks:
        X = ln_f(block(X))
        reads.append(head(X))
    return torch.stack(reads)


def lens_preallocated(X0, blocks, ln_f, head):
    out = torch.empty(len(blocks) + 1, *X0.shape[:-1], head.out_features)   # float32, whatever X0 is
    X = X0
    out[0] = head(ln_f(X))
    for l, block in enumerate(blocks):
        X = block(X)
        out[l + 1] = head(ln_f(X))
    return out


def lens_in_place(X0, blocks, ln_f, head):
    reads = [head(ln_f(X0))]
    for block in blocks:
        X0.copy_(block(X0))
        reads.append(head(ln_f(X0)))
    return torch.stack(reads)


@pytest.mark.parametrize("fn, label", [
    (lens_normed_stream, "normed-stream"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks, nn.Identity(), head), "raw-reads"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks, ln_f, head)[1:], "missing-x0"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks, ln_f, head)[:-1], "missing-last"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks, ln_f, head).softmax(-1), "probabilities"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks, ln_f, head).transpose(0, 1), "layer-axis"),
    (lambda X0, blocks, ln_f, head: lens_ok(X0, blocks[::-1], ln_f, head), "reversed"),
    (lens_preallocated, "dtype"),
    (lens_in_place, "in-place"),
])
def test_logit_lens_mistakes_are_named(fn, label):
    assert_named(check_logit_lens(fn), label)


def test_logit_lens_solution_and_stub():
    assert_accepted(check_logit_lens(lens_ok))
    assert_named(check_logit_lens(stub), "stub")


def test_logit_lens_a_float32_result_for_float64_inputs_is_told_its_dtype():
    v = check_logit_lens(lens_preallocated)
    assert "torch.float32, expected torch.float64" in v.message, v


def test_logit_lens_an_answer_that_changes_the_modules_cannot_pass_or_change_later_verdicts():
    def plain_ln_f(X0, blocks, ln_f, head):
        with torch.no_grad():
            ln_f.weight.fill_(1.0)
            ln_f.bias.zero_()
        return lens_ok(X0, blocks, nn.LayerNorm(X0.shape[-1]).to(X0.dtype), head)

    assert_named(check_logit_lens(plain_ln_f), "in-place", "ln_f.weight")
    assert_accepted(check_logit_lens(lens_ok))


# --- text windows ------------------------------------------------------------------------------------------------

def windows_ok(data, T):
    return data[:-1].unfold(0, T, T), data[1:].unfold(0, T, T)


def windows_loop(data, T):
    n = (len(data) - 1) // T
    return (torch.stack([data[k * T:k * T + T] for k in range(n)]),
            torch.stack([data[k * T + 1:k * T + T + 1] for k in range(n)]))


def windows_too_many_slices(data, T):
    n = len(data) // T
    return (torch.stack([data[k * T:k * T + T] for k in range(n)]),
            torch.stack([data[k * T + 1:k * T + T + 1] for k in range(n)]))


def windows_too_many_unfold(data, T):
    return data.unfold(0, T, T), data[1:].unfold(0, T, T)


def windows_float_positions(data, T):
    n = (len(data) - 1) // T
    idx = torch.linspace(0, (n - 1) * T, n)[:, None] + torch.arange(T)
    return data[idx], data[idx + 1]


def windows_in_place(data, T):
    x, y = windows_ok(data, T)
    data.zero_()
    return x.clone(), y.clone()


@pytest.mark.parametrize("fn, label", [
    (windows_too_many_slices, "one-too-many"), (windows_too_many_unfold, "one-too-many"),
    (windows_float_positions, "float-positions"),
    (lambda data, T: tuple(t.float() for t in windows_ok(data, T)), "dtype"),
    (lambda data, T: windows_ok(data, T)[0], "type"),
    (windows_in_place, "in-place"),
    (lambda data, T: (windows_ok(data, T)[0], windows_ok(data, T)[0]), "no-shift"),
    (lambda data, T: (data[:-1].unfold(0, T, 1), data[1:].unfold(0, T, 1)), "overlapping"),
    (lambda data, T: (data[:-1].unfold(0, T, T + 1), data[1:].unfold(0, T, T + 1)), "gap"),
])
def test_windows_mistakes_are_named(fn, label):
    assert_named(check_text_windows(fn), label)


def test_windows_solution_and_stub():
    assert_accepted(check_text_windows(windows_ok))
    assert_accepted(check_text_windows(windows_loop))
    assert_named(check_text_windows(stub), "stub")


def test_windows_cases_hold_the_trap_and_a_text_without_it():
    trap = [len(data) % T == 0 for data, T in stack._windows_cases()]
    assert any(trap) and not all(trap), trap


# --- cached generation in chunks (extend) ---------------------------------------------------------------------

def generate_cached(model, ids, n_new, chunk):
    past = [None] * len(model.blocks)
    T0, todo = ids.shape[1], ids
    while ids.shape[1] < T0 + n_new:
        new, todo = todo[:, :chunk], todo[:, chunk:]
        fed = 0 if past[0] is None else past[0][0].shape[-2]
        X = model.embed_tokens(new, fed)
        for l, block in enumerate(model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), fed)
            if past[l] is not None:
                K, V = torch.cat([past[l][0], K], -2), torch.cat([past[l][1], V], -2)
            past[l] = (K, V)
            X = X + block.attn.W_O(merge_heads(attention(Q, K, V)))
            X = X + block.mlp(block.ln_2(X))
        if todo.shape[1] == 0:
            todo = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, todo], dim=1)
    return ids


def _sdpa_bottom_right(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=causal_mask(Q.shape[-2], K.shape[-2],
                                                                         dtype=torch.bool))


def _written_out(mistake):
    """Another way to write the cached generation, with one typical mistake planted (not the checker's code)."""
    def generate(model, ids, n_new, chunk):
        caches = [KVCache() for _ in model.blocks]               # the library's container, the learner's attention
        pieces = list(ids.split(chunk, dim=1))
        out, steps = ids, 0
        while pieces:
            new = pieces.pop(0)
            offset = {"no-offset": 0, "offset-counts-steps": steps}.get(mistake, len(caches[0]))
            if mistake == "offset-one-too-far" and out.shape[1] > ids.shape[1]:
                offset = out.shape[1]                            # counted after appending the newest token
            X = model.embed_tokens(new, offset)
            for block, cache in zip(model.blocks, caches):
                Q, K_new, V_new = block.attn.qkv(block.ln_1(X), offset)
                if mistake == "not-self" and len(cache):
                    A = F.scaled_dot_product_attention(Q, cache.K, cache.V)
                    cache.extend(K_new, V_new)
                else:
                    growing = mistake != "cache-not-updated" or out.shape[1] == ids.shape[1]
                    K, V = cache.extend(K_new, V_new) if growing else (torch.cat([cache.K, K_new], -2),
                                                                        torch.cat([cache.V, V_new], -2))
                    if mistake == "top-left-mask":
                        A = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
                    elif mistake == "unmasked":
                        A = F.scaled_dot_product_attention(Q, K, V)
                    elif mistake == "later-chunks-unmasked":
                        A = F.scaled_dot_product_attention(Q, K, V, is_causal=Q.shape[-2] == K.shape[-2])
                    else:
                        A = _sdpa_bottom_right(Q, K, V)
                X = X + block.attn.W_O(merge_heads(A))
                X = X + block.mlp(block.ln_2(X))
            steps += 1
            if not pieces:
                nxt = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
                out = torch.cat([out, nxt], dim=1)
                if out.shape[1] < ids.shape[1] + n_new:
                    pieces.append(nxt)
        return out
    return generate


def generate_recomputing(model, ids, n_new, chunk):
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def generate_with_library_cache(model, ids, n_new, chunk):
    caches = [KVCache() for _ in model.blocks]
    new = ids
    for _ in range(n_new):
        X = model.embed_tokens(new, len(caches[0]))
        for block, cache in zip(model.blocks, caches):
            X = block(X, cache=cache)
        new = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, new], dim=1)
    return ids


@pytest.mark.parametrize("fn", [generate_cached, _written_out(None)])
def test_cached_generation_solution_is_accepted(fn):
    assert_accepted(check_cached_generation(fn))


@pytest.mark.parametrize("label", ["no-offset", "offset-counts-steps", "offset-one-too-far", "top-left-mask",
                                   "unmasked", "later-chunks-unmasked", "not-self", "cache-not-updated"])
def test_cached_generation_mistakes_written_another_way_are_named(label):
    assert_named(check_cached_generation(_written_out(label)), label)


@pytest.mark.parametrize("fn, label", [
    (generate_recomputing, "no-cache"), (lambda m, ids, n, c: m.generate(ids, n), "shortcut"),
    (generate_with_library_cache, "shortcut"),
    (lambda m, ids, n, c: generate_cached(m, ids, n, 10 ** 6), "chunk-too-big"),
    (lambda m, ids, n, c: generate_cached(m, ids, n, c)[:, ids.shape[1]:], "prompt-missing"),
    (lambda m, ids, n, c: generate_cached(m, ids, n - 1, c), "shape"),
    (lambda m, ids, n, c: generate_cached(m, ids, n, c).tolist(), "type"), (stub, "stub"),
])
def test_cached_generation_other_failures(fn, label):
    assert_named(check_cached_generation(fn), label)


def test_cached_generation_a_mask_one_key_off_is_not_blamed_on_the_cache():
    """The misleading class of issue 20: a mask one diagonal off was blamed on K and V not being appended. Here
    K and V are appended and the mask reads one key too many: the verdict names the mask."""
    v = check_cached_generation(stack._GEN_VARIANTS[[m.label for m in stack._GEN_VARIANTS].index("one-ahead")].wrong)
    assert_named(v, "one-ahead")
    assert "append" not in v.message, v


def _last_layer_unmasked(model, ids, n_new, chunk):
    """The causal mask dropped in the last layer only: within the last prompt chunk, a row reads the row after
    it. The greedy tokens come out right on both cases; the last layer's rows do not."""
    past = [None] * len(model.blocks)
    T0, todo = ids.shape[1], ids
    while ids.shape[1] < T0 + n_new:
        new, todo = todo[:, :chunk], todo[:, chunk:]
        fed = 0 if past[0] is None else past[0][0].shape[-2]
        X = model.embed_tokens(new, fed)
        for l, block in enumerate(model.blocks):
            Q, K, V = block.attn.qkv(block.ln_1(X), fed)
            if past[l] is not None:
                K, V = torch.cat([past[l][0], K], -2), torch.cat([past[l][1], V], -2)
            past[l] = (K, V)
            X = X + block.attn.W_O(merge_heads(attention(Q, K, V, causal=l < len(model.blocks) - 1)))
            X = X + block.mlp(block.ln_2(X))
        if todo.shape[1] == 0:
            todo = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, todo], dim=1)
    return ids


def test_cached_generation_rows_that_differ_behind_right_tokens_are_rejected():
    """A mistake that the greedy choices hide is still found through the rows given to ln_f."""
    for i in range(len(stack._GEN_CASES)):
        assert torch.equal(stack._generation(_last_layer_unmasked)(i)[0], stack._recomputed(i)[0])
    assert_named(check_cached_generation(_last_layer_unmasked), "rows-differ")


def test_cached_generation_the_two_layernorms_of_a_block_differ():
    """Each LayerNorm of the checker's models has a scale and shift of its own, so using ln_1 for the MLP (or
    leaving out ln_f) is seen."""
    def ln_1_twice(model, ids, n_new, chunk):
        for block in model.blocks:
            block.ln_2 = block.ln_1
        return generate_cached(model, ids, n_new, chunk)

    assert_named(check_cached_generation(ln_1_twice), "ln_1-for-mlp")


def test_cached_generation_cases_have_clear_greedy_choices_and_chunks_after_the_first():
    """Every greedy choice in the checker's cases wins by a clear margin, so float noise cannot flip a token, and
    each prompt is fed in at least three chunks, the last one shorter."""
    for i in range(len(stack._GEN_CASES)):
        model, ids, n_new, chunk = stack._fresh_model(i)
        assert ids.shape[1] > 2 * chunk and ids.shape[1] % chunk not in (0, 1)
        with torch.no_grad():
            seq = model.generate(ids, n_new, use_cache=False)
            logits = torch.stack([model(seq[:, :t])[0, -1] for t in range(ids.shape[1], seq.shape[1])])
        top2 = logits.topk(2, dim=-1).values
        assert (top2[:, 0] - top2[:, 1]).min() > 0.3
        assert len(set(seq[0, ids.shape[1]:].tolist())) >= 4      # the choices depend on the context


def test_cached_generation_every_planted_mistake_changes_the_tokens():
    """Every planted mistake changes the tokens of at least one case, not only the rows behind them; ln_1 before
    the MLP, which the greedy choices hide, changes the last row given to ln_f."""
    for m in stack._GEN_VARIANTS:
        if m.label == "ln_1-for-mlp":
            assert all(not torch.allclose(stack._generation(m.wrong)(i)[4], stack._recomputed(i)[4], atol=0.1)
                       for i in range(len(stack._GEN_CASES)))
            continue
        assert any(not torch.equal(stack._generation(m.wrong)(i)[0], stack._recomputed(i)[0])
                   for i in range(len(stack._GEN_CASES))), m.label


# ---- the tables of mistakes ---------------------------------------------------------------------------

def test_every_planted_mistake_is_recognised_as_itself_and_differs_from_the_others():
    for check, mistakes, case, reference in [
        (check_logit_lens, stack._LENS_MISTAKES, stack._fresh_lens(0), stack._lens),
        (check_text_windows, stack._WINDOWS_MISTAKES, stack._windows_cases()[0], stack._cut),
    ]:
        # a planted error adds the error it raised; a property of a subset (its wrong is the reference) is named
        # by the answers below that have it
        assert_each_mistake_named(check, [m for m in mistakes if m.wrong is not reference], exact=False)
        with torch.no_grad():   # each planted mistake that returns a result, on a case where it differs
            assert_mistakes_distinct(case, reference, [m for m in mistakes if m.label != "float-positions"
                                                       and (m.where is None or m.where(case))])
    for m in stack._GEN_VARIANTS + stack._GEN_RAISING:
        v = check_cached_generation(m.wrong)
        assert_named(v, m.label)
        assert v.message.startswith(m.hint), (m.label, v)
    # the generation cases separate every two planted mistakes together: each pair differs on some case
    def outcome(m, i):
        try:
            return m.wrong(i)
        except ValueError as e:                          # an offset past max_T: the error is the outcome
            return repr(e)
    planted = [m for m in stack._GEN_MISTAKES if m.label != "shortcut"]
    outs = [[stack._recomputed(i)] + [outcome(m, i) for m in planted] for i in range(len(stack._GEN_CASES))]
    for a in range(len(planted) + 1):
        for b in range(a + 1, len(planted) + 1):
            assert any(not _core._close(o[a], o[b], 1e-5) for o in outs), (a, b)


def test_each_variant_with_its_default_switches_is_the_reference():
    assert_accepted(check_logit_lens(stack._lens))
    assert_accepted(check_text_windows(stack._cut))
    assert_accepted(check_cached_generation(stack._generate_variant))


def test_every_mistake_has_a_second_hint_level_and_the_first_gives_no_code():
    for check in (check_deepen, check_logit_lens, check_text_windows, check_cached_generation):
        own = [m for m in check.mistakes if m not in _core._GENERAL]
        assert own
        for m in own:
            assert m.more and m.more != m.hint, (check.__name__, m.label)
            assert "`" not in m.hint, (check.__name__, m.label)


def test_second_level_hints_are_given_on_request():
    fn = _pairs(_copy, lambda b: _zero(_copy(b), bias=False))
    first, second = check_deepen(fn), check_deepen(fn, hint=2)
    assert first.mistake == second.mistake == "constant-added"
    assert "hint=2" in first.message and "bias" in second.message and "hint=2" not in second.message


# ---- wrong answers written from the exercise statements (not from the tables) -----------------------------------
# What a learner who read only the statement could write: none accepted, none blamed on a mistake it did not
# make (a label given here must be the verdict's), and at least 85 % named.
GENERIC = {"values", "shape", "type", "error", "length"}


def _deepen_with(new_block, freeze=False):
    def deepen(blocks):
        deeper = nn.ModuleList()
        for block in blocks:
            new = new_block(block)
            if freeze:
                for p in [*new.attn.W_O.parameters(), *new.mlp.W_2.parameters()]:
                    p.requires_grad_(False)
            deeper.extend([copy.deepcopy(block), new])
        return deeper
    return deepen


def _no_grad_zero(new, which=("attn.W_O", "mlp.W_2"), bias=True):
    return _zero(new, which, bias)


def _lens(X0, blocks, ln_f, head, *, norm=True, first=True, feed_normed=False, probs=False, dim=0):
    X, reads = X0, [head(ln_f(X0) if norm else X0)] if first else []
    for block in blocks:
        X = block(ln_f(X) if feed_normed else X)
        reads.append(head(ln_f(X) if norm else X))
    out = torch.stack(reads, dim=dim)
    return out.softmax(-1) if probs else out


def _windows(data, T, *, slip):
    n = (len(data) - 1) // T
    if slip == "wide":
        w = data.unfold(0, T + 1, T)
        return w, w[:, 1:]
    if slip == "float":
        starts = torch.linspace(0, (n - 1) * T, n)
        idx = starts[:, None] + torch.arange(T)
        return data[idx], data[idx + 1]
    step = 1 if slip == "overlap" else T
    stop = len(data) - T + (slip == "too-many")       # too many: a window that ends the text has no target
    xs = torch.stack([data[s:s + T] for s in range(0, stop, step)])
    if slip == "roll":
        return xs, xs.roll(-1, dims=1)
    if slip == "same":
        return xs, xs.clone()
    if slip == "back":
        return data[1:].unfold(0, T, T), data[:-1].unfold(0, T, T)
    return xs, torch.stack([data[s + 1:s + T + 1] for s in range(0, step * len(xs), step)])


def _generate(model, ids, n_new, chunk, *, slip=None):
    """The statement's loop, written with the parts it lists and F.scaled_dot_product_attention."""
    Ks, Vs = [None] * len(model.blocks), [None] * len(model.blocks)
    out, pos = ids, 0
    pieces = [ids] if slip == "whole-prompt" else list(ids.split(chunk, dim=1))
    while True:
        for piece in pieces:
            at = 0 if slip == "offset-zero" else pos
            X = model.embed_tokens(piece, at)
            for l, block in enumerate(model.blocks):
                Q, K, V = block.attn.qkv(block.ln_1(X), at)
                Ks[l] = K if Ks[l] is None else torch.cat([Ks[l], K], -2)
                Vs[l] = V if Vs[l] is None else torch.cat([Vs[l], V], -2)
                if slip == "is-causal":
                    A = F.scaled_dot_product_attention(Q, Ks[l], Vs[l], is_causal=True)
                elif slip == "no-mask":
                    A = F.scaled_dot_product_attention(Q, Ks[l], Vs[l])
                else:
                    A = _sdpa_bottom_right(Q, Ks[l], Vs[l])
                X = X + block.attn.W_O(merge_heads(A))
                X = X + block.mlp((block.ln_1 if slip == "ln_1-twice" else block.ln_2)(X))
            pos += piece.shape[1]
        if out.shape[1] == ids.shape[1] + n_new:
            return out
        nxt = model.head(model.ln_f(X))[:, -1].argmax(-1, keepdim=True)
        out, pieces = torch.cat([out, nxt], dim=1), [nxt]


WRITTEN = {
    check_deepen: [
        (_deepen_with(lambda b: _zero(Block(b.d_model, b.attn.h).to(next(b.parameters()).dtype))), "wrong-d_ff"),
        (_deepen_with(lambda b: _zero(_copy(b), bias=False)), "constant-added"),
        (_deepen_with(lambda b: _zero(_copy(b), which=("",))), "dead-block"),
        (_deepen_with(lambda b: _zero(_copy(b)), freeze=True), "frozen"),
        (lambda blocks: [b for block in blocks for b in (_copy(block), _zero(_copy(block)))], "not-modulelist"),
        (_grad_error, "in-place-with-grad"),
        (_deepen_with(lambda b: _zero(_like(b, h=4))), "wrong-heads"),
    ],
    check_logit_lens: [
        (functools.partial(_lens, norm=False), "raw-reads"), (functools.partial(_lens, first=False), "missing-x0"),
        (functools.partial(_lens, feed_normed=True), "normed-stream"),
        (functools.partial(_lens, probs=True), "probabilities"), (functools.partial(_lens, dim=1), "layer-axis"),
    ],
    check_text_windows: [
        (functools.partial(_windows, slip="same"), "no-shift"), (functools.partial(_windows, slip="back"), "swapped"),
        (functools.partial(_windows, slip="wide"), "window-width"),
        (functools.partial(_windows, slip="overlap"), "overlapping"),
        (functools.partial(_windows, slip="too-many"), "one-too-many"),
        (functools.partial(_windows, slip="float"), "float-positions"),
        (functools.partial(_windows, slip="roll"), "rolled"),
    ],
    check_cached_generation: [
        (functools.partial(_generate, slip="ln_1-twice"), "ln_1-for-mlp"),
        (functools.partial(_generate, slip="offset-zero"), "no-offset"),
        (functools.partial(_generate, slip="is-causal"), "top-left-mask"),
        (functools.partial(_generate, slip="no-mask"), "unmasked"),
        (functools.partial(_generate, slip="whole-prompt"), "chunk-too-big"),
        (generate_recomputing, "no-cache"),
        (lambda model, ids, n_new, chunk: model.generate(ids, n_new), "shortcut"),
    ],
}


@pytest.mark.parametrize("check", list(WRITTEN), ids=[c.__name__ for c in WRITTEN])
def test_wrong_answers_written_from_the_statements_are_rejected_and_named(check):
    answers = WRITTEN[check]
    assert len(answers) >= 5
    verdicts = [(check(fn), label) for fn, label in answers]
    for v, label in verdicts:
        assert not v.ok, v
        assert label is None or v.mistake == label, (label, v)
        assert "_Shortcut" not in repr(v) and "_Shortcut" not in v.hint(3).message, v
    assert sum(v.mistake not in GENERIC for v, _ in verdicts) >= 0.85 * len(verdicts), verdicts


def test_the_statements_loop_is_accepted():
    assert_accepted(check_cached_generation(_generate))
    assert_accepted(check_text_windows(functools.partial(_windows, slip=None)))
    assert_accepted(check_logit_lens(_lens))


# ---- the slips of issue 35: named by class, not by a shape or a first differing token ---------------------------

def test_windows_of_the_wrong_count_are_named_and_another_integer_dtype_is_kept():
    def padded(data, T):                                  # a last window filled up with zeros: one too many
        n = -(-(len(data) - 1) // T)
        full = torch.cat([data, data.new_zeros(n * T + 1 - len(data))])
        return full[:-1].view(n, T), full[1:].view(n, T)

    def rolled_whole(data, T):                            # len // T windows, the last target wraps round
        x = data[:len(data) // T * T]
        return x.view(-1, T), x.roll(-1).view(-1, T)

    assert_named(check_text_windows(padded), "one-too-many", "does the target")
    assert_named(check_text_windows(rolled_whole), "one-too-many")
    assert_named(check_text_windows(lambda data, T: tuple(w[:-1] for w in windows_ok(data, T))), "one-too-few")
    assert_named(check_text_windows(lambda data, T: windows_ok(data[(len(data) - 1) % T:], T)), "aligned-to-end")
    assert_named(check_text_windows(lambda data, T: tuple(t.long() for t in windows_ok(data, T))), "dtype")
    assert any(data.dtype != torch.int64 for data, _ in stack._windows_cases())


def test_logit_lens_readings_concatenated_on_the_batch_axis_are_named():
    assert_named(check_logit_lens(lambda X0, blocks, ln_f, head: torch.cat(list(lens_ok(X0, blocks, ln_f, head)))),
                 "concatenated")


@pytest.mark.parametrize("slip, label", [
    ("is-causal", "top-left-mask"), ("no-mask", "unmasked"), ("embed-only", "no-offset"), ("qkv-only", "no-offset"),
    ("overwrite", "cache-overwritten"), ("alone", "chunks-alone"), ("refeed", "last-token-twice"),
])
def test_cached_generation_slips_are_named_by_their_tokens(slip, label):
    """Written another way than the planted slips (SDPA, the last token fed once more): the rows behind the tokens
    differ from the planted ones, the greedy tokens do not, and the slip is named by them."""
    def generate(model, ids, n_new, chunk):
        Ks, Vs, T0 = [None] * len(model.blocks), [None] * len(model.blocks), ids.shape[1]

        def feed(piece, at):
            X = model.embed_tokens(piece, 0 if slip == "embed-only" else at)
            for l, block in enumerate(model.blocks):
                Q, K, V = block.attn.qkv(block.ln_1(X), 0 if slip == "qkv-only" else at)
                if Ks[l] is not None and slip != "overwrite":
                    K, V = torch.cat([Ks[l], K], -2), torch.cat([Vs[l], V], -2)
                Ks[l], Vs[l] = K, V
                if slip == "alone" and at < T0:
                    K, V = K[..., -Q.shape[-2]:, :], V[..., -Q.shape[-2]:, :]
                A = (F.scaled_dot_product_attention(Q, K, V, is_causal=True) if slip == "is-causal" else
                     F.scaled_dot_product_attention(Q, K, V) if slip == "no-mask" else _sdpa_bottom_right(Q, K, V))
                X = X + block.attn.W_O(merge_heads(A))
                X = X + block.mlp(block.ln_2(X))
            return model.head(model.ln_f(X))

        for s in range(0, T0, chunk):
            logits = feed(ids[:, s:s + chunk], s)
        if slip == "refeed":
            logits = feed(ids[:, -1:], T0 - 1)
        for _ in range(n_new):
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            logits = feed(ids[:, -1:], ids.shape[1] - 1)
        return ids

    assert_named(check_cached_generation(generate), label)


# ---- more slips of the cached generation, and one target per window: named by class -----------------------------

def _generate_with_caches(model, ids, n_new, chunk, *, slip):
    """Another spelling: the library's KVCache per layer, an explicit boolean mask, positions counted per piece."""
    caches = [KVCache()] * len(model.blocks) if slip in ("one-cache", "one-cache-counted") else \
        [KVCache() for _ in model.blocks]
    pieces, out, pos, n_pieces = list(ids.split(chunk, dim=1)), ids, 0, 0
    while pieces:
        piece = pieces.pop(0)
        at = {"one-cache": len(caches[0]), "pieces-times-chunk": n_pieces * chunk}.get(slip, pos)
        X = model.embed_tokens(piece, at)
        for block, cache in zip(model.blocks, caches):
            Q, K, V = block.attn.qkv(block.ln_1(X), at)
            K, V = cache.extend(K, V)
            T_q, T_k = Q.shape[-2], K.shape[-2]
            keep = torch.ones(T_q, T_k, dtype=torch.bool).tril() if slip == "tril" and T_q > 1 else \
                causal_mask(T_q, T_k, dtype=torch.bool)
            X = X + block.attn.W_O(merge_heads(F.scaled_dot_product_attention(Q, K, V, attn_mask=keep)))
            X = X + block.mlp(block.ln_2(X))
        pos, n_pieces = pos + piece.shape[1], n_pieces + 1
        if not pieces:
            rows = X[:, :1] if slip == "first-row" else X[:, -1:]
            nxt = model.head(rows if slip == "no-ln_f" else model.ln_f(rows))[:, 0].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            pieces = [nxt] if out.shape[1] < ids.shape[1] + n_new else []
    return out


@pytest.mark.parametrize("slip, label", [
    ("tril", "top-left-mask"), ("no-ln_f", "no-ln_f"), ("first-row", "first-row"),
    ("pieces-times-chunk", "offset-counts-chunks"), ("one-cache", "shared-cache"),
    ("one-cache-counted", "shared-cache"),
])
def test_cached_generation_more_slips_are_named(slip, label):
    assert_accepted(check_cached_generation(functools.partial(_generate_with_caches, slip=None)))
    assert_named(check_cached_generation(functools.partial(_generate_with_caches, slip=slip)), label)


def test_one_target_per_window_is_named():
    def next_token_only(data, T):                         # the token after each window, (n,)
        n = (len(data) - 1) // T
        return data[:n * T].reshape(n, T), data[T:(n + 1) * T:T]

    def last_column(data, T):                             # the same, kept as a column, (n, 1)
        x, y = windows_ok(data, T)
        return x, y[:, -1:]
    assert_named(check_text_windows(next_token_only), "one-target", "one token per window, shape (7,)")
    assert_named(check_text_windows(last_column), "one-target")
