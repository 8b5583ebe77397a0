"""Exercise checkers for chapter 11 (batches and padding).

``check_packed_positions(fn)``: ``fn(doc_ids)``, (B, T) int64 (−1 at a pad) → (B, T) positions within each document.
``check_nonzero_weights(value)``: a predicted count of the non-zero weights of a padded batch (NONZERO_LENGTHS).
``check_batched_generation(fn)``: ``fn(model, ids, attention_mask, n_new)`` → ids (B, T + n_new), the bug fixed.
``check_sink_window_mask(fn)``: ``fn(T_q, T_k, window, n_sink)`` → (T_q, T_k) bool sliding window with sinks.
"""

from __future__ import annotations

import functools
import math

import torch

from ..attention import attention_weights, causal_mask, padding_mask, sliding_window_mask
from ..batches import pad_prompts
from ..heads import KVCache
from ..model import GPT, GPTConfig
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_packed_positions", "check_nonzero_weights", "check_batched_generation",
           "check_sink_window_mask", "NONZERO_LENGTHS"]


# --- build: positions that restart at each document packed into a row ----------------------------------------------

def _packed_cases() -> list[tuple[torch.Tensor]]:
    return [
        (torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 0, 0, 0, 1, 1, -1]]),),   # documents start at other columns
        (torch.tensor([[0, 0, 0, 0, 0, 1], [0, 1, 2, 3, 4, 5], [0, 0, 0, 0, -1, -1]]),),   # one-token documents
        (torch.tensor([[0, 0, 1, 1, 1, 1, -1, -1, -1]]),),                          # one row, three pads
        (torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1]]),),         # a row's last id begins the next row: rows apart
    ]


def _packed_positions(doc_ids, *, restart=True, start=0, pads="zero", early=False, shared=False, flat=False):
    """The positions, or a planted slip (``pads``: what a pad gets; ``shared``: every row cut as row 0 is; ``flat``:
    one count run over the rows laid end to end)."""
    if flat:
        return _packed_positions(doc_ids.reshape(1, -1), pads=pads).reshape(doc_ids.shape)
    d = doc_ids[:1].expand_as(doc_ids) if shared else doc_ids
    col = torch.arange(d.shape[-1]).expand_as(d)
    differs = d[:, 1:] != d[:, :-1]                                           # (B, T − 1)
    edge = torch.ones_like(differs[:, :1]) if not early else torch.zeros_like(differs[:, :1])
    new = torch.cat([edge, differs] if not early else [differs, edge], dim=-1)
    first = torch.where(new, col, 0).cummax(-1).values if restart else torch.zeros_like(col)
    pos, pad = col - first + start, doc_ids < 0
    if pads == "last":
        return torch.where(pad, pos.gather(-1, ((~pad).sum(-1, keepdim=True) - 1).clamp(min=0)), pos)
    return pos if pads == "document" else pos.masked_fill(pad, 0 if pads == "zero" else -1)


_PACKED_MISTAKES = variants(_packed_positions, [
    *[("no-restart", dict(restart=False, pads=pads),
       "where does the first token of a row's second document stand in yours? Where would it stand alone?",
       "your positions run on along the whole row; each packed document is a prompt of its own, so the count "
       "starts again at 0 at its first token.") for pads in ("document", "zero", "last")],
    ("from-one", dict(start=1), "which position does the first token of each document get in yours?",
     "your positions start at 1; a token's index within its document starts at 0."),
    ("pads-as-document", dict(pads="document"),
     "your documents are right. What do the pads at the end of a row get in yours?",
     "the pads count 0, 1, 2, … as one more document (−1 differs from the last document's number); every pad "
     "must get 0."),
    ("pads-keep-last", dict(pads="last"), "your documents are right. What does the statement ask for at a pad?",
     "your pads take the last real token's position, as the chapter's position_ids does; here every pad gets 0."),
    ("pads-minus-one", dict(pads="minus"),
     "your documents are right. Which row of a position table would your pads read?",
     "your pads keep doc_ids' −1, and an index of −1 silently reads the LAST row of a table; every pad gets 0."),
    ("boundary-one-early", dict(early=True),
     "look at the last token of each document in yours, and the first of the next: where does your count restart?",
     "your count restarts one column early: comparing neighbours gives one flag fewer than columns, and the flag "
     "of a new document belongs at the column where the new id appears."),
    ("across-rows", dict(flat=True), "does your count start again at each row, or run on from the row before?",
     "each row is a sequence of its own: its first token starts a document, whatever id ended the row before."),
    ("shared-rows", dict(shared=True),
     "the first row is right in yours. Do the other rows start their documents at the same columns?",
     "you cut every row where the first row's documents start; each row's starts come from its own doc_ids."),
])


