"""Exercise checkers for chapter 1: the gradient of a lookup, a shift of position, RoPE in the halves layout,
positions in a batch.

``check_lookup_grad(fn)``: ``fn(ids, dX, vocab_size)``, ids (T,) or (B, T), dX (..., T, d_model) → dE
(vocab_size, d_model) in dX's dtype.
``check_shift_matrix(fn)``: ``fn(delta, d_model)`` → G_Δ (d_model, d_model) float32 with PE_t G_Δ = PE_(t+Δ).
``check_rotate_halves(fn)``: ``fn(x, theta)``, x (..., T, d), theta (T, d/2) → x with each pair (f, f + d/2) of row
t rotated by theta[t, f], in x's dtype.
``check_embed_with_positions(fn)``: ``fn(ids, E, PE)`` → X₀ = E[ids] + PE[:T], the "find the bug" function fixed.
"""

from __future__ import annotations

import math

import torch

from ..position import rope_angles, sinusoidal_positions
from ._core import Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_lookup_grad", "check_shift_matrix", "check_rotate_halves", "check_embed_with_positions"]


# --- extend: the gradient of a lookup ---------------------------------------------------------------------------------
# X = E[ids] = one_hot(ids) @ E, so dE = one_hot(ids)ᵀ @ dX: every position adds its row of dX to the row of its token,
# and a token that occurs several times gets the sum.

def _grad_cases() -> list[tuple]:
    g = _gen(1)
    return [
        # token 3 three times; vocab_size 7 ≠ d_model 4; tokens 2, 4 and 6 never occur (their rows stay 0)
        (torch.tensor([3, 0, 5, 3, 1, 3]), torch.randn(6, 4, generator=g), 7),
        # a batch: token 6 in both sentences, token 2 twice in one; a square table (vocab_size = d_model = 7),
        # where a transposed answer has the right shape
        (torch.tensor([[2, 6, 2, 0], [6, 1, 4, 6]]), torch.randn(2, 4, 7, generator=g), 7),
        # a float64 gradient (as from numpy): the result is float64 too
        (torch.tensor([1, 4, 1]), torch.randn(3, 3, generator=g, dtype=torch.float64), 5),
    ]


def _lookup_grad(ids, dX, vocab_size, *, reduce="sum", per_sentence=False, rows_from_ids=False):
    """dE, or a planted slip: ``rows_from_ids`` counts the rows up to the largest ID that occurs."""
    d = dX.shape[-1]
    vocab_size = int(ids.max()) + 1 if rows_from_ids else vocab_size
    if per_sentence and ids.dim() == 2:
        return torch.stack([_lookup_grad(i, x, vocab_size) for i, x in zip(ids, dX)])
    flat = ids.reshape(-1)
    dE = torch.zeros(vocab_size, d, dtype=dX.dtype).index_add(0, flat, dX.reshape(-1, d))
    if reduce == "mean":
        counts = torch.bincount(flat, minlength=vocab_size).clamp(min=1).to(dX.dtype)
        dE = dE / counts[:, None]
    return dE


_GRAD_TABLE = variants(_lookup_grad, [
    ("mean", {"reduce": "mean"},
     "a token that stands at several positions got less than all of their gradients together. If E[3] is "
     "read three times, how do three small changes of the loss through that one row combine?",
     "you averaged the gradients of a repeated token. Each position that reads row t adds its own term to the "
     "loss's dependence on that row, so the gradients of all those positions add up; nothing divides them."),
    ("per-sentence", {"per_sentence": True},
     "your result has one gradient per sentence of the batch. The table is one parameter shared by every "
     "sentence: what shape must its gradient have?",
     "you kept a separate gradient for each sentence. The same table E serves the whole batch, so the gradient "
     "of E is a single (vocab_size, d_model) table: the contributions of every sentence add up in it."),
    ("rows-from-ids", {"rows_from_ids": True},
     "your gradient stops at the largest token ID in ids: how many rows does the table E have, and does "
     "every one of them occur in ids?",
     "you counted the rows from the IDs that occur, up to the largest one. The table has vocab_size rows, "
     "and a token that never occurs still has its row, with gradient zero: the number of rows comes from "
     "vocab_size, not from ids."),
])

