"""Exercise checkers for the mask chapter.

``check_causal_mask(fn)``: ``fn(T)`` must return M (T, T), 0 where j ≤ i and −inf where j > i.
``check_masked_weights(fn)``: ``fn(S)`` must return P = softmax(S + M) for scores S (..., T, T).
``check_padded_causal_weights(fn)``: ``fn(S, is_pad)`` with S (B, T, T) and is_pad (B, T) (True = padding
token) must return P (B, T, T) that reads only earlier, real keys; a row with no such key is all zeros.
"""

from __future__ import annotations

import torch

from ..attention import causal_mask, softmax
from ._core import Group, Verdict, checker, judge, variants

__all__ = ["check_causal_mask", "check_masked_weights", "check_padded_causal_weights"]

_NEG_INF = float("-inf")
# A blocked entry at or below this finite value is a stand-in for −∞ (−1e4, −1e9, −1e30, finfo.min …).
_LARGE_NEGATIVE = -10.0


def _fill(blocked: torch.Tensor, value: float = _NEG_INF) -> torch.Tensor:
    return torch.zeros(blocked.shape).masked_fill(blocked, value)


def _future(T: int, diagonal: int = 1) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).triu(diagonal)


# ------------------------------------------------------------------------------------------------
# M from T.

def _planted_mask(T: int, *, lower: bool = False, diagonal: int = 1, zero_one: bool = False,
                 keep: bool = False) -> torch.Tensor:
    """M with a planted slip; the defaults build M itself. The blocked entries are the upper triangle from
    ``diagonal`` on (the ``lower`` one up to it), or their complement with ``keep``; ``zero_one`` writes them
    as 1 and the rest as 0 instead of -inf and 0."""
    blocked = torch.ones(T, T, dtype=torch.bool)
    blocked = blocked.tril(diagonal) if lower else blocked.triu(diagonal)
    if keep:
        blocked = ~blocked
    return blocked.float() if zero_one else _fill(blocked)


_MASK_MISTAKES = variants(_planted_mask, [
    ("wrong-triangle", {"lower": True, "diagonal": -1},
     "you blocked the lower triangle (the past) instead of the upper one (the future). Rows are queries i, "
     "columns keys j; key j is in query i's future when j > i, which is torch.triu(..., diagonal=1)."),
    ("wrong-triangle", {"lower": True, "diagonal": 0},
     "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
     "filling it with -inf blocks exactly the wrong entries. Block the future instead: "
     "torch.triu(..., diagonal=1)."),
    ("diagonal-masked", {"diagonal": 0},
     "you also blocked the diagonal (torch.triu with diagonal=0). A position may read itself: use "
     "diagonal=1. With the diagonal blocked, row 0 has no key left and softmax gives NaN."),
    ("zero-one", {"zero_one": True},
     "your mask holds 0 and 1 (or True/False) with 1 on the future. M is added to the scores, so it must "
     "be 0 where a key is allowed and float('-inf') where it is blocked: exp(-inf) = 0 is what removes "
     "the weight."),
    ("keep-mask", {"zero_one": True, "keep": True},
     "you returned a 'may attend' mask (1 or True on and below the diagonal), the convention of a boolean "
     "attn_mask in scaled_dot_product_attention. M is additive: 0 where key j may be read, "
     "float('-inf') where it is blocked."),
])


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


def _finite_look(fn, verdict: Verdict) -> Verdict | None:
    """judge compares with fixed outputs; a finite fill can be any large negative number, so look at it."""
    if verdict.mistake != "values":
        return None
    for T in _MASK_SIZES:
        value = _finite_fill(fn(T), T)
        if value is not None:
            return _finite_verdict(value)
    return None


