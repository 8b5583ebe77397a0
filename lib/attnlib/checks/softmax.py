"""Exercise checkers for the softmax chapter (chapter 5).

``check_log_softmax(fn)``: ``fn(z)``, z (..., n) → log softmax(z) along the last axis, finite, in the dtype of z.
``check_temperature(value)``: a predicted τ at which softmax([5.2, 0.3, 2.1] / τ) gives ' cat' twice the weight of
' chase'.
``check_top_k_attention(fn)``: ``fn(Z, V, k)``, Z (..., T_q, T_k), V (..., T_k, d_v) → (..., T_q, d_v), each query
reading its k best keys, softmax over those alone.
``check_fixed_head(fn)``: ``fn(Q, K, V)``, Q, K (B, T, d_k), V (B, T, d_v) → softmax(Q Kᵀ / √d_k + M) V, the einsum
head of the "find the bug" exercise, repaired.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask, softmax
from ._core import (
    Group,
    Guess,
    Mistake,
    Verdict,
    _close,
    _dtype_name,
    _gen,
    checker,
    judge,
    judge_number,
    named,
    variants,
)

__all__ = ["check_log_softmax", "check_temperature", "check_top_k_attention", "check_fixed_head"]


MIXED_DTYPES = Mistake(
    "mixed-dtypes",
    "for {want} inputs your function stops with an error about dtypes: two of your tensors meet with "
    "different dtypes. Which tensor do you create yourself, and in which dtype is it made?",
    more="for {want} inputs two of your tensors have different dtypes. A tensor created without a dtype (a "
         "mask, zeros to fill in, an identity matrix) is float32; mixed with {want} inputs it turns a sum "
         "into another dtype, and a matrix product or einsum refuses the pair. Create it in the dtype (and on "
         "the device) of the inputs.")


def _mixed_dtypes(fn, reference):
    """A ``diagnose``: an error on float16 or float64 inputs whose float32 copies are right."""
    def diagnose(verdict: Verdict, results) -> Verdict | None:
        for case, _, error in results.outputs() if verdict.mistake == "error" else ():
            want = case[0].dtype
            if want == torch.float32 or error is None:
                continue
            as_float32 = tuple(x.float() if isinstance(x, torch.Tensor) else x for x in case)
            if _close(fn(*as_float32), reference(*as_float32), 1e-4):
                return named(MIXED_DTYPES, f" (your function raised {type(error).__name__}: {error})",
                             want=_dtype_name(want))
            return None
        return None
    return diagnose


# --- build: a stable log-softmax --------------------------------------------------------------------------------------

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
    """log softmax(z) with a planted slip; the defaults compute it. ``add_back`` False drops the maximum
    taken out of the log-sum-exp."""
    m = {"row max": lambda: z.amax(dim=dim, keepdim=True),
         "row max, axis dropped": lambda: z.amax(dim=dim),     # (...,) does not line up with (..., n)
         "row min": lambda: z.amin(dim=dim, keepdim=True),
         "global max": z.max, "nothing": lambda: torch.zeros((), dtype=z.dtype)}[shift]()
    zs = z - m
    e = zs.exp()
    s = e.sum(dim=dim, keepdim=True)
    return {"weights": e / s, "log of weights": (e / s).log(), "shifted": zs, "divided": zs / s.log(),
            "log domain": zs - s.log() + (0 if add_back else m)}[form]


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
    ("divided", {"form": "divided"},
     "exp of your answer does not sum to 1 along a row. log(a / b) turns the division into what?",
     "you divided the shifted scores by the logarithm of their exponential sum. The logarithm of a quotient "
     "is a difference: log p = (z − m) − log Σ_j e^{z_j − m}."),
])

@checker(mistakes=[*_LOG_SOFTMAX_MISTAKES, MIXED_DTYPES])
def check_log_softmax(fn) -> Verdict:
    """Check ``fn(z)``: log softmax(z) along the last axis of z (..., n), finite, in the dtype of z."""
    return judge(fn, _log_softmax_groups(), _log_softmax_reference, _LOG_SOFTMAX_MISTAKES,
                 diagnose=_mixed_dtypes(fn, _log_softmax_reference),
                 success="log softmax along the last axis, finite on [1000, 999, 998, 997] and on a score "
                         "200 below its row's top, in float16, float32 and float64.")


# --- predict: the temperature at which ' cat' gets twice the weight of ' chase' ---------------------------------------

_WORKED = (5.2, 0.3, 2.1)            # the scaled scores of ' chase' on ' cat', ' the' and itself
_GAP = _WORKED[0] - _WORKED[2]       # 3.1: the gap that sets the ratio of the two weights


def _measured_temperature(ratio: float = 2.0) -> float:
    """The τ at which softmax(z / τ) gives ' cat' ``ratio`` times the weight of ' chase', found by bisection."""
    z = torch.tensor(_WORKED, dtype=torch.float64)
    low, high = 0.01, 100.0           # the ratio falls from e^310 to about 1 as τ grows
    for _ in range(80):
        tau = (low + high) / 2
        p = torch.softmax(z / tau, dim=-1)
        low, high = (tau, high) if p[0] / p[2] > ratio else (low, tau)
    return (low + high) / 2


_TABLE_2 = "at τ = 2 the table above still gives ' cat' about 4.7 times the weight of ' chase'"

_TEMPERATURE_GUESSES = [
    Guess("linear",
          f"too low: {_TABLE_2}. How does the ratio of two weights grow with the gap between their scores: in "
          "proportion to it, or faster?", _GAP / 2,
          more="too low: you took the ratio of the two weights to be the gap over τ. Each weight is proportional "
               "to the exponential of its score over τ, so the ratio is an exponential of the gap over τ; a "
               "logarithm undoes it."),
    Guess("ratio-as-tau",
          f"too low: {_TABLE_2}. The 2 of a two-to-one split is a ratio of weights; how does τ produce it?", 2.0,
          more="too low: the temperature is not the ratio itself. The ratio of the two weights is an "
               "exponential of the gap between their scores divided by τ; set that equal to 2 and solve for τ."),
    Guess("times-log",
          f"too low: {_TABLE_2}. Solve your equation for τ once more: on which side does ln 2 end up?",
          _GAP * math.log(2),
          more="too low: from gap / τ = ln 2 you multiplied the gap by ln 2; τ is the gap divided by it."),
    Guess("inverted",
          "too low: below τ = 1 the row is sharper than at τ = 1, where ' cat' already has 22 times the weight "
          "of ' chase'. Does τ multiply the scores or divide them?", math.log(2) / _GAP,
          more="too low: your τ multiplies the scores. Softmax receives z / τ, so the gap that sets the ratio "
               "is 3.1 / τ, and a larger τ flattens the row."),
    Guess("gap-itself",
          "too low: at τ = 3.1, the gap itself, the ratio of the two weights is e ≈ 2.72, not 2.", _GAP,
          more="too low: at τ = 3.1 the gap over τ is 1 and the ratio is e. A ratio of 2 needs the gap over τ "
               "to be ln 2 ≈ 0.69, so τ is larger than the gap."),
    Guess("read-table",
          "too low: at τ = 4 the table above gives 0.570 / 0.263 ≈ 2.17, still above 2. The answer lies a "
          "little higher: can you find it exactly?", 4.0,
          more="too low: τ = 4 is the nearest row of the table, where the ratio is 2.17. The ratio depends on "
               "the gap over τ alone; set it equal to 2 and solve."),
    Guess("wrong-pair",
          "too high: at your τ, ' cat' has twice the weight of ' the', not of ' chase'. Which two scores set "
          "the ratio asked for?", (_WORKED[0] - _WORKED[1]) / math.log(2),
          more="too high: you used the gap 5.2 − 0.3 between ' cat' and ' the'. The question compares ' cat' "
               "(5.2) with ' chase' (2.1)."),
    Guess("one-score",
          "too high: a ratio of two weights depends on both of their scores. Does your number use the score "
          "of ' chase'?", _WORKED[0] / math.log(2),
          more="too high: you solved as if ' chase' scored 0. The ratio of the two weights depends on the gap "
               "between their scores, 5.2 − 2.1."),
    Guess("raw-scores",
          "too high: your gap is between the raw scores QKᵀ of the designed head. Which scores does the "
          "temperature divide?", _GAP * math.sqrt(3) / math.log(2),
          more="too high: you used the raw scores, √d_k = √3 times the scaled ones. The temperature divides "
               "the scaled scores, the numbers softmax receives: 5.2 for ' cat' and 2.1 for ' chase'."),
    Guess("scaled-twice",
          "too low: 5.2 and 2.1 are already divided by √d_k. Did you divide the gap by √3 once more?",
          _GAP / math.sqrt(3) / math.log(2),
          more="too low by a factor √3: the scores of the question are the scaled ones, what softmax receives. "
               "The temperature divides them as they are."),
    Guess("log10",
          "too high: your logarithm is in base 10. Which logarithm undoes the exponential inside softmax?",
          _GAP / math.log10(2),
          more="too high by a factor ln 10 ≈ 2.3: softmax exponentiates with base e, so the logarithm that "
               "undoes it is the natural one."),
    Guess("sign",
          "too low: a negative temperature reverses the order of the weights, so ' chase' would get twice the "
          "weight of ' cat'. Which weight is on top of your ratio?", -_GAP / math.log(2),
          more="too low: the right size with the wrong sign: you solved for ' chase' having twice the weight of "
               "' cat'. A temperature is positive and keeps the order of the scores."),
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
            Group([case((1, 4, 6), 3, 2, torch.float16, causal=True)], 1e-2)]


def _top_k_reference(Z, V, k) -> torch.Tensor:
    Z64 = Z.double()
    kept = Z64 >= Z64.topk(k, dim=-1).values[..., -1:]
    return (torch.softmax(Z64.masked_fill(~kept, -math.inf), dim=-1) @ V.double()).to(Z.dtype)


def _planted_top_k(Z, V, k, *, keep: str = "top k", drop: str = "-inf", values: str = "all", dim: int = -1,
                   rescale: bool = False, nan: bool = True):
    """Top-k attention with a planted slip; the defaults compute it. ``nan`` False zeroes a row of weights
    that comes out NaN."""
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
    if drop == "after":
        return torch.softmax(Z, dim=-1).masked_fill(~kept, 0.0) @ V
    Z = Z * kept if drop == "times" else Z.masked_fill(~kept, 0.0 if drop == "zero" else -math.inf)
    P = torch.softmax(Z, dim=dim)
    return (P if nan else P.nan_to_num()) @ V


_ZEROED_1 = ("keys outside a row's top k still get weight in your output. What weight does softmax give to a "
             "score of 0?")
_ZEROED_2 = ("you set the scores outside the top k to 0. A score of 0 is an ordinary score, not a removed one: "
             "e⁰ = 1, so those keys keep a share that depends on how 0 compares with the kept scores (and where "
             "the causal mask had blocked a key, a future key comes back, or a NaN appears). A removed key needs a "
             "score whose exponential is 0.")

_TOP_K_MISTAKES = variants(_planted_top_k, [
    ("not-renormalised", {"drop": "after"},
     "the weights your output uses do not sum to 1 in a row: the k kept keys share less than the whole "
     "weight. Where do you remove the other keys: before softmax, or after it?",
     "you ran softmax over every key and then set the weights outside the top k to 0, so each row's kept "
     "weights sum to less than 1. Remove the other keys from the scores before softmax, as the causal mask "
     "is, so that softmax shares the whole weight among the k kept ones."),
    ("zeroed-scores", {"drop": "zero"}, _ZEROED_1, _ZEROED_2),
    ("zeroed-scores", {"drop": "times"}, _ZEROED_1, _ZEROED_2),
    ("zeroed-scores", {"drop": "scatter"}, _ZEROED_1, _ZEROED_2),
    ("first-k-values", {"values": "first k"},
     "does each of your k weights multiply the value of its own key? The k best keys of a row are seldom "
     "the first k positions.",
     "you paired the weights of the k largest scores with the values of positions 0 … k − 1. The weights "
     "come sorted by score, and their keys sit anywhere in the row: each weight must meet the value of its "
     "own key (the indices of the top k say which), or put the k weights back into a full row of T_k "
     "weights, zero elsewhere, and mix all of V."),
    ("batch-indexed", {"values": "indexed"},
     "your function is right for one table of scores (T_q, T_k) but not for a batch (B, T_q, T_k). When V "
     "has a batch axis, along which of its axes does indexing with the top-k positions pick?",
     "indexing V with a tensor of positions picks along V's first axis. For one table that axis holds the "
     "keys; for a batch it holds the sequences, so key positions are read as sequence numbers. Pick along "
     "the key axis of each sequence (the second-to-last axis of V), or put the k weights back into a full "
     "row of T_k weights and mix all of V."),
    ("kthvalue", {"keep": "kthvalue"},
     "your rows keep the wrong number of keys: more than k when k is small. Counted from which end is the "
     "k-th value you compare the scores with?",
     "torch.kthvalue gives the k-th smallest value of a row, so comparing with it keeps the T_k − k + 1 "
     "largest scores. The top k are separated from the rest by the k-th largest score."),
    ("k-minus-one", {"keep": "k - 1"},
     "each of your rows keeps one key too few: k − 1 keys get weight where k should. Is the k-th largest "
     "score itself among the kept ones?",
     "you kept only the scores strictly above the k-th largest, so the k-th itself is dropped and k − 1 keys "
     "remain (none at all when k = 1). The k-th largest score belongs to the top k."),
    ("columns", {"keep": "columns"},
     "does each query keep its own k best keys? Along which axis of Z did you pick the largest scores?",
     "you took the k largest scores of each column: the k queries that match a key best. A row of Z holds one "
     "query's scores over all its keys, and the top k are taken along that last axis."),
    ("columns", {"keep": "columns", "nan": False},
     "does each query keep its own k best keys? Along which axis of Z did you pick the largest scores?",
     "you took the k largest scores of each column, so some rows kept no key at all (their NaN weights, set "
     "to 0, hide it). A row of Z holds one query's scores over all its keys: take the top k along it."),
    ("scaled-twice", {"rescale": True},
     "Z holds scores that are already scaled. Does your function divide them once more?",
     "Z is already QKᵀ/√d_k; dividing it again by a square root flattens every row of weights. Use the scores "
     "as they come."),
    ("softmax-axis", {"dim": -2},
     "do the weights of one query sum to 1 over its keys? Along which axis did your softmax run?",
     "your softmax ran over the query axis, so each column of weights sums to 1. Each query's row of weights, "
     "over its keys (the last axis), must."),
]) + variants(_planted_top_k, [
    # named on the cases with k < T_k: with k = T_k a threshold read one place too far down a sorted row
    # finds no score there, and the answer raises
    ("k-plus-one", {"keep": "k + 1"},
     "each of your rows keeps one key too many: k + 1 keys get weight where k should. Which score is the "
     "k-th largest, counting from 1?",
     "your threshold is the (k + 1)-th largest score of the row, so keeping every score at least that large "
     "keeps k + 1 keys; with k = T_k there is no (k + 1)-th score at all. The threshold is the k-th largest, "
     "the last of the top k."),
], where=lambda case: case[2] < case[0].shape[-1])

@checker(mistakes=[*_TOP_K_MISTAKES, MIXED_DTYPES])
def check_top_k_attention(fn) -> Verdict:
    """``fn(Z, V, k)``: Z (..., T_q, T_k), V (..., T_k, d_v) → (..., T_q, d_v), each query reading its k best keys."""
    return judge(fn, _top_k_groups(), _top_k_reference, _TOP_K_MISTAKES,
                 diagnose=_mixed_dtypes(fn, _top_k_reference),
                 success="each query reads its k best keys and only them, with weights that sum to 1: for one "
                         "table, a batch, a causal table whose first rows see fewer than k keys, k = T_k, and "
                         "in float16, float32 and float64.")

# --- find the bug: an einsum head whose last line sums over the query index (out = Pᵀ V) ------------------------------

def _head_groups() -> list[Group]:
    g = _gen(5)

    def qkv(B: int, T: int, d_k: int, d_v: int, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
        return (torch.randn(B, T, d_k, generator=g, dtype=dtype), torch.randn(B, T, d_k, generator=g, dtype=dtype),
                torch.randn(B, T, d_v, generator=g, dtype=dtype))

    # First T = d_k = d_v, where weights · K, Qᵀ K and a scale by √T all run silently with the right shape;
    # then an odd T with T ≠ d_k ≠ d_v, a batch, and float64.
    return [Group([qkv(2, 6, 6, 6), qkv(1, 5, 4, 3), qkv(2, 7, 8, 2)], 1e-5),
            Group([qkv(2, 5, 3, 4, torch.float64)], 1e-10)]


_GIVEN = "bij,bid->bjd"   # the last line of the head as given: it sums P over the query index i


def _einsum_head(Q, K, V, *, scores: str = "bid,bjd->bij", dim: int = -1, mask: str = "causal",
                 mix: str = "bij,bjd->bid", mixed: str = "V", scale: str = "d_k") -> torch.Tensor:
    """The einsum head with a planted slip; the defaults compute it (a ``mix`` ending in "di" is reshaped to V's
    shape)."""
    T = Q.shape[-2]
    Z = torch.einsum(scores, Q, K) / math.sqrt(Q.shape[-1] if scale == "d_k" else T)
    M = {"causal": causal_mask(T), "transposed": causal_mask(T).T, "none": torch.zeros(T, T)}[mask]
    P = softmax(Z + M.to(Z.dtype), dim=dim)
    return torch.einsum(mix, P, K if mixed == "K" else V).reshape(V.shape)


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
    ("own-value", {"mix": "bij,bid->bid"},
     "each of your outputs is the value of its own position, unchanged. Which index of P should the last line "
     "sum over?",
     "your last line keeps i on V and sums P over j alone: each row of P sums to 1, so output i is just v_i. "
     "The sum must run over the index that P and V share, the key j."),
    ("output-transposed", {"mix": "bij,bjd->bdi"},
     "the sum is right, but is your output laid out (B, T, d_v)? Which index comes last in your last einsum's "
     "output?",
     "your last line puts the position index last, (B, d_v, T), and a reshape to (B, T, d_v) only regroups "
     "the numbers: it does not move an axis. Write the output indices in the order (b, i, d)."),
    ("scale-T", {"scale": "T"},
     "the mixing is right now. By the square root of which size are the scores divided?",
     "you divide the scores by √T, the number of positions; the scale is √d_k, the width of a query."),
])


@checker(mistakes=[*_FIXED_HEAD_MISTAKES, MIXED_DTYPES])
def check_fixed_head(fn) -> Verdict:
    """Check the repaired head ``fn(Q, K, V)``: Q, K (B, T, d_k), V (B, T, d_v) → (B, T, d_v)."""
    return judge(fn, _head_groups(), attention, _FIXED_HEAD_MISTAKES,
                 diagnose=_mixed_dtypes(fn, attention),
                 success="output i now mixes the values of positions 0…i with row i of P, for T = d_k = d_v "
                         "= 6, T = 5, T = 7, and in float64.")
