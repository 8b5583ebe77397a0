"""Wrong answers to the exercises of chapter 2 (projections), written from the exercise texts."""

from __future__ import annotations

import torch
from torch import nn

from attnlib import Projections
from wrong_answers import Wrong, collect, wrong

# --- ex-02-load ------------------------------------------------------------------------------------------------


def _sizes(ckpt):
    d_model, d_k = ckpt["W_Q"].shape
    return d_model, d_k, ckpt["W_V"].shape[1]


@wrong("ex-02-load", "check_load_projections",
       "copies W without transposing it (nn.Linear stores out × in)", "no-transpose")
def load_not_transposed(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True).to(ckpt["W_Q"].dtype)
    with torch.no_grad():
        for lin, n in ((p.q, "Q"), (p.k, "K"), (p.v, "V")):
            lin.weight.copy_(ckpt[f"W_{n}"].reshape(lin.weight.shape))
            lin.bias.copy_(ckpt[f"b_{n}"])
    return p


@wrong("ex-02-load", "check_load_projections",
       "wraps the checkpoint's tensors in nn.Parameter: shares their memory", "shared-checkpoint")
def load_shares_memory(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True)
    for lin, n in ((p.q, "Q"), (p.k, "K"), (p.v, "V")):
        lin.weight = nn.Parameter(ckpt[f"W_{n}"].T)
        lin.bias = nn.Parameter(ckpt[f"b_{n}"])
    return p


@wrong("ex-02-load", "check_load_projections", "forgets the biases: Projections built with bias=False", "bias")
def load_no_bias(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v).to(ckpt["W_Q"].dtype)
    with torch.no_grad():
        p.q.weight.copy_(ckpt["W_Q"].T)
        p.k.weight.copy_(ckpt["W_K"].T)
        p.v.weight.copy_(ckpt["W_V"].T)
    return p


@wrong("ex-02-load", "check_load_projections",
       "builds the module in the default float32: a float64 checkpoint comes back float32", "module-dtype")
def load_keeps_float32(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True)
    with torch.no_grad():
        p.q.weight.copy_(ckpt["W_Q"].T)
        p.q.bias.copy_(ckpt["b_Q"])
        p.k.weight.copy_(ckpt["W_K"].T)
        p.k.bias.copy_(ckpt["b_K"])
        p.v.weight.copy_(ckpt["W_V"].T)
        p.v.bias.copy_(ckpt["b_V"])
    return p


@wrong("ex-02-load", "check_load_projections",
       "copies into a float32 module, then converts it to the checkpoint's dtype", "precision")
def load_float32_round_trip(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True)
    with torch.no_grad():
        p.q.weight.copy_(ckpt["W_Q"].T)
        p.q.bias.copy_(ckpt["b_Q"])
        p.k.weight.copy_(ckpt["W_K"].T)
        p.k.bias.copy_(ckpt["b_K"])
        p.v.weight.copy_(ckpt["W_V"].T)
        p.v.bias.copy_(ckpt["b_V"])
    return p.to(ckpt["W_Q"].dtype)


@wrong("ex-02-load", "check_load_projections", "sets the weights but leaves the biases at their random init", "bias")
def load_biases_left_random(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True).to(ckpt["W_Q"].dtype)
    with torch.no_grad():
        p.q.weight.copy_(ckpt["W_Q"].T)
        p.k.weight.copy_(ckpt["W_K"].T)
        p.v.weight.copy_(ckpt["W_V"].T)
    return p


@wrong("ex-02-load", "check_load_projections",
       "assigns .data = W.T: the module and the checkpoint share memory", "shared-checkpoint")
def load_data_alias(ckpt):
    d_model, d_k, d_v = _sizes(ckpt)
    p = Projections(d_model, d_k, d_v, bias=True).to(ckpt["W_Q"].dtype)
    for lin, n in ((p.q, "Q"), (p.k, "K"), (p.v, "V")):
        lin.weight.data = ckpt[f"W_{n}"].T
        lin.bias.data = ckpt[f"b_{n}"]
    return p


# --- ex-02-fused -----------------------------------------------------------------------------------------------


@wrong("ex-02-fused", "check_split_fused",
       "rewrote the same interleaved split as strided slices [0::3], [1::3], [2::3]", "unchanged")
def fused_strided(X, W_QKV, d_k):
    QKV = X @ W_QKV                                          # (..., T, 3·d_k)
    return QKV[..., 0::3], QKV[..., 1::3], QKV[..., 2::3]


@wrong("ex-02-fused", "check_split_fused",
       "splits the weight's columns with view(d_model, d_k, 3): the same interleave", "unchanged")
def fused_weight_view(X, W_QKV, d_k):
    W = W_QKV.view(W_QKV.shape[0], d_k, 3)                   # (d_model, d_k, 3)
    return X @ W[..., 0], X @ W[..., 1], X @ W[..., 2]


