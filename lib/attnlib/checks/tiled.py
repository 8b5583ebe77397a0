"""Exercise checkers for chapter 9 (attention in tiles, the online softmax).

``check_merge_states(fn)``: fn(a, b) → (m, l, O), the online-softmax state of two disjoint sets of keys
merged, each state a = (m, l, O) with m, l (...,) and O (..., d_v) not yet divided by l (as Flash-Decoding
merges the partial results of the workers that share a long cache out among themselves).
``check_tile_count(n)``: a predicted number of tiles that causal tiled attention computes for a chunk of new
queries that continues a cached prompt (``TILE_QUESTION``).
``check_fixed_tiled_attention(fn)``: :func:`buggy_tiled_attention` (key blocks in the outer loop, einsum)
with its planted bug fixed: fn(Q, K, V, block_q, block_k) equal to causal attention, queries last.

The merge is tested where the larger maximum lies in one part for some rows and in the other for others,
with extra batch axes, on rows that one part or both parts saw no readable key for, with maxima near 750,
and in float32; the tiled attention for T_q = T_k, for T_q < T_k (a cache offset) with extra batch axes, and
for blocks larger than T.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention
from ..tiled import DIAGONAL, SKIPPED, online_softmax_step, tile_plan
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_merge_states", "check_tile_count", "TILE_QUESTION", "buggy_tiled_attention",
           "check_fixed_tiled_attention"]

f64 = torch.float64
INF = math.inf


# ----------------------------------------------------------------------------- build: merge two partial states
def _state(Z: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online-softmax state (m, l, O) of scaled scores Z (..., n) over values V (..., n, d_v), by the library."""
    m, l, _, P = online_softmax_step(Z.new_full(Z.shape[:-1], -INF), Z.new_zeros(Z.shape[:-1]), Z)
    return m, l, P @ V


def _merge_cases():
    """Fresh inputs on every call, each a pair of states (a, b); ``_MERGE_TAGS`` says what each case tests."""
    g = _gen(91)
    # 1. by hand: the larger max is b's in row 0, a's in row 1, both parts' in row 2
    a1 = (torch.tensor([1.0, 3.0, 0.5], dtype=f64), torch.tensor([1.7, 2.2, 1.0], dtype=f64),
          torch.tensor([[0.4, -1.2], [2.0, 0.3], [-0.5, 0.9]], dtype=f64))
    b1 = (torch.tensor([2.5, 0.1, 0.5], dtype=f64), torch.tensor([1.3, 1.1, 1.4], dtype=f64),
          torch.tensor([[1.1, 0.2], [-0.7, 1.5], [0.6, -0.3]], dtype=f64))
    # 2. real states of two key ranges, batch axes (2, 3), 4 query rows, d_v = 3
    Z = 3.0 * torch.randn(2, 3, 4, 10, generator=g, dtype=f64)
    V = torch.randn(2, 3, 10, 3, generator=g, dtype=f64)
    a2, b2 = _state(Z[..., :6], V[..., :6, :]), _state(Z[..., 6:], V[..., 6:, :])
    # 3. rows with nothing to read: row 0 in a, row 1 in b, row 2 in both, row 3 in neither
    Z = torch.randn(4, 5, generator=g, dtype=f64)
    Z[0, :3] = Z[1, 3:] = Z[2] = -INF
    V = torch.randn(5, 2, generator=g, dtype=f64)
    a3, b3 = _state(Z[:, :3], V[:3]), _state(Z[:, 3:], V[3:])
    # 4. scores near 750: exp of a score or of a max alone is inf in float64
    Z = 750.0 + 2.0 * torch.randn(2, 3, 8, generator=g, dtype=f64)
    V = torch.randn(8, 2, generator=g, dtype=f64)
    a4, b4 = _state(Z[..., :4], V[:4]), _state(Z[..., 4:], V[4:])
    # 5. float32, the result must stay float32
    Z = 2.0 * torch.randn(2, 5, 7, generator=g)
    V = torch.randn(7, 4, generator=g)
    a5, b5 = _state(Z[..., :2], V[:2]), _state(Z[..., 2:], V[2:])
    return [(a1, b1), (a2, b2), (a3, b3), (a4, b4), (a5, b5)]


_MERGE_TAGS = ("by hand", "batch axes", "empty rows", "large maxima", "float32")


