"""Exercise checkers for chapter 11 (batches and padding).

``check_position_ids(fn)``: ``fn(is_pad)`` with is_pad (B, T) bool (True = padding) must return the positions
(B, T): the number of real tokens up to and including each column, minus 1, never below 0.
``check_nonzero_weights(n)``: a prediction, the number of non-zero attention weights of a padded batch.
``check_batched_generation(fn)``: ``fn(model, ids, is_pad, n_new)`` must append n_new greedy tokens to
left-padded prompts, as ``model.generate(ids, n_new, is_pad=is_pad)`` does.
``check_sliding_window_mask(fn)``: ``fn(T, window)`` must return the boolean (T, T) mask, True where query i
may read key j, i.e. i − window < j ≤ i.
"""

from __future__ import annotations

import torch

from ..attention import attention_weights, padding_mask, sliding_window_mask
from ..batches import pad_prompts, position_ids
from ..model import GPT
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_position_ids", "check_nonzero_weights", "check_batched_generation",
           "check_sliding_window_mask", "NONZERO_LENGTHS"]


# ------------------------------------------------------------------------------------------------
# Build: position ids from is_pad.

def _pad_cases() -> list[tuple[torch.Tensor]]:
    T_, F_ = True, False
    return [
        # left padding, T = 5 (odd): 2 pads, 0 pads, 4 pads
        (torch.tensor([[T_, T_, F_, F_, F_], [F_, F_, F_, F_, F_], [T_, T_, T_, T_, F_]]),),
        # left, right and no padding, T = 6
        (torch.tensor([[T_, F_, F_, F_, F_, F_], [F_, F_, F_, T_, T_, T_], [F_, F_, F_, F_, F_, F_]]),),
    ]


def _positions(is_pad: torch.Tensor, *, count: str = "real", minus_one: bool = True, clamp: bool = True):
    """Positions from is_pad with the planted mistakes' switches; the defaults are the correct positions."""
    n = (~is_pad if count == "real" else is_pad).long().cumsum(-1) - (1 if minus_one else 0)
    return n.clamp(min=0) if clamp else n


_POSITION_MISTAKES = [
    Mistake("arange",
            "your positions are the column indices 0, 1, 2, … of every row: they count the padding too, so a "
            "left-padded prompt starts at position 2 or 4 instead of 0. Count only the real tokens: a cumulative "
            "sum of ~is_pad.",
            lambda is_pad: torch.arange(is_pad.shape[1]).expand(is_pad.shape).clone()),
    *variants(_positions, [
        ("off-by-one", dict(minus_one=False),
         "your first real token is at position 1: the cumulative count of real tokens includes the token "
         "itself. Subtract 1 (and clamp at 0)."),
        ("no-clamp", dict(clamp=False),
         "the real tokens are right, but the pads before them got position -1. An index of -1 silently reads "
         "the LAST row of a position table (table[-1]); clamp the positions at 0 (.clamp(min=0))."),
        ("counted-pads", dict(count="pads"),
         "you counted the padding tokens (cumsum of is_pad) instead of the real ones (cumsum of ~is_pad)."),
    ]),
]


@checker
def check_position_ids(fn) -> Verdict:
    """Check ``fn(is_pad) -> positions``: is_pad (B, T) bool → (B, T) integer positions."""
    return judge(fn, _pad_cases(), position_ids, _POSITION_MISTAKES,
                 success="every row counts from its own first real token, and no position is negative "
                         "(left, right and no padding; T = 5 and 6).")


# ------------------------------------------------------------------------------------------------
# Predict: how many attention weights are non-zero with padding and the causal mask.

NONZERO_LENGTHS = (5, 2, 7)   # three prompts, left-padded to T = 7, one head


def _measured_nonzero() -> int:
    prompts = [torch.arange(1, n + 1) for n in NONZERO_LENGTHS]
    _, is_pad = pad_prompts(prompts, 0, side="left")
    B, T = is_pad.shape
    g = _gen(1100)
    Q, K = torch.randn(B, T, 8, generator=g), torch.randn(B, T, 8, generator=g)
    P = attention_weights(Q, K, mask=padding_mask(is_pad)[:, 0])           # (B, T, T)
    return int((P > 0).sum())


@checker(kind="predict")
def check_nonzero_weights(value) -> Verdict:
    """Check a prediction of the number of non-zero weights in P (B, T, T) for NONZERO_LENGTHS."""
    n = torch.tensor(NONZERO_LENGTHS)
    B, T = len(NONZERO_LENGTHS), int(n.max())
    guesses = [
        Guess("causal-only", "that is the causal triangle T(T+1)/2 of every row, padding included: padded "
                             "keys are never read, so a prompt of n real tokens keeps only n(n+1)/2.",
              B * T * (T + 1) / 2),
        Guess("no-mask", "that is every entry, B·T²: the causal mask and the padding mask both remove "
                         "weights.", B * T * T),
        Guess("no-causal", "that counts every real key for every query (padding mask alone): the causal "
                           "mask also removes each real query's future.", float(T * n.sum())),
        Guess("real-square", "that is n² per prompt, every real query reading every real key: the causal "
                             "mask leaves only the keys j ≤ i, n(n+1)/2 per prompt.", float((n * n).sum())),
        Guess("pad-rows", "close: but a padding query of a left-padded row sees only padding (its keys are "
                          "all earlier columns), so its row of weights is all zeros; it has no weight on "
                          "itself.", float((n * (n + 1) / 2).sum() + (T - n).sum())),
    ]
    want = _measured_nonzero()
    return judge_number(value, want, guesses, rtol=1e-6,
                        success="padding and the causal mask leave n(n+1)/2 weights per prompt, and "
                                "padding queries read nothing.")


