"""Properties that hold for every attention path, checked on inputs hypothesis chooses."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib import GPT, Block, GPTConfig, MultiHeadAttention, apply_rope, attention, attention_weights

settings.register_profile("course", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("course")

seeds = st.integers(0, 2**16)
lengths = st.integers(2, 12)


def randn(seed, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def module(kind, seed, d_model=16, h=4):
    torch.manual_seed(seed)
    if kind == "mha-sdpa":
        return MultiHeadAttention(d_model, h, backend="sdpa").double()
    if kind == "mha-plain":
        return MultiHeadAttention(d_model, h, backend="plain").double()
    if kind == "mha-rope":
        return MultiHeadAttention(d_model, h, rope=True).double()
    if kind == "block-pre":
        return Block(d_model, h).double()
    return Block(d_model, h, norm="post").double()


KINDS = st.sampled_from(["mha-sdpa", "mha-plain", "mha-rope", "block-pre", "block-post"])


@given(seed=seeds, T=lengths, data=st.data())
def test_changing_a_future_token_never_changes_an_earlier_output_functional(seed, T, data):
    t = data.draw(st.integers(1, T - 1))          # positions 0 … t-1 are earlier, t … T-1 change
    Q, K, V = randn(seed, 3, 2, T, 8).unbind(0)
    out = attention(Q, K, V)
    K2, V2 = K.clone(), V.clone()
    K2[:, t:] += randn(seed + 1, 2, T - t, 8)
    V2[:, t:] += randn(seed + 2, 2, T - t, 8)
    out2 = attention(Q, K2, V2)
    torch.testing.assert_close(out[:, :t], out2[:, :t])
    assert not torch.allclose(out[:, t:], out2[:, t:])    # control: the change is seen from position t on


@given(kind=KINDS, seed=seeds, T=lengths, data=st.data())
def test_changing_a_future_position_never_changes_an_earlier_output_modules(kind, seed, T, data):
    t = data.draw(st.integers(1, T - 1))
    m = module(kind, seed)
    x = randn(seed, 2, T, 16)
    y = x.clone()
    y[:, t:] = randn(seed + 1, 2, T - t, 16)
    torch.testing.assert_close(m(x)[:, :t], m(y)[:, :t])
    assert not torch.allclose(m(x)[:, t:], m(y)[:, t:])


@given(pos=st.sampled_from(["learned", "sinusoidal", "rope", None]), seed=seeds, T=lengths, data=st.data())
def test_changing_a_future_token_never_changes_earlier_logits_of_the_stack(pos, seed, T, data):
    t = data.draw(st.integers(1, T - 1))
    torch.manual_seed(seed)
    model = GPT(GPTConfig(20, 16, 2, 2, max_T=16, pos=pos)).double()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 20, (1, T), generator=g)
    ids2 = ids.clone()
    ids2[0, t:] = (ids[0, t:] + 1 + torch.randint(0, 18, (T - t,), generator=g)) % 20
    torch.testing.assert_close(model(ids)[:, :t], model(ids2)[:, :t])
    for X, X2 in zip(model.hidden_states(ids), model.hidden_states(ids2)):
        torch.testing.assert_close(X[:, :t], X2[:, :t])


@given(seed=seeds, T=lengths, scale=st.floats(0.1, 30.0))
def test_weight_rows_sum_to_one_and_masked_weights_are_exactly_zero(seed, T, scale):
    Q, K = (randn(seed, 2, 3, T, 8) * scale).unbind(0)
    P = attention_weights(Q, K, causal=True)
    torch.testing.assert_close(P.sum(-1), torch.ones(3, T, dtype=P.dtype))
    assert (P >= 0).all()
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert (P[..., future] == 0).all()          # exactly zero, not merely small


@given(seed=seeds, T=lengths)
def test_returned_multi_head_weights_are_causal_and_normalised(seed, T):
    m = module("mha-plain", seed)
    _, P = m(randn(seed, 2, T, 16), return_weights=True)
    torch.testing.assert_close(P.sum(-1), torch.ones(2, 4, T, dtype=P.dtype))
    assert (P[..., torch.ones(T, T, dtype=torch.bool).triu(1)] == 0).all()


@given(seed=seeds, T=lengths, data=st.data())
def test_without_positions_or_mask_attention_is_permutation_equivariant(seed, T, data):
    perm = torch.tensor(data.draw(st.permutations(range(T))))
    Q, K, V = randn(seed, 3, 1, T, 8).unbind(0)
    out = attention(Q, K, V, causal=False)
    torch.testing.assert_close(attention(Q[:, perm], K[:, perm], V[:, perm], causal=False), out[:, perm])
    torch.manual_seed(seed)
    for m in (MultiHeadAttention(16, 4).double(), Block(16, 4).double()):
        x = randn(seed, 2, T, 16)
        torch.testing.assert_close(m(x[:, perm], causal=False), m(x, causal=False)[:, perm])


@given(seed=seeds, T=lengths, data=st.data())
def test_a_stack_without_positions_or_mask_is_permutation_equivariant(seed, T, data):
    perm = torch.tensor(data.draw(st.permutations(range(T))))
    torch.manual_seed(seed)
    model = GPT(GPTConfig(20, 16, 2, 2, max_T=16, pos=None, causal=False)).double()
    ids = torch.randint(0, 20, (2, T), generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(model(ids[:, perm]), model(ids)[:, perm])


@given(seed=seeds, i=st.integers(0, 40), j=st.integers(0, 40), shift=st.integers(1, 50))
def test_with_rope_the_score_depends_only_on_the_offset(seed, i, j, shift):
    q, k = randn(seed, 2, 16).unbind(0)
    T = max(i, j) + shift + 1
    Q, K = apply_rope(q.expand(T, 16).clone()), apply_rope(k.expand(T, 16).clone())
    torch.testing.assert_close(Q[i] @ K[j], Q[i + shift] @ K[j + shift])
    # controls (an identity "rotation" would pass the line above): at offset 0 the score is q · k, at any
    # other offset it is not; the rotation schedule itself is checked in test_against_torch.py
    if i == j:
        torch.testing.assert_close(Q[i] @ K[j], q @ k)
    else:
        assert not torch.isclose(Q[i] @ K[j], q @ k)
