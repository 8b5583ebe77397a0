"""attnlib.audit: it never blames correct attention that nobody here wrote, and it names bugs of our own making.

Each reference is audited through a small adapter that passes what its model would pass: the causal mask that
transformers builds outside its attention modules, Llama's rotary tables, nn.MultiheadAttention's batch_first and
mask. Each bug is a small layer or core written for this file, one or more per label, among them re-creations of
attention bugs that shipped (named after their issue or pull request).
"""

from __future__ import annotations

import functools
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlib import GPT, GPTConfig, MultiHeadAttention, audit
from attnlib.audit import LABELS, Finding, Report
from attnlib.checks import check_audit_prediction

transformers = pytest.importorskip("transformers")

D, H = 64, 4   # d_model and heads of every layer here


# ---------------------------------------------------------------------------------------------- adapters

def sdpa_core(Q, K, V):
    """SDPA as a model calls it: is_causal for a whole prompt, a bottom-right boolean mask for a cached step."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    if T_q == T_k:
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    may_read = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=may_read)


class TorchMHA(nn.Module):
    """nn.MultiheadAttention(batch_first=True) with the float causal mask (−inf above the diagonal)."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, H, batch_first=True)

    def forward(self, x):
        T = x.shape[1]
        mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


class TorchMHAWrongConvention(TorchMHA):
    """The bug: SDPA's boolean convention (True = may attend) given to nn.MultiheadAttention, which reads True as
    masked. Its insides are one call the trace cannot open, so only the probes can speak."""

    def forward(self, x):
        T = x.shape[1]
        may_read = torch.ones(T, T, dtype=torch.bool).tril()
        return self.mha(x, x, x, attn_mask=may_read, need_weights=False)[0]


def hf_additive_mask(x):
    """The mask transformers builds outside the attention module: 0 where reading is allowed, the dtype's lowest
    value in the future, shaped (B, 1, T, T)."""
    B, T = x.shape[:2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = torch.zeros(T, T, dtype=x.dtype).masked_fill(future, torch.finfo(x.dtype).min)
    return mask.expand(B, 1, T, T)


def gpt2_config(impl: str):
    return transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=D, n_head=H, n_layer=2, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=impl,
                                   bos_token_id=49, eos_token_id=49)


class HFGPT2Attention(nn.Module):
    """GPT2Attention (eager or sdpa), called with the additive causal mask GPT2Model would pass it."""

    def __init__(self, impl: str):
        super().__init__()
        torch.manual_seed(0)
        self.attn = transformers.models.gpt2.modeling_gpt2.GPT2Attention(gpt2_config(impl), layer_idx=0)

    def forward(self, x):
        return self.attn(x, attention_mask=hf_additive_mask(x))[0]


class HFLlamaAttention(nn.Module):
    """LlamaAttention with the rotary tables and the additive causal mask LlamaModel builds outside it."""

    def __init__(self):
        super().__init__()
        from transformers.models.llama import modeling_llama as ml
        config = transformers.LlamaConfig(vocab_size=50, hidden_size=D, intermediate_size=128, num_attention_heads=H,
                                          num_key_value_heads=2, max_position_embeddings=32,
                                          attn_implementation="eager")
        torch.manual_seed(0)
        self.attn, self.rope = ml.LlamaAttention(config, layer_idx=0), ml.LlamaRotaryEmbedding(config)

    def forward(self, x):
        positions = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
        cos, sin = self.rope(x, positions)
        return self.attn(x, position_embeddings=(cos, sin), attention_mask=hf_additive_mask(x))[0]


def gpt2_model(impl: str):
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(gpt2_config(impl)).eval()


def ours(backend="sdpa", **kw):
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, backend=backend, **kw)


CORRECT_LAYERS = {
    "nn.MultiheadAttention": TorchMHA,
    "GPT2Attention eager": lambda: HFGPT2Attention("eager"),
    "GPT2Attention sdpa": lambda: HFGPT2Attention("sdpa"),
    "LlamaAttention": HFLlamaAttention,
    "attnlib sdpa": ours,
    "attnlib plain": lambda: ours("plain"),
    "attnlib rope, grouped K/V": lambda: ours(h_kv=2, rope=True),
}


def test_sdpa_core_is_clean():
    report = audit(sdpa_core, kind="core")
    assert report.ok, report


def test_the_librarys_core_is_clean():
    from attnlib import attention
    assert audit(attention, kind="core").ok


@pytest.mark.parametrize("name", CORRECT_LAYERS)
def test_correct_layers_are_clean(name):
    report = audit(CORRECT_LAYERS[name](), kind="layer", d_model=D)
    assert report.ok, report


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_gpt2_model_is_clean(impl):
    report = audit(gpt2_model(impl), kind="model", vocab_size=50)
    assert report.ok, report


def test_the_librarys_model_is_clean():
    torch.manual_seed(0)
    report = audit(GPT(GPTConfig(vocab_size=30, d_model=32, h=2, L=2, max_T=16)), kind="model", vocab_size=30)
    assert report.ok, report


def test_a_layer_of_d_model_64_takes_well_under_ten_seconds():
    layer = HFGPT2Attention("eager")
    start = time.perf_counter()
    audit(layer, kind="layer", d_model=D)
    assert time.perf_counter() - start < 5


# ---------------------------------------------------------------------------------------------- bugs: layers