_GRAD_MISTAKES = [
    *_GRAD_TABLE,
    Mistake("per-position",
            "your result has one row per position. A gradient has the shape of the parameter it belongs to: "
            "which parameter is this the gradient of, and how many rows does it have?",
            lambda ids, dX, vocab_size: dX.clone(),
            more="you returned a gradient per position, the shape of X. The gradient of the table E has E's "
                 "shape, (vocab_size, d_model): one row per vocabulary entry, zero for tokens that never "
                 "occur."),
    Mistake("transposed",
            "your result is the table's gradient with its axes swapped: which axis of E is the vocabulary?",
            lambda ids, dX, vocab_size: _lookup_grad(ids, dX, vocab_size).T.contiguous(),
            more="you returned a (d_model, vocab_size) matrix. E is (vocab_size, d_model), and so is its "
                 "gradient: row t belongs to token t. Which factor of your product should be transposed?"),
]

GRAD_OVERWRITE = Mistake(
    "overwrite",
    "a token that stands at several positions kept the gradient of only one of them. Did every position of a "
    "repeated token count?",
    more="an assignment through an index writes each row once, and so does += through an index: for a token "
         "that occurs several times only one position's gradient survives. The positions of a repeated token "
         "must add up: look for an operation that accumulates over repeated indices.")


def _kept_one_per_token(got, ids, dX, vocab_size) -> bool:
    """Whether each token's row of ``got`` is one of its positions' rows of dX, not their sum."""
    want = _lookup_grad(ids, dX, vocab_size)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    flat, rows = ids.reshape(-1), dX.reshape(-1, dX.shape[-1]).to(got.dtype)
    for token in range(vocab_size):
        mine = (flat == token).nonzero().flatten()
        if len(mine) == 0:
            if not torch.allclose(got[token], torch.zeros_like(got[token])):
                return False
        elif not any(torch.allclose(got[token], rows[i], atol=1e-5) for i in mine):
            return False
    return True


def _grad_diagnose(verdict: Verdict, results) -> Verdict | None:
    if verdict.mistake not in ("values", "dtype"):
        return None
    outputs = results.outputs()
    if any(case[0].unique().numel() < case[0].numel() for case, _, _ in outputs) and all(
            e is None and _kept_one_per_token(got, *case) for case, got, e in outputs):
        return named(GRAD_OVERWRITE)
    return None


@checker(mistakes=[*_GRAD_MISTAKES, GRAD_OVERWRITE])
def check_lookup_grad(fn) -> Verdict:
    """``fn(ids, dX, vocab_size)``: ids (T,) or (B, T), dX (..., T, d_model) → dE (vocab_size, d_model)."""
    cases = _grad_cases()
    return judge(fn, cases, _lookup_grad, _GRAD_MISTAKES,
                 success="every position added its gradient to its token's row: repeated tokens add up, "
                         "tokens that never occur get zero, and a batch gives one table.",
                 diagnose=_grad_diagnose)


# --- extend: a shift of position is one matrix ------------------------------------------------------------------------
# Pair f of PE_t is (sin tω_f, cos tω_f); moving t by Δ turns it by Δω_f, so PE_{t+Δ} = PE_t G_Δ: the block [[cos Δω_f,
# −sin Δω_f], [sin Δω_f, cos Δω_f]] on columns 2f, 2f+1.

