"""Wrong answers to the exercises of the appendix on costs, written from the exercise texts."""

from __future__ import annotations

from wrong_answers import Wrong, collect, wrong

# --- ex-costs-kv-cache -----------------------------------------------------------------------------------------

_P, _L, _D, _H, _B = 124_439_808, 12, 768, 12, 8
_W = 2 * _P                       # bytes of the weights in float16


def _tokens(per_token_bytes):
    return _W / per_token_bytes


PREDICTIONS = [
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(2 * _L * _D * 2), "forgot the batch of B = 8",
          frozenset({"no-batch"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(_B * _L * _D * 2), "K only: forgot V",
          frozenset({"half-the-cache"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(_B * 2 * _D * 2),
          "one layer's cache, not L = 12",
          frozenset({"one-layer-or-head"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(_B * 2 * _L * (_D // _H) * 2),
          "d_head per layer instead of h · d_head = d_model", frozenset({"one-layer-or-head"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(_B * 2 * _L * _H * _D * 2),
          "d_model per head: multiplied by h once too often", frozenset({"times-h"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", 4 * _P / (_B * 2 * _L * _D * 2),
          "weights counted in float32 (4 bytes), cache in float16", frozenset({"half-the-cache"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _P / (_B * 2 * _L * _D * 2),
          "parameters compared with the cache's bytes: weights at 1 byte each", frozenset({"unit-left-off"})),
    Wrong("ex-costs-kv-cache", "check_cache_outgrows_weights", _tokens(_B * 3 * _L * _D * 2),
          "Q, K and V all cached", frozenset({"queries-cached"})),
]

# --- ex-costs-cached-step --------------------------------------------------------------------------------------


def _layer(T_q, T_k, d, d_ff, proj=8, attn=4, mlp=4):
    return proj * T_q * d * d + attn * T_q * T_k * d + mlp * T_q * d * d_ff


@wrong("ex-costs-cached-step", "check_chunk_flops",
       "scores and weights·V over the new tokens only (T_q²), past keys forgotten", "past-keys-left-out")
def flops_no_past(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * _layer(T_q, T_q, d_model, d_ff) + 2 * T_q * d_model * vocab_size


@wrong("ex-costs-cached-step", "check_chunk_flops",
       "attention over T_past keys only: the new tokens do not read each other", "own-keys")
def flops_past_only(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * _layer(T_q, T_past, d_model, d_ff) + 2 * T_q * d_model * vocab_size


@wrong("ex-costs-cached-step", "check_chunk_flops", "MLP at 4·d_model wide, the given d_ff ignored", "d_ff-assumed")
def flops_fixed_d_ff(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * _layer(T_q, T_past + T_q, d_model, 4 * d_model) + 2 * T_q * d_model * vocab_size


@wrong("ex-costs-cached-step", "check_chunk_flops", "output head forgotten", "no-head")
def flops_no_head(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * _layer(T_q, T_past + T_q, d_model, d_ff)


@wrong("ex-costs-cached-step", "check_chunk_flops", "W_O forgotten: 6·T·d² for the projections", "no-W_O")
def flops_no_w_o(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * _layer(T_q, T_past + T_q, d_model, d_ff, proj=6) + 2 * T_q * d_model * vocab_size


@wrong("ex-costs-cached-step", "check_chunk_flops",
       "multiply-adds counted as one FLOP: half of everything", "multiply-adds")
def flops_macs(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return (L * _layer(T_q, T_past + T_q, d_model, d_ff) + 2 * T_q * d_model * vocab_size) // 2


@wrong("ex-costs-cached-step", "check_chunk_flops", "head counted inside every block (L times)", "head-per-block")
def flops_head_per_layer(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * (_layer(T_q, T_past + T_q, d_model, d_ff) + 2 * T_q * d_model * vocab_size)


@wrong("ex-costs-cached-step", "check_chunk_flops",
       "the cached K, V recomputed: projections over T_past + T_q tokens", "kv-recomputed")
def flops_recompute_projections(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    T = T_past + T_q
    per_layer = 2 * T_q * d_model ** 2 + 4 * T * d_model ** 2 + 2 * T_q * d_model ** 2 \
        + 4 * T_q * T * d_model + 4 * T_q * d_model * d_ff
    return L * per_layer + 2 * T_q * d_model * vocab_size


@wrong("ex-costs-cached-step", "check_chunk_flops",
       "attention per head with d_head but not summed over the h heads", "one-head")
def flops_one_head(T_past, T_q, d_model, h, L, d_ff, vocab_size):
    return L * (8 * T_q * d_model ** 2 + 4 * T_q * (T_past + T_q) * (d_model // h)
                + 4 * T_q * d_model * d_ff) + 2 * T_q * d_model * vocab_size


WRONG = collect(globals()) + PREDICTIONS