class Layer(nn.Module):
    """A GPT-style layer with switches for each bug. Every switch off gives correct causal attention."""

    def __init__(self, *, scale_by="d_head", split="transpose", mask="fill", slice_mask=False, axis=-1,
                 times="V", after=False, fill=float("-inf"), batch_mix=False, stable=True):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.register_buffer("tril", torch.tril(torch.ones(16, 16)))
        self.opts = dict(scale_by=scale_by, split=split, mask=mask, slice_mask=slice_mask, axis=axis, times=times,
                         after=after, fill=fill, batch_mix=batch_mix, stable=stable)

    def forward(self, x):
        o = self.opts
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        if o["batch_mix"]:
            k = k - k.mean(0, keepdim=True)
        if o["split"] == "transpose":
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        else:   # the bug: (B, T, C) read as (B, h, T, d_head), as .view does on a contiguous tensor
            q, k, v = (t.reshape(B, H, T, C // H) for t in (q, k, v))
        if o["mask"] == "sdpa-triu":   # rasbt/LLMs-from-scratch #1061: True above the diagonal, given to SDPA
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif o["mask"] == "float-to-bool":   # transformers #38094: the additive mask converted to bool
            additive = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=additive.bool())
        else:
            d = {"d_head": C // H, "d_model": C}[o["scale_by"]]
            s = q @ k.transpose(-2, -1) * d ** -0.5
            keep = self.tril[1:T + 1, :T] if o["slice_mask"] else self.tril[:T, :T]
            if o["mask"] == "fill" and not o["after"]:
                s = s.masked_fill(keep == 0, o["fill"])
            if o["stable"]:
                p = F.softmax(s, dim=o["axis"])
            else:
                e = torch.exp(s)
                p = e / e.sum(-1, keepdim=True)
            if o["after"]:
                p = p.masked_fill(keep == 0, 0.0)
            y = p @ (v if o["times"] == "V" else k)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class HalfMaskLayer(Layer):
    """An additive mask made from 1 − tril times a big number in the input's dtype: fine in float32, but in float16
    the big number is −inf and 0 · (−inf) is NaN on every allowed entry."""

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        big = torch.tensor(-1e9, dtype=x.dtype)
        s = q @ k.transpose(-2, -1) / math.sqrt(C // H) + (1 - self.tril[:T, :T].to(x.dtype)) * big
        y = F.softmax(s, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(B, T, C))


BUGGY_LAYERS = {
    # ng-video-lecture PR #6: scores scaled by the embedding width C, not the head size
    "scale-by-C": (lambda: Layer(scale_by="d_model"), {"scale"}),
    "rasbt-1061-triu-bool-to-sdpa": (lambda: Layer(mask="sdpa-triu"), {"mask-convention", "leak"}),
    "transformers-38094-float-mask-to-bool": (lambda: Layer(mask="float-to-bool"), {"mask-convention", "leak"}),
    "view-without-transpose": (lambda: Layer(split="view"), {"head-split", "leak"}),
    "buffer-sliced-one-row-down": (lambda: Layer(slice_mask=True), {"mask-offset", "leak"}),
    "no-mask": (lambda: Layer(mask="none"), {"leak"}),
    "softmax-over-queries": (lambda: Layer(axis=-2), {"softmax-axis"}),
    "weights-times-K": (lambda: Layer(times="K"), {"weights-times-K"}),
    "mask-after-softmax": (lambda: Layer(after=True), {"mask-after-softmax", "leak"}),
    "batch-mean-of-keys": (lambda: Layer(batch_mix=True), {"batch-mixing"}),
    "float16-fill": (HalfMaskLayer, {"half-precision"}),
    "sdpa-convention-given-to-nn.MultiheadAttention": (TorchMHAWrongConvention, {"leak"}),
    "exp-without-max": (lambda: Layer(stable=False), {"unstable"}),
}


@pytest.mark.parametrize("name", BUGGY_LAYERS)
def test_buggy_layers_are_named(name):
    make, labels = BUGGY_LAYERS[name]
    report = audit(make(), kind="layer", d_model=D)
    assert labels <= set(report.labels), report
    assert all(f.message for f in report.findings)


def test_the_scale_message_names_the_factor_found():
    report = audit(Layer(scale_by="d_model"), kind="layer", d_model=D)
    (scale,) = [f for f in report.findings if f.label == "scale"]
    assert "0.1250 = 1/√64" in scale.message and "d_model" in scale.message and "1/√16" in scale.message


def test_the_float_to_bool_conversion_is_named():
    report = audit(Layer(mask="float-to-bool"), kind="layer", d_model=D)
    assert "converted from an additive float mask" in str(report)


# ---------------------------------------------------------------------------------------------- bugs: cores

def core(Q, K, V, *, scale=None, diag=0, topleft=False, fill=float("-inf")):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    s = Q @ K.transpose(-2, -1) * (Q.shape[-1] ** -0.5 if scale is None else scale)
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + diag + (0 if topleft else T_k - T_q))
    return torch.softmax(s.masked_fill(future, fill), -1) @ V


def manual_core(Q, K, V):
    """No torch softmax to trace: exp and sum by hand, scaled by 1/d_k (found by the named wrong cores)."""
    T = Q.shape[-2]
    s = Q @ K.transpose(-2, -1) / Q.shape[-1]
    s = s + torch.zeros(T, K.shape[-2]).masked_fill(torch.ones(T, K.shape[-2], dtype=torch.bool).triu(
        1 + K.shape[-2] - T), float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)) @ V


def padded_core(Q, K, V):
    """Masks the first key as if it were padding, for every query: query 0 then has nothing to read."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    blocked = torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q)
    blocked[:, 0] = True
    return torch.softmax(s.masked_fill(blocked, float("-inf")), -1) @ V


def cleaned_core(Q, K, V):
    """Correct: a row with no key to read (none here) would be NaN after softmax; it is set to 0 afterwards."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    blocked = torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q)
    P = torch.softmax((Q @ K.mT / math.sqrt(Q.shape[-1])).masked_fill(blocked, float("-inf")), -1)
    return P.masked_fill(blocked.all(-1, keepdim=True), 0.0) @ V


def test_clearing_empty_rows_after_softmax_is_not_a_mask_after_softmax():
    assert audit(cleaned_core).ok


BUGGY_CORES = {
    "sdpa-given-K-as-values": (lambda Q, K, V: sdpa_core(Q, K, K), {"weights-times-K"}),
    "mask-multiplied-after-softmax": (lambda Q, K, V: (torch.softmax(Q @ K.mT / math.sqrt(Q.shape[-1]), -1)
                                                       * torch.ones(Q.shape[-2], K.shape[-2]).tril(
                                                           K.shape[-2] - Q.shape[-2])) @ V,
                                      {"mask-after-softmax", "leak"}),
    "no-scale": (lambda Q, K, V: core(Q, K, V, scale=1.0), {"scale"}),
    "cannot-read-itself": (lambda Q, K, V: core(Q, K, V, diag=-1), {"mask-offset", "nan-empty-row"}),
    "reads-next-key": (lambda Q, K, V: core(Q, K, V, diag=1), {"mask-offset", "leak"}),
    "cached-top-left": (lambda Q, K, V: core(Q, K, V, topleft=True), {"mask-offset"}),
    "is_causal-for-a-cached-step": (lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
                                    {"mask-offset"}),
    "sdpa-scale-given-wrong": (lambda Q, K, V: F.scaled_dot_product_attention(
        Q, K, V, attn_mask=torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool).tril(K.shape[-2] - Q.shape[-2]),
        scale=1 / Q.shape[-1]), {"scale"}),
    "manual-exp-scale-1/d_k": (manual_core, {"scale"}),
    "padding-empties-a-row": (padded_core, {"nan-empty-row"}),
    "mask-for-T_q-only": (lambda Q, K, V: torch.softmax(
        (Q @ K.mT).masked_fill(torch.ones(Q.shape[-2], Q.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
        / math.sqrt(Q.shape[-1]), -1) @ V, {"cached-step"}),
}


@pytest.mark.parametrize("name", BUGGY_CORES)
def test_buggy_cores_are_named(name):
    fn, labels = BUGGY_CORES[name]
    report = audit(fn, kind="core")
    assert labels <= set(report.labels), report


def test_every_label_is_exercised():
    named = set().union(*(labels for _, labels in BUGGY_LAYERS.values()),
                        *(labels for _, labels in BUGGY_CORES.values()))
    assert set(LABELS) - {"nan"} <= named, set(LABELS) - named


# ---------------------------------------------------------------------------------------------- models

def test_a_model_with_a_leaking_block_is_named():
    model = gpt2_model("eager")

    class NoMask(nn.Module):
        """GPT-2's blocks called without the mask GPT2Model builds for them: eager attention then reads all."""

        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            t = self.m.transformer
            x = t.wte(ids) + t.wpe(torch.arange(ids.shape[1]))
            for block in t.h:
                out = block(x)
                x = out[0] if isinstance(out, tuple) else out
            return self.m.lm_head(t.ln_f(x))

    report = audit(NoMask(), kind="model", vocab_size=50)
    assert "leak" in report.labels, report


# ---------------------------------------------------------------------------------------------- report and errors

def test_the_report_reads_well():
    report = audit(Layer(times="K"), kind="layer", d_model=D)
    assert not report.ok and isinstance(report.findings[0], Finding)
    text = str(report)
    assert text.startswith("audit of a layer: 1 finding\n  ✗ weights-times-K (question 4): ")
    assert "<table>" in report._repr_html_() and "weights-times-K" in report._repr_html_()
    assert repr(report) == text
    clean = audit(sdpa_core)
    assert str(clean).startswith("audit of a core: nothing found") and "<table>" not in clean._repr_html_()
    assert isinstance(clean, Report) and clean.findings == []


def test_the_labels_are_reachable_from_the_package():
    import attnlib
    assert attnlib.audit.LABELS is LABELS and all(q in (None, 1, 2, 3, 4) for q, _ in LABELS.values())


def test_audit_leaves_the_module_as_it_was():
    layer = ours()
    layer.train()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    audit(layer, kind="layer", d_model=D)
    assert layer.training and all(torch.equal(before[k], v) for k, v in layer.state_dict().items())


@pytest.mark.parametrize("call, error, fragment", [
    (lambda: audit(sdpa_core, kind="cores"), ValueError, "kind must be 'core', 'layer' or 'model', got 'cores'"),
    (lambda: audit(ours(), kind="layer"), TypeError, "needs the size d_model"),
    (lambda: audit(gpt2_model("eager"), kind="model"), TypeError, "needs the size vocab_size"),
    (lambda: audit(ours(), kind="layer", d_model=D, d_head=16), TypeError, "takes the sizes d_model, max_T"),
    (lambda: audit(ours(), kind="layer", d_model=0), ValueError, "d_model must be a positive integer"),
    (lambda: audit(sdpa_core, max_T=1), ValueError, "max_T must be at least 2"),
    (lambda: audit("attention", kind="core"), TypeError, "obj must be the attention code to call"),
    (lambda: audit(lambda Q, K, V: None), TypeError, "the core must return a tensor O"),
    (lambda: audit(lambda X: {"y": X}, kind="layer", d_model=8), TypeError, "the layer must return a tensor Y"),
    (lambda: audit(lambda X: X[..., :4], kind="layer", d_model=8), ValueError, "expected (1, 3, 8)"),
    (lambda: audit(ours(), kind="layer", d_model=32), RuntimeError, "calling the layer on X of B=1, T=3, d_model=32"),
    (lambda: audit(lambda X: X.view(1, *X.shape[1:]), kind="layer", d_model=8), RuntimeError,
     "calling the layer on X of B=3"),
])
def test_bad_arguments_get_clear_errors(call, error, fragment):
    with pytest.raises(error) as e:
        call()
    assert fragment in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------- the exercise

def test_the_exercise_checker():
    def no_scale(Q, K, V):
        return core(Q, K, V, scale=1.0)

    def stub(Q, K, V):
        raise NotImplementedError

    assert check_audit_prediction(no_scale, {"scale"}).ok
    assert check_audit_prediction(no_scale, ["scale"]).ok
    assert check_audit_prediction(no_scale, {"leak"}).mistake == "missed"
    assert check_audit_prediction(no_scale, ...).mistake == "stub"
    assert check_audit_prediction(stub, {"scale"}).mistake == "stub"
    assert check_audit_prediction(no_scale, "scale").mistake == "type"
    assert check_audit_prediction(sdpa_core, set()).mistake == "no-bug"
    assert str(check_audit_prediction(no_scale, {"scale"})).startswith("✓ correct")
    from attnlib import checks
    assert checks.check_audit_prediction is check_audit_prediction


# ---------------------------------------------------------------------------- classes a held-out set found
# Batch-mixing in either direction, a leak at one length only, padding that empties a row, and correct attention
# whose values are its keys (no projections at all), which must not be blamed.

class PackedBatch(nn.Module):
    """The bug: the batch packed into one causal stream of B·T tokens with no mask between sequences, so each
    sequence reads the ones before it (and never the ones after)."""

    def __init__(self):
        super().__init__()
        self.inner = ours()

    def forward(self, x):
        B, T, C = x.shape
        return self.inner(x.reshape(1, B * T, C)).reshape(B, T, C)


class MHAWithoutBatchFirst(TorchMHA):
    """The bug: nn.MultiheadAttention left at batch_first=False and given (B, T, d_model): it attends over the
    batch axis, causally, with the mask sized for the axis it reads."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, H)

    def forward(self, x):
        L = x.shape[0]
        return self.mha(x, x, x, attn_mask=torch.full((L, L), float("-inf")).triu(1), need_weights=False)[0]


class OffsetForMaxT(Layer):
    """The bug: the mask's diagonal offset worked out from a stored length, tril(max_T − T): right at T = max_T
    only; shorter inputs read the future."""

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        may_read = torch.ones(T, T, dtype=torch.bool).tril(8 - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=may_read)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class ZeroRowsArePadding(Layer):
    """The bug: positions whose input is all zeros are treated as padding and blocked as keys with −inf, so a
    sequence that starts with them leaves its first query nothing to read."""

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        blocked = torch.ones(T, T, dtype=torch.bool).triu(1) | (x.abs().amax(-1) == 0)[:, None, None, :]
        s = (q @ k.mT / math.sqrt(C // H)).masked_fill(blocked, float("-inf"))
        return self.out((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C))


class PadIdModel(nn.Module):
    """The bug: a model that blocks every key whose id is the pad id (the last id, as GPT-2's end-of-text is used),
    with −inf before softmax; a left-padded sequence's first queries have nothing to read. (SDPA itself gives
    zeros for such a row, not NaN.)"""

    def __init__(self, vocab_size=40):
        super().__init__()
        torch.manual_seed(0)
        self.pad = vocab_size - 1
        self.emb, self.attn, self.head = nn.Embedding(vocab_size, D), nn.Linear(D, 3 * D), nn.Linear(D, vocab_size)

    def forward(self, ids):
        B, T = ids.shape
        x = self.emb(ids)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in self.attn(x).split(D, dim=-1))
        may_read = torch.ones(T, T, dtype=torch.bool).tril() & (ids != self.pad)[:, None, None, :]
        s = (q @ k.mT / math.sqrt(D // H)).masked_fill(~may_read, float("-inf"))
        y = s.softmax(-1) @ v
        return self.head(x + y.transpose(1, 2).reshape(B, T, D))


class ValuesAreKeys(nn.Module):
    """Correct: attention with no projections at all, the input is its own queries, keys and values."""

    def __init__(self, sdpa=False):
        super().__init__()
        self.sdpa = sdpa

    def forward(self, x):
        if self.sdpa:
            z = x[:, None]
            return F.scaled_dot_product_attention(z, z, z, is_causal=True)[:, 0]
        T = x.shape[1]
        s = torch.einsum("btc,bsc->bts", x, x) / math.sqrt(x.shape[-1])
        return s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1) @ x


class SeparateKeysTimesK(nn.Module):
    """The bug, with separate projections: SDPA is given the keys as its values; the value projection is computed
    and never used."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x)))
        return F.scaled_dot_product_attention(q, k, k, is_causal=True).transpose(1, 2).reshape(B, T, C)


@pytest.mark.parametrize("make, kind, sizes, label", [
    (lambda: (lambda Q, K, V: sdpa_core(Q, K, torch.cummax(V, 0).values)), "core", {}, "batch-mixing"),
    (PackedBatch, "layer", dict(d_model=D), "batch-mixing"),
    (MHAWithoutBatchFirst, "layer", dict(d_model=D), "batch-mixing"),
    (OffsetForMaxT, "layer", dict(d_model=D, max_T=8), "leak"),
    (ZeroRowsArePadding, "layer", dict(d_model=D), "nan-empty-row"),
    (PadIdModel, "model", dict(vocab_size=40), "nan-empty-row"),
    (lambda: (lambda Q, K, V: torch.where(
        (K.abs().amax(-1) == 0)[..., None, :] | torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool).triu(
            1 + K.shape[-2] - Q.shape[-2]), float("-inf"), Q @ K.mT / math.sqrt(Q.shape[-1])).softmax(-1) @ V),
     "core", {}, "nan-empty-row"),
    (SeparateKeysTimesK, "layer", dict(d_model=D), "weights-times-K"),
], ids=["core-cummax-over-batch", "packed-batch", "mha-without-batch-first", "offset-for-max_T",
        "zero-rows-are-padding", "pad-id-model", "core-zero-keys-are-padding", "separate-projections-times-K"])
def test_held_out_classes_are_named(make, kind, sizes, label):
    report = audit(make(), kind=kind, **sizes)
    assert label in report.labels, report


def test_a_batch_mixing_message_says_which_sequence_reads_which():
    report = audit(PackedBatch(), kind="layer", d_model=D)
    (mix,) = [f for f in report.findings if f.label == "batch-mixing"]
    assert "changing sequence 0 changes the output of sequences 1, 2" in mix.message


@pytest.mark.parametrize("sdpa", [False, True])
def test_attention_whose_values_are_its_keys_is_clean(sdpa):
    assert audit(ValuesAreKeys(sdpa), kind="layer", d_model=D).ok


class PadIdModelSDPA(PadIdModel):
    """Correct: the same pad-id mask given to SDPA, which returns zeros, not NaN, for a query with no key. Keys
    blocked as padding are not a misplaced diagonal."""

    def forward(self, ids):
        B, T = ids.shape
        x = self.emb(ids)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in self.attn(x).split(D, dim=-1))
        may_read = torch.ones(T, T, dtype=torch.bool).tril() & (ids != self.pad)[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=may_read)
        return self.head(x + y.transpose(1, 2).reshape(B, T, D))


