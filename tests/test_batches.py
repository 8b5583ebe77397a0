"""Chapter 11: padding masks, per-row positions, batched generation and sliding windows.

Checked against code nobody here wrote: torch's scaled_dot_product_attention with an explicit boolean mask,
and Hugging Face's GPT-2 given ``attention_mask`` and ``position_ids``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import GPT, GPTConfig, KVCache, MultiHeadAttention, apply_rope, attention, attention_weights, causal_mask
from attnlib.attention import combine_masks, padding_mask, sliding_window_mask
from attnlib.batches import pad_prompts, position_ids
from attnlib.gpt2 import from_gpt2
from attnlib.position import LearnedPositions
from helpers import rejects

settings.register_profile("batches", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("batches")

V = 23


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def prompts_of(lengths, seed: int) -> list[torch.Tensor]:
    g = gen(seed)
    return [torch.randint(1, V, (n,), generator=g) for n in lengths]


def padded_gpt(pos, seed: int = 0, backend: str = "sdpa", **kw) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(V, 16, 2, 2, max_T=24, pos=pos, backend=backend, **kw)).eval()
    with torch.no_grad():          # a larger init than 0.02: logits far from uniform, no near-ties
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3, generator=gen(seed + p.numel()))
    return model


# ---------------------------------------------------------------------------------------------- helpers


def test_pad_prompts_left_and_right():
    a, b = torch.tensor([5, 6, 7]), torch.tensor([8])
    ids, is_pad = pad_prompts([a, b], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert is_pad.tolist() == [[False, False, False], [True, True, False]]
    ids, is_pad = pad_prompts([a, b], pad_id=0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert is_pad.tolist() == [[False, False, False], [False, True, True]]


def test_position_ids_count_from_the_first_real_token():
    is_pad = torch.tensor([[True, True, False, False, False], [False, False, False, True, True],
                           [False, False, False, False, False]])
    assert position_ids(is_pad).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 2, 2], [0, 1, 2, 3, 4]]
    assert position_ids(is_pad).dtype == torch.long


@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4), side=st.sampled_from(["left", "right"]))
def test_position_ids_of_a_padded_batch_are_the_prompts_own(lengths, side):
    prompts = prompts_of(lengths, sum(lengths))
    ids, is_pad = pad_prompts(prompts, 0, side=side)
    pos = position_ids(is_pad)
    for b, p in enumerate(prompts):
        assert torch.equal(ids[b][~is_pad[b]], p)
        assert pos[b][~is_pad[b]].tolist() == list(range(len(p)))
    assert (pos >= 0).all()


def test_padding_mask_shape_and_meaning():
    is_pad = torch.tensor([[True, False, False], [False, False, False]])
    m = padding_mask(is_pad)
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    assert m[0, 0, 0].tolist() == [False, True, True]
    both = combine_masks(m, 3, 3)
    assert both.shape == (2, 1, 3, 3)
    assert torch.equal(both[1, 0], causal_mask(3, dtype=torch.bool))
    assert both[0, 0].tolist() == [[False, False, False], [False, True, False], [False, True, True]]


# ---------------------------------------------------------------------------------------------- against SDPA


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("B,h,T,d", [(3, 2, 7, 8), (2, 1, 5, 5), (1, 3, 1, 4)])
def test_masked_attention_equals_sdpa_with_the_combined_boolean_mask(B, h, T, d, dtype, tol):
    g = gen(B * 100 + T)
    Q, K, V_ = (torch.randn(B, h, T, d, generator=g, dtype=dtype) for _ in range(3))
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    is_pad = torch.arange(T)[None, :] < (T - lengths)[:, None]           # left padding
    allowed = padding_mask(is_pad) & causal_mask(T, dtype=torch.bool)     # (B, 1, T, T)
    want = F.scaled_dot_product_attention(Q, K, V_, attn_mask=allowed)
    got = attention(Q, K, V_, mask=padding_mask(is_pad))
    has_key = allowed.any(-1, keepdim=True).expand_as(got[..., :1]).expand_as(got)
    assert not got.isnan().any()
    assert (got[~has_key] == 0).all()                                    # nothing to read: zeros
    assert (got[has_key] - want[has_key]).abs().max() <= tol


@pytest.mark.parametrize("window", [1, 2, 3, 9])
@pytest.mark.parametrize("T_q,T_k", [(6, 6), (7, 7), (2, 7)])
def test_sliding_window_attention_equals_sdpa_with_its_explicit_mask(window, T_q, T_k):
    g = gen(window * 10 + T_q)
    Q = torch.randn(2, 3, T_q, 8, generator=g, dtype=torch.float64)
    K, V_ = (torch.randn(2, 3, T_k, 8, generator=g, dtype=torch.float64) for _ in range(2))
    i = torch.arange(T_k - T_q, T_k)[:, None]
    j = torch.arange(T_k)[None, :]
    explicit = (j <= i) & (j > i - window)
    assert torch.equal(sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool), explicit)
    M = sliding_window_mask(T_q, T_k, window=window)
    assert torch.equal(M.isneginf(), ~explicit) and (M[explicit] == 0).all()
    want = F.scaled_dot_product_attention(Q, K, V_, attn_mask=explicit)
    got = attention(Q, K, V_, mask=sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool))
    assert (got - want).abs().max() <= 1e-12
    if window >= T_k:
        assert torch.equal(sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool),
                           causal_mask(T_q, T_k, dtype=torch.bool))


def test_an_all_true_mask_changes_no_bit():
    g = gen(7)
    Q, K, V_ = (torch.randn(2, 4, 6, 8, generator=g) for _ in range(3))
    ones = torch.ones(6, 6, dtype=torch.bool)
    assert torch.equal(attention(Q, K, V_, mask=ones), attention(Q, K, V_))
    assert torch.equal(attention_weights(Q, K, mask=ones), attention_weights(Q, K))


def test_naive_softmax_of_a_fully_padded_row_is_nan_the_library_gives_zeros():
    S = torch.randn(1, 3, 3, generator=gen(3))
    is_pad = torch.tensor([[True, False, False]])
    allowed = combine_masks(padding_mask(is_pad)[:, 0], 3, 3)             # (1, 3, 3)
    naive = torch.softmax(S.masked_fill(~allowed, float("-inf")), dim=-1)
    assert naive[0, 0].isnan().all() and not naive[0, 1:].isnan().any()
    Q, K = torch.randn(2, 1, 3, 4, generator=gen(4)).unbind(0)
    P = attention_weights(Q, K, mask=padding_mask(is_pad)[:, 0])
    assert (P[0, 0] == 0).all()
    torch.testing.assert_close(P[0, 1:].sum(-1), torch.ones(2))


@pytest.mark.parametrize("rope", [False, True])
def test_mha_backends_agree_with_a_padding_mask_and_give_no_nan(rope):
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4, rope=rope).double()
    plain = MultiHeadAttention(16, 4, rope=rope, backend="plain").double()
    plain.load_state_dict(mha.state_dict())
    x = torch.randn(3, 6, 16, generator=gen(5), dtype=torch.float64)
    is_pad = torch.tensor([[True, True, False, False, False, False], [False] * 6, [True] * 5 + [False]])
    mask, pos = padding_mask(is_pad), position_ids(is_pad)
    a, b = mha(x, mask=mask, positions=pos), plain(x, mask=mask, positions=pos)
    assert not a.isnan().any() and not b.isnan().any()
    assert (a - b).abs().max() <= 1e-12


# ---------------------------------------------------------------------------------------------- the whole model


@settings(max_examples=15)
@given(lengths=st.lists(st.integers(1, 8), min_size=2, max_size=4),
       pos=st.sampled_from(["learned", "rope", "sinusoidal", None]),
       backend=st.sampled_from(["sdpa", "plain"]), side=st.sampled_from(["left", "right"]))
def test_a_padded_row_gives_the_logits_of_its_prompt_alone(lengths, pos, backend, side):
    model = padded_gpt(pos, len(lengths), backend)
    prompts = prompts_of(lengths, sum(lengths))
    ids, is_pad = pad_prompts(prompts, 0, side=side)
    with torch.no_grad():
        logits = model(ids, is_pad=is_pad)
        assert not logits.isnan().any()
        for b, p in enumerate(prompts):
            torch.testing.assert_close(logits[b][~is_pad[b]], model(p[None])[0], atol=2e-5, rtol=1e-4)


@settings(max_examples=10)
@given(lengths=st.lists(st.integers(1, 6), min_size=2, max_size=3), seed=st.integers(0, 100))
def test_pad_tokens_are_never_read(lengths, seed):
    model = padded_gpt("learned", seed)
    ids, is_pad = pad_prompts(prompts_of(lengths, seed), 0, side="left")
    other = torch.where(is_pad, torch.randint(0, V, ids.shape, generator=gen(seed)), ids)
    with torch.no_grad():
        a, b = model(ids, is_pad=is_pad), model(other, is_pad=is_pad)
    assert torch.equal(a[~is_pad], b[~is_pad])


@pytest.mark.parametrize("pos", ["learned", "rope"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_batched_generation_gives_each_prompt_its_own_tokens(pos, use_cache):
    model = padded_gpt(pos, 3)
    prompts = prompts_of([4, 1, 7, 2], 3)
    ids, is_pad = pad_prompts(prompts, 0, side="left")
    n_new = 8
    out = model.generate(ids, n_new, is_pad=is_pad, use_cache=use_cache)
    assert out.shape == (4, 7 + n_new)
    assert torch.equal(out[:, :7], ids)
    for b, p in enumerate(prompts):
        alone = model.generate(p[None], n_new, use_cache=use_cache)[0, len(p):]
        assert torch.equal(out[b, 7:], alone)


def test_batched_generation_with_and_without_cache_and_without_padding_is_unchanged():
    model = padded_gpt("rope", 4)
    ids = torch.randint(0, V, (2, 5), generator=gen(4))
    no_pad = torch.zeros(2, 5, dtype=torch.bool)
    plain = model.generate(ids, 6)
    assert torch.equal(model.generate(ids, 6, is_pad=no_pad), plain)
    assert torch.equal(model.generate(ids, 6, is_pad=no_pad, use_cache=False), plain)


def test_naive_positions_change_learned_rows_but_rope_only_by_rounding():
    prompt = prompts_of([5], 8)[0]
    ids, is_pad = pad_prompts([prompt, torch.arange(1, 9)], 0, side="left")   # 3 pads before the prompt
    naive = torch.arange(ids.shape[1]).expand_as(ids)                          # column index as position
    for pos, expect_big in [("learned", True), ("rope", False)]:
        model = padded_gpt(pos, 8)
        with torch.no_grad():
            alone = model(prompt[None])[0]
            X = model.embed_tokens(ids, positions=naive)
            for block in model.blocks:
                X = block(X, mask=padding_mask(is_pad), positions=naive)
            naive_rows = model.head(model.ln_f(X))[0, 3:]
            fixed_rows = model(ids, is_pad=is_pad)[0, 3:]
        torch.testing.assert_close(fixed_rows, alone, atol=2e-5, rtol=1e-4)
        diff = (naive_rows - alone).abs().max().item()
        assert (diff > 0.1) if expect_big else (diff < 1e-4)


def test_rope_positions_per_row_are_the_offsets_of_each_row():
    x = torch.randn(2, 3, 5, 8, generator=gen(9), dtype=torch.float64)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    y = apply_rope(x, positions=positions)
    assert torch.equal(y[0], apply_rope(x[0], 0)) and torch.equal(y[1], apply_rope(x[1], 7))
    assert torch.equal(apply_rope(x, positions=torch.arange(5)), apply_rope(x))
    table = LearnedPositions(16, 4)
    assert torch.equal(table(5, positions=positions)[1], table(5, 7))


# ---------------------------------------------------------------------------------------------- a window's cache


@pytest.mark.parametrize("window", [1, 3, 5])
def test_a_cache_cut_to_the_window_gives_the_full_windowed_outputs(window):
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4, rope=True).double()
    T = 11
    x = torch.randn(2, T, 16, generator=gen(10), dtype=torch.float64)
    full = mha(x, mask=sliding_window_mask(T, window=window, dtype=torch.bool))
    cache, steps = KVCache(), []
    for t in range(T):
        steps.append(mha(x[:, t:t + 1], cache=cache, positions=torch.full((2, 1), t)))
        cache.K, cache.V = cache.K[:, :, -(window - 1):], cache.V[:, :, -(window - 1):]
        if window == 1:
            cache.K = cache.V = None
        assert len(cache) <= window - 1
    assert (torch.cat(steps, 1) - full).abs().max() <= 1e-12
    wrong = mha(x[:, -1:], cache=KVCache(), positions=None)   # position 0: the count must keep going
    if window == 1:
        assert (wrong - full[:, -1:]).abs().max() <= 1e-12  # one key, itself: its angle cancels out


# ---------------------------------------------------------------------------------------------- Hugging Face


def test_hf_gpt2_with_attention_mask_and_position_ids_gives_the_same_real_logits():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=24, n_head=3, n_layer=2,
                                     initializer_range=0.2, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    gpt = from_gpt2(hf)
    prompts = prompts_of([6, 2, 9, 4], 11)
    for side in ("left", "right"):
        ids, is_pad = pad_prompts(prompts, 0, side=side)
        with torch.no_grad():
            want = hf(ids, attention_mask=(~is_pad).long(), position_ids=position_ids(is_pad)).logits
            got = gpt(ids, is_pad=is_pad)
        assert (want[~is_pad] - got[~is_pad]).abs().max() <= 1e-4
        assert want[~is_pad].std() > 0.1


# ---------------------------------------------------------------------------------------------- bad input


def test_bad_inputs_are_rejected_with_a_clear_message():
    model = padded_gpt("learned")
    ids, is_pad = pad_prompts(prompts_of([3, 5], 0), 0, side="left")
    rejects(lambda: model(ids, is_pad=is_pad.long()), "boolean", "is_pad", kind=TypeError)
    rejects(lambda: model(ids, is_pad=is_pad[:, 1:]), "is_pad must be (B=2, T=5)", "(2, 4)")
    rejects(lambda: model.generate(ids, 2, is_pad=is_pad.flip(-1)), "left padding", "row 0")
    rejects(lambda: model.generate(ids, 2, is_pad=torch.ones_like(is_pad)), "all padding")
    rejects(lambda: padding_mask(torch.zeros(2, 3)), "boolean", kind=TypeError)
    rejects(lambda: padding_mask(torch.zeros(3, dtype=torch.bool)), "(B, T)", "(3,)")
    Q = torch.randn(2, 4, 3)
    rejects(lambda: attention(Q, Q, Q, mask=torch.zeros(4, 4)), "boolean", "True = may attend", kind=TypeError)
    rejects(lambda: attention(Q, Q, Q, mask=torch.ones(4, 5, dtype=torch.bool)), "broadcast to (2, 4, 4)")
    rejects(lambda: attention(Q, Q, Q, mask=torch.ones(3, 4, 4, dtype=torch.bool)), "(3, 4, 4)")
    rejects(lambda: combine_masks(torch.ones(3, 3), 3, 3), "boolean", kind=TypeError)
    rejects(lambda: combine_masks(torch.ones(2, 4, dtype=torch.bool), 3, 3), "broadcast to (3, 3)", "(2, 4)")
    rejects(lambda: position_ids(torch.zeros(2, 3)), "is_pad", "boolean", kind=TypeError)
    rejects(lambda: position_ids(torch.zeros(2, 0, dtype=torch.bool)), "empty sequence")
    rejects(lambda: sliding_window_mask(4, window=0), "window must be a positive integer")
    rejects(lambda: sliding_window_mask(4, 3, window=2), "T_k=3 must be at least T_q=4")
    rejects(lambda: sliding_window_mask(4, window=2.0), "window", kind=TypeError)
    Q_even = torch.randn(2, 4, 6)                 # RoPE rotates pairs: an even d, so that positions are looked at
    rejects(lambda: apply_rope(Q_even, positions=torch.tensor([[0, 1, 2, 3]] * 2) - 1), "≥ 0")
    rejects(lambda: apply_rope(Q_even, positions=torch.zeros(2, 3, dtype=torch.long)), "T=4")
    rejects(lambda: apply_rope(Q_even, positions=torch.zeros(2, 4)), "integer", kind=TypeError)
    rejects(lambda: pad_prompts([], 0), "non-empty list", kind=TypeError)
    rejects(lambda: pad_prompts([torch.tensor([1, 2])], 0, side="middle"), "side")
    rejects(lambda: pad_prompts([torch.tensor([[1, 2]])], 0), "one sequence (T,)")
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    rejects(lambda: mha(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool)), "(2, 2, 3, 3)")
    rejects(lambda: mha(x, positions=torch.zeros(3, 3, dtype=torch.long)), "B=2")


def test_hidden_states_take_the_padding_too():
    model = padded_gpt("rope", 5)
    ids, is_pad = pad_prompts(prompts_of([2, 6], 5), 0, side="left")
    with torch.no_grad():
        X_L = model.hidden_states(ids, is_pad=is_pad)[-1]
        assert torch.equal(model.head(model.ln_f(X_L)), model(ids, is_pad=is_pad))


def test_a_bad_prompt_is_named_with_its_position():
    prompts = [torch.tensor([3, 4]), torch.tensor([5, 6, -7, 8])]
    rejects(lambda: pad_prompts(prompts, 0), "prompts[1]", "position 2", "-7", "≥ 0")
    rejects(lambda: pad_prompts([torch.tensor([1]), torch.tensor([0.5])], 0), "prompts[1]", "torch.float32",
            kind=TypeError)
    rejects(lambda: pad_prompts([torch.tensor([1]), torch.tensor([], dtype=torch.long)], 0), "prompts[1]",
            "empty sequence")
    rejects(lambda: pad_prompts([torch.tensor([1]), [2, 3]], 0), "prompts[1]", "torch.Tensor", kind=TypeError)


def test_prompts_on_another_device_are_rejected_before_their_values_are_read():
    """A "meta" tensor stands in for a GPU: it has a device and a shape but no values to read."""
    on_meta = torch.tensor([1, 2], device="meta")
    rejects(lambda: pad_prompts([torch.tensor([1, 2]), on_meta], 0), "prompts[1]", "meta", "prompts[0]", "cpu")
    rejects(lambda: pad_prompts([on_meta, torch.tensor([1, 2])], 0), "prompts[1]", "cpu", "meta")
    rejects(lambda: pad_prompts([on_meta], 0), "meta", "no values")
    ids, is_pad = pad_prompts([torch.tensor([1, 2], dtype=torch.int32), torch.tensor([3])], 0)
    assert ids.dtype == torch.long and ids.tolist() == [[1, 2], [0, 3]]
