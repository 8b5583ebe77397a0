"""A held-out set for `attnlib.audit`: attention code written from the audit's interface and from public bug
reports, before the audit's own code was read, and not tuned to it afterwards.

Each case is a factory for the object to audit, its kind and sizes, and the set of labels that would correctly name
its bug or the bug's direct symptom; a correct implementation has the empty set and must come out clean.
`python tests/audit_heldout.py` prints one line per case; tests/test_audit_heldout.py asserts on the same table.

Sizes are small on purpose (d_model 32, vocab 48, max_T 8) so that the whole set runs in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL, N_HEAD, MAX_T, VOCAB = 32, 4, 8, 48
LAYER = dict(d_model=D_MODEL, max_T=MAX_T)
MODEL = dict(vocab_size=VOCAB, max_T=MAX_T)

LEAK, BATCH, OFFSET, CONV = "leak", "batch-mixing", "mask-offset", "mask-convention"
AFTER, AXIS, TIMES_K, SCALE = "mask-after-softmax", "softmax-axis", "weights-times-K", "scale"
NAN_ROW, HALF, UNSTABLE = "nan-empty-row", "half-precision", "unstable"


@dataclass(frozen=True)
class Case:
    name: str
    kind: str                      # "core", "layer" or "model"
    make: Callable[[], object]     # builds the object to audit (seeded)
    labels: frozenset = field(default_factory=frozenset)   # empty: a correct implementation
    sizes: dict = field(default_factory=dict)
    story: str = ""

    @property
    def buggy(self) -> bool:
        return bool(self.labels)


def _seeded(build):
    def make():
        torch.manual_seed(0)
        return build()
    return make


# ---------------------------------------------------------------------------------------------------------------
# Cores: obj(Q, K, V) -> O, Q (B, h, T_q, d_k), K (B, h, T_k, d_k), V (B, h, T_k, d_v); the queries are the last
# T_q positions.

def _may_read(Q, K):
    """(T_q, T_k) bool, True where query i may read key j: j <= i + T_k - T_q."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    return torch.ones(T_q, T_k, dtype=torch.bool, device=Q.device).tril(T_k - T_q)


def _scores(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def core_ok_masked_fill(Q, K, V):
    S = _scores(Q, K).masked_fill(~_may_read(Q, K), float("-inf"))
    return torch.softmax(S, dim=-1) @ V


def core_ok_sdpa_bool(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=_may_read(Q, K))


def core_ok_sdpa_square_or_mask(Q, K, V):
    if Q.shape[-2] == K.shape[-2]:
        return F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=_may_read(Q, K))


def core_ok_additive_float(Q, K, V):
    bias = torch.zeros(_may_read(Q, K).shape, dtype=Q.dtype, device=Q.device)
    bias = bias.masked_fill(~_may_read(Q, K), float("-inf"))
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=bias)


def core_ok_online(Q, K, V, block=2):
    """Flash-style: keys in blocks, running max and sum, float32 accumulators."""
    B, h, T_q, d_k = Q.shape
    T_k, d_v = K.shape[-2], V.shape[-1]
    q = Q.float() * d_k ** -0.5
    m = torch.full((B, h, T_q, 1), float("-inf"))
    l = torch.zeros(B, h, T_q, 1)
    acc = torch.zeros(B, h, T_q, d_v)
    rows = torch.arange(T_q) + T_k - T_q
    for s in range(0, T_k, block):
        k, v = K[..., s:s + block, :].float(), V[..., s:s + block, :].float()
        cols = torch.arange(s, s + k.shape[-2])
        sc = (q @ k.transpose(-2, -1)).masked_fill(cols[None, :] > rows[:, None], float("-inf"))
        m_new = torch.maximum(m, sc.amax(-1, keepdim=True))
        p = torch.exp(sc - m_new)
        corr = torch.exp(m - m_new)
        l = l * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + p @ v
        m = m_new
    return (acc / l).to(Q.dtype)


def core_ok_baddbmm_upcast(Q, K, V):
    """Hugging Face style: heads flattened into the batch, baddbmm with alpha, finfo.min, softmax in float32."""
    B, h, T_q, d_k = Q.shape
    T_k = K.shape[-2]
    q, k, v = Q.reshape(B * h, T_q, d_k), K.reshape(B * h, T_k, d_k), V.reshape(B * h, T_k, -1)
    S = torch.baddbmm(torch.empty(B * h, T_q, T_k, dtype=Q.dtype), q, k.transpose(1, 2), beta=0.0,
                      alpha=1 / math.sqrt(d_k))
    S = S.masked_fill(~_may_read(Q, K), torch.finfo(S.dtype).min)
    P = torch.softmax(S, dim=-1, dtype=torch.float32).to(Q.dtype)
    return torch.bmm(P, v).reshape(B, h, T_q, -1)


