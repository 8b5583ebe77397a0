"""Exercise checkers for chapter 11 (batches and padding).

``check_step_positions(fn)``: ``fn(attention_mask, n_new)``, attention_mask (B, T) in Hugging Face's convention
(1 or True at a real token, 0 at padding; bool, integer or float), must return the int64 positions (B, n_new) of
the last n_new columns: each real token's index among the real tokens of its row, a pad the position of the last
real token before it (0 if none).
``check_nonzero_weights(n)``: a prediction, the number of non-zero attention weights of a padded batch.
``check_batched_generation(fn)``: ``fn(model, ids, attention_mask, n_new)`` must append n_new greedy tokens to
left-padded prompts, as ``model.generate(ids, n_new, is_pad=attention_mask == 0)`` does.
``check_sink_window_mask(fn)``: ``fn(T_q, T_k, window, n_sink)`` must return the boolean (T_q, T_k) mask of a
sliding window that keeps the first n_sink keys readable ("attention sinks"); the queries are the last T_q of
T_k positions.
"""

from __future__ import annotations

import torch

from ..attention import attention_weights, causal_mask, padding_mask, sliding_window_mask
from ..batches import pad_prompts, position_ids
from ..model import GPT
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_step_positions", "check_nonzero_weights", "check_batched_generation",
           "check_sink_window_mask", "NONZERO_LENGTHS"]


# ------------------------------------------------------------------------------------------------
# Build: the positions of the new columns, from an attention_mask (1 = real token).

def _mask_cases() -> list[tuple[torch.Tensor, int]]:
    """(attention_mask, n_new): one mask of each dtype a caller may build, whole prompts and cached steps."""
    def rows(*r):
        return torch.tensor(r)

    return [
        # the prompt pass (n_new = T), bool, left padding only: 2 pads, none, 4 pads
        (rows([0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]).bool(), 5),
        # the prompt pass, int64: left, right and no padding
        (rows([0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]), 6),
        # two new tokens after a cache, float 0 / 1 (a mask built as `(ids != pad).float()`)
        (rows([0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1]).float(), 2),
        # one generation step, int64
        (rows([0, 0, 1, 1], [1, 1, 1, 1]), 1),
    ]


def _step_positions_reference(attention_mask: torch.Tensor, n_new: int) -> torch.Tensor:
    return position_ids(attention_mask == 0)[:, -n_new:]


def _step_positions(attention_mask, n_new, *, count="real", start=-1, clamp=True, window="all"):
    """The positions with the planted mistakes' switches; the defaults are the correct positions.

    ``count``: "real" tokens, the "pads" (the mask read as is_pad), or "columns". ``start``: what is added to the
    running count (−1 puts a first token at 0). ``window``: count over "all" columns, or only the "new" ones.
    """
    m = attention_mask if window == "all" else attention_mask[:, -n_new:]
    if count == "columns":
        n = torch.ones(m.shape, dtype=torch.long).cumsum(-1)
    else:
        n = ((m != 0) if count == "real" else (m == 0)).long().cumsum(-1)
    n = n + start
    return (n.clamp(min=0) if clamp else n)[:, -n_new:]


def _assumes_left_padding(attention_mask, n_new):
    """Column index minus the row's number of pads: right when every pad comes first."""
    T = attention_mask.shape[-1]
    pads = (attention_mask == 0).long().sum(-1, keepdim=True)
    return (torch.arange(T) - pads).clamp(min=0)[:, -n_new:]


def _bitwise_not(attention_mask, n_new):
    """The is_pad recipe of the chapter applied as it is: ~ on a bool flips it, on an integer it flips the bits
    (~1 = −2, ~0 = −1), on a float it fails."""
    return ((~attention_mask).long().cumsum(-1) - 1).clamp(min=0)[:, -n_new:]


