"""Exercise checkers for chapter 4 (the causal mask).

``check_packed_mask(fn)``: ``fn(doc_ids)``, (..., T) int64 → bool (..., T, T), True where i may attend to j.
``check_chunk_weights(fn)``: ``fn(Z, start)``, Z (..., T_q, T_k) for queries at start … → P in Z's dtype.
``check_sealed_attention(fn)``: ``fn(Q, K, V)`` → (..., T, d_v), row i as its prefix alone gives it.
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Group, Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_packed_mask", "check_chunk_weights", "check_sealed_attention"]

_NEG_INF = float("-inf")


def _blocked_after(T_q: int, T_k: int, offset: int) -> torch.Tensor:
    """(T_q, T_k) bool, True where key j lies after position offset + i (the future of query row i)."""
    return torch.arange(T_k)[None, :] > torch.arange(offset, offset + T_q)[:, None]


# --- build: a causal mask for packed documents ---------------------------------------------------------------------

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


def _planted_packed(doc_ids, *, causal: str = "past", documents: bool = True, form: str = "bool", expand: bool = True):
    """The mask, or a planted slip: ``causal`` "past" (j ≤ i), "strict", "future", "after" (j > i) or "none";
    ``documents`` False ignores them (``expand`` False: one (T, T) table); ``form`` "bool", "blocked", "additive"."""
    T = doc_ids.shape[-1]
    ones = torch.ones(T, T, dtype=torch.bool)
    allowed = {"past": ones.tril(), "strict": ones.tril(-1), "future": ones.triu(), "none": ones,
               "after": ones.triu(1)}[causal]
    if documents:
        allowed = allowed & (doc_ids[..., :, None] == doc_ids[..., None, :])
    elif expand:
        allowed = allowed.expand(*doc_ids.shape, T)
    return {"bool": allowed, "blocked": ~allowed,
            "additive": torch.zeros(allowed.shape).masked_fill(~allowed, _NEG_INF)}[form]


_PACKED_MISTAKES = variants(_planted_packed, [
    *[("causal-only", {"documents": False, "expand": expand},
       "a token of your mask still reads the earlier documents of its row: which condition is missing?",
       "your mask is the plain causal mask; a pair (i, j) must also belong to one document, so each row gets its "
       "own mask.") for expand in (True, False)],
    ("documents-only", {"causal": "none"}, "within one document, can a token of yours read later tokens?",
     "your mask lets every token read its whole document, its future included; it must be causal as well."),
    ("wrong-triangle", {"causal": "future"}, "rows are queries, columns keys: does your True fall on a query's past?",
     "your mask lets each token read its document's future, not its past: True lies on and below the diagonal."),
    ("future-only", {"causal": "after"}, "your mask lets a token read only the later tokens of its document, not "
     "itself nor its past. What does each entry of the float causal mask become as a boolean?", "a float mask "
     "turned into booleans is True wherever it is nonzero: its −inf, the blocked future, becomes True, and its 0s, "
     "the diagonal and the past, False. The boolean mask is True on and below the diagonal."),
    ("diagonal-blocked", {"causal": "strict"}, "may a token attend to itself? Look at each document's first token.",
     "your mask blocks the diagonal; a document's first token then has no key at all, and NaN after softmax."),
    ("blocked-convention", {"form": "blocked"},
     "your True entries mark the pairs to block. What does True mean to scaled_dot_product_attention?",
     "your mask is nn.MultiheadAttention's convention, True = blocked; SDPA, and the exercise, read True as "
     "'may attend'."),
    ("additive", {"form": "additive"},
     "your mask holds numbers, added to scores: which dtype does the exercise ask for?",
     "you returned an additive float mask (0 and -inf); the exercise asks for the boolean one."),
])

NOT_BOOLEAN = Mistake("not-boolean",
    "the right pairs are marked, but as numbers in a {dtype} tensor. What does scaled_dot_product_attention do "
    "with a mask that is not boolean?",
    more="SDPA adds a mask that is not boolean to the scores: your 1s would raise the allowed scores by 1 and your "
         "0s block nothing. Return a boolean tensor.")
BATCH_AXES = Mistake("batch-axes",
    "right for doc_ids of shape {good}, not for shape {bad}. Does your code pair up the tokens of one row only, "
    "whatever axes come before the last one?",
    more="your code takes another axis for the token axis, or needs a fixed number of leading axes: compare the "
         "last axis with itself and leave the axes before it as they are.")


def _packed_look(verdict: Verdict, results) -> Verdict | None:
    outputs = results.outputs()
    got = outputs[0][1]
    if verdict.mistake == "dtype" and isinstance(got, torch.Tensor) and got.dtype != torch.bool:
        return named(NOT_BOOLEAN, dtype=str(got.dtype))
    right = [results.right(case) for case, _, _ in outputs]
    if verdict.mistake in ("values", "shape", "error", "type") and any(right) and not all(right):
        shape = {ok: tuple(case[0].shape) for ok, (case, _, _) in zip(right, outputs)}
        return named(BATCH_AXES, good=shape[True], bad=shape[False])
    return None


@checker(mistakes=[*_PACKED_MISTAKES, NOT_BOOLEAN, BATCH_AXES])
def check_packed_mask(fn) -> Verdict:
    """Check ``fn(doc_ids) -> mask``: doc_ids (..., T) int64 → bool (..., T, T), True where i may attend to j."""
    return judge(fn, _packed_cases(), _packed_reference, _PACKED_MISTAKES, atol=0.0, diagnose=_packed_look,
                 success="a token attends to itself and to the earlier tokens of its own document only, in "
                         "SDPA's convention (one row, a batch, and two leading axes).")


# --- the causal weights of a chunk of queries at positions start … start + T_q − 1 against keys 0 … T_k − 1 --------

def _chunk_cases() -> list[tuple[torch.Tensor, int]]:
    g = _gen(404)
    return [
        (torch.randn(2, 3, 8, generator=g) * 2, 2),   # a middle chunk: positions 2-4, keys reach past it
        (torch.randn(4, 7, generator=g) * 2, 3),      # the last chunk: positions 3-6 of 7, as with a cache
        (torch.randn(2, 3, 6, generator=g) * 2, 0),   # the first chunk
    ]


def _chunk_half_cases() -> list[tuple[torch.Tensor, int]]:
    # float16 with two leading axes: a finite fill such as -1e9 does not fit, and a float32 mask promotes
    return [((torch.randn(2, 2, 5, 9, generator=_gen(405)) * 2).half(), 1)]


def _chunk_reference(Z, start):
    future = _blocked_after(Z.shape[-2], Z.shape[-1], start)
    return torch.softmax(Z.double().masked_fill(future, _NEG_INF), dim=-1).to(Z.dtype)


def _planted_chunk(Z, start, *, offset: str = "start", shift: int = 0, how: str = "add", dim: int = -1,
                   emptied: bool = False):
    """P, or a planted slip: row i stands for position ``offset`` ("start", "zero" or "last": the last T_q) + i +
    ``shift``; ``how`` "add", "none", "after" (zeroed after softmax), "multiply" (by a 0/1 mask) or "past" (the
    past blocked); ``emptied`` turns an empty row's NaN into zeros."""
    if emptied:
        return _planted_chunk(Z, start, offset=offset, shift=shift, how=how, dim=dim).nan_to_num(0.0)
    T_q, T_k = Z.shape[-2], Z.shape[-1]
    first = {"start": start, "zero": 0, "last": T_k - T_q}[offset] + shift
    future, Z = _blocked_after(T_q, T_k, first), Z.double()
    return {"none": lambda: softmax(Z), "after": lambda: softmax(Z) * ~future,
            "multiply": lambda: softmax(Z * ~future),
            "past": lambda: softmax(Z.masked_fill(~_blocked_after(T_q, T_k, first - 1), _NEG_INF)),
            "add": lambda: softmax(Z.masked_fill(future, _NEG_INF), dim=dim)}[how]()