def core_ok_finfo_min(Q, K, V):
    """bf16/fp16-safe: the mask value is the dtype's own most negative number."""
    S = torch.einsum("bhqd,bhkd->bhqk", Q, K) * Q.shape[-1] ** -0.5
    S = S.masked_fill(~_may_read(Q, K), torch.finfo(S.dtype).min)
    return torch.einsum("bhqk,bhkd->bhqd", S.softmax(-1), V)


# --- buggy cores

def core_scale_dk(Q, K, V):
    S = (Q @ K.transpose(-2, -1)) / Q.shape[-1]
    return torch.softmax(S.masked_fill(~_may_read(Q, K), float("-inf")), -1) @ V


def core_scale_heads(Q, K, V):
    S = Q @ K.transpose(-2, -1) * Q.size(1) ** -0.5          # size(1) is h, not d_k
    return torch.softmax(S.masked_fill(~_may_read(Q, K), float("-inf")), -1) @ V


def core_softmax_dim2(Q, K, V):
    S = _scores(Q, K).masked_fill(~_may_read(Q, K), float("-inf"))
    return torch.softmax(S, dim=-2) @ V


def core_mask_after_softmax(Q, K, V):
    P = torch.softmax(_scores(Q, K), dim=-1).masked_fill(~_may_read(Q, K), 0.0)
    return P @ V


def core_mask_after_softmax_renorm(Q, K, V):
    P = torch.softmax(_scores(Q, K), dim=-1) * _may_read(Q, K)
    return (P / P.sum(-1, keepdim=True)) @ V


def core_diagonal_masked(Q, K, V):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q)        # should be T_k - T_q + 1
    return torch.softmax(_scores(Q, K).masked_fill(future, float("-inf")), -1) @ V


def core_reads_next_key(Q, K, V):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 2)    # one too far
    return torch.softmax(_scores(Q, K).masked_fill(future, float("-inf")), -1) @ V


def core_cache_top_left(Q, K, V):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    keep = torch.ones(T_q, T_k, dtype=torch.bool).tril()                   # no T_k - T_q offset
    return torch.softmax(_scores(Q, K).masked_fill(~keep, float("-inf")), -1) @ V


def core_cache_buffer_first_rows(Q, K, V):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    keep = torch.ones(T_k, T_k, dtype=torch.bool).tril()[:T_q]             # first rows, not last
    return torch.softmax(_scores(Q, K).masked_fill(~keep, float("-inf")), -1) @ V


def core_cache_past_off_by_one(Q, K, V):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    past = T_k - T_q - 1 if T_q < T_k else 0                               # off by one when decoding
    keep = torch.ones(T_q, T_k, dtype=torch.bool).tril(past)
    return torch.softmax(_scores(Q, K).masked_fill(~keep, float("-inf")), -1) @ V


def core_sdpa_is_causal_cached(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)        # top-left when T_q < T_k


def core_sdpa_upper_bool(Q, K, V):
    """rasbt/LLMs-from-scratch #1061: the upper triangle handed to SDPA, which reads True as 'may attend'."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    mask = torch.triu(torch.ones(T_q, T_k), diagonal=T_k - T_q + 1).bool()
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)


def core_additive_to_bool(Q, K, V):
    """transformers #38094: an additive float mask (0 / -inf) converted to bool for SDPA."""
    bias = torch.zeros(Q.shape[-2], K.shape[-2]).masked_fill(~_may_read(Q, K), float("-inf"))
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=bias.bool())


def core_where_inverted(Q, K, V):
    S = torch.where(_may_read(Q, K), float("-inf"), _scores(Q, K))         # arguments of where swapped
    return torch.softmax(S, -1) @ V


def core_weights_times_k(Q, K, V):
    P = torch.softmax(_scores(Q, K).masked_fill(~_may_read(Q, K), float("-inf")), -1)
    return P @ K


def core_global_max(Q, K, V):
    S = _scores(Q, K).masked_fill(~_may_read(Q, K), float("-inf"))
    E = torch.exp(S - S.max())                                             # one max for the whole batch
    return (E / E.sum(-1, keepdim=True)) @ V


def core_exp_without_max(Q, K, V):
    E = torch.exp(_scores(Q, K)) * _may_read(Q, K)
    return (E / E.sum(-1, keepdim=True)) @ V


def core_fill_minus_1e9(Q, K, V):
    S = _scores(Q, K).masked_fill(~_may_read(Q, K), -1e9)                  # does not fit in float16
    return torch.softmax(S, -1) @ V


