"""Exercise checkers for the mask chapter: a causal mask for packed documents, the causal weights of a chunk of
queries, and a causal head whose rows no later NaN or inf can reach. Each checker's docstring gives its contract;
every input is built afresh on each call, and a function that changes its inputs is told so."""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Group, Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_packed_mask", "check_chunk_weights", "check_sealed_attention"]

_NEG_INF = float("-inf")


def _blocked_after(T_q: int, T_k: int, offset: int) -> torch.Tensor:
    """(T_q, T_k) bool, True where key j lies after position offset + i (the future of query row i)."""
    return torch.arange(T_k)[None, :] > torch.arange(offset, offset + T_q)[:, None]


UPCAST = Mistake(
    "upcast",
    "the weights are right, but they come back as {got} for {want} scores. Which of your tensors has a "
    "dtype other than the scores', and what does combining the two give?",
    more="the weights come back as {got} for {want} scores. Adding a mask or a constant tensor of another "
         "dtype to the scores promotes the sum (float16 plus float32 gives float32). Build the mask in the "
         "scores' own dtype, or block the scores with masked_fill, which keeps their dtype.")


def _dtype_look(verdict: Verdict, results) -> Verdict | None:
    """Weights promoted out of the float16 scores' dtype, from the cached result of the float16 case (a fill value
    that overflows is named by the core, as FINITE)."""
    got = next((got for case, got, _ in results.outputs() if case[0].dtype == torch.float16), None)
    if verdict.mistake == "dtype" and isinstance(got, torch.Tensor) and got.dtype != torch.float16:
        return named(UPCAST, got=str(got.dtype), want=str(torch.float16))
    return None


# ------------------------------------------------------------------------------------------------
# A causal mask for packed documents: doc_ids (..., T) → bool (..., T, T), True where i may attend to j.

def _packed_cases() -> list[tuple[torch.Tensor]]:
    return [
        (torch.tensor([0, 0, 0, 1, 1, 2, 2, 2]),),                                    # one row, T = 8
        (torch.tensor([[0, 0, 1, 1, 1, 1], [0, 1, 1, 2, 2, 2], [0, 0, 0, 0, 0, 0]]),),  # B = 3, T = 6
        (torch.tensor([[[0, 1, 1, 1, 2], [0, 0, 0, 1, 1]],
                       [[0, 0, 1, 2, 2], [0, 0, 0, 0, 1]]]),),                         # (2, 2, 5)
    ]


def _packed_reference(doc_ids):
    same = doc_ids[..., :, None] == doc_ids[..., None, :]             # (..., T, T): one document
    return same & causal_mask(doc_ids.shape[-1], dtype=torch.bool)    # and j ≤ i


def _planted_packed(doc_ids, *, causal: str = "past", documents: bool = True, form: str = "bool",
                    expand: bool = True):
    """The mask with a planted slip; the defaults build it. ``causal`` is "past" (j ≤ i), "strict" (j < i),
    "future" (j ≥ i) or "none"; ``documents`` False ignores the documents (with ``expand`` False the result is
    one (T, T) table for any input); ``form`` is "bool", "blocked" (True = blocked) or "additive" (0 / −inf)."""
    T = doc_ids.shape[-1]
    ones = torch.ones(T, T, dtype=torch.bool)
    allowed = {"past": ones.tril(), "strict": ones.tril(-1), "future": ones.triu(), "none": ones}[causal]
    if documents:
        allowed = allowed & (doc_ids[..., :, None] == doc_ids[..., None, :])
    elif expand:
        allowed = allowed.expand(*doc_ids.shape, T)
    if form == "blocked":
        return ~allowed
    if form == "additive":
        return torch.zeros(allowed.shape).masked_fill(~allowed, _NEG_INF)
    return allowed


