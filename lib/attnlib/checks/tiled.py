"""Exercise checkers for chapter 9 (attention in tiles, the online softmax).

``check_combine_splits(fn)``: ``fn(O_parts, lse_parts)`` → (O, lse): the normalised outputs (n_splits, ..., T_q, d_v)
and log-sum-exps (n_splits, ..., T_q) of disjoint key ranges combined into those of all the keys.
``check_tile_count(n)``: a predicted number of tiles computed for ``TILE_QUESTION``.
``check_fixed_tiled_attention(fn)``: ``fn(Q, K, V, block_q, block_k)``, :func:`buggy_tiled_attention` fixed.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask
from ..tiled import DIAGONAL, SKIPPED, online_softmax_step, tile_plan
from ._core import Guess, Mistake, Verdict, _close, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_combine_splits", "check_tile_count", "TILE_QUESTION", "buggy_tiled_attention",
           "check_fixed_tiled_attention"]

f64 = torch.float64
INF = math.inf


# ------------------------------------------------------------------- build: combine the splits of a long cache
def _splits(Z: torch.Tensor, V: torch.Tensor, cuts: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(O_parts, lse_parts) of the key ranges cuts[s] … cuts[s+1]−1; lse = −∞ and O = 0 where a row reads none."""
    O_parts, lse_parts = [], []
    for c0, c1 in zip(cuts[:-1], cuts[1:]):
        m, ell, _, P = online_softmax_step(Z.new_full(Z.shape[:-1], -INF), Z.new_zeros(Z.shape[:-1]), Z[..., c0:c1])
        O_parts.append(P @ V[..., c0:c1, :] / torch.where(ell > 0, ell, 1.0)[..., None])
        lse_parts.append(m + ell.log())
    return torch.stack(O_parts), torch.stack(lse_parts)


def _split_cases():
    """Fresh (O_parts, lse_parts): two splits, batch axes, rows empty in a split, large scores, float32."""
    g = _gen(91)
    cases = [(3.0 * torch.randn(3, 6, generator=g, dtype=f64), torch.randn(6, 2, generator=g, dtype=f64), (0, 2, 6))]
    Z = 3.0 * torch.randn(2, 3, 4, 12, generator=g, dtype=f64)
    cases.append((Z, torch.randn(2, 3, 12, 3, generator=g, dtype=f64), (0, 5, 8, 12)))
    Z = torch.randn(4, 10, generator=g, dtype=f64) + causal_mask(4, 10, dtype=f64)   # 4 new queries, 6 cached
    cases.append((Z, torch.randn(10, 2, generator=g, dtype=f64), (0, 4, 7, 10)))
    Z = 750.0 + 4.0 * torch.randn(2, 3, 8, generator=g, dtype=f64)    # exp of a score alone is inf
    cases.append((Z, torch.randn(8, 2, generator=g, dtype=f64), (0, 3, 8)))
    cases.append((2.0 * torch.randn(2, 5, 7, generator=g), torch.randn(7, 4, generator=g), (0, 2, 4, 7)))
    return [_splits(*c) for c in cases]


def _combine(O_parts, lse_parts, *, weights: str = "softmax", lse: str = "logsumexp", axis: int = 0,
             broadcast: bool = True):
    """The splits combined, with the planted mistakes' switches; the defaults are the right combination."""
    total = torch.logsumexp(lse_parts, dim=axis, keepdim=True)              # (1, ..., T_q)
    w = {"softmax": lambda: torch.exp(lse_parts - total),
         "equal": lambda: torch.full_like(lse_parts, 1 / len(lse_parts)),
         "unnormalised": lambda: torch.exp(lse_parts - lse_parts.amax(0)),
         "lse-as-weights": lambda: lse_parts / lse_parts.sum(0),
         "rows": lambda: torch.softmax(lse_parts, dim=-1),
         "largest": lambda: (lse_parts == lse_parts.amax(0)).to(lse_parts.dtype),
         "overflow": lambda: torch.exp(lse_parts) / torch.exp(lse_parts).sum(0)}[weights]()
    out = {"logsumexp": total.squeeze(axis), "max": lse_parts.amax(0), "sum": lse_parts.sum(0),
           "overflow": torch.exp(lse_parts).sum(0).log()}[lse]
    return ((w[..., None] if broadcast else w) * O_parts).sum(axis if axis >= 0 else axis - 1), out


