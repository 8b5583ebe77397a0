"""Exercise checkers for the costs appendix: a prediction of the length at which a batch's float16 KV cache
outgrows GPT-2 small's weights (``GPT2_SERVING``), and the forward matmul FLOPs of T_new tokens after T_past cached
ones in the library's GPT (plain backend, B = 1), as torch counts them."""

from __future__ import annotations

import functools
import numbers

import torch

from ..costs import count_flops, kv_cache_bytes, model_flops, model_params
from ..heads import KVCache
from ..model import GPT, GPTConfig
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_cache_outgrows_weights", "check_chunk_flops", "GPT2_SERVING"]

GPT2_SERVING = {"L": 12, "d_model": 768, "h": 12, "vocab_size": 50257, "max_T": 1024, "params": 124_439_808,
                "B": 8}
"""The prediction's setting: GPT-2 small (its head tied to the token table: 124,439,808 parameters) serving
B = 8 sequences at once, weights and KV cache in float16."""


# --- predict: when the cache outgrows the weights ------------------------------------------------------------------

def _tied_params(vocab_size: int, d_model: int, L: int, max_T: int) -> int:
    """Parameters of the library's GPT with its head tied to the token table (GPT-2's layout)."""
    p = model_params(vocab_size, d_model, L, max_T)
    return p["model"] - p["head"]


