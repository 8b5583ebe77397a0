"""Exercise checkers for chapter 1: embedding lookup, sinusoidal positions, rotary pairs, positions in a batch.

``check_embed(fn)``: ``fn(ids, E)`` with ids (T,) or (B, T) and E (vocab_size, d_model) → (..., T, d_model).
``check_sinusoidal(fn)``: ``fn(T, d_model)`` → the (T, d_model) table PE.
``check_rotate_pairs(fn)``: ``fn(x, theta)`` with x (..., T, d) and theta (T, d/2) → x with each neighbouring
pair of row t rotated by theta[t, i]; the angles are the ones given, whatever schedule made them.
``check_embed_with_positions(fn)``: ``fn(ids, E, PE)`` is the "find the bug" function, repaired: ids (T,) or
(B, T), E (vocab_size, d_model), PE (max_T, d_model) → X₀ = E[ids] + PE[:T], shape (..., T, d_model).

Every input is built afresh on each call, so a function that changes its inputs cannot change a later verdict.
"""

from __future__ import annotations

import math

import torch

from ..position import rope_angles, sinusoidal_positions
from ._core import Mistake, Verdict, _gen, checker, judge, variants

__all__ = ["check_embed", "check_sinusoidal", "check_rotate_pairs", "check_embed_with_positions"]


# ------------------------------------------------------------------------------------------------
# Embedding lookup: X = E[ids].

def _embed_cases() -> list[tuple]:
    g = _gen(1)
    E = torch.randn(11, 6, generator=g)          # vocab_size = 11 ≠ d_model = 6: rows and columns differ
    square = torch.randn(6, 6, generator=g)      # vocab_size = d_model: picking columns runs silently
    return [
        (torch.tensor([3, 0, 5, 3, 1]), E),
        (torch.tensor([4, 0, 2, 4, 1, 5]), square),
        (torch.tensor([3, 0, 7, 3, 10]), E),
        (torch.tensor([[1, 2], [9, 9]]), E),
    ]


_EMBED_MISTAKES = [
    Mistake("columns", "you picked columns of the table. Each token owns a *row* of the (vocab_size, d_model) "
            "table: index the first axis, E[ids].", lambda ids, E: E[:, ids]),
    Mistake("columns-transposed", "you indexed columns and transposed. Each token owns a *row*: E[ids]. (With "
            "a square table this runs and has the right shape, so only the numbers tell.)",
            lambda ids, E: E[:, ids].transpose(0, -1)),
    Mistake("one-hot-transposed", "your one-hot matrix multiplies the table from the wrong side: "
            "one_hot(ids) has shape (T, vocab_size), so one_hot(ids) @ E is (T, d_model).",
            lambda ids, E: E.T @ torch.nn.functional.one_hot(ids, E.shape[0]).to(E).transpose(-2, -1)),
]


@checker
def check_embed(fn) -> Verdict:
    """``fn(ids, E)``: ids (T,) or (B, T), E (vocab_size, d_model) → (…, T, d_model)."""
    return judge(fn, _embed_cases(), lambda ids, E: E[ids], _EMBED_MISTAKES,
                 success="every token got its own row of the table, with and without a batch axis.")


# ------------------------------------------------------------------------------------------------
# Sinusoidal positions: PE[t, 2i] = sin(t / 10000^(2i/d_model)), PE[t, 2i+1] = cos(same).

def _sinusoid(T, d, *, swap=False, freq_step=2, sign=-1):
    """PE with a planted slip; the defaults compute PE itself."""
    t = torch.arange(T, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    freq = 10000.0 ** (sign * (i if freq_step == 2 else i / 2) / d)
    PE = torch.zeros(T, d)
    first, second = torch.sin(t * freq), torch.cos(t * freq)
    PE[:, 0::2], PE[:, 1::2] = (second, first) if swap else (first, second)
    return PE


_SINUSOID_MISTAKES = variants(_sinusoid, [
    ("sin-cos-swapped", {"swap": True},
     "sin and cos are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos."),
    ("exponent-i", {"freq_step": 1},
     "the frequency exponent uses the pair index i where it needs the column index 2i: "
     "freq = 10000 ** (-2i / d_model)."),
    ("exponent-sign", {"sign": 1},
     "the frequencies grow instead of shrink: divide the position by 10000^(2i/d_model), "
     "i.e. multiply by 10000 ** (-2i / d_model)."),
])


@checker
def check_sinusoidal(fn) -> Verdict:
    """``fn(T, d_model)`` → (T, d_model) sinusoidal position table PE."""
    # T = 7 (odd, less than d_model) and T = 3 with a wide d_model = 16, where the exponent slips show most.
    return judge(fn, [(7, 8), (3, 16)], sinusoidal_positions, _SINUSOID_MISTAKES, atol=1e-4,
                 success="the table matches sin/cos at every position and frequency.")


# ------------------------------------------------------------------------------------------------
# Rotating neighbouring pairs by given angles (the core of RoPE).

def _rotate(x, theta, *, sign=1, halves=False, own_angles=None):
    """x with each pair rotated by theta, or with a planted slip; the defaults compute the rotation itself.
    ``own_angles`` ignores theta and computes RoPE's angles ("2i/d") or angles with the exponent "i/d"."""
    if own_angles is not None:
        theta = _own_angles(x, pair_index=own_angles == "i/d")
    theta = theta.to(x.dtype)
    c, s = theta.cos(), sign * theta.sin()
    if halves:
        a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def _own_angles(x, pair_index: bool = False):
    """The angles a function would compute for itself, ignoring the theta it was given."""
    T, d = x.shape[-2], x.shape[-1]
    if not pair_index:
        return rope_angles(T, d)
    t = torch.arange(T, dtype=torch.float64)[:, None]
    return t * 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)    # exponent i/d, not 2i/d