_CHUNK_MISTAKES = variants(_planted_chunk, [
    ("row-is-position", {"offset": "zero"},
     "which position of the sequence does row i of the chunk stand for? Compare the first chunk with a later one.",
     "your mask treats row i as position i; row i is the query at position start + i, and reads every key up to "
     "and including it."),
    ("last-chunk", {"offset": "last"},
     "right when the chunk ends where the keys end, wrong otherwise: where does your mask place the queries?",
     "your mask places the queries at the last T_q positions, as a KV cache would; here the chunk begins at "
     "start, and the keys after its end are the future of all its queries."),
    *[("self-blocked", {"shift": -1, "emptied": emptied},
       "may a query read its own key? Find, in each row, the column of the query's own position.",
       "your mask starts one column too early: it blocks the key at the query's own position.")
      for emptied in (False, True)],
    ("reads-next", {"shift": 1}, "is the key just after a query's own position blocked in your weights?",
     "your mask starts one column too late: each query also reads the key after its own position, its future."),
    ("no-mask", {"how": "none"}, "do your weights still reach keys that lie after the query's position?",
     "your weights are softmax(Z) without a mask: every query reads its future."),
    ("after-softmax", {"how": "after"}, "do your rows still sum to 1?",
     "you zeroed the future weights after softmax; block the scores before softmax (or renormalise each row)."),
    *[("wrong-axis", {"dim": -2, "emptied": emptied},
       "along which axis do your weights sum to 1? Each query's weights over the keys should.",
       "you took softmax over the query axis, so columns sum to 1; each query's row over the keys must.")
      for emptied in (False, True)],
    ("wrong-triangle", {"how": "past"}, "rows are queries, columns keys: do you block a query's past or its future?",
     "your mask blocks the keys before each query's position and keeps those after it."),
    ("multiplied", {"how": "multiply"}, "does a score of 0 give a weight of 0?",
     "you multiplied the scores by a 0/1 mask; exp(0) = 1, so a zeroed score still gets weight."),
])

