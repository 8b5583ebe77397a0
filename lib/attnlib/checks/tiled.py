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
    """What the workers of split-K attention hand back for each key range cuts[s] … cuts[s+1]−1, stacked: O_s
    (n_splits, ..., T_q, d_v) and lse_s (n_splits, ..., T_q); a range with no readable key has lse = −∞, O = 0."""
    O_parts, lse_parts = [], []
    for c0, c1 in zip(cuts[:-1], cuts[1:]):
        m, l, _, P = online_softmax_step(Z.new_full(Z.shape[:-1], -INF), Z.new_zeros(Z.shape[:-1]), Z[..., c0:c1])
        O_parts.append(P @ V[..., c0:c1, :] / torch.where(l > 0, l, 1.0)[..., None])
        lse_parts.append(m + l.log())
    return torch.stack(O_parts), torch.stack(lse_parts)


_SPLIT_TAGS = ("two splits", "batch axes", "rows empty in a split", "large scores", "float32")


def _split_cases():
    """Fresh (O_parts, lse_parts) on every call, one per ``_SPLIT_TAGS``; key ranges of unequal lengths."""
    g = _gen(91)
    Z = 3.0 * torch.randn(3, 6, generator=g, dtype=f64)
    cases = [(Z, torch.randn(6, 2, generator=g, dtype=f64), (0, 2, 6))]
    Z = 3.0 * torch.randn(2, 3, 4, 12, generator=g, dtype=f64)
    cases.append((Z, torch.randn(2, 3, 12, 3, generator=g, dtype=f64), (0, 5, 8, 12)))
    Z = torch.randn(4, 10, generator=g, dtype=f64) + causal_mask(4, 10, dtype=f64)   # 4 new queries, 6 cached
    cases.append((Z, torch.randn(10, 2, generator=g, dtype=f64), (0, 4, 7, 10)))
    Z = 750.0 + 4.0 * torch.randn(2, 3, 8, generator=g, dtype=f64)    # exp of a score alone is inf
    cases.append((Z, torch.randn(8, 2, generator=g, dtype=f64), (0, 3, 8)))
    Z = 2.0 * torch.randn(2, 5, 7, generator=g)
    cases.append((Z, torch.randn(7, 4, generator=g), (0, 2, 4, 7)))
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
         "largest": lambda: (lse_parts == lse_parts.amax(0)).to(lse_parts.dtype)}[weights]()
    out = {"logsumexp": total.squeeze(axis), "max": lse_parts.amax(0), "sum": lse_parts.sum(0)}[lse]
    return ((w[..., None] if broadcast else w) * O_parts).sum(axis if axis >= 0 else axis - 1), out


_combine_reference = _combine


