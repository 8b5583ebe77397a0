"""Exercise checkers for chapter 11 (batches and padding): positions that restart at each packed document,
a prediction of the non-zero weights of a padded batch, the find-the-bug batched generation with an attention_mask,
and a sliding window with attention sinks. Each checker's docstring gives its contract."""

from __future__ import annotations

import math

import torch

from ..attention import attention_weights, causal_mask, padding_mask, sliding_window_mask
from ..batches import pad_prompts
from ..heads import KVCache
from ..model import GPT, GPTConfig
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, named, variants

__all__ = ["check_packed_positions", "check_nonzero_weights", "check_batched_generation",
           "check_sink_window_mask", "NONZERO_LENGTHS"]


# ------------------------------------------------------------------------------------------------
# Build: positions that restart at each document packed into a row.

def _packed_cases() -> list[tuple[torch.Tensor]]:
    """(doc_ids,): (B, T) int64, documents 0, 1, 2, … along each row, −1 at the pads that end a row."""
    return [
        # rows whose documents start at different columns, one with a pad
        (torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 0, 0, 0, 1, 1, -1]]),),
        # a long first document; documents of one token each; one document and pads
        (torch.tensor([[0, 0, 0, 0, 0, 1], [0, 1, 2, 3, 4, 5], [0, 0, 0, 0, -1, -1]]),),
        # one row: a short document, a long one, three pads
        (torch.tensor([[0, 0, 1, 1, 1, 1, -1, -1, -1]]),),
    ]


def _packed_positions(doc_ids, *, restart=True, start=0, pads="zero", early=False, shared=False):
    """The positions with the planted mistakes' switches; the defaults are the correct positions.

    ``restart``: count from each document's first column, or from the row's. ``start``: the first token's
    position. ``pads``: "zero", "document" (the pads counted as one more document), "last" (the position of the
    last real token) or "minus" (−1). ``early``: a document taken to start one column early (its boundary read
    from the difference of neighbours, put on the wrong side). ``shared``: every row cut where row 0 is cut.
    """
    d = doc_ids[:1].expand_as(doc_ids) if shared else doc_ids
    col = torch.arange(d.shape[-1]).expand_as(d)
    differs = d[:, 1:] != d[:, :-1]                                           # (B, T − 1)
    edge = torch.ones_like(differs[:, :1]) if not early else torch.zeros_like(differs[:, :1])
    new = torch.cat([edge, differs] if not early else [differs, edge], dim=-1)
    first = torch.where(new, col, 0).cummax(-1).values if restart else torch.zeros_like(col)
    pos, pad = col - first + start, doc_ids < 0
    if pads == "last":
        n_real = (~pad).sum(-1, keepdim=True)
        return torch.where(pad, pos.gather(-1, (n_real - 1).clamp(min=0)), pos)
    return pos if pads == "document" else pos.masked_fill(pad, 0 if pads == "zero" else -1)


_PACKED_MISTAKES = variants(_packed_positions, [
    *[("no-restart", dict(restart=False, pads=pads),
       "where does the first token of the second document of a row stand in yours? Where would it stand if "
       "that prompt were alone?",
       "your positions run on along the whole row, as the chapter's count of real tokens does. Packing puts "
       "no pad between documents to count around: each document is a prompt of its own, so the count must "
       "start again at 0 at its first token.") for pads in ("document", "zero", "last")],
    ("from-one", dict(start=1),
     "which position does the first token of each document get in yours?",
     "your positions start at 1. A token's index within its document starts at 0, as the positions of a "
     "prompt alone do."),
    ("pads-as-document", dict(pads="document"),
     "your documents are right. What do the pads at the end of a row get in yours?",
     "the pads count 0, 1, 2, … as if they were one more document: −1 differs from the last document's "
     "number, so it looks like a new start. Every pad must get 0."),
    ("pads-keep-last", dict(pads="last"),
     "your documents are right. What does the statement ask for at a pad?",
     "your pads take the position of the last real token before them, as the chapter's position_ids gives "
     "them. Here every pad gets 0."),
    ("pads-minus-one", dict(pads="minus"),
     "your documents are right. Which row of a position table would your pads read?",
     "your pads keep the −1 that marks them in doc_ids, and an index of −1 silently reads the LAST row of a "
     "position table. Every pad gets 0."),
    ("boundary-one-early", dict(early=True),
     "look at the last token of each document in yours, and at the first of the next: where does your count "
     "restart?",
     "your count restarts one column early, at the last token of the document before. Comparing each column "
     "with its neighbour gives one flag fewer than columns; the flag for a new document must sit at the "
     "column where the new id appears, not at the one before it."),
    ("shared-rows", dict(shared=True),
     "the first row of a batch is right in yours. Do the other rows start their documents at the same columns?",
     "you cut every row where the first row's documents start. Each row of the batch packs other prompts, so "
     "each row's starts come from its own doc_ids."),
])


