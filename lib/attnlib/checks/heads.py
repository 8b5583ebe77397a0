"""Exercise checkers for the heads chapter (chapter 6).

``check_split_heads(fn)``, ``check_merge_heads(fn)``: the two reshapes around the heads.
``check_multi_head(fn)``: the whole layer from its four matrices.
``check_fixed_multi_head(fn)``: :func:`buggy_multi_head` with its planted bug fixed.
``check_attention_parameters(n)``: a predicted parameter count of one attention layer.

Every function checker runs at least one input with T = d_head (where a transpose of the wrong two axes still
has the right shape) and one with T ≠ d_head.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention, causal_mask, softmax
from ..heads import MultiHeadAttention, merge_heads, split_heads
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head", "check_fixed_multi_head",
           "buggy_multi_head", "check_attention_parameters"]


# ---------------------------------------------------------------------------------------------------- split
def _split_cases():
    """(x, h) pairs built fresh on every call: d_head ≠ h, and one case with T = d_head."""
    return [
        (torch.randn(2, 5, 12, generator=_gen(61)), 3),    # T = 5, d_head = 4
        (torch.randn(1, 4, 8, generator=_gen(62)), 2),     # T = 4 = d_head
        (torch.randn(1, 4, 10, generator=_gen(60)), 2),    # T = 4, d_head = 5
    ]


def _split_wrong_axes(x, h):
    B, T, d_model = x.shape
    return x.reshape(B, T, h, d_model // h).permute(0, 2, 3, 1)


_SPLIT_MISTAKES = [
    Mistake("no-transpose",
            "you reshaped (B, T, d_model) straight to (B, h, T, d_head). That cuts the numbers in memory order, "
            "so one 'row' of a head mixes pieces of several positions. Reshape to (B, T, h, d_head) first, "
            "then swap the T and h axes with .transpose(1, 2).",
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h)),
    Mistake("interleaved",
            "your heads take every h-th column (reshape to (B, T, d_head, h)). Head k owns one contiguous "
            "block of d_head columns, k·d_head … (k+1)·d_head − 1: reshape to (B, T, h, d_head).",
            lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2)),
    Mistake("wrong-axes",
            "each head came out as a (d_head, T) table: positions on the last axis. The shape only looked "
            "right because T = d_head in this test. After reshaping to (B, T, h, d_head), swap axes 1 and 2 "
            "(.transpose(1, 2)), nothing else.",
            _split_wrong_axes),
    Mistake("no-split",
            "the result still has the heads side by side in the last axis. Reshape to (B, T, h, d_head) and "
            "transpose to (B, h, T, d_head).",
            lambda x, h: x),
]


@checker
def check_split_heads(fn) -> Verdict:
    """Check ``fn(x, h)``: x (B, T, d_model) → (B, h, T, d_head) with d_head = d_model / h."""
    return judge(fn, _split_cases(), split_heads, _SPLIT_MISTAKES,
                 success="every head gets its own block of columns, and every row is still one position.")


# ---------------------------------------------------------------------------------------------------- merge
def _merge_cases():
    return [
        (torch.randn(2, 3, 5, 4, generator=_gen(63)),),    # (B, h, T, d_head): T = 5 ≠ d_head = 4
        (torch.randn(1, 2, 4, 4, generator=_gen(64)),),    # T = 4 = d_head
    ]


def _merge_no_transpose(x):
    B, h, T, d_head = x.shape
    return x.reshape(B, T, h * d_head)


def _merge_interleaved(x):
    B, h, T, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, d_head * h)


def _merge_wrong_axes(x):
    B, h, T, d_head = x.shape
    return x.transpose(-2, -1).reshape(B, T, h * d_head)


def _merge_reversed(x):
    return merge_heads(x.flip(1))


_MERGE_MISTAKES = [
    Mistake("no-transpose",
            "you reshaped (B, h, T, d_head) straight to (B, T, h·d_head), which glues rows of different "
            "positions together. Move the head axis next to d_head first: .transpose(1, 2), then reshape.",
            _merge_no_transpose),
    Mistake("interleaved",
            "your output interleaves the heads (head 0's first number, head 1's first number, …). Concatenate "
            "them side by side: transpose to (B, T, h, d_head), then reshape to (B, T, h·d_head).",
            _merge_interleaved),
    Mistake("wrong-axes",
            "you swapped the last two axes (T and d_head) before the reshape. The axis to move is h: "
            ".transpose(1, 2) gives (B, T, h, d_head), then reshape to (B, T, h·d_head).",
            _merge_wrong_axes),
    Mistake("wrong-order",
            "the heads are concatenated in reverse order. Head 0 must come first, so W_O's first d_head rows "
            "read head 0.",
            _merge_reversed),
]


@checker
def check_merge_heads(fn) -> Verdict:
    """Check ``fn(x)``: x (B, h, T, d_head) → (B, T, h·d_head), heads side by side for every position."""
    return judge(fn, _merge_cases(), merge_heads, _MERGE_MISTAKES,
                 success="every position gets its h head outputs side by side, head 0 first.")


# ------------------------------------------------------------------------------------------------ multi-head
def _multi_head_reference(X, W_Q, W_K, W_V, W_O, h: int):
    """Causal multi-head attention with explicit (d_model, d_model) matrices: X (B, T, d_model) → (B, T, d_model)."""
    Q, K, V = (split_heads(X @ W, h) for W in (W_Q, W_K, W_V))
    return merge_heads(attention(Q, K, V)) @ W_O


def _mha_variant(X, W_Q, W_K, W_V, W_O, h, *, split=("right",) * 3, merge="right", scores="Q Kᵀ",
                 scale="d_head", causal=True, project=True):
    """Multi-head attention from explicit matrices; every switch's default is right, any other value plants a mistake.

    ``split``: how each of Q, K, V is cut into heads: "right" (B, T, h, d_head) then transpose, "plain" (reshaped
    straight to (B, h, T, d_head)) or "wrong-axes" (B, h, d_head, T). ``merge``: "right" or "plain" (no transpose).
    ``scores``: "Q Kᵀ" or "Qᵀ K". ``scale``: divide by √"d_head" or √"d_model". ``causal``: add the mask.
    ``project``: multiply by W_O at the end.
    """
    B, T, d_model = X.shape
    d_head = d_model // h
    ways = {"right": lambda t: t.reshape(B, T, h, d_head).transpose(1, 2),
            "plain": lambda t: t.reshape(B, h, T, d_head),
            "wrong-axes": lambda t: t.reshape(B, T, h, d_head).permute(0, 2, 3, 1)}
    Q, K, V = (ways[how](X @ W) for how, W in zip(split, (W_Q, W_K, W_V)))
    S = Q @ K.transpose(-2, -1) if scores == "Q Kᵀ" else Q.transpose(-2, -1) @ K
    S = S / math.sqrt({"d_head": d_head, "d_model": d_model}[scale])
    P = softmax(S + causal_mask(T, dtype=X.dtype) if causal else S)
    out = P @ V
    out = out.transpose(1, 2).reshape(B, T, d_model) if merge == "right" else out.reshape(B, T, d_model)
    return out @ W_O if project else out


def _mha_cases():
    """Fresh inputs on every call: the first has T = d_head = 4, the second T = 5 ≠ d_head."""
    g = _gen(65)
    cases = []
    for B, T, d_model, h in ((1, 4, 12, 3), (2, 5, 8, 2)):
        X = torch.randn(B, T, d_model, generator=g)
        Ws = [torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(4)]
        cases.append((X, *Ws, h))
    return cases


_MHA_MISTAKES = variants(_mha_variant, [
    ("no-W_O", dict(project=False),
     "the heads are concatenated but never mixed: multiply the (B, T, d_model) concatenation by W_O "
     "at the end."),
    ("sqrt-d_model", dict(scale="d_model"),
     "you scaled the scores by √d_model. Each head's dot products have d_head terms, so divide by "
     "√d_head = √(d_model / h)."),
    ("no-mask", dict(causal=False),
     "the output depends on future tokens: add the causal mask to every head's scores before softmax."),
    ("no-transpose", dict(split=("plain",) * 3),
     "you reshaped to (B, h, T, d_head) without the transpose, so a head's rows are not positions. "
     "Reshape to (B, T, h, d_head) and .transpose(1, 2) (and back before W_O)."),
    ("scores-QtK", dict(scores="Qᵀ K"),
     "your scores are Qᵀ K, a (d_head, d_head) table: it only had the shape (T, T) because T = d_head "
     "in this test. The scores compare positions: S = Q Kᵀ, i.e. Q @ K.transpose(-2, -1)."),
])


@checker
def check_multi_head(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O, h)``: X (B, T, d_model) → (B, T, d_model); W_… are (d_model, d_model)."""
    return judge(fn, _mha_cases(), _multi_head_reference, _MHA_MISTAKES,
                 success="h causal heads, concatenated and projected by W_O, exactly as the library computes.")