def test_a_model_that_masks_padding_correctly_is_clean():
    model = PadIdModelSDPA(vocab_size=4)   # so small that the random ids hold the pad id
    assert audit(model, kind="model", vocab_size=4).ok


# ---------------------------------------------------------------------------- classes a second held-out set found

def _causal_scores(Q, K, scale):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q)
    return (Q @ K.mT * scale).masked_fill(future, float("-inf"))


@pytest.mark.parametrize("how", ["multiply", "divide", "sdpa"])
def test_a_scale_by_the_width_of_v_is_named(how):
    """The core probes give V a width other than d_k, so √d_v in place of √d_k shows, and is named."""
    def core_dv(Q, K, V):
        d_v = V.shape[-1]
        if how == "sdpa":
            return F.scaled_dot_product_attention(Q, K, V, attn_mask=torch.isfinite(_causal_scores(Q, K, 1.0)),
                                                  scale=d_v ** -0.5)
        scale = d_v ** -0.5 if how == "multiply" else 1 / math.sqrt(d_v)
        return _causal_scores(Q, K, scale).softmax(-1) @ V

    report = audit(core_dv)
    assert report.labels == ["scale"], report
    assert "d_v = 12, not d_k = 8" in report.findings[0].message, report
    # with d_v given equal to d_k the two scales agree, and nothing is wrong
    assert audit(core_dv, d_k=8, d_v=8).ok


