"""Wrong answers to the exercises of chapter 5 (softmax and the weighted sum of V), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from attnlib import causal_mask, softmax
from wrong_answers import Wrong, collect, wrong

# --- ex-05-log-softmax ------------------------------------------------------------------------------------------


@wrong("ex-05-log-softmax", "check_log_softmax", "naive formula: z − log Σ exp(z), no maximum subtracted", "naive")
def log_softmax_naive(z):
    return z - z.exp().sum(-1, keepdim=True).log()


@wrong("ex-05-log-softmax", "check_log_softmax", "log of the stable softmax: −inf where a weight underflows",
       "log-of-weights")
def log_softmax_log_of_softmax(z):
    return torch.log(softmax(z))


@wrong("ex-05-log-softmax", "check_log_softmax", "subtracted the maximum inside the sum but never added it back",
       "max-dropped")
def log_softmax_forgot_max(z):
    m = z.amax(-1, keepdim=True)
    return z - torch.log(torch.exp(z - m).sum(-1, keepdim=True))


@wrong("ex-05-log-softmax", "check_log_softmax", "one maximum over the whole tensor instead of one per row",
       "global-max")
def log_softmax_global_max(z):
    m = z.max()
    shifted = z - m
    return shifted - shifted.exp().sum(-1, keepdim=True).log()


@wrong("ex-05-log-softmax", "check_log_softmax", "sums over the first axis instead of the last", "wrong-axis")
def log_softmax_axis0(z):
    m = z.amax(0, keepdim=True)
    return z - m - (z - m).exp().sum(0, keepdim=True).log()


@wrong("ex-05-log-softmax", "check_log_softmax", "computes in float32 and casts back (float64 loses accuracy)",
       "precision")
def log_softmax_float32(z):
    x = z.float()
    x = x - x.amax(-1, keepdim=True)
    return (x - x.exp().sum(-1, keepdim=True).log()).to(z.dtype)


@wrong("ex-05-log-softmax", "check_log_softmax", "upcasts to float32 for float16 and forgets to cast back", "dtype")
def log_softmax_keeps_float32(z):
    x = z.float() if z.dtype == torch.float16 else z
    x = x - x.amax(-1, keepdim=True)
    return x - torch.logsumexp(x, dim=-1, keepdim=True)


@wrong("ex-05-log-softmax", "check_log_softmax", "subtracts the row minimum instead of the maximum", "subtract-min")
def log_softmax_min(z):
    m = z.amin(-1, keepdim=True)
    return z - m - torch.log(torch.sum(torch.exp(z - m), -1, keepdim=True))


@wrong("ex-05-log-softmax", "check_log_softmax", "stable shift done in place: z -= max changes the caller's scores",
       "in-place")
def log_softmax_in_place(z):
    z -= z.amax(-1, keepdim=True)
    return z - z.exp().sum(-1, keepdim=True).log()


@wrong("ex-05-log-softmax", "check_log_softmax", "half done: returns the (stable) softmax, not its log", "weights")
def log_softmax_no_log(z):
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@wrong("ex-05-log-softmax", "check_log_softmax", "divides by the log-sum instead of subtracting it", "divided")
def log_softmax_divides(z):
    m = z.amax(-1, keepdim=True)
    return (z - m) / torch.log(torch.exp(z - m).sum(-1, keepdim=True))


# --- ex-05-predict-temperature ----------------------------------------------------------------------------------
GAP = 5.2 - 2.1

WRONG_TAU = [
    Wrong("ex-05-predict-temperature", "check_temperature", math.log(2) / GAP,
          "inverted: τ = ln 2 / 3.1 (multiplied the scores by τ)", frozenset({"inverted"})),
    Wrong("ex-05-predict-temperature", "check_temperature", GAP / 2,
          "ratio of weights taken as ratio of gaps: 3.1 / 2", frozenset({"linear"})),
    Wrong("ex-05-predict-temperature", "check_temperature", GAP / math.log10(2),
          "log base 10 instead of the natural log", frozenset({"log10"})),
    Wrong("ex-05-predict-temperature", "check_temperature", (5.2 - 0.3) / math.log(2),
          "used the gap to ' the' (4.9) instead of to ' chase'", frozenset({"wrong-pair"})),
    Wrong("ex-05-predict-temperature", "check_temperature", GAP / math.sqrt(3) / math.log(2),
          "divided the already scaled gap by √d_k again", frozenset({"scaled-twice"})),
    Wrong("ex-05-predict-temperature", "check_temperature", GAP,
          "forgot the log: τ = 3.1", frozenset({"gap-itself"})),
    Wrong("ex-05-predict-temperature", "check_temperature", 4.0,
          "read off the τ table: at τ = 4 the ratio is about 2", frozenset({"read-table"})),
    Wrong("ex-05-predict-temperature", "check_temperature", GAP * math.log(2),
          "τ = gap · ln 2 instead of gap / ln 2", frozenset({"times-log"})),
]
for _i, _w in enumerate(WRONG_TAU):
    globals()[f"tau_{_i}"] = _w
del _i, _w, WRONG_TAU


# --- ex-05-top-k ------------------------------------------------------------------------------------------------


@wrong("ex-05-top-k", "check_top_k_attention", "softmax over all keys, then the others zeroed, not renormalised",
       "not-renormalised")
def top_k_no_renormalise(Z, V, k):
    P = torch.softmax(Z, dim=-1)
    kth = Z.topk(k, dim=-1).values[..., -1:]
    P = P.masked_fill(Z < kth, 0.0)
    return P @ V


@wrong("ex-05-top-k", "check_top_k_attention", "dropped keys filled with 0 instead of −inf (scatter into zeros)",
       "zeroed-scores")
def top_k_zeros(Z, V, k):
    vals, idx = Z.topk(k, dim=-1)
    kept = torch.zeros_like(Z).scatter(-1, idx, vals)
    return torch.softmax(kept, dim=-1) @ V


@wrong("ex-05-top-k", "check_top_k_attention", "strict threshold Z > k-th value keeps only k − 1 keys", "k-minus-one")
def top_k_strict(Z, V, k):
    kth = Z.topk(k, dim=-1).values[..., -1:]
    P = torch.softmax(Z.masked_fill(~(Z > kth), float("-inf")), dim=-1)
    return torch.nan_to_num(P) @ V


@wrong("ex-05-top-k", "check_top_k_attention", "kthvalue(k) taken as the k-th largest (it is the k-th smallest)",
       "kthvalue")
def top_k_kthvalue(Z, V, k):
    kth = Z.kthvalue(k, dim=-1, keepdim=True).values
    P = torch.softmax(Z.masked_fill(Z < kth, float("-inf")), dim=-1)
    return P @ V


@wrong("ex-05-top-k", "check_top_k_attention", "threshold at sorted[..., k] (0-based) keeps k + 1 keys", "k-plus-one")
def top_k_off_by_one(Z, V, k):
    srt = Z.sort(dim=-1, descending=True).values
    kth = srt[..., min(k, Z.shape[-1] - 1)].unsqueeze(-1)
    keep = Z >= kth
    P = torch.softmax(torch.where(keep, Z, torch.full_like(Z, float("-inf"))), dim=-1)
    return P @ V


@wrong("ex-05-top-k", "check_top_k_attention", "top k taken over the queries (dim −2) instead of the keys", "columns")
def top_k_wrong_axis(Z, V, k):
    kth = Z.topk(min(k, Z.shape[-2]), dim=-2).values[..., -1:, :]
    P = torch.softmax(Z.masked_fill(Z < kth, float("-inf")), dim=-1)
    return torch.nan_to_num(P) @ V


@wrong("ex-05-top-k", "check_top_k_attention", "drops the others by writing −inf into Z in place", "in-place")
def top_k_in_place(Z, V, k):
    kth = Z.topk(k, dim=-1).values[..., -1:]
    Z[Z < kth] = float("-inf")
    return torch.softmax(Z, dim=-1) @ V


@wrong("ex-05-top-k", "check_top_k_attention", "dropped keys filled with −1e9, which float16 cannot hold", "finite")
def top_k_fill_minus_1e9(Z, V, k):
    kth = Z.topk(k, dim=-1).values[..., -1:]
    P = torch.softmax(Z.masked_fill(Z < kth, -1e9), dim=-1)
    return P @ V


@wrong("ex-05-top-k", "check_top_k_attention", "gathers the kept values with V[idx]: right for one table only",
       "batch-indexed")
def top_k_gather_first_axis(Z, V, k):
    vals, idx = Z.topk(k, dim=-1)                          # (..., T_q, k)
    w = torch.softmax(vals, dim=-1)
    picked = V[idx]                                        # (..., T_q, k, d_v) for one table
    return (w[..., None] * picked).sum(-2)


@wrong("ex-05-top-k", "check_top_k_attention", "scaled the already scaled scores by √d_v once more", "scaled-twice")
def top_k_scaled_again(Z, V, k):
    Z = Z / math.sqrt(V.shape[-1])
    kth = Z.topk(k, dim=-1).values[..., -1:]
    P = torch.softmax(Z.masked_fill(Z < kth, float("-inf")), dim=-1)
    return P @ V


@wrong("ex-05-top-k", "check_top_k_attention", "top k of the weights P, then renormalised with the old row sum",
       "not-renormalised")
def top_k_of_weights(Z, V, k):
    P = torch.softmax(Z, dim=-1)
    vals, idx = P.topk(k, dim=-1)
    kept = torch.zeros_like(P).scatter(-1, idx, vals)
    kept = kept / P.sum(-1, keepdim=True)
    return kept @ V


@wrong("ex-05-top-k", "check_top_k_attention", "computes in float32 for safety and casts back (float64 rounded)",
       "precision")
def top_k_float32(Z, V, k):
    Zf, Vf = Z.float(), V.float()
    kth = Zf.topk(k, dim=-1).values[..., -1:]
    P = torch.softmax(Zf.masked_fill(Zf < kth, float("-inf")), dim=-1)
    return (P @ Vf).to(Z.dtype)


# --- ex-05-find-the-bug -----------------------------------------------------------------------------------------


@wrong("ex-05-find-the-bug", "check_fixed_head", "fixed the output index only: 'bij,bic->bic' (returns V)", "own-value")
def einsum_returns_V(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bic->bic", P, V)


@wrong("ex-05-find-the-bug", "check_fixed_head", "multiplied by the transposed weights: 'bji,bjc->bic' (Pᵀ V)",
       "unchanged")
def einsum_P_transposed(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bji,bjc->bic", P, V)


@wrong("ex-05-find-the-bug", "check_fixed_head", "fixed the sum but multiplied by K: 'bij,bjc->bic' on K", "times-K")
def einsum_times_K(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bjc->bic", P, K)


@wrong("ex-05-find-the-bug", "check_fixed_head", "blamed the scores: transposed them ('bic,bjc->bji'), output kept",
       "transposed-scores")
def einsum_fixed_wrong_line(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bji", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bic->bjc", P, V)


@wrong("ex-05-find-the-bug", "check_fixed_head", "blamed the softmax axis (dim=-2), output line kept",
       "softmax-over-queries")
def einsum_softmax_axis(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-2)
    return torch.einsum("bij,bic->bjc", P, V)


@wrong("ex-05-find-the-bug", "check_fixed_head", "output indices 'bij,bjc->bci', reshaped back to (B, T, d_v)",
       "output-transposed")
def einsum_output_transposed(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bjc->bci", P, V).reshape(V.shape)


@wrong("ex-05-find-the-bug", "check_fixed_head", "summed over j for the output but kept j: 'bij,bjc->bjc'",
       "column-sum")
def einsum_keeps_j(Q, K, V):
    d_k, T = Q.shape[-1], Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(d_k)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bjc->bjc", P, V)


@wrong("ex-05-find-the-bug", "check_fixed_head", "fixed the output but scaled by √T instead of √d_k", "scale-T")
def einsum_sqrt_T(Q, K, V):
    T = Q.shape[-2]
    Z = torch.einsum("bic,bjc->bij", Q, K) / math.sqrt(T)
    P = torch.softmax(Z + causal_mask(T), dim=-1)
    return torch.einsum("bij,bjc->bic", P, V)


WRONG = collect(globals())