# --------------------------------------------------------------------------------------- find the bug
def buggy_multi_head(X, W_Q, W_K, W_V, W_O, h):
    """Causal multi-head self-attention with one planted bug: X (B, T, d_model) → (B, T, d_model)."""
    B, T, d_model = X.shape
    d_head = d_model // h
    Q = (X @ W_Q).reshape(B, h, T, d_head)                              # (B, h, T, d_head)
    K = (X @ W_K).reshape(B, h, T, d_head)
    V = (X @ W_V).reshape(B, h, T, d_head)
    S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)                     # (B, h, T, T)
    P = softmax(S + causal_mask(T, dtype=X.dtype))
    out = (P @ V).transpose(1, 2).reshape(B, T, d_model)                # heads side by side
    return out @ W_O


_FIX_MISTAKES = [
    Mistake("unchanged",
            "this is still the function as given: it runs and has the right shape, but its heads do not hold "
            "positions. Follow one position through it: after the reshape, is row i of a head's Q position i?",
            buggy_multi_head),
    *variants(_mha_variant, [
        ("v-unfixed", dict(split=("right", "right", "plain")),
         "Q and K are split correctly now, but V is still reshaped straight to (B, h, T, d_head), so the "
         "weights average rows that are not positions. Split V the same way as Q and K."),
        ("merge-broken", dict(merge="plain"),
         "the split is fixed, but the merge at the end lost its transpose. The merge was right: "
         "(B, h, T, d_head) → .transpose(1, 2) → reshape to (B, T, d_model)."),
        ("wrong-axes", dict(split=("wrong-axes",) * 3),
         "your Q, K and V have d_head on the third axis and T on the last (only the right shape when "
         "T = d_head, as in one of the tests). Reshape to (B, T, h, d_head), then .transpose(1, 2)."),
    ]),
]