def test_a_core_that_multiplies_k_is_still_named_when_v_is_wider():
    report = audit(lambda Q, K, V: sdpa_core(Q, K, K))
    assert "weights-times-K" in report.labels, report
    assert "V of width d_v=12" in str(report)


class BatchNormModel(nn.Module):
    """BatchNorm over the features of (B, T, C): in train mode its batch statistics mix sequences and positions."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.e, self.bn, self.head = nn.Embedding(30, 16), nn.BatchNorm1d(16), nn.Linear(16, 30)

    def forward(self, ids):
        return self.head(self.bn(self.e(ids).transpose(1, 2)).transpose(1, 2))


def test_an_object_is_audited_in_its_own_mode_and_left_as_it_was():
    model = BatchNormModel()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = audit(model, kind="model", vocab_size=30)
    assert {"batch-mixing", "leak"} <= set(report.labels), report
    assert report.looked_at[-1].startswith("all of it with the object in train mode"), report
    assert report.looked_at[0].startswith("the trace")
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.eval()   # running statistics: each position on its own
    report = audit(model, kind="model", vocab_size=30)
    assert report.ok and report.looked_at[-1].startswith("all of it with the object in eval mode"), report
    assert "eval mode" in report._repr_html_()
    assert "train mode" in audit.__doc__
    assert not any("mode" in s for s in audit(sdpa_core).looked_at)   # a function has no mode


def test_dropout_in_train_mode_is_not_a_leak():
    """Each call starts from the same seed, so dropout drops the same entries and the probes compare like with like."""
    class Dropping(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.mha, self.drop = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True), nn.Dropout(0.1)

        def forward(self, x):
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
            return self.drop(self.mha(self.drop(x), x, x, attn_mask=mask)[0])

    layer = Dropping().train()
    report = audit(layer, kind="layer", d_model=D)
    assert report.ok, report
    assert layer.training


def test_a_llama_model_in_train_mode_is_clean(impl="sdpa"):
    """Llama's grouped K/V heads reach SDPA with fewer heads than Q (enable_gqa); its attention dropout is on."""
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=D, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=32,
                                      attention_dropout=0.1, attn_implementation=impl)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    report = audit(model, kind="model", vocab_size=50)
    assert report.ok, report


