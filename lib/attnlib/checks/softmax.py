"""Exercise checkers for the softmax chapter (chapter 5).

``check_log_softmax(fn)``: ``fn(z)`` must return log softmax(z) along the last axis of z (..., n), finite
wherever log p is (scores near 1000, and a weight too small for the dtype whose logarithm is an ordinary
number), in the dtype of z (float16, float32, float64).
``check_attention_output(fn)``: ``fn(Q, K, V)`` is one causal head in the *sequence-first* layout: Q, K
(T, B, d_k) and V (T, B, d_v) → softmax(Q Kᵀ / √d_k + M) V as (T, B, d_v), in the dtype of the inputs.
``check_softmax_jacobian(fn)``: ``fn(z)`` must return the Jacobian ∂p/∂z of p = softmax(z), z (..., n) →
(..., n, n), as autograd computes it, in the dtype of z.
``check_fixed_head(fn)``: ``fn(Q, K, V)`` is the einsum head of the "find the bug" exercise, repaired: it must
return softmax(Q Kᵀ / √d_k + M) V for Q, K (B, T, d_k) and V (B, T, d_v).

Every mistake has two hint levels: ``check_…(fn)`` says where to look, ``check_…(fn, hint=2)`` says what the
mistake is. A result in another dtype than the inputs' is named too (``"dtype"``), and so is an answer that is
right in float32 but stops with an error in float16 or float64 (``"mixed-dtypes"``); an input changed in place
is named by the core.
"""

from __future__ import annotations

import copy
import math

import torch

from ..attention import attention, causal_mask, softmax
from ._core import Group, Mistake, Verdict, _close, _gen, checker, judge, named, variants

__all__ = ["check_log_softmax", "check_attention_output", "check_softmax_jacobian", "check_fixed_head"]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


MIXED_DTYPES = Mistake(
    "mixed-dtypes",
    "for {want} inputs your function stops with an error about dtypes: two of your tensors meet with "
    "different dtypes. Which tensor do you create yourself, and in which dtype is it made?",
    more="for {want} inputs two of your tensors have different dtypes. A tensor created without a dtype (a "
         "mask, zeros to fill in, an identity matrix) is float32; mixed with {want} inputs it turns a sum "
         "into another dtype, and a matrix product or einsum refuses the pair. Create it in the dtype (and on "
         "the device) of the inputs.")


def _dtype_diagnosis(fn, groups: list[Group], reference, mistake: Mistake):
    """A ``diagnose`` for :func:`judge`, for answers that are right in float32 and not in another dtype.

    A verdict on the dtype alone becomes ``mistake``, whose texts name the dtype of the inputs (``{want}``)
    and the dtype that came back (``{got}``). An error on inputs of another dtype than float32 becomes
    :data:`MIXED_DTYPES`, but only when the same inputs cast to float32 give the right values.
    """
    def diagnose(verdict: Verdict, results) -> Verdict | None:
        if verdict.mistake not in ("dtype", "error"):
            return None
        for case, got, error in results.outputs():
            want = case[0].dtype
            if verdict.mistake == "dtype":
                if isinstance(got, torch.Tensor) and got.dtype != want:
                    return named(mistake, got=_dtype_name(got.dtype), want=_dtype_name(want))
                continue
            if want == torch.float32 or error is None:
                continue
            as_float32 = tuple(x.float() for x in case)
            if _close(fn(*as_float32), reference(*as_float32), 1e-4):
                return named(MIXED_DTYPES, f" (your function raised {type(error).__name__}: {error})",
                             want=_dtype_name(want))
            return None
        return None
    return diagnose


# ------------------------------------------------------------------------------------------------
# Build: a stable log-softmax.