_O_MISTAKES = variants(_combine, [
    ("equal-weights", dict(weights="equal"),
     "your O is the plain mean of the splits' outputs. A split whose keys score higher holds more of the "
     "softmax's weight: what in a split's state says how much?",
     "each O_s is an average over its own keys only. In the average over all keys, split s weighs "
     "Σ exp(z) over its keys divided by Σ exp(z) over all keys; its lse_s is the log of the first sum."),
    ("unnormalised", dict(weights="unnormalised"),
     "your weights are right relative to each other, but they do not sum to 1. What must the shares of the "
     "splits add up to, if the O_s are averages?",
     "weighting each split by e to the power (lse_s − the largest lse) gives the right proportions; divide by "
     "their sum (e to the power (lse − the largest lse), with lse the combined one) so the shares add up to 1."),
    ("lse-as-weights", dict(weights="lse-as-weights"),
     "your shares are proportional to lse_s itself. lse_s is a logarithm: what does it take to turn it back "
     "into the sum of the split's exponentials?",
     "a split's share is proportional to exp(lse_s), not to lse_s; compute it against a common reference so "
     "that no exponent grows large."),
    ("rows", dict(weights="rows"),
     "your shares are normalised over the query rows, not over the splits. For one query row, which numbers "
     "must its shares add up over?",
     "the splits are the first axis of lse_parts; each query row's shares are a softmax over that axis, and "
     "the rows stay apart."),
    ("largest-split", dict(weights="largest"),
     "your O is the output of the split with the largest lse alone. Do the other splits' keys get no weight "
     "at all in the softmax over all keys?",
     "every split holds part of the softmax's weight: its share is exp(lse_s − lse), largest for the split of "
     "largest lse but above 0 for every split with a readable key."),
])
_LSE_MISTAKES = variants(_combine, [
    ("lse-max", dict(lse="max"),
     "your lse is the largest of the splits' lse. The lse of all keys is the log of which sum?",
     "the combined lse is log Σ_s exp(lse_s): at least the largest lse_s, and larger by the log of how much "
     "the other splits add."),
    ("lse-sum", dict(lse="sum"),
     "your lse is the sum of the splits' lse: the log of a product. Over all keys, are the splits' "
     "exponentials multiplied or added?",
     "exp(lse) is the sum over all keys of exp(z), so exp(lse) = Σ_s exp(lse_s): the combined lse is the "
     "log-sum-exp of the lse_s, computed against their maximum."),
])
_SHAPE_MISTAKES = variants(_combine, [   # wrong shapes or an error: named by the engine, not by _split_diagnosis
    ("wrong-axis", dict(axis=-1),
     "you combined over the last axis, the query rows, instead of the first, the splits. Which axis of "
     "lse_parts counts the splits?",
     "O_parts is (n_splits, ..., T_q, d_v) and lse_parts (n_splits, ..., T_q): the log-sum-exp and the weighted "
     "sum both run over axis 0, and every query row keeps its own result."),
    ("no-d_v-axis", dict(broadcast=False),
     "your weights have one number per split and query row, (n_splits, ..., T_q), and O_parts one more axis, "
     "d_v: the two do not line up. Which axis must the weights gain?",
     "broadcasting aligns the last axes: give the weights a trailing axis of size 1, so that one weight "
     "multiplies the whole d_v-long output row of its split."),
])
_SPLIT_MISTAKES = [*_O_MISTAKES, *_LSE_MISTAKES, *_SHAPE_MISTAKES]

_OVERFLOW = Mistake(
    "overflow",
    "right everywhere except for scores near 750, where yours holds inf or NaN. Which number that goes into "
    "exp can be larger than about 709, the largest exponent float64 can take?",
    more="only differences of log-sum-exps may go into exp: exp(lse_s − lse) is at most 1, while exp(lse_s) "
         "alone overflows to inf; torch.logsumexp subtracts the maximum for you.")


def _split_diagnosis(verdict: Verdict, results) -> Verdict | None:
    """From the cached results: an overflow on the large scores alone, or O or lse alone like a planted mistake."""
    if verdict.mistake != "values":
        return None
    outs = [(case, got) for case, got, e in results.outputs() if e is None]
    if len(outs) < len(results.cases) or not all(isinstance(g, (tuple, list)) and len(g) == 2 for _, g in outs):
        return None
    large = _SPLIT_TAGS.index("large scores")
    if all(results.right(c) for i, (c, _) in enumerate(outs) if i != large):
        case, got = outs[large]
        want = _combine_reference(*case)
        if any(isinstance(g, torch.Tensor) and g.shape == w.shape and bool((~g.isfinite() & w.isfinite()).any())
               for g, w in zip(got, want)):
            return named(_OVERFLOW)
    for i, table in ((0, _O_MISTAKES), (1, _LSE_MISTAKES)):
        for m in table:
            if all(_close(got[i], m.wrong(*case)[i], 1e-5) for case, got in outs):
                return named(m)
    return None