@checker
def check_causal_mask(fn) -> Verdict:
    """Check ``fn(T) -> M`` of shape (T, T): 0 on and below the diagonal, -inf above it."""
    return judge(fn, [(T,) for T in _MASK_SIZES], lambda T: causal_mask(T), _MASK_MISTAKES,
                 success="M is 0 where j ≤ i and -inf where j > i, for T = 5 and T = 8.",
                 diagnose=lambda verdict: _finite_look(fn, verdict))


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


def _planted_weights(S: torch.Tensor, *, lower: bool = False, diagonal: int = 1, dim: int = -1,
                    how: str = "add") -> torch.Tensor:
    """P = softmax(S + M) with a planted slip; the defaults compute P itself. M is ``_planted_mask(T, lower=…,
    diagonal=…)``; ``how`` is "add" (S + M), "none" (no mask), "after" (the future weights zeroed after
    softmax) or "multiply" (S times a 0/1 mask)."""
    future = _future(S.shape[-1])
    if how == "none":
        return softmax(S)
    if how == "after":
        return softmax(S) * ~future
    if how == "multiply":
        return softmax(S * (~future).to(S.dtype))
    return softmax(S + _planted_mask(S.shape[-1], lower=lower, diagonal=diagonal).to(S.dtype), dim=dim)


_WEIGHTS_MISTAKES = variants(_planted_weights, [
    ("after-softmax", {"how": "after"},
     "you zeroed the future weights after softmax, so the rows no longer sum to 1. Add M to the scores "
     "before softmax (or renormalise each row, which gives the same result)."),
    ("no-mask", {"how": "none"},
     "your weights are softmax(S) without the mask: every position still reads its future. Add M "
     "(0 where j ≤ i, -inf where j > i) to S before softmax."),
    ("wrong-axis", {"dim": -2},
     "you took softmax over the query axis (dim=-2), so columns sum to 1. Each query's row of weights "
     "must sum to 1: use dim=-1."),
    ("wrong-triangle", {"lower": True, "diagonal": -1},
     "you masked the past (lower triangle) instead of the future. Key j is blocked for query i when "
     "j > i: torch.triu(..., diagonal=1)."),
    ("wrong-triangle", {"lower": True, "diagonal": 0},
     "you blocked the lower triangle and the diagonal: torch.tril marks the keys a query MAY read, so "
     "filling it with -inf blocks exactly the wrong entries (the last row is left with no key: NaN). "
     "Block the future instead: torch.triu(..., diagonal=1)."),
    ("diagonal-masked", {"diagonal": 0},
     "you masked the diagonal too (triu with diagonal=0): row 0 has no key left and becomes NaN. "
     "Use diagonal=1 so each position reads itself."),
    ("multiplied", {"how": "multiply"},
     "you multiplied the scores by a 0/1 mask. A score of 0 is not 'no weight': exp(0) = 1. Add -inf "
     "to the blocked scores (S + M or S.masked_fill(future, float('-inf'))) instead."),
])

_OVERFLOW_HINT = ("masked_fill refused your fill value on float16 scores: it does not fit float16, whose "
                  "largest magnitude is about 65504 (a finite stand-in such as -1e9 or float32's finfo.min). "
                  "Use float('-inf'), or torch.finfo(S.dtype).min so the value always matches the dtype.")


def _overflow_look(verdict: Verdict) -> Verdict | None:
    if verdict.mistake == "error" and "overflow" in verdict.message:
        return Verdict(False, f"{_OVERFLOW_HINT} ({verdict.message})", "finite")
    return None


@checker
def check_masked_weights(fn) -> Verdict:
    """Check ``fn(S) -> P``: S (..., T, T) → P = softmax(S + M) (..., T, T), masking before softmax."""
    return judge(fn, [Group(_scores_cases(), 1e-5), Group(_half_cases(), 3e-3)], _weights_reference,
                 _WEIGHTS_MISTAKES, diagnose=_overflow_look,
                 success="future weights are exactly 0 and every row sums to 1 (T = 5, a batch with T = 4, "
                         "and float16 scores with T = 7).")


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


