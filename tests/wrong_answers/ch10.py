"""Wrong answers to the exercises of chapter 10 (grouped-query attention), written from the exercise texts."""

from __future__ import annotations

import copy

import torch

from attnlib import MultiHeadAttention
from wrong_answers import Wrong, collect, wrong

# --- ex-10-strided-groups ---------------------------------------------------------------------------------------


def _old_of_new(h, h_kv):
    """Old query head for each new head n' = g·group + j: the old head j·h_kv + g (it read K/V head g)."""
    group = h // h_kv
    return [j * h_kv + g for g in range(h_kv) for j in range(group)]


def _permute(W_QKV, W_O, h, order, *, q=True, o=True):
    d_model = W_O.shape[1]
    d_head = W_O.shape[0] // h
    W_Q = W_QKV[:, :h * d_head].reshape(d_model, h, d_head)
    if q:
        W_Q = W_Q[:, order]
    W_O_h = W_O.reshape(h, d_head, d_model)
    if o:
        W_O_h = W_O_h[order]
    return torch.cat([W_Q.reshape(d_model, -1), W_QKV[:, h * d_head:]], dim=1), W_O_h.reshape(h * d_head, d_model)


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "reorders W_Q's head blocks but leaves W_O's rows as they were", "W_O-not-reordered")
def regroup_q_only(W_QKV, W_O, h, h_kv):
    return _permute(W_QKV, W_O, h, _old_of_new(h, h_kv), o=False)


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "reorders W_O's row blocks but not W_Q's columns", "W_Q-not-reordered")
def regroup_o_only(W_QKV, W_O, h, h_kv):
    return _permute(W_QKV, W_O, h, _old_of_new(h, h_kv), q=False)


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "the inverse order: old head n goes to index (n mod h_kv)·group + n // h_kv, used as a gather", "inverse-order")
def regroup_inverse(W_QKV, W_O, h, h_kv):
    group = h // h_kv
    order = [(n % h_kv) * group + n // h_kv for n in range(h)]
    return _permute(W_QKV, W_O, h, order)


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "returns the weights unchanged: repeat and repeat_interleave taken as the same", "unchanged")
def regroup_unchanged(W_QKV, W_O, h, h_kv):
    return W_QKV.clone(), W_O.clone()


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "head blocks split with the wrong view: (d_model, d_head, h) instead of (d_model, h, d_head)", "head-layout")
def regroup_wrong_view(W_QKV, W_O, h, h_kv):
    d_model, d_head = W_O.shape[1], W_O.shape[0] // h
    order = _old_of_new(h, h_kv)
    W_Q = W_QKV[:, :h * d_head].reshape(d_model, d_head, h)[:, :, order].reshape(d_model, -1)
    W_O_new = W_O.reshape(d_head, h, d_model)[:, order].reshape(h * d_head, d_model)
    return torch.cat([W_Q, W_QKV[:, h * d_head:]], dim=1), W_O_new


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "permutes the columns of W_O (in head blocks) instead of its rows", "W_O-columns")
def regroup_w_o_columns(W_QKV, W_O, h, h_kv):
    d_model, d_head = W_O.shape[1], W_O.shape[0] // h
    order = _old_of_new(h, h_kv)
    W_QKV_new, _ = _permute(W_QKV, W_O, h, order, o=False)
    W_O_new = W_O.reshape(h * d_head, h, d_head)[:, order].reshape(h * d_head, d_model)
    return W_QKV_new, W_O_new


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "writes the reordered blocks back into the given tensors (inputs changed)", "in-place")
def regroup_in_place(W_QKV, W_O, h, h_kv):
    d_model, d_head = W_O.shape[1], W_O.shape[0] // h
    order = _old_of_new(h, h_kv)
    W_Q = W_QKV[:, :h * d_head].reshape(d_model, h, d_head)[:, order].reshape(d_model, -1)
    W_QKV[:, :h * d_head] = W_Q
    W_O.copy_(W_O.reshape(h, d_head, d_model)[order].reshape(h * d_head, d_model))
    return W_QKV, W_O


@wrong("ex-10-strided-groups", "check_regrouped_heads", "group and h_kv swapped in the index: old head g + j·group")
def regroup_group_hkv_swapped(W_QKV, W_O, h, h_kv):
    group = h // h_kv
    order = [g + j * group for g in range(h_kv) for j in range(group)]
    return _permute(W_QKV, W_O, h, order)


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "permutation as a float32 matrix product, cast back to the weights' dtype", "precision")
def regroup_float32_matmul(W_QKV, W_O, h, h_kv):
    d_head = W_O.shape[0] // h
    order = torch.tensor(_old_of_new(h, h_kv))
    cols = (order[:, None] * d_head + torch.arange(d_head)).reshape(-1)    # old column of each new column
    P = torch.eye(h * d_head)[:, cols]                                      # float32
    W_Q = (W_QKV[:, :h * d_head].float() @ P).to(W_QKV.dtype)
    W_O_new = (P.T @ W_O.float()).to(W_O.dtype)
    return torch.cat([W_Q, W_QKV[:, h * d_head:]], dim=1), W_O_new


