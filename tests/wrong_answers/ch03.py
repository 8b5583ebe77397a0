"""Wrong answers to the exercises of chapter 3 (scores and scaling), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from wrong_answers import Wrong, collect, wrong

# --- ex-03-scaled -----------------------------------------------------------------------------------------------


@wrong("ex-03-scaled", "check_scaled_scores", "einsum output written bji: keys on the rows", "keys-on-rows")
def scaled_keys_on_rows(Q, K):
    return torch.einsum("ibd,jbd->bji", Q, K) / math.sqrt(Q.shape[-1])


@wrong("ex-03-scaled", "check_scaled_scores",
       "Q @ Kᵀ on the sequence-first tensors, the batch never moved first", "batch-table")
def scaled_batch_not_moved(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


@wrong("ex-03-scaled", "check_scaled_scores", "divided by √B: Q.shape[1] read as d_k", "sqrt-B")
def scaled_by_sqrt_B(Q, K):
    Qb, Kb = Q.transpose(0, 1), K.transpose(0, 1)
    return Qb @ Kb.transpose(1, 2) / math.sqrt(Q.shape[1])


@wrong("ex-03-scaled", "check_scaled_scores", "divided by √T_q: Q.shape[0] read as d_k", "sqrt-T_q")
def scaled_by_sqrt_T(Q, K):
    S = torch.einsum("ibd,jbd->bij", Q, K)
    return S / Q.shape[0] ** 0.5


@wrong("ex-03-scaled", "check_scaled_scores", "batch axis left in the middle: (T_q, B, T_k)", "sequence-first-result")
def scaled_batch_in_middle(Q, K):
    return torch.einsum("ibd,jbd->ibj", Q, K) / math.sqrt(Q.shape[-1])


@wrong("ex-03-scaled", "check_scaled_scores", "divided by d_k instead of √d_k", "divide-by-d_k")
def scaled_by_d_k(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K) / Q.shape[-1]


@wrong("ex-03-scaled", "check_scaled_scores", "reshape instead of transpose to put the batch first", "reshape")
def scaled_reshape(Q, K):
    T_q, B, d_k = Q.shape
    T_k = K.shape[0]
    Qb = Q.reshape(B, T_q, d_k)
    Kb = K.reshape(B, T_k, d_k)
    return Qb @ Kb.transpose(-2, -1) / math.sqrt(d_k)


@wrong("ex-03-scaled", "check_scaled_scores", "computed in float32 and cast back to the input dtype", "precision")
def scaled_float32(Q, K):
    Qb, Kb = Q.float().permute(1, 0, 2), K.float().permute(1, 2, 0)
    return (Qb @ Kb / math.sqrt(Q.shape[-1])).to(Q.dtype)


@wrong("ex-03-scaled", "check_scaled_scores", "half done: the raw scores S, not divided", "no-scale")
def scaled_raw(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K)


@wrong("ex-03-scaled", "check_scaled_scores", "multiplied by √d_k instead of divided", "multiply-by-sqrt")
def scaled_multiplied(Q, K):
    return torch.einsum("ibd,jbd->bij", Q, K) * math.sqrt(Q.shape[-1])


# --- ex-03-head -------------------------------------------------------------------------------------------------


@wrong("ex-03-head", "check_head_scores", "fixed only the scale: the table still has keys on the rows", "rows-are-keys")
def head_only_scale_fixed(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = K[..., :, None, :] * Q[..., None, :, :]
    return pairs.sum(-1) / math.sqrt(W_Q.shape[-1])


@wrong("ex-03-head", "check_head_scores", "fixed only the orientation: still divided by √d_model", "sqrt-d_model")
def head_only_orientation_fixed(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) / math.sqrt(X.shape[-1])


@wrong("ex-03-head", "check_head_scores", "orientation fixed, but divided by √T (X.shape[-2])", "sqrt-T")
def head_scaled_by_T(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) / math.sqrt(X.shape[-2])


@wrong("ex-03-head", "check_head_scores", "orientation fixed, divided by d_k without the square root", "divide-by-d_k")
def head_scaled_by_d_k(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) / W_K.shape[-1]


@wrong("ex-03-head", "check_head_scores",
       "transposed with transpose(0, 1): swaps batch and query axes for a batch", "first-two-axes")
def head_transpose_first_axes(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = K[..., :, None, :] * Q[..., None, :, :]
    return (pairs.sum(-1) / math.sqrt(Q.shape[-1])).transpose(0, 1)


@wrong("ex-03-head", "check_head_scores",
       "both broadcasts swapped and a transpose added: transposed twice", "rows-are-keys")
def head_transposed_twice(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return (pairs.sum(-1) / math.sqrt(Q.shape[-1])).transpose(-2, -1)


@wrong("ex-03-head", "check_head_scores",
       "orientation fixed, multiplied by √d_k instead of divided", "multiply-by-sqrt")
def head_multiplied(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_K
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) * math.sqrt(Q.shape[-1])


@wrong("ex-03-head", "check_head_scores", "keys projected with W_Q as well (copy-paste), scale fixed", "same-weights")
def head_keys_with_W_Q(X, W_Q, W_K):
    Q = X @ W_Q
    K = X @ W_Q
    pairs = Q[..., :, None, :] * K[..., None, :, :]
    return pairs.sum(-1) / math.sqrt(Q.shape[-1])


# --- ex-03-predict-unit-length ----------------------------------------------------------------------------------

_E, _C = "ex-03-predict-unit-length", "check_unit_length_scores"


def _guess(value, made, *names):
    return Wrong(_E, _C, value, made, frozenset(names))


std_1 = _guess(1.0, "the scaling keeps the spread at 1, so std 1", "scaling-fixes-it")
std_forgot_division = _guess(1 / 8, "std of q·k for unit vectors, 1/√d_k, forgetting the division by √d_k", "unscaled")
std_variance = _guess(1 / 4096, "wrote the variance 1/d_k² instead of the standard deviation", "variance")
std_d_model = _guess(1 / 128, "used d_model: 1/d_model", "width-d_model")
std_divided_three_times = _guess(1 / 512, "divided by √d_k once too often: 1/d_k^1.5", "divided-by-d_k")
std_sqrt_d_k = _guess(8.0, "unit length ignored: raw spread √d_k", "unit-variance")
std_by_T = _guess(1 / math.sqrt(32) / 8, "divided by √T as well: 1/(√T·√d_k)", "sqrt-T")
std_zero = _guess(0.0, "random directions are orthogonal, so every score is 0", "orthogonal")

WRONG = collect(globals())