@checker(mistakes=_PACKED_MISTAKES)
def check_packed_positions(fn) -> Verdict:
    """Check ``fn(doc_ids) -> positions``: (B, T) int64 document of each token (−1 at a pad) → (B, T) int64
    index of each token within its own document, 0 at a pad."""
    return judge(fn, _packed_cases(), _packed_positions, _PACKED_MISTAKES,
                 success="every document counts from 0 at its own first token, whatever its column, and every "
                         "pad gets 0 (rows cut at different columns, one-token documents, rows ending in pads).")


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
        Guess("pad-rows-uniform",
              "too high: your padding queries get weights on every key. What do the weights of a query with "
              "nothing to read come out as?",
              triangles + float((T - n).sum()) * T,
              more="a padding query of a left-padded row has only padding keys in its past, all blocked. A finite "
                   "fill would spread its weights over all T keys, but the chapter finds such rows and zeroes "
                   "them: a query with nothing to read gets no weight at all."),
        Guess("pads-read-pads",
              "too high: your padding queries read the padding keys before them. Is a padding key ever read?",
              triangles + float(((T - n) * (T - n + 1) / 2).sum()),
              more="the padding mask blocks every padding key for every query, the padding queries included: "
                   "a padding query before the prompt has nothing left to read, and its row is all zeros."),
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
    for seed, pos, lengths in ((1117, "learned", (4, 1, 6)), (1128, "rope", (2, 5, 3))):   # a 0 is generated
        torch.manual_seed(seed)
        model = GPT(GPTConfig(19, 16, 2, 2, max_T=16, pos=pos)).eval()
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
            read="zero-is-pad", cache=True, pick=-1, reset=False):
    """Greedy generation as the exercise writes it, with the planted mistakes' switches; the defaults are right.

    ``new_value``: what the new column of attention_mask holds. ``read``: how attention_mask becomes is_pad,
    "zero-is-pad" (right) or "one-is-pad" (the convention turned round). ``cache``: one KVCache per block and
    each step fed alone (True), every token so far fed again at each step (False), fed again with the caches
    kept ("kept"), or a fresh cache at each step ("fresh").
    ``pick``: the position whose logits give the next token. ``reset``: the mask set to all ones after a step.
    """
    caches = [KVCache() for _ in model.blocks] if cache else None
    step = ids
    for _ in range(n_new):
        is_pad = attention_mask == 0 if read == "zero-is-pad" else attention_mask != 0
        if cache == "fresh":
            caches, is_pad = [KVCache() for _ in model.blocks], is_pad[:, -step.shape[1]:]
        logits = model(step if cache in (True, "fresh") else ids, caches,
                       is_pad=is_pad if use_pad else None)
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
     "the first new token of every row is right and the later ones are not. When the model reads a token "
     "it generated, what does it take that token for? Read the convention of attention_mask again.",
     "each generated token goes into attention_mask as a pad: in this convention 0 means padding and 1 a "
     "real token. So no later step reads the new tokens, and the positions after them stop counting."),
    *[("reads-ones-as-padding", dict(read="one-is-pad", new_value=new),
       "which tokens does the model take for padding now? Look at the first step: does it read the prompts' "
       "own tokens?",
       "the table you pass as is_pad is True at the real tokens, so the model reads the padding and ignores "
       "the prompts. is_pad is True at a pad, attention_mask is 1 at a real token: one is the negation of the "
       "other.") for new in (1, 0)],
    ("token-as-flag", dict(new_value="token"),
     "right until a row generates token 0. Where does your padding flag of a new token come from: the "
     "attention_mask's convention, or the token's id?",
     "you took the generated token ids for flags (appended to attention_mask, or compared with the padding "
     "id). Any id but 0 passes for 'real', but a generated 0 (the padding id here) is taken for a pad. A "
     "generated token is always real: its flag is 1, whatever its id."),
    ("refed-with-cache", dict(cache="kept"),
     "each step feeds the whole sequence again, while the caches already hold it. What should a step feed "
     "when the cache keeps the earlier positions?",
     "with a KV cache each step feeds only the newest token: the earlier positions are in the cache already, "
     "and feeding them again appends them a second time."),
    ("fresh-cache", dict(cache="fresh"),
     "a new token is fed alone, but what does the model remember of the prompt at that step?",
     "you create new, empty caches at every step, so a step that feeds only the newest token sees nothing "
     "before it. The caches are made once, before the loop, and grow with every step."),
    ("first-position", dict(pick=0),
     "which position's logits predict the next token of a row?",
     "logits[:, t] predicts the token after position t: the next token comes from the last position, not the "
     "first."),
    ("pads-forgotten", dict(reset=True),
     "the first new token of every row is right: what happens to the prompts' padding flags after it?",
     "from the second step on the model reads the prompts' pads as real tokens: the mask was replaced with "
     "ones, or is_pad was no longer passed. Keep the mask, append one column for each new token, and pass it "
     "at every step."),
    ("not-extended", dict(extend=False),
     "the model is handed a padding table shorter than the sequence it has seen: does the mask grow as the "
     "tokens do?",
     "attention_mask must grow with ids: after appending a token, append one column to the mask as "
     "well."),
    *[("prepended", dict(prepend=True, cache=cache),
       "the mask grows, but does its new column stand where the new token stands?",
       "the new column went to the front of attention_mask, which shifts every flag one place to the right; "
       "it belongs at the end, where the new token is.") for cache in (True, False)],
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