_PACKED_MISTAKES = variants(_planted_packed, [
    ("causal-only", {"documents": False},
     "a token of your mask still reads the earlier documents of its row. Which condition of the exercise is "
     "missing?",
     "your mask is the plain causal mask: it lets a token read every earlier token of the row, the earlier "
     "documents included. A pair (i, j) must also belong to one document."),
    ("causal-only", {"documents": False, "expand": False},
     "a token of your mask still reads the earlier documents of its row, and your mask is the same for every "
     "row of the batch. Which condition of the exercise is missing?",
     "your mask is the plain causal mask: it lets a token read every earlier token of the row, the earlier "
     "documents included. A pair (i, j) must also belong to one document, so each row gets its own mask."),
    ("documents-only", {"causal": "none"},
     "within one document, can a token of yours read the tokens that come after it?",
     "your mask lets every token read its whole document, its future included; it must be causal as well."),
    ("wrong-triangle", {"causal": "future"},
     "rows are queries i, columns keys j: do your True entries fall on the keys a query has already seen?",
     "your mask lets each token read its own document's future and not its past: True must lie on and below "
     "the diagonal."),
    ("diagonal-blocked", {"causal": "strict"},
     "may a token attend to itself? Look at the first token of each document.",
     "your mask blocks the diagonal. A token may read itself, and the first token of a document has no "
     "other key: its row would be empty, and NaN after softmax."),
    ("blocked-convention", {"form": "blocked"},
     "your True entries mark the pairs that must be blocked. What does True mean to "
     "scaled_dot_product_attention?",
     "your mask is in the convention of nn.MultiheadAttention, True = blocked. SDPA reads True as 'may "
     "attend', and the exercise asks for that convention."),
    ("additive", {"form": "additive"},
     "your mask holds numbers, the kind that is added to the scores. Which dtype does the exercise ask for?",
     "you returned an additive float mask (0 and -inf). SDPA takes that as well, but the exercise asks for "
     "the boolean one: True where query i may attend to key j."),
])

NOT_BOOLEAN = Mistake(
    "not-boolean",
    "the right pairs are marked, but as numbers in a {dtype} tensor. What does scaled_dot_product_attention "
    "do with a mask that is not boolean?",
    more="your mask holds 1 and 0 in a {dtype} tensor. SDPA adds a mask that is not boolean to the scores: "
         "the 1s would raise the allowed scores by 1, and the 0s would block nothing. Return a boolean tensor.")

BATCH_AXES = Mistake(
    "batch-axes",
    "right for doc_ids of shape {good}, not for shape {bad}. Does your code pair up the tokens of one row "
    "only, whatever axes come before the last one?",
    more="your mask is right for doc_ids of shape {good} but not for shape {bad}: your code takes another "
         "axis for the token axis, or needs a fixed number of leading axes. Compare the last axis with itself "
         "and leave the axes before it as they are.")


def _packed_look(verdict: Verdict, results) -> Verdict | None:
    outputs = results.outputs()
    if verdict.mistake == "dtype":
        got = outputs[0][1]
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            return named(NOT_BOOLEAN, dtype=str(got.dtype))
        return None
    if verdict.mistake in ("values", "shape", "error", "type"):
        right = [results.right(case) for case, _, _ in outputs]
        if any(right) and not all(right):
            shape = {ok: tuple(case[0].shape) for ok, (case, _, _) in zip(right, outputs)}
            return named(BATCH_AXES, good=shape[True], bad=shape[False])
    return None


@checker(mistakes=[*_PACKED_MISTAKES, NOT_BOOLEAN, BATCH_AXES])
def check_packed_mask(fn) -> Verdict:
    """Check ``fn(doc_ids) -> mask``: doc_ids (..., T) int64 → bool (..., T, T), True where i may attend to j."""
    return judge(fn, _packed_cases(), _packed_reference, _PACKED_MISTAKES, atol=0.0,
                 diagnose=_packed_look,
                 success="a token attends to itself and to the earlier tokens of its own document only, in "
                         "SDPA's convention (one row, a batch, and two leading axes).")


# ------------------------------------------------------------------------------------------------
# The causal weights of a chunk of queries: Z (..., T_q, T_k) for the queries at positions start …
# start + T_q − 1 against the keys at positions 0 … T_k − 1 → P (..., T_q, T_k), in the dtype of Z.

def _chunk_cases() -> list[tuple[torch.Tensor, int]]:
    g = _gen(404)
    return [
        (torch.randn(2, 3, 8, generator=g) * 2, 2),   # a middle chunk: positions 2-4, keys reach past it
        (torch.randn(4, 7, generator=g) * 2, 3),      # the last chunk: positions 3-6 of 7, as with a cache
        (torch.randn(2, 3, 6, generator=g) * 2, 0),   # the first chunk
    ]


def _chunk_half_cases() -> list[tuple[torch.Tensor, int]]:
    # float16 with two leading axes: a finite fill such as -1e9 does not fit, and a float32 mask promotes
    g = _gen(405)
    return [((torch.randn(2, 2, 5, 9, generator=g) * 2).half(), 1)]