_POSITION_MISTAKES = [
    *variants(_step_positions, [
        ("columns", dict(count="columns"),
         "where does the first real token of a left-padded row stand in your positions? Should a pad move "
         "the tokens after it?",
         "your positions are the column indices: they count the padding too, so a prompt that comes after "
         "pads does not start at 0. Only the real tokens count."),
        ("counted-pads", dict(count="pads"),
         "which value of attention_mask marks a real token? Your count grows at the pads and stands still "
         "at the real tokens.",
         "you counted the padding entries, as if the mask were is_pad. In attention_mask, 1 (or True) marks "
         "a real token and 0 a pad: the opposite convention."),
        ("sliced-first", dict(window="new"),
         "right for a whole prompt, wrong after a cache: where does the first new token of a cached step "
         "stand? Does your count know how many real tokens came before the new columns?",
         "you counted the real tokens of the new columns only, so every cached step restarts at position "
         "0. The count runs over the whole sequence so far; only then keep the last n_new columns."),
        ("one-too-far", dict(start=0),
         "which position should the first real token of a prompt get? Look at yours: every real token "
         "stands one place too far.",
         "your positions start at 1: the running count of real tokens includes the token itself, so a "
         "prompt's first token gets 1. Positions start at 0."),
        ("no-clamp", dict(clamp=False),
         "what do your positions hold at the pads before a prompt, and which row of a position table would "
         "that number read?",
         "the pads before a prompt get −1, and an index of −1 silently reads the LAST row of a position "
         "table. No position may go below 0."),
    ]),
    Mistake("assumes-left-padding",
            "your positions are right for the rows padded on the left. Look at the row whose pads come at the "
            "end: where do its real tokens stand?",
            _assumes_left_padding,
            more="you subtracted the row's number of pads from the column index, which is right only when "
                 "every pad comes first. A right-padded row then starts below 0 and its real tokens stand at "
                 "the wrong positions. Count the real tokens up to each column instead."),
    Mistake("bitwise-not",
            "what does ~ do to an integer tensor, and to a float one? And which value of attention_mask marks "
            "a real token: does anything need flipping?",
            _bitwise_not,
            more="~ is a logical not only for bool tensors: on integers it flips the bits (~1 is −2, ~0 is "
                 "−1), on floats it fails. And attention_mask already marks the real tokens with 1, so "
                 "nothing needs flipping: the chapter's is_pad recipe does not carry over as it is."),
]

FLOAT_POSITIONS = Mistake(
    "float-positions",
    "your positions have the right values but are floats. Can a float tensor pick rows of a position table? "
    "Where does the float come from?",
    more="a cumulative sum keeps the dtype of what it sums, and attention_mask may be a float tensor. Positions "
         "index a table, so they must be integers (int64) whatever the mask's dtype.")


def _positions_dtype_look(verdict: Verdict, results) -> Verdict | None:
    if verdict.mistake != "dtype":
        return None
    for _, got, _ in results.outputs():
        if isinstance(got, torch.Tensor) and got.is_floating_point():
            return named(FLOAT_POSITIONS)
    return None


@checker(mistakes=[*_POSITION_MISTAKES, FLOAT_POSITIONS])
def check_step_positions(fn) -> Verdict:
    """Check ``fn(attention_mask, n_new) -> positions``: (B, T) mask, 1 = real → (B, n_new) int64 positions."""
    return judge(fn, _mask_cases(), _step_positions_reference, _POSITION_MISTAKES,
                 diagnose=_positions_dtype_look,
                 success="every row counts from its own first real token, across the cache, in int64 whatever "
                         "the mask's dtype (bool, int64 and float masks; left, right and no padding; whole "
                         "prompts and steps of 1 and 2 new tokens).")


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


def _nonzero_guesses() -> list[Guess]:
    n = torch.tensor(NONZERO_LENGTHS)
    B, T = len(NONZERO_LENGTHS), int(n.max())
    triangles = float((n * (n + 1) / 2).sum())
    return [
        Guess("causal-only",
              "too high: your count gives the real queries weights on padding keys. Which keys of a "
              "left-padded row may no query read?",
              B * T * (T + 1) / 2,
              more="you counted the causal triangle of the whole T × T table in every row, padding included. "
                   "Padding keys are never read, so each prompt keeps only the triangle of its own real "
                   "tokens."),
        Guess("no-mask",
              "too high: that is every entry of P. Which entries do the causal mask and the padding mask "
              "each remove?",
              B * T * T,
              more="you counted all B·T² entries; the causal mask removes each query's future and the padding "
                   "mask removes the padding keys."),
        Guess("no-causal",
              "too high: your queries also read real keys in their future, and the padding queries get "
              "weights too.",
              float(T * n.sum()),
              more="that counts every real key for every query of its row. The causal mask removes the keys "
                   "after each query, and a padding query before the prompt has no real key in its past."),
        Guess("real-square",
              "too high: each real query of yours reads every real key of its prompt, the later ones "
              "included.",
              float((n * n).sum()),
              more="a real query reads only the real keys at or before its own position: the first token of a "
                   "prompt reads one key, the last reads all of them."),
        Guess("pad-rows",
              "too high by the number of padding queries: may a padding query before the prompt read any "
              "key at all?",
              triangles + float((T - n).sum()),
              more="a padding query of a left-padded row sees only padding keys, its own included, and all of "
                   "them are blocked: its row of weights is all zeros."),
        Guess("pads-after",
              "too high: your padding queries read the prompt's keys. Where do the pads stand in this batch, "
              "before the prompt or after it?",
              triangles + float(((T - n) * n).sum()),
              more="that would be right padding, where a pad after the prompt has every real key in its past. "
                   "With left padding the pads come first, and their past holds only padding."),
        Guess("no-self",
              "too low: does a query read its own key?",
              float((n * (n - 1) / 2).sum()),
              more="the causal mask blocks only the keys after a query; its own position stays readable, so "
                   "each real query reads itself too."),
    ]


