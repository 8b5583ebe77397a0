"""Decisions about the library's input boundary that a fuzz cannot state: conventions, bounds, empty batches.

test_fuzz.py checks that wrong inputs fail clearly and legitimate variants keep their result; this file fixes
what "legitimate" and "right" mean where a choice was made.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from attnlib import GPT, Block, GPTConfig, MultiHeadAttention, ToyTokenizer, attention, causal_mask
from attnlib.costs import ops_called

# ---------------------------------------------------------------------------------------------- the mask


@pytest.mark.parametrize("T_q, T_k", [(1, 1), (4, 4), (3, 7), (1, 5), (6, 6)])
def test_a_boolean_causal_mask_means_may_attend_as_sdpa_reads_it(T_q, T_k):
    allowed = causal_mask(T_q, T_k, dtype=torch.bool)
    i, j = torch.arange(T_q)[:, None], torch.arange(T_k)[None, :]
    assert torch.equal(allowed, j <= i + (T_k - T_q))          # True on and below the (shifted) diagonal
    assert torch.equal(allowed, causal_mask(T_q, T_k) == 0)     # the same positions as the float mask M lets through
    g = torch.Generator().manual_seed(T_q * 10 + T_k)
    Q, K, V = (torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (T_q, T_k, T_k))
    with_bool = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    torch.testing.assert_close(with_bool, F.scaled_dot_product_attention(Q, K, V, attn_mask=causal_mask(
        T_q, T_k, dtype=torch.float64)))
    torch.testing.assert_close(with_bool, attention(Q, K, V))
    if T_q == T_k:
        torch.testing.assert_close(with_bool, F.scaled_dot_product_attention(Q, K, V, is_causal=True))


def test_the_boolean_convention_is_named_in_the_docstring():
    doc = inspect.getdoc(causal_mask)
    assert "torch.bool" in doc and "may attend" in doc and "scaled_dot_product_attention" in doc


def _nan_at_key(where, j, T=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, T, 8, generator=g, dtype=dtype) for _ in range(3))
    {"K": K, "V": V}[where][0, j] = float("nan")
    return Q, K, V


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", ["K", "V"])
@pytest.mark.parametrize("j", [0, 2, 4])
def test_nan_is_not_rejected_and_reaches_every_query_that_may_read_its_key(where, j, dtype):
    """Decided: no finiteness scan at the boundary. A NaN in K or V at key j reaches every query i >= j.

    This is the library's own promise, and it is not compared with SDPA: what torch's fused kernels make of a NaN
    has changed between releases (2.14 returns zeros for a query whose only key is NaN; 2.15 leaves the queries
    that may not read the key finite), and the library promises its math, not one release's behaviour.
    """
    Q, K, V = _nan_at_key(where, j, dtype=dtype)
    reads_j = torch.arange(5) >= j                          # query i may read key j
    ours = attention(Q, K, V)                                # no error: nothing is scanned
    assert ours[0, reads_j].isnan().all()
    with_mask = attention(Q, K, V, mask=torch.ones(5, 5, dtype=torch.bool))
    assert with_mask[0, reads_j].isnan().all()
    assert "NaN" in inspect.getdoc(attention)


def test_a_nan_key_in_the_future_spreads_through_the_added_mask_and_is_dropped_by_mask():
    """The library's own math for the queries that may not read the NaN key (documented in attention()).

    Without ``mask`` the causal mask is *added*: NaN + (−inf) is NaN, so every row of weights becomes NaN.
    With ``mask`` the blocked scores are overwritten with −inf, so the earlier queries never see the NaN and
    give what they give with that key replaced by any finite one.
    """
    Q, K, V = _nan_at_key("K", 3)
    out, P = attention(Q, K, V, return_weights=True)
    assert P.isnan().all() and out.isnan().all()
    allowed = torch.ones(5, 5, dtype=torch.bool)
    out_m, P_m = attention(Q, K, V, mask=allowed, return_weights=True)
    assert not P_m[0, :3].isnan().any() and P_m[0, 3:].isnan().all()
    K_finite = K.nan_to_num(nan=0.5)
    torch.testing.assert_close(out_m[0, :3], attention(Q, K_finite, V, mask=allowed)[0, :3])


def test_a_nan_value_gets_weight_exactly_zero_from_the_queries_that_may_not_read_it():
    """The weights of a query never touch a future V row: P[i, j] is exactly 0 for j > i, whatever V holds.

    (Whether P @ V then turns 0 · NaN into NaN is up to the matrix-product kernel, so it is not promised.)
    """
    Q, K, V = _nan_at_key("V", 3)
    out, P = attention(Q, K, V, return_weights=True)
    assert torch.equal(P[0, :3, 3], torch.zeros(3, dtype=P.dtype)) and not P.isnan().any()
    assert out[0, 3:].isnan().all()


# ---------------------------------------------------------------------------------------------- empty batches


def test_an_empty_batch_works_in_every_module_and_gives_an_empty_batch():
    torch.manual_seed(0)
    x = torch.randn(0, 5, 8)
    assert MultiHeadAttention(8, 2)(x).shape == (0, 5, 8)
    assert Block(8, 2)(x).shape == (0, 5, 8)
    model = GPT(GPTConfig(11, 8, 2, 1, max_T=8)).eval()
    ids = torch.zeros(0, 5, dtype=torch.long)
    assert model(ids).shape == (0, 5, 11)
    assert model.generate(ids, 3).shape == (0, 8)
    assert model.generate(ids, 3, temperature=1.0, generator=torch.Generator()).shape == (0, 8)


def test_the_loss_of_nothing_is_an_error_not_nan():
    model = GPT(GPTConfig(11, 8, 2, 1, max_T=8))
    ids = torch.zeros(0, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="at least one target"):
        model.loss(ids, ids)
    ids = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="at least one target"):
        model.loss(ids, torch.full_like(ids, -100))


def test_ignored_targets_are_skipped():
    torch.manual_seed(0)
    model = GPT(GPTConfig(11, 8, 2, 1, max_T=8)).eval()
    ids, targets = torch.tensor([[1, 2, 3]]), torch.tensor([[-100, 4, -100]])
    want = F.cross_entropy(model(ids)[0, 1:2], torch.tensor([4]))
    torch.testing.assert_close(model.loss(ids, targets), want)


# ---------------------------------------------------------------------------------------------- generation


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
def test_generate_fills_the_context_exactly(pos):
    """The last new token is returned, never fed back: a prompt of T and n_new = max_T - T + 1 fits."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(11, 8, 2, 2, max_T=6, pos=pos)).eval()
    ids = torch.tensor([[1, 2]])
    cached, recomputed = model.generate(ids, 5), model.generate(ids, 5, use_cache=False)
    assert cached.shape == (1, 7) and torch.equal(cached, recomputed)
    with pytest.raises(ValueError, match="max_T=6"):
        model.generate(ids, 6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sampling_at_a_tiny_temperature_is_greedy(dtype):
    torch.manual_seed(0)
    model = GPT(GPTConfig(13, 16, 2, 1, max_T=16)).to(dtype).eval()
    ids = torch.tensor([[1, 2, 3]])
    sampled = model.generate(ids, 6, temperature=1e-6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, model.generate(ids, 6))


@pytest.mark.parametrize("temperature", [-1.0, float("nan"), float("inf"), "hot"])
def test_a_temperature_that_is_no_temperature_is_rejected(temperature):
    model = GPT(GPTConfig(11, 8, 2, 1, max_T=8))
    with pytest.raises((ValueError, TypeError), match="temperature"):
        model.generate(torch.tensor([[1]]), 2, temperature=temperature)


# ---------------------------------------------------------------------------------------------- text and costs


def test_decode_drops_only_the_space_that_encode_added():
    tok = ToyTokenizer()
    assert tok.decode(tok.encode("the cat")) == "the cat"
    suffix = tok.id_of["s"]
    assert tok.decode([suffix]) == "s"            # a continuation piece keeps its first character
    assert tok.decode([]) == ""


def test_ops_called_takes_one_pattern_as_a_whole_word():
    x = torch.randn(4, 4)
    assert ops_called(lambda: x @ x, match="mm") == ops_called(lambda: x @ x, match=("mm",)) == ["mm"]
    assert ops_called(lambda: x @ x, match="am") == []     # not the letters 'a' and 'm' one by one


# ---------------------------------------------------------------------------------------------- one boundary


def _shown():
    """The stage modules' functions and forwards that the book prints with show_source."""
    import attnlib

    names = ("attention_weights scores attend softmax scale causal_mask sliding_window_mask padding_mask "
             "combine_masks split_heads merge_heads repeat_kv KVCache MultiHeadAttention MLP Block project "
             "Projections TokenEmbedding apply_rope").split()
    return [getattr(attnlib, n) for n in names] + [attnlib.FusedProjections.from_separate]


@pytest.mark.parametrize("obj", _shown(), ids=lambda o: o.__qualname__)
def test_the_source_the_book_shows_is_the_computation(obj):
    """No validator call, no .contiguous(), no isinstance in what show_source prints: only a one-line @boundary."""
    source = inspect.getsource(obj)
    for plumbing in ("require_", ".contiguous()", "isinstance(", "raise "):
        assert plumbing not in source, f"{obj.__qualname__} shows {plumbing!r}"
    written = [obj] if not inspect.isclass(obj) else [   # the methods written in the class (not a dataclass's)
        v for k, v in vars(obj).items()
        if inspect.isfunction(v) and k != "__len__" and "<" not in v.__code__.co_filename]
    for fn in written:
        assert hasattr(fn, "__wrapped__"), f"{fn.__qualname__} has no @boundary"


def test_a_block_checks_the_options_of_its_layers_once(monkeypatch):
    import attnlib.block
    import attnlib.heads

    calls = []

    def counting(name, fn):
        def wrapped(*a, **k):
            calls.append(name)
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(attnlib.heads, "require_kv_heads", counting("h_kv", attnlib.heads.require_kv_heads))
    monkeypatch.setattr(attnlib.block, "require_choice", counting("choice", attnlib.block.require_choice))
    monkeypatch.setattr(attnlib.block, "require_number", counting("eps", attnlib.block.require_number))
    Block(8, 2, h_kv=1)
    assert sorted(calls) == ["choice", "choice", "eps", "h_kv"]      # norm and gelu, eps, h_kv: once each
    calls.clear()
    MultiHeadAttention(8, 2)                                         # a layer built alone checks its own options
    assert calls == ["h_kv"]


def test_a_view_gives_the_bits_of_its_copy_through_every_layer():
    torch.manual_seed(0)
    block = Block(8, 2, backend="plain").eval()
    x = torch.randn(3, 8, 5).transpose(1, 2)                         # (3, 5, 8), not contiguous
    assert not x.is_contiguous() and torch.equal(block(x), block(x.contiguous()))


# ---------------------------------------------------------------------------------------------- the mask's layout


def _mask_call(mask, B=2, h=2, T=3, backend="sdpa"):
    torch.manual_seed(0)
    mha = MultiHeadAttention(4 * h, h, backend=backend).double()
    return mha(torch.randn(B, T, 4 * h, dtype=torch.float64), mask=mask)


@pytest.mark.parametrize("B,h", [(2, 2), (2, 3), (3, 1)])
def test_a_mask_with_some_but_not_all_batch_axes_is_ambiguous_and_rejected(B, h):
    """Decided: a mask has every axis of the scores (B|1, h|1, T_q, T_k) or only (T_q, T_k).

    (B, T, T) would line up with the scores' last three axes, (h, T_q, T_k): read per head when B == h and
    rejected otherwise, so it is rejected always, with the layouts to use instead.
    """
    mask = torch.ones(B, 3, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\(B, 1, T_q, T_k\)") as e:
        _mask_call(mask, B, h)
    assert str((B, 3, 3)) in str(e.value) and "(T_q, T_k)" in str(e.value)
    with pytest.raises(ValueError, match="all 4 axes"):
        attention(*(torch.randn(B, h, 3, 4),) * 3, mask=mask)


@pytest.mark.parametrize("backend", ["sdpa", "plain"])
def test_a_mask_per_sequence_per_head_or_shared_means_what_its_axes_say(backend):
    g = torch.Generator().manual_seed(1)
    full = torch.rand(2, 2, 3, 3, generator=g) < 0.6
    full |= torch.eye(3, dtype=torch.bool)                          # every query may read itself
    per_sequence, per_head, shared = full[:, :1], full[:1], full[0, 0]
    for mask in (per_sequence, per_head, shared):
        torch.testing.assert_close(_mask_call(mask, backend=backend),
                                   _mask_call(mask.expand(2, 2, 3, 3), backend=backend), rtol=0, atol=1e-12)


def test_a_mask_in_the_other_boolean_convention_is_named_not_turned_into_zeros():
    """True = may attend (as SDPA). A mask that leaves no query any key is nn.MultiheadAttention's True = blocked."""
    blocked = ~causal_mask(3, dtype=torch.bool)                      # True in the future: the other convention
    Q = torch.randn(2, 3, 4)
    for call in (lambda: attention(Q, Q, Q, mask=blocked), lambda: _mask_call(blocked),
                 lambda: Block(4, 2)(torch.randn(2, 3, 4), mask=blocked)):
        with pytest.raises(ValueError, match="True = may attend") as e:
            call()
        assert "~mask" in str(e.value) and "(3, 3)" in str(e.value)
    with pytest.raises(ValueError, match="no query read any key"):
        attention(Q, Q, Q, causal=False, mask=torch.zeros(3, 3, dtype=torch.bool))
    out = attention(Q, Q, Q, causal=False, mask=blocked)             # without the causal mask some keys are left
    assert (out[:, -1] == 0).all() and not (out[:, 0] == 0).all()


# ---------------------------------------------------------------------------------------------- how specs are bound


def _boundary_functions():
    """Every function of attnlib (modules and classes) wrapped by boundary: it carries its spec."""
    import importlib
    import pkgutil

    import attnlib

    seen = {}
    for info in pkgutil.walk_packages(attnlib.__path__, "attnlib."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            members = vars(obj).values() if inspect.isclass(obj) else [obj]
            for fn in members:
                fn = getattr(fn, "__func__", fn)
                if callable(fn) and hasattr(fn, "spec") and hasattr(fn, "__wrapped__"):
                    seen[f"{fn.__module__}.{fn.__qualname__}"] = fn
    return seen


def test_every_spec_is_bound_by_reference_and_takes_the_functions_arguments():
    from attnlib._validate import boundary

    found = _boundary_functions()
    assert len(found) > 60
    for name, fn in found.items():
        assert callable(fn.spec) and not isinstance(fn.spec, str), name
    with pytest.raises(TypeError, match="spec function itself"):
        boundary("_scores_args")


def test_no_library_source_names_a_spec_by_a_string():
    from pathlib import Path

    import attnlib

    for path in Path(attnlib.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert '@boundary("' not in text and "@boundary('" not in text, path


def test_a_spec_may_only_return_names_the_function_takes():
    from attnlib._validate import boundary

    def spec(x):
        return {"y": 1}

    @boundary(spec)
    def f(x):
        return x

    with pytest.raises(TypeError, match=r"returned \['y'\], which .*f does not take"):
        f(1)

    def short_spec(x):
        return None

    with pytest.raises(TypeError, match=r"must take the arguments of .*g.*missing \['z'\]"):
        @boundary(short_spec)
        def g(x, z):
            return x


def test_the_boundary_makes_every_tensor_argument_contiguous():
    from attnlib._validate import boundary

    seen = []

    @boundary(lambda a, b: None)
    def f(a, b):
        seen.append((a.is_contiguous(), b.is_contiguous()))

    f(torch.randn(4, 3).T, torch.randn(3, 4)[:, ::2])
    assert seen == [(True, True)]


def test_user_code_inside_a_boundary_is_checked_again():
    from attnlib._validate import boundary, user_code

    def outer_spec(fn):
        return None

    @boundary(outer_spec)
    def run(fn):
        with user_code():
            return fn()

    with pytest.raises(ValueError, match="T_k=3 must be at least T_q=5"):
        run(lambda: causal_mask(5, 3))


# ---------------------------------------------------------------------------------------------- silent classes


def test_causal_attention_with_more_queries_than_keys_is_an_error():
    Q, K = torch.randn(2, 5, 4), torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="T_k=3 must be at least T_q=5"):
        attention(Q, K, K)
    with pytest.raises(ValueError, match="T_k=3 must be at least T_q=5"):
        attention(Q, K, K, mask=torch.ones(5, 3, dtype=torch.bool))
    assert attention(Q, K, K, causal=False).shape == (2, 5, 4)   # without the mask, any T_q reads every key


def test_a_mask_of_the_other_convention_is_an_error_for_one_sequence_too():
    from attnlib import padding_mask

    is_pad = torch.tensor([[False, False, True], [False, False, False]])   # row 1 has no padding
    Q = torch.randn(2, 1, 3, 4)
    with pytest.raises(ValueError, match=r"lets no query read any key.*index \(1, 0\).*~mask"):
        attention(Q, Q, Q, mask=~padding_mask(is_pad))
    with pytest.raises(ValueError, match="lets no query read any key"):
        MultiHeadAttention(8, 2)(torch.randn(2, 3, 8), mask=~padding_mask(is_pad))
    left = torch.tensor([[True, True, False], [False, False, False]])      # left padding: pad queries read nothing
    assert attention(Q, Q, Q, mask=padding_mask(left)).shape == (2, 1, 3, 4)


@pytest.mark.parametrize("pos", ["learned", "rope", "sinusoidal"])
def test_train_checks_its_windows_against_max_T(pos):
    from attnlib.train import train

    model = GPT(GPTConfig(vocab_size=10, d_model=16, h=2, L=1, max_T=8, pos=pos))
    with pytest.raises(ValueError, match="T=16 exceeds the context length max_T=8"):
        train(model, torch.randint(0, 10, (100,)), T=16, steps=1)


def test_setting_an_option_of_the_frozen_config_on_the_model_is_an_error():
    model = GPT(GPTConfig(vocab_size=10, d_model=16, h=2, L=1))
    with pytest.raises(AttributeError, match=r"model.causal is an option of the model's frozen config.*replace"):
        model.causal = False
    model.extra = 1   # any other attribute is the nn.Module's business


# ---------------------------------------------------------------------------------------------- what a listing shows


def test_show_source_leaves_the_boundary_line_out_unless_asked():
    import attnlib

    for obj in (attnlib.scores, attnlib.MultiHeadAttention, attnlib.GPT.forward):
        assert "@boundary" not in attnlib.show_source(obj).data
    assert "@boundary(_scores_args)" in attnlib.show_source(attnlib.scores, boundary=True).data
    assert "show_source" not in attnlib.runtime.__all__ and attnlib.show_source.__module__ == "attnlib.display"


def test_multi_head_forward_is_a_short_listing_of_named_steps():
    source = inspect.getsource(MultiHeadAttention.forward)
    body = source.split('"""')[-1].strip().splitlines()
    assert len(body) <= 8, body
    assert "self.qkv(" in source and "cache.extend(" in source and "repeat_kv(" in source
    assert "self.attend_heads(" in source and "merge_heads(" in source


def test_attend_heads_checks_its_heads():
    mha = MultiHeadAttention(8, 2)
    Q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"K must be \(B=1, h=2, T_k, d_head=4\)"):
        mha.attend_heads(Q, torch.randn(1, 3, 3, 4), Q)
    with pytest.raises(ValueError, match="T_k=2 must be at least T_q=3"):
        mha.attend_heads(Q, Q[:, :, :2], Q[:, :, :2])
    out, weights = mha.attend_heads(Q, Q, Q, return_weights=True)
    assert out.shape == (1, 2, 3, 4) and weights.shape == (1, 2, 3, 3)