def _chunk_reference(Z, start):
    future = _blocked_after(Z.shape[-2], Z.shape[-1], start)
    return torch.softmax(Z.double().masked_fill(future, _NEG_INF), dim=-1).to(Z.dtype)


def _planted_chunk(Z, start, *, offset: str = "start", shift: int = 0, how: str = "add", dim: int = -1,
                   emptied: bool = False):
    """P with a planted slip; the defaults compute it. Row i stands for position ``offset`` + i (+ ``shift``):
    "start" (right), "zero" (row i taken for position i) or "last" (the queries taken for the last T_q
    positions); ``how`` is "add" (block before softmax), "none", "after" (zeroed after softmax), "multiply"
    (scores times a 0/1 mask) or "past" (the past blocked instead of the future); ``emptied`` turns the NaN of
    a row or column with nothing left to read into zeros, as nan_to_num does."""
    if emptied:
        return _planted_chunk(Z, start, offset=offset, shift=shift, how=how, dim=dim).nan_to_num(0.0)
    T_q, T_k = Z.shape[-2], Z.shape[-1]
    first = {"start": start, "zero": 0, "last": T_k - T_q}[offset] + shift
    future = _blocked_after(T_q, T_k, first)
    Z = Z.double()
    if how == "none":
        return softmax(Z)
    if how == "after":
        return softmax(Z) * ~future
    if how == "multiply":
        return softmax(Z * ~future)
    if how == "past":
        return softmax(Z.masked_fill(~_blocked_after(T_q, T_k, first - 1), _NEG_INF))
    return softmax(Z.masked_fill(future, _NEG_INF), dim=dim)


_CHUNK_MISTAKES = variants(_planted_chunk, [
    ("row-is-position", {"offset": "zero"},
     "which position of the sequence does row i of the chunk stand for? Compare the first chunk with a "
     "later one.",
     "your mask treats row i as position i, so a later chunk cannot see most of its past. Row i is the "
     "query at position start + i: it may read every key up to and including that position."),
    ("last-chunk", {"offset": "last"},
     "right when the chunk ends where the keys end, wrong otherwise. Where does your mask place the "
     "queries when the keys reach past the chunk?",
     "your mask places the queries at the last T_q positions, as a KV cache would. Here the chunk begins at "
     "start, and the keys after the chunk's end lie in the future of all its queries."),
    ("self-blocked", {"shift": -1},
     "may a query read its own key? Find, in each row, the column of the query's own position.",
     "your mask starts one column too early: it blocks the key at the query's own position, which a query "
     "may read."),
    ("self-blocked", {"shift": -1, "emptied": True},
     "may a query read its own key? Find, in each row, the column of the query's own position.",
     "your mask starts one column too early: it blocks the key at the query's own position, which a query "
     "may read (and the first query, with nothing left to read, gets no weights at all)."),
    ("reads-next", {"shift": 1},
     "is the key just after a query's own position blocked in your weights?",
     "your mask starts one column too late: each query also reads the key just after its own position, a "
     "token of its future."),
    ("no-mask", {"how": "none"},
     "do your weights still reach keys that lie after the query's position?",
     "your weights are softmax(Z) without a mask: every query reads its future."),
    ("after-softmax", {"how": "after"},
     "do your rows still sum to 1?",
     "you zeroed the future weights after softmax, so the rows no longer sum to 1. Block the scores before "
     "softmax (or renormalise each row)."),
    ("wrong-axis", {"dim": -2},
     "along which axis do your weights sum to 1? Each query's weights over the keys should.",
     "you took softmax over the query axis, so columns sum to 1; each query's row over the keys must."),
    ("wrong-axis", {"dim": -2, "emptied": True},
     "along which axis do your weights sum to 1? Each query's weights over the keys should.",
     "you took softmax over the query axis, so columns sum to 1; each query's row over the keys must."),
    ("wrong-triangle", {"how": "past"},
     "rows are queries, columns keys: does your mask block a query's past or its future?",
     "your mask blocks the keys before each query's position and keeps those after it: the wrong side."),
    ("multiplied", {"how": "multiply"},
     "does a score of 0 give a weight of 0?",
     "you multiplied the scores by a 0/1 mask. exp(0) = 1, so a zeroed score still gets weight: add minus "
     "infinity to the blocked scores instead."),
])


