"""Exercise checkers for the scaling chapter (raw scores S = Q Kᵀ, scaled scores Z = S / √d_k).

``check_fp16_scores(fn)``: ``fn(Q, K)``, Q (..., T_q, d_k), K (..., T_k, d_k) → Z (..., T_q, T_k) in Q's dtype,
finite in float16 where Q Kᵀ overflows but Z fits, with no wider copy.
``check_head_scores(fn)``: ``fn(X, W_Q, W_K)``, X (..., T, d_model), W_Q, W_K (d_model, d_k) → Z (..., T, T), the
"find the bug" score table fixed.
``check_unit_length_scores(v)``: a predicted standard deviation of Z for q, k of length 1 (d_k = 64).
"""

from __future__ import annotations

import functools
import math

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ..attention import scale, scores
from ..projections import project
from ._core import Group, Guess, Mistake, Verdict, _close, _gen, _inputs, checker, judge, judge_number, named, variants

__all__ = ["check_fp16_scores", "check_head_scores", "check_unit_length_scores"]


# --- Z = Q Kᵀ / √d_k in float16 where Q Kᵀ passes 65504 but Z fits: Q (..., T_q, d_k), K (..., T_k, d_k) --------------

_fp16_reference = lambda Q, K: scale(scores(Q.double(), K.double()), Q.shape[-1]).to(Q.dtype)   # exact, rounded once


def _fp16_groups() -> list[Group]:
    """float16 q, k of components 20 to 60 with one sign pattern (key 0's random, key 1's opposite): q·k reaches
    ±d_k·1600; each judged within 2⁻⁸ of its largest |Z|. Then float32 and float64 of ordinary size."""
    g = _gen(30)
    signs = lambda *shape: torch.randint(0, 2, shape, generator=g) * 2 - 1
    def large(lead, T_q, T_k, d):
        s = signs(d)
        Q, K = (s * (20 + 40 * torch.rand(*lead, T, d, generator=g, dtype=torch.float64)) for T in (T_q, T_k))
        K[..., 0, :], K[..., 1, :] = K[..., 0, :] * signs(d), -K[..., 1, :]
        return Q.half(), K.half()
    half = [large((), 4, 5, 64), large((2,), 3, 4, 128), large((2, 2), 3, 3, 64)]
    ordinary = [tuple(torch.randn(*lead, T, d, generator=g, dtype=dt) for T in (T_q, T_k))
                for lead, T_q, T_k, d, dt in (((3,), 4, 5, 16, torch.float32), ((2, 2), 3, 5, 8, torch.float64))]
    return [*(Group([c], 2 ** -8 * _fp16_reference(*c).abs().max().item()) for c in half), Group(ordinary, 1e-5)]


def _planted_fp16(Q, K, *, at: str = "Q", power: float = 0.5, keys: str = "last two", upcast_K: bool = False):
    """Z with the division by d_k ** power on "Q", on "both" factors, "after" the product, or after a "clamp"."""
    f, K = Q.shape[-1] ** power, K.float() if upcast_K else K
    Kt = {"last two": K.mT, "first two": K.transpose(0, 1), "all": K.permute(*range(K.dim())[::-1])}.get(keys)
    Kt = K.t() if Kt is None else Kt
    S = {"after": lambda: Q @ Kt, "clamp": lambda: torch.nan_to_num(Q @ Kt)}.get(at)
    return S() / f if S else (Q / f) @ (Kt / f if at == "both" else Kt)


_OVERFLOW = ("your Z is infinite where the true score fits in float16: at which step of yours does a number first "
             "pass 65504?", "Q Kᵀ passes 65504 before your division brings it back, so the product is already "
             "inf. Where else can 1/√d_k enter the score? This page moved it once already.")
_AXES = ("right for one table, but not with axes in front: which two axes does your transpose swap?",
         "with leading axes, K's rows and components are its last two axes: swap those.")
_REVERSED = ("right for one table, but with axes in front your transpose reverses the order of every axis of K: "
             "which two should it swap?", "on a tensor of three or more axes, .T reverses all of them, so the "
             "batch axes land at the end; Kᵀ here swaps only K's last two axes, its rows and its components.")