def _rotate_cases() -> list[tuple]:
    g = _gen(2)
    return [
        # RoPE's own angles, θ[t, i] = t · 10000^(−2i/d); row 0 is not rotated at all.
        (torch.randn(5, 8, generator=g), rope_angles(5, 8).float()),
        # Angles from no schedule at all (and a batch of odd T = 3): a function that makes up its own
        # angles instead of using theta cannot pass this one.
        (torch.randn(2, 3, 6, generator=g), (torch.rand(3, 3, generator=g) * 2 - 1) * math.pi),
    ]


_ROTATE_MISTAKES = [
    Mistake("identity", "the pairs came back unrotated. Rotate each pair (a, b) = (x[..., 2i], x[..., 2i+1]) by "
            "its angle θ = theta[t, i]: (a·cosθ − b·sinθ, a·sinθ + b·cosθ).", lambda x, th: x.clone()),
    *variants(_rotate, [
        ("wrong-direction", {"sign": -1},
         "you rotate by −θ: the new pair is (a·cosθ − b·sinθ, a·sinθ + b·cosθ)."),
        ("halves", {"halves": True},
         "you paired the first half with the second half. This course pairs neighbours: "
         "(x[0], x[1]), (x[2], x[3]), … i.e. x[..., 0::2] with x[..., 1::2]."),
        ("ignores-theta", {"own_angles": "2i/d"},
         "you computed RoPE's angles yourself (rope_angles / apply_rope) instead of using "
         "the `theta` you were given. They agree for RoPE's own angles, but the function must rotate by "
         "whatever angles arrive in theta."),
        ("own-schedule", {"own_angles": "i/d"},
         "you ignored `theta` and made up angles with the exponent i/d instead of 2i/d, "
         "a wrong frequency schedule too. Rotate by the angles given: theta[t, i]."),
    ]),
]


@checker
def check_rotate_pairs(fn) -> Verdict:
    """``fn(x, theta)``: x (..., T, d), theta (T, d/2) → x with each pair (x[2i], x[2i+1]) rotated by theta[:, i]."""
    return judge(fn, _rotate_cases(), _rotate, _ROTATE_MISTAKES,
                 success="every pair is rotated by the angle it was given: by RoPE's angles, and by arbitrary "
                         "ones on a batch.")


# ------------------------------------------------------------------------------------------------
# Find the bug: X₀ = E[ids] + PE[:T], written with T = ids.shape[0] (the batch axis when ids is (B, T)).

def _positions_cases() -> list[tuple]:
    g = _gen(3)
    vocab_size, d_model, max_T = 9, 6, 10
    E = torch.randn(vocab_size, d_model, generator=g)
    PE = sinusoidal_positions(max_T, d_model)
    return [
        (torch.tensor([2, 7, 1, 2, 8, 0]), E, PE),            # one sentence (T,): the buggy version passes
        (torch.tensor([[2, 7, 1, 2, 8, 0]]), E, PE),          # a batch of one: the bug runs silently
        (torch.randint(0, vocab_size, (3, 5), generator=g), E, PE),
    ]


def _positions_reference(ids, E, PE, *, added="PE[:T]"):
    """X₀ = E[ids] + PE[:T], or with a planted slip: ``added`` is the part of PE added ("PE[:T]" with T the
    sentence length ids.shape[-1], "PE[:ids.shape[0]]", "PE", "PE[ids]" or "nothing")."""
    rows = {"PE[:T]": lambda: PE[: ids.shape[-1]], "PE[:ids.shape[0]]": lambda: PE[: ids.shape[0]],
            "PE": lambda: PE, "PE[ids]": lambda: PE[ids], "nothing": lambda: 0}[added]
    return E[ids] + rows()


_POSITIONS_MISTAKES = variants(_positions_reference, [
    ("unchanged", {"added": "PE[:ids.shape[0]]"},
     "this is still the function as given. It is right for ids of shape (T,), but for a batch holding one "
     "sentence, ids of shape (1, T), every token gets the position vector of position 0, so the word "
     "order is lost. Print the shape of PE[:T] for ids[None]."),
    ("whole-table", {"added": "PE"},
     "you added the whole table PE (max_T rows), not its first T rows. Position t of the sentence gets "
     "row t of PE: slice PE[:T] with T the length of the sentence, ids.shape[-1]."),
    ("positions-by-id", {"added": "PE[ids]"},
     "you looked PE up with the token IDs (PE[ids]). The position table is indexed by position, not "
     "by token: position t gets PE[t] whatever token stands there."),
    ("no-positions", {"added": "nothing"},
     "your result has no positions in it, only E[ids]. X₀ = E[ids] + PE[:T]."),
])


@checker
def check_embed_with_positions(fn) -> Verdict:
    """``fn(ids, E, PE)``: ids (T,) or (B, T), E (vocab_size, d_model), PE (max_T, d_model) → (..., T, d_model)."""
    return judge(fn, _positions_cases(), _positions_reference, _POSITIONS_MISTAKES,
                 success="position t gets PE[t], for one sentence, for a batch of one, and for a batch of three.")