def _planted_padded(S: torch.Tensor, is_pad: torch.Tensor, *, causal: bool = True, pad: str = "keys",
                   inverted: bool = False, fill: float = _NEG_INF, empty_rows_zero: bool = True) -> torch.Tensor:
    """P with a planted slip; the defaults compute P itself. ``pad`` is where padding is blocked: "keys"
    (columns), "queries" (rows), "none", or "after" softmax; ``inverted`` reads True in is_pad as a real token."""
    T = S.shape[-1]
    if inverted:
        is_pad = ~is_pad
    if pad == "after":
        return softmax(S.float() + causal_mask(T)) * ~is_pad[:, None, :]
    allowed = torch.ones(S.shape, dtype=torch.bool)                   # (B, T, T) True where i may read j
    if causal:
        allowed = allowed & ~_future(T)
    if pad == "keys":
        allowed = allowed & ~is_pad[:, None, :]
    elif pad == "queries":
        allowed = allowed & ~is_pad[:, :, None]
    P = softmax(S.float().masked_fill(~allowed, fill))
    return P.nan_to_num(0.0) if empty_rows_zero else P


def _padded_reference(S, is_pad):
    allowed = ~_future(S.shape[-1]) & ~is_pad[:, None, :]       # (B, T, T)
    S = S.double().masked_fill(~allowed, _NEG_INF)
    P = torch.softmax(S, dim=-1)
    return torch.where(allowed.any(-1, keepdim=True), P, torch.zeros_like(P))


_PADDED_MISTAKES = variants(_planted_padded, [
    ("nan-rows", {"empty_rows_zero": False},
     "a query with no readable key (at the start of a left-padded sequence every key it may see is "
     "padding) came out NaN: softmax of a row of -inf is 0 / 0. Find the empty rows "
     "(allowed.any(-1, keepdim=True)) and give them zero weights."),
    ("uniform-rows", {"fill": torch.finfo(torch.float32).min, "empty_rows_zero": False},
     "a query with no readable key came out with uniform weights over all keys, the future and the "
     "padding included: a finite fill (finfo.min, -1e9) makes a fully blocked row uniform instead of "
     "NaN. Block with -inf and set the empty rows to zero."),
    ("padded-queries", {"pad": "queries"},
     "you blocked the padding on the query axis (rows) instead of the key axis (columns). Padding must "
     "never be READ: is_pad[:, None, :] blocks key j for every query of that sequence."),
    ("no-padding", {"pad": "none"},
     "your weights still read the padding tokens: only the causal mask is applied. Block key j also "
     "where is_pad[b, j] is True (is_pad[:, None, :] broadcasts over the queries)."),
    ("no-causal", {"causal": False},
     "padding is blocked but the future is not: combine both masks (blocked where j > i OR key j is "
     "padding) before softmax."),
    ("inverted-padding", {"inverted": True},
     "you treated True in is_pad as 'may attend', so real tokens are blocked and padding is read. Here "
     "True marks a padding token, which must be blocked (use is_pad itself, not ~is_pad)."),
    ("inverted-padding", {"inverted": True, "empty_rows_zero": False},
     "you treated True in is_pad as 'may attend', so real tokens are blocked and padding is read. Here "
     "True marks a padding token, which must be blocked (use is_pad itself, not ~is_pad)."),
    ("after-softmax", {"pad": "after"},
     "you zeroed the padded keys after softmax, so the rows no longer sum to 1. Block them in the "
     "scores, before softmax, together with the future."),
])


@checker
def check_padded_causal_weights(fn) -> Verdict:
    """Check ``fn(S, is_pad) -> P``: S (B, T, T), is_pad (B, T) bool (True = padding) → P (B, T, T)."""
    return judge(fn, _padded_cases(), _padded_reference, _PADDED_MISTAKES,
                 success="each query reads only earlier real tokens, rows sum to 1, and a query with "
                         "nothing to read gets zero weights, not NaN (left, right and no padding).")