@checker(mistakes=[*_SPLIT_MISTAKES, _OVERFLOW])
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
    total = 0
    for q0 in range(0, T_q if short_q else T_q // b_q * b_q, b_q):
        row = offset + (min(q0 + b_q, T_q) - 1 if last else q0)
        total += min(row // b_k + 1, n_k)
    return total


def _tile_guesses(T_q: int, T_k: int, b_q: int, b_k: int, want: int) -> list[Guess]:
    plan = tile_plan(T_q, T_k, b_q, b_k, causal=True)
    n_q, n_k = plan.shape
    return [
        Guess("no-skip",
              "too high: that is every tile of the grid. Are there tiles none of whose keys any of its queries "
              "may read?",
              n_q * n_k,
              more="the tiles whose first key lies after the last query of their block are skipped; they are "
                   "few here, but not none."),
        Guess("skipped",
              "too low: that is the number of tiles skipped. The question asks for the tiles computed.",
              n_q * n_k - want,
              more="the tiles computed are the rest of the grid: every tile with at least one key that some "
                   "query of its block may read."),
        Guess("offset-ignored",
              "too low: your count places the new queries at the start of the sequence, before the cached "
              "keys. Where do the 200 new queries sit among the 500 keys?",
              _tiles_reading(T_q, T_k, b_q, b_k, offset=0),
              more="the new queries are the last positions, 300 … 499: every one of them may read all 300 "
                   "cached keys, and the new keys up to itself."),
        Guess("prefill",
              "too high: that counts the tiles of the whole 500 × 500 table, as if all 500 positions were "
              "queries. How many query rows does this call have?",
              int((tile_plan(T_k, T_k, b_q, b_k) != SKIPPED).sum()),
              more="the 300 cached positions are keys only: their queries were computed when the prompt was "
                   "read. This call has 200 query rows, in ⌈200 / 64⌉ blocks."),
        Guess("first-query",
              "too low: your query blocks end where the key blocks end, as if they were cut from position 0 "
              "rather than from the first new query (or you counted, for each block, only the key blocks its "
              "first query reads). Where does the first query block start and end, and which of its queries "
              "reads the most keys?",
              _tiles_reading(T_q, T_k, b_q, b_k, last=False),
              more="the query blocks start at the first new query, position 300: 300 … 363, 364 … 427, and so "
                   "on. A tile is computed when some query of the block may read some key of the tile: the last "
                   "query of the block reads the furthest, so count up to the key block that holds it."),
        Guess("full-blocks-only",
              "too low: the last query block (8 rows) and the last key block (52 keys) are left out. Are the "
              "shorter blocks at the end tiles too?",
              _tiles_reading(T_q, T_k, b_q, b_k, short_q=False, short_k=False),
              more="neither T_q = 200 nor T_k = 500 is a multiple of 64: the last block of each is shorter, "
                   "and its tiles are computed like the others."),
        Guess("short-query-block",
              "too low: the last query block, 8 rows, is left out. Are its tiles computed too?",
              _tiles_reading(T_q, T_k, b_q, b_k, short_q=False),
              more="200 query rows make ⌈200 / 64⌉ blocks: three of 64 and a last one of 8 rows, whose tiles "
                   "are computed like the others."),
        Guess("short-key-block",
              "too low: the last key block, 52 keys, is left out. Do the queries that may read those keys "
              "compute its tiles?",
              _tiles_reading(T_q, T_k, b_q, b_k, short_k=False),
              more="500 keys make ⌈500 / 64⌉ blocks: seven of 64 and a last one of 52 keys (448 … 499), which "
                   "the last queries may read."),
        Guess("full-only",
              "too low: that counts only the full tiles, whose keys every query may read. Are the tiles that "
              "straddle the diagonal computed too?",
              int((plan != SKIPPED).sum() - (plan == DIAGONAL).sum()),
              more="the diagonal tiles are computed as well, with the mask: some of their keys are readable by "
                   "some of their queries."),
        Guess("diagonal-only",
              "too low: that counts only the tiles computed with the mask (the diagonal ones). Are the tiles "
              "wholly below the diagonal computed too?",
              int((plan == DIAGONAL).sum()),
              more="the full tiles, whose keys every query of the block may read, are computed as well, without "
                   "a mask."),
        Guess("half",
              "too low: about half the tiles are skipped when all T positions are queries. Here the queries "
              "are only the last 200 of 500 positions: how much of the grid lies in their future?",
              n_q * n_k // 2,
              more="with a long cache almost every tile lies in the past of its queries: only the tiles to the "
                   "right of the diagonal, in the new keys, can be skipped."),
    ]


_TILE_GUESSES = _tile_guesses(*TILE_QUESTION.values(), _tiles_reading(*TILE_QUESTION.values()))


@checker(kind="predict", mistakes=_TILE_GUESSES)
def check_tile_count(n) -> Verdict:
    """Check a predicted number of tiles that causal ``tiled_attention`` computes for ``TILE_QUESTION``."""
    T_q, T_k, b_q, b_k = TILE_QUESTION.values()
    plan = tile_plan(T_q, T_k, b_q, b_k, causal=True)           # the library's own plan, counted
    want = int((plan != SKIPPED).sum())
    return judge_number(n, want, _TILE_GUESSES, rtol=1e-9,
                        success=f"{want} of the {plan.numel()} tiles: with a long cache almost every tile lies "
                                "in the past of its queries, so skipping saves little here, unlike the half of "
                                "a whole prompt.",
                        again="count the tiles one query block at a time: which key blocks does each block of "
                              "new queries read?")


# ------------------------------------------------------------------------------------ find the bug
def buggy_tiled_attention(Q, K, V, block_q, block_k):
    """Causal attention in tiles, key blocks in the outer loop; one planted bug.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v) → (..., T_q, d_v).
    The queries are the last T_q of the T_k positions. m, l and acc hold the
    running state of every query row.
    """
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)          # (..., T_q) running max
    l = Q.new_zeros(Q.shape[:-1])                    # (..., T_q) Σ exp(z - m)
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
            l[..., rows] = rescale * l[..., rows] + P.sum(-1)
            PV = torch.einsum("...qk,...kd->...qd", P, V[..., keys, :])
            acc[..., rows, :] = rescale[..., None] * acc[..., rows, :] + PV
    return acc / l[..., None]


def _tiled_variant(Q, K, V, block_q, block_k, *, alias: bool = False, sign: int = 1, after_add: bool = False,
                   rescale_l: bool = True, rescale_O: bool = True, keep: bool = True, divide: bool = True,
                   offset: bool = True, own_key: bool = True, scaled: bool = True):
    """Tiled causal attention (queries last), written independently of the buggy one, with the planted
    mistakes' switches; ``alias`` keeps the factor at 1 (the bug as given)."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    shift = T_k - T_q if offset else 0
    out = []
    for q0 in range(0, T_q, block_q):
        q1 = min(q0 + block_q, T_q)
        last = shift + q1 - 1
        m = Q.new_full(Q.shape[:-2] + (q1 - q0,), -INF)
        l, acc = torch.zeros_like(m), Q.new_zeros(*m.shape, V.shape[-1])
        for k0 in range(0, min(T_k, last + 1), block_k):
            k1 = min(k0 + block_k, T_k)
            Z = Q[..., q0:q1, :] @ K[..., k0:k1, :].mT / (math.sqrt(Q.shape[-1]) if scaled else 1.0)
            pos = torch.arange(q0, q1)[:, None] + shift
            future = torch.arange(k0, k1)[None, :] > pos if own_key else torch.arange(k0, k1)[None, :] >= pos
            Z = Z.masked_fill(future, -INF)
            m_new = torch.maximum(m, Z.amax(-1))
            r = torch.ones_like(m) if alias else torch.exp(sign * (m - m_new)) if keep else torch.zeros_like(m)
            P = torch.exp(Z - m_new[..., None])
            PV = P @ V[..., k0:k1, :]
            if after_add:
                l, acc = r * (l + P.sum(-1)), r[..., None] * (acc + PV)
            else:
                l = (r if rescale_l else 1.0) * l + P.sum(-1)
                acc = (r[..., None] if rescale_O else 1.0) * acc + PV
            m = m_new
        out.append(acc / l[..., None] if divide else acc)
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
        V = torch.randn(*batch, T_k, d_v, generator=g, dtype=f64)
        cases.append((Q, K, V, b_q, b_k))
    return cases


_FIX_MISTAKES = [
    Mistake("unchanged",
            "this gives exactly what buggy_tiled_attention gives. Follow one query row through two key blocks "
            "where the second raises the row's maximum, and print the rescale factor there: is it below 1? "
            "What does m_old hold at the moment the factor is computed?",
            buggy_tiled_attention,
            more="m_old is not a copy: indexing m with a slice gives a view of the same storage, so writing the "
                 "new maxima into m changes m_old too, and the factor is exp(0) = 1 on every tile. Keep the old "
                 "maxima in a tensor of their own, or compute the new maxima into a new tensor and write them "
                 "into m only after the factor."),
    *variants(_tiled_variant, [
        ("wrong-sign", dict(sign=-1),
         "where a row's maximum grows, your running sums and the new block's terms end up measured against "
         "different maxima. Which maximum does each term refer to, and should the factor be above 1 or below?",
         "every term summed must refer to the newest maximum: the old ℓ and Õ take the factor e to the power "
         "(old max − new max), at most 1, and the new block's weights are computed against the new maximum. "
         "One of the two refers to another maximum in yours."),
        ("rescale-after-add", dict(after_add=True),
         "the new block's terms are scaled down too. They were computed against the new maximum already: "
         "which of the two things you add needs the factor?",
         "apply the factor to the old ℓ and Õ only, then add the new block's sum and its weights times V."),
        ("O-not-rescaled", dict(rescale_O=False),
         "ℓ gets the factor, Õ does not. What else was summed against the old maximum?",
         "Õ, like ℓ, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
        ("l-not-rescaled", dict(rescale_l=False),
         "Õ gets the factor, ℓ does not. What else was summed against the old maximum?",
         "ℓ, like Õ, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
        ("state-forgotten", dict(keep=False),
         "each row's output is attention over the last key block it reads, alone: what the earlier key blocks "
         "added is gone. What carries m, ℓ and Õ of a row from one key block to the next?",
         "the running state must survive from tile to tile: m is written back after each tile, and ℓ and Õ are "
         "rescaled, not started again, when a new key block comes in."),
        ("no-division", dict(divide=False),
         "your output is the running sum Õ itself: each row is its weighted average times ℓ. What does the "
         "last step do with ℓ?",
         "Õ sums exp(z − m) · v over the keys; the softmax's weights are those terms divided by their sum ℓ, so "
         "the output is Õ / ℓ, row by row, after the last key block."),
        ("offset-ignored", dict(offset=False),
         "right when T_q = T_k, wrong after cached positions: your queries sit at positions 0 … T_q − 1. Where "
         "do the queries sit among the T_k keys?",
         "the queries are the last T_q of the T_k positions: query row i is at position T_k − T_q + i, and reads "
         "the keys up to that position."),
        ("own-key-masked", dict(own_key=False),
         "your mask also hides the key at each query's own position: the first query can read nothing. May a "
         "query read its own key?",
         "causal attention hides only the keys after the query: a key at the query's own position is readable."),
        ("unscaled", dict(scaled=False),
         "your weights are those of scores not divided by √d_k. Where do the tile's scores get the scale?",
         "each tile's scores are Q Kᵀ / √d_k, as in chapter 3, before the mask and the running maximum."),
    ]),
]


@checker(mistakes=_FIX_MISTAKES)
def check_fixed_tiled_attention(fn) -> Verdict:
    """``fn(Q, K, V, block_q, block_k)``: buggy_tiled_attention fixed, causal attention, queries last."""
    return judge(fn, _fix_cases(), _fixed_reference, _FIX_MISTAKES,
                 success="equal to causal attention for T = 10 in tiles of 4 × 3, for 5 new queries after 7 "
                         "cached positions with batch axes (2, 3), and for one tile larger than T.")