def test_baddbmm_with_alpha_is_scaled_attention():
    """baddbmm(·, Q, Kᵀ, beta=0, alpha=1/√d_k), the way some Hugging Face models compute scores: alpha is the scale."""
    def core(Q, K, V, alpha=None):
        B, h, T_q, d_k = Q.shape
        T_k = K.shape[-2]
        q, k = Q.reshape(B * h, T_q, d_k), K.reshape(B * h, T_k, d_k)
        S = torch.baddbmm(torch.empty(B * h, T_q, T_k, dtype=Q.dtype), q, k.mT, beta=0.0,
                          alpha=alpha or 1 / math.sqrt(d_k))
        S = S.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q), torch.finfo(S.dtype).min)
        return (S.softmax(-1) @ V.reshape(B * h, T_k, -1)).reshape(B, h, T_q, -1)

    assert audit(core).ok
    assert audit(lambda Q, K, V: core(Q, K, V, alpha=1 / Q.shape[-1])).labels == ["scale"]


class EinsumPositionsFirst(nn.Module):
    """Correct: heads kept as (B, T, h, d_head) and the scores by einsum "bqhd,bkhd->bhqk"; `split` makes the
    bug of splitting the heads with a reshape of (B, T, C) into (B, h, T, d_head) and back, `times_k` the bug of
    weights that multiply k."""

    def __init__(self, split=False, times_k=False):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.split, self.times_k = nn.Linear(D, 3 * D), split, times_k

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.reshape(B, T, H, C // H) for t in self.qkv(x).split(C, -1))
        if self.split:
            q, k, v = (t.reshape(B, H, T, C // H).transpose(1, 2) for t in (q, k, v))
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(C // H)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), k if self.times_k else v).reshape(B, T, C)


def test_an_einsum_over_positions_first_heads_is_read_by_its_equation():
    assert audit(EinsumPositionsFirst(), kind="layer", d_model=D).ok
    assert "head-split" in audit(EinsumPositionsFirst(split=True), kind="layer", d_model=D).labels
    assert audit(EinsumPositionsFirst(times_k=True), kind="layer", d_model=D).labels == ["weights-times-K"]


class ChunkedPrefill(nn.Module):
    """Reads a prompt in chunks of three through a key/value cache; `bug` hands SDPA is_causal=True for the later
    chunks, which aligns their queries top-left. Only a prompt longer than one chunk shows it."""

    def __init__(self, bug):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.qkv, self.head, self.bug = nn.Embedding(30, D), nn.Linear(D, 3 * D), nn.Linear(D, 30), bug

    def forward(self, ids):
        x, cache, out = self.emb(ids), None, []
        for s in range(0, ids.shape[1], 3):
            B, T, C = x[:, s:s + 3].shape
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x[:, s:s + 3]).split(C, -1))
            if cache is not None:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            cache, T_k = (k, v), k.shape[2]
            keep = None if self.bug else torch.ones(T, T_k, dtype=torch.bool).tril(T_k - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=self.bug)
            out.append(y.transpose(1, 2).reshape(B, T, C))
        return self.head(x + torch.cat(out, 1))


def test_a_prompt_read_in_chunks_is_traced_at_the_longest_length():
    assert audit(ChunkedPrefill(bug=False), kind="model", vocab_size=30, max_T=8).ok
    report = audit(ChunkedPrefill(bug=True), kind="model", vocab_size=30, max_T=8)
    assert "mask-offset" in report.labels and "T=8" in str(report), report


def test_mixing_before_the_projections_is_a_leak_not_a_head_split():
    class ConvFirst(nn.Module):   # a convolution over time with padding on both sides, then correct attention
        def __init__(self):
            super().__init__()
            self.conv, self.attn = nn.Conv1d(D, D, 3, padding=1), ours()

        def forward(self, x):
            return self.attn(self.conv(x.transpose(1, 2)).transpose(1, 2))

    report = audit(ConvFirst(), kind="layer", d_model=D)
    assert "leak" in report.labels and "head-split" not in report.labels, report


@pytest.mark.parametrize("how", ["matmul", "einsum", "cached"])
def test_a_score_table_of_keys_by_queries_is_a_softmax_axis(how):
    """KQᵀ handed to softmax: its last axis is the query axis, whatever the code calls it."""
    def swapped(Q, K, V):
        T_q = Q.shape[-2]
        if how == "einsum":
            S = torch.einsum("bhqd,bhkd->bhkq", Q, K) / math.sqrt(Q.shape[-1])
        elif how == "cached":
            S = K[..., -T_q:, :] @ Q.mT / math.sqrt(Q.shape[-1])
        else:
            S = K @ Q.mT / math.sqrt(Q.shape[-1])
        S = S.masked_fill(torch.ones(S.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        return S.softmax(-1) @ V[..., -T_q:, :]

    report = audit(swapped)
    assert "softmax-axis" in report.labels, report
    (axis,) = [f for f in report.findings if f.label == "softmax-axis"]
    assert "query axis" in axis.message and "KQᵀ" in axis.message


@pytest.mark.parametrize("rows", ["all", "first"])
def test_reading_the_next_key_is_a_mask_offset(rows):
    """A loop whose queries read one key too many (all of them, or only the first): leak and mask-offset."""
    def loop(Q, K, V):
        T_q, T_k = Q.shape[-2], K.shape[-2]
        out = []
        for i in range(T_q):
            n = T_k - T_q + i + 1
            n = min(n + 1, T_k) if rows == "all" else max(n, 2)
            s = Q[..., i:i + 1, :] @ K[..., :n, :].mT / math.sqrt(Q.shape[-1])
            out.append(s.softmax(-1) @ V[..., :n, :])
        return torch.cat(out, -2)

    report = audit(loop)
    assert {"leak", "mask-offset"} <= set(report.labels), report
    (offset,) = [f for f in report.findings if f.label == "mask-offset"]
    assert "also read the next key" in offset.message


def test_reading_every_future_key_is_a_leak_not_a_mask_offset():
    report = audit(lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V))
    assert "leak" in report.labels and "mask-offset" not in report.labels, report


def test_the_exercise_checker_lives_with_the_other_checkers():
    import sys

    import attnlib.audit as audit_module  # noqa: F401 - the module, not the function of the same name
    from attnlib.checks import _core
    assert check_audit_prediction.__module__ == "attnlib.checks.audit"
    assert not hasattr(sys.modules["attnlib.audit"], "check_audit_prediction")
    assert check_audit_prediction.kind == "function" and _core.STUB in check_audit_prediction.mistakes
    # the core is judged as a function first, by the engine: what is not yet a core is said before the prediction
    assert check_audit_prediction(42, {"scale"}).mistake == "not-callable"
    assert check_audit_prediction(lambda Q, K, V: None, {"scale"}).mistake == "none"
    assert check_audit_prediction(lambda Q, K, V: Q, {"scale"}).mistake == "shape"


# ----------------------------------------------------------------------------- classes a fourth held-out set found

def stepping_core(Q, K, V, *, own=True, chunk=1):
    """A core that reads its queries `chunk` rows at a time, each step through the cache of the keys so far (the
    last T_q queries are the last positions). `own=False` is the bug: a step reads the cache as it was before the
    step's own keys were added (the first step, with an empty cache, reads itself)."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    out = []
    for s in range(0, T_q, chunk):
        q = Q[..., s:s + chunk, :]
        start, n = T_k - T_q + s, q.shape[-2]   # the position of the step's first query; its width
        cached = start + n if own or start == 0 else start
        may_read = torch.ones(n, cached, dtype=torch.bool).tril(cached - n) if own or start == 0 else None
        out.append(F.scaled_dot_product_attention(q, K[..., :cached, :], V[..., :cached, :], attn_mask=may_read))
    return torch.cat(out, -2)


class Decoder(nn.Module):
    """A layer that decodes token by token inside forward, with a key/value cache and a residual: `bug="after"`
    adds a token's key and value to the cache only after its query has read it (the first token reads itself);
    `window` keeps a rolling cache of the last `window` tokens (correct sliding-window decoding)."""

    def __init__(self, bug=None, window=None):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out, self.bug, self.window = nn.Linear(D, 3 * D), nn.Linear(D, D), bug, window

    def forward(self, x):
        B, T, C = x.shape
        keys, values, ys = [], [], []
        for t in range(T):
            q, k, v = (z.view(B, 1, H, C // H).transpose(1, 2) for z in self.qkv(x[:, t:t + 1]).split(C, -1))
            if self.bug != "after" or t == 0:
                keys, values = keys + [k], values + [v]
            if self.window:
                keys, values = keys[-self.window:], values[-self.window:]
            ys.append(F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2)))
            if self.bug == "after" and t > 0:
                keys, values = keys + [k], values + [v]
        return x + self.out(torch.cat(ys, 2).transpose(1, 2).reshape(B, T, C))


class ChunkOffsetInChunks(ChunkedPrefill):
    """Reads a prompt in chunks of three through a cache; the bug: the chunk's offset is counted in chunks (the
    length of the list of cached chunks), not in tokens, so a later chunk's queries stop short of their own keys."""

    def forward(self, ids):
        x, ks, vs, out = self.emb(ids), [], [], []
        for s in range(0, ids.shape[1], 3):
            B, T, C = x[:, s:s + 3].shape
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x[:, s:s + 3]).split(C, -1))
            offset = len(ks)   # should be s, the number of cached tokens
            ks, vs = ks + [k], vs + [v]
            K, V = torch.cat(ks, 2), torch.cat(vs, 2)
            i, j = torch.arange(T)[:, None] + offset, torch.arange(K.shape[2])[None, :]
            y = F.scaled_dot_product_attention(q, K, V, attn_mask=j <= i)
            out.append(y.transpose(1, 2).reshape(B, T, C))
        return self.head(x + torch.cat(out, 1))