# ------------------------------------------------------------------------------------------------
# Find the bug: batched greedy generation.

def _generation_cases() -> list[tuple]:
    cases = []
    for seed, pos, lengths in ((1101, "learned", (4, 1, 6)), (1102, "rope", (2, 5, 3))):
        torch.manual_seed(seed)
        model = GPT(19, 16, 2, 2, max_T=16, pos=pos).eval()
        with torch.no_grad():   # a larger init: logits far from uniform, no near-ties
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.3, generator=_gen(seed + p.numel()))
        g = _gen(seed)
        ids, is_pad = pad_prompts([torch.randint(1, 19, (n,), generator=g) for n in lengths], 0, side="left")
        cases.append((model, ids, is_pad, 4))
    return cases


def _generation_reference(model, ids, is_pad, n_new):
    return model.generate(ids, n_new, is_pad=is_pad, use_cache=False)


def _greedy(model, ids, is_pad, n_new, *, new_flag=False, extend=True, prepend=False, use_pad=True):
    for _ in range(n_new):
        logits = model(ids, is_pad=is_pad) if use_pad else model(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        flag = torch.full_like(nxt, new_flag, dtype=torch.bool)
        if extend:
            is_pad = torch.cat([flag, is_pad] if prepend else [is_pad, flag], dim=1)
    return ids


_GENERATION_MISTAKES = variants(_greedy, [
    ("new-as-padding", dict(new_flag=True),
     "the new tokens are marked as padding (True in is_pad), so no later step reads them and their "
     "positions stop counting. In is_pad, True means padding; a generated token is real: append False "
     "(torch.zeros_like(nxt, dtype=torch.bool)). An attention_mask with 1 = real is the opposite "
     "convention."),
    ("not-extended", dict(extend=False),
     "is_pad must grow with ids: after appending a token, append one column to is_pad as well."),
    ("prepended", dict(prepend=True),
     "the new column went to the front of is_pad, which shifts every padding flag one place to the "
     "right; append it at the end, where the new token is."),
    ("no-padding", dict(use_pad=False),
     "the model is called without is_pad, so the real tokens read the padding and count positions from "
     "column 0. Pass is_pad=is_pad."),
])


@checker
def check_batched_generation(fn) -> Verdict:
    """Check ``fn(model, ids, is_pad, n_new) -> ids (B, T + n_new)`` for left-padded prompts (greedy)."""
    return judge(fn, _generation_cases(), _generation_reference, _GENERATION_MISTAKES,
                 success="every prompt gets the tokens model.generate gives it (learned positions and RoPE, "
                         "prompts of 1 to 6 tokens).")


# ------------------------------------------------------------------------------------------------
# Extend: the sliding-window mask.

def _window_cases() -> list[tuple[int, int]]:
    return [(7, 3), (6, 1), (5, 8)]


def _window(T: int, window: int, *, keys: int = 0, limited: bool = True, causal: bool = True):
    """The band of keys query i reads, i − window < j ≤ i, with ``keys`` more (or fewer) keys per query, no
    lower end (``limited=False``) or no upper end (``causal=False``, the band mirrored into the future)."""
    d = torch.arange(T)[:, None] - torch.arange(T)[None, :]       # i − j
    hi = window - 1 + keys if limited else T
    return (d >= (0 if causal else -hi)) & (d <= hi)


_WINDOW_MISTAKES = variants(_window, [
    ("window-plus-one", dict(keys=1),
     "each query reads window + 1 keys: with j ≥ i − window the key i − window is one too many. The "
     "window holds the query itself and the window − 1 keys before it: i − window < j ≤ i."),
    ("window-minus-one", dict(keys=-1),
     "each query reads only window − 1 keys. The window holds the query itself and the window − 1 keys "
     "before it: i − window < j ≤ i."),
    ("no-window", dict(limited=False),
     "that is the plain causal mask (the whole lower triangle): keys older than the window are still "
     "read. Also block j ≤ i − window."),
    ("no-causal", dict(causal=False),
     "your window reaches into the future: |i − j| < window lets query i read keys j > i. Keep the "
     "causal condition j ≤ i as well."),
]) + [
    Mistake("inverted",
            "your mask is True where a key is blocked. Here, as in scaled_dot_product_attention, True means "
            "'may attend'.",
            lambda T, w: ~sliding_window_mask(T, window=w, dtype=torch.bool)),
    Mistake("float-mask",
            "you returned the float mask (0 / -inf); the exercise asks for the boolean one, True where query i "
            "may read key j.",
            lambda T, w: sliding_window_mask(T, window=w)),
]


@checker
def check_sliding_window_mask(fn) -> Verdict:
    """Check ``fn(T, window) -> mask`` (T, T) bool, True where i − window < j ≤ i."""
    return judge(fn, _window_cases(), lambda T, w: sliding_window_mask(T, window=w, dtype=torch.bool),
                 _WINDOW_MISTAKES,
                 success="each query reads itself and the window − 1 keys before it, never the future "
                         "(T = 7 with window 3, window 1, and a window longer than T).")
