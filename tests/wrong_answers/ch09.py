"""Wrong answers to the exercises of chapter 9 (attention in tiles), written from the exercise texts."""

from __future__ import annotations

import math

import torch

from wrong_answers import Wrong, collect, wrong

# --- ex-09-combine-splits ---------------------------------------------------------------------------------------


@wrong("ex-09-combine-splits", "check_combine_splits",
       "plain mean of the splits' outputs, lse = mean of the lse's", "equal-weights")
def combine_plain_mean(O_parts, lse_parts):
    return O_parts.mean(0), lse_parts.mean(0)


@wrong("ex-09-combine-splits", "check_combine_splits",
       "weights exp(lse_s) / Σ exp(lse_s) without the maximum: overflows near 750", "overflow")
def combine_no_max(O_parts, lse_parts):
    e = torch.exp(lse_parts)                                # (S, ..., T_q)
    O = (e[..., None] * O_parts).sum(0) / e.sum(0)[..., None]
    return O, torch.log(e.sum(0))


@wrong("ex-09-combine-splits", "check_combine_splits",
       "right weights, but lse returned as the largest lse_s (log of the sum forgotten)", "lse-max")
def combine_lse_is_max(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, dim=0)
    w = torch.exp(lse_parts - lse)
    return (w[..., None] * O_parts).sum(0), lse_parts.amax(0)


@wrong("ex-09-combine-splits", "check_combine_splits",
       "weights shifted by the maximum but never divided by their sum", "unnormalised")
def combine_not_normalised(O_parts, lse_parts):
    m = lse_parts.amax(dim=0)
    w = torch.exp(lse_parts - m)                            # (S, ..., T_q)
    O = torch.einsum("s...q,s...qd->...qd", w, O_parts)
    return O, m + torch.log(w.sum(0))


@wrong("ex-09-combine-splits", "check_combine_splits",
       "lse of all keys taken as the sum of the splits' lse's (adds the logs)", "lse-sum")
def combine_lse_summed(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, dim=0)
    w = torch.exp(lse_parts - lse)
    return (w.unsqueeze(-1) * O_parts).sum(0), lse_parts.sum(0)


@wrong("ex-09-combine-splits", "check_combine_splits",
       "takes the output of the split with the largest lse (a hard max)", "largest-split")
def combine_hard_max(O_parts, lse_parts):
    best = lse_parts.argmax(0)                              # (..., T_q)
    O = torch.gather(O_parts, 0, best[None, ..., None].expand(1, *O_parts.shape[1:])).squeeze(0)
    return O, torch.logsumexp(lse_parts, dim=0)


@wrong("ex-09-combine-splits", "check_combine_splits", "computes in float32 and casts back", "precision")
def combine_float32(O_parts, lse_parts):
    lse32 = lse_parts.float()
    lse = torch.logsumexp(lse32, dim=0)
    w = torch.exp(lse32 - lse)
    O = (w[..., None] * O_parts.float()).sum(0)
    return O.to(O_parts.dtype), lse.to(lse_parts.dtype)


@wrong("ex-09-combine-splits", "check_combine_splits",
       "shifts lse_parts by its maximum in place: the caller's lse's change", "in-place")
def combine_in_place(O_parts, lse_parts):
    m = lse_parts.amax(0)
    lse_parts -= m
    w = lse_parts.exp()
    O = (w[..., None] * O_parts).sum(0) / w.sum(0)[..., None]
    return O, m + w.sum(0).log()


@wrong("ex-09-combine-splits", "check_combine_splits",
       "combines over the last axis (the rows) instead of the first (the splits)", "wrong-axis")
def combine_wrong_axis(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, dim=-1, keepdim=True)
    w = torch.exp(lse_parts - lse)
    O = (w[..., None] * O_parts).sum(-2)
    return O, lse.squeeze(-1)


@wrong("ex-09-combine-splits", "check_combine_splits",
       "weights multiplied without a trailing axis: w * O_parts does not line up with d_v", "no-d_v-axis")
