"""Exercise checkers for the mask chapter.

``check_causal_mask(fn)``: ``fn(T)`` must return M (T, T), 0 where j ≤ i and −inf where j > i.
``check_masked_weights(fn)``: ``fn(S)`` must return P = softmax(S + M) for scores S (..., T, T).
``check_padded_causal_weights(fn)``: ``fn(S, is_pad)`` with S (B, T, T) and is_pad (B, T) (True = padding
token) must return P (B, T, T) that reads only earlier, real keys; a row with no such key is all zeros.
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Mistake, Verdict, checker, judge

__all__ = ["check_causal_mask", "check_masked_weights", "check_padded_causal_weights"]

_NEG_INF = float("-inf")
# A blocked entry at or below this finite value is a stand-in for −∞ (−1e4, −1e9, −1e30, finfo.min …).
_LARGE_NEGATIVE = -10.0


def _fill(blocked: torch.Tensor, value: float = _NEG_INF) -> torch.Tensor:
    return torch.zeros(blocked.shape).masked_fill(blocked, value)


def _future(T: int, diagonal: int = 1) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).triu(diagonal)


def _judge_in_turn(fn, groups, reference, mistakes, success: str) -> Verdict:
    """``judge`` over groups of cases, each with its own tolerance (float16 cases need a wider one)."""
    verdict = None
    for cases, atol in groups:
        verdict = judge(fn, cases, reference, mistakes, success=success, atol=atol)
        if not verdict.ok:
            return verdict
    return verdict


# ------------------------------------------------------------------------------------------------
# M from T.

_MASK_MISTAKES = [
    Mistake("wrong-triangle",
            "you blocked the lower triangle (the past) instead of the upper one (the future). Rows are queries i, "
            "columns keys j; key j is in query i's future when j > i, which is torch.triu(..., diagonal=1).",
            lambda T: _fill(torch.ones(T, T, dtype=torch.bool).tril(-1))),
    Mistake("wrong-triangle",
            "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
            "filling it with -inf blocks exactly the wrong entries. Block the future instead: "
            "torch.triu(..., diagonal=1).",
            lambda T: _fill(torch.ones(T, T, dtype=torch.bool).tril(0))),
    Mistake("diagonal-masked",
            "you also blocked the diagonal (torch.triu with diagonal=0). A position may read itself: use "
            "diagonal=1. With the diagonal blocked, row 0 has no key left and softmax gives NaN.",
            lambda T: _fill(_future(T, 0))),
    Mistake("zero-one",
            "your mask holds 0 and 1 (or True/False) with 1 on the future. M is added to the scores, so it must "
            "be 0 where a key is allowed and float('-inf') where it is blocked: exp(-inf) = 0 is what removes "
            "the weight.",
            lambda T: _future(T).float()),
    Mistake("keep-mask",
            "you returned a 'may attend' mask (1 or True on and below the diagonal), the convention of a boolean "
            "attn_mask in scaled_dot_product_attention. M is additive: 0 where key j may be read, "
            "float('-inf') where it is blocked.",
            lambda T: (~_future(T)).float()),
]


def _finite_fill(M, T: int) -> float | None:
    """The blocked entries' value when M is right except that it holds a large finite negative number
    (any of −1e4, −1e9, −1e30, finfo.min …) where −inf belongs; otherwise None."""
    if not isinstance(M, torch.Tensor) or tuple(M.shape) != (T, T) or not M.is_floating_point() or T < 2:
        return None
    M = M.detach().double().cpu()
    future = _future(T)
    blocked, kept = M[future], M[~future]
    if (kept != 0).any() or not blocked.isfinite().all() or blocked.max() > _LARGE_NEGATIVE:
        return None
    return blocked.min().item()


def _finite_verdict(value: float) -> Verdict:
    return Verdict(False, f"your blocked entries hold the finite number {value:.4g} instead of float('-inf'). "
                          "M is defined with -inf: a finite stand-in gives a fully blocked row uniform weights "
                          "instead of NaN, and in float16 it is rounded or overflows to -inf. Fill with "
                          "float('-inf').", "finite")


_MASK_SIZES = (5, 8)  # an odd and an even T


@checker
def check_causal_mask(fn) -> Verdict:
    """Check ``fn(T) -> M`` of shape (T, T): 0 on and below the diagonal, -inf above it."""
    verdict = judge(fn, [(T,) for T in _MASK_SIZES], lambda T: causal_mask(T), _MASK_MISTAKES,
                    success="M is 0 where j ≤ i and -inf where j > i, for T = 5 and T = 8.")
    if verdict.mistake == "values":
        # judge compares with fixed outputs; a finite fill can be any large negative number, so look at it.
        for T in _MASK_SIZES:
            try:
                value = _finite_fill(fn(T), T)
            except Exception:
                return verdict
            if value is not None:
                return _finite_verdict(value)
    return verdict


# ------------------------------------------------------------------------------------------------
# P = softmax(S + M) from S.

def _scores_cases() -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(404)
    return [(torch.randn(5, 5, generator=g) * 2,), (torch.randn(2, 4, 4, generator=g) * 2,)]


def _half_cases() -> list[tuple[torch.Tensor]]:
    # float16, where a finite fill such as -1e9 or float32's finfo.min does not fit (T = 7, odd).
    g = torch.Generator().manual_seed(405)
    return [((torch.randn(3, 7, 7, generator=g) * 2).half(),)]


def _weights_reference(S: torch.Tensor) -> torch.Tensor:
    S = S.float()
    return softmax(S + causal_mask(S.shape[-1]))


def _m(S: torch.Tensor, diagonal: int = 1) -> torch.Tensor:
    T = S.shape[-1]
    return _fill(_future(T, diagonal)).to(S.dtype)


def _after(S: torch.Tensor) -> torch.Tensor:
    return softmax(S) * (~_future(S.shape[-1]))


def _tril_blocked(S: torch.Tensor, diagonal: int) -> torch.Tensor:
    T = S.shape[-1]
    return _fill(torch.ones(T, T, dtype=torch.bool).tril(diagonal)).to(S.dtype)


_WEIGHTS_MISTAKES = [
    Mistake("after-softmax",
            "you zeroed the future weights after softmax, so the rows no longer sum to 1. Add M to the scores "
            "before softmax (or renormalise each row, which gives the same result).",
            _after),
    Mistake("no-mask",
            "your weights are softmax(S) without the mask: every position still reads its future. Add M "
            "(0 where j ≤ i, -inf where j > i) to S before softmax.",
            lambda S: softmax(S)),
    Mistake("wrong-axis",
            "you took softmax over the query axis (dim=-2), so columns sum to 1. Each query's row of weights "
            "must sum to 1: use dim=-1.",
            lambda S: softmax(S + _m(S), dim=-2)),
    Mistake("wrong-triangle",
            "you masked the past (lower triangle) instead of the future. Key j is blocked for query i when "
            "j > i: torch.triu(..., diagonal=1).",
            lambda S: softmax(S + _tril_blocked(S, -1))),
    Mistake("wrong-triangle",
            "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
            "filling it with -inf blocks exactly the wrong entries (the last row is left with no key: NaN). "
            "Block the future instead: torch.triu(..., diagonal=1).",
            lambda S: softmax(S + _tril_blocked(S, 0))),
    Mistake("diagonal-masked",
            "you masked the diagonal too (triu with diagonal=0): row 0 has no key left and becomes NaN. "
            "Use diagonal=1 so each position reads itself.",
            lambda S: softmax(S + _m(S, 0))),
    Mistake("multiplied",
            "you multiplied the scores by a 0/1 mask. A score of 0 is not 'no weight': exp(0) = 1. Add -inf "
            "to the blocked scores (S + M or S.masked_fill(future, float('-inf'))) instead.",
            lambda S: softmax(S * (~_future(S.shape[-1])).to(S.dtype))),
]

_OVERFLOW_HINT = ("masked_fill refused your fill value on float16 scores: it does not fit float16, whose "
                  "largest magnitude is about 65504 (a finite stand-in such as -1e9 or float32's finfo.min). "
                  "Use float('-inf'), or torch.finfo(S.dtype).min so the value always matches the dtype.")


@checker
def check_masked_weights(fn) -> Verdict:
    """Check ``fn(S) -> P``: S (..., T, T) → P = softmax(S + M) (..., T, T), masking before softmax."""
    verdict = _judge_in_turn(
        fn, [(_scores_cases(), 1e-5), (_half_cases(), 3e-3)], _weights_reference, _WEIGHTS_MISTAKES,
        success="future weights are exactly 0 and every row sums to 1 (T = 5, a batch with T = 4, "
                "and float16 scores with T = 7).")
    if verdict.mistake == "error" and "overflow" in verdict.message:
        return Verdict(False, f"{_OVERFLOW_HINT} ({verdict.message})", "finite")
    return verdict


# ------------------------------------------------------------------------------------------------
# Extend: a key-padding mask combined with the causal mask.

def _padded_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(406)
    T_, F_ = True, False
    return [
        # left padding (the first two queries have no real key), right padding, no padding; T = 5
        (torch.randn(3, 5, 5, generator=g) * 2,
         torch.tensor([[T_, T_, F_, F_, F_], [F_, F_, F_, T_, T_], [F_, F_, F_, F_, F_]])),
        # one pad at the start, one at the end; T = 6
        (torch.randn(2, 6, 6, generator=g) * 2,
         torch.tensor([[T_, F_, F_, F_, F_, F_], [F_, F_, F_, F_, F_, T_]])),
    ]


def _allowed(S: torch.Tensor, is_pad: torch.Tensor, *, keys: bool = True, causal: bool = True,
             pad: bool = True) -> torch.Tensor:
    """(B, T, T) True where query i may read key j."""
    T = S.shape[-1]
    allowed = torch.ones(S.shape, dtype=torch.bool)
    if causal:
        allowed = allowed & ~_future(T)
    if pad:
        allowed = allowed & (~is_pad[:, None, :] if keys else ~is_pad[:, :, None])
    return allowed


def _softmax_over(S: torch.Tensor, allowed: torch.Tensor, empty_rows_zero: bool = True) -> torch.Tensor:
    P = softmax(S.float().masked_fill(~allowed, _NEG_INF))
    return P.nan_to_num(0.0) if empty_rows_zero else P


def _padded_reference(S, is_pad):
    allowed = ~_future(S.shape[-1]) & ~is_pad[:, None, :]       # (B, T, T)
    S = S.double().masked_fill(~allowed, _NEG_INF)
    P = torch.softmax(S, dim=-1)
    return torch.where(allowed.any(-1, keepdim=True), P, torch.zeros_like(P))


def _inverted(S, is_pad, empty_rows_zero=True):
    return _softmax_over(S, _allowed(S, ~is_pad), empty_rows_zero)


_PADDED_MISTAKES = [
    Mistake("nan-rows",
            "a query with no readable key (at the start of a left-padded sequence every key it may see is "
            "padding) came out NaN: softmax of a row of -inf is 0 / 0. Find the empty rows "
            "(allowed.any(-1, keepdim=True)) and give them zero weights.",
            lambda S, is_pad: _softmax_over(S, _allowed(S, is_pad), empty_rows_zero=False)),
    Mistake("uniform-rows",
            "a query with no readable key came out with uniform weights over all keys, the future and the "
            "padding included: a finite fill (finfo.min, -1e9) makes a fully blocked row uniform instead of "
            "NaN. Block with -inf and set the empty rows to zero.",
            lambda S, is_pad: softmax(S.float().masked_fill(~_allowed(S, is_pad), torch.finfo(torch.float32).min))),
    Mistake("padded-queries",
            "you blocked the padding on the query axis (rows) instead of the key axis (columns). Padding must "
            "never be READ: is_pad[:, None, :] blocks key j for every query of that sequence.",
            lambda S, is_pad: _softmax_over(S, _allowed(S, is_pad, keys=False))),
    Mistake("no-padding",
            "your weights still read the padding tokens: only the causal mask is applied. Block key j also "
            "where is_pad[b, j] is True (is_pad[:, None, :] broadcasts over the queries).",
            lambda S, is_pad: _softmax_over(S, _allowed(S, is_pad, pad=False))),
    Mistake("no-causal",
            "padding is blocked but the future is not: combine both masks (blocked where j > i OR key j is "
            "padding) before softmax.",
            lambda S, is_pad: _softmax_over(S, _allowed(S, is_pad, causal=False))),
    Mistake("inverted-padding",
            "you treated True in is_pad as 'may attend', so real tokens are blocked and padding is read. Here "
            "True marks a padding token, which must be blocked (use is_pad itself, not ~is_pad).",
            _inverted),
    Mistake("inverted-padding",
            "you treated True in is_pad as 'may attend', so real tokens are blocked and padding is read. Here "
            "True marks a padding token, which must be blocked (use is_pad itself, not ~is_pad).",
            lambda S, is_pad: _inverted(S, is_pad, empty_rows_zero=False)),
    Mistake("after-softmax",
            "you zeroed the padded keys after softmax, so the rows no longer sum to 1. Block them in the "
            "scores, before softmax, together with the future.",
            lambda S, is_pad: softmax(S.float() + causal_mask(S.shape[-1])) * ~is_pad[:, None, :]),
]


@checker
def check_padded_causal_weights(fn) -> Verdict:
    """Check ``fn(S, is_pad) -> P``: S (B, T, T), is_pad (B, T) bool (True = padding) → P (B, T, T)."""
    return judge(fn, _padded_cases(), _padded_reference, _PADDED_MISTAKES,
                 success="each query reads only earlier real tokens, rows sum to 1, and a query with "
                         "nothing to read gets zero weights, not NaN (left, right and no padding).")