@pytest.mark.parametrize("make, kind, sizes", [
    (lambda: (lambda Q, K, V: stepping_core(Q, K, V, own=False)), "core", {}),
    (lambda: (lambda Q, K, V: stepping_core(Q, K, V, own=False, chunk=2)), "core", {}),
    (lambda: Decoder(bug="after"), "layer", dict(d_model=D)),
    (lambda: ChunkOffsetInChunks(bug=False), "model", dict(vocab_size=30, max_T=8)),
], ids=["core-token-steps-read-the-cache-before-themselves", "core-chunks-read-the-cache-before-themselves",
        "layer-cache-updated-after-the-query", "model-chunk-offset-counted-in-chunks"])
def test_attention_in_steps_that_cannot_read_itself_is_a_mask_offset(make, kind, sizes):
    """Each step alone reads a cache and looks like a cached step; joined, the steps show queries that do not read
    their own keys. No leak, and no empty row, to give it away."""
    report = audit(make(), kind=kind, **sizes)
    assert "mask-offset" in report.labels and "leak" not in report.labels, report
    assert "own key" in str(report)


def test_the_steps_are_joined_into_one_picture():
    """The four one-query steps of a core, each reading a cache: joined, they are the table of which keys each
    query reads, its diagonal where it belongs or not."""
    from attnlib.audit import _joined, _read, _traced
    Q, K, V = torch.randn(3, 1, 2, 4, 8).unbind()
    for own in (True, False):
        facts = _read(_traced(functools.partial(stepping_core, own=own), Q, K, V)[1], "", None)[1]
        assert len(facts["steps"]) == 4
        found = _joined(facts["steps"], 4, 4, "")
        assert found == [] if own else ([f.label for f in found] == ["mask-offset"]), found
    assert "read keys 1000 / 1000 / 1100 / 1110" in found[0].message and "queries 1, 2, 3 cannot read" in str(found)


