"""Exercise checkers for the projections chapter (Q = X W_Q, K = X W_K, V = X W_V).

``check_linear_by_hand(fn)``: ``fn(x, weight, bias)`` must return what ``nn.Linear`` returns.
``check_split_fused(fn)``: ``fn(X, W_QKV, d_k)`` is the "find the bug" split of a fused projection, repaired:
X (..., T, d_model), W_QKV = [W_Q | W_K | W_V] (d_model, 3·d_k) → (Q, K, V), each (..., T, d_k).
``check_cross_kv(fn)``: ``fn(X, X_kv, W_K, W_V)`` → K, V of cross-attention, each (..., T_kv, d_k).
``check_qkv_params(n)``: a predicted number, the parameters of GPT-2 small's Q, K, V projections in one layer.

Every input is built afresh on each call, so a function that changes its inputs cannot change a later verdict.
"""

from __future__ import annotations

import torch

from ..projections import Projections, project
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_linear_by_hand", "check_split_fused", "check_cross_kv", "check_qkv_params"]


# ------------------------------------------------------------------------------------------------
# nn.Linear by hand: y = x @ weight.T + bias, with weight stored as (out, in).

def _linear_cases() -> list[tuple]:
    g = _gen(20)
    # The first case is square (in == out), so forgetting the transpose runs and gives wrong numbers;
    # the second is not, so the same mistake would fail with a shape error.
    square = (torch.randn(5, 4, generator=g), torch.randn(4, 4, generator=g), torch.randn(4, generator=g))
    wide = (torch.randn(2, 3, 6, generator=g), torch.randn(3, 6, generator=g), torch.randn(3, generator=g))
    return [square, wide]


def _linear_reference(x, weight, bias):
    return torch.nn.functional.linear(x, weight, bias)


def _planted_linear(x, weight, bias, *, transpose=True, add_bias=True):
    """x @ weight.T + bias with a planted slip; the defaults compute it."""
    y = x @ (weight.T if transpose else weight)
    return y + bias if add_bias else y


_LINEAR_MISTAKES = variants(_planted_linear, [
    ("no-transpose", {"transpose": False},
     "you multiplied by `weight` itself. nn.Linear stores its weight as (out, in); "
     "the book's W is (in, out) = weight.T, so use `x @ weight.T + bias`."),
    ("no-bias", {"add_bias": False},
     "the matrix product is right, but nn.Linear also adds its bias: `x @ weight.T + bias`."),
    ("no-transpose-no-bias", {"transpose": False, "add_bias": False},
     "two things are missing: the weight is stored as (out, in), so use `weight.T`, "
     "and the bias must be added."),
])


@checker
def check_linear_by_hand(fn) -> Verdict:
    """``fn(x, weight, bias)`` with x (..., d_in), weight (d_out, d_in), bias (d_out,) → (..., d_out)."""
    return judge(fn, _linear_cases(), _linear_reference, _LINEAR_MISTAKES,
                 success="your function reproduces nn.Linear: y = x @ weight.T + bias.")


# ------------------------------------------------------------------------------------------------
# Find the bug: splitting a fused projection. X @ W_QKV with W_QKV = [W_Q | W_K | W_V] of shape
# (d_model, 3·d_k); the planted bug reshapes the last axis to (d_k, 3), which deals the columns out in turn.

def _fused_cases() -> list[tuple]:
    g = _gen(21)
    return [
        (torch.randn(5, 6, generator=g), torch.randn(6, 3 * 4, generator=g), 4),
        (torch.randn(2, 3, 8, generator=g), torch.randn(8, 3 * 2, generator=g), 2),
    ]


def _fused_reference(X, W_QKV, d_k):
    return tuple(project(X, W_QKV).split(d_k, dim=-1))


def _interleaved(X, W_QKV, d_k):
    QKV = X @ W_QKV
    return tuple(QKV.reshape(*QKV.shape[:-1], d_k, 3).unbind(-1))


def _planted_split(X, W_QKV, d_k, *, order=(0, 1, 2), axis="columns"):
    """(Q, K, V) from the blocks of X @ W_QKV, with a planted slip; the defaults compute them. ``order`` is
    the order the blocks are returned in; ``axis`` = "rows" cuts the positions into three instead."""
    QKV = X @ W_QKV
    blocks = QKV.split(d_k, dim=-1) if axis == "columns" else QKV.chunk(3, dim=-2)
    return tuple(blocks[i] for i in order)


_FUSED_MISTAKES = [
    Mistake("unchanged",
            "this is still the function as given. Q, K and V have the right shapes, but each one mixes columns "
            "of all three matrices: compare your Q with X @ W_QKV[:, :d_k], the product with W_Q alone.",
            _interleaved),
    *variants(_planted_split, [
        ("order", {"order": (1, 0, 2)},
         "Q and K came out swapped. The columns of W_QKV are [W_Q | W_K | W_V] in that order, so the "
         "first d_k columns of X @ W_QKV are Q, the next d_k are K, the last are V."),
        ("reversed", {"order": (2, 1, 0)},
         "your Q is V and your V is Q: the blocks of columns are [Q | K | V], read left to right."),
        ("rows", {"axis": "rows"},
         "you cut along the positions (the T axis, dim -2). The three projections sit side by side in the "
         "last axis, d_k columns each: split along dim=-1."),
    ]),
]


@checker
def check_split_fused(fn) -> Verdict:
    """``fn(X, W_QKV, d_k)`` with X (..., T, d_model), W_QKV (d_model, 3·d_k) → (Q, K, V), each (..., T, d_k)."""
    return judge(fn, _fused_cases(), _fused_reference, _FUSED_MISTAKES,
                 success="one product, split into blocks of d_k columns, gives Q, K and V.")


