"""Wrong answers to the exercise of the page on trained heads, written from the exercise text.

ex-heads-uniform-score: r = 7 distinct tokens repeated (T = 14), every row i of the table spreads 1 / (i + 1) over
its keys; the induction score averages, over the queries of the repeated half, the weight on the token after the
earlier copy.

ex-heads-all-targets: ids (…, T) → bool (…, T, T), True at (i, j + 1) for every j < i with the token of position i,
every earlier copy and not only the latest."""

from __future__ import annotations

import torch

from wrong_answers import Wrong, collect, wrong

R, T = 7, 14
QUERIES = range(R, T)                                     # 0-based rows of the repeated half

off_by_one = Wrong("ex-heads-uniform-score", "check_uniform_induction_score",
                   sum(1 / i for i in QUERIES) / R,
                   "row i spread as 1 / i instead of 1 / (i + 1) (positions counted from 1 but rows from 0)",
                   frozenset({"strict"}))
summed = Wrong("ex-heads-uniform-score", "check_uniform_induction_score",
               sum(1 / (i + 1) for i in QUERIES),
               "added the seven weights but did not divide by the number of queries",
                    frozenset({"summed"}))
over_all_rows = Wrong("ex-heads-uniform-score", "check_uniform_induction_score",
                      sum(1 / (i + 1) for i in QUERIES) / T,
                      "divided by all 14 rows, not by the 7 queries that have an earlier copy",
                      frozenset({"all-queries"}))
every_row_mean = Wrong("ex-heads-uniform-score", "check_uniform_induction_score",
                       sum(1 / (i + 1) for i in range(T)) / T,
                       "averaged the uniform weight 1 / (i + 1) over every row, first half included",
                    frozenset({"every-row"}))
no_mask = Wrong("ex-heads-uniform-score", "check_uniform_induction_score", 1 / T,
                "forgot the causal mask: every row spread over all 14 keys", frozenset({"no-mask"}))
one_over_r = Wrong("ex-heads-uniform-score", "check_uniform_induction_score", 1 / R,
                   "took 1 / r, one of the 7 tokens of the block", frozenset({"one-block"}))
previous_token = Wrong("ex-heads-uniform-score", "check_uniform_induction_score",
                       sum(1 / (i + 1) for i in range(1, T)) / (T - 1),
                       "computed the uniform table's previous-token score instead",
                    frozenset({"previous-token"}))
copied_demo = Wrong("ex-heads-uniform-score", "check_uniform_induction_score", 0.16,
                    "copied the uniform row of the hand-made tables (T = 8)", frozenset({"page-demo"}))
copied_table = Wrong("ex-heads-uniform-score", "check_uniform_induction_score", 0.04,
                     "copied the uniform baseline of the seed-0 table (T = 32)", frozenset({"page-r16"}))

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


@wrong(*ALL, "wrote it for one sequence: ids[:, None] == ids[None, :]")
def one_row_only(ids):
    T = ids.shape[-1]
    return _shift_right((ids[:, None] == ids[None, :]) & _strict(T))


WRONG = collect(globals())
