"""Wrong answers to the exercise of the page on trained heads, written from the exercise text.

ex-heads-uniform-score: r distinct tokens repeated (T = 2r), every row i of the table spreads 1 / (i + 1) over its
keys; the induction score averages, over the queries of the repeated half, the weight on the token after the earlier
copy; the answer is the limit of r × score as r grows (ln 2).

ex-heads-all-targets: ids (…, T) → bool (…, T, T), True at (i, j + 1) for every j < i with the token of position i,
every earlier copy and not only the latest."""

from __future__ import annotations

import torch

from wrong_answers import Wrong, collect, wrong


def r_times_score(r: int, spread=lambda i: 1 / (i + 1), over=None) -> float:
    """r × the uniform table's induction score on r tokens twice, rows spreading ``spread(i)``, divided by ``over``."""
    return r * sum(spread(i) for i in range(r, 2 * r)) / (over or r)


U = "ex-heads-uniform-score", "check_uniform_induction_score"
at_seven = Wrong(*U, r_times_score(7), "computed r × score at r = 7 and took it for the limit", frozenset({"finite-r"}))
page_r16 = Wrong(*U, 16 * 0.04, "multiplied the page's printed r = 16 baseline by 16", frozenset({"page-demo"}))
over_all_rows = Wrong(*U, r_times_score(1000, over=2000), "divided by all 2r rows, not by the r queries with a copy",
                      frozenset({"all-queries"}))
no_mask = Wrong(*U, r_times_score(1000, spread=lambda i: 1 / 2000),
                "forgot the causal mask: every row spread over all 2r keys", frozenset({"no-mask"}))
one_over_r = Wrong(*U, 1.0, "took each row's weight as 1 / r, one of the r tokens of the block",
                   frozenset({"one-block"}))
score_limit = Wrong(*U, 0, "gave the limit of the score itself", frozenset({"score-itself"}))

ALL = ("ex-heads-all-targets", "check_all_induction_targets")


def _same(ids, earlier):
    return (ids[..., :, None] == ids[..., None, :]) & earlier


def _strict(T):
    i = torch.arange(T)
    return i[None, :] < i[:, None]


def _shift_right(same):
    out = torch.zeros_like(same)
    out[..., 1:] = same[..., :-1]
    return out


@wrong(*ALL, "kept the page's latest-copy rule: only the latest earlier copy gets a target", "latest-only")
def latest_copy(ids):
    T = ids.shape[-1]
    same = _same(ids, _strict(T))
    latest = torch.where(same, torch.arange(T), -1).amax(-1, keepdim=True)
    return _shift_right(same & (torch.arange(T) == latest))


@wrong(*ALL, "took the first earlier copy, with argmax over the matches", "first-only")
def first_copy(ids):
    T = ids.shape[-1]
    same = _same(ids, _strict(T))
    first = same.int().argmax(-1, keepdim=True)
    return _shift_right(same & (torch.arange(T) == first))


@wrong(*ALL, "marked the earlier copies themselves, forgot the + 1", "on-the-copy")
def no_shift(ids):
    return _same(ids, _strict(ids.shape[-1]))


@wrong(*ALL, "shifted the copies the wrong way (j - 1)", "before-the-copy")
def shifted_left(ids):
    same = _same(ids, _strict(ids.shape[-1]))
    out = torch.zeros_like(same)
    out[..., :-1] = same[..., 1:]
    return out


@wrong(*ALL, "used tril() with the diagonal, so each query counts as its own copy", "query-counted")
def with_diagonal(ids):
    T = ids.shape[-1]
    return _shift_right(_same(ids, torch.ones(T, T, dtype=torch.bool).tril()))


@wrong(*ALL, "used triu(1): the copies after the query", "later-copies")
def upper_triangle(ids):
    T = ids.shape[-1]
    return _shift_right(_same(ids, torch.ones(T, T, dtype=torch.bool).triu(1)))


@wrong(*ALL, "built the table as (key, query): returned it transposed", "transposed")
def key_rows(ids):
    return _shift_right(_same(ids, _strict(ids.shape[-1]))).transpose(-1, -2)


@wrong(*ALL, "looped j over range(i - 1), missing the copy just before the query", "own-key-dropped")
def loop_off_by_one(ids):
    flat = ids.reshape(-1, ids.shape[-1])
    T = flat.shape[-1]
    out = torch.zeros(flat.shape[0], T, T, dtype=torch.bool)
    for b, row in enumerate(flat.tolist()):
        for i in range(T):
            for j in range(i - 1):
                if row[j] == row[i]:
                    out[b, i, j + 1] = True
    return out.reshape(*ids.shape, T)


@wrong(*ALL, "returned 0/1 floats, ready to multiply P with", "dtype")
def as_floats(ids):
    return _shift_right(_same(ids, _strict(ids.shape[-1]))).float()


@wrong(*ALL, "wrote it for one sequence: ids[:, None] == ids[None, :]", "one-sequence")
def one_row_only(ids):
    T = ids.shape[-1]
    return _shift_right((ids[:, None] == ids[None, :]) & _strict(T))


WRONG = collect(globals())
