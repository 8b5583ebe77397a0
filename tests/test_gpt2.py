"""attnlib's GPT against Hugging Face's GPT-2, an implementation nobody here wrote.

Every GPT-2 is built at random init from a small GPT2Config (never downloaded): weights are mapped both ways and
the two models must give the same logits, hidden states and greedy tokens.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect

import pytest
import torch

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

from attnlib import GPT, GPTConfig  # noqa: E402
from attnlib.gpt2 import from_gpt2, load_gpt2, to_gpt2, weight_pairs  # noqa: E402

# transformers is imported where a test needs it, not at collection: its import takes seconds on every worker.

SHAPES = [   # vocab_size, n_embd, n_head, n_layer, n_positions, n_inner
    (50, 32, 4, 2, 16, None),
    (37, 24, 3, 3, 12, 40),
    (29, 16, 1, 1, 9, None),
]


def hf_gpt2(seed: int, shape=SHAPES[0], *, std: float = 0.2, **overrides):
    """A random-init GPT-2 (eval mode). A larger init std than GPT-2's 0.02 makes the logits far from uniform."""
    from transformers import GPT2Config, GPT2LMHeadModel

    V, d, h, L, n_pos, n_inner = shape
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=V, n_positions=n_pos, n_embd=d, n_head=h, n_layer=L, n_inner=n_inner,
                        initializer_range=std, bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1,
                        **overrides)
    return GPT2LMHeadModel(config).eval()