SCALED = Mistake("scale-factor", "each of your scores is the true one times {c} (on inputs {case}): you divide by "
                 "{by} where the scaling divides by √d_k = {root}. Which number of yours is {by}?", more="your "
                 "scores are the true ones times one factor per case. Check your divisor: the axis its width is read "
                 "from, a power written without parentheses (** binds before /), how many factors of it meet.")


def _scale_factor(verdict: Verdict, run, d_k=lambda case: case[0].shape[-1]) -> Verdict | None:
    """For a checker of Z = S / √d_k: on every case the learner's scores, finite or overflowed alike, are the true
    ones times one factor c ≠ 1, measured as ⟨Z, true⟩ / ⟨true, true⟩ (the audit's scaling probe); it names c."""
    found = []
    for (case, got, _), (_, atol) in zip(run.outputs(), run.cases):
        w = run.reference(*case)
        if verdict.mistake != "values" or getattr(got, "shape", None) != w.shape or got.dtype != w.dtype:
            return None
        g, w, ok = got.double(), w.double(), got.isfinite()
        c = float((g[ok] * w[ok]).sum() / (w[ok] * w[ok]).sum().clamp_min(1e-30))
        if abs(c - 1) < 1e-3 or not _close(got, (c * w).to(got.dtype), abs(c) * atol + 1e-6):
            return None
        found.append((c, case, math.sqrt(d_k(case))))
    c, case, root = found[0]
    return named(SCALED, c=f"{c:.4g}", case=_inputs(run.fn, case), by=f"{root / c:.4g}", root=f"{root:.4g}")


_FP16_MISTAKES = variants(_planted_fp16, [
    ("scale-after", {"at": "after"}, *_OVERFLOW), ("scale-after", {"at": "after", "power": 1}, *_OVERFLOW),
    ("no-scale", {"power": 0}, "your scores are too large, in float16 infinite: which step of Z = S / √d_k is "
     "missing?", "the scores are not divided by √d_k at all."),
    ("scaled-twice", {"at": "both"}, "your scores are finite but √d_k times too small: how often, and by what, "
     "is each score divided?", "each score is divided by d_k: both Q and K were divided by √d_k (or one of them "
     "by d_k). The factors on the two sides must multiply to 1/√d_k."),
    ("fourth-root-once", {"power": 0.25}, "your scores are finite but too large: what do the factors on the two "
     "sides of your product multiply to?", "only one side was divided by the fourth root of d_k, so each score "
     "is divided by d_k^¼, not √d_k."),
    ("clamped", {"at": "clamp"}, "your scores are finite, but the largest are all one number: what happened to "
     "the scores that overflowed?", "a clamp (or nan_to_num) turns an overflowed score into float16's largest "
     "number, not into its true value: the overflow itself must not happen."),
    ("upcast-K", {"upcast_K": True}, "torch refuses a product of float16 and float32, and the exercise asks for "
     "no wider copy anyway: which number of yours outgrows float16, and must it?", "K in float32 meets Q in "
     "float16. Keep both in float16 and make sure no step needs more than float16 holds."),
    ("last-two-axes", {"keys": "first two"}, *_AXES), ("last-two-axes", {"keys": "t"}, *_AXES),
    ("every-axis-reversed", {"keys": "all"}, *_REVERSED),
])
WIDER = Mistake("wider-dtype", "your function made a {dtype} tensor from {given} inputs, and the exercise asks "
                "for no wider copy: which of your numbers would not fit in {given}, and must it be that large?",
                more="a wider copy of Q, K or the scores costs the memory and time a narrow dtype saves. Find the "
                     "step whose numbers overflow float16 and change the order of the steps so that none does.")


class _Made(TorchFunctionMode):
    """The dtypes of the tensors with an axis that one run's torch calls made (lighter than the engine's watch)."""
    def __init__(self):
        super().__init__()
        self.dtypes = set()
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.dtypes |= {t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.dim()}
        return out


@checker(mistakes=[*_FP16_MISTAKES, WIDER, SCALED])
def check_fp16_scores(fn) -> Verdict:
    made = {}

    def recorded(*args):   # the learner's call, with what it made kept under its first input
        with _Made() as made[id(args[0])]:
            return fn(*args)

    def no_wider(case, got, args, watch) -> Verdict | None:
        top, given = torch.finfo(case[0].dtype).max, str(case[0].dtype)[6:]
        wider = sorted(str(t)[6:] for t in made[id(args[0])].dtypes if t.is_floating_point and torch.finfo(t).max > top)
        return named(WIDER, dtype=wider[0], given=given) if wider else None

    return judge(functools.wraps(fn)(recorded) if callable(fn) else fn, _fp16_groups(), _fp16_reference,
                 _FP16_MISTAKES, properties=no_wider, diagnose=_scale_factor,
                 success="Z = Q Kᵀ / √d_k in the dtype that came in, finite where it fits in float16 although Q Kᵀ "
                         "does not, with two to four axes, and in float32 and float64.")