@checker(mistakes=[*_CHUNK_MISTAKES, UPCAST])
def check_chunk_weights(fn) -> Verdict:
    """Check ``fn(Z, start) -> P``: Z (..., T_q, T_k), queries at positions start … → P (..., T_q, T_k)."""
    half = _chunk_half_cases()
    return judge(fn, [Group(_chunk_cases(), 1e-5), Group(half, 3e-3)], _chunk_reference, _CHUNK_MISTAKES,
                 diagnose=_dtype_look,
                 success="query i of the chunk reads the keys up to position start + i and no later one, "
                         "every row sums to 1, and float16 scores give float16 weights (a middle, the last "
                         "and the first chunk).")


# ------------------------------------------------------------------------------------------------
# Extend: a causal head whose row i is what position i gets from its prefix alone, whatever the later positions
# hold: a NaN or inf in a later key or value must not reach it (a row that reads one may be NaN, as alone).

def _sealed_cases() -> list[tuple]:
    g, nan, inf = _gen(408), float("nan"), float("inf")

    def case(*lead, T, d_k, d_v, bad=(), dtype=torch.float32):
        Q, K, V = (torch.randn(*lead, T, d, generator=g, dtype=dtype) for d in (d_k, d_k, d_v))
        for which, index, value in bad:                       # a bad number planted in k_t or v_t
            {"K": K, "V": V}[which][index] = value
        return Q, K, V

    return [
        case(2, T=6, d_k=4, d_v=3, bad=[("K", (0, 4, 1), nan), ("V", (1, 3, 0), inf)]),   # T, d_k, d_v all differ
        case(T=5, d_k=2, d_v=6, bad=[("V", (2, 1), nan)], dtype=torch.float64),          # one row, float64
        case(2, 2, T=7, d_k=8, d_v=5),                                                    # clean, two axes
        case(3, T=4, d_k=9, d_v=2, bad=[("K", (0, 3, 0), -inf), ("V", (2, 2, 1), nan), ("K", (2, 2, 0), nan)]),
    ]