# ---------------------------------------------------------------------------------------------------------------
# Layers: obj(X) -> Y, X (B, T, d_model).

def _rope(x, base=10000.0):
    """Rotary embedding on (B, h, T, d), rotate-half convention."""
    T, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class FusedQKV(nn.Module):
    """nanoGPT-style: one Linear for q, k, v; subclasses change one line of `attend`."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, max_T=MAX_T, dropout=0.0):
        super().__init__()
        self.h, self.d = n_head, d_model // n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(max_T, max_T)).view(1, 1, max_T, max_T))

    def split(self, t):
        B, T, C = t.shape
        return t.view(B, T, self.h, self.d).transpose(1, 2)

    def merge(self, y):
        B, h, T, d = y.shape
        return y.transpose(1, 2).contiguous().view(B, T, h * d)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.h * self.d, dim=2)
        y = self.attend(self.split(q), self.split(k), self.split(v))
        return self.c_proj(self.merge(y))

    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return self.drop(F.softmax(att, dim=-1)) @ v


class FusedSDPA(FusedQKV):
    def attend(self, q, k, v):
        p = self.drop.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)


class SplitWithoutTranspose(FusedQKV):
    def split(self, t):
        B, T, C = t.shape
        return t.reshape(B, self.h, T, self.d)                             # no transpose


class MergeWithoutTranspose(FusedQKV):
    def merge(self, y):
        B, h, T, d = y.shape
        return y.reshape(B, T, h * d)                                      # no transpose back


class UpperBoolToSDPA(FusedQKV):
    """rasbt/LLMs-from-scratch #1061."""

    def attend(self, q, k, v):
        T = q.shape[-2]
        mask = torch.triu(torch.ones(T, T), diagonal=1).bool()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class AdditiveToBoolSDPA(FusedQKV):
    """transformers #38094 (Llama 4)."""

    def attend(self, q, k, v):
        T = q.shape[-2]
        bias = torch.full((T, T), float("-inf")).triu(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(torch.bool))


class BufferSlicedBottomLeft(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        keep = self.bias[:, :, -T:, :T]                                    # last rows of the buffer
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        return F.softmax(att.masked_fill(keep == 0, float("-inf")), dim=-1) @ v


class MaskAfterSoftmax(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(self.d), dim=-1)
        return att.masked_fill(self.bias[:, :, :T, :T] == 0, 0.0) @ v


class WeightsTimesK(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = F.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        return att @ k


class ScaleMultiplied(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * math.sqrt(self.d)                # times, not divided by
        return F.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1) @ v


class TensorMinus1e9(FusedQKV):
    """TF-style blend: scores * keep + big * (1 - keep), with big a tensor of the input's dtype."""

    def attend(self, q, k, v):
        T = q.shape[-2]
        keep = self.bias[:, :, :T, :T].to(q.dtype)
        big = torch.tensor(-1e9, dtype=q.dtype)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        return F.softmax(att * keep + big * (1 - keep), dim=-1) @ v


class FinfoMinMask(FusedQKV):
    """bf16/fp16-safe masking with the dtype's own most negative value."""

    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, torch.finfo(att.dtype).min)
        return F.softmax(att, dim=-1) @ v


class ZeroRowsArePadding(FusedQKV):
    """Keras-style: an all-zero input vector is padding, and no query may read it."""

    def forward(self, x):
        self._pad = x.abs().sum(-1) == 0                                   # (B, T)
        return super().forward(x)

    def attend(self, q, k, v):
        T = q.shape[-2]
        keep = (self.bias[:, :, :T, :T] != 0) & ~self._pad[:, None, None, :]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        return F.softmax(att.masked_fill(~keep, float("-inf")), dim=-1) @ v


class ZeroRowsArePaddingSafe(ZeroRowsArePadding):
    """The same padding rule, but a query always reads itself, so no row is empty."""

    def attend(self, q, k, v):
        T = q.shape[-2]
        keep = (self.bias[:, :, :T, :T] != 0) & (~self._pad[:, None, None, :] | torch.eye(T, dtype=torch.bool))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        return F.softmax(att.masked_fill(~keep, float("-inf")), dim=-1) @ v


class Head(nn.Module):
    """Karpathy's lecture head (ng-video-lecture #6): scores scaled by C, the embedding width."""

    def __init__(self, d_model, head_size, max_T, by_width):
        super().__init__()
        self.key = nn.Linear(d_model, head_size, bias=False)
        self.query = nn.Linear(d_model, head_size, bias=False)
        self.value = nn.Linear(d_model, head_size, bias=False)
        self.by_width = by_width
        self.register_buffer("tril", torch.tril(torch.ones(max_T, max_T)))

    def forward(self, x):
        B, T, C = x.shape
        k, q = self.key(x), self.query(x)
        width = C if self.by_width else k.shape[-1]
        wei = q @ k.transpose(-2, -1) * width ** -0.5
        wei = F.softmax(wei.masked_fill(self.tril[:T, :T] == 0, float("-inf")), dim=-1)
        return wei @ self.value(x)


class MultiHead(nn.Module):
    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, max_T=MAX_T, by_width=False):
        super().__init__()
        self.heads = nn.ModuleList([Head(d_model, d_model // n_head, max_T, by_width) for _ in range(n_head)])
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class EinsumSeparate(nn.Module):
    """Separate q, k, v Linears, heads by einsum; `keys_of` lets a subclass change the key einsum."""

    key_eq = "bqhd,bkhd->bhqk"

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, dropout=0.1, softmax_dim=-1):
        super().__init__()
        self.h, self.d = n_head, d_model // n_head
        self.q, self.k, self.v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.drop = nn.Dropout(dropout)
        self.softmax_dim = softmax_dim

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (f(x).view(B, T, self.h, self.d) for f in (self.q, self.k, self.v))
        s = torch.einsum(self.key_eq, q, k) / math.sqrt(self.d)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        w = self.drop(s.masked_fill(~keep, float("-inf")).softmax(self.softmax_dim))
        return self.o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, T, -1))