_combine_reference = _combine
_OVERFLOW = Mistake(
    "overflow", "your {part} is right except for scores near 750, where it holds {bad}. Which number that goes into "
                "exp can be larger than about 709, the largest exponent float64 can take?",
    more="only differences of log-sum-exps may go into exp: exp(lse_s − lse) is at most 1, while exp(lse_s) alone "
         "overflows to inf; torch.logsumexp subtracts the maximum for you.")
_O_MISTAKES = variants(_combine, [
    ("equal-weights", dict(weights="equal"),
     "your O is the plain mean of the splits' outputs. What in a split's state says how much weight its keys hold?",
     "over all keys, split s weighs Σ exp(z) over its keys divided by Σ exp(z) over all keys; lse_s is the log of "
     "the first sum."),
    ("unnormalised", dict(weights="unnormalised"),
     "your shares are right relative to each other, but what must they add up to, if the O_s are averages?",
     "e to the power (lse_s − the largest lse) gives the right proportions; divided by their sum, they add up to 1."),
    ("lse-as-weights", dict(weights="lse-as-weights"),
     "your shares are proportional to lse_s itself, a logarithm. What turns it back into a sum of exponentials?",
     "a split's share is proportional to exp(lse_s), taken against a common reference so that no exponent grows."),
    ("rows", dict(weights="rows"), "your shares are normalised over the query rows: over what must a row's add up?",
     "the splits are the first axis of lse_parts: each row's shares are a softmax over that axis."),
    ("largest-split", dict(weights="largest"),
     "your O is the output of the split of largest lse alone. Do the other splits' keys get no weight at all?",
     "every split with a readable key holds part of the weight: its share is exp(lse_s − lse), above 0."),
    ("overflow", dict(weights="overflow"), _OVERFLOW.hint.format(part="O", bad="NaN"), _OVERFLOW.more),
])
_LSE_MISTAKES = variants(_combine, [
    ("lse-max", dict(lse="max"), "your lse is the largest lse_s. The lse of all keys is the log of which sum?",
     "the combined lse is log Σ_s exp(lse_s): the largest lse_s plus the log of what the other splits add."),
    ("lse-sum", dict(lse="sum"),
     "your lse is the sum of the splits' lse, the log of a product. Are the exponentials multiplied or added?",
     "exp(lse) = Σ_s exp(lse_s): the combined lse is the log-sum-exp of the lse_s, taken against their maximum."),
    ("overflow", dict(lse="overflow"), _OVERFLOW.hint.format(part="lse", bad="inf"), _OVERFLOW.more),
])
_SPLIT_MISTAKES = [*_O_MISTAKES, *_LSE_MISTAKES, *variants(_combine, [   # wrong shapes or an error
    ("wrong-axis", dict(axis=-1), "you combined over the last axis, the query rows. Which axis counts the splits?",
     "O_parts is (n_splits, ..., T_q, d_v), lse_parts (n_splits, ..., T_q): both combine over axis 0."),
    ("no-d_v-axis", dict(broadcast=False),
     "your weights, (n_splits, ..., T_q), and O_parts, one axis more, do not line up. Which axis must they gain?",
     "broadcasting aligns the last axes: a trailing axis of size 1 lets one weight multiply a whole output row."),
])]


def _split_diagnosis(verdict: Verdict, results) -> Verdict | None:
    """O alone, or lse alone, like a planted mistake in every case, read from the cached results."""
    outs = [(case, got) for case, got, e in results.outputs() if e is None]
    if verdict.mistake != "values" or len(outs) < len(results.cases):
        return None
    found = (m for i, table in ((0, _O_MISTAKES), (1, _LSE_MISTAKES)) for m in table
             if all(_close(got[i], m.wrong(*case)[i], 1e-5) for case, got in outs))
    return named(m) if (m := next(found, None)) is not None else None


@checker(mistakes=_SPLIT_MISTAKES)
def check_combine_splits(fn) -> Verdict:
    """``fn(O_parts, lse_parts)`` → (O, lse) of all the keys, from those of n_splits disjoint key ranges."""
    return judge(fn, _split_cases(), _combine_reference, _SPLIT_MISTAKES, diagnose=_split_diagnosis,
                 success="the combined output and log-sum-exp equal one pass over all the keys: for two and three "
                         "splits of unequal lengths, with batch axes, with rows that a split cannot read, for "
                         "scores near 750, and in float32.")