def _merge(a, b, *, rescale: str = "both", O_rescaled: bool = True, sign: int = 1, empty_safe: bool = True,
           normalise: bool = False):
    """Two states merged, with the planted mistakes' switches; the defaults are the right merge.

    ``rescale``: which parts are referred to the merged max ("both", "a", "b" or "none"); ``O_rescaled``: O
    gets the same factors as l; ``sign`` −1 inverts the factors; ``empty_safe``: rows with no key at all in
    either part stay empty instead of NaN; ``normalise``: O comes back divided by l.
    """
    (m_a, l_a, O_a), (m_b, l_b, O_b) = a, b
    m = torch.maximum(m_a, m_b)
    ref = torch.where(m == -INF, 0.0, m) if empty_safe else m     # no key in either part: measure against 0
    r_a, r_b = torch.exp(sign * (m_a - ref)), torch.exp(sign * (m_b - ref))
    if rescale in ("b", "none"):
        r_a = torch.ones_like(r_a)
    if rescale in ("a", "none"):
        r_b = torch.ones_like(r_b)
    l = r_a * l_a + r_b * l_b
    O = r_a[..., None] * O_a + r_b[..., None] * O_b if O_rescaled else O_a + O_b
    return m, l, O / l[..., None] if normalise else O


def _merge_reference(a, b):
    return _merge(a, b)


_MERGE_MISTAKES = variants(_merge, [
    ("no-rescale", dict(rescale="none"),
     "the two parts' sums are added as they are. Each part measured its terms against its own maximum: are "
     "both parts brought to the common maximum before they are added? (A factor that your code computes but "
     "that always comes out 1 does nothing.)",
     "each part's ℓ and O are sums of exp(z − its own max). Before adding, refer every part to the merged "
     "max: multiply its ℓ and its O by e to the power (its own max − the merged max), a factor at most 1."),
    ("one-side-a", dict(rescale="a"),
     "right on the rows where b holds the larger maximum, wrong where a does. Which part's sums are still "
     "measured against their own maximum?",
     "you rescaled a to the merged maximum but added b as it is, as if b were a new block already measured "
     "against the merged maximum (the step of the chapter). In a merge both parts carry a maximum of their "
     "own: b needs its factor too."),
    ("one-side-b", dict(rescale="b"),
     "right on the rows where a holds the larger maximum, wrong where b does. Which part's sums are still "
     "measured against their own maximum?",
     "you rescaled b to the merged maximum but added a as it is. Both parts carry a maximum of their own: a "
     "needs its factor too."),
    ("wrong-sign", dict(sign=-1),
     "your factors make a part's sums larger when the merged maximum is larger than the part's own. Measured "
     "against a larger maximum, every term exp(z − m) gets smaller: should a factor be above 1 or below?",
     "the factor that refers a part to the merged maximum is e to the power (own max − merged max), at most "
     "1; you used its inverse."),
    ("O-not-rescaled", dict(O_rescaled=False),
     "ℓ comes out right and O does not. What else in a state was summed against the part's own maximum?",
     "O is a sum of exp(z − m) v, measured against each part's own maximum exactly like ℓ: it needs the same "
     "factor as ℓ before the two are added."),
    ("normalised", dict(normalise=True),
     "your O is already divided by ℓ. A state keeps O undivided, so that a third part can still be merged "
     "into it: when does the division happen?",
     "return O as the undivided sum Σ exp(z − m) v of both parts; the division by ℓ is the very last step, "
     "after the last merge, as in tiled attention."),
    ("nan-empty", dict(empty_safe=False),
     "a row that has no readable key in either part (m = −∞, ℓ = 0 in both) comes out NaN. It should stay "
     "empty: m = −∞, ℓ = 0, O = 0. Which of your steps computes −∞ − (−∞)?",
     "with both maxima −∞ the merged maximum is −∞ too, and each factor is exp(−∞ − (−∞)) = exp(NaN). On "
     "such rows measure against 0 instead of the merged maximum (every term there is 0 anyway), as the "
     "library's online_softmax_step does."),
])

_OVERFLOW = Mistake(
    "overflow",
    "your merge gives inf or NaN when the maxima are large (about 750). Which number that goes into exp can "
    "be larger than about 709, the largest exponent float64 can take?",
    more="only differences of maxima may go into exp: the factor of a part, e to the power (own max − merged "
         "max), is at most 1, while e to the power of a maximum alone overflows to inf.")

_NAN_EMPTY = _MERGE_MISTAKES[-1]