class EinsumBatchTypo(EinsumSeparate):
    key_eq = "bqhd,ckhd->bhqk"                                             # c, not b: summed over the batch


class HFLikeAttention(nn.Module):
    """Hugging Face shape: forward(hidden_states, attention_mask=None, ...) -> (attn_output, attn_weights)."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, softmax_dim=-1, rope=False, sdpa_scale=None,
                 diagonal_masked=False):
        super().__init__()
        self.num_heads, self.head_dim = n_head, d_model // n_head
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_model, d_model) for _ in range(4))
        self.softmax_dim, self.rope, self.sdpa_scale = softmax_dim, rope, sdpa_scale
        self.diagonal_masked = diagonal_masked

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        B, T, _ = hidden_states.shape
        shape = (B, T, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        if self.rope:
            q, k = _rope(q), _rope(k)
        if self.sdpa_scale is not None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.sdpa_scale(self.head_dim))
            weights = None
        else:
            s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
            future = torch.ones(T, T, dtype=torch.bool).triu(0 if self.diagonal_masked else 1)
            s = s.masked_fill(future, float("-inf"))
            if attention_mask is not None:
                s = s + attention_mask
            weights = nn.functional.softmax(s, dim=self.softmax_dim, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(weights, v)
        out = out.transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(out), weights


class MHABatchFirst(nn.Module):
    """nn.MultiheadAttention used right: batch_first=True and a bool mask, True where a query may NOT read."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, dropout=0.0):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_head, dropout=dropout, batch_first=True)

    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


class MHAFloatTril(nn.Module):
    """nn.MultiheadAttention given tril(ones) as a float mask: a float mask is ADDED to the scores."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_head, batch_first=True)

    def forward(self, x):
        T = x.shape[1]
        return self.mha(x, x, x, attn_mask=torch.tril(torch.ones(T, T)))


class MHASequenceFirst(nn.Module):
    """Sequence-first nn.MultiheadAttention; `transpose` says whether the (B, T, D) input is turned first."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, transpose=True):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_head)                   # batch_first=False
        self.transpose = transpose

    def forward(self, x):
        if self.transpose:
            x = x.transpose(0, 1)                                           # (T, B, D)
        T = x.size(0)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        y, _ = self.mha(x, x, x, attn_mask=mask)
        return y.transpose(0, 1) if self.transpose else y


class GQARope(nn.Module):
    """Grouped-query attention (2 key/value heads for 4 query heads), RoPE, float32 softmax, finfo.min mask."""

    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, n_kv=2):
        super().__init__()
        self.h, self.kv, self.d = n_head, n_kv, d_model // n_head
        self.wq = nn.Linear(d_model, n_head * self.d, bias=False)
        self.wkv = nn.Linear(d_model, 2 * n_kv * self.d, bias=False)
        self.wo = nn.Linear(n_head * self.d, d_model, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = _rope(self.wq(x).view(B, T, self.h, self.d).transpose(1, 2))
        k, v = self.wkv(x).view(B, T, 2, self.kv, self.d).permute(2, 0, 3, 1, 4)
        k = _rope(k).repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        s = (q @ k.transpose(-1, -2)) * self.d ** -0.5
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), torch.finfo(s.dtype).min)
        p = s.float().softmax(-1).to(q.dtype)
        return self.wo((p @ v).transpose(1, 2).reshape(B, T, -1))