@checker
def check_fixed_multi_head(fn) -> Verdict:
    """Check ``fn(X, W_Q, W_K, W_V, W_O, h)`` is :func:`buggy_multi_head` with its bug fixed: (B, T, d_model)."""
    return judge(fn, _mha_cases(), _multi_head_reference, _FIX_MISTAKES,
                 success="every head's rows are positions again: reshape to (B, T, h, d_head), then transpose.")


# ------------------------------------------------------------------------------------- predict: parameters
_QUESTION = dict(d_model=96, h=8)   # the layer whose parameters the learner predicts


@checker(kind="predict")
def check_attention_parameters(n) -> Verdict:
    """Check a predicted number of parameters of ``MultiHeadAttention(d_model=96, h=8)`` (with biases)."""
    d, h = _QUESTION["d_model"], _QUESTION["h"]
    d_head = d // h
    want = sum(p.numel() for p in MultiHeadAttention(d, h).parameters())   # counted, not computed
    guesses = [
        Guess("no-bias", "that is 4·d_model², the four matrices without their biases. Each of W_Q, W_K, W_V "
                         "and W_O also has a bias of d_model numbers.", 4 * d * d),
        Guess("times-h", "the number of heads does not multiply the count: the h heads share out the same "
                         "d_model columns of W_Q, W_K and W_V, d_head = d_model / h each.", h * (4 * d * d + 4 * d)),
        Guess("one-head", "that is about what one head owns of W_Q, W_K, W_V and W_O. The layer has h such "
                          "heads.", 4 * d * d_head + 4 * d_head),
        Guess("no-W_O", "that counts W_Q, W_K and W_V with their biases; W_O, which mixes the heads, is a "
                        "fourth d_model × d_model matrix with its own bias.", 3 * d * d + 3 * d),
        Guess("d_head-squared", "each head's slice of W_Q is d_model × d_head, not d_head × d_head: its input "
                                "is the whole d_model-wide token vector.", h * 4 * (d_head * d_head + d_head)),
    ]
    success = "4·d_model² + 4·d_model parameters, whatever h is."
    return judge_number(n, want, guesses, rtol=1e-9, success=success,
                        again="count matrix by matrix, biases included, and predict again.")