def combine_missing_axis(O_parts, lse_parts):
    lse = torch.logsumexp(lse_parts, dim=0)
    w = torch.exp(lse_parts - lse)                          # (S, ..., T_q)
    return (w * O_parts).sum(0), lse


# --- ex-09-predict-tiles ----------------------------------------------------------------------------------------

WRONG_TILES = [
    Wrong("ex-09-predict-tiles", "check_tile_count", 10,
          "forgot the cached 300: queries taken as positions 0 … 199 (1 + 2 + 3 + 4)", frozenset({"offset-ignored"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 32,
          "every tile of the 4 × 8 grid, none skipped", frozenset({"no-skip"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 22,
          "counted only the full tiles, not the diagonal ones", frozenset({"full-only"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 7,
          "counted only the diagonal tiles", frozenset({"diagonal-only"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 21,
          "three query blocks (200 // 64), the last 8 rows dropped", frozenset({"short-query-block"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 27,
          "seven key blocks (500 // 64), the last 52 keys dropped", frozenset({"short-key-block"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 36,
          "the whole 500-token prompt as one square causal pass: c(c + 1) / 2 with c = 8", frozenset({"prefill"})),
    Wrong("ex-09-predict-tiles", "check_tile_count", 26,
          "query blocks cut on the key grid (from position 0), not from the first new query",
          frozenset({"first-query"})),
]
for _i, _w in enumerate(WRONG_TILES):
    globals()[f"tiles_{_i}"] = _w
del _i, _w, WRONG_TILES


# --- ex-09-fix-tiled --------------------------------------------------------------------------------------------


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "clones m_old, but only after m has been updated: factor still 1", "unchanged")
def fix_clone_too_late(Q, K, V, block_q, block_k):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)
    ell = Q.new_zeros(Q.shape[:-1])
    O = Q.new_zeros(*Q.shape[:-1], V.shape[-1])
    pos = torch.arange(T_k - T_q, T_k)
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k))
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:
                continue
            Z = Q[..., rows, :] @ K[..., keys, :].mT / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(keys > pos[rows, None], -math.inf)
            m[..., rows] = torch.maximum(m[..., rows], Z.amax(-1))
            m_old = m[..., rows].clone()
            rescale = torch.exp(m_old - m[..., rows])
            P = torch.exp(Z - m[..., rows, None])
            ell[..., rows] = rescale * ell[..., rows] + P.sum(-1)
            O[..., rows, :] = rescale[..., None] * O[..., rows, :] + P @ V[..., keys, :]
    return O / ell[..., None]


def _key_outer(Q, K, V, block_q, block_k, *, rescale_fn=None, p_old=False, ell_rescaled=True, o_rescaled=True,
               mask_ge=False, divide=True, state_dtype=None, store_m=True):
    """Key blocks outer, with the view fixed by .clone(); keyword switches plant one slip each."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    dt = Q.dtype if state_dtype is None else state_dtype
    m = torch.full(Q.shape[:-1], -math.inf, dtype=dt)
    ell = torch.zeros(Q.shape[:-1], dtype=dt)
    O = torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=dt)
    pos = torch.arange(T_k - T_q, T_k)
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k))
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:
                continue
            S = torch.einsum("...qd,...kd->...qk", Q[..., rows, :], K[..., keys, :])
            Z = S / math.sqrt(Q.shape[-1])
            future = keys >= pos[rows, None] if mask_ge else keys > pos[rows, None]
            Z = Z.masked_fill(future, -math.inf)
            m_old = m[..., rows].clone()
            m_new = torch.maximum(m_old, Z.amax(-1))
            if store_m:
                m[..., rows] = m_new
            rescale = rescale_fn(m_old, m_new) if rescale_fn else torch.exp(m_old - m_new)
            P = torch.exp(Z - (m_old if p_old else m_new)[..., None])
            ell[..., rows] = (rescale if ell_rescaled else 1.0) * ell[..., rows] + P.sum(-1)
            PV = torch.einsum("...qk,...kd->...qd", P, V[..., keys, :])
            O[..., rows, :] = (rescale[..., None] if o_rescaled else 1.0) * O[..., rows, :] + PV
    out = O / ell[..., None] if divide else O
    return out.to(Q.dtype)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention", "factor inverted: exp(m_new − m_old), above 1", "wrong-sign")
def fix_factor_inverted(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, rescale_fn=lambda old, new: torch.exp(new - old))


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "P of the new block taken against the old maximum", "wrong-sign")
def fix_p_old_max(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, p_old=True)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention", "rescales O but forgets to rescale ℓ", "ell-not-rescaled")
def fix_l_not_rescaled(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, ell_rescaled=False)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention", "rescales ℓ but forgets to rescale O", "O-not-rescaled")
def fix_o_not_rescaled(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, o_rescaled=False)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "mask with >= : every query also loses its own key", "own-key-masked")
def fix_mask_ge(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, mask_ge=True)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "fixed the factor, forgot the final division by ℓ", "no-division")
def fix_no_division(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, divide=False)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "state made with torch.full / torch.zeros: float32 m, ℓ, O for float64 inputs", "precision")
def fix_float32_state(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, state_dtype=torch.float32)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "computes m_new from a clone but never writes it back into m", "state-forgotten")
def fix_m_not_stored(Q, K, V, block_q, block_k):
    return _key_outer(Q, K, V, block_q, block_k, store_m=False)


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "'fixed' with .detach(): still a view of m, factor still 1", "unchanged")
def fix_detach(Q, K, V, block_q, block_k):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)
    ell = Q.new_zeros(Q.shape[:-1])
    O = Q.new_zeros(*Q.shape[:-1], V.shape[-1])
    pos = torch.arange(T_k - T_q, T_k)
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k))
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:
                continue
            Z = torch.einsum("...qd,...kd->...qk", Q[..., rows, :], K[..., keys, :]) / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(keys > pos[rows, None], -math.inf)
            m_old = m[..., rows].detach()
            m[..., rows] = torch.maximum(m_old, Z.amax(-1))
            rescale = torch.exp(m_old - m[..., rows])
            P = torch.exp(Z - m[..., rows, None])
            ell[..., rows] = rescale * ell[..., rows] + P.sum(-1)
            O[..., rows, :] = rescale[..., None] * O[..., rows, :] + P @ V[..., keys, :]
    return O / ell[..., None]


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention",
       "rewrote it queries-outer, with query positions 0 … T_q − 1 (no cache offset)", "offset-ignored")
def fix_rewrite_no_offset(Q, K, V, block_q, block_k):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    out = torch.empty(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    for q0 in range(0, T_q, block_q):
        q1 = min(q0 + block_q, T_q)
        pos = torch.arange(q0, q1)
        m = torch.full(Q.shape[:-2] + (q1 - q0,), -math.inf, dtype=Q.dtype)
        ell = torch.zeros_like(m)
        O = torch.zeros(*m.shape, V.shape[-1], dtype=Q.dtype)
        for k0 in range(0, T_k, block_k):
            k1 = min(k0 + block_k, T_k)
            if k0 > q1 - 1:
                break
            Z = Q[..., q0:q1, :] @ K[..., k0:k1, :].mT / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(torch.arange(k0, k1)[None, :] > pos[:, None], -math.inf)
            m_new = torch.maximum(m, Z.amax(-1))
            a = torch.exp(m - m_new)
            P = torch.exp(Z - m_new[..., None])
            ell = a * ell + P.sum(-1)
            O = a[..., None] * O + P @ V[..., k0:k1, :]
            m = m_new
        out[..., q0:q1, :] = O / ell[..., None]
    return out


@wrong("ex-09-fix-tiled", "check_fixed_tiled_attention", "fixed the factor but dropped the 1/√d_k scale", "unscaled")
def fix_no_scale(Q, K, V, block_q, block_k):
    return _key_outer(Q * math.sqrt(Q.shape[-1]), K, V, block_q, block_k)


WRONG = collect(globals())
