"""Wrong answers to the exercises of chapter 11 (batches and padding), written from the exercise texts."""

from __future__ import annotations

import torch

from attnlib import KVCache, causal_mask, position_ids, sliding_window_mask
from wrong_answers import Wrong, collect, wrong

# --- ex-11-position-ids ----------------------------------------------------------------------------------------


def _starts(doc_ids):
    """True at the first column of each document (the correct boundaries, for the answers below)."""
    new = torch.ones_like(doc_ids, dtype=torch.bool)
    new[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    return new


@wrong("ex-11-position-ids", "check_packed_positions", "the column index, pads set to 0: no restart", "no-restart")
def packed_arange(doc_ids):
    col = torch.arange(doc_ids.shape[1]).expand_as(doc_ids)
    return col.masked_fill(doc_ids < 0, 0)


@wrong("ex-11-position-ids", "check_packed_positions", "the chapter's position_ids with the pads as is_pad",
       "no-restart")
def packed_chapter_recipe(doc_ids):
    return position_ids(doc_ids < 0)


@wrong("ex-11-position-ids", "check_packed_positions", "a loop whose count starts at 1", "from-one")
def packed_loop_from_one(doc_ids):
    out = torch.zeros_like(doc_ids)
    for b in range(doc_ids.shape[0]):
        n, prev = 0, None
        for t in range(doc_ids.shape[1]):
            d = int(doc_ids[b, t])
            n = 1 if d != prev else n + 1
            out[b, t] = n if d >= 0 else 0
            prev = d
    return out


@wrong("ex-11-position-ids", "check_packed_positions", "torch.diff flags padded on the right", "boundary-one-early")
def packed_diff_right(doc_ids):
    flags = torch.cat([torch.diff(doc_ids, dim=1) != 0, torch.zeros_like(doc_ids[:, :1], dtype=torch.bool)], 1)
    col = torch.arange(doc_ids.shape[1]).expand_as(doc_ids)
    first = torch.where(flags, col, 0).cummax(1).values
    return (col - first).masked_fill(doc_ids < 0, 0)


@wrong("ex-11-position-ids", "check_packed_positions", "forgets the pads: they count as one more document",
       "pads-as-document")
def packed_pads_forgotten(doc_ids):
    col = torch.arange(doc_ids.shape[1]).expand_as(doc_ids)
    return col - torch.where(_starts(doc_ids), col, 0).cummax(1).values


@wrong("ex-11-position-ids", "check_packed_positions", "keeps doc_ids' -1 at the pads", "pads-minus-one")
def packed_pads_keep_marker(doc_ids):
    col = torch.arange(doc_ids.shape[1]).expand_as(doc_ids)
    pos = col - torch.where(_starts(doc_ids), col, 0).cummax(1).values
    return torch.where(doc_ids < 0, doc_ids, pos)


@wrong("ex-11-position-ids", "check_packed_positions", "document lengths from the first row, used for all rows",
       "shared-rows")
def packed_lengths_of_row_0(doc_ids):
    row = doc_ids[0]
    starts = torch.zeros_like(row)
    for d in range(int(row.max()) + 1):
        starts[row == d] = int((row == d).nonzero()[0])
    pos = torch.arange(doc_ids.shape[1]) - starts
    return pos.expand_as(doc_ids).masked_fill(doc_ids < 0, 0)


@wrong("ex-11-position-ids", "check_packed_positions", "pads take the last real position, as on the page",
       "pads-keep-last")
def packed_pads_as_page(doc_ids):
    col = torch.arange(doc_ids.shape[1]).expand_as(doc_ids)
    pos = col - torch.where(_starts(doc_ids), col, 0).cummax(1).values
    for b in range(doc_ids.shape[0]):
        real = doc_ids[b] >= 0
        pos[b, ~real] = pos[b, real][-1]
    return pos


@wrong("ex-11-position-ids", "check_packed_positions", "built with float arithmetic and returned as float", "dtype")
def packed_float(doc_ids):
    col = torch.arange(doc_ids.shape[1], dtype=torch.float32).expand(doc_ids.shape)
    first = torch.where(_starts(doc_ids), col, 0.0).cummax(1).values
    return (col - first).masked_fill(doc_ids < 0, 0)


# --- ex-11-predict-nonzero -------------------------------------------------------------------------------------

_L, _T = (5, 2, 7), 7
PREDICTIONS = [
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", 3 * _T * (_T + 1) // 2, "causal mask only, pads ignored",
          frozenset({"causal-only"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", sum(n * n for n in _L),
          "padding only: n² per row, no causal",
          frozenset({"real-square"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", sum(n * (n - 1) // 2 for n in _L),
          "n(n-1)/2: the diagonal left out", frozenset({"no-self"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", sum(n * (n + 1) // 2 for n in _L) + (2 + 5) * _T,
          "pad queries get uniform rows over all T keys", frozenset({"pad-rows-uniform"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", sum(n * (n + 1) // 2 for n in _L) + 3 + 15,
          "pad queries read their own causal prefix of pads", frozenset({"pads-read-pads"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", sum(_T * n for n in _L), "every query reads all real keys",
          frozenset({"no-causal"})),
    Wrong("ex-11-predict-nonzero", "check_nonzero_weights", 147 // 2,
          "about half of the 147, as the causal mask keeps", frozenset({"half-of-all"})),
]

# --- ex-11-find-bug --------------------------------------------------------------------------------------------


@wrong("ex-11-find-bug", "check_batched_generation",
       "changed is_pad to attention_mask == 1 instead of fixing the append", "reads-ones-as-padding")
def gen_flipped_is_pad(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=attention_mask == 1)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.cat([attention_mask, torch.zeros_like(step)], dim=1)
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "fed the whole ids each step, with the caches kept", "refed-with-cache")
def gen_feeds_all_ids(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=attention_mask == 0)
        ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(ids[:, -1:])], dim=1)
        step = ids
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "resets the whole mask to ones: the prompts' pads become real", "pads-forgotten")
def gen_mask_all_ones(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=attention_mask == 0)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.ones_like(ids)
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "takes the first position's logits: logits[:, :1]", "first-position")
def gen_first_logits(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=attention_mask == 0)
        step = logits[:, :1].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(step)], dim=1)
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "drops is_pad after the first step instead of extending the mask", "pads-forgotten")
def gen_drops_is_pad(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    is_pad = attention_mask == 0
    for _ in range(n_new):
        logits = model(step, caches, is_pad=is_pad)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        is_pad = None
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "rebuilds is_pad from the tokens: ids == 0 taken as a pad", "token-as-flag")
def gen_pad_from_token_zero(model, ids, attention_mask, n_new):
    caches = [KVCache() for _ in model.blocks]
    step = ids
    for _ in range(n_new):
        logits = model(step, caches, is_pad=ids == 0)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
    return ids


@wrong("ex-11-find-bug", "check_batched_generation",
       "a new cache every step, feeding only the new token", "fresh-cache")
def gen_fresh_caches(model, ids, attention_mask, n_new):
    step = ids
    for _ in range(n_new):
        caches = [KVCache() for _ in model.blocks]
        logits = model(step, caches, is_pad=attention_mask[:, -step.shape[1]:] == 0)
        step = logits[:, -1:].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(step)], dim=1)
    return ids


