"""Wrong answers to the exercises of chapter 3 (scores and scaling), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from attnlib import scale, scores
from wrong_answers import Wrong, collect, wrong

# --- ex-03-fp16-scores ------------------------------------------------------------------------------------------

_FP16 = ("ex-03-fp16-scores", "check_fp16_scores")


@wrong(*_FP16, "the page's scale after the page's scores: Q Kᵀ overflows first", "scale-after")
def fp16_library_order(Q, K):
    return scale(scores(Q, K), Q.shape[-1])


@wrong(*_FP16, "divided by d_k after the product: overflow, and the wrong divisor", "scale-after")
def fp16_by_d_k_late(Q, K):
    return torch.matmul(Q, K.transpose(-1, -2)) / Q.shape[-1]


@wrong(*_FP16, "divided both Q and K by √d_k to keep both small: scaled twice", "scaled-twice")
def fp16_both_sides(Q, K):
    s = math.sqrt(Q.shape[-1])
    return (Q / s) @ (K / s).transpose(-2, -1)


@wrong(*_FP16, "meant to split the scale, divided only Q by d_k^¼", "fourth-root-once")
def fp16_quarter_on_q(Q, K):
    return (Q / Q.shape[-1] ** 0.25) @ K.transpose(-2, -1)


@wrong(*_FP16, "computed in float32 and cast back to float16", "wider-dtype")
def fp16_via_float32(Q, K):
    Z = Q.float() @ K.float().transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return Z.to(Q.dtype)


@wrong(*_FP16, "computed in float32 and returned float32", "wider-dtype", "dtype")
def fp16_float32_out(Q, K):
    return Q.float() @ K.float().transpose(-2, -1) / math.sqrt(Q.shape[-1])


@wrong(*_FP16, "made only K float32, expecting the product to be promoted", "upcast-K")
def fp16_k_float32(Q, K):
    return Q @ K.float().transpose(-2, -1) / math.sqrt(Q.shape[-1])


@wrong(*_FP16, "clamped the product to float16's range, then divided", "clamped")
def fp16_clamp(Q, K):
    S = (Q @ K.transpose(-2, -1)).clamp(-65504, 65504)
    return S / math.sqrt(Q.shape[-1])


@wrong(*_FP16, "nan_to_num on the overflowed product, then divided", "clamped")
def fp16_nan_to_num(Q, K):
    return torch.nan_to_num(Q @ K.transpose(-2, -1)) / math.sqrt(Q.shape[-1])


@wrong(*_FP16, "scaled Q in place to save the memory of a copy", "in-place")
def fp16_in_place(Q, K):
    Q.div_(math.sqrt(Q.shape[-1]))
    return Q @ K.transpose(-2, -1)


@wrong(*_FP16, "Kᵀ written as K.transpose(0, 1): right for one table only", "last-two-axes")
def fp16_transpose_first(Q, K):
    return (Q / math.sqrt(Q.shape[-1])) @ K.transpose(0, 1)


@wrong(*_FP16, "'float16 out' read as: always cast the result to float16", "dtype")
def fp16_always_half(Q, K):
    return ((Q / math.sqrt(Q.shape[-1])) @ K.transpose(-2, -1)).half()


@wrong(*_FP16, "fourth root written d_k ** 1/4, which is d_k / 4, on both sides", "scale-factor")
def fp16_precedence(Q, K):
    r = Q.shape[-1] ** 1 / 4
    return (Q / r) @ (K / r).transpose(-2, -1)


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