def _merge_diagnosis(verdict: Verdict, results) -> Verdict | None:
    """From the cached results: inf or NaN where the right result is finite, on large maxima, is an overflow; a
    NaN (a real one) on rows with nothing to read in either part is the NaN of −∞ − (−∞). None otherwise."""
    if verdict.mistake != "values":
        return None
    found = set()
    for tag, (case, got, e) in zip(_MERGE_TAGS, results.outputs()):
        if e is not None:   # judge has described a failure already
            continue
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return None
        for g, w in zip(got, _merge_reference(*case)):
            if isinstance(g, torch.Tensor) and g.shape == w.shape:
                g, w = g.detach().cpu().double(), w.detach().cpu().double()
                if bool((g.isnan() & ~w.isnan()).any()):
                    found.add((tag, "nan"))
                if bool((~torch.isfinite(g) & torch.isfinite(w)).any()):
                    found.add((tag, "not finite"))
    if {("large maxima", "nan"), ("large maxima", "not finite")} & found:
        return named(_OVERFLOW)
    if ("empty rows", "nan") in found:
        return named(_NAN_EMPTY)
    return None


@checker(mistakes=[*_MERGE_MISTAKES, _OVERFLOW])
def check_merge_states(fn) -> Verdict:
    """Check ``fn(a, b)`` → (m, l, O): the state of two disjoint key sets, each state (m, l, O), merged."""
    return judge(fn, _merge_cases(), _merge_reference, _MERGE_MISTAKES, diagnose=_merge_diagnosis,
                 success="the merged state equals one pass over all the keys: when either part holds the larger "
                         "maximum, with batch axes, on rows empty in one part or in both, for maxima near 750, "
                         "and in float32.")


# ------------------------------------------------------------------------------------ predict: tile count
TILE_QUESTION = dict(T_q=200, T_k=500, block_q=64, block_k=64)
"""200 new queries continue a cached prompt of 300 positions: they are positions 300 … 499 of T_k = 500 keys."""


def _tiles_reading(T_q: int, T_k: int, b_q: int, b_k: int, *, last: bool = True, offset: int | None = None,
                   full_blocks_only: bool = False) -> int:
    """Tiles computed, counted one query block at a time: each reads the key blocks up to the one that holds its
    last query (or its ``last=False`` first query), the queries at ``offset`` (T_k − T_q unless given)."""
    offset = T_k - T_q if offset is None else offset
    n_k = T_k // b_k if full_blocks_only else -(-T_k // b_k)
    total = 0
    for q0 in range(0, T_q // b_q * b_q if full_blocks_only else T_q, b_q):
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
              "too low: for each query block you counted the key blocks its first query reads. Which of its "
              "queries reads the most keys?",
              _tiles_reading(T_q, T_k, b_q, b_k, last=False),
              more="a tile is computed when some query of the block may read some key of the tile: the last "
                   "query of the block reads the furthest, so count up to the key block that holds it."),
        Guess("full-blocks-only",
              "too low: the last query block (8 rows) and the last key block (52 keys) are left out. Are the "
              "shorter blocks at the end tiles too?",
              _tiles_reading(T_q, T_k, b_q, b_k, full_blocks_only=True),
              more="neither T_q = 200 nor T_k = 500 is a multiple of 64: the last block of each is shorter, "
                   "and its tiles are computed like the others."),
        Guess("diagonal-only",
              "too low: that counts only the tiles computed with the mask (the diagonal ones). Are the tiles "
              "wholly below the diagonal computed too?",
              int((plan == DIAGONAL).sum()),
              more="the full tiles, whose keys every query of the block may read, are computed as well, without "
                   "a mask."),
        Guess("half",
              "too low: about half the tiles are skipped when all T positions are queries. Here the queries "
              "are only the last 200 of 500 positions: how much of the grid lies in their future?",
              n_q * n_k / 2,
              more="with a long cache almost every tile lies in the past of its queries: only the tiles to the "
                   "right of the diagonal, in the new keys, can be skipped."),
    ]


def _rounded_guesses(guesses: list[Guess]) -> list[Guess]:
    """Each guess, and its neighbours when it is not a whole number (half of 32 tiles is 16, but half of an odd
    grid is written either way round)."""
    out = []
    for g in guesses:
        out.append(g)
        if not float(g.value).is_integer():
            out += [Guess(g.label, g.hint, math.floor(g.value), g.more), Guess(g.label, g.hint, math.ceil(g.value),
                                                                              g.more)]
    return out


_TILE_GUESSES = _rounded_guesses(_tile_guesses(*TILE_QUESTION.values(), _tiles_reading(*TILE_QUESTION.values())))