# ------------------------------------------------------------------------------------ predict: tile count
TILE_QUESTION = dict(T_q=200, T_k=500, block_q=64, block_k=64)
"""200 new queries continue a cached prompt of 300 positions: they are positions 300 … 499 of T_k = 500 keys."""


def _tiles_reading(T_q: int, T_k: int, b_q: int, b_k: int, *, last: bool = True, offset: int | None = None,
                   short_q: bool = True, short_k: bool = True) -> int:
    """Tiles computed, one query block at a time, reading up to the key block of its last (or first) query."""
    offset = T_k - T_q if offset is None else offset
    n_k = -(-T_k // b_k) if short_k else T_k // b_k
    return sum(min((offset + (min(q0 + b_q, T_q) - 1 if last else q0)) // b_k + 1, n_k)
               for q0 in range(0, T_q if short_q else T_q // b_q * b_q, b_q))


def _tile_guesses(T_q: int, T_k: int, b_q: int, b_k: int, want: int) -> list[Guess]:
    plan = tile_plan(T_q, T_k, b_q, b_k, causal=True)
    n = plan.numel()
    rows = [("no-skip", n, "too high: every tile of the grid. Is there no tile whose keys all lie after its queries?",
         "the tiles whose first key lies after the last query of their block are skipped: few here, but not none."),
        ("key-index", want - plan.shape[0], "too low: one key block short for every query block. Is the key block "
                                             "that holds a block's last query counted?",
         "a query block reads key blocks 0 … k, where block k holds its last query: that is k + 1 key blocks."),
        ("skipped", n - want, "too low: that is the number of tiles skipped, not computed.",
         "the tiles computed are the rest of the grid: every tile with a key that a query of its block may read."),
        ("offset-ignored", _tiles_reading(T_q, T_k, b_q, b_k, offset=0),
         "too low: your new queries sit at the start of the sequence. Where do they sit among the 500 keys?",
         "the new queries are positions 300 … 499: each reads all 300 cached keys and the new keys up to itself."),
        ("prefill", int((tile_plan(T_k, T_k, b_q, b_k) != SKIPPED).sum()),
         "too high: you counted all 500 positions as queries. How many query rows does this call have?",
         "the 300 cached positions are keys only, their queries computed with the prompt: this call has 200 rows."),
        ("first-query", _tiles_reading(T_q, T_k, b_q, b_k, last=False),
         "too low: query blocks cut from position 0, or counted to their first query. Which query of a block reads "
         "furthest?", "the query blocks start at 300 (300 … 363, 364 … 427, …): count each up to its last query."),
        ("full-blocks-only", _tiles_reading(T_q, T_k, b_q, b_k, short_q=False, short_k=False),
         "too low: the last query block (8 rows) and key block (52 keys) are left out. Are short blocks tiles too?",
         "neither 200 nor 500 is a multiple of 64: the last block of each is shorter, and computed like the others."),
        ("short-query-block", _tiles_reading(T_q, T_k, b_q, b_k, short_q=False),
         "too low: the last query block, 8 rows, is left out. Are its tiles computed too?",
         "200 query rows make four blocks: three of 64 and a last one of 8, computed like the others."),
        ("short-key-block", _tiles_reading(T_q, T_k, b_q, b_k, short_k=False),
         "too low: the last key block, 52 keys, is left out. Do the queries that may read them compute its tiles?",
         "500 keys make eight blocks: seven of 64 and a last one of 52 keys (448 … 499) that the last queries read."),
        ("full-only", int((plan != SKIPPED).sum() - (plan == DIAGONAL).sum()),
         "too low: only the tiles whose keys every query may read. Are the tiles on the diagonal computed too?",
         "the diagonal tiles are computed as well, with the mask: some of their keys are readable."),
        ("diagonal-only", int((plan == DIAGONAL).sum()),
         "too low: only the tiles computed with the mask. Are the tiles wholly below the diagonal computed too?",
         "the full tiles, whose keys every query of the block may read, are computed as well, without a mask."),
        ("half", n // 2, "too low: about half the grid is skipped when all positions are queries; here only "
                         "the last 200 of 500 are. How much of the grid lies in their future?",
         "with a long cache almost every tile holds keys its queries may read: only tiles among the new keys can be "
         "skipped."),
    ]
    return [Guess(label, hint, value, more) for label, value, hint, more in rows]


_TILE_GUESSES = _tile_guesses(*TILE_QUESTION.values(), _tiles_reading(*TILE_QUESTION.values()))


@checker(kind="predict", mistakes=_TILE_GUESSES)
def check_tile_count(n) -> Verdict:
    """Check a predicted number of tiles that causal ``tiled_attention`` computes for ``TILE_QUESTION``."""
    plan = tile_plan(*TILE_QUESTION.values(), causal=True)           # the library's own plan, counted
    want = int((plan != SKIPPED).sum())
    return judge_number(n, want, _TILE_GUESSES, rtol=1e-9,
                        success=f"{want} of the {plan.numel()} tiles: with a long cache almost every tile holds "
                                "keys its queries may read, so skipping saves little here, unlike the half of "
                                "a whole prompt.",
                        again="count the tiles one query block at a time: which key blocks does each block of "
                              "new queries read?")


# ------------------------------------------------------------------------------------ find the bug
def buggy_tiled_attention(Q, K, V, block_q, block_k):
    """Causal attention in tiles, key blocks in the outer loop; one planted bug.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v) → (..., T_q, d_v).
    The queries are the last T_q of the T_k positions. m, ell and acc hold the
    running state of every query row.
    """
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)          # (..., T_q) running max
    ell = Q.new_zeros(Q.shape[:-1])                  # (..., T_q) Σ exp(z - m)
    acc = Q.new_zeros(*Q.shape[:-1], V.shape[-1])      # (..., T_q, d_v) Σ exp(z - m) v
    pos = torch.arange(T_k - T_q, T_k, device=Q.device)   # position of each query
    for k0 in range(0, T_k, block_k):
        keys = torch.arange(k0, min(k0 + block_k, T_k), device=Q.device)
        for q0 in range(0, T_q, block_q):
            rows = slice(q0, q0 + block_q)
            if keys[0] > pos[rows][-1]:              # after every query: skip
                continue
            S = torch.einsum("...qd,...kd->...qk", Q[..., rows, :], K[..., keys, :])
            Z = S / math.sqrt(Q.shape[-1])
            Z = Z.masked_fill(keys > pos[rows, None], -math.inf)
            m_old = m[..., rows]
            m[..., rows] = torch.maximum(m_old, Z.amax(-1))
            rescale = torch.exp(m_old - m[..., rows])
            P = torch.exp(Z - m[..., rows, None])
            ell[..., rows] = rescale * ell[..., rows] + P.sum(-1)
            PV = torch.einsum("...qk,...kd->...qd", P, V[..., keys, :])
            acc[..., rows, :] = rescale[..., None] * acc[..., rows, :] + PV
    return acc / ell[..., None]


def _tiled_variant(Q, K, V, block_q, block_k, *, alias: bool = False, sign: int = 1, after_add: bool = False,
                   rescale_ell: bool = True, rescale_O: bool = True, keep: bool = True, divide: bool = True,
                   offset: bool = True, own_key: bool = True, scaled: bool = True, running: bool = True,
                   last: bool = True):
    """Tiled causal attention, queries last, with the mistakes' switches; ``alias``: the bug as given (factor 1)."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    shift = T_k - T_q if offset else 0
    out = []
    for q0 in range(0, T_q, block_q):
        q1 = min(q0 + block_q, T_q)
        m = Q.new_full(Q.shape[:-2] + (q1 - q0,), -INF)
        ell, acc = torch.zeros_like(m), Q.new_zeros(*m.shape, V.shape[-1])
        for k0 in range(0, min(T_k, shift + (q1 if last else q0 + 1)), block_k):   # key blocks up to the last query
            k1 = min(k0 + block_k, T_k)
            Z = Q[..., q0:q1, :] @ K[..., k0:k1, :].mT / (math.sqrt(Q.shape[-1]) if scaled else 1.0)
            keys, pos = torch.arange(k0, k1)[None, :], torch.arange(q0, q1)[:, None] + shift
            Z = Z.masked_fill(keys > pos if own_key else keys >= pos, -INF)
            m_new = torch.maximum(m, Z.amax(-1)) if running else Z.amax(-1)
            r = torch.ones_like(m) if alias else torch.exp(sign * (m - m_new)) if keep else torch.zeros_like(m)
            P = torch.exp(Z - m_new[..., None])
            new = r if after_add else torch.ones_like(r)            # the factor the new block's terms get
            ell = (r if rescale_ell else 1.0) * ell + new * P.sum(-1)
            acc = (r[..., None] if rescale_O else 1.0) * acc + new[..., None] * (P @ V[..., k0:k1, :])
            m = m_new
        out.append(acc / ell[..., None] if divide else acc)
    return torch.cat(out, dim=-2)


_fixed_reference = lambda Q, K, V, block_q, block_k: attention(Q, K, V, causal=True)


def _fix_cases():
    """Fresh float64 inputs: T_q = T_k, a cache offset with batch axes, and blocks larger than T."""
    g = _gen(93)
    cases = []
    for batch, T_q, T_k, d_k, d_v, b_q, b_k in (((1,), 10, 10, 4, 3, 4, 3), ((2, 3), 5, 12, 3, 2, 2, 4),
                                                ((1,), 5, 5, 4, 2, 8, 8)):
        Q = 2.0 * torch.randn(*batch, T_q, d_k, generator=g, dtype=f64)
        K = 2.0 * torch.randn(*batch, T_k, d_k, generator=g, dtype=f64)
        cases.append((Q, K, torch.randn(*batch, T_k, d_v, generator=g, dtype=f64), b_q, b_k))
    return cases


_FIX_MISTAKES = [Mistake("unchanged",
            "this gives exactly what buggy_tiled_attention gives. Print the rescale factor on a key block that "
            "raises a row's maximum: is it below 1? What does m_old hold when the factor is computed?",
            buggy_tiled_attention,
            more="m_old is a view of m, not a copy: writing the new maxima into m changes m_old too, so the factor "
                 "is exp(0) = 1 on every tile."),
    *variants(_tiled_variant, [
        ("wrong-sign", dict(sign=-1),
         "every row of yours is NaN, and a row's old maximum is −∞ on its first key block. Which maximum should "
         "the factor and the new block's weights each refer to?",
         "every term summed must refer to the newest maximum: the old ℓ and Õ take exp(old max − new max), at most "
         "1, the new block's weights exp(z − new max)."),
        ("tile-max-only", dict(running=False),
         "some rows of yours are NaN: where a row may read no key of a tile, the tile's maximum is −∞. Over what is m "
         "the maximum?", "m is the maximum over every key read so far: the larger of the old m and the tile's own."),
        ("rescale-after-add", dict(after_add=True),
         "the new block's terms, already taken against the new maximum, are scaled down too. Which needs the factor?",
         "apply the factor to the old ℓ and Õ only, then add the new block's sum and its weights times V."),
        ("O-not-rescaled", dict(rescale_O=False),
         "ℓ gets the factor, Õ does not. What else was summed against the old maximum?",
         "Õ, like ℓ, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
        ("ell-not-rescaled", dict(rescale_ell=False),
         "Õ gets the factor, ℓ does not. What else was summed against the old maximum?",
         "ℓ, like Õ, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
        ("state-forgotten", dict(keep=False),
         "each row's output is attention over its last key block alone. What carries m, ℓ and Õ to the next one?",
         "the running state must survive from tile to tile: m written back, ℓ and Õ rescaled, not started again."),
        ("no-division", dict(divide=False),
         "your output is the running sum Õ itself, each row its average times ℓ. What does the last step do with ℓ?",
         "the weights are the exp(z − m) terms divided by their sum ℓ: the output is Õ / ℓ after the last block."),
        ("offset-ignored", dict(offset=False), "right when T_q = T_k only. Where do the queries sit among the keys?",
         "the queries are the last T_q positions: query row i is at position T_k − T_q + i."),
        ("own-key-masked", dict(own_key=False),
         "your mask also hides each query's own key, so the first query reads nothing. May a query read its own?",
         "causal attention hides only the keys after the query; the key at its own position is readable."),
        ("unscaled", dict(scaled=False), "your scores are not divided by √d_k. Where do a tile's scores get it?",
         "each tile's scores are Q Kᵀ / √d_k, as in chapter 3, before the mask and the running maximum."),
        ("skip-by-first-query", dict(last=False), "later rows of a query block miss keys they may read: which query "
         "decides that a key block is skipped?", "a key block may be skipped only when it lies after every query."),
    ]),
]


@checker(mistakes=_FIX_MISTAKES)
def check_fixed_tiled_attention(fn) -> Verdict:
    """``fn(Q, K, V, block_q, block_k)``: buggy_tiled_attention fixed, causal attention, queries last."""
    return judge(fn, _fix_cases(), _fixed_reference, _FIX_MISTAKES,
                 success="equal to causal attention for T = 10 in tiles of 4 × 3, for 5 new queries after 7 "
                         "cached positions with batch axes (2, 3), and for one tile larger than T.")