# ------------------------------------------------------------------------------------------------
# Cross-attention: K and V come from the other sequence X_kv, not from the queries' sequence X.

def _cross_cases() -> list[tuple]:
    g = _gen(22)
    d_model, d = 6, 4
    return [
        (torch.randn(3, d_model, generator=g), torch.randn(5, d_model, generator=g),
         torch.randn(d_model, d, generator=g), torch.randn(d_model, d, generator=g)),
        (torch.randn(2, 4, d_model, generator=g), torch.randn(2, 7, d_model, generator=g),
         torch.randn(d_model, d, generator=g), torch.randn(d_model, d, generator=g)),
    ]


def _cross_reference(X, X_kv, W_K, W_V):
    return project(X_kv, W_K), project(X_kv, W_V)


def _planted_kv(X, X_kv, W_K, W_V, *, k_from="X_kv", v_from="X_kv", swap_weights=False):
    """K, V of cross-attention with a planted slip; the defaults compute them. ``k_from`` and ``v_from`` name
    the sequence each is projected from ("X_kv" or "X"); ``swap_weights`` projects K with W_V and V with W_K."""
    sequences = {"X": X, "X_kv": X_kv}
    if swap_weights:
        W_K, W_V = W_V, W_K
    return sequences[k_from] @ W_K, sequences[v_from] @ W_V


_CROSS_MISTAKES = variants(_planted_kv, [
    ("kv-from-queries", {"k_from": "X", "v_from": "X"},
     "you projected K and V from X, the queries' sequence. In cross-attention the queries come from X, "
     "but keys and values come from the other sequence: use X_kv for both."),
    ("k-from-queries", {"k_from": "X"},
     "V is right, but K was projected from X. Keys and values describe the same positions, so both "
     "come from X_kv."),
    ("v-from-queries", {"v_from": "X"},
     "K is right, but V was projected from X. The values carried must belong to the positions the keys "
     "describe: project V from X_kv too."),
    ("swapped-weights", {"swap_weights": True},
     "K and V are swapped: K uses W_K and V uses W_V (return them in the order K, V)."),
])


def _shapes(out) -> str:
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return ", ".join(str(tuple(t.shape)) for t in out)
    return type(out).__name__


def _shapes_look(fn, cases, verdict: Verdict) -> Verdict | None:
    """Say which shapes came back, both at once."""
    if verdict.mistake != "shape":
        return None
    for case in cases:
        got, want = fn(*[c.clone() for c in case]), _cross_reference(*case)
        if _shapes(got) != _shapes(want):
            return Verdict(False, f"K and V should have shapes {_shapes(want)} (T_kv rows each), "
                                  f"got {_shapes(got)}.", "shape")
    return None


@checker
def check_cross_kv(fn) -> Verdict:
    """``fn(X, X_kv, W_K, W_V)`` with X (..., T, d_model), X_kv (..., T_kv, d_model) → K, V (..., T_kv, d_k)."""
    cases = _cross_cases()
    return judge(fn, cases, _cross_reference, _CROSS_MISTAKES,
                 success="K and V come from X_kv, so they have T_kv rows, whatever the length of X.",
                 diagnose=lambda verdict: _shapes_look(fn, cases, verdict))


# ------------------------------------------------------------------------------------------------
# Predict: the parameters of the Q, K, V projections of one GPT-2 small layer.

_GPT2 = {"d_model": 768, "h": 12}


def _qkv_params(d_model: int, h: int) -> int:
    """Count the parameters of h heads' Projections(d_model, d_head, bias=True), built on the meta device
    (no memory, no random numbers)."""
    with torch.device("meta"):
        heads = [Projections(d_model, d_model // h, bias=True) for _ in range(h)]
    return sum(p.numel() for head in heads for p in head.parameters())


@checker(kind="predict")
def check_qkv_params(value) -> Verdict:
    """A predicted count: weights and biases of W_Q, W_K, W_V for all heads of one layer, d_model = 768, h = 12."""
    d, h = _GPT2["d_model"], _GPT2["h"]
    d_head = d // h
    guesses = [
        Guess("one-head", f"that is one head. Each of the h = {h} heads has its own W_Q, W_K and W_V of shape "
              f"d_model × d_head ({d} × {d_head}), plus their biases.", 3 * (d * d_head + d_head)),
        Guess("one-head-no-bias", f"that is one head without biases. There are h = {h} heads, and nn.Linear "
              "(like GPT-2) adds a bias of d_head numbers to each projection.", 3 * d * d_head),
        Guess("no-bias", "the weights are right, but every projection also has a bias, one number per output "
              f"column: {d_head} per matrix and head.", 3 * d * d),
        Guess("full-width-heads", f"each head's matrices are d_model × d_head ({d} × {d_head}), not "
              f"d_model × d_model: the h heads together are as wide as one d_model × d_model matrix.",
              h * 3 * (d * d + d)),
        Guess("with-W_O", "that includes the output projection W_O, which comes after the heads (chapter 6); "
              "count only W_Q, W_K and W_V.", 4 * (d * d + d)),
        Guess("one-matrix", "that is one matrix (with its bias). Queries, keys and values have three separate "
              "parameter sets.", d * d + d),
    ]
    count = _qkv_params(d, h)
    return judge_number(value, count, guesses, rtol=1e-6,
                        success=f"{count:,} parameters. The h heads of width d_model / h hold as many as one "
                                f"d_model × d_model matrix (and bias) each for Q, K and V: "
                                f"3 · (d_model² + d_model).")