@checker(mistakes=_PACKED_MISTAKES)
def check_packed_positions(fn) -> Verdict:
    """Check ``fn(doc_ids) -> positions``: (B, T) int64 document of each token (−1 at a pad) → (B, T) int64
    index of each token within its own document, 0 at a pad."""
    return judge(fn, _packed_cases(), _packed_positions, _PACKED_MISTAKES,
                 success="every document counts from 0 at its own first token, whatever its column, and every "
                         "pad gets 0.")


# --- predict: how many attention weights are non-zero with padding and the causal mask ------------------------------

NONZERO_LENGTHS = (5, 2, 7)   # three prompts, left-padded to T = 7, one head


def _measured_nonzero() -> int:
    _, is_pad = pad_prompts([torch.arange(1, n + 1) for n in NONZERO_LENGTHS], 0, side="left")
    g = _gen(1100)
    Q, K = torch.randn(*is_pad.shape, 8, generator=g), torch.randn(*is_pad.shape, 8, generator=g)
    return int((attention_weights(Q, K, mask=padding_mask(is_pad)[:, 0]) > 0).sum())


def _nonzero_guesses() -> list[Guess]:
    n = torch.tensor(NONZERO_LENGTHS)
    B, T = len(NONZERO_LENGTHS), int(n.max())
    tri, pads = float((n * (n + 1) / 2).sum()), T - n
    return [Guess(*row[:2], float(row[2]), more=row[3]) for row in [
        ("causal-only", "too high: your real queries read padding keys. Which keys may no query read?",
         B * T * (T + 1) / 2, "padding keys are never read: each prompt keeps the triangle of its own real tokens."),
        ("no-mask", "too high: that is every entry of P. Which entries does each mask remove?", B * T * T,
         "the causal mask removes each query's future and the padding mask the padding keys."),
        ("no-causal", "too high: your queries also read real keys in their future, and padding queries read too.",
         T * n.sum(), "the causal mask removes the keys after each query; a left padding query has no real past."),
        ("real-square", "too high: each real query of yours reads every real key of its prompt.", (n * n).sum(),
         "a real query reads only the real keys at or before its position: the first one key, the last all."),
        ("pad-rows", "too high by the number of padding queries: may a padding query read any key at all?",
         tri + pads.sum(), "a left padding query sees only padding keys, all blocked: its row is all zeros."),
        ("pads-after", "too high: your padding queries read the prompt's keys. Do the pads stand before it or "
         "after?", tri + (pads * n).sum(), "with left padding the pads come first, with only padding in their past."),
        ("pad-rows-uniform", "too high: your padding queries get weights on every key. What does a query with "
         "nothing to read get?", tri + pads.sum() * T,
         "a finite fill would spread such a row over all T keys; the chapter zeroes those rows."),
        ("pads-read-pads", "too high: your padding queries read the padding keys before them. Is a padding key "
         "ever read?", tri + (pads * (pads + 1) / 2).sum(),
         "the padding mask blocks every padding key for every query, the padding queries included."),
        ("no-self", "too low: does a query read its own key?", (n * (n - 1) / 2).sum(),
         "the causal mask blocks only the keys after a query; each real query reads itself too."),
        *[("half-of-all", "too high: that is about half of every entry of P. Which keys does the padding mask "
           "remove, besides the causal mask's half?", half, "the causal mask keeps a little over half of each T × T "
           "table; the padding removes more: each prompt keeps only the triangle of its own real tokens.")
          for half in (B * T * T / 2, B * T * T // 2, B * T * T // 2 + 1)],
    ]]


@checker(kind="predict", mistakes=_nonzero_guesses())
def check_nonzero_weights(value) -> Verdict:
    """Check a prediction of the number of non-zero weights in P (B, T, T) for NONZERO_LENGTHS."""
    return judge_number(value, _measured_nonzero(), _nonzero_guesses(), rtol=1e-6,
                        success="each prompt keeps the triangle of its own real tokens, and the padding "
                                "queries read nothing.")


# --- find the bug: batched greedy generation with a cache and an attention_mask (1 = real token) --------------------

@functools.cache
def _models() -> tuple[GPT, ...]:
    models = []
    for seed, pos in ((1125, "learned"), (1137, "rope")):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(19, 16, 2, 1, max_T=16, pos=pos)).eval()
        with torch.no_grad():   # a larger init: logits far from uniform, no near-ties
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.3, generator=_gen(seed + p.numel()))
        models.append(model)
    return tuple(models)