@checker(kind="predict", mistakes=_TILE_GUESSES)
def check_tile_count(n) -> Verdict:
    """Check a predicted number of tiles that causal ``tiled_attention`` computes for ``TILE_QUESTION``."""
    T_q, T_k, b_q, b_k = TILE_QUESTION.values()
    plan = tile_plan(T_q, T_k, b_q, b_k, causal=True)           # the library's own plan, counted
    want = int((plan != SKIPPED).sum())
    if want != _tiles_reading(T_q, T_k, b_q, b_k):
        raise AssertionError("the checker's count disagrees with the library's tile plan; please report this.")
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
    The queries are the last T_q of the T_k positions. m, l and O hold the
    running state of every query row.
    """
    T_q, T_k = Q.shape[-2], K.shape[-2]
    m = Q.new_full(Q.shape[:-1], -math.inf)          # (..., T_q) running max
    l = Q.new_zeros(Q.shape[:-1])                    # (..., T_q) Σ exp(z - m)
    O = Q.new_zeros(*Q.shape[:-1], V.shape[-1])      # (..., T_q, d_v) Σ exp(z - m) v
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
            O[..., rows, :] = rescale[..., None] * O[..., rows, :] + PV
    return O / l[..., None]


def _tiled_variant(Q, K, V, block_q, block_k, *, alias: bool = False, sign: int = 1, after_add: bool = False,
                   rescale_l: bool = True, rescale_O: bool = True):
    """Tiled causal attention (queries last), written independently of the buggy one, with the planted mistakes'
    switches: ``alias`` keeps the factor at 1 (the bug as given), ``sign`` −1 inverts it, ``after_add`` rescales
    after the new block is added, ``rescale_l`` / ``rescale_O`` whether ℓ / O get the factor at all."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    out = []
    for q0 in range(0, T_q, block_q):
        q1 = min(q0 + block_q, T_q)
        last = T_k - T_q + q1 - 1
        m = Q.new_full(Q.shape[:-2] + (q1 - q0,), -INF)
        l, O = torch.zeros_like(m), Q.new_zeros(*m.shape, V.shape[-1])
        for k0 in range(0, min(T_k, last + 1), block_k):
            k1 = min(k0 + block_k, T_k)
            Z = Q[..., q0:q1, :] @ K[..., k0:k1, :].mT / math.sqrt(Q.shape[-1])
            future = torch.arange(k0, k1)[None, :] > torch.arange(q0, q1)[:, None] + (T_k - T_q)
            Z = Z.masked_fill(future, -INF)
            m_new = torch.maximum(m, Z.amax(-1))
            r = torch.ones_like(m) if alias else torch.exp(sign * (m - m_new))
            P = torch.exp(Z - m_new[..., None])
            PV = P @ V[..., k0:k1, :]
            if after_add:
                l, O = r * (l + P.sum(-1)), r[..., None] * (O + PV)
            else:
                l = (r if rescale_l else 1.0) * l + P.sum(-1)
                O = (r[..., None] if rescale_O else 1.0) * O + PV
            m = m_new
        out.append(O / l[..., None])
    return torch.cat(out, dim=-2)


def _fixed_reference(Q, K, V, block_q, block_k):
    return attention(Q, K, V, causal=True)


def _fix_cases():
    """Fresh float64 inputs: T_q = T_k = 10 with blocks 4 × 3 (d_v ≠ d_k); 5 new queries after 7 cached
    positions with batch axes (2, 3) and blocks 2 × 4; T = 5 with blocks larger than T (one tile: the bug
    cannot show)."""
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
         "every term summed must refer to the newest maximum: the old ℓ and O take the factor e to the power "
         "(old max − new max), at most 1, and the new block's weights are computed against the new maximum. "
         "One of the two refers to another maximum in yours."),
        ("rescale-after-add", dict(after_add=True),
         "the new block's terms are scaled down too. They were computed against the new maximum already: "
         "which of the two things you add needs the factor?",
         "apply the factor to the old ℓ and O only, then add the new block's sum and its weights times V."),
        ("O-not-rescaled", dict(rescale_O=False),
         "ℓ gets the factor, O does not. What else was summed against the old maximum?",
         "O, like ℓ, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
        ("l-not-rescaled", dict(rescale_l=False),
         "O gets the factor, ℓ does not. What else was summed against the old maximum?",
         "ℓ, like O, is a sum of exp(z − m) terms: it needs the same factor whenever the maximum grows."),
    ]),
]


@checker(mistakes=_FIX_MISTAKES)
def check_fixed_tiled_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V, block_q, block_k)`` is :func:`buggy_tiled_attention` fixed: causal attention,
    the queries the last T_q positions."""
    return judge(fn, _fix_cases(), _fixed_reference, _FIX_MISTAKES,
                 success="equal to causal attention for T = 10 in tiles of 4 × 3, for 5 new queries after 7 "
                         "cached positions with batch axes (2, 3), and for one tile larger than T.")
