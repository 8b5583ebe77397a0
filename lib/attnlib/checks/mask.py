"""Exercise checkers for the mask chapter.

``check_packed_mask(fn)``: ``fn(doc_ids)`` with doc_ids (..., T) int64 (the document of each token of a packed
row) must return the boolean mask (..., T, T) in the convention of ``F.scaled_dot_product_attention``: True where
query i may attend to key j, that is j ≤ i and both tokens belong to one document.
``check_chunk_weights(fn)``: ``fn(Z, start)`` with the scaled scores Z (..., T_q, T_k) of the queries at positions
start … start + T_q − 1 against the keys at positions 0 … T_k − 1 (start + T_q ≤ T_k) must return the causal
weights P (..., T_q, T_k) in the dtype of Z.
``check_padded_causal_weights(fn)``: ``fn(Z, is_pad)`` with Z (B, T, T) and is_pad (B, T) (True = padding
token) must return P (B, T, T), in the dtype of Z, that reads only earlier, real keys; a row with no such key is
all zeros.

Every input is built afresh on each call, so a function that changes its inputs cannot change a later verdict,
and a function that changes them is told so.
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Group, Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_packed_mask", "check_chunk_weights", "check_padded_causal_weights"]

_NEG_INF = float("-inf")


def _blocked_after(T_q: int, T_k: int, offset: int) -> torch.Tensor:
    """(T_q, T_k) bool, True where key j lies after position offset + i (the future of query row i)."""
    return torch.arange(T_k)[None, :] > torch.arange(offset, offset + T_q)[:, None]


def _blocked_before(T_q: int, T_k: int, offset: int) -> torch.Tensor:
    """(T_q, T_k) bool, True where key j lies before position offset + i (the past of query row i)."""
    return torch.arange(T_k)[None, :] < torch.arange(offset, offset + T_q)[:, None]


UPCAST = Mistake(
    "upcast",
    "the weights are right, but they come back as {got} for {want} scores. Which of your tensors has a "
    "dtype other than the scores', and what does combining the two give?",
    more="the weights come back as {got} for {want} scores. Adding a mask or a constant tensor of another "
         "dtype to the scores promotes the sum (float16 plus float32 gives float32). Build the mask in the "
         "scores' own dtype, or block the scores with masked_fill, which keeps their dtype.")

def _dtype_look(verdict: Verdict, results) -> Verdict | None:
    """Name the float16 trap of weights promoted to another dtype (a fill value that overflows is named by the
    core, as :data:`FINITE`), from the cached result of the first float16 case."""
    half = [(case, got) for case, got, _ in results.outputs() if case[0].dtype == torch.float16]
    if verdict.mistake == "dtype" and half:
        (half_case, got), = half[:1]
        want = half_case[0].dtype
        if isinstance(got, torch.Tensor) and got.dtype != want:
            return named(UPCAST, got=str(got.dtype), want=str(want))
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


def _planted_chunk(Z, start, *, offset: str = "start", shift: int = 0, how: str = "add", dim: int = -1):
    """P with a planted slip; the defaults compute it. Row i stands for position ``offset`` + i (+ ``shift``):
    "start" (right), "zero" (row i taken for position i) or "last" (the queries taken for the last T_q
    positions); ``how`` is "add" (block before softmax), "none", "after" (zeroed after softmax), "multiply"
    (scores times a 0/1 mask) or "past" (the past blocked instead of the future)."""
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
        return softmax(Z.masked_fill(_blocked_before(T_q, T_k, first), _NEG_INF))
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
# Extend: a key-padding mask combined with the causal mask.

def _padded_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = _gen(406)
    T_, F_ = True, False
    return [
        # left padding (the first two queries have no real key), right padding, no padding; T = 5
        (torch.randn(3, 5, 5, generator=g) * 2,
         torch.tensor([[T_, T_, F_, F_, F_], [F_, F_, F_, T_, T_], [F_, F_, F_, F_, F_]])),
        # one pad at the start, one at the end; T = 6
        (torch.randn(2, 6, 6, generator=g) * 2,
         torch.tensor([[T_, F_, F_, F_, F_, F_], [F_, F_, F_, F_, F_, T_]])),
    ]


def _padded_half_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = _gen(407)
    T_, F_ = True, False
    return [((torch.randn(2, 4, 4, generator=g) * 2).half(),
             torch.tensor([[T_, F_, F_, F_], [F_, F_, T_, T_]]))]


def _planted_padded(Z: torch.Tensor, is_pad: torch.Tensor, *, causal: bool = True, pad: str = "keys",
                    inverted: bool = False, fill: float = _NEG_INF, empty_rows_zero: bool = True) -> torch.Tensor:
    """P with a planted slip; the defaults compute P itself. ``pad`` is where padding is blocked: "keys"
    (columns), "queries" (rows), "none", or "after" softmax; ``inverted`` reads True in is_pad as a real token."""
    T = Z.shape[-1]
    Z = Z.double()
    if inverted:
        is_pad = ~is_pad
    if pad == "after":
        return softmax(Z + causal_mask(T, dtype=Z.dtype)) * ~is_pad[:, None, :]
    allowed = torch.ones(Z.shape, dtype=torch.bool)                   # (B, T, T) True where i may read j
    if causal:
        allowed = allowed & causal_mask(T, dtype=torch.bool)
    if pad == "keys":
        allowed = allowed & ~is_pad[:, None, :]
    elif pad == "queries":
        allowed = allowed & ~is_pad[:, :, None]
    P = softmax(Z.masked_fill(~allowed, fill))
    return P.nan_to_num(0.0) if empty_rows_zero else P


def _padded_reference(Z, is_pad):
    allowed = causal_mask(Z.shape[-1], dtype=torch.bool) & ~is_pad[:, None, :]     # (B, T, T)
    P = torch.softmax(Z.double().masked_fill(~allowed, _NEG_INF), dim=-1)
    return torch.where(allowed.any(-1, keepdim=True), P, torch.zeros_like(P)).to(Z.dtype)


_INVERTED = ("in is_pad, what does True mark? Which tokens does your code block?",
             "you treated True in is_pad as 'may attend', so real tokens are blocked and padding is read. "
             "True marks a padding token, which must be blocked.")

_PADDED_MISTAKES = variants(_planted_padded, [
    ("nan-rows", {"empty_rows_zero": False},
     "some rows of your weights are NaN. Which queries have no key they may read, and what should their "
     "weights be?",
     "a query with no readable key (at the start of a left-padded sequence every key it may see is "
     "padding) comes out NaN: softmax of a row of minus infinity is 0 / 0. Find the rows with no allowed "
     "key and give them zero weights."),
    ("uniform-rows", {"fill": torch.finfo(torch.float32).min, "empty_rows_zero": False},
     "a query with nothing to read comes out with weight on every key, the future and the padding included. "
     "What did you block the scores with?",
     "a finite fill (a dtype's smallest number, -1e9) makes a fully blocked row uniform instead of NaN. "
     "Block with minus infinity and set the empty rows to zero."),
    ("padded-queries", {"pad": "queries"},
     "which axis of the score table stands for the keys? Padding must never be read, by any query.",
     "you blocked the padding on the query axis (rows) instead of the key axis (columns). A padding token "
     "must be blocked as a key, for every query of its sequence."),
    ("no-padding", {"pad": "none"},
     "do your weights still read padding tokens?",
     "only the causal mask is applied: key j must also be blocked where it is padding, for every query of "
     "its sequence."),
    ("no-causal", {"causal": False},
     "padding is blocked; is the future?",
     "combine both conditions before softmax: a key is blocked when it lies after the query or when it is "
     "padding."),
    ("inverted-padding", {"inverted": True}, *_INVERTED),
    ("inverted-padding", {"inverted": True, "empty_rows_zero": False}, *_INVERTED),
    ("after-softmax", {"pad": "after"},
     "do your rows still sum to 1?",
     "you zeroed the padded keys after softmax, so the rows no longer sum to 1. Block them in the scores, "
     "before softmax, together with the future."),
])


@checker(mistakes=[*_PADDED_MISTAKES, UPCAST])
def check_padded_causal_weights(fn) -> Verdict:
    """Check ``fn(Z, is_pad) -> P``: Z (B, T, T), is_pad (B, T) bool (True = padding) → P (B, T, T)."""
    half = _padded_half_cases()
    return judge(fn, [Group(_padded_cases(), 1e-5), Group(half, 3e-3)], _padded_reference, _PADDED_MISTAKES,
                 diagnose=_dtype_look,
                 success="each query reads only earlier real tokens, rows sum to 1, a query with nothing to "
                         "read gets zero weights, not NaN (left, right and no padding), and float16 scores "
                         "give float16 weights.")