def _generation_cases() -> list[tuple]:
    """Two models (learned positions, RoPE), left-padded prompts of 1 to 6 tokens; a 0 is generated."""
    cases = []
    for model, seed, lengths in zip(_models(), (1125, 1137), ((4, 1, 6), (2, 5, 3))):
        g = _gen(seed)
        ids, is_pad = pad_prompts([torch.randint(1, 19, (n,), generator=g) for n in lengths], 0, side="left")
        cases.append((model, ids, (~is_pad).long(), 4))
    return cases


_RUNS: dict = {}


def _once(fn):
    """``fn`` run once per case and switches (the cases are fixed; a model is told by its parameters' sum)."""
    @functools.wraps(fn)
    def run(model, ids, attention_mask, n_new, **switches):
        key = (fn.__name__, sum(float(p.detach().double().sum()) for p in model.parameters()), str(ids.tolist()),
               str(attention_mask.tolist()), n_new, str(sorted(switches.items())))
        if key not in _RUNS:
            try:
                _RUNS[key] = fn(model, ids, attention_mask, n_new, **switches)
            except Exception as e:  # noqa: BLE001 - raised again, the same type and arguments, on every call
                _RUNS[key] = e
        if isinstance(_RUNS[key], Exception):
            raise _RUNS[key].with_traceback(None)
        return _RUNS[key].clone()
    return run


@_once
def _generation_reference(model, ids, attention_mask, n_new):
    return model.generate(ids, n_new, is_pad=attention_mask == 0, use_cache=False)


@_once
def _greedy(model, ids, attention_mask, n_new, *, new_value=1, extend=True, prepend=False, use_pad=True,
            read="zero-is-pad", cache=True, pick=-1, reset=False):
    """Greedy generation as the exercise writes it, or a planted slip (``cache``: True, False: no cache, "kept":
    all fed again with caches, "fresh": new caches each step; ``reset``: the mask made all ones)."""
    caches = [KVCache() for _ in model.blocks] if cache else None
    step = ids
    for _ in range(n_new):
        is_pad = attention_mask == 0 if read == "zero-is-pad" else attention_mask != 0
        if cache == "fresh":
            caches, is_pad = [KVCache() for _ in model.blocks], is_pad[:, -step.shape[1]:]
        logits = model(step if cache in (True, "fresh") else ids, caches, is_pad=is_pad if use_pad else None)
        step = logits[:, pick:pick + 1 or None].argmax(-1)
        ids = torch.cat([ids, step], dim=1)
        column = step if new_value == "token" else torch.full_like(step, new_value)
        if reset:
            attention_mask = torch.ones_like(ids)
        elif extend:
            attention_mask = torch.cat([column, attention_mask] if prepend else [attention_mask, column], dim=1)
    return ids