def _planted_sealed(Q, K, V, *, mask="fill", values="sealed", scale="d_k", dim=-1):
    """The causal head with a planted slip; the defaults compute it. ``mask``: "fill" (masked_fill with −∞),
    "add" (an additive −∞ mask: NaN + (−∞) is NaN), "none", "after" (future weights zeroed after softmax) or
    "strict" (the diagonal blocked too); ``values``: "sealed" (a future value never enters a row's sum), "product"
    (P @ V: 0 · NaN is NaN), "cleaned" (non-finite values zeroed first), "cleaned-all" (non-finite keys and
    values zeroed first) or "output" (NaN in the output zeroed);
    ``scale``: the width whose square root divides the scores, "d_k", "T", "d_v" or "none"."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    root = {"d_k": d_k, "T": T, "d_v": V.shape[-1], "none": 1}[scale] ** 0.5
    future = torch.ones(T, T, dtype=torch.bool).triu(1 if mask != "strict" else 0)      # (T, T)
    if values == "cleaned-all":
        K = K.masked_fill(~K.isfinite(), 0.0)
    Z = Q @ K.transpose(-2, -1) / root                                                   # (..., T, T)
    if mask == "add":
        Z = Z + torch.zeros(T, T, dtype=Z.dtype).masked_fill(future, _NEG_INF)
    elif mask in ("fill", "strict"):
        Z = Z.masked_fill(future, _NEG_INF)
    P = torch.softmax(Z, dim=dim)
    if mask == "after":
        P = P.masked_fill(future, 0.0)
    if values.startswith("cleaned"):
        V = V.masked_fill(~V.isfinite(), 0.0)
    if values in ("product", "cleaned", "cleaned-all", "output"):
        out = P @ V
        return out.nan_to_num(0.0) if values == "output" else out
    terms = P[..., :, :, None] * V[..., None, :, :]                                      # (..., T, T, d_v)
    return terms.masked_fill(future[:, :, None], 0.0).sum(-2)


def _sealed_reference(Q, K, V):
    return _planted_sealed(Q, K, V)


_SEALED_MISTAKES = variants(_planted_sealed, [
    ("as-on-the-page", {"mask": "add", "values": "product"},
     "a clean input gives the right rows, but one bad later key or value breaks every row. What do NaN + (−∞) "
     "and 0 · NaN give?",
     "this is causal attention as the chapter computes it: an added mask keeps a NaN score NaN, and a weight of "
     "0 times a NaN value is NaN. A row must never see a later score or value at all: overwrite the future "
     "scores, and keep the later values out of each row's sum."),
    ("zero-times-nan", {"values": "product"},
     "a bad later key no longer reaches the earlier rows; a bad later value does. What is a weight of 0 times "
     "NaN?",
     "the future weights are exactly 0, but P @ V still multiplies them with the later values, and 0 · NaN = "
     "0 · inf = NaN. Leave each row's future values out of its sum instead of multiplying them by 0."),
    ("additive-mask", {"mask": "add"},
     "a bad later value no longer reaches the earlier rows; a NaN in a later key does. What is NaN + (−∞)?",
     "adding −∞ to a NaN score leaves it NaN, and softmax spreads one NaN over the whole row. Overwrite the "
     "future scores (masked_fill) instead of adding to them."),
    ("cleaned-values", {"values": "cleaned"},
     "the rows before a bad value are right. What does a row that really reads that value get from its prefix "
     "alone?",
     "you replaced the bad values before attending, so the rows that do read them come out finite. Row i must "
     "be what its prefix alone gives, bad value included: only the rows before it are protected."),
    ("cleaned-values", {"values": "cleaned-all"},
     "the rows before a bad number are right. What does a row that really reads that key or value get from "
     "its prefix alone?",
     "you replaced the bad keys and values before attending, so the rows that do read them come out finite. "
     "Row i must be what its prefix alone gives, bad numbers included: only the rows before them are "
     "protected."),
    ("nan-hidden", {"values": "output"},
     "no NaN is left in your output, but is each row what its prefix alone gives?",
     "you zeroed the NaN of the output: the rows that a later NaN broke are now 0, not their right values, and "
     "the rows that really read a bad value are hidden too. Keep the bad numbers out of the rows before them "
     "instead."),
    ("no-mask", {"mask": "none", "values": "product"},
     "does row i of your output change when a later token changes?",
     "your rows read every key, the future included: no causal mask is applied."),
    ("mask-after-softmax", {"mask": "after", "values": "product"},
     "do your weights still sum to 1 over the keys a row may read?",
     "you zeroed the future weights after softmax, so each row's weights no longer sum to 1 (and a NaN score "
     "has spread already). Block the scores before softmax."),
])

def _clean(case) -> bool:
    return all(bool(t.isfinite().all()) for t in case)


# Slips of the head itself, named on the clean cases alone (a clean input shows them, whatever the later values do).
_HEAD_SLIPS = variants(_planted_sealed, [
    ("diagonal-blocked", {"mask": "strict"},
     "may position i read its own key? Look at row 0.",
     "your mask also blocks the diagonal: position 0 has nothing left to read, and every row loses its own key."),
    ("scale-T", {"scale": "T"},
     "your output is off on a clean input too: which width divides the scores, and why that one?",
     "you scaled the scores by √T. The scale is √d_k, the width of the vectors in each dot product."),
    ("scale-d_v", {"scale": "d_v"},
     "your output is off on a clean input too: which width divides the scores, and why that one?",
     "you scaled the scores by √d_v, the width of the values. The scale is √d_k, the width of q and k."),
    ("no-scale", {"scale": "none"},
     "your weights are too sharp: what divides the scores before softmax?",
     "the scores QKᵀ must be divided by √d_k before softmax."),
    ("softmax-axis", {"dim": -2},
     "along which axis do your weights sum to 1? Each query's row over the keys should.",
     "you took softmax over the query axis, so columns sum to 1; each query's row over the keys must."),
], where=_clean)


@checker(mistakes=[*_SEALED_MISTAKES, *_HEAD_SLIPS])
def check_sealed_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V) -> out``: Q, K (..., T, d_k), V (..., T, d_v) → (..., T, d_v), row i as its prefix
    alone gives it, whatever the later keys and values hold."""
    return judge(fn, _sealed_cases(), _sealed_reference, [*_SEALED_MISTAKES, *_HEAD_SLIPS],
                 success="row i is exactly what its prefix alone gives: a NaN or inf in a later key or value "
                         "never reaches it, and a row that does read one is broken as it would be alone "
                         "(one row, a batch, two leading axes, float32 and float64).")
