"""Exercise checkers for chapter 1.

``check_lookup_grad(fn)``: ``fn(ids, dX, vocab_size)``, ids (T,) or (B, T), dX (..., T, d_model) → dE, dX's dtype.
``check_shift_matrix(fn)``: ``fn(delta, d_model)`` → G_Δ (d_model, d_model) float32 with PE_t G_Δ = PE_(t+Δ).
``check_rotate_halves(fn)``: ``fn(x, theta)`` → x with each pair (f, f + d/2) of row t rotated by theta[t, f].
``check_embed_with_positions(fn)``: ``fn(ids, E, PE)`` → X₀ = E[ids] + PE[:T], the "find the bug" function fixed.
"""

from __future__ import annotations

import math

import torch

from ..position import rope_angles, sinusoidal_positions
from ._core import Group, Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_lookup_grad", "check_shift_matrix", "check_rotate_halves", "check_embed_with_positions"]


# --- extend: the gradient of a lookup: dE = one_hot(ids)ᵀ @ dX, repeated tokens add up ------------------------------

def _grad_cases() -> list[tuple]:
    g = _gen(1)
    return [
        (torch.tensor([3, 0, 5, 3, 1, 3]), torch.randn(6, 4, generator=g), 7),   # token 3 thrice; 2, 4, 6 absent
        (torch.tensor([[2, 6, 2, 0], [6, 1, 4, 6]]), torch.randn(2, 4, 7, generator=g), 7),   # a batch, square E
        (torch.tensor([1, 4, 1]), torch.randn(3, 3, generator=g, dtype=torch.float64), 5),   # float64
    ]


def _lookup_grad(ids, dX, vocab_size, *, reduce="sum", per_sentence=False, rows_from_ids=False):
    d = dX.shape[-1]
    vocab_size = int(ids.max()) + 1 if rows_from_ids else vocab_size
    if per_sentence and ids.dim() == 2:
        return torch.stack([_lookup_grad(i, x, vocab_size) for i, x in zip(ids, dX)])
    flat = ids.reshape(-1)
    dE = torch.zeros(vocab_size, d, dtype=dX.dtype).index_add(0, flat, dX.reshape(-1, d))
    if reduce == "mean":
        dE = dE / torch.bincount(flat, minlength=vocab_size).clamp(min=1).to(dX.dtype)[:, None]
    return dE


_GRAD_MISTAKES = [*variants(_lookup_grad, [
        ("mean", {"reduce": "mean"}, "if E[3] is read three times, how do the three gradients combine in yours?",
         "you averaged a repeated token's gradients; each position that reads row t adds its own term."),
        ("per-sentence", {"per_sentence": True}, "your result has one gradient per sentence: what shape has E's?",
         "E is one parameter shared by the batch: every sentence adds into one (vocab_size, d_model) table."),
        ("rows-from-ids", {"rows_from_ids": True},
         "your gradient stops at the largest ID in ids: how many rows does E have?",
         "the table has vocab_size rows; a token that never occurs keeps its row, with gradient zero."),
    ]),
    Mistake("per-position", "your result has one row per position: whose gradient is this, and of what shape?",
            lambda ids, dX, vocab_size: dX.clone(),
            more="the gradient of E has E's shape, (vocab_size, d_model): zero for tokens that never occur."),
    Mistake("transposed", "your result has the table's axes swapped: which axis of E is the vocabulary?",
            lambda ids, dX, vocab_size: _lookup_grad(ids, dX, vocab_size).T.contiguous(),
            more="E is (vocab_size, d_model), and so is its gradient: row t belongs to token t."),
]

GRAD_OVERWRITE = Mistake(
    "overwrite", "a repeated token kept the gradient of only one of its positions. Did every position count?",
    more="an assignment through an index writes each row once, and so does += through an index: only one position "
         "of a repeated token survives. Look for an operation that accumulates over repeated indices.")


