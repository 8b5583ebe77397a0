"""Exercise checkers for chapter 1: the gradient of a lookup, sinusoidal positions, RoPE in the halves layout,
positions in a batch.

``check_lookup_grad(fn)``: ``fn(ids, dX, vocab_size)`` with ids (T,) or (B, T) and dX (..., T, d_model), the
gradient of the loss with respect to X = E[ids] → the gradient with respect to the table E, (vocab_size, d_model),
in dX's dtype.
``check_sinusoidal(fn)``: ``fn(positions, d_model)`` with int64 positions (T,) or (B, T) → the sinusoidal
vectors of those positions, (..., T, d_model), float32.
``check_rotate_halves(fn)``: ``fn(x, theta)`` with x (..., T, d) and theta (T, d/2) → x with coordinate f of
row t paired with coordinate f + d/2 and the pair rotated by theta[t, f]; the result has x's dtype.
``check_embed_with_positions(fn)``: ``fn(ids, E, PE)`` is the "find the bug" function, repaired: ids (T,) or
(B, T), E (vocab_size, d_model), PE (max_T, d_model) → X₀ = E[ids] + PE[:T], shape (..., T, d_model).

Every call gets its own copy of the inputs, and the inputs are compared with the originals after it, so a
function that changes them is named and cannot change a later verdict.
"""

from __future__ import annotations

import math

import torch

from ..position import rope_angles, sinusoidal_positions
from ._core import Mistake, Verdict, _gen, checker, judge, named, variants

__all__ = ["check_lookup_grad", "check_sinusoidal", "check_rotate_halves", "check_embed_with_positions"]


# ------------------------------------------------------------------------------------------------
# Extend: the gradient of a lookup. X = E[ids] = one_hot(ids) @ E, so dE = one_hot(ids)ᵀ @ dX: every position
# adds its row of dX to the row of its token, and a token that occurs several times gets the sum.

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


def _lookup_grad(ids, dX, vocab_size, *, reduce="sum", per_sentence=False):
    """dE, or a planted slip: ``reduce`` "mean" averages a repeated token's rows; ``per_sentence`` keeps one
    gradient per sentence of a batch instead of adding them."""
    d = dX.shape[-1]
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
    """Whether ``got`` is the gradient with each token's row taken from one of its positions, not their sum
    (what an indexed assignment gives, whatever order it writes in)."""
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


# ------------------------------------------------------------------------------------------------
# Sinusoidal vectors of given positions: PE[t, 2f] = sin(t / 10000^(2f/d_model)), PE[t, 2f+1] = cos(same).

def _sinusoid(positions, d, *, swap=False, freq_step=2, sign=-1, layout="pairs", own_positions=False):
    """The sinusoidal vectors of ``positions`` (float32), with a planted slip; the defaults compute them.
    ``layout`` "halves" puts every sine in the first half and every cosine in the second; ``own_positions``
    uses 0 … T-1 instead of the positions given."""
    if own_positions:
        positions = torch.arange(positions.shape[-1]).expand(positions.shape)
    t = positions.to(torch.float32)[..., None]
    two_f = torch.arange(0, d, 2, dtype=torch.float32)
    angle = t * 10000.0 ** (sign * (two_f if freq_step == 2 else two_f / 2) / d)
    first, second = (angle.cos(), angle.sin()) if swap else (angle.sin(), angle.cos())
    if layout == "halves":
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).flatten(-2)


def _sinusoid_reference(positions, d):
    """The rows of the library's table at ``positions``."""
    return sinusoidal_positions(int(positions.max()) + 1, d)[positions]


def _sinusoid_cases() -> list[tuple]:
    return [
        (torch.arange(7), 8),                                    # the plain table, positions 0 … 6
        (torch.arange(5, 9), 16),                                # a continuation: 4 tokens after 5 others
        (torch.tensor([[0, 1, 2, 3, 4], [0, 0, 1, 2, 3]]), 6),   # a batch: the second sentence padded on the left
    ]


_SINUSOID_MISTAKES = variants(_sinusoid, [
    ("sin-cos-swapped", {"swap": True},
     "at position 0 every sine is 0 and every cosine is 1: which columns of your vector hold the zeros?",
     "sin and cos are swapped: the even columns 2f hold the sine, the odd columns 2f+1 the cosine."),
    ("exponent-f", {"freq_step": 1},
     "your later columns turn too slowly. In the exponent 2f/d_model, what is 2f: the index of the pair, or "
     "the index of its first column?",
     "the exponent uses the pair index f where the formula has the column index 2f: the frequencies of the "
     "later pairs come out too high a power of 10000."),
    ("exponent-sign", {"sign": 1},
     "your frequencies grow from one pair to the next; in the formula the position is divided by a power of "
     "10000 that grows. Does your angle shrink or grow along the row?",
     "the sign of the exponent is flipped: the position is multiplied by 10000^(2f/d_model) instead of "
     "divided by it, so the later pairs spin fastest instead of slowest."),
    ("halves", {"layout": "halves"},
     "the numbers are right but not in their columns: where does the cosine of pair f stand in your vector?",
     "you put every sine in the first half and every cosine in the second. In this course the sine and the "
     "cosine of pair f are neighbours: columns 2f and 2f+1."),
    ("ignores-positions", {"own_positions": True},
     "right for positions 0, 1, 2, …, but not for a continuation that starts at position 5: does your "
     "function read the positions it is given?",
     "you numbered the tokens 0 … T-1 yourself instead of using the positions passed in. A continuation "
     "starts at a later position, and a padded sentence repeats one: the vector of the n-th token belongs to "
     "positions[n]."),
])