@wrong("ex-10-strided-groups", "check_regrouped_heads",
       "reorders the key/value heads instead of the query heads", "kv-moved")
def regroup_kv_heads(W_QKV, W_O, h, h_kv):
    d_model, d_head = W_O.shape[1], W_O.shape[0] // h
    d_kv = h_kv * d_head
    order = list(reversed(range(h_kv)))                   # heads 0, 1 → 1, 0 as in the repeat picture
    K = W_QKV[:, h * d_head:h * d_head + d_kv].reshape(d_model, h_kv, d_head)[:, order].reshape(d_model, -1)
    V = W_QKV[:, h * d_head + d_kv:].reshape(d_model, h_kv, d_head)[:, order].reshape(d_model, -1)
    return torch.cat([W_QKV[:, :h * d_head], K, V], dim=1), W_O.clone()


# --- ex-10-predict-cache ----------------------------------------------------------------------------------------

WRONG_BYTES = [
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 16 * 128 * 4,
          "assumed multi-head: h_kv = h = 2048 / 128 = 16", frozenset({"as-if-mha"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 24 * 4 * 128 * 4,
          "forgot the factor 2 for K and V", frozenset({"half"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 4 * 128 * 4,
          "one layer only, forgot the 24 blocks", frozenset({"one-layer"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 1024 * 4,
          "took the 1024 extra rows as K's alone (h_kv = 8), then K and V", frozenset({"kv-twice"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 4 * 128,
          "counted numbers, not bytes", frozenset({"numbers"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 24 * 3072 * 4,
          "cached all 3072 outputs of W_QKV, Q included", frozenset({"with-queries"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 4 * 128 * 4 // 1024,
          "answered in KiB (96)", frozenset({"kib"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 4 * 128 * 4 * 8,
          "answered in bits", frozenset({"bits"})),
    Wrong("ex-10-predict-cache", "check_gqa_cache_bytes", 2 * 24 * 4 * 128 * 2,
          "float16's 2 bytes a number, not float32's 4", frozenset({"half"})),
]
for _i, _w in enumerate(WRONG_BYTES):
    globals()[f"bytes_{_i}"] = _w
del _i, _w, WRONG_BYTES


# --- ex-10-extend-mean-pool -------------------------------------------------------------------------------------


def _new_layer(mha, h_kv, **over):
    kw = dict(h_kv=h_kv, bias=mha.W_QKV.bias is not None, rope=mha.rope, backend=mha.backend)
    kw.update(over)
    w = mha.W_QKV.weight
    return MultiHeadAttention(mha.d_model, mha.h, **kw).to(dtype=w.dtype, device=w.device)


def _fill(new, mha, h_kv, pool):
    """Copy W_Q and W_O, and set each K/V block to pool(block of shape (h, d_head, ...), h_kv)."""
    d_model, h, d_head = mha.d_model, mha.h, mha.d_head
    W, b = mha.W_QKV.weight, mha.W_QKV.bias
    with torch.no_grad():
        Wq, Wk, Wv = W.split(d_model, dim=0)
        new.W_QKV.weight.copy_(torch.cat([Wq, pool(Wk.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model),
                                          pool(Wv.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model)]))
        if b is not None:
            bq, bk, bv = b.split(d_model)
            new.W_QKV.bias.copy_(torch.cat([bq, pool(bk.reshape(h, d_head), h_kv).reshape(-1),
                                            pool(bv.reshape(h, d_head), h_kv).reshape(-1)]))
        new.W_O.load_state_dict(mha.W_O.state_dict())
    return new


def _consecutive_mean(x, h_kv):
    return x.reshape(h_kv, x.shape[0] // h_kv, *x.shape[1:]).mean(1)


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "pools strided heads g, g + h_kv, … (view with the group axis first)", "strided-groups")
def to_gqa_strided(mha, h_kv):
    return _fill(_new_layer(mha, h_kv), mha, h_kv,
                 lambda x, n: x.reshape(x.shape[0] // n, n, *x.shape[1:]).mean(0))


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "sums the heads of each group instead of averaging them", "sum")
def to_gqa_sum(mha, h_kv):
    return _fill(_new_layer(mha, h_kv), mha, h_kv,
                 lambda x, n: x.reshape(n, x.shape[0] // n, *x.shape[1:]).sum(1))


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "keeps the first head of each group instead of the mean", "first-head")
def to_gqa_first_head(mha, h_kv):
    return _fill(_new_layer(mha, h_kv), mha, h_kv, lambda x, n: x[:: x.shape[0] // n])


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "pools the weights but leaves the new layer's biases as initialised", "biases-not-copied")
def to_gqa_bias_forgotten(mha, h_kv):
    new = _new_layer(mha, h_kv)
    d_model, h, d_head = mha.d_model, mha.h, mha.d_head
    with torch.no_grad():
        Wq, Wk, Wv = mha.W_QKV.weight.split(d_model, dim=0)
        pooled = [_consecutive_mean(W.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model) for W in (Wk, Wv)]
        new.W_QKV.weight.copy_(torch.cat([Wq, *pooled]))
        new.W_O.weight.copy_(mha.W_O.weight)
    return new


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv", "builds the new layer without passing rope", "options")
def to_gqa_rope_dropped(mha, h_kv):
    return _fill(_new_layer(mha, h_kv, rope=False), mha, h_kv, _consecutive_mean)


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv", "builds the new layer in float32 and leaves it there", "dtype")
def to_gqa_float32(mha, h_kv):
    new = MultiHeadAttention(mha.d_model, mha.h, h_kv=h_kv, bias=mha.W_QKV.bias is not None, rope=mha.rope)
    return _fill(new, mha, h_kv, _consecutive_mean)


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "copies into a float32 layer first, then converts it to mha's dtype", "precision")
def to_gqa_float32_round_trip(mha, h_kv):
    new = MultiHeadAttention(mha.d_model, mha.h, h_kv=h_kv, bias=mha.W_QKV.bias is not None, rope=mha.rope)
    return _fill(new, mha, h_kv, _consecutive_mean).to(mha.W_QKV.weight.dtype)


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "shares W_O with mha (new.W_O = mha.W_O): training the new one changes mha", "shared-parameters")
def to_gqa_shared_w_o(mha, h_kv):
    new = _fill(_new_layer(mha, h_kv), mha, h_kv, _consecutive_mean)
    new.W_O = mha.W_O
    return new


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "forgets W_O: the new layer keeps its random output projection", "W_O-not-copied")
def to_gqa_w_o_forgotten(mha, h_kv):
    new = _new_layer(mha, h_kv)
    real = _fill(_new_layer(mha, h_kv), mha, h_kv, _consecutive_mean)
    with torch.no_grad():
        new.W_QKV.load_state_dict(real.W_QKV.state_dict())
    return new


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "K and V blocks read in the wrong order: V's rows first, then K's", "kv-rows")
def to_gqa_k_v_swapped(mha, h_kv):
    new = _new_layer(mha, h_kv)
    d_model, h, d_head = mha.d_model, mha.h, mha.d_head
    W, b = mha.W_QKV.weight, mha.W_QKV.bias
    with torch.no_grad():
        Wq, Wv, Wk = W.split(d_model, dim=0)
        pool = [_consecutive_mean(X.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model) for X in (Wk, Wv)]
        new.W_QKV.weight.copy_(torch.cat([Wq, *pool]))
        if b is not None:
            bq, bv, bk = b.split(d_model)
            pool_b = [_consecutive_mean(x.reshape(h, d_head), h_kv).reshape(-1) for x in (bk, bv)]
            new.W_QKV.bias.copy_(torch.cat([bq, *pool_b]))
        new.W_O.load_state_dict(mha.W_O.state_dict())
    return new


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv", "only K is pooled; V keeps the first h_kv heads", "kv-rows")
def to_gqa_v_sliced(mha, h_kv):
    new = _new_layer(mha, h_kv)
    d_model, h, d_head = mha.d_model, mha.h, mha.d_head
    d_kv = h_kv * d_head
    W, b = mha.W_QKV.weight, mha.W_QKV.bias
    with torch.no_grad():
        Wq, Wk, Wv = W.split(d_model, dim=0)
        Wk = _consecutive_mean(Wk.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model)
        new.W_QKV.weight.copy_(torch.cat([Wq, Wk, Wv[:d_kv]]))
        if b is not None:
            bq, bk, bv = b.split(d_model)
            new.W_QKV.bias.copy_(torch.cat([bq, _consecutive_mean(bk.reshape(h, d_head), h_kv).reshape(-1), bv[:d_kv]]))
        new.W_O.load_state_dict(mha.W_O.state_dict())
    return new


@wrong("ex-10-extend-mean-pool", "check_mean_pooled_kv",
       "deep-copies mha and shrinks only h_kv and the K/V rows, forgetting qkv_sizes", "changed-after-built")
def to_gqa_deepcopy(mha, h_kv):
    new = copy.deepcopy(mha)
    new.h_kv = h_kv
    d_model, h, d_head = mha.d_model, mha.h, mha.d_head
    W = mha.W_QKV.weight.detach()
    Wq, Wk, Wv = W.split(d_model, dim=0)
    pooled = [_consecutive_mean(X.reshape(h, d_head, d_model), h_kv).reshape(-1, d_model) for X in (Wk, Wv)]
    new.W_QKV.weight = torch.nn.Parameter(torch.cat([Wq, *pooled]).clone())
    if mha.W_QKV.bias is not None:
        bq, bk, bv = mha.W_QKV.bias.detach().split(d_model)
        pb = [_consecutive_mean(x.reshape(h, d_head), h_kv).reshape(-1) for x in (bk, bv)]
        new.W_QKV.bias = torch.nn.Parameter(torch.cat([bq, *pb]).clone())
    return new


WRONG = collect(globals())