class SeqNorm(nn.Module):
    """A norm over the features of (B, T, C): LayerNorm, BatchNorm1d on (B, C, T), InstanceNorm1d on (B, C, T)."""

    def __init__(self, d_model, kind="ln"):
        super().__init__()
        self.kind = kind
        self.norm = {"ln": lambda: nn.LayerNorm(d_model), "bn": lambda: nn.BatchNorm1d(d_model),
                     "in": lambda: nn.InstanceNorm1d(d_model, affine=True)}[kind]()

    def forward(self, x):
        if self.kind == "ln":
            return self.norm(x)
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class TokenConv(nn.Module):
    """A depthwise convolution over time: symmetric padding (reads the next token) or left padding only."""

    def __init__(self, d_model, causal):
        super().__init__()
        self.causal = causal
        self.conv = nn.Conv1d(d_model, d_model, 3, groups=d_model, padding=0 if causal else 1)

    def forward(self, x):
        x = x.transpose(1, 2)
        if self.causal:
            x = F.pad(x, (2, 0))
        return self.conv(x).transpose(1, 2)


class PreNormBlock(nn.Module):
    """x + attn(norm(mix(x))) + mlp(norm(x)); the norm and the token mixer are parts a case chooses."""

    def __init__(self, attn, d_model=D_MODEL, norm="ln", mixer=None, dropout=0.0):
        super().__init__()
        self.mix = mixer
        self.n1, self.n2 = SeqNorm(d_model, norm), SeqNorm(d_model, norm)
        self.attn = attn
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x):
        if self.mix is not None:
            x = x + self.mix(x)
        a = self.attn(self.n1(x))
        x = x + (a[0] if isinstance(a, (tuple, list)) else a)
        return x + self.mlp(self.n2(x))


class RunningShare(nn.Module):
    """Attention plus each position's share of the running total: cumsum divided by the whole sequence's sum."""

    def __init__(self, d_model=D_MODEL):
        super().__init__()
        self.attn = FusedQKV(d_model)

    def forward(self, x):
        share = x.cumsum(dim=1) / (x.abs().sum(dim=1, keepdim=True) + 1.0)
        return self.attn(x) + share


class TimeCentered(nn.Module):
    """Attention whose output is centred and scaled over the sequence axis (a layer norm over time)."""

    def __init__(self, d_model=D_MODEL):
        super().__init__()
        self.attn = MHABatchFirst(d_model)

    def forward(self, x):
        y = self.attn(x)
        return F.layer_norm(y.transpose(1, 2), (y.shape[1],)).transpose(1, 2)


def functional_layer(d_model=D_MODEL, n_head=N_HEAD):
    """A plain function that closes over its weight matrices (no nn.Module)."""
    g = torch.Generator().manual_seed(1)
    Wq, Wk, Wv, Wo = (torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(4))

    def layer(X):
        B, T, _ = X.shape
        d = d_model // n_head
        q, k, v = ((X @ W.to(X.dtype)).unflatten(-1, (n_head, d)).transpose(1, 2) for W in (Wq, Wk, Wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).flatten(2) @ Wo.to(X.dtype)
    return layer


def _bn_with_running_stats(m):
    """Run a few batches in train mode so BatchNorm has real running statistics, then eval()."""
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(4, 8, D_MODEL) * 2 + 0.5)
    return m.eval()


# ---------------------------------------------------------------------------------------------------------------
# Models: obj(ids) -> logits (B, T, vocab).

class TinyGPT(nn.Module):
    """Token + learned position embeddings, blocks, final norm, head; `out` chooses how the logits come back."""

    def __init__(self, attn=lambda: FusedQKV(), n_layer=2, norm="ln", mixer=None, out="tensor", dropout=0.0):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_T, D_MODEL)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([PreNormBlock(attn(), D_MODEL, norm, mixer() if mixer else None, dropout)
                                     for _ in range(n_layer)])
        self.norm = SeqNorm(D_MODEL, norm)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.out = out

    def forward(self, ids):
        T = ids.shape[1]
        x = self.drop(self.tok(ids) + self.pos(torch.arange(T, device=ids.device)))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.norm(x))
        if self.out == "namespace":
            return SimpleNamespace(logits=logits, loss=None)
        if self.out == "tuple":
            return logits, None
        return logits