def _sink_window(T_q, T_k, window, n_sink, *, offset=0, keys=0, sinks="causal", use_offset=True, form="bool",
                 extra_sinks=0):
    """The mask with the planted mistakes' switches; the defaults are right.

    Query i stands at position T_k − T_q + i (+ ``offset``), or at i without ``use_offset``; it reads the
    ``window`` (+ ``keys``) positions up to its own; ``sinks``: "causal" (the first n_sink keys, once in the
    past), "always" (in the future too), "none", or "and" (a key must be in the window AND a sink); ``form``:
    "bool", "inverted" (True = blocked) or "additive" (0 / −∞). "no-window" reads every past key; "widened"
    widens the window by n_sink instead of keeping sinks. ``extra_sinks``: sinks beyond the first n_sink.
    """
    i = torch.arange(T_q)[:, None] + ((T_k - T_q) if use_offset else 0) + offset
    j = torch.arange(T_k)[None, :]
    past = j <= i
    in_window = past & (j > i - window - keys - (n_sink if sinks == "widened" else 0))
    is_sink = j < n_sink + extra_sinks
    mask = {"causal": in_window | (past & is_sink), "always": in_window | is_sink, "and": in_window & is_sink,
            "none": in_window, "widened": in_window, "no-window": past}[sinks]
    return {"bool": mask, "inverted": ~mask, "additive": torch.zeros(mask.shape).masked_fill(~mask, -math.inf)}[form]


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
    ("sinks-plus-one", dict(extra_sinks=1),
     "count the first keys that every later query reads: how many sinks does your mask keep?",
     "your mask keeps n_sink + 1 first keys: the sinks are keys 0 … n_sink − 1."),
    ("no-window", dict(sinks="no-window"),
     "look at a query far from the start: does it read only its window and the sinks?",
     "your mask is the causal mask: every past key stays readable. Between the sinks and the window, the "
     "keys must be blocked."),
    ("window-widened", dict(sinks="widened"),
     "look at a query far from the start: does it still read the first n_sink keys, or a longer window?",
     "you widened the window by n_sink keys. The sinks are the first n_sink keys of the sequence, readable "
     "however far behind the window they are."),
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
    ("inverted", dict(form="inverted"),
     "your mask is True where a key is blocked. Which convention does the exercise ask for?",
     "here, as in scaled_dot_product_attention, True means 'may attend'; your mask is True at the blocked keys."),
    ("float-mask", dict(form="additive"),
     "you returned an additive mask of 0 and −∞; the exercise asks for a boolean one, True where a key may be "
     "read.",
     "a float 0 / −∞ mask is added to the scores; the exercise asks for the boolean mask, True where query i may "
     "read key j, which masked_fill and SDPA's attn_mask read directly."),
])

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