# --- ex-11-window ----------------------------------------------------------------------------------------------


@wrong("ex-11-window", "check_sink_window_mask",
       "sinks without causality: early queries read sink keys in their future", "sinks-read-future")
def sink_not_causal(T_q, T_k, window, n_sink):
    mask = sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool)
    mask[:, :n_sink] = True
    return mask


@wrong("ex-11-window", "check_sink_window_mask", "returns the float mask (0 / -inf)", "float-mask")
def sink_float(T_q, T_k, window, n_sink):
    keep = sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool)
    keep = keep | (causal_mask(T_q, T_k, dtype=torch.bool) & (torch.arange(T_k) < n_sink))
    return torch.zeros(T_q, T_k).masked_fill(~keep, float("-inf"))


@wrong("ex-11-window", "check_sink_window_mask", "n_sink + 1 sinks (<= n_sink)", "sinks-plus-one")
def sink_off_by_one(T_q, T_k, window, n_sink):
    sinks = torch.arange(T_k) <= n_sink
    return sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool) | (
        causal_mask(T_q, T_k, dtype=torch.bool) & sinks)


@wrong("ex-11-window", "check_sink_window_mask",
       "window written by hand as i - window <= j: one key too many", "window-plus-one")
def sink_window_off_by_one(T_q, T_k, window, n_sink):
    i = torch.arange(T_k - T_q, T_k)[:, None]
    j = torch.arange(T_k)
    return (j <= i) & ((i - window <= j) | (j < n_sink))


@wrong("ex-11-window", "check_sink_window_mask",
       "queries taken as the first T_q positions (top-left)", "queries-from-zero")
def sink_top_left(T_q, T_k, window, n_sink):
    i = torch.arange(T_q)[:, None]
    j = torch.arange(T_k)
    return (j <= i) & ((j > i - window) | (j < n_sink))


@wrong("ex-11-window", "check_sink_window_mask", "AND of window and sinks instead of OR", "sinks-and-window")
def sink_and(T_q, T_k, window, n_sink):
    sinks = (torch.arange(T_k) < n_sink).expand(T_q, T_k)
    return sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool) & sinks


@wrong("ex-11-window", "check_sink_window_mask",
       "sinks only, the window forgotten beyond the causal mask: causal | sinks", "no-window")
def sink_causal_or(T_q, T_k, window, n_sink):
    sinks = torch.arange(T_k) < n_sink
    return causal_mask(T_q, T_k, dtype=torch.bool) | sinks


@wrong("ex-11-window", "check_sink_window_mask",
       "window widened by n_sink instead of adding sink keys", "window-widened")
def sink_window_widened(T_q, T_k, window, n_sink):
    return sliding_window_mask(T_q, T_k, window=window + n_sink, dtype=torch.bool)


WRONG = collect(globals()) + PREDICTIONS