@pytest.mark.parametrize("make, kind, sizes", [
    (lambda: stepping_core, "core", {}),
    (lambda: (lambda Q, K, V: stepping_core(Q, K, V, chunk=2)), "core", {}),
    (Decoder, "layer", dict(d_model=D)),
    (lambda: Decoder(window=2), "layer", dict(d_model=D)),
    (lambda: ChunkedPrefill(bug=False), "model", dict(vocab_size=30, max_T=8)),
], ids=["core-token-steps", "core-chunks", "layer-token-steps", "layer-rolling-window-cache", "model-chunks"])
def test_correct_attention_in_steps_is_clean(make, kind, sizes):
    report = audit(make(), kind=kind, **sizes)
    assert report.ok, report


class Windowed(nn.Module):
    """Correct sliding-window attention: each query reads itself and the window − 1 keys before it. `how` builds
    the band: "library" the additive mask of attnlib.sliding_window_mask on the score table, "sdpa" a boolean band
    given to SDPA, "blocks" causal attention within blocks of `window` positions (local attention)."""

    def __init__(self, how, window=3):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out, self.how, self.window = nn.Linear(D, 3 * D), nn.Linear(D, D), how, window

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, -1))
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        if self.how == "library":
            from attnlib import sliding_window_mask
            s = q @ k.mT / math.sqrt(C // H) + sliding_window_mask(T, window=self.window, dtype=x.dtype)
            y = s.softmax(-1) @ v
        else:
            band = (j <= i) & ((j > i - self.window) if self.how == "sdpa" else (j // self.window == i // self.window))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("how", ["library", "sdpa", "blocks"])
def test_a_window_that_reads_itself_is_clean(how):
    """A window's lower edge is not the diagonal: a band that reads itself and no later key leaks nothing."""
    report = audit(Windowed(how), kind="layer", d_model=D)
    assert report.ok, report


def test_a_windowed_cached_step_is_clean_and_a_window_one_key_late_is_not():
    from attnlib import sliding_window_mask

    def windowed(Q, K, V, late=0):
        T_q, T_k = Q.shape[-2], K.shape[-2]
        may_read = sliding_window_mask(T_q, T_k, window=3, dtype=torch.bool)
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=may_read.roll(-late, -1) if late else may_read)

    assert audit(windowed).ok
    report = audit(lambda Q, K, V: windowed(Q, K, V, late=1))
    assert {"mask-offset", "leak"} <= set(report.labels), report


# ---------------------------------------------------------------------------- a class the fifth held-out set found

class MHAPaddingModel(nn.Module):
    """nn.MultiheadAttention with a causal mask and key_padding_mask = (ids == pad). A left-padded sequence's
    first query has no key to read. In eval mode under no_grad, torch runs its fused inference path, which gives
    NaN for that row; a traced call takes the slower path, which gives zeros, so the audit must look untraced too."""

    def __init__(self, vocab_size=30, pad=1):
        super().__init__()
        torch.manual_seed(5)
        self.pad, self.emb = pad, nn.Embedding(vocab_size, D)
        self.mha, self.head = nn.MultiheadAttention(D, H, batch_first=True), nn.Linear(D, vocab_size)

    def forward(self, ids):
        T = ids.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        x = self.emb(ids)   # one tensor as query, key and value: the fused path needs that
        y, _ = self.mha(x, x, x, attn_mask=future, key_padding_mask=ids == self.pad, need_weights=False)
        return self.head(y)


def test_nan_that_only_the_untraced_path_gives_is_named():
    report = audit(MHAPaddingModel().eval(), kind="model", vocab_size=30)
    assert "nan-empty-row" in report.labels, report


# ---------------------------------------------------------------------------- classes the sixth held-out set found

def _flex_core(rule):
    """A core on torch's flex_attention, whose score_mod runs under vmap: the trace must not read the batched
    tensors it sees there (they cannot be read after the call), and the probes still judge the core."""
    from torch.nn.attention.flex_attention import flex_attention

    def core(Q, K, V):
        offset = K.shape[-2] - Q.shape[-2]   # the queries are the last T_q positions
        return flex_attention(Q, K, V, score_mod=lambda s, b, h, q, k: torch.where(rule(q + offset, k), s, -math.inf))
    return core


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")   # the unfused path is fine here
@pytest.mark.parametrize("rule, labels", [
    (lambda q, k: k <= q, set()),                       # causal: clean, and the audit does not fail on it
    (lambda q, k: k <= q + 1, {"leak"}),                # one key too far
])
def test_code_whose_score_mod_is_vmapped_is_audited_by_its_probes(rule, labels):
    report = audit(_flex_core(rule))
    assert set(report.labels) == labels if not labels else labels <= set(report.labels), report


class HalfPaddingModel(nn.Module):
    """Padding blocked with float32's most negative number, added to scores of the input's dtype: fine in float32,
    −inf in float16, and a padded query whose every key is blocked then gives NaN. Only padding brings it in."""

    def __init__(self, vocab_size=30, pad=29):
        super().__init__()
        torch.manual_seed(6)
        self.pad, self.emb, self.qkv = pad, nn.Embedding(vocab_size, D), nn.Linear(D, 3 * D)
        self.head = nn.Linear(D, vocab_size)

    def forward(self, ids):
        B, T = ids.shape
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in self.qkv(self.emb(ids)).split(D, -1))
        s = q @ k.mT / math.sqrt(D // H)
        s = s + (ids == self.pad)[:, None, None, :] * torch.finfo(torch.float32).min
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return self.head((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))


def test_a_fill_that_breaks_only_padded_half_precision_is_named():
    report = audit(HalfPaddingModel(), kind="model", vocab_size=30)
    assert "half-precision" in report.labels, report
