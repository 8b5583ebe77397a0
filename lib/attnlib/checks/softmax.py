"""Exercise checkers for the softmax chapter (chapter 5).

``check_log_softmax(fn)``: ``fn(z)``, z (..., n) → log softmax(z) along the last axis, finite, in the dtype of z.
``check_temperature(value)``: a predicted τ at which softmax([5.2, 0.3, 2.1] / τ) gives ' cat' twice the weight of
' chase'.
``check_top_k_attention(fn)``: ``fn(Z, V, k)``, Z (..., T_q, T_k), V (..., T_k, d_v) → (..., T_q, d_v), each query
reading its n_top best keys, softmax over those alone.
``check_fixed_head(fn)``: ``fn(Q, K, V)``, Q, K (B, T, d_k), V (B, T, d_v) → softmax(Q Kᵀ / √d_k + M) V, the einsum
head of the "find the bug" exercise, repaired.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask, softmax
from ._core import Group, Guess, Mistake, Verdict, _dtype_name, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_log_softmax", "check_temperature", "check_top_k_attention", "check_fixed_head"]


MIXED_DTYPES = Mistake(
    "mixed-dtypes", "for {want} inputs your function stops with an error about dtypes: two of your tensors meet with "
    "different dtypes. Which tensor do you create yourself, and in which dtype is it made?",
    more="for {want} inputs two of your tensors have different dtypes. A tensor created without a dtype (a mask, "
         "zeros to fill in) is float32: create it in the dtype (and on the device) of the inputs.")


def _mixed_dtypes(verdict: Verdict, results) -> Verdict | None:
    """A ``diagnose``: an error only on float16 or float64 inputs, every float32 case right."""
    raised = [(case, e) for case, _, e in results.outputs() if e is not None] if verdict.mistake == "error" else []
    if not raised or any(case[0].dtype == torch.float32 for case, _ in raised):
        return None
    if all(results.right(case) for case, _ in results.cases if case[0].dtype == torch.float32):
        case, e = raised[0]
        return named(MIXED_DTYPES, f" (your function raised {type(e).__name__}: {e})", want=_dtype_name(case[0].dtype))
    return None


# --- build: a stable log-softmax --------------------------------------------------------------------------------------

def _log_softmax_groups() -> list[Group]:
    g = _gen(505)
    f32 = [(torch.randn(3, 5, generator=g) * 3,),
        # row 0 overflows exp() unless the maximum is subtracted, row 1 if the minimum is; row 2's weight of −200
        # underflows to 0 (log 0 = −inf), while log p ≈ −205 is an ordinary number
        (torch.tensor([[1000.0, 999.0, 998.0, 997.0], [50.0, -100.0, 0.0, 10.0], [0.0, -200.0, 5.0, 1.0]]),),
        (torch.randn(2, 3, 4, generator=g) * 3,),                    # a batch: the last axis, not the second
    ]
    # float64 overflows past e^709.8, underflows below e^-745; float16 overflows past e^11.1, underflows below e^-16.6
    f64 = [(torch.tensor([[0.0, -800.0, 3.0, 1.0], [720.0, 719.0, 718.0, 0.0]], dtype=torch.float64),)]
    f16 = [(torch.tensor([[12.0, 11.0, 10.0, 9.0], [0.0, -20.0, 3.0, 1.0]], dtype=torch.float16),)]
    return [Group(f32, 1e-4), Group(f64, 1e-9), Group(f16, 0.05)]


def _log_softmax_reference(z: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(z.double(), dim=-1).to(z.dtype)


def _planted_log_softmax(z: torch.Tensor, *, shift: str = "row max", dim: int = -1, form: str = "log domain",
                         add_back: bool = True) -> torch.Tensor:
    """log softmax(z) with a planted slip; the defaults compute it."""
    m = {"row max": lambda: z.amax(dim=dim, keepdim=True),
         "row max, axis dropped": lambda: z.amax(dim=dim),     # (...,) does not line up with (..., n)
         "row min": lambda: z.amin(dim=dim, keepdim=True),
         "global max": z.max, "nothing": lambda: torch.zeros((), dtype=z.dtype)}[shift]()
    zs = z - m
    e = zs.exp()
    s = e.sum(dim=dim, keepdim=True)
    return {"weights": e / s, "log of weights": (e / s).log(), "shifted": zs, "divided": zs / s.log(),
            "log domain": zs - s.log() + (0 if add_back else m)}[form]


_OVERFLOW_1 = "on the row [1000, 999, 998, 997] your answer is not finite. Which of your numbers is too large?"
_OVERFLOW_2 = ("e¹⁰⁰⁰ is inf in float32 (e¹² already is in float16). Take each row's maximum out before "
               "exponentiating, and put it back outside the logarithm.")
_AXIS_1 = "does exp of your answer sum to 1 over each row? Along which axis did you take the maximum and the sum?"
_AXIS_2 = "a row of scores lies along the last axis, however many axes come before it: reduce along it."

_LOG_SOFTMAX_MISTAKES = variants(_planted_log_softmax, [
    ("naive", {"shift": "nothing"}, _OVERFLOW_1, _OVERFLOW_2),
    ("naive", {"shift": "nothing", "form": "log of weights"}, _OVERFLOW_1,
     "e¹⁰⁰⁰ is inf in float32, and inf / inf is NaN. Subtracting the row maximum fixes that, but the log of a "
     "weight has a second trap."),
    ("log-of-weights", {"form": "log of weights"},
     "the score −200 in [0, −200, 5, 1] should give log p ≈ −205; yours is −inf. What happens to a tiny weight?",
     "a weight below about 1e-45 rounds to 0 in float32, and log 0 = −inf. Stay in the log domain: subtract "
     "the log of the row's exponential sum from the shifted scores, never divide."),
    ("subtract-min", {"shift": "row min"},
     "the row [50, −100, 0, 10] gives an answer that is not finite. After your shift, how large is the largest "
     "exponent?",
     "after subtracting the row minimum every exponent is ≥ 0, so a wide row still overflows. Subtract the row "
     "maximum: every exponent is then ≤ 0."),
    ("global-max", {"shift": "global max"},
     "some rows are right and others not finite. Is your shift the maximum of each row, or of more?",
     "you subtracted the maximum of the whole tensor: a row far below it underflows to zeros, whose log is −inf. "
     "Take each row's own maximum."),
    *(("wrong-axis", {"dim": dim}, _AXIS_1, _AXIS_2) for dim in (-2, 0, 1)),
    ("no-keepdim", {"shift": "row max, axis dropped"},
     "the shapes in one of your subtractions do not line up. What shape has a maximum over the last axis?",
     "a reduction drops its axis: (3, 5) becomes (3,), which broadcasts along the last axis, not the rows. Keep "
     "the reduced axis with size 1."),
    ("max-dropped", {"add_back": False},
     "exp of your answer does not sum to 1, off by more the larger the row's top score. Is all of the "
     "log-sum-exp there?",
     "you took the maximum m out of the sum without putting it back: log Σ_j e^{z_j} = m + log Σ_j e^{z_j − m}."),
    ("weights", {"form": "weights"},
     "your values lie between 0 and 1 and sum to 1: those are the weights. What sign has a weight's logarithm?",
     "you returned softmax(z); this function returns its natural logarithm (every entry ≤ 0), without forming "
     "the weights first."),
    ("not-normalised", {"form": "shifted"},
     "your answer is 0 at each row's top score, but exp of it does not sum to 1. What is missing?",
     "you returned the shifted scores only; a log-probability also subtracts the log of the row's sum of "
     "exponentials."),
    ("divided", {"form": "divided"},
     "exp of your answer does not sum to 1. What does log(a / b) turn the division into?",
     "you divided by the log of the exponential sum; the log of a quotient is a difference."),
])


@checker(mistakes=[*_LOG_SOFTMAX_MISTAKES, MIXED_DTYPES])
def check_log_softmax(fn) -> Verdict:
    """Check ``fn(z)``: log softmax(z) along the last axis of z (..., n), finite, in the dtype of z."""
    return judge(fn, _log_softmax_groups(), _log_softmax_reference, _LOG_SOFTMAX_MISTAKES, diagnose=_mixed_dtypes,
                 success="log softmax along the last axis, finite on [1000, 999, 998, 997] and on a score "
                         "200 below its row's top, in float16, float32 and float64.")


# --- predict: the temperature at which ' cat' gets twice the weight of ' chase' ---------------------------------------

_WORKED = (5.2, 0.3, 2.1)            # the scaled scores of ' chase' on ' cat', ' the' and itself
_GAP = _WORKED[0] - _WORKED[2]       # 3.1: the gap that sets the ratio of the two weights


def _measured_temperature() -> float:
    """The τ at which ' cat' gets twice the weight of ' chase': e^(gap / τ) = 2 (tests/test_checks_softmax.py
    measures the ratio)."""
    return _GAP / math.log(2)


_TABLE_2 = "at τ = 2 the table above still gives ' cat' about 4.7 times the weight of ' chase'"

_TEMPERATURE_GUESSES = [
    Guess("linear", f"too low: {_TABLE_2}. Does the ratio grow in proportion to the gap, or faster?", _GAP / 2,
          more="too low: the ratio of the two weights is e to the power (gap / τ); a logarithm undoes it."),
    Guess("ratio-as-tau", f"too low: {_TABLE_2}. The 2 is a ratio of weights; how does τ produce it?", 2.0,
          more="too low: τ is not the ratio. The ratio is an exponential of the gap over τ; set it to 2 and solve."),
    Guess("times-log", f"too low: {_TABLE_2}. Solve your equation for τ again: where does ln 2 end up?",
          _GAP * math.log(2), more="too low: from gap / τ = ln 2 you multiplied the gap by ln 2 instead of dividing."),
    Guess("inverted", "too low: below τ = 1 the row is sharper than at τ = 1, where ' cat' already has 22 times "
          "the weight of ' chase'. Does τ multiply the scores or divide them?", math.log(2) / _GAP,
          more="too low: softmax receives z / τ, so a larger τ flattens the row; yours multiplies the scores."),
    Guess("gap-itself", "too low: at τ = 3.1, the gap itself, the ratio of the two weights is e ≈ 2.72, not 2.",
          _GAP, more="too low: a ratio of 2 needs the gap over τ to be ln 2 ≈ 0.69, so τ is larger than the gap."),
    Guess("read-table", "too low: at τ = 4 the table gives 0.570 / 0.263 ≈ 2.17, still above 2.", 4.0,
          more="too low: τ = 4 is the table's nearest row. The ratio depends on gap / τ alone: set it to 2, solve."),
    Guess("wrong-pair", "too high: at your τ, ' cat' has twice the weight of ' the', not of ' chase'.",
          (_WORKED[0] - _WORKED[1]) / math.log(2),
          more="too high: you used the gap between ' cat' and ' the'; the question compares ' cat' with ' chase'."),
    Guess("one-score", "too high: a ratio of two weights depends on both scores. Does yours use ' chase'?",
          _WORKED[0] / math.log(2), more="too high: you solved as if ' chase' scored 0; use the gap 5.2 − 2.1."),
    Guess("raw-scores", "too high: your gap is between the raw scores QKᵀ. Which scores does τ divide?",
          _GAP * math.sqrt(3) / math.log(2),
          more="too high: the raw scores are √d_k = √3 times the scaled ones; τ divides what softmax receives."),
    Guess("scaled-twice", "too low: 5.2 and 2.1 are already divided by √d_k. Did you divide by √3 again?",
          _GAP / math.sqrt(3) / math.log(2), more="too low by a factor √3: τ divides the scaled scores as they are."),
    Guess("log10", "too high: your logarithm is in base 10. Which one undoes the exponential in softmax?",
          _GAP / math.log10(2), more="too high by a factor ln 10 ≈ 2.3: softmax exponentiates with base e."),
    Guess("sign", "too low: a negative temperature reverses the order, giving ' chase' twice the weight of ' cat'.",
          -_GAP / math.log(2),
          more="too low: the right size with the wrong sign; a temperature is positive and keeps the order."),
]


@checker(kind="predict", mistakes=_TEMPERATURE_GUESSES)
def check_temperature(value) -> Verdict:
    """A predicted τ at which softmax([5.2, 0.3, 2.1] / τ) gives the first score twice the weight of the third."""
    return judge_number(value, _measured_temperature(), _TEMPERATURE_GUESSES, rtol=0.02,
                        success="the ratio of two weights is e to the power (gap / τ), whatever the other "
                                "scores: e^(3.1 / τ) = 2 gives τ = 3.1 / ln 2.")


# --- extend: each query reads its k best keys only --------------------------------------------------------------------

def _top_k_groups() -> list[Group]:
    g = _gen(507)

    def case(shape_z: tuple, d_v: int, k: int, dtype=torch.float32, causal: bool = False) -> tuple:
        Z = torch.randn(*shape_z, generator=g) * 2
        if causal:
            Z = Z + causal_mask(shape_z[-2], shape_z[-1])
        V = torch.randn(*shape_z[:-2], shape_z[-1], d_v, generator=g)
        return Z.to(dtype), V.to(dtype), k

    # T_q ≠ T_k, a batch, a causal table whose first rows see fewer than k keys, k = T_k, float64, float16;
    # k ≤ T_q everywhere, so that a top k taken down the columns runs as well
    return [Group([case((4, 6), 3, 2), case((2, 5, 7), 4, 3), case((1, 6, 6), 5, 3, causal=True),
                   case((2, 4, 4), 3, 4)], 1e-5),
            Group([case((2, 3, 5), 2, 2, torch.float64)], 1e-10),
            Group([case((1, 4, 6), 3, 2, torch.float16, causal=True)], 1e-2),
            Group([(torch.randn(2, 3, 4, generator=g).repeat_interleave(2, -1),   # every key twice (score and
                    torch.randn(2, 4, 2, generator=g).repeat_interleave(2, -2), 3)], 1e-5)]   # value): a tie at 3


def _top_k_reference(Z, V, k) -> torch.Tensor:
    Z64 = Z.double()
    kept = Z64 >= Z64.topk(k, dim=-1).values[..., -1:]
    return (torch.softmax(Z64.masked_fill(~kept, -math.inf), dim=-1) @ V.double()).to(Z.dtype)


def _planted_top_k(Z, V, k, *, keep: str = "top k", drop: str = "-inf", values: str = "all", dim: int = -1,
                   rescale: bool = False, nan: bool = True):
    """Top-k attention with a planted slip; the defaults compute it (``nan`` False zeroes NaN weights)."""
    Z = Z / math.sqrt(V.shape[-1]) if rescale else Z
    top = Z.topk(k, dim=-1)
    if drop == "scatter":
        return torch.softmax(torch.zeros_like(Z).scatter(-1, top.indices, top.values), dim=-1) @ V
    if values == "first k":
        return torch.softmax(top.values, dim=-1) @ V[..., :k, :]
    if values == "indexed":
        return (torch.softmax(top.values, dim=-1)[..., None] * V[top.indices]).sum(-2)
    if keep == "kthvalue":
        threshold = Z.kthvalue(k, dim=-1, keepdim=True).values
    elif keep == "columns":
        threshold = Z.topk(k, dim=-2).values[..., -1:, :]
    else:
        threshold = Z.topk(min(k + (keep == "k + 1"), Z.shape[-1]), dim=-1).values[..., -1:]
    kept = Z > threshold if keep == "k - 1" else Z >= threshold
    kept = kept.new_zeros(kept.shape).scatter(-1, top.indices, True) if keep == "indices" else kept
    if drop == "after":
        return torch.softmax(Z, dim=-1).masked_fill(~kept, 0.0) @ V
    Z = Z * kept if drop == "times" else Z.masked_fill(~kept, 0.0 if drop == "zero" else -math.inf)
    P = torch.softmax(Z, dim=dim)
    return (P if nan else P.nan_to_num()) @ V


_ZEROED = ("keys outside a row's n_top best still get weight. What weight does softmax give to a score of 0?",
           "a score of 0 is an ordinary score: e⁰ = 1, so those keys keep a share (and a key the causal mask "
           "blocked comes back). A removed key needs a score whose exponential is 0.")
_COLUMNS_1 = "does each query keep its own n_top best keys? Along which axis of Z did you pick the largest scores?"

_TOP_K_MISTAKES = variants(_planted_top_k, [
    ("not-renormalised", {"drop": "after"},
     "the kept weights of a row sum to less than 1. Do you remove the other keys before softmax, or after it?",
     "you zeroed the weights outside the n_top best after softmax. Remove those keys from the scores before softmax, "
     "as the causal mask does, so the n_top kept ones share the whole weight."),
    *(("zeroed-scores", {"drop": drop}, *_ZEROED) for drop in ("zero", "times", "scatter")),
    ("first-k-values", {"values": "first k"},
     "does each of your n_top weights multiply the value of its own key? The best keys are seldom the first n_top.",
     "you paired the n_top largest scores' weights with the values of positions 0 … n_top − 1. Each weight must meet "
     "its own key's value (the indices of the n_top best say which), or go back into a full row of T_k weights."),
    ("batch-indexed", {"values": "indexed"},
     "your function is right for one table (T_q, T_k) but not for a batch. Along which axis of V does your "
     "indexing pick?",
     "indexing V with positions picks along its first axis, which for a batch holds the sequences. Pick along "
     "the key axis (V's second-to-last), or put the n_top weights back into a full row."),
    ("kthvalue", {"keep": "kthvalue"},
     "your rows keep more than n_top keys when n_top is small. From which end is the n_top-th value counted?",
     "torch.kthvalue gives the n_top-th smallest value, so comparing with it keeps T_k − n_top + 1 keys. The "
     "n_top best end at the n_top-th largest."),
    ("ties-dropped", {"keep": "indices"}, "where a row's n_top-th best score is tied with another key's, yours "
     "keeps only one of them. Does a key that scores exactly as high as the n_top-th stay?", "keeping exactly "
     "n_top positions (their indices, or the first n_top after sorting) drops keys tied with the n_top-th, which "
     "the statement keeps: every score at least as large as the n_top-th largest stays."),
    ("k-minus-one", {"keep": "k - 1"},
     "each row keeps n_top − 1 keys. Is the n_top-th largest score itself among the kept ones?",
     "you kept only the scores strictly above the n_top-th largest, which dropped the n_top-th itself (and every key "
     "when n_top = 1)."),
    ("columns", {"keep": "columns"}, _COLUMNS_1,
     "you took the n_top largest scores of each column, the queries that match a key best. A query's scores lie "
     "along the last axis."),
    ("columns", {"keep": "columns", "nan": False}, _COLUMNS_1,
     "you took each column's n_top largest, so some rows kept no key (NaN weights set to 0 hide it): use the "
     "last axis."),
    ("scaled-twice", {"rescale": True}, "Z holds scores that are already scaled. Does your function divide them again?",
     "Z is already QKᵀ/√d_k; dividing again flattens every row. Use the scores as they come."),
    ("softmax-axis", {"dim": -2},
     "do one query's weights sum to 1 over its keys? Along which axis did your softmax run?",
     "your softmax ran over the queries, so each column sums to 1; each query's row over its keys must."),
]) + variants(_planted_top_k, [
    # named on the cases with k < T_k: with k = T_k there is no (k + 1)-th score, and the answer raises
    ("k-plus-one", {"keep": "k + 1"}, "each row keeps k + 1 keys. Which score is the k-th largest, counting from 1?",
     "your threshold is the (k + 1)-th largest score (with k = T_k there is none); the top k end at the k-th."),
], where=lambda case: case[2] < case[0].shape[-1])


@checker(mistakes=[*_TOP_K_MISTAKES, MIXED_DTYPES])
def check_top_k_attention(fn) -> Verdict:
    """``fn(Z, V, n_top)``: Z (..., T_q, T_k), V (..., T_k, d_v) → (..., T_q, d_v), each query reading its n_top
    best keys."""
    return judge(fn, _top_k_groups(), _top_k_reference, _TOP_K_MISTAKES, diagnose=_mixed_dtypes,
                 success="each query reads its n_top best keys and only them, with weights that sum to 1: for one "
                         "table, a batch, a causal table whose first rows see fewer than n_top keys, n_top = T_k, ties "
                         "at the n_top-th score, and in float16, float32 and float64.")


# --- find the bug: an einsum head whose last line sums over the query index (out = Pᵀ V) ------------------------------

def _head_groups() -> list[Group]:
    g = _gen(5)

    def qkv(B: int, T: int, d_k: int, d_v: int, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
        return (torch.randn(B, T, d_k, generator=g, dtype=dtype), torch.randn(B, T, d_k, generator=g, dtype=dtype),
                torch.randn(B, T, d_v, generator=g, dtype=dtype))

    # T = d_k = d_v, where weights · K, Qᵀ K and √T run silently; then T ≠ d_k ≠ d_v, a batch, float64
    return [Group([qkv(2, 6, 6, 6), qkv(1, 5, 4, 3), qkv(2, 7, 8, 2)], 1e-5),
            Group([qkv(2, 5, 3, 4, torch.float64)], 1e-10)]


_GIVEN = "bij,bid->bjd"   # the last line of the head as given: it sums P over the query index i


def _einsum_head(Q, K, V, *, scores: str = "bid,bjd->bij", dim: int = -1, mask: str = "causal",
                 mix: str = "bij,bjd->bid", mixed: str = "V", scale: str = "d_k") -> torch.Tensor:
    """The einsum head with a planted slip; the defaults compute it."""
    T = Q.shape[-2]
    Z = torch.einsum(scores, Q, K) / math.sqrt(Q.shape[-1] if scale == "d_k" else T)
    M = {"causal": causal_mask(T), "transposed": causal_mask(T).T, "none": torch.zeros(T, T)}[mask]
    P = softmax(Z + M.to(Z.dtype), dim=dim)
    return torch.einsum(mix, P, K if mixed == "K" else V).reshape(V.shape)


_STILL_GIVEN = "Early outputs still read late values."

_FIXED_HEAD_MISTAKES = variants(_einsum_head, [
    ("unchanged", {"mix": _GIVEN},
     "this is still the function as given: output 0 changes when the last position's value changes. Which line "
     "lets an early output read a late value?",
     "the last line sums P over its first index, the query i: output j mixes the values with column j of P. "
     "Output i must mix them with row i, summing over the key index."),
    ("mask-transposed", {"mask": "transposed", "mix": _GIVEN},
     "no output reads a later value now, yet the numbers are wrong. Along which axis does softmax make P sum "
     "to 1, and along which does the last line sum it?",
     "you moved the mask to the other triangle and kept the last line, whose columns of P do not sum to 1. Keep "
     "the causal mask; the bug is the index the last line sums over."),
    ("transposed-scores", {"scores": "bid,bjd->bji", "mix": _GIVEN},
     f"is entry [b, i, j] of the score table still query i against key j? {_STILL_GIVEN}",
     "you swapped the score table's axes, so the mask and softmax act on the wrong axes. The first line was "
     "right; the bug is the index the last line sums over."),
    ("softmax-over-queries", {"dim": -2, "mix": _GIVEN}, f"do the weights of one query still sum to 1? {_STILL_GIVEN}",
     "you moved softmax to the query axis instead of fixing the last line, the sum over V."),
    ("column-sum", {"mix": "bij,bjd->bjd"},
     "each output is a multiple of one value vector. Which index of P should the sum run over, and which stay?",
     "your last line keeps the key index j on both sides, so value j is only scaled. Output i keeps i and sums "
     "over j."),
    ("times-K", {"mixed": "K"},
     "which tensor carries the information that is mixed, and which only takes part in the match?",
     "you now mix K instead of V. K only computes the match; the information mixed is V."),
    ("no-mask", {"mask": "none"}, "the mask was right. Does every output still read only the positions up to its own?",
     "you removed the causal mask. Keep it, and look at which index the last line sums over."),
    ("own-value", {"mix": "bij,bid->bid"},
     "each output is the value of its own position, unchanged. Which index should the last line sum over?",
     "your last line sums P over j alone, and each row of P sums to 1, so output i is v_i. Sum over the index "
     "P and V share, the key j."),
    ("output-transposed", {"mix": "bij,bjd->bdi"},
     "the sum is right, but is your output laid out (B, T, d_v)? Which index comes last in your last einsum?",
     "your last line puts the position last, (B, d_v, T), and a reshape only regroups the numbers without "
     "moving an axis. Write the output indices as (b, i, d)."),
    ("scale-T", {"scale": "T"}, "the mixing is right now. By the square root of which size are the scores divided?",
     "you divide by √T, the number of positions; the scale is √d_k, the width of a query."),
])


@checker(mistakes=[*_FIXED_HEAD_MISTAKES, MIXED_DTYPES])
def check_fixed_head(fn) -> Verdict:
    """Check the repaired head ``fn(Q, K, V)``: Q, K (B, T, d_k), V (B, T, d_v) → (B, T, d_v)."""
    return judge(fn, _head_groups(), attention, _FIXED_HEAD_MISTAKES, diagnose=_mixed_dtypes,
                 success="output i now mixes the values of positions 0…i with row i of P, for T = d_k = d_v "
                         "= 6, T = 5, T = 7, and in float64.")