def _log_softmax_groups() -> list[Group]:
    g = _gen(505)
    f32 = [
        (torch.randn(3, 5, generator=g) * 3,),
        # row 0 overflows exp() unless the maximum is subtracted, row 1 if the minimum is; in row 2 the weight
        # of −200 underflows to 0 in float32 (log 0 = −inf), while log p ≈ −205 is an ordinary number
        (torch.tensor([[1000.0, 999.0, 998.0, 997.0], [50.0, -100.0, 0.0, 10.0], [0.0, -200.0, 5.0, 1.0]]),),
        (torch.randn(2, 3, 4, generator=g) * 3,),                    # a batch: the last axis, not the second
    ]
    # float64 overflows past e^709.8 and underflows below e^-745; float16 overflows past e^11.1 and its
    # smallest number is about e^-16.6
    f64 = [(torch.tensor([[0.0, -800.0, 3.0, 1.0], [720.0, 719.0, 718.0, 0.0]], dtype=torch.float64),)]
    f16 = [(torch.tensor([[12.0, 11.0, 10.0, 9.0], [0.0, -20.0, 3.0, 1.0]], dtype=torch.float16),)]
    return [Group(f32, 1e-4), Group(f64, 1e-9), Group(f16, 0.05)]


def _log_softmax_reference(z: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(z.double(), dim=-1).to(z.dtype)


def _planted_log_softmax(z: torch.Tensor, *, shift: str = "row max", dim: int = -1, form: str = "log domain",
                         add_back: bool = True) -> torch.Tensor:
    """log softmax(z) with a planted slip; the defaults compute it. ``shift`` is what is subtracted before
    exp(): "row max", "row max, axis dropped" (the reduced axis not kept), "row min", "global max" or
    "nothing". ``form``: "log domain" (shifted scores minus the
    log of their exp-sum), "log of weights" (the log of the softmax), "weights" (the softmax itself) or
    "shifted" (the shifted scores alone). ``add_back`` = False drops the maximum taken out of the log-sum-exp."""
    if shift == "row max, axis dropped":
        m = z.amax(dim=dim)                   # (..., n) − (...,): the shapes do not line up
    elif shift == "row max":
        m = z.amax(dim=dim, keepdim=True)
    elif shift == "row min":
        m = z.amin(dim=dim, keepdim=True)
    elif shift == "global max":
        m = z.max()
    else:
        m = torch.zeros((), dtype=z.dtype)
    zs = z - m
    e = zs.exp()
    s = e.sum(dim=dim, keepdim=True)
    if form == "weights":
        return e / s
    if form == "log of weights":
        return (e / s).log()
    if form == "shifted":
        return zs
    return zs - s.log() + (0 if add_back else m)


_OVERFLOW_1 = ("on the row [1000, 999, 998, 997] your answer is not finite. Which number in your computation "
               "is too large for float32?")
_OVERFLOW_2 = ("e to the power 1000 is inf in float32 (in float16 e¹² already is), so the sum of the "
               "exponentials, and its log, are inf. Take each row's maximum out before exponentiating, and "
               "put it back outside the logarithm.")
_AXIS_1 = ("exp of your answer should sum to 1 along the last axis, over one row of scores. Does it? "
           "Along which axis did you take the maximum and the sum?")
_AXIS_2 = ("you reduced over another axis than the last. One row of scores (the keys of one query) lies "
           "along the last axis, however many axes come before it; the maximum and the sum run along it.")

_LOG_SOFTMAX_MISTAKES = variants(_planted_log_softmax, [
    ("naive", {"shift": "nothing"}, _OVERFLOW_1, _OVERFLOW_2),
    ("naive", {"shift": "nothing", "form": "log of weights"}, _OVERFLOW_1,
     "you took the log of the naive softmax: e to the power 1000 is inf in float32, and inf / inf is NaN. "
     "Subtracting the row maximum fixes the overflow, but read on: the log of a weight has a second "
     "trap."),
    ("log-of-weights", {"form": "log of weights"},
     "in the row [0, −200, 5, 1] the score −200 should give log p ≈ −205; yours gives −inf. What happens "
     "in your code to a weight that is too small for float32?",
     "you took the logarithm of the weights. A weight below about 1e-45 rounds to 0 in float32 (below "
     "about 6e-8 in float16), and log 0 is −inf, although log p itself is an ordinary number. Stay in the "
     "log domain: subtract the logarithm of the row's exponential sum from the shifted scores, and never "
     "divide."),
    ("subtract-min", {"shift": "row min"},
     "the row [50, −100, 0, 10] gives an answer that is not finite. After your shift, how large is the "
     "largest exponent?",
     "you subtracted the row minimum, so every exponent is ≥ 0 and a wide row still overflows (e¹⁵⁰ is inf "
     "in float32). Subtract the row maximum: every exponent is then ≤ 0 and the largest term is e⁰ = 1."),
    ("global-max", {"shift": "global max"},
     "some rows come out right and others are not finite. Is the number you subtract the maximum of each "
     "row, or of something larger?",
     "you subtracted the maximum of the whole tensor, not of each row. A row whose scores all lie far "
     "below it underflows to zeros, and the log of their sum is −inf. Take each row's own maximum."),
    ("wrong-axis", {"dim": -2}, _AXIS_1, _AXIS_2),
    ("wrong-axis", {"dim": 0}, _AXIS_1, _AXIS_2),
    ("wrong-axis", {"dim": 1}, _AXIS_1, _AXIS_2),
    ("no-keepdim", {"shift": "row max, axis dropped"},
     "your function fails on a table of scores: the shapes in one of your subtractions do not line up. "
     "What shape does a maximum or a sum over the last axis have, and how does it broadcast against the "
     "scores?",
     "a reduction over the last axis drops that axis: (3, 5) becomes (3,), and (3,) broadcasts along the "
     "last axis, not along the rows. Keep the reduced axis, with size 1, so that each row's maximum (and "
     "each row's sum) lines up with its own row."),
    ("max-dropped", {"add_back": False},
     "your answer is finite, but exp of it does not sum to 1 along a row, and it is off by more the larger "
     "the row's top score. Is every part of the log-sum-exp in your formula?",
     "you took the maximum m out of the sum but did not put it back: log Σ_j e^{z_j} = m + "
     "log Σ_j e^{z_j − m}. Your answer is too large by the row maximum."),
    ("weights", {"form": "weights"},
     "your values lie between 0 and 1 and sum to 1 along a row: those are the weights themselves. What "
     "sign does the logarithm of a weight have?",
     "you returned softmax(z). This function returns its natural logarithm (every entry ≤ 0), computed "
     "without forming the weights first."),
    ("not-normalised", {"form": "shifted"},
     "your answer is 0 at each row's top score and negative elsewhere, but exp of it does not sum to 1. "
     "What is missing to make it a log-probability?",
     "you returned the shifted scores only. A log-probability also subtracts the logarithm of the row's "
     "sum of exponentials (of the shifted scores)."),
])

_LOG_SOFTMAX_DTYPE = Mistake(
    "dtype",
    "your values are right, but for {want} scores your answer comes back as {got}. Where does another "
    "dtype enter your computation: a tensor you create, a cast, a constant?",
    more="for {want} scores your answer is {got}. A cast of the scores (to float32, say, for accuracy) "
         "must be undone before returning, and a tensor created without a dtype is float32: mixed with "
         "float16 it turns the result into float32. The caller gets back the dtype it gave.")


@checker(mistakes=[*_LOG_SOFTMAX_MISTAKES, _LOG_SOFTMAX_DTYPE, MIXED_DTYPES])
def check_log_softmax(fn) -> Verdict:
    """Check ``fn(z)``: log softmax(z) along the last axis of z (..., n), finite, in the dtype of z."""
    groups = _log_softmax_groups()
    return judge(fn, groups, _log_softmax_reference, _LOG_SOFTMAX_MISTAKES,
                 diagnose=_dtype_diagnosis(fn, groups, _log_softmax_reference, _LOG_SOFTMAX_DTYPE),
                 success="log softmax along the last axis, finite on [1000, 999, 998, 997] and on a score "
                         "200 below its row's top, in float16, float32 and float64.")


# ------------------------------------------------------------------------------------------------
# Build: one causal head in the sequence-first layout (T, B, d).

def _seq_first_groups() -> list[Group]:
    g = _gen(5)

    def qkv(T: int, B: int, d_k: int, d_v: int, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(T, B, d, generator=g).to(dtype) for d in (d_k, d_k, d_v))

    # First T = B = d_k = d_v, where the batch taken for the positions, an output left batch-first, the
    # weights times K and a scale by √T all have the right shape; then T ≠ B ≠ d_k ≠ d_v, float64 and float16.
    return [Group([qkv(4, 4, 4, 4), qkv(5, 2, 4, 3), qkv(7, 3, 8, 2)], 1e-5),
            Group([qkv(6, 2, 5, 3, torch.float64)], 1e-10),
            Group([qkv(5, 3, 4, 4, torch.float16)], 1e-2)]


def _seq_first_reference(Q, K, V) -> torch.Tensor:
    Qb, Kb, Vb = (x.transpose(0, 1).double() for x in (Q, K, V))
    return attention(Qb, Kb, Vb).transpose(0, 1).to(Q.dtype)


def _planted_seq_first(Q, K, V, *, positions: int = 0, restore: bool = True, divisor: str = "√d_k",
                       mask: str = "add", dim: int = -1, mixed: str = "V") -> torch.Tensor:
    """The head in the (T, B, d) layout with a planted slip; the defaults compute it. ``positions`` is the axis
    taken for the positions (1: the batch axis, so the B sequences of one position attend to each other);
    ``restore`` = False returns the output batch-first; ``divisor`` is "√d_k", "√T" or "1"; ``mask`` is "add"
    (before softmax), "after" (future weights zeroed after softmax) or "none"; ``mixed`` is "V" or "K"."""
    if positions == 0:
        Q, K, V = (x.transpose(0, 1) for x in (Q, K, V))             # (B, T, d)
    T, d_k = Q.shape[-2], Q.shape[-1]
    Z = Q @ K.transpose(-2, -1) / {"√d_k": math.sqrt(d_k), "√T": math.sqrt(T), "1": 1.0}[divisor]
    if mask == "add":
        P = softmax(Z + causal_mask(T, dtype=Z.dtype), dim=dim)
    elif mask == "after":
        P = softmax(Z, dim=dim) * torch.ones(T, T, dtype=torch.bool).tril()
    else:
        P = softmax(Z, dim=dim)
    out = P @ (K if mixed == "K" else V)
    return out.transpose(0, 1) if positions == 0 and restore else out


_SEQ_FIRST_MISTAKES = variants(_planted_seq_first, [
    ("batch-as-positions", {"positions": 1},
     "your output has the right shape, but its numbers mix the sequences of the batch: does sequence 0's "
     "output change when you change only sequence 1? In this layout, which axis counts the positions?",
     "your score table compares the B sequences at one position with each other: you treated axis 0 as the "
     "batch and axis 1 as the positions. Here axis 0 holds the positions and axis 1 the batch. Bring the "
     "batch to the front (or contract over d only), build one T × T table per sequence, and put the axes "
     "back at the end."),
    ("not-restored", {"restore": False},
     "your numbers are right but arrive in the layout (B, T, d_v). In which layout did the caller hand "
     "you Q, K and V, and in which one does it expect the output?",
     "you returned the output batch-first. The caller works positions-first: swap the batch and position "
     "axes back before returning, so the result is (T, B, d_v)."),
    ("times-K", {"mixed": "K"},
     "which tensor carries the information that is mixed, and which one only takes part in the match? "
     "When d_k = d_v nothing fails, the numbers are simply wrong.",
     "you multiplied the weights by K. K only computes the match (the scores); the information mixed into "
     "each output is V."),
    ("no-scale", {"divisor": "1"},
     "your weights are more peaked than they should be. Which step between the scores and softmax is "
     "missing?",
     "you did not scale the scores: divide them by the square root of d_k, the width of a query, before "
     "the mask and softmax."),
    ("scale-by-T", {"divisor": "√T"},
     "your scale agrees with the right one only when T = d_k. Which width does the scale come from?",
     "you divided the scores by √T (the number of positions). The scale is √d_k, the width of a query and "
     "a key vector, the last axis of Q."),
    ("no-mask", {"mask": "none"},
     "does output i read only the values of positions 0…i? Change the value of the last position and "
     "look at output 0.",
     "you left out the causal mask: every position reads its future. Add M (0 on and below the diagonal, "
     "−inf above it) to the scaled scores before softmax."),
    ("after-softmax", {"mask": "after"},
     "do your weights still sum to 1 along each row? Where in the computation does the mask act?",
     "you zeroed the future weights after softmax, so each row sums to less than 1. The mask is added to "
     "the scores before softmax."),
    ("wrong-axis", {"dim": -2},
     "do the weights of one query (one row of the score table) sum to 1?",
     "your softmax ran over the query axis. Each query's row of weights, over its keys (the last axis of "
     "the score table), must sum to 1."),
])

_SEQ_FIRST_DTYPE = Mistake(
    "dtype",
    "your values are right, but for {want} inputs your output is {got}. Which tensor in your computation "
    "is created in another dtype, and what happens when it meets the scores?",
    more="for {want} inputs your output is {got}. A tensor created without a dtype (a mask of 0 and −inf, "
         "say) is float32, and float16 with float32 gives float32, so everything after it runs in float32. "
         "Create such a tensor in the dtype (and on the device) of the scores.")


_BATCH_AS_POSITIONS = _SEQ_FIRST_MISTAKES[0]


def _seq_first_diagnosis(fn, groups: list[Group]):
    """The dtype diagnosis, and one more: the batch axis taken for the positions with the mask built T × T.

    Such an answer equals the planted "batch-as-positions" where T = B and raises (a T × T mask meets a B × B
    table) where T ≠ B, so the table, which needs a match on every case, cannot name it.
    """
    dtype = _dtype_diagnosis(fn, groups, _seq_first_reference, _SEQ_FIRST_DTYPE)

    def diagnose(verdict: Verdict, results) -> Verdict | None:
        found = dtype(verdict, results)
        if found is not None or verdict.mistake not in ("values", "error"):
            return found
        square = False
        tolerance = {id(case): g.atol for g in groups for case in g.cases}
        for case, got, error in results.outputs():
            is_square = case[0].shape[0] == case[0].shape[1]
            if error is not None:   # where T ≠ B this answer raises
                if is_square:
                    return None
                continue
            if not _close(got, _BATCH_AS_POSITIONS.wrong(*copy.deepcopy(case)), tolerance[id(case)]):
                return None
            square = square or is_square
        return named(_BATCH_AS_POSITIONS) if square else None
    return diagnose


@checker(mistakes=[*_SEQ_FIRST_MISTAKES, _SEQ_FIRST_DTYPE, MIXED_DTYPES])
def check_attention_output(fn) -> Verdict:
    """Check ``fn(Q, K, V)``: Q, K (T, B, d_k), V (T, B, d_v) → softmax(Q Kᵀ/√d_k + M) V as (T, B, d_v)."""
    groups = _seq_first_groups()
    return judge(fn, groups, _seq_first_reference, _SEQ_FIRST_MISTAKES,
                 diagnose=_seq_first_diagnosis(fn, groups),
                 success="one causal head in the (T, B, d) layout, for T = B = d_k = d_v = 4, for T ≠ B with "
                         "d_k ≠ d_v, and in float16, float32 and float64.")


# ------------------------------------------------------------------------------------------------
# Extend: the Jacobian of softmax, checked against autograd.

def _jacobian_groups() -> list[Group]:
    g = _gen(506)
    f32 = [
        (torch.randn(5, generator=g) * 2,),                             # one row, odd n
        # a batch: an ordinary row, a saturated one (one score far above the rest: J ≈ 0) and one whose
        # exp() overflows unless the maximum is subtracted
        (torch.stack([torch.randn(4, generator=g), torch.tensor([12.0, 0.0, -1.0, 1.0]),
                      torch.tensor([1000.0, 999.0, 998.0, 997.0])]),),
    ]
    # float64, two batch axes, and a row that overflows float64's exp() unless the maximum is subtracted
    z64 = torch.randn(2, 2, 3, generator=g, dtype=torch.float64)
    z64[1, 0] = torch.tensor([800.0, 799.0, 0.0], dtype=torch.float64)
    return [Group(f32, 1e-5), Group([(z64,)], 1e-10)]


def _jacobian_reference(z: torch.Tensor) -> torch.Tensor:
    """Autograd, one row at a time, in float64, returned in the dtype of z: (..., n) → (..., n, n)."""
    rows = z.detach().double().reshape(-1, z.shape[-1])
    J = [torch.autograd.functional.jacobian(lambda r: torch.softmax(r, dim=-1), r) for r in rows]
    return torch.stack(J).reshape(*z.shape, z.shape[-1]).to(z.dtype)


def _outer(p: torch.Tensor) -> torch.Tensor:
    return p[..., :, None] * p[..., None, :]


def _naive(z: torch.Tensor) -> torch.Tensor:
    return z.exp() / z.exp().sum(dim=-1, keepdim=True)


def _unbatched(z: torch.Tensor) -> torch.Tensor:
    p = softmax(z)
    return torch.diag(p) - torch.outer(p, p)       # fails for a batch (z of 2 axes or more)


def _unbatched_broadcast(z: torch.Tensor) -> torch.Tensor:
    p = softmax(z)
    return torch.diag(p) - p[:, None] * p[None, :]  # fails for a batch too, with another message


def _planted_jacobian(z: torch.Tensor, *, stable: bool = True, diag: bool = True, outer: bool = True,
                      sign: int = 1) -> torch.Tensor:
    """J = diag(p) − p pᵀ with a planted slip; the defaults compute it. ``diag`` and ``outer`` keep its two
    terms, ``sign`` = -1 flips it, and ``stable`` = False computes p without subtracting the row maximum."""
    p = softmax(z) if stable else _naive(z)
    return sign * ((torch.diag_embed(p) if diag else 0) - (_outer(p) if outer else 0))


_NOT_BATCHED_2 = ("torch.diag and torch.outer (and indexing with a single None per side) handle one vector "
                  "of scores only. Build both terms so that they broadcast over the leading axes: a batched "
                  "diagonal embedding of p, and p as a column times p as a row along the last two axes.")

_JACOBIAN_MISTAKES = variants(_planted_jacobian, [
    ("missing-outer", {"outer": False},
     "your J is zero off the diagonal, and its rows do not sum to 0. Adding the same number to every score "
     "changes no weight, so what must each row of J sum to? Does raising one score leave the other weights "
     "alone?",
     "you returned the diagonal of p only. Every p_i depends on every z_j through the sum in its "
     "denominator, so ∂p_i/∂z_j = −p_i p_j for i ≠ j, and the diagonal loses p_i² as well: subtract the "
     "outer product of p with itself."),
    ("missing-diag", {"diag": False},
     "on the diagonal, raising z_i must raise p_i: is your ∂p_i/∂z_i positive?",
     "you kept only the term that comes from the denominator. The numerator e^{z_i} depends on z_i too, "
     "which adds p_i on the diagonal: ∂p_i/∂z_i = p_i − p_i²."),
    ("sign", {"sign": -1},
     "your diagonal is negative: in your J, raising z_i lowers p_i. Which of the two terms carries which "
     "sign?",
     "both of your terms have the wrong sign: the diagonal term p_i is added, the product p_i p_j is "
     "subtracted."),
    ("naive-softmax", {"stable": False},
     "for the row of scores near 1000 your J holds NaN. What is e to the power 1000 in float32?",
     "your formula is right but p overflowed: e to the power 1000 is inf in float32 (and e⁸⁰⁰ in float64), "
     "and inf / inf is NaN. Compute p with the stable softmax of this chapter, which subtracts the row "
     "maximum, before building J."),
]) + [
    Mistake("diagonal-only",
            "your diagonal is right, but the entries off it are 0. Raising one score: does it leave the other "
            "weights unchanged, when all of them must still sum to 1?",
            lambda z: torch.diag_embed(softmax(z) * (1 - softmax(z))),
            "you kept only the diagonal p_i (1 − p_i). The off-diagonal entries ∂p_i/∂z_j = −p_i p_j are not "
            "zero: raising one score lowers every other weight."),
    Mistake("not-batched",
            "your function works for one row of scores but not for a batch (…, n). Which of the functions "
            "you call takes only a single vector?",
            _unbatched, _NOT_BATCHED_2),
    Mistake("not-batched",
            "your function works for one row of scores but not for a batch (…, n). Which of your steps "
            "assumes that p has a single axis?",
            _unbatched_broadcast, _NOT_BATCHED_2),
]

_JACOBIAN_DTYPE = Mistake(
    "dtype",
    "your values are right, but for {want} scores your J is {got}. Which tensor do you create, and in "
    "which dtype?",
    more="for {want} scores your J is {got}. A tensor created without a dtype (zeros to fill in, an "
         "identity matrix) is float32, and numbers written into it are rounded to float32. Create it in the "
         "dtype of z, or build J from p alone.")


@checker(mistakes=[*_JACOBIAN_MISTAKES, _JACOBIAN_DTYPE, MIXED_DTYPES])
def check_softmax_jacobian(fn) -> Verdict:
    """Check ``fn(z)``: z (..., n) → J (..., n, n) with J[..., i, j] = ∂p_i/∂z_j for p = softmax(z)."""
    groups = _jacobian_groups()
    return judge(fn, groups, _jacobian_reference, _JACOBIAN_MISTAKES,
                 diagnose=_dtype_diagnosis(fn, groups, _jacobian_reference, _JACOBIAN_DTYPE),
                 success="your J matches autograd on one row of 5 scores, on a batch with a saturated row "
                         "and a row of scores near 1000, and in float64 with two batch axes.")


# ------------------------------------------------------------------------------------------------
# Find the bug: an einsum head whose last line sums over the query index (out = Pᵀ V).

def _head_groups() -> list[Group]:
    g = _gen(5)

    def qkv(B: int, T: int, d_k: int, d_v: int, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
        return (torch.randn(B, T, d_k, generator=g, dtype=dtype), torch.randn(B, T, d_k, generator=g, dtype=dtype),
                torch.randn(B, T, d_v, generator=g, dtype=dtype))

    # First T = d_k = d_v, where weights · K, Qᵀ K and a scale by √T all run silently with the right shape;
    # then an odd T with T ≠ d_k ≠ d_v, a batch, and float64.
    return [Group([qkv(2, 6, 6, 6), qkv(1, 5, 4, 3), qkv(2, 7, 8, 2)], 1e-5),
            Group([qkv(2, 5, 3, 4, torch.float64)], 1e-10)]


def _head_reference(Q, K, V) -> torch.Tensor:
    return attention(Q, K, V)


_GIVEN = "bij,bid->bjd"   # the last line of the head as given: it sums P over the query index i


def _einsum_head(Q, K, V, *, scores: str = "bid,bjd->bij", dim: int = -1, mask: str = "causal",
                 mix: str = "bij,bjd->bid", mixed: str = "V") -> torch.Tensor:
    """The einsum head with a planted slip; the defaults compute it. ``scores`` and ``mix`` are its two einsum
    specs, ``dim`` the axis of softmax, ``mask`` "causal", "transposed" (−inf below the diagonal) or "none",
    ``mixed`` the tensor mixed ("V" or "K")."""
    T = Q.shape[-2]
    Z = torch.einsum(scores, Q, K) / math.sqrt(Q.shape[-1])
    M = {"causal": causal_mask(T), "transposed": causal_mask(T).T, "none": torch.zeros(T, T)}[mask]
    P = softmax(Z + M.to(Z.dtype), dim=dim)
    return torch.einsum(mix, P, K if mixed == "K" else V)


_FIXED_HEAD_MISTAKES = variants(_einsum_head, [
    ("unchanged", {"mix": _GIVEN},
     "this is still the function as given: it runs and has the right shape, yet output 0 changes when the "
     "value of the last position changes. Find the line that lets an early output read a late value.",
     "the last line sums P over its first index, the query i, and keeps the key index j: output j becomes "
     "a mix of the values weighted by column j of P, so early outputs read late values. Output i must mix "
     "the values with row i of P, summing over the key index."),
    ("mask-transposed", {"mask": "transposed", "mix": _GIVEN},
     "now no output reads a later value, yet the numbers are wrong. Along which axis does softmax make P "
     "sum to 1, and along which axis does the last line sum P?",
     "you moved the mask to the other triangle and kept the last line. Output j is now a mix weighted by "
     "column j of P, whose entries come from different queries' rows and do not sum to 1, and each query "
     "reads only the keys after it. Keep the causal mask as it was; the bug is the index the last line "
     "sums over."),
    ("transposed-scores", {"scores": "bid,bjd->bji", "mix": _GIVEN},
     "is entry [b, i, j] of the score table still query i against key j? Early outputs still read late "
     "values.",
     "you swapped the axes of the score table instead of fixing the last line, so the mask and softmax act "
     "on the wrong axes. The first line was right (row i = query i); the bug is the index the last line "
     "sums over."),
    ("softmax-over-queries", {"dim": -2, "mix": _GIVEN},
     "do the weights of one query still sum to 1? Early outputs still read late values.",
     "you moved softmax to the query axis instead of fixing the last line. Each query's row of weights "
     "must sum to 1; the bug is in the sum over V."),
    ("column-sum", {"mix": "bij,bjd->bjd"},
     "each of your outputs is a multiple of one value vector only. Which index of P should the sum run "
     "over, and which one should the output keep?",
     "your last line keeps the key index j on both sides and sums P over i, so value j is only scaled by "
     "the sum of column j. Output i keeps the query index i and sums over the key index j."),
    ("times-K", {"mixed": "K"},
     "which tensor carries the information that is mixed, and which one only takes part in the match?",
     "you now mix K instead of V. K only computes the match; the information mixed is V."),
    ("no-mask", {"mask": "none"},
     "the mask was right. Does every output still read only the positions up to its own?",
     "you removed the causal mask. Keep it, and look at which index the last line sums over."),
])


@checker(mistakes=[*_FIXED_HEAD_MISTAKES, _SEQ_FIRST_DTYPE, MIXED_DTYPES])
def check_fixed_head(fn) -> Verdict:
    """Check the repaired head ``fn(Q, K, V)``: Q, K (B, T, d_k), V (B, T, d_v) → (B, T, d_v)."""
    groups = _head_groups()
    return judge(fn, groups, _head_reference, _FIXED_HEAD_MISTAKES,
                 diagnose=_dtype_diagnosis(fn, groups, _head_reference, _SEQ_FIRST_DTYPE),
                 success="output i now mixes the values of positions 0…i with row i of P, for T = d_k = d_v "
                         "= 6, T = 5, T = 7, and in float64.")