def random_ids(V: int, B: int, T: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_gpt2_defaults_map_to_tied_head_tanh_gelu_and_eps():
    hf = hf_gpt2(0)
    assert hf.config.activation_function == "gelu_new" and hf.config.tie_word_embeddings
    gpt = from_gpt2(hf)
    cfg = gpt.config
    assert (cfg.tie, cfg.gelu, cfg.bias, cfg.eps) == (True, "tanh", True, hf.config.layer_norm_epsilon)
    assert (cfg.pos, cfg.norm, cfg.causal, cfg.max_T) == ("learned", "pre", True, 16)
    assert gpt.head.weight is gpt.embed.table
    assert not gpt.training
    pairs = weight_pairs(gpt, hf)   # every parameter of both models is mapped exactly once
    assert sorted(id(p) for p, _, _ in pairs) == sorted(id(p) for p in gpt.parameters())
    assert sorted(id(p) for _, p, _ in pairs) == sorted(id(p) for p in hf.parameters())
    n_hf = sum(p.numel() for p in hf.parameters())
    assert sum(p.numel() for p in gpt.parameters()) == n_hf   # tied: the table is counted once in both


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_logits_equal_float64_and_float32(shape, seed):
    hf = hf_gpt2(seed, shape)
    gpt = from_gpt2(hf)
    ids = random_ids(shape[0], 3, shape[4], seed)   # the full context, T = n_positions
    with torch.no_grad():
        assert max_diff(hf(ids).logits, gpt(ids)) <= 1e-4
        hf64, gpt64 = hf.double(), gpt.double()
        logits = gpt64(ids)
        assert max_diff(hf64(ids).logits, logits) <= 1e-10
        assert logits.std() > 0.1   # far from uniform: a wrong mapping could not hide


@pytest.mark.parametrize("seed", [0, 3])
def test_hidden_states_after_every_block(seed):
    shape = SHAPES[1]
    hf = hf_gpt2(seed, shape).double()
    gpt = from_gpt2(hf)
    ids = random_ids(shape[0], 2, 7, seed)
    with torch.no_grad():
        theirs = hf(ids, output_hidden_states=True).hidden_states
        ours = gpt.hidden_states(ids)
        assert len(theirs) == len(ours) == shape[3] + 1
        for l in range(shape[3]):   # X₀ … X_{L-1}
            assert max_diff(theirs[l], ours[l]) <= 1e-10, f"X_{l}"
        # transformers reports its last hidden state after the final LayerNorm
        assert max_diff(theirs[-1], gpt.ln_f(ours[-1])) <= 1e-10


@pytest.mark.parametrize("tie, gelu", [(True, "tanh"), (False, "exact")])
def test_attnlib_to_gpt2_and_back(tie, gelu):
    torch.manual_seed(5)
    gpt = GPT(GPTConfig(31, 24, 3, 2, d_ff=36, max_T=10, tie=tie, gelu=gelu, eps=1e-6)).double().eval()
    with torch.no_grad():   # move every weight away from its init so that nothing matches by accident
        for p in gpt.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf = to_gpt2(gpt)
    from transformers import GPT2LMHeadModel

    assert isinstance(hf, GPT2LMHeadModel) and not hf.training
    assert hf.config.tie_word_embeddings == tie
    assert hf.config.activation_function == {"tanh": "gelu_new", "exact": "gelu"}[gelu]
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == tie
    assert hf.config.layer_norm_epsilon == 1e-6 and hf.config.n_inner == 36
    ids = random_ids(31, 2, 10, 5)
    with torch.no_grad():
        assert max_diff(hf(ids).logits, gpt(ids)) <= 1e-10
    back = from_gpt2(hf)
    assert back.config == gpt.config
    mine, theirs = gpt.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_conv1d_weights_are_transposed_and_c_attn_is_q_k_v():
    hf = hf_gpt2(2)
    gpt = from_gpt2(hf)
    d = hf.config.n_embd
    c_attn = hf.transformer.h[0].attn.c_attn.weight   # (in, out) = (d_model, 3·d_model)
    assert c_attn.shape == (d, 3 * d)
    W_Q = gpt.blocks[0].attn.W_QKV.weight[:d].T         # first d rows of (out, in) = W_Q (d_model, d_model)
    assert torch.equal(W_Q, c_attn[:, :d])
    assert torch.equal(gpt.blocks[0].attn.W_QKV.weight[2 * d:].T, c_attn[:, 2 * d:])   # W_V last


@pytest.mark.parametrize("seed", [0, 4])
def test_cached_greedy_generation_same_tokens(seed):
    hf = hf_gpt2(seed).double()
    gpt = from_gpt2(hf)
    V = hf.config.vocab_size
    prompt = random_ids(V - 1, 2, 3, seed)
    n_new = 10
    ours = gpt.generate(prompt, n_new, use_cache=True)
    # eos_token_id=None: a random model may pick the end-of-text id, and generate would stop or ban it
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n_new,
                         do_sample=False, eos_token_id=None)
    assert torch.equal(ours, theirs)
    # the same loop by hand with GPT-2's own cache (transformers 5.24 renamed past_key_values to cache)
    name = "cache" if "cache" in inspect.signature(type(hf).forward).parameters else "past_key_values"
    ids, cache, step = prompt, None, prompt
    with torch.no_grad():
        for _ in range(n_new):
            out = hf(step, **{name: cache}, use_cache=True)
            cache = getattr(out, name)
            step = out.logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, step], dim=1)
    assert torch.equal(ours, ids)
    assert len(set(ours[:, 3:].flatten().tolist())) > 1   # not one token repeated: a real test of the order


def test_save_pretrained_and_load_back(tmp_path):
    hf = hf_gpt2(6)
    hf.save_pretrained(tmp_path)
    gpt = load_gpt2(str(tmp_path), local_files_only=True)
    assert isinstance(gpt, GPT) and gpt.config.tie
    ids = random_ids(hf.config.vocab_size, 2, 8, 6)
    with torch.no_grad():
        assert max_diff(hf(ids).logits, gpt(ids)) <= 1e-4


