"""Exercise checkers for the page on trained heads.

``check_uniform_induction_score(value)``: the predicted limit, as r grows, of r × the induction score of a uniform
causal table on r distinct tokens followed by the same r tokens again (ln 2).
``check_all_induction_targets(fn)``: ``fn(ids)``, ids (…, T) → bool (…, T, T), True at (i, j + 1) for every
earlier position j < i holding the token of position i (every earlier copy, not only the latest).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..attention import causal_mask
from ..induction import induction_score
from ._core import Guess, Verdict, checker, judge, judge_number, variants

__all__ = ["check_uniform_induction_score", "check_all_induction_targets"]

def _measured(r: int) -> float:
    """The induction score of a uniform causal table on r distinct tokens, twice."""
    readable = causal_mask(2 * r, dtype=torch.bool)
    return induction_score(readable.double() / readable.sum(-1, keepdim=True), torch.arange(r).repeat(2)).item()


_GUESSES = [   # typical wrong values of c = lim r × score
    Guess("all-queries", "too low by half: which queries does the induction score average over?", math.log(2) / 2,
          "the first r tokens have no earlier copy, so the score averages over the r queries of the second half."),
    Guess("no-mask", "too low: each row spreads its weight over too many keys. How many may query i read?", 0.5,
          "a causal row i spreads its weight over keys 0 … i, so its weight on one key shrinks as i grows."),
    Guess("one-block", "too high: each row spreads its weight over too few keys. Which keys may row i read?", 1.0,
          "row i of the uniform table reads i + 1 keys, not r."),
    Guess("score-itself", "too low: the score tends to 0, but the question asks for r × score.", 0.0,
          "the score tends to 0; multiplied by r it tends to a number between 1/2 and 1."),
    *[Guess(label, "a little too low: that is r × score at one r, such as the page's. Does it still change as r "
            "grows?", r * _measured(r), "r × score is a sum of 1/m over m = r + 1 … 2r; compare it with an integral.")
      for label, r in (("page-demo", 4), ("finite-r", 7), ("page-r16", 16))],
    *[Guess("score-at-one-r", "too low: that is the score itself at one r, not r × score. What does multiplying "
            "by r do to it?", _measured(r), "the score shrinks like 1/r; the question asks for the limit of r × "
            "score, which stays near a fixed number.") for r in (4, 7, 16)],
    Guess("one-mean-count", "too low: 2/3 counts every second-half row as reading 1.5 r keys. Does each read "
          "as many?", 2 / 3,
          "2/3 takes every second-half row as reading about 1.5 r keys; row i reads i + 1, so sum its weight "
          "1/(i + 1) row by row instead of using one mean count."),
    Guess("inverted", "too high: that is 1 over the limit. Is r × score a sum of counts, or of weights?",
          1 / math.log(2), "r × score sums the weights 1/m for m = r + 1 … 2r; you inverted the result."),
    Guess("log10", "too low: that is a base-10 logarithm. Which one does the sum of 1/m become?", math.log10(2),
          "the sum of 1/m over m = r + 1 … 2r tends to the integral of dm/m: which logarithm is that?"),
]


@checker(kind="predict", mistakes=_GUESSES)
def check_uniform_induction_score(value) -> Verdict:
    return judge_number(value, math.log(2), _GUESSES, rtol=0.01,
                        success="r × score = 1/(r + 1) + … + 1/(2r), which tends to ∫ dm/m from r to 2r = ln 2.",
                        again="write the score for one r as a sum over the queries of the second half, multiply by "
                              "r, and let r grow.")


# --- induction targets for text, where a token may have several earlier copies -----------------------------------

def _targets_cases() -> list[tuple[torch.Tensor]]:
    return [
        (torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 5, 1]),),                   # three 1s, four 5s, 5 5
        (torch.tensor([[0, 1, 0, 1, 0, 1, 2], [4, 4, 4, 2, 7, 2, 4]]),),           # B = 2
        (torch.tensor([[[1, 2, 3, 1, 2, 3], [5, 6, 5, 6, 6, 5]],
                       [[0, 0, 1, 0, 0, 1], [2, 3, 4, 5, 6, 7]]]),),                # (2, 2, 6), one row no repeat
    ]


def _planted_targets(ids, *, copies: str = "every", shift: int = 1, self_copy: bool = False,
                     later: bool = False, transpose: bool = False, own_key: bool = True, one_row: bool = False):
    """The targets (the defaults), or a planted slip: ``copies`` "every", "latest" or "first"; the target at the
    copy + ``shift``; j ≤ i (``self_copy``) or j > i (``later``); ``own_key`` False drops the target at i itself."""
    T = ids.shape[-1]
    i = torch.arange(T)
    before = i[None, :] <= i[:, None] if self_copy else i[None, :] < i[:, None]       # (i, j)
    before = i[None, :] > i[:, None] if later else before
    same = (ids[:, None] == ids[None, :] if one_row else ids[..., :, None] == ids[..., None, :]) & before   # j earlier
    if copies != "every":
        pick = torch.where(same, i, -1).amax(-1) if copies == "latest" else torch.where(same, i, T).amin(-1)
        same = same & (i == pick[..., None])
    target = F.pad(same, (shift, -shift))                                               # copy j → key j + shift
    if not own_key:
        target = target & ~torch.eye(T, dtype=torch.bool)
    return target.transpose(-2, -1) if transpose else target


_TARGETS_MISTAKES = variants(_planted_targets, [
    *[(f"{which}-only", {"copies": which},
       "a token that appears three times: how many targets does its last occurrence get from you?",
       f"your targets follow only the {which} earlier copy{page}; every earlier copy j gives a target at j + 1.")
      for which, page in (("latest", ", as the page's induction_targets does"), ("first", ""))],
    ("on-the-copy", {"shift": 0},
     "which position does an induction head read: the earlier copy, or a neighbour of it?",
     "you marked the earlier copies themselves; an induction head reads the token that followed each copy."),
    ("before-the-copy", {"shift": -1},
     "an induction head predicts what comes next. Which neighbour of the earlier copy holds that token?",
     "you marked the position before each earlier copy; the target is the position after it."),
    *[("query-counted", {"self_copy": True, **latest},
       "is a query its own earlier copy? Look at the first token of a row: it has no earlier copy at all.",
       f"your {which} the query's own position, so every query gets a target in its future.")
      for latest, which in (({}, "earlier copies include"), ({"copies": "latest"}, "latest earlier copy is"))],
    ("later-copies", {"later": True},
     "may a causal head read a key after its query? Where do your targets lie, left or right of the diagonal?",
     "your copies are the ones after the query, j > i: its future."),
    ("one-sequence", {"one_row": True}, "right for one sequence: with a batch axis in front, which axes do your "
     "comparisons pair up?", "your comparison indexes the first axis, which is the batch when one comes in; compare "
     "the positions, the last axis, of each sequence with its own."),
    ("transposed", {"transpose": True},
     "rows are queries, columns keys: do your True entries lie in the rows of the repeated tokens?",
     "your table is transposed: the target of query i belongs in row i, at column j + 1."),
    ("own-key-dropped", {"own_key": False},
     "a token repeated right after itself, as in [5 5]: which key follows the first 5?",
     "you left out a target at the query's own position: when the token just before the query is its earlier "
     "copy, the key after that copy is the query itself."),
])


_targets_reference = _planted_targets


@checker(mistakes=_TARGETS_MISTAKES)
def check_all_induction_targets(fn) -> Verdict:
    return judge(fn, _targets_cases(), _targets_reference, _TARGETS_MISTAKES, atol=0.0,
                 success="every earlier copy of the query's token gives a target at the position after it (one row, "
                         "a batch, and two leading axes).")