_GENERATION_MISTAKES = variants(_greedy, [
    ("new-as-padding", dict(new_value=0),
     "the first new token of every row is right, the later ones are not: what does the model take a token it "
     "generated for? Read the convention of attention_mask again.",
     "each generated token goes into attention_mask as a pad (0 means padding, 1 a real token), so no later step "
     "reads it and the positions after it stop counting."),
    *[("reads-ones-as-padding", dict(read="one-is-pad", new_value=new),
       "which tokens does the model take for padding now? At the first step, does it read the prompts' tokens?",
       "your is_pad is True at the real tokens, so the model reads the padding and ignores the prompts: is_pad is "
       "the negation of attention_mask.") for new in (1, 0)],
    ("token-as-flag", dict(new_value="token"),
     "right until a row generates token 0: does your new token's flag come from the mask's convention or from "
     "the token's id?",
     "you took the generated ids for flags, so a generated 0 (the padding id here) is taken for a pad; a "
     "generated token is always real, flag 1."),
    ("refed-with-cache", dict(cache="kept"),
     "each step feeds the whole sequence again, while the caches hold it: what should a step feed?",
     "with a KV cache each step feeds only the newest token; feeding the earlier ones again appends them twice."),
    ("fresh-cache", dict(cache="fresh"),
     "a new token is fed alone, but what does the model remember of the prompt at that step?",
     "you create empty caches at every step; they are made once, before the loop, and grow with every step."),
    ("first-position", dict(pick=0), "which position's logits predict the next token of a row?",
     "logits[:, t] predicts the token after position t: the next token comes from the last position."),
    ("pads-forgotten", dict(reset=True),
     "the first new token of every row is right: what happens to the prompts' padding flags after it?",
     "from the second step on the model reads the prompts' pads as real tokens: the mask was replaced with ones, "
     "or is_pad was no longer passed. Keep it, grow it by one column per token, pass it at every step."),
    ("not-extended", dict(extend=False),
     "the model gets a padding table shorter than the sequence it has seen: does the mask grow as the tokens do?",
     "after appending a token to ids, append one column to attention_mask as well."),
    *[("prepended", dict(prepend=True, cache=cache),
       "the mask grows, but does its new column stand where the new token stands?",
       "the new column went to the front of attention_mask, shifting every flag one place; it belongs at the end.")
      for cache in (True, False)],
    ("no-padding", dict(use_pad=False),
     "the rows without padding are right, the padded ones are not: does the model know where the padding is?",
     "the model is called without is_pad, so real tokens read the padding and count positions from column 0."),
])


@checker(mistakes=_GENERATION_MISTAKES)
def check_batched_generation(fn) -> Verdict:
    """Check ``fn(model, ids, attention_mask, n_new) -> ids (B, T + n_new)`` for left-padded prompts (greedy)."""
    return judge(fn, _generation_cases(), _generation_reference, _GENERATION_MISTAKES,
                 success="every prompt gets the tokens model.generate gives it (learned positions, RoPE).")


# --- extend: a sliding window that keeps the first tokens ("attention sinks") ---------------------------------------

def _sink_cases() -> list[tuple[int, int, int, int]]:
    """(T_q, T_k, window, n_sink): a prompt, two tokens after a cache, one step, a window longer than T, no sink."""
    return [(8, 8, 3, 2), (2, 9, 3, 2), (1, 7, 2, 1), (3, 6, 8, 2), (5, 5, 2, 0)]


def _sink_reference(T_q, T_k, window, n_sink):
    sinks = causal_mask(T_q, T_k, dtype=torch.bool) & (torch.arange(T_k) < n_sink)
    return sliding_window_mask(T_q, T_k, window=window, dtype=torch.bool) | sinks


def _sink_window(T_q, T_k, window, n_sink, *, offset=0, keys=0, sinks="causal", use_offset=True, form="bool",
                 extra_sinks=0):
    """The mask, or a planted slip: query i at T_k − T_q + i (+ ``offset``) reads ``window`` (+ ``keys``) keys up
    to its own, and the sinks as ``sinks`` says."""
    i = torch.arange(T_q)[:, None] + ((T_k - T_q) if use_offset else 0) + offset
    j = torch.arange(T_k)[None, :]
    past = j <= i
    in_window = past & (j > i - window - keys - (n_sink if sinks == "widened" else 0))
    is_sink = j < n_sink + extra_sinks
    mask = {"causal": in_window | (past & is_sink), "always": in_window | is_sink, "and": in_window & is_sink,
            "none": in_window, "widened": in_window, "no-window": past, "no-window-always": past | is_sink}[sinks]
    return {"bool": mask, "inverted": ~mask, "additive": torch.zeros(mask.shape).masked_fill(~mask, -math.inf)}[form]