@wrong("ex-02-fused", "check_split_fused", "fixed the order of the view but unpacks as Q, V, K", "kv-swapped")
def fused_wrong_order(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, V, K = QKV.view(*QKV.shape[:-1], 3, d_k).unbind(-2)
    return Q, K, V


@wrong("ex-02-fused", "check_split_fused",
       "multiplies by W_QKV transposed view: (d_k, 3) then .transpose: same columns", "unchanged")
def fused_view_transpose(X, W_QKV, d_k):
    QKV = X @ W_QKV
    parts = QKV.view(*QKV.shape[:-1], d_k, 3).transpose(-1, -2)   # (..., T, 3, d_k)
    return parts[..., 0, :], parts[..., 1, :], parts[..., 2, :]


@wrong("ex-02-fused", "check_split_fused", "inclusive-end slicing: K and V each start one column early", "off-by-one")
def fused_off_by_one(X, W_QKV, d_k):
    QKV = X @ W_QKV
    return QKV[..., :d_k], QKV[..., d_k - 1:2 * d_k - 1], QKV[..., 2 * d_k - 1:3 * d_k - 1]


@wrong("ex-02-fused", "check_split_fused",
       "view (3, d_k), then transpose(0, -2): right for one sequence, not for a batch", "batch-axis")
def fused_transpose_first_axis(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, K, V = QKV.view(*QKV.shape[:-1], 3, d_k).transpose(0, -2)
    return Q, K, V


@wrong("ex-02-fused", "check_split_fused", "computes the product in float32 and casts back to X's dtype", "precision")
def fused_float32(X, W_QKV, d_k):
    QKV = (X.float() @ W_QKV.float()).to(X.dtype)
    return QKV.split(d_k, dim=-1)


@wrong("ex-02-fused", "check_split_fused", "fixed the view to (3, d_k) but kept unbind(-1)", "unbind-last")
def fused_view_fixed_unbind_kept(X, W_QKV, d_k):
    QKV = X @ W_QKV
    Q, K, V = QKV.view(*QKV.shape[:-1], 3, d_k).unbind(-1)
    return Q, K, V


# --- ex-02-cross -----------------------------------------------------------------------------------------------


@wrong("ex-02-cross", "check_cross_qkv", "splits the K/V product in halves, as if d_v = d_k", "halves")
def cross_halves(X, X_kv, W_Q, W_KV, d_k):
    K, V = (X_kv @ W_KV).chunk(2, dim=-1)
    return X @ W_Q, K, V


@wrong("ex-02-cross", "check_cross_qkv", "V sliced as d_k:2·d_k: cut to d_k columns", "equal-pieces")
def cross_v_truncated(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    return X @ W_Q, KV[..., :d_k], KV[..., d_k:2 * d_k]


@wrong("ex-02-cross", "check_cross_qkv", "takes V first and K last ([W_V | W_K])", "k-from-the-end")
def cross_swapped(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    return X @ W_Q, KV[..., -d_k:], KV[..., :-d_k]


@wrong("ex-02-cross", "check_cross_qkv", "interleaved split of the K/V product with a view (..., d_k, 2)",
       "dealt")
def cross_interleaved(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    d_v = W_KV.shape[-1] - d_k
    K = KV[..., 0:2 * d_k:2]
    V = torch.cat([KV[..., 1:2 * d_k:2], KV[..., 2 * d_k:]], dim=-1)[..., :d_v]
    return X @ W_Q, K, V


@wrong("ex-02-cross", "check_cross_qkv", "computes in float32 and casts the results back", "precision")
def cross_float32(X, X_kv, W_Q, W_KV, d_k):
    Q = (X.float() @ W_Q.float()).to(X.dtype)
    K, V = (X_kv.float() @ W_KV.float()).to(X.dtype).split([d_k, W_KV.shape[-1] - d_k], dim=-1)
    return Q, K, V


@wrong("ex-02-cross", "check_cross_qkv", "K and V projected from X instead of X_kv", "kv-from-queries")
def cross_kv_from_x(X, X_kv, W_Q, W_KV, d_k):
    K, V = (X @ W_KV).split([d_k, W_KV.shape[-1] - d_k], dim=-1)
    return X @ W_Q, K, V


@wrong("ex-02-cross", "check_cross_qkv", "einsum, with Q already divided by sqrt(d_k)", "q-scaled")
def cross_q_prescaled(X, X_kv, W_Q, W_KV, d_k):
    Q = torch.einsum("...td,dk->...tk", X, W_Q) / d_k ** 0.5
    KV = torch.einsum("...td,dk->...tk", X_kv, W_KV)
    return Q, KV[..., :d_k], KV[..., d_k:]


@wrong("ex-02-cross", "check_cross_qkv", "V sliced from column 0 (KV[..., :d_v]) instead of after K", "v-from-start")
def cross_returns_kv_unsplit(X, X_kv, W_Q, W_KV, d_k):
    KV = X_kv @ W_KV
    return X @ W_Q, KV[..., :d_k], KV[..., :W_KV.shape[-1] - d_k]


# --- ex-02-predict-params --------------------------------------------------------------------------------------

D, H, DH = 768, 12, 64
PREDICTIONS = [
    Wrong("ex-02-predict-params", "check_qkv_params", 3 * D * D, "weights only, no biases", frozenset({"no-bias"})),
    Wrong("ex-02-predict-params", "check_qkv_params", 3 * (D * DH + DH), "one head only", frozenset({"one-head"})),
    Wrong("ex-02-predict-params", "check_qkv_params", 4 * (D * D + D), "W_O included as a fourth projection",
          frozenset({"with-W_O"})),
    Wrong("ex-02-predict-params", "check_qkv_params", 3 * H * (D * D + D),
          "each head given full-width d_model × d_model matrices",
          frozenset({"full-width-heads"})),
    Wrong("ex-02-predict-params", "check_qkv_params", 3 * H * (D * DH + D), "a bias of length d_model per head",
          frozenset({"bias-width"})),
    Wrong("ex-02-predict-params", "check_qkv_params", D * D + D, "one projection (Q) for all heads, not three",
          frozenset({"one-matrix"})),
    Wrong("ex-02-predict-params", "check_qkv_params", 3 * (D * DH) + 3 * D,
          "weights of one head plus full-width biases", frozenset({"one-head-bias-width"})),
]

WRONG = collect(globals()) + PREDICTIONS