class PadMaskGPT(nn.Module):
    """Single-layer model that masks the keys of pad tokens (id 0). `self_readable` keeps each query's own key."""

    def __init__(self, self_readable=False, pad_id=0):
        super().__init__()
        self.pad_id, self.self_readable = pad_id, self_readable
        self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_T, D_MODEL)
        self.qkv, self.o = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.ln = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, ids):
        B, T = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(T))
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, N_HEAD, -1).permute(2, 0, 3, 1, 4)
        key_ok = (ids != self.pad_id)[:, None, None, :]
        if self.self_readable:
            key_ok = key_ok | torch.eye(T, dtype=torch.bool)
        keep = torch.ones(T, T, dtype=torch.bool).tril() & key_ok
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        y = s.masked_fill(~keep, float("-inf")).softmax(-1) @ v
        x = x + self.o(y.transpose(1, 2).reshape(B, T, D_MODEL))
        return self.head(x)


class SingleHeadDim1(nn.Module):
    """One-head model on (B, T, T) scores, softmax over dim=1 (the query axis)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_T, D_MODEL)
        self.q, self.k, self.v = (nn.Linear(D_MODEL, D_MODEL) for _ in range(3))
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T))
        s = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(D_MODEL)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return self.head(x + torch.softmax(s, dim=1) @ self.v(x))


class ChunkedPrefillGPT(nn.Module):
    """Reads the prompt in chunks through a key/value cache. `mask="is_causal"` hands SDPA is_causal=True for the
    later chunks (top-left aligned when T_q < T_k); `mask="offset"` builds the bottom-right mask."""

    def __init__(self, mask="offset", chunk=3):
        super().__init__()
        self.mask, self.chunk = mask, chunk
        self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_T, D_MODEL)
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv, self.o = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 2 * D_MODEL), nn.ReLU(), nn.Linear(2 * D_MODEL, D_MODEL))
        self.head = nn.Linear(D_MODEL, VOCAB)

    def step(self, x, cache):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, N_HEAD, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        T_k = k.shape[2]
        if self.mask == "is_causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            keep = torch.ones(T, T_k, dtype=torch.bool).tril(T_k - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, D_MODEL))
        return x + self.mlp(self.ln2(x)), (k, v)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T))
        cache, outs = None, []
        for s in range(0, T, self.chunk):
            y, cache = self.step(x[:, s:s + self.chunk], cache)
            outs.append(y)
        return self.head(torch.cat(outs, 1)), cache


class ScaleByModelWidth(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.h * self.d)          # d_model, not d_k
        return F.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1) @ v


class FillMinus1e9(FusedQKV):
    def attend(self, q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        return F.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, -1e9), dim=-1) @ v


def llama_tiny():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=2 * D_MODEL, num_hidden_layers=2,
                      num_attention_heads=N_HEAD, num_key_value_heads=2, max_position_embeddings=MAX_T)
    cfg._attn_implementation = "eager"
    return LlamaForCausalLM(cfg).eval()


# ---------------------------------------------------------------------------------------------------------------

def _core(name, fn, labels=(), story=""):
    return Case(name, "core", lambda: fn, frozenset(labels), {}, story)


def _layer(name, build, labels=(), story=""):
    return Case(name, "layer", _seeded(build), frozenset(labels), dict(LAYER), story)


def _model(name, build, labels=(), story=""):
    return Case(name, "model", _seeded(build), frozenset(labels), dict(MODEL), story)


CASES: list[Case] = [
    # --- cores, correct
    _core("core ok: masked_fill -inf, bottom-right", core_ok_masked_fill),
    _core("core ok: SDPA, bool mask True=attend", core_ok_sdpa_bool),
    _core("core ok: SDPA is_causal only when square", core_ok_sdpa_square_or_mask),
    _core("core ok: SDPA additive float mask", core_ok_additive_float),
    _core("core ok: online softmax over key blocks", core_ok_online),
    _core("core ok: baddbmm, finfo.min, float32 softmax", core_ok_baddbmm_upcast),
    _core("core ok: einsum, finfo.min (half-safe)", core_ok_finfo_min),
    # --- cores, buggy
    _core("core: scaled by d_k", core_scale_dk, {SCALE}),
    _core("core: scaled by sqrt(h) (Q.size(1))", core_scale_heads, {SCALE}),
    _core("core: softmax dim=-2", core_softmax_dim2, {AXIS, LEAK}),
    _core("core: mask after softmax", core_mask_after_softmax, {AFTER, LEAK}),
    _core("core: mask after softmax, renormalised", core_mask_after_softmax_renorm, {AFTER, UNSTABLE}),
    _core("core: diagonal masked too", core_diagonal_masked, {OFFSET, NAN_ROW}),
    _core("core: reads the next key", core_reads_next_key, {OFFSET, LEAK}),
    _core("core: cached step top-left (tril, no offset)", core_cache_top_left, {OFFSET}),
    _core("core: cached step, first rows of a square buffer", core_cache_buffer_first_rows, {OFFSET}),
    _core("core: cached step, past length off by one", core_cache_past_off_by_one, {OFFSET}),
    _core("core: SDPA is_causal with T_q < T_k", core_sdpa_is_causal_cached, {OFFSET}),
    _core("core: upper-triangular bool to SDPA (#1061)", core_sdpa_upper_bool, {CONV, LEAK, NAN_ROW}),
    _core("core: additive mask .bool() for SDPA (#38094)", core_additive_to_bool, {CONV, LEAK, NAN_ROW}),
    _core("core: torch.where arguments swapped", core_where_inverted, {CONV, LEAK, NAN_ROW}),
    _core("core: weights @ K", core_weights_times_k, {TIMES_K}),
    _core("core: one max for the whole batch", core_global_max, {UNSTABLE, BATCH}),
    _core("core: exp without subtracting the max", core_exp_without_max, {UNSTABLE, HALF}),
    _core("core: masked_fill -1e9", core_fill_minus_1e9, {HALF}),

    # --- layers, correct
    _layer("layer ok: nanoGPT fused qkv, eval, dropout 0.1", lambda: FusedQKV(dropout=0.1).eval()),
    _layer("layer ok: fused qkv + SDPA, train mode, dropout 0", lambda: FusedSDPA(dropout=0.0).train()),
    _layer("layer ok: einsum, separate Linears, train, dropout 0.1", lambda: EinsumSeparate(dropout=0.1).train()),
    _layer("layer ok: nn.MultiheadAttention batch_first + bool mask", MHABatchFirst),
    _layer("layer ok: sequence-first MHA, transposed in and out", MHASequenceFirst),
    _layer("layer ok: HF-like tuple, RoPE, SDPA", lambda: HFLikeAttention(rope=True, sdpa_scale=lambda d: d ** -0.5)),
    _layer("layer ok: HF-like tuple, eager", HFLikeAttention),
    _layer("layer ok: GQA + RoPE, finfo.min, float32 softmax", GQARope),
    _layer("layer ok: finfo.min mask (half-safe)", FinfoMinMask),
    _layer("layer ok: left-padded conv + attention block",
           lambda: PreNormBlock(FusedSDPA(), mixer=TokenConv(D_MODEL, causal=True))),
    _layer("layer ok: BatchNorm block in eval mode",
           lambda: _bn_with_running_stats(PreNormBlock(FusedQKV(), norm="bn"))),
    _layer("layer ok: zero rows as padding, self always readable", ZeroRowsArePaddingSafe),
    _layer("layer ok: a plain function", functional_layer),
    _layer("layer ok: Karpathy multi-head, head-size scale", MultiHead),
    # --- layers, buggy
    _layer("layer: Karpathy head scaled by C (ng-video-lecture #6)", lambda: MultiHead(by_width=True), {SCALE}),
    _layer("layer: heads split with view, no transpose", SplitWithoutTranspose, {LEAK}),
    _layer("layer: heads merged with reshape, no transpose", MergeWithoutTranspose, {LEAK}),
    _layer("layer: upper bool mask to SDPA (#1061)", UpperBoolToSDPA, {CONV, LEAK, NAN_ROW}),
    _layer("layer: additive mask .bool() to SDPA (#38094)", AdditiveToBoolSDPA, {CONV, LEAK, NAN_ROW}),
    _layer("layer: mask buffer sliced [-T:, :T]", BufferSlicedBottomLeft, {LEAK, OFFSET}),
    _layer("layer: mask after softmax", MaskAfterSoftmax, {AFTER, LEAK}),
    _layer("layer: weights @ k", WeightsTimesK, {TIMES_K}),
    _layer("layer: scores times sqrt(d)", ScaleMultiplied, {SCALE}),
    _layer("layer: SDPA scale=1/d_head", lambda: HFLikeAttention(rope=True, sdpa_scale=lambda d: 1 / d), {SCALE}),
    _layer("layer: HF-like softmax dim=-2", lambda: HFLikeAttention(softmax_dim=-2), {AXIS, LEAK}),
    _layer("layer: HF-like RoPE, diagonal masked", lambda: HFLikeAttention(rope=True, diagonal_masked=True),
           {OFFSET, NAN_ROW}),
    _layer("layer: MHA given tril(ones) as a float mask", MHAFloatTril, {LEAK, CONV}),
    _layer("layer: sequence-first MHA fed (B, T, D)", lambda: MHASequenceFirst(transpose=False), {BATCH}),
    _layer("layer: einsum sums keys over the batch", lambda: EinsumBatchTypo(dropout=0.0), {BATCH}),
    _layer("layer: cumsum over the whole sequence's total", RunningShare, {LEAK}),
    _layer("layer: layer norm over the time axis", TimeCentered, {LEAK}),
    _layer("layer: InstanceNorm1d block", lambda: PreNormBlock(FusedQKV(), norm="in"), {LEAK}),
    _layer("layer: BatchNorm block in train mode", lambda: PreNormBlock(FusedQKV(), norm="bn").train(),
           {BATCH, LEAK}),
    _layer("layer: symmetric-padded conv before attention",
           lambda: PreNormBlock(FusedSDPA(), mixer=TokenConv(D_MODEL, causal=False)), {LEAK}),
    _layer("layer: tensor(-1e9) blend mask", TensorMinus1e9, {HALF}),
    _layer("layer: zero rows as padding, -inf", ZeroRowsArePadding, {NAN_ROW}),

    # --- models, correct
    _model("model ok: tiny GPT, .logits object, train, dropout 0",
           lambda: TinyGPT(out="namespace").train()),
    _model("model ok: tiny GPT, train, dropout 0.1", lambda: TinyGPT(dropout=0.1).train()),
    _model("model ok: chunked prefill with KV cache, tuple", lambda: ChunkedPrefillGPT(mask="offset")),
    _model("model ok: BatchNorm in eval mode", lambda: _model_bn_eval()),
    _model("model ok: pad keys masked, self readable", lambda: PadMaskGPT(self_readable=True)),
    _model("model ok: causal conv mixer", lambda: TinyGPT(attn=MHABatchFirst, mixer=lambda: TokenConv(D_MODEL, True))),
    _model("model ok: transformers Llama, eager", llama_tiny),
    # --- models, buggy
    _model("model: BatchNorm in train mode", lambda: TinyGPT(norm="bn").train(), {BATCH, LEAK}),
    _model("model: pad keys masked with -inf", PadMaskGPT, {NAN_ROW}),
    _model("model: softmax over dim=1", SingleHeadDim1, {AXIS, LEAK}),
    _model("model: heads merged without transpose", lambda: TinyGPT(attn=MergeWithoutTranspose), {LEAK}),
    _model("model: chunked prefill, SDPA is_causal", lambda: ChunkedPrefillGPT(mask="is_causal"), {OFFSET}),
    _model("model: scores scaled by d_model", lambda: TinyGPT(attn=ScaleByModelWidth, out="tuple"), {SCALE}),
    _model("model: symmetric conv mixer", lambda: TinyGPT(attn=FusedSDPA, mixer=lambda: TokenConv(D_MODEL, False)),
           {LEAK}),
    _model("model: mask after softmax", lambda: TinyGPT(attn=MaskAfterSoftmax), {AFTER, LEAK}),
    _model("model: weights @ k", lambda: TinyGPT(attn=WeightsTimesK, n_layer=1), {TIMES_K}),
    _model("model: masked_fill -1e9", lambda: TinyGPT(attn=FillMinus1e9), {HALF}),
    _model("model: final layer norm over time", lambda: _model_time_norm(), {LEAK}),
]


def _model_bn_eval():
    m = TinyGPT(norm="bn")
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randint(0, VOCAB, (4, MAX_T)))
    return m.eval()


class _TimeNormHead(nn.Module):
    def forward(self, x):
        return F.layer_norm(x.transpose(1, 2), (x.shape[1],)).transpose(1, 2)


def _model_time_norm():
    m = TinyGPT()
    m.norm = _TimeNormHead()
    return m


# ---------------------------------------------------------------------------------------------------------------

def run_case(case: Case):
    """(verdict, labels found, report). verdict: 'named', 'missed', 'misnamed', 'clean', 'false alarm', 'error'."""
    from attnlib import audit

    obj = case.make()
    try:
        report = audit(obj, kind=case.kind, **case.sizes)
    except Exception as e:                                    # an audit that crashes on an input is a failure
        return "error", {f"{type(e).__name__}: {e}"}, None
    found = {f.label for f in report.findings}
    if not case.buggy:
        return ("clean" if report.ok and not found else "false alarm"), found, report
    if found & case.labels:
        return "named", found, report
    return ("misnamed" if found else "missed"), found, report


def main():
    import time
    tally = {}
    for case in CASES:
        t0 = time.process_time()
        verdict, found, _ = run_case(case)
        tally[verdict] = tally.get(verdict, 0) + 1
        want = ",".join(sorted(case.labels)) or "-"
        print(f"{verdict:11s} {time.process_time() - t0:5.2f}s  {case.name:58s} want {want:40s} got {sorted(found)}")
    print(tally)


if __name__ == "__main__":
    main()