def _pairs(c, s, d, *, block="rotation", layout="neighbours"):
    """The float64 (d, d) matrix with the block [[c, −s], [s, c]] for each pair, or a planted slip."""
    i = torch.arange(d // 2) * (2 if layout == "neighbours" else 1)
    j = i + (1 if layout == "neighbours" else d // 2)
    R = torch.zeros(d, d, dtype=torch.float64)
    R[i, i], R[i, j], R[j, i], R[j, j] = {"rotation": (c, -s, s, c), "no-minus": (c, s, s, c),
                                          "diagonal": (c, 0 * s, 0 * s, c)}[block]
    return R


def _shift(delta, d, *, turn=1, freq="2f", steps=None, **how):
    """G_Δ (float32), or a planted slip; ``how`` goes to :func:`_pairs`."""
    f = torch.arange(d // 2, dtype=torch.float64)
    omega = {"2f": 10000.0 ** (-2 * f / d), "f": 10000.0 ** (-f / d), "one": torch.ones_like(f)}[freq]
    angle = turn * (delta if steps is None else steps) * omega
    return _pairs(angle.cos(), angle.sin(), d, **how).float()


_SHIFT_CASES = [(1, 8), (5, 16), (12, 6)]   # Δ = 1 (where one step is the answer), a wider table, a longer shift

_SHIFT_MISTAKES = variants(_shift, [
    ("backwards", {"turn": -1},
     "PE_t times your matrix lands on PE_(t−Δ): the shift goes the wrong way. In PE_t G the row meets the "
     "columns of R: which way does each pair turn?",
     "your matrix shifts by −Δ: each block is the transpose of the one that moves a pair forward. Expand "
     "sin(a + b) and cos(a + b); with row vectors, column c of R holds the weights that make entry c."),
    ("one-frequency", {"freq": "one"},
     "your first pair is right, the later pairs are not. Does every clock of PE advance by the same angle?",
     "you turned every pair by the angle Δ. Pair f turns with its own frequency: by Δ times that frequency."),
    ("exponent-f", {"freq": "f"},
     "your later pairs turn too fast. In the exponent 2f/d_model, is 2f the index of the pair or of its column?",
     "the exponent uses the pair index f where the formula has the column index 2f."),
    ("no-minus", {"block": "no-minus"},
     "your matrix changes the length of a pair (sin, cos), which is 1 at every position: is your block a "
     "rotation?",
     "your block has +sin in both corners; expand sin(a + b) and cos(a + b) and compare the signs."),
    ("diagonal", {"block": "diagonal"},
     "your matrix only rescales each column. Can the new sine of a pair be made without the pair's cosine?",
     "you kept only the cosines: sin(a + b) needs both sin a and cos a, so each new entry mixes its pair."),
    ("halves", {"layout": "halves"},
     "the blocks are right but mix the wrong columns: which columns of PE hold the sine and cosine of pair f?",
     "you paired column f with column f + d_model/2. In PE pair f is columns 2f and 2f + 1."),
    ("one-step", {"steps": 1},
     "right for Δ = 1, wrong for a longer shift: does your matrix depend on Δ?",
     "your matrix moves the position by one whatever Δ is; a shift by Δ turns pair f Δ times as far."),
])

WRONG_ANGLES = Mistake(
    "wrong-angles",
    "your matrix turns each pair of neighbouring columns, as it should, but by other angles. By how much does "
    "the angle of pair f grow when t grows by Δ?",
    more="each block turns the right pair, by the wrong angle: pair f must turn by Δ times its frequency in PE, "
         "10000^(−2f/d_model). Compare your angles with those of row Δ of the table.")


def _shift_diagnose(verdict: Verdict, results) -> Verdict | None:
    """Every result turns each pair 2f, 2f+1 by some angle and mixes nothing else: only the angles are off."""
    def turns_pairs(R) -> bool:
        if not isinstance(R, torch.Tensor) or R.dim() != 2 or R.shape[0] != R.shape[1] or R.shape[0] % 2:
            return False
        R = R.detach().cpu().double()
        c, s = R[0::2, 0::2].diagonal(), R[1::2, 0::2].diagonal()
        return torch.allclose(_pairs(c, s, len(R)), R, atol=1e-4) and torch.allclose(c * c + s * s,
                                                                                      torch.ones_like(c), atol=1e-3)
    outputs = results.outputs()
    if verdict.mistake == "values" and all(e is None and turns_pairs(got) for _, got, e in outputs):
        return named(WRONG_ANGLES)
    return None


@checker(mistakes=[*_SHIFT_MISTAKES, WRONG_ANGLES])
def check_shift_matrix(fn) -> Verdict:
    """``fn(delta, d_model)`` → G_Δ, (d_model, d_model) float32, with PE_t G_Δ = PE_(t+Δ) for every position t."""
    return judge(fn, _SHIFT_CASES, _shift, _SHIFT_MISTAKES, diagnose=_shift_diagnose,
                 success="PE_t G_Δ = PE_(t+Δ): every pair is turned by Δ times its own frequency, the same "
                         "matrix for every position t.")


# --- extend: RoPE with the halves layout ------------------------------------------------------------------------------
# Coordinate f is paired with f + d/2 (as GPT-NeoX and Llama in Hugging Face's transformers do) and the pair is rotated
# by theta[t, f].

def _rotate_halves(x, theta, *, sign=1, layout="halves", angles="given", per_column="pair", rotate_second=True,
                   minus=True, swapped=False):
    """x with each pair (f, f + d/2) rotated, or a planted slip; the defaults compute the answer."""
    T, d = x.shape[-2], x.shape[-1]
    if angles == "own":
        theta = rope_angles(T, d)
    cos, sin = theta.cos().to(x.dtype), sign * theta.sin().to(x.dtype)
    h = d // 2
    if layout == "neighbours":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x[..., :h], x[..., h:]
    if per_column == "interleaved":
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        return x * cos + torch.cat([-b, a], dim=-1) * sin
    first, second = a * cos - b * sin if minus else a * cos + b * sin, a * sin + b * cos if rotate_second else b
    return torch.cat([second, first] if swapped else [first, second], dim=-1)


def _rotate_cases() -> list[tuple]:
    g = _gen(2)
    return [
        # RoPE's own angles, which rope_angles gives in float64; x is float32, so is the result
        (torch.randn(5, 8, generator=g), rope_angles(5, 8)),
        # a batch of heads, (B, h, T, d), and angles from no schedule at all
        (torch.randn(2, 3, 4, 6, generator=g), (torch.rand(4, 3, generator=g) * 2 - 1) * math.pi),
        # float64 throughout
        (torch.randn(3, 4, generator=g, dtype=torch.float64),
         (torch.rand(3, 2, generator=g, dtype=torch.float64) * 2 - 1) * math.pi),
    ]


_ROTATE_MISTAKES = [
    Mistake("identity", "your result is x unchanged: no pair was rotated. Is anything computed from theta?",
            lambda x, th: x.clone(),
            more="the function returned x as it came. In every row t, coordinates f and f + d/2 form a pair, "
                 "and each pair must be turned by the angle theta[t, f]."),
    *variants(_rotate_halves, [
        ("neighbours", {"layout": "neighbours"},
         "you rotated the right angles, but which coordinates form a pair in this layout?",
         "you paired neighbours, coordinate 2f with 2f+1, as the chapter's apply_rope does. In the halves "
         "layout coordinate f is paired with coordinate f + d/2."),
        ("wrong-direction", {"sign": -1},
         "your pairs turn the other way. Take x = (1, 0) as a pair and a small positive angle: which way should "
         "it move?",
         "you rotate by −θ: the sine terms have the wrong signs. A rotation by θ takes (a, b) to "
         "(a·cosθ − b·sinθ, a·sinθ + b·cosθ)."),
        ("ignores-theta", {"angles": "own"},
         "right with RoPE's own angles, wrong with the arbitrary ones: does your function use the theta it "
         "is given?",
         "you computed RoPE's angles yourself instead of using theta. The two agree for RoPE's own angles, "
         "but the function must rotate by whatever angles arrive in theta."),
        ("interleaved-angles", {"per_column": "interleaved"},
         "the pairs are right but some get another pair's angle: which angle does coordinate f + d/2 get?",
         "you gave column c the angle of pair c // 2, the chapter's layout, while pairing f with f + d/2. "
         "In the halves layout both coordinates of pair f, columns f and f + d/2, turn by theta[t, f]."),
        ("halves-swapped", {"swapped": True},
         "each pair is rotated by its angle, but your halves come back in the other order: which half of the "
         "result holds the new first coordinate of each pair?",
         "you put the new second coordinates, a·sinθ + b·cosθ, in the first half. Coordinate f of the result "
         "is the new first coordinate of pair f, and coordinate f + d/2 its new second one."),
        ("no-minus", {"minus": False},
         "your pairs change their length, so they are not rotated: compare the signs of your two sine terms "
         "with those of a rotation.",
         "both of your sine terms are added. A rotation by θ takes (a, b) to (a·cosθ − b·sinθ, "
         "a·sinθ + b·cosθ): one of the two sine terms is subtracted."),
        ("first-half-only", {"rotate_second": False},
         "the second half of your vector came back unchanged. A rotation moves both coordinates of a pair: "
         "what is the new second coordinate?",
         "you wrote only the first coordinate of every pair. The second one becomes a·sinθ + b·cosθ."),
    ]),
]

ANGLES_DTYPE = Mistake(
    "angles-dtype",
    "your result has the dtype of theta, not of x. Which of the two should decide the dtype of a rotated x?",
    more="theta arrives in float64 (rope_angles keeps far positions exact), and multiplying x by its cosines "
         "promotes the result to float64. Convert the cosines and sines to x's dtype before they meet x.")


ROTATE_ANGLES = Mistake(
    "other-angles",
    "every pair (f, f + d/2) of your result keeps its length, as under a rotation, but turns by another angle "
    "than the one it was given: which entry of theta belongs to row t and pair f?",
    more="your pairs are the right ones and are rotated, but by the wrong angles: pair f of row t must turn by "
         "theta[t, f]. Check how you read theta: its rows are the positions, its columns the pairs.")


def _rotate_diagnose(verdict: Verdict, results) -> Verdict | None:
    """Wrong values whose pairs (f, f + d/2) all keep their lengths: rotated, by other angles."""
    outputs = results.outputs()
    lengths = lambda t: t[..., : t.shape[-1] // 2].double() ** 2 + t[..., t.shape[-1] // 2:].double() ** 2  # noqa: E731
    if verdict.mistake == "values" and all(e is None and isinstance(got, torch.Tensor) and got.shape == case[0].shape
                                           and torch.allclose(lengths(got), lengths(case[0]), atol=1e-4)
                                           for case, got, e in outputs):
        return named(ROTATE_ANGLES)
    if verdict.mistake != "dtype":
        return None
    for (x, theta), got, _ in outputs:
        if x.dtype != theta.dtype and isinstance(got, torch.Tensor) and got.dtype == theta.dtype:
            return named(ANGLES_DTYPE)
    return None


@checker(mistakes=[*_ROTATE_MISTAKES, ANGLES_DTYPE, ROTATE_ANGLES])
def check_rotate_halves(fn) -> Verdict:
    """``fn(x, theta)``: x (..., T, d), theta (T, d/2) → x with each pair (x[f], x[f + d/2]) rotated by theta."""
    cases = _rotate_cases()
    return judge(fn, cases, _rotate_halves, _ROTATE_MISTAKES,
                 success="every pair (f, f + d/2) is rotated by the angle it was given, in x's dtype, and x "
                         "is left as it came.",
                 diagnose=_rotate_diagnose)


# --- find the bug: X₀ = E[ids] + PE[positions], written with the positions counted through the whole batch ------------

def _positions_cases() -> list[tuple]:
    g = _gen(3)
    vocab_size, d_model, max_T = 9, 6, 16
    E = torch.randn(vocab_size, d_model, generator=g)
    PE = sinusoidal_positions(max_T, d_model)
    E64 = torch.randn(vocab_size, 4, generator=g, dtype=torch.float64)
    batch = torch.randint(0, vocab_size, (3, 5), generator=g)
    PE64 = torch.randn(8, 4, generator=g, dtype=torch.float64)        # a learned table, not the sinusoidal one
    return [
        (torch.tensor([2, 7, 1, 2, 8, 0]), E, PE),                    # one sentence (T,): the bug passes
        (torch.tensor([[2, 7, 1, 2, 8, 0]]), E, PE),                  # a batch of one: the bug passes too
        (batch, E, PE),                                               # a batch of three: the bug runs, wrongly
        (torch.tensor([[1, 3, 3, 5], [0, 8, 2, 2]]), E64, PE64),      # float64 tables, as from numpy
    ]


def _positions_reference(ids, E, PE, *, positions="each-sentence"):
    """X₀ = E[ids] + the rows of PE at the positions, or a planted slip of ``positions``."""
    T = ids.shape[-1]
    rows = {
        "each-sentence": lambda: PE[:T],
        "flat": lambda: PE[torch.arange(ids.numel()).view(ids.shape)],
        "first-axis": lambda: PE[: ids.shape[0]],
        "by-id": lambda: PE[ids],
        "from-one": lambda: PE[1: T + 1],
        "float": lambda: PE[torch.arange(T, dtype=torch.float32)],
        "own": lambda: sinusoidal_positions(T, E.shape[-1]),
        "second-axis": lambda: PE[: ids.shape[1]],
        "none": lambda: 0,
    }[positions]
    return E[ids] + rows()


_POSITIONS_MISTAKES = variants(_positions_reference, [
    ("unchanged", {"positions": "flat"},
     "this is still the function as given. It is right for one sentence and for a batch of one, but not "
     "for a batch of three sentences: which position does the first token of the second sentence get?",
     "the positions are counted through the whole batch, so sentence b starts at position b·T and goes on "
     "from there. Every sentence starts at position 0: a token's position is its index along the axis of "
     "the sentence, the same in every sentence of the batch."),
    ("first-axis", {"positions": "first-axis"},
     "right for one sentence, but in a batch of one every token gets the same position vector. What does "
     "your T count when ids has a batch axis?",
     "your T is the size of the first axis of ids, which for a batch is the number of sentences, not their "
     "length: a batch of one then gets only the vector of position 0, added to every token."),
    ("second-axis", {"positions": "second-axis"},
     "right for a batch, but a single sentence, of shape (T,), has no second axis: which axis of ids counts "
     "the positions, whatever axes come before it?",
     "you read T from the second axis of ids, which a single sentence does not have. The positions run along "
     "the last axis of ids, for one sentence and for a batch alike."),
    ("own-table", {"positions": "own"},
     "right with the sinusoidal table, wrong with a learned one: does your function use the PE it is given?",
     "you built a sinusoidal table of your own instead of reading the rows of PE. The two agree only when PE "
     "is the sinusoidal table; PE may be any table, a learned one for example."),
    ("by-id", {"positions": "by-id"},
     "two tokens of the same ID at different positions got the same position vector: what indexes the "
     "position table, the token or its place in the sentence?",
     "you looked the position table up with the token IDs. PE is indexed by position: position t gets "
     "row t of PE whatever token stands there."),
    ("from-one", {"positions": "from-one"},
     "every token got the position vector of its right-hand neighbour: at which position does a sentence "
     "start?",
     "your positions start at 1. The first token of a sentence is at position 0, so it gets row 0 of PE."),
    ("float", {"positions": "float"},
     "the positions you built cannot pick rows of a table: what dtype must an index tensor have?",
     "your positions are a float tensor; tensors that index rows must be integer (int64) tensors. Build "
     "the positions with an integer dtype."),
    ("no-positions", {"positions": "none"},
     "your result is the token embeddings alone: where did the positions go?",
     "your result has no positions in it, only the token embeddings; the rows of PE for the positions of "
     "the tokens must be added."),
])


@checker(mistakes=_POSITIONS_MISTAKES)
def check_embed_with_positions(fn) -> Verdict:
    """``fn(ids, E, PE)``: ids (T,) or (B, T), E (vocab_size, d_model), PE (max_T, d_model) → (..., T, d_model)."""
    return judge(fn, _positions_cases(), _positions_reference, _POSITIONS_MISTAKES,
                 success="every sentence counts its positions from 0: one sentence, a batch of one, a batch "
                         "of three, and float64 tables.")