UPCAST = Mistake("upcast",
    "the weights are right, but they come back as {got} for {want} scores. Which of your tensors has another "
    "dtype than the scores, and what does combining the two give?",
    more="adding a mask or constant of another dtype promotes the sum (float16 plus float32 gives float32): build "
         "the mask in the scores' dtype, or block with masked_fill, which keeps it.")


def _dtype_look(verdict: Verdict, results) -> Verdict | None:
    """Weights promoted out of the float16 case's dtype (a fill that overflows is the core's FINITE)."""
    got = next((got for case, got, _ in results.outputs() if case[0].dtype == torch.float16), None)
    if verdict.mistake == "dtype" and isinstance(got, torch.Tensor) and got.dtype != torch.float16:
        return named(UPCAST, got=str(got.dtype), want=str(torch.float16))
    return None


@checker(mistakes=[*_CHUNK_MISTAKES, UPCAST])
def check_chunk_weights(fn) -> Verdict:
    """Check ``fn(Z, start) -> P``: Z (..., T_q, T_k), queries at positions start … → P (..., T_q, T_k)."""
    return judge(fn, [Group(_chunk_cases(), 1e-5), Group(_chunk_half_cases(), 3e-3)], _chunk_reference,
                 _CHUNK_MISTAKES, diagnose=_dtype_look,
                 success="query i of the chunk reads the keys up to position start + i and no later one, every row "
                         "sums to 1, and float16 scores give float16 weights (a middle, the last and the first chunk).")


# --- extend: a causal head no later NaN or inf reaches (a row that reads one may be NaN, as alone) --------------------

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
    """The head, or a planted slip: ``mask`` "fill", "add" (NaN + (−∞) is NaN), "none", "after" (zeroed after
    softmax) or "strict"; ``values`` "sealed" (no future value enters a row's sum), "product" (0 · NaN is NaN),
    "cleaned" / "cleaned-all" (non-finite values / keys and values zeroed first) or "output" (NaN zeroed after);
    ``scale``: the width whose square root divides the scores."""
    T, d_k = Q.shape[-2], Q.shape[-1]
    root = {"d_k": d_k, "T": T, "d_v": V.shape[-1], "none": 1}[scale] ** 0.5
    future = torch.ones(T, T, dtype=torch.bool).triu(0 if mask in ("strict", "before") else 1)   # (T, T)
    future[0, 0] = mask == "strict"                     # "before": keys before i, and key 0 for row 0
    if values == "cleaned-all":
        K = K.masked_fill(~K.isfinite(), 0.0)
    Z = Q @ K.transpose(-2, -1) / root                                                   # (..., T, T)
    if mask == "add":
        Z = Z + torch.zeros(T, T, dtype=Z.dtype).masked_fill(future, _NEG_INF)
    elif mask in ("fill", "strict", "before"):
        Z = Z.masked_fill(future, _NEG_INF)
    P = torch.softmax(Z, dim=dim)
    if mask == "after":
        P = P.masked_fill(future, 0.0)
    if values.startswith("cleaned"):
        V = V.masked_fill(~V.isfinite(), 0.0)
    if values != "sealed":
        return (P @ V).nan_to_num(0.0) if values == "output" else P @ V
    return (P[..., :, :, None] * V[..., None, :, :]).masked_fill(future[:, :, None], 0.0).sum(-2)   # (..., T, d_v)