@checker(kind="predict", mistakes=_nonzero_guesses())
def check_nonzero_weights(value) -> Verdict:
    """Check a prediction of the number of non-zero weights in P (B, T, T) for NONZERO_LENGTHS."""
    return judge_number(value, _measured_nonzero(), _nonzero_guesses(), rtol=1e-6,
                        success="each prompt keeps the triangle of its own real tokens, and the padding "
                                "queries read nothing.")


# ------------------------------------------------------------------------------------------------
# Find the bug: batched greedy generation with a cache and an attention_mask (1 = real token).

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
        cases.append((model, ids, (~is_pad).long(), 4))
    return cases


def _generation_reference(model, ids, attention_mask, n_new):
    return model.generate(ids, n_new, is_pad=attention_mask == 0, use_cache=False)


def _greedy(model, ids, attention_mask, n_new, *, new_value=1, extend=True, prepend=False, use_pad=True,
            read="zero-is-pad"):
    """Greedy generation without a cache, with the planted mistakes' switches; the defaults are right.

    ``new_value``: what the new column of attention_mask holds. ``read``: how attention_mask becomes is_pad,
    "zero-is-pad" (right) or "one-is-pad" (the convention turned round).
    """
    for _ in range(n_new):
        is_pad = attention_mask == 0 if read == "zero-is-pad" else attention_mask != 0
        logits = model(ids, is_pad=is_pad) if use_pad else model(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        column = torch.full_like(nxt, new_value)
        if extend:
            attention_mask = torch.cat([column, attention_mask] if prepend else [attention_mask, column], dim=1)
    return ids


_GENERATION_MISTAKES = variants(_greedy, [
    ("new-as-padding", dict(new_value=0),
     "the first new token of every row is right and the later ones are not. When the model reads a token "
     "it generated, what does it take that token for? Read the convention of attention_mask again.",
     "each generated token goes into attention_mask as a pad: in this convention 0 means padding and 1 a "
     "real token. So no later step reads the new tokens, and the positions after them stop counting."),
    ("reads-ones-as-padding", dict(read="one-is-pad"),
     "which tokens does the model take for padding now? Look at the first step: does it read the prompts' "
     "own tokens?",
     "the table you pass as is_pad is True at the real tokens, so the model reads the padding and ignores "
     "the prompts. is_pad is True at a pad, attention_mask is 1 at a real token: one is the negation of the "
     "other."),
    ("not-extended", dict(extend=False),
     "the model is handed a padding table shorter than the sequence it has seen: does the mask grow as the "
     "tokens do?",
     "attention_mask must grow with ids: after appending a token, append one column to the mask as "
     "well."),
    ("prepended", dict(prepend=True),
     "the mask grows, but does its new column stand where the new token stands?",
     "the new column went to the front of attention_mask, which shifts every flag one place to the right; "
     "it belongs at the end, where the new token is."),
    ("no-padding", dict(use_pad=False),
     "the rows without padding are right, the padded ones are not: does the model know where the padding "
     "is?",
     "the model is called without is_pad, so the real tokens read the padding and count their positions "
     "from column 0."),
])


@checker(mistakes=_GENERATION_MISTAKES)
def check_batched_generation(fn) -> Verdict:
    """Check ``fn(model, ids, attention_mask, n_new) -> ids (B, T + n_new)`` for left-padded prompts (greedy)."""
    return judge(fn, _generation_cases(), _generation_reference, _GENERATION_MISTAKES,
                 success="every prompt gets the tokens model.generate gives it (learned positions and RoPE, "
                         "prompts of 1 to 6 tokens).")


# ------------------------------------------------------------------------------------------------
# Extend: a sliding window that keeps the first tokens ("attention sinks").

def _sink_cases() -> list[tuple[int, int, int, int]]:
    """(T_q, T_k, window, n_sink): a prompt, two new tokens after a cache, one step, a window longer than T,
    and no sink."""
    return [(8, 8, 3, 2), (2, 9, 3, 2), (1, 7, 2, 1), (3, 6, 8, 2), (5, 5, 2, 0)]


def _sink_reference(T_q, T_k, window, n_sink):
    sinks = causal_mask(T_q, T_k, dtype=torch.bool) & (torch.arange(T_k) < n_sink)
    return sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool) | sinks