# --- find the bug: Z = (X W_Q)(X W_K)ᵀ / √d_k built by broadcasting ---------------------------------------------------

def _head_cases() -> list[tuple]:
    g = _gen(31)
    # (leading axes, T, d_model, d_k, divisor of the weights, dtype), with d_k ≠ d_model
    sizes = [((), 5, 16, 8, 4, torch.float32), ((2,), 4, 9, 2, 3, torch.float32), ((3,), 6, 12, 4, 3, torch.float64)]
    return [(torch.randn(*lead, T, d, generator=g, dtype=dt), torch.randn(d, d_k, generator=g, dtype=dt) / s,
             torch.randn(d, d_k, generator=g, dtype=dt) / s) for lead, T, d, d_k, s, dt in sizes]


def _head_reference(X, W_Q, W_K):
    return scale(scores(project(X, W_Q), project(X, W_K)), W_Q.shape[-1])


def _planted_head(X, W_Q, W_K, *, by: str = "d_k", power: float = 0.5, rows: str = "queries", same_weights=False):
    Q, K = X @ W_Q, X @ (W_Q if same_weights else W_K)
    S = K @ Q.mT if rows in ("keys", "first-two") else Q @ (K.permute(*range(K.dim())[::-1]) if rows == "all" else K.mT)
    S = S.transpose(0, 1) if rows == "first-two" else S
    return S / {"d_k": W_Q.shape[-1], "d_model": X.shape[-1], "T": X.shape[-2]}[by] ** power   # power -0.5: × √


def buggy_head_scores(X, W_Q, W_K):
    """The stub of the exercise, the function as given (its rows are keys, and its scale is √d_model)."""
    Q = X @ W_Q                                        # (..., T, d_k)
    K = X @ W_K                                        # (..., T, d_k)
    pairs = K[..., :, None, :] * Q[..., None, :, :]    # (..., T, T, d_k)
    return pairs.sum(-1) / math.sqrt(X.shape[-1])      # (..., T, T)


_HEAD_MISTAKES = [Mistake("as-given",
            "this is still the function as given: it runs with the right shape, but compare a row of its table "
            "with that query's dot products, and the spread of its scores with what the scaling should leave.",
            buggy_head_scores,
            more="this is still the function as given, with two bugs: its rows are keys (entry (i, j) multiplies "
                 "key i with query j), and it divides by √d_model where q and k have width d_k."),
    *variants(_planted_head, [
        ("rows-are-keys", {"rows": "keys"}, "the scale is right now. Is row i of your table the query position i?",
         "entry (i, j) of your table multiplies key i with query j: the first position axis of the broadcast "
         "must belong to the queries."),
        ("sqrt-d_model", {"by": "d_model"},
         "rows and columns are right now: how many components do the two vectors of each dot product have?",
         "you divide by √d_model, the width of X; q and k have d_k components, and here d_k ≠ d_model."),
        ("no-scale", {"power": 0}, "rows and columns are right now, but the scores are too large: which step of "
         "S / √d_k is missing?", "the table is right but not scaled: divide it by the square root of d_k, the "
         "width of q and k."),
        ("divide-by-d_k", {"power": 1}, "rows and columns are right now, but the scores are too small: by what "
         "does the scaling divide?", "you divided by d_k; the standard deviation of q·k grows like √d_k, not like "
         "d_k."),
        ("multiply-by-sqrt", {"power": -0.5}, "rows and columns are right now, but the scores are much too large: "
         "does your scaling shrink them?", "you multiplied by √d_k; the scores must be divided by it."),
        ("sqrt-T", {"by": "T"}, "rows and columns are right now, but not the scale: which axis counts the "
         "components of a dot product?", "you divided by √T, the length of another axis; each score is a dot "
         "product over the d_k components, divided by √d_k."),
        ("first-two-axes", {"rows": "first-two"},
         "right for one sequence, but a batch comes back in another order: which two axes does your transpose "
         "swap?", "with a batch axis in front, the first two axes are the batch and the rows: swap the last two."),
        ("every-axis-reversed", {"rows": "all"}, *_REVERSED),
        ("same-weights", {"same_weights": True}, "where do your keys come from? Compare them with the queries.",
         "you used W_Q for the keys as well. Queries and keys have separate weights."),
    ]),
]