_sealed_reference = _planted_sealed

_SEALED_MISTAKES = variants(_planted_sealed, [
    ("as-on-the-page", {"mask": "add", "values": "product"},
     "a clean input gives the right rows, but one bad later key or value breaks every row. What do NaN + (−∞) and "
     "0 · NaN give?",
     "an added mask keeps a NaN score NaN, and a weight of 0 times a NaN value is NaN: overwrite the future "
     "scores, and keep the later values out of each row's sum."),
    ("zero-times-nan", {"values": "product"},
     "a bad later key no longer reaches the earlier rows; a bad later value does. What is a weight of 0 times NaN?",
     "P @ V multiplies the zero future weights with the later values, and 0 · NaN = 0 · inf = NaN: leave each "
     "row's future values out of its sum."),
    ("additive-mask", {"mask": "add"},
     "a bad later value no longer reaches the earlier rows; a NaN in a later key does. What is NaN + (−∞)?",
     "adding −∞ to a NaN score leaves it NaN, and softmax spreads it over the row: overwrite the future scores."),
    *[("cleaned-values", {"values": values},
       "the rows before a bad number are right. What does a row that really reads it get from its prefix alone?",
       "you replaced the bad numbers before attending, so the rows that read them come out finite; only the rows "
       "before a bad number are protected.") for values in ("cleaned", "cleaned-all")],
    ("nan-hidden", {"values": "output"}, "no NaN is left in your output, but is each row what its prefix alone gives?",
     "you zeroed the output's NaN: the rows a later NaN broke are now 0, and the rows that really read a bad value "
     "are hidden too."),
    ("no-mask", {"mask": "none", "values": "product"}, "does row i of your output change when a later token changes?",
     "your rows read every key, the future included: no causal mask is applied."),
    ("mask-after-softmax", {"mask": "after", "values": "product"},
     "do your weights still sum to 1 over the keys a row may read?",
     "you zeroed the future weights after softmax, so the rows no longer sum to 1: block the scores before it."),
])

# Slips of the head itself, named on the clean cases alone.
_HEAD_SLIPS = variants(_planted_sealed, [
    ("diagonal-blocked", {"mask": "strict"}, "may position i read its own key? Look at row 0.",
     "your mask also blocks the diagonal: position 0 has nothing left to read, and every row loses its own key."),
    ("own-key-left-out", {"mask": "before"}, "does row i read its own key? Compare row 1 with what its prefix "
     "alone gives.", "your row i reads the keys before position i only; its prefix, keys 0 … i, includes its own."),
    ("scale-T", {"scale": "T"},
     "your output is off on a clean input too: which width divides the scores, and why that one?",
     "you scaled the scores by √T; the scale is √d_k, the width of the vectors in each dot product."),
    ("scale-d_v", {"scale": "d_v"},
     "your output is off on a clean input too: which width divides the scores, and why that one?",
     "you scaled the scores by √d_v, the width of the values; the scale is √d_k, the width of q and k."),
    ("no-scale", {"scale": "none"}, "your weights are too sharp: what divides the scores before softmax?",
     "the scores QKᵀ must be divided by √d_k before softmax."),
    ("softmax-axis", {"dim": -2}, "along which axis do your weights sum to 1? Each query's row over the keys should.",
     "you took softmax over the query axis, so columns sum to 1; each query's row over the keys must."),
], where=lambda case: all(bool(t.isfinite().all()) for t in case))


@checker(mistakes=[*_SEALED_MISTAKES, *_HEAD_SLIPS])
def check_sealed_attention(fn) -> Verdict:
    """Check ``fn(Q, K, V) -> out``: Q, K (..., T, d_k), V (..., T, d_v) → (..., T, d_v), row i as its prefix
    alone gives it, whatever the later keys and values hold."""
    return judge(fn, _sealed_cases(), _sealed_reference, [*_SEALED_MISTAKES, *_HEAD_SLIPS],
                 success="row i is exactly what its prefix alone gives: a NaN or inf in a later key or value "
                         "never reaches it, and a row that does read one is broken as it would be alone "
                         "(one row, a batch, two leading axes, float32 and float64).")