def _crossover(L, d_model, h, vocab_size, max_T, B) -> float:
    """Tokens per sequence at which B sequences' float16 caches hold as many bytes as the float16 weights."""
    weights = 2 * _tied_params(vocab_size, d_model, L, max_T)
    per_token = B * kv_cache_bytes(L, h, d_model // h, bytes_per_number=2)
    return weights / per_token


def _crossover_guesses(want: float) -> list[Guess]:
    s = GPT2_SERVING
    return [
        Guess("half-the-cache",
              "too high, by a factor 2: one side of your comparison is off by 2. Does your cache hold "
              "everything a step reads back, and are the cache and the weights both counted in float16 bytes?",
              2 * want,
              more="either only K was counted (each block caches V as well), or the cache was counted in "
                   "numbers while the weights were counted in bytes, or the weights at 4 bytes each: both are "
                   "float16, 2 bytes a number."),
        Guess("queries-cached",
              "too low: your cache holds more per token than a step reads back. Does a later step need the "
              "earlier positions' queries?",
              2 * want / 3,
              more="a step's new query scores the old keys and mixes the old values: the cache keeps K and V, "
                   "never Q."),
        Guess("unit-left-off",
              "too low, by a factor 2: are the weights and the cache counted in the same unit?",
              want / 2,
              more="one side was counted in numbers and the other in bytes (or in two different dtypes). The "
                   "weights and the cache are both float16: count both in bytes, or both in numbers."),
        Guess("no-batch",
              f"too high, by a factor {s['B']}: whose caches take the memory? Count the sequences.",
              s["B"] * want,
              more=f"that is the crossover for one sequence. Each of the B = {s['B']} sequences keeps its own "
                   f"cache, while all of them share the one copy of the weights."),
        Guess("one-layer-or-head",
              "too high, by a factor 12: does your cache per token count every block, and all the heads' "
              "columns?",
              s["L"] * want,
              more=f"each of the L = {s['L']} blocks keeps its own K and V, and together the heads fill all "
                   f"d_model = {s['d_model']} columns. One block, or one head's d_head = "
                   f"{s['d_model'] // s['h']} columns, makes the cache 12 times too small."),
        Guess("times-h",
              "too low, by a factor 12: did you count the heads' columns once, or once more per head?",
              want / s["h"],
              more="the h heads split the d_model columns between them (each has d_head = d_model / h); "
                   "multiplying by h as well counts every column 12 times."),
        Guess("bytes-not-tokens",
              "that is a number of bytes. The question asks for a length: tokens per sequence.",
              2 * s["params"],
              more="the weights take that many bytes; the answer is the number of tokens per sequence at which "
                   "the batch's cache reaches the same size."),
    ]


_S = GPT2_SERVING
_CROSSOVER = _crossover(_S["L"], _S["d_model"], _S["h"], _S["vocab_size"], _S["max_T"], _S["B"])
_CROSSOVER_GUESSES = _crossover_guesses(_CROSSOVER)


@checker(kind="predict", mistakes=_CROSSOVER_GUESSES)
def check_cache_outgrows_weights(value) -> Verdict:
    """Check a predicted number of tokens per sequence at which GPT2_SERVING's cache equals its weights."""
    return judge_number(value, _CROSSOVER, _CROSSOVER_GUESSES, rtol=0.02,
                        success=f"at about {_CROSSOVER:.0f} tokens per sequence the cache of {_S['B']} sequences "
                                f"weighs as much as the model, well inside GPT-2's context of {_S['max_T']}: "
                                f"the weights are shared, each sequence's cache is not.")


# --- extend: the FLOPs of T_new tokens after T_past cached ones --------------------------------------------------

@functools.cache   # the same few cases on every check: count each once per session
def _measured_chunk_flops(T_past, T_new, d_model, h, L, d_ff, vocab_size) -> torch.Tensor:
    """Matmul FLOPs torch counts while the library's GPT (plain backend) reads T_new tokens after T_past cached."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = GPTConfig(vocab_size, d_model, h, L, d_ff=d_ff, max_T=T_past + T_new, backend="plain")
        model = GPT(config).eval()
    ids = torch.randint(0, vocab_size, (1, T_past + T_new), generator=_gen(0))
    caches = [KVCache() for _ in model.blocks]
    if T_past:
        with torch.no_grad():
            model(ids[:, :T_past], caches)
    return torch.tensor(float(count_flops(lambda: model(ids[:, T_past:], caches))), dtype=torch.float64)


def _chunk(T_past, T_new, d_model, h, L, d_ff, vocab_size, *, own_keys=True, entries="all", heads=1,
           layers=True, head_rows="all", mlp=True, width="d_ff", per="flop", rows="all", products=4):
    """The FLOPs with the planted mistakes' switches; the defaults count them right.

    ``entries``: score entries counted, "all" of the (T_new, T_k) table, the "kept" ones (the mask's triangle),
    "new" (T_new × T_new) or "square" (T_k × T_k). ``heads``: the attention part counted once (1), "h" times,
    or for "one" head.
    ``head_rows``: the head on "all" new rows, "last" only, "none", or "blocks" (in every block). ``width``: the
    MLP's "d_ff", or "4d". ``per``: "flop", or "madd" (multiply-adds). ``rows``: "all" new rows, or "one".
    ``products``: the d_model × d_model products of a block (W_Q, W_K, W_V, W_O).
    """
    d = d_model
    q = 1 if rows == "one" else T_new
    T_k = T_past + T_new if own_keys else T_past
    table = {"all": q * T_k, "kept": T_new * T_past + T_new * (T_new + 1) // 2, "square": T_k * T_k,
             "new": q * T_new}[entries]
    ff = d_ff if width == "d_ff" else 4 * d
    attn = 4 * table * d * {1: 1, "h": h, "one": 1 / h}[heads]
    block = 2 * q * products * d * d + attn + (4 * q * d * ff if mlp else 0)
    n_head = {"all": q, "last": 1, "none": 0, "blocks": q * (L if layers else 1)}[head_rows]
    n = (L if layers else 1) * block + 2 * n_head * d * vocab_size
    return torch.tensor(float(n / 2 if per == "madd" else n), dtype=torch.float64)


_CHUNK_MISTAKES = [
    Mistake("no-cache",
            "too high, and it grows with the whole sequence: does your count send the cached positions through "
            "the projections and the MLP again? Which rows go through each product in a cached step?",
            lambda t, n, d, h, L, ff, V: torch.tensor(float(model_flops(1, t + n, d, h, L, V, ff)["model"]),
                                                      dtype=torch.float64),
            more="that is a forward pass over all T_past + T_new positions, as if nothing were cached. With the "
                 "cache only the new rows go through W_QKV, W_O, the MLP and the head; the past enters only as "
                 "keys and values."),
    *variants(_chunk, [
        ("own-keys", dict(own_keys=False),
         "a little low, in the attention part: how many keys does each new query score? Count the new tokens' "
         "own keys.",
         "the new queries score the cached keys AND the new ones, their own included, not only the T_past "
         "cached ones."),
        ("masked-skipped", dict(entries="kept"),
         "the attention part is too low when several tokens are new: does the plain path skip the masked "
         "entries of the score table, or compute them and throw them away?",
         "you counted only the entries the mask keeps. The plain path multiplies the whole table of T_new "
         "rows by T_past + T_new columns, masked entries included, and torch counts them all."),
        ("quadratic", dict(entries="square"),
         "the attention part grows with the square of the whole sequence: how many query rows does this step "
         "have?",
         "only the T_new new positions are queries, each scoring every key. The square of the sequence "
         "length belongs to a full forward pass, where every position is a query."),
        ("past-keys-left-out", dict(entries="new"),
         "right for a prompt, too low after a cache: which keys does each new query score?",
         "each new query scores every key in the cache as well as the new ones: T_past + T_new keys, not "
         "T_new."),
        ("one-head", dict(heads="one"),
         "the attention part is h times too small: did you add up the work of all h heads?",
         "each head scores its queries against its keys at width d_head; the h heads together cost what one "
         "head of width d_model would."),
        ("no-W_O", dict(products=3),
         "too low, by the same amount for every new row: which product of the attention sublayer is missing?",
         "the block also multiplies the heads' concatenated output by W_O (d_model × d_model) for each new "
         "row."),
        ("head-per-block", dict(head_rows="blocks"),
         "too high, by an amount that grows with vocab_size and L: how many times does the output head run?",
         "the head turns X_L into logits once, after the last block, not in every block."),
        ("times-h", dict(heads="h"),
         "the attention part is h times too large: what do h heads of width d_head cost together, compared "
         "with one head of width d_model?",
         "the heads split d_model into h slices; all heads together cost what one head of width d_model "
         "would."),
        ("one-layer", dict(layers=False),
         "too low, by about a factor L: how many blocks do the new tokens go through?",
         "each of the L blocks does the same work for the new rows; only the head comes once."),
        ("no-head", dict(head_rows="none"),
         "too low, by an amount that grows with vocab_size: what turns the last rows of X_L into logits?",
         "the output head is missing: each new row of X_L is multiplied by the (d_model, vocab_size) "
         "head."),
        ("head-once", dict(head_rows="last"),
         "right for one new token, too low for several: does the model's forward pass compute logits for every "
         "new position, or only for the last?",
         "GPT's forward computes logits at every position it is given, so the head runs on all T_new new rows, "
         "even though generation keeps only the last."),
        ("no-mlp", dict(mlp=False),
         "too low: which sublayer of the block is missing from your count?",
         "the MLP's two products are missing: from d_model to d_ff and back, for each new row."),
        ("d_ff-assumed", dict(width="4d"),
         "right when d_ff is four times d_model, wrong otherwise: which width does your MLP term use?",
         "you assumed d_ff = 4·d_model; the exercise gives d_ff, and the MLP costs in proportion to it."),
        ("multiply-adds", dict(per="madd"),
         "exactly half: what does one multiply-add count for, in FLOPs?",
         "you counted multiply-adds. A FLOP is one multiplication or one addition, so each multiply-add of a "
         "matrix product is 2 FLOPs."),
        ("one-new-token", dict(rows="one"),
         "right for one new token, too low for several: how many new rows go through each product?",
         "you counted one new position. With T_new new tokens each product of the blocks and the head runs on "
         "T_new rows, and there are T_new queries."),
    ]),
]


def _chunk_cases() -> list[tuple]:
    """(T_past, T_new, d_model, h, L, d_ff, vocab_size): a generation step with d_ff = 4·d_model, a chunk of 3
    after 40 cached with d_ff = 1.5·d_model, and a prompt of 6 with nothing cached."""
    return [(5, 1, 16, 4, 2, 64, 54), (40, 3, 32, 4, 3, 48, 100), (0, 6, 16, 2, 1, 40, 30)]


@checker(mistakes=_CHUNK_MISTAKES)
def check_chunk_flops(fn) -> Verdict:
    """Check ``fn(T_past, T_new, d_model, h, L, d_ff, vocab_size)`` → the FLOPs torch counts for T_new tokens
    after T_past cached ones."""
    if not callable(fn):
        return judge(fn, [], None)

    def as_number(*args):
        n = fn(*args)
        if isinstance(n, torch.Tensor) and n.numel() == 1 and not n.dtype.is_complex and n.dtype != torch.bool:
            n = n.item()
        if isinstance(n, numbers.Real) and not isinstance(n, bool):
            return torch.tensor(float(n), dtype=torch.float64)
        return n

    return judge(as_number, _chunk_cases(), _measured_chunk_flops, _CHUNK_MISTAKES,
                 success="your formula counts what torch counts: the new rows through every product, each new "
                         "query against all the keys, masked entries included. With one new token a step grows "
                         "linearly with the past.")