def _kept_one_per_token(got, ids, dX, vocab_size) -> bool:
    """Whether each token's row of ``got`` is one of its positions' rows of dX (0 for an absent token)."""
    if not isinstance(got, torch.Tensor) or got.shape != (vocab_size, dX.shape[-1]):
        return False
    flat, rows = ids.reshape(-1), dX.reshape(-1, dX.shape[-1]).to(got.dtype)
    return all(any(torch.allclose(got[t], rows[i], atol=1e-5) for i in (flat == t).nonzero().flatten())
               if (flat == t).any() else not got[t].any() for t in range(vocab_size))


def _grad_diagnose(verdict: Verdict, results) -> Verdict | None:
    outputs = results.outputs()
    if verdict.mistake in ("values", "dtype") and any(c[0].unique().numel() < c[0].numel() for c, _, _ in outputs) \
            and all(e is None and _kept_one_per_token(got, *case) for case, got, e in outputs):
        return named(GRAD_OVERWRITE)
    return None


@checker(mistakes=[*_GRAD_MISTAKES, GRAD_OVERWRITE])
def check_lookup_grad(fn) -> Verdict:
    """``fn(ids, dX, vocab_size)``: ids (T,) or (B, T), dX (..., T, d_model) → dE (vocab_size, d_model)."""
    return judge(fn, _grad_cases(), _lookup_grad, _GRAD_MISTAKES, diagnose=_grad_diagnose,
                 success="every position added its gradient to its token's row: repeated tokens add up, "
                         "tokens that never occur get zero, and a batch gives one table.")


# --- extend: a shift of position is one matrix: G_Δ turns pair f (columns 2f, 2f+1) by Δω_f ---------------------------