_SINK_MISTAKES = variants(_sink_window, [
    ("no-sinks", dict(sinks="none"), "look at a query far from the start: does it still read the first n_sink keys?",
     "that is the sliding window alone: the first n_sink keys stay readable for every later query."),
    ("sinks-read-future", dict(sinks="always"),
     "look at the first rows of the prompt: does query 0 read any key after its own position?",
     "a sink is readable only once it lies in the query's past; before that the causal mask blocks it."),
    ("sinks-and-window", dict(sinks="and"),
     "does a query in the middle read its own key? Which keys may it read: the window's, the sinks, or only "
     "those that are both?",
     "a key is readable when it is in the window OR is a sink; your mask keeps only the keys that are both."),
    ("sinks-plus-one", dict(extra_sinks=1),
     "count the first keys that every later query reads: how many sinks does your mask keep?",
     "your mask keeps n_sink + 1 first keys: the sinks are keys 0 … n_sink − 1."),
    ("no-window", dict(sinks="no-window"),
     "look at a query far from the start: does it read only its window and the sinks?",
     "your mask is the causal mask: between the sinks and the window, the keys must be blocked."),
    ("no-window", dict(sinks="no-window-always"), "look at a query far from the start: does it read only its window "
     "and the sinks?", "your mask is the causal mask with the sinks added to every row: between the sinks and the "
     "window the keys must be blocked, and so must a sink in a query's future."),
    ("window-widened", dict(sinks="widened"),
     "look at a query far from the start: does it still read the first n_sink keys, or a longer window?",
     "you widened the window by n_sink keys; the sinks are the first n_sink keys, however far behind."),
    ("queries-from-zero", dict(use_offset=False),
     "right when T_q = T_k, wrong after a cache: which positions do your rows stand for? Does the last row read "
     "the last key?",
     "with a cache the queries are the LAST T_q of the T_k positions: row i stands at position T_k − T_q + i."),
    ("offset-one-too-far", dict(offset=1),
     "count the keys your rows read to the right of their own position: should there be any?",
     "your rows stand one position too far right: each reads its future key and loses its window's oldest."),
    ("window-plus-one", dict(keys=1),
     "count the keys a query in the middle reads outside the sinks: how many should the window hold?",
     "each query reads window + 1 recent keys; the window holds the query and the window − 1 keys before it."),
    ("window-minus-one", dict(keys=-1),
     "count the keys a query in the middle reads outside the sinks: how many should the window hold?",
     "each query reads only window − 1 recent keys; the window holds the query and the window − 1 before it."),
    ("inverted", dict(form="inverted"),
     "your mask is True where a key is blocked. Which convention does the exercise ask for?",
     "here, as in scaled_dot_product_attention, True means 'may attend'."),
    ("float-mask", dict(form="additive"),
     "you returned an additive mask of 0 and −∞; the exercise asks for a boolean one, True where a key may be read.",
     "a float 0 / −∞ mask is added to the scores; the exercise asks for the boolean mask, which masked_fill and "
     "SDPA's attn_mask read directly."),
])

FLOAT_01 = Mistake("float-01-mask",
    "your mask has the right pattern but holds floats 0 and 1: would scaled_dot_product_attention block the "
    "zeros, or add the numbers to the scores?",
    more="a float attn_mask is ADDED to the scores: 0 and 1 block nothing, and masked_fill refuses a float mask. "
         "Return a boolean tensor, True where query i may read key j.")


def _sink_dtype_look(verdict: Verdict, results) -> Verdict | None:
    """Floats 0 and 1 in the right pattern on every case (a float mask with another pattern is not named)."""
    if verdict.mistake == "dtype" and all(
            isinstance(got, torch.Tensor) and got.is_floating_point() and got.shape == case[:2]
            and bool(((got == 0) | (got == 1)).all()) and torch.equal(got.bool(), _sink_reference(*case))
            for case, got, _ in results.outputs()):
        return named(FLOAT_01)
    return None


@checker(mistakes=[*_SINK_MISTAKES, FLOAT_01])
def check_sink_window_mask(fn) -> Verdict:
    """Check ``fn(T_q, T_k, window, n_sink) -> mask`` (T_q, T_k) bool: the window and the first n_sink keys,
    never the future; query i stands at position T_k − T_q + i."""
    return judge(fn, _sink_cases(), _sink_reference, _SINK_MISTAKES, diagnose=_sink_dtype_look,
                 success="each query reads the sinks in its past and the last window keys up to its own "
                         "position, never the future (a prompt, steps after a cache, no sink).")