@checker(mistakes=[*_HEAD_MISTAKES, SCALED])
def check_head_scores(fn) -> Verdict:
    return judge(fn, _head_cases(), _head_reference, _HEAD_MISTAKES,
                 diagnose=functools.partial(_scale_factor, d_k=lambda case: case[1].shape[-1]),
                 success="rows are queries, columns keys, and the scores are divided by √d_k, the width of q "
                         "and k (not √d_model).")


# --- predict: the spread of Z = S / √d_k when every query and key has length 1 ----------------------------------------

_UNIT = {"B": 4, "T": 32, "d_model": 128, "d_k": 64}   # B tables of T queries against T keys


def _measured_unit_length_std(B: int, T: int, d_model: int, d_k: int) -> float:
    g = _gen(33)
    Q, K = (torch.randn(B, T, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    Q, K = Q / Q.norm(dim=-1, keepdim=True), K / K.norm(dim=-1, keepdim=True)
    return scale(scores(Q, K), d_k).std().item()


_B, _T, _DM, _DK = _UNIT.values()
_RAW = 1 / math.sqrt(_DK)         # the spread of q·k before the division
_GUESSES = [Guess("scaling-fixes-it", "too high: what variance does one component of a vector of length 1 have?", 1.0,
          "too high: 1 is the spread for components of variance 1; here all d_k components share the length 1."),
    Guess("unscaled", "too high: that is the spread of q·k before the division by √d_k.", _RAW,
          "too high by a factor of √d_k = 8: your q·k is right, but Z is q·k divided by √d_k."),
    Guess("variance", "too low: your number is a variance, and the question asks for a standard deviation.",
          _RAW ** 2 / _DK, "too low: that is the variance of Z; its standard deviation is its square root."),
    Guess("divided-by-d_k", "too low by a factor of √d_k = 8: which step of your count shrinks the spread once "
          "too often?", _RAW / _DK, "too low by 8: either you divided the standard deviation by d_k (it shrinks "
          "by √d_k), or you left out how the spread grows from one term q_r·k_r to the sum of d_k terms."),
    Guess("variance-divided-by-sqrt", "too high: by how much does dividing every score by 8 shrink their "
          "variance?", _RAW / _DK ** 0.25, "too high by √8: dividing every score by √d_k divides their variance "
          "by d_k."),
    Guess("width-d_model", "too low: which width do q and k have, d_model or d_k?", 1 / _DM,
          "too low: you counted with d_model = 128, the width of X; q and k have d_k = 64 components."),
    Guess("sqrt-d_model", "too low: which width's square root divides the scores?", _RAW / math.sqrt(_DM),
          "too low: you divided by √d_model; the scores are divided by √d_k."),
    *[Guess(f"sqrt-{n}", f"too high: is the number of {what} {n} in a dot product?", _RAW / math.sqrt(size),
            f"too high: you divided by √{n}, which only counts the {counts}; each score is divided by √d_k.")
      for n, what, size, counts in (("T", "keys", _T, "scores of a row"), ("B", "sequences", _B, "tables"))],
    Guess("unit-variance", "too high: how large is one component of a vector of length 1?", math.sqrt(_DK),
          "too high: √d_k is the spread of q·k for components of variance 1, without the division."),
    Guess("orthogonal", "too low: random directions are nearly orthogonal, but how far from 0 does q·k stray?", 0.0,
          "too low: q·k of two random directions is a sum of d_k small random products, and such a sum spreads."),
]


@checker(kind="predict", mistakes=_GUESSES)
def check_unit_length_scores(value) -> Verdict:
    return judge_number(value, _measured_unit_length_std(**_UNIT), _GUESSES, rtol=0.1,
                        success=f"each component has variance 1/d_k, q·k has variance 1/d_k, and the division "
                                f"leaves Z a standard deviation of 1/d_k ≈ {1 / _DK:.4g}.")