def _sink_window(T_q, T_k, window, n_sink, *, offset=0, keys=0, sinks="causal", use_offset=True):
    """The mask with the planted mistakes' switches; the defaults are right.

    Query i stands at position T_k − T_q + i (+ ``offset``), or at i without ``use_offset``; it reads the
    ``window`` (+ ``keys``) positions up to its own; ``sinks``: "causal" (the first n_sink keys, once in the
    past), "always" (in the future too), "none", or "and" (a key must be in the window AND a sink).
    """
    i = torch.arange(T_q)[:, None] + ((T_k - T_q) if use_offset else 0) + offset
    j = torch.arange(T_k)[None, :]
    past = j <= i
    in_window = past & (j > i - window - keys)
    is_sink = j < n_sink
    if sinks == "causal":
        return in_window | (past & is_sink)
    if sinks == "always":
        return in_window | is_sink
    if sinks == "and":
        return in_window & is_sink
    return in_window


_SINK_MISTAKES = variants(_sink_window, [
    ("no-sinks", dict(sinks="none"),
     "look at a query far from the start: does it still read the first n_sink keys?",
     "that is the sliding window alone: the first n_sink keys must stay readable for every later query, "
     "however far behind the window they are."),
    ("sinks-read-future", dict(sinks="always"),
     "look at the first rows of the prompt: does query 0 read any key after its own position?",
     "a sink is readable only once it lies in the query's past: in the first rows of a prompt, a sink "
     "after the query is still its future, and the causal mask must block it."),
    ("sinks-and-window", dict(sinks="and"),
     "does a query in the middle of the sequence read its own key? Which keys may a query read: those of "
     "the window, the sinks, or only those that are both?",
     "a key is readable when it is in the window OR is a sink; your mask keeps only the keys that are "
     "both."),
    ("queries-from-zero", dict(use_offset=False),
     "right when T_q = T_k, wrong after a cache: when T_k > T_q, which positions do your rows stand for? "
     "Does the last row read the last key?",
     "your rows stand for positions 0 … T_q − 1. With a cache the queries are the LAST T_q of the T_k "
     "positions: row i stands at position T_k − T_q + i."),
    ("offset-one-too-far", dict(offset=1),
     "count the keys your rows read to the right of their own position: should there be any?",
     "your rows stand one position too far to the right: each query reads the key after its own, its "
     "future, and loses the oldest key of its window."),
    ("window-plus-one", dict(keys=1),
     "count the keys a query in the middle reads outside the sinks: how many should the window hold?",
     "each query reads window + 1 recent keys: the window holds the query itself and the window − 1 keys "
     "before it."),
    ("window-minus-one", dict(keys=-1),
     "count the keys a query in the middle reads outside the sinks: how many should the window hold?",
     "each query reads only window − 1 recent keys: the window holds the query itself and the window − 1 "
     "keys before it."),
]) + [
    Mistake("inverted",
            "your mask is True where a key is blocked. Which convention does the exercise ask for?",
            lambda *case: ~_sink_reference(*case),
            more="here, as in scaled_dot_product_attention, True means 'may attend'; your mask is True at the "
                 "blocked keys."),
    Mistake("float-mask",
            "you returned an additive mask of 0 and −∞; the exercise asks for a boolean one, True where a "
            "key may be read.",
            lambda *case: torch.zeros(case[0], case[1]).masked_fill(~_sink_reference(*case), float("-inf")),
            more="a float 0 / −∞ mask is added to the scores; the exercise asks for the boolean mask, True "
                 "where query i may read key j, which masked_fill and SDPA's attn_mask read directly."),
]

FLOAT_01 = Mistake(
    "float-01-mask",
    "your mask has the right pattern but holds floats 0 and 1. What would scaled_dot_product_attention do "
    "with a float attn_mask: block the zeros, or add the numbers to the scores?",
    more="a float attn_mask is ADDED to the scores: 0 and 1 shift them and block nothing, and masked_fill "
         "refuses a float mask. Return a boolean tensor, True where query i may read key j.")


def _sink_dtype_look(verdict: Verdict, results) -> Verdict | None:
    """Floats 0 and 1 in the right pattern on every case (a float mask with another pattern is not named)."""
    if verdict.mistake != "dtype":
        return None
    for case, got, _ in results.outputs():
        if not (isinstance(got, torch.Tensor) and got.is_floating_point() and got.shape == (case[0], case[1])):
            return None
        if not (bool(((got == 0) | (got == 1)).all()) and torch.equal(got.bool(), _sink_reference(*case))):
            return None
    return named(FLOAT_01)


@checker(mistakes=[*_SINK_MISTAKES, FLOAT_01])
def check_sink_window_mask(fn) -> Verdict:
    """Check ``fn(T_q, T_k, window, n_sink) -> mask`` (T_q, T_k) bool: the window and the first n_sink keys,
    never the future; query i stands at position T_k − T_q + i."""
    return judge(fn, _sink_cases(), _sink_reference, _SINK_MISTAKES,
                 diagnose=_sink_dtype_look,
                 success="each query reads the sinks in its past and the last window keys up to its own "
                         "position, never the future (a prompt, steps after a cache, a window longer than T, "
                         "no sink).")