@checker(mistakes=_SINUSOID_MISTAKES)
def check_sinusoidal(fn) -> Verdict:
    """``fn(positions, d_model)``: int64 positions (T,) or (B, T) → (..., T, d_model) float32 vectors."""
    return judge(fn, _sinusoid_cases(), _sinusoid_reference, _SINUSOID_MISTAKES, atol=1e-4,
                 success="every position got its own sines and cosines: from 0, after an offset, and in a "
                         "padded batch.")


# ------------------------------------------------------------------------------------------------
# Extend: RoPE with the halves layout. Coordinate f is paired with f + d/2 (as GPT-NeoX and Llama in Hugging
# Face's transformers do) and the pair is rotated by theta[t, f].

def _rotate_halves(x, theta, *, sign=1, layout="halves", angles="given", per_column="pair", rotate_second=True):
    """x with each pair rotated, or a planted slip; the defaults compute the answer. ``layout`` "neighbours"
    pairs 2f with 2f+1 (the chapter's layout); ``angles`` "own" ignores theta for RoPE's angles;
    ``per_column`` "interleaved" gives column j the angle of pair j // 2 (a layout mix-up);
    ``rotate_second`` False leaves the second half unchanged."""
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
    second = a * sin + b * cos if rotate_second else b
    return torch.cat([a * cos - b * sin, second], dim=-1)


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


def _rotate_diagnose(verdict: Verdict, results) -> Verdict | None:
    if verdict.mistake != "dtype":
        return None
    for (x, theta), got, _ in results.outputs():
        if x.dtype != theta.dtype and isinstance(got, torch.Tensor) and got.dtype == theta.dtype:
            return named(ANGLES_DTYPE)
    return None


@checker(mistakes=[*_ROTATE_MISTAKES, ANGLES_DTYPE])
def check_rotate_halves(fn) -> Verdict:
    """``fn(x, theta)``: x (..., T, d), theta (T, d/2) → x with each pair (x[f], x[f + d/2]) rotated by theta."""
    cases = _rotate_cases()
    return judge(fn, cases, _rotate_halves, _ROTATE_MISTAKES,
                 success="every pair (f, f + d/2) is rotated by the angle it was given, in x's dtype, and x "
                         "is left as it came.",
                 diagnose=_rotate_diagnose)


# ------------------------------------------------------------------------------------------------
# Find the bug: X₀ = E[ids] + PE[positions], written with the positions counted through the whole batch.

def _positions_cases() -> list[tuple]:
    g = _gen(3)
    vocab_size, d_model, max_T = 9, 6, 16
    E = torch.randn(vocab_size, d_model, generator=g)
    PE = sinusoidal_positions(max_T, d_model)
    E64, PE64 = torch.randn(vocab_size, 4, generator=g, dtype=torch.float64), sinusoidal_positions(8, 4).double()
    return [
        (torch.tensor([2, 7, 1, 2, 8, 0]), E, PE),                    # one sentence (T,): the bug passes
        (torch.tensor([[2, 7, 1, 2, 8, 0]]), E, PE),                  # a batch of one: the bug passes too
        (torch.randint(0, vocab_size, (3, 5), generator=g), E, PE),   # a batch of three: the bug runs, wrongly
        (torch.tensor([[1, 3, 3, 5], [0, 8, 2, 2]]), E64, PE64),      # float64 tables, as from numpy
    ]


def _positions_reference(ids, E, PE, *, positions="each-sentence"):
    """X₀ = E[ids] + the rows of PE at the positions, or a planted slip: ``positions`` is "each-sentence"
    (0 … T-1 in every sentence), "flat" (counted through the batch), "first-axis" (T taken from ids.shape[0]),
    "by-id" (rows at the token IDs), "from-one" (1 … T), "float" (float positions) or "none"."""
    T = ids.shape[-1]
    rows = {
        "each-sentence": lambda: PE[:T],
        "flat": lambda: PE[torch.arange(ids.numel()).view(ids.shape)],
        "first-axis": lambda: PE[: ids.shape[0]],
        "by-id": lambda: PE[ids],
        "from-one": lambda: PE[1: T + 1],
        "float": lambda: PE[torch.arange(T, dtype=torch.float32)],
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