def test_new_options_keep_the_old_model_by_default():
    torch.manual_seed(0)
    old = GPT(GPTConfig(20, 16, 2, 2, max_T=8))
    assert (old.config.tie, old.config.gelu, old.config.bias, old.config.eps) == (False, "exact", True, 1e-5)
    assert old.head.weight is not old.embed.table
    assert GPT(old.config).config == old.config
    same = GPT(dataclasses.replace(old.config))
    same.load_state_dict(old.state_dict())
    ids = random_ids(20, 2, 8, 0)
    assert torch.equal(same(ids), old(ids))
    tied = GPT(GPTConfig(20, 16, 2, 2, max_T=8, tie=True))
    n = sum(p.numel() for p in old.parameters())
    assert sum(p.numel() for p in tied.parameters()) == n - 20 * 16
    no_bias = GPT(GPTConfig(20, 16, 2, 2, max_T=8, bias=False))
    assert not any(name.endswith("bias") for name, _ in no_bias.named_parameters())
    tanh = GPT(dataclasses.replace(old.config, gelu="tanh"))
    tanh.load_state_dict(old.state_dict())
    diff = max_diff(tanh(ids), old(ids))
    assert 0 < diff < 1e-2   # a close approximation, not the same function


def test_tied_head_stays_tied_after_to_and_training_step():
    gpt = GPT(GPTConfig(20, 16, 2, 1, max_T=8, tie=True)).double()
    assert gpt.head.weight is gpt.embed.table
    ids = random_ids(20, 2, 8, 1)
    gpt.loss(ids[:, :-1], ids[:, 1:]).backward()
    assert gpt.embed.table.grad is not None and gpt.embed.table.grad.abs().sum() > 0


@pytest.mark.parametrize("make, error, words", [
    (lambda: GPT(GPTConfig(10, gelu="relu")), ValueError, ["gelu", "'relu'", "'tanh'"]),
    (lambda: GPT(GPTConfig(10, eps=0)), ValueError, ["eps", "0"]),
    (lambda: GPT(GPTConfig(10, tie="yes")), TypeError, ["tie", "'yes'"]),
    (lambda: GPT(GPTConfig(10, bias=1)), TypeError, ["bias"]),
    (lambda: GPT({"vocab_size": 10}), TypeError, ["GPTConfig", "dict"]),
    (lambda: from_gpt2(torch.nn.Linear(2, 2)), TypeError, ["GPT2LMHeadModel", "Linear"]),
    (lambda: to_gpt2(torch.nn.Linear(2, 2)), TypeError, ["attnlib GPT", "Linear"]),
    (lambda: to_gpt2(GPT(GPTConfig(10, 8, 2, 1, pos="rope"))), ValueError, ["pos='learned'", "pos='rope'"]),
    (lambda: to_gpt2(GPT(GPTConfig(10, 8, 2, 1, norm="post"))), ValueError, ["norm='pre'", "norm='post'"]),
    (lambda: to_gpt2(GPT(GPTConfig(10, 8, 2, 1, bias=False))), ValueError, ["bias=True", "bias=False"]),
    (lambda: from_gpt2(hf_gpt2(0, scale_attn_by_inverse_layer_idx=True)), ValueError,
     ["scale_attn_by_inverse_layer_idx=False", "True"]),
    (lambda: from_gpt2(hf_gpt2(0, activation_function="relu")), ValueError,
     ["activation_function", "'relu'", "'gelu_new'"]),
    (lambda: load_gpt2(3), TypeError, ["name_or_path", "int"]),
    (lambda: weight_pairs(GPT(GPTConfig(10, 8, 2, 1)), hf_gpt2(0)), ValueError, ["same sizes", "(10, 8, 2, 1"]),
    (lambda: weight_pairs(GPT(GPTConfig(10, 8, 2, 1)), torch.nn.Linear(2, 2)), TypeError,
     ["GPT2LMHeadModel", "Linear"]),
])
def test_bad_inputs_name_expected_and_actual(make, error, words):
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_gpt_config_is_frozen():
    cfg = GPTConfig(10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 8