def _pairs(c, s, d, *, block="rotation", layout="neighbours"):
    """The float64 (d, d) matrix with the block [[c, −s], [s, c]] for each pair, or a planted slip."""
    i = torch.arange(d // 2) * (2 if layout == "neighbours" else 1)
    j = i + (1 if layout == "neighbours" else d // 2)
    R = torch.zeros(d, d, dtype=torch.float64)
    R[i, i], R[i, j], R[j, i], R[j, j] = {"rotation": (c, -s, s, c), "no-minus": (c, s, s, c),
                                          "diagonal": (c, 0 * s, 0 * s, c)}[block]
    return R


def _shift(delta, d, *, turn=1, freq="2f", steps=None, **how):
    f = torch.arange(d // 2, dtype=torch.float64)
    omega = {"2f": 10000.0 ** (-2 * f / d), "f": 10000.0 ** (-f / d), "one": torch.ones_like(f)}[freq]
    angle = turn * (delta if steps is None else steps) * omega
    return _pairs(angle.cos(), angle.sin(), d, **how).float()


_SHIFT_CASES = [(1, 8), (5, 16), (12, 6)]   # Δ = 1 (where one step is the answer), a wider table, a longer shift

_SHIFT_MISTAKES = variants(_shift, [
    ("backwards", {"turn": -1},
     "PE_t times your matrix lands on PE_(t−Δ): which way does each pair turn when the row meets R's columns?",
     "each of your blocks is the transpose of the one that moves a pair forward; expand sin(a + b) and "
     "cos(a + b), remembering that column c of R makes entry c of the row."),
    ("one-frequency", {"freq": "one"}, "your first pair is right, the later ones not: do all clocks turn alike?",
     "pair f turns by Δ times its own frequency, not by Δ."),
    ("exponent-f", {"freq": "f"}, "your later pairs turn too fast: in 2f/d_model, is 2f a pair's index or a column's?",
     "the exponent uses the pair index f where the formula has the column index 2f."),
    ("no-minus", {"block": "no-minus"}, "your matrix changes a pair's length: is your block a rotation?",
     "your block has +sin in both corners; expand sin(a + b) and cos(a + b) and compare the signs."),
    ("diagonal", {"block": "diagonal"}, "your matrix only rescales columns: can a new sine be made without the cosine?",
     "sin(a + b) needs both sin a and cos a, so each new entry mixes its pair."),
    ("halves", {"layout": "halves"}, "the blocks are right but mix the wrong columns: which columns of PE hold pair f?",
     "you paired column f with column f + d_model/2; in PE pair f is columns 2f and 2f + 1."),
    ("one-step", {"steps": 1}, "right for Δ = 1, wrong for a longer shift: does your matrix depend on Δ?",
     "your matrix moves the position by one whatever Δ is; a shift by Δ turns pair f Δ times as far."),
])

WRONG_ANGLES = Mistake(
    "wrong-angles", "your matrix turns each pair, by other angles: how much does pair f's angle grow in Δ steps?",
    more="pair f turns by Δ times its frequency in PE, 10000^(−2f/d_model): compare with row Δ of the table.")


def _turns_pairs(R) -> bool:
    """Whether R turns each pair of columns 2f, 2f+1 by some angle and mixes nothing else."""
    if not isinstance(R, torch.Tensor) or R.dim() != 2 or R.shape[0] != R.shape[1] or R.shape[0] % 2:
        return False
    R = R.detach().cpu().double()
    c, s = R[0::2, 0::2].diagonal(), R[1::2, 0::2].diagonal()
    return torch.allclose(_pairs(c, s, len(R)), R, atol=1e-4) and torch.allclose(c * c + s * s, torch.ones_like(c),
                                                                                  atol=1e-3)


def _shift_diagnose(verdict: Verdict, results) -> Verdict | None:
    if verdict.mistake == "values" and all(e is None and _turns_pairs(got) for _, got, e in results.outputs()):
        return named(WRONG_ANGLES)
    return None


@checker(mistakes=[*_SHIFT_MISTAKES, WRONG_ANGLES])
def check_shift_matrix(fn) -> Verdict:
    """``fn(delta, d_model)`` → G_Δ, (d_model, d_model) float32, with PE_t G_Δ = PE_(t+Δ) for every position t."""
    return judge(fn, _SHIFT_CASES, _shift, _SHIFT_MISTAKES, diagnose=_shift_diagnose,
                 success="PE_t G_Δ = PE_(t+Δ): every pair turns by Δ times its own frequency, for every t.")


# --- extend: RoPE with the halves layout: coordinate f pairs with f + d/2 (GPT-NeoX, Llama in transformers) -----------

def _rotate_halves(x, theta, *, sign=1, layout="halves", angles="given", per_column="pair", rotate_second=True,
                   minus=True, swapped=False):
    T, d = x.shape[-2], x.shape[-1]
    if angles == "own":
        theta = rope_angles(T, d)
    theta = theta.to(x.dtype) if angles == "cast" else theta   # rounded before cos and sin see it
    cos, sin = theta.cos().to(x.dtype), sign * theta.sin().to(x.dtype)
    if layout == "neighbours":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x[..., :d // 2], x[..., d // 2:]
    if per_column == "interleaved":
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        return x * cos + torch.cat([-b, a], dim=-1) * sin
    first, second = a * cos - b * sin if minus else a * cos + b * sin, a * sin + b * cos if rotate_second else b
    return torch.cat([second, first] if swapped else [first, second], dim=-1)


def _rotate_cases() -> list[tuple]:
    g = _gen(2)
    return [
        (torch.randn(5, 8, generator=g), rope_angles(5, 8)),   # RoPE's own float64 angles, float32 x
        (torch.randn(2, 3, 4, 6, generator=g), (torch.rand(4, 3, generator=g) * 2 - 1) * math.pi),   # any angles
        (torch.randn(3, 4, generator=g, dtype=torch.float64),
         (torch.rand(3, 2, generator=g, dtype=torch.float64) * 2 - 1) * math.pi),
        (torch.randn(2, 4, 32, generator=g), rope_angles(4, 32, offset=3000)),   # far positions: large angles
        (torch.randn(3, 4, 8, generator=g, dtype=torch.float16), rope_angles(4, 8, offset=3000)),   # last: float16
    ]


_ROTATE_MISTAKES = [
    Mistake("identity", "your result is x unchanged: is anything computed from theta?", lambda x, th: x.clone(),
            more="in every row t, coordinates f and f + d/2 form a pair, to be turned by theta[t, f]."),
    *variants(_rotate_halves, [
        ("neighbours", {"layout": "neighbours"}, "which coordinates form a pair in this layout?",
         "you paired coordinate 2f with 2f+1, as the chapter's apply_rope does; here f pairs with f + d/2."),
        ("wrong-direction", {"sign": -1}, "your pairs turn the other way: where should (1, 0) go for a small angle?",
         "you rotate by −θ: a rotation by θ takes (a, b) to (a·cosθ − b·sinθ, a·sinθ + b·cosθ)."),
        ("ignores-theta", {"angles": "own"},
         "right with RoPE's own angles, wrong with others: do you use the theta given?",
         "you computed RoPE's angles yourself; the function must rotate by whatever angles arrive in theta."),
        ("interleaved-angles", {"per_column": "interleaved"},
         "some pairs get another pair's angle: which angle does f + d/2 get?",
         "you gave column c the angle of pair c // 2; here both columns f and f + d/2 turn by theta[t, f]."),
        ("low-precision-angles", {"angles": "cast"}, "right near the start, off at positions in the thousands: "
         "in which dtype are your angles when cos and sin see them?", "an angle of a few thousand radians keeps "
         "about three decimals in float32 and none in float16, so its cosine and sine come out wrong. Take cos and "
         "sin of theta as it arrives; only their results go to x's dtype."),
        ("halves-swapped", {"swapped": True},
         "your halves come back in the other order: which holds the new first coordinates?",
         "coordinate f of the result is pair f's new first coordinate, and f + d/2 its new second one."),
        ("no-minus", {"minus": False},
         "your pairs change their length: compare your sine terms' signs with a rotation's.",
         "a rotation by θ takes (a, b) to (a·cosθ − b·sinθ, a·sinθ + b·cosθ): one sine term is subtracted."),
        ("first-half-only", {"rotate_second": False},
         "your second half came back unchanged: what is a pair's new second coordinate?",
         "you wrote only the first coordinate of every pair; the second becomes a·sinθ + b·cosθ."),
    ]),
]

ANGLES_DTYPE = Mistake(
    "angles-dtype", "your result has the dtype of theta, not of x: which of the two should decide it?",
    more="theta arrives in float64, and multiplying x by its cosines promotes the result; convert the cosines and "
         "sines to x's dtype before they meet x.")
ROTATE_ANGLES = Mistake(
    "other-angles", "your pairs keep their lengths but turn by other angles: which theta entry is row t, pair f's?",
    more="pair f of row t must turn by theta[t, f]: theta's rows are the positions, its columns the pairs.")


def _pair_lengths(t):
    return t[..., :t.shape[-1] // 2].double() ** 2 + t[..., t.shape[-1] // 2:].double() ** 2


def _rotate_diagnose(verdict: Verdict, results) -> Verdict | None:
    outputs = results.outputs()
    if verdict.mistake == "values" and all(e is None and isinstance(got, torch.Tensor) and got.shape == case[0].shape
                                           and torch.allclose(_pair_lengths(got), _pair_lengths(case[0]),
                                                              8 * torch.finfo(got.dtype).eps, 1e-4)
                                           for case, got, e in outputs):
        return named(ROTATE_ANGLES)
    if verdict.mistake == "dtype" and any(x.dtype != theta.dtype and isinstance(got, torch.Tensor)
                                          and got.dtype == theta.dtype for (x, theta), got, _ in outputs):
        return named(ANGLES_DTYPE)
    return None


@checker(mistakes=[*_ROTATE_MISTAKES, ANGLES_DTYPE, ROTATE_ANGLES])
def check_rotate_halves(fn) -> Verdict:
    """``fn(x, theta)``: x (..., T, d), theta (T, d/2) → x with each pair (x[f], x[f + d/2]) rotated by theta."""
    cases = _rotate_cases()
    return judge(fn, [Group(cases[:-1], 1e-5), Group(cases[-1:], 1e-2)], _rotate_halves, _ROTATE_MISTAKES,
                 diagnose=_rotate_diagnose, success="every pair (f, f + d/2) is rotated by the angle it was given, in "
                 "x's dtype, near the start and thousands of positions on, and x is left as it came.")


# --- find the bug: X₀ = E[ids] + PE[positions], written with the positions counted through the whole batch ------------

def _positions_cases() -> list[tuple]:
    g = _gen(3)
    E, PE = torch.randn(9, 6, generator=g), sinusoidal_positions(16, 6)
    E64 = torch.randn(9, 4, generator=g, dtype=torch.float64)
    batch = torch.randint(0, 9, (3, 5), generator=g)
    PE64 = torch.randn(8, 4, generator=g, dtype=torch.float64)        # a learned table, not the sinusoidal one
    return [
        (torch.tensor([2, 7, 1, 2, 8, 0]), E, PE),                    # one sentence (T,): the bug passes
        (torch.tensor([[2, 7, 1, 2, 8, 0]]), E, PE),                  # a batch of one: the bug passes too
        (batch, E, PE),                                               # a batch of three: the bug runs, wrongly
        (torch.tensor([[1, 3, 3, 5], [0, 8, 2, 2]]), E64, PE64),      # float64 tables, as from numpy
    ]


def _positions_reference(ids, E, PE, *, positions="each-sentence"):
    T = ids.shape[-1]
    rows = {"each-sentence": lambda: PE[:T],
        "flat": lambda: PE[torch.arange(ids.numel()).view(ids.shape)],
        "first-axis": lambda: PE[: ids.shape[0]],
        "by-id": lambda: PE[ids],
        "from-one": lambda: PE[1: T + 1],
        "reversed": lambda: PE[:T].flip(0),
        "float": lambda: PE[torch.arange(T, dtype=torch.float32)],
        "own": lambda: sinusoidal_positions(T, E.shape[-1]),
        "second-axis": lambda: PE[: ids.shape[1]],
        "none": lambda: 0,
    }[positions]
    return E[ids] + rows()


_POSITIONS_MISTAKES = variants(_positions_reference, [
    ("unchanged", {"positions": "flat"},
     "this is still the function as given: right for one sentence and a batch of one, not for a batch of three. "
     "Which position does the second sentence's first token get?",
     "the positions are counted through the whole batch, so sentence b starts at b·T. A token's position is its "
     "index along the sentence's axis, the same in every sentence."),
    ("first-axis", {"positions": "first-axis"},
     "in a batch of one every token gets the same position vector: what does your T count with a batch axis?",
     "your T is the size of ids' first axis, for a batch the number of sentences, not their length."),
    ("second-axis", {"positions": "second-axis"}, "a single sentence has no second axis: which axis counts positions?",
     "the positions run along the last axis of ids, for one sentence and a batch alike."),
    ("own-table", {"positions": "own"}, "right with the sinusoidal table, wrong with a learned one: do you use PE?",
     "you built a sinusoidal table of your own; PE may be any table, a learned one for example."),
    ("by-id", {"positions": "by-id"}, "two equal IDs at different positions got the same row of PE: what indexes PE?",
     "PE is indexed by position: position t gets row t of PE whatever token stands there."),
    ("from-one", {"positions": "from-one"}, "each token got its right neighbour's position: where do sentences start?",
     "your positions start at 1; the first token of a sentence is at position 0."),
    ("reversed-positions", {"positions": "reversed"}, "the last token got position 0: which way do your positions "
     "count?", "your positions run from T − 1 down to 0; the first token of a sentence is at position 0."),
    ("float", {"positions": "float"}, "your positions cannot pick rows of a table: what dtype must an index have?",
     "your positions are a float tensor; tensors that index rows must be integer (int64)."),
    ("no-positions", {"positions": "none"}, "your result is the token embeddings alone: where did the positions go?",
     "the rows of PE for the tokens' positions must be added to the token embeddings."),
])


@checker(mistakes=_POSITIONS_MISTAKES)
def check_embed_with_positions(fn) -> Verdict:
    """``fn(ids, E, PE)``: ids (T,) or (B, T), E (vocab_size, d_model), PE (max_T, d_model) → (..., T, d_model)."""
    return judge(fn, _positions_cases(), _positions_reference, _POSITIONS_MISTAKES,
                 success="every sentence counts its positions from 0, in a batch of one or three, any table.")
