"""Exercise checkers for the costs appendix.

``check_cache_outgrows_weights(v)``: a predicted length (tokens per sequence) at which ``GPT2_SERVING``'s float16
KV cache weighs as much as its float16 weights.
``check_chunk_flops(fn)``: ``fn(T_past, T_q, d_model, h, L, d_ff, vocab_size)`` → the matmul FLOPs torch counts
while the library's GPT (plain backend, B = 1) reads T_q tokens after T_past cached ones.
"""

from __future__ import annotations

import functools
import numbers

import torch

from ..costs import count_flops, kv_cache_bytes, model_flops, model_params
from ..heads import KVCache
from ..model import GPT, GPTConfig
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_cache_outgrows_weights", "check_chunk_flops", "GPT2_SERVING"]

# GPT-2 small (its head tied to the token table) serving B = 8 sequences at once, weights and KV cache in float16
GPT2_SERVING = {"L": 12, "d_model": 768, "h": 12, "vocab_size": 50257, "max_T": 1024, "params": 124_439_808, "B": 8}


# --- predict: when the cache outgrows the weights ------------------------------------------------------------------

def _tied_params(vocab_size: int, d_model: int, L: int, max_T: int) -> int:
    p = model_params(vocab_size, d_model, L, max_T)
    return p["model"] - p["head"]


_S = GPT2_SERVING
# tokens per sequence at which B sequences' float16 caches hold as many bytes as the float16 weights
_CROSSOVER = 2 * _tied_params(_S["vocab_size"], _S["d_model"], _S["L"], _S["max_T"]) / (
    _S["B"] * kv_cache_bytes(_S["L"], _S["h"], _S["d_model"] // _S["h"], bytes_per_number=2))


_CROSSOVER_GUESSES = [
    Guess("half-the-cache", "too high, by a factor 2: does your cache hold all a step reads back, counted in float16 "
          "bytes like the weights?", 2 * _CROSSOVER, "either only K was counted (each block caches V as well), or "
          "the cache in numbers and the weights in bytes, or the weights at 4 bytes each: both are float16."),
    Guess("queries-cached", "too low: does a later step need the earlier positions' queries?", 2 * _CROSSOVER / 3,
          "a step's new query scores the old keys and mixes the old values: the cache keeps K and V, never Q."),
    Guess("unit-left-off", "too low, by a factor 2: are the weights and the cache counted in the same unit?",
          _CROSSOVER / 2, "one side was counted in numbers and the other in bytes; both are float16."),
    Guess("no-batch", f"too high, by a factor {_S['B']}: whose caches take the memory? Count the sequences.",
          _S["B"] * _CROSSOVER, f"each of the B = {_S['B']} sequences keeps its own cache; they share the weights."),
    Guess("one-layer-or-head", "too high, by a factor 12: does your cache per token count every block, and all the "
          "heads' columns?", _S["L"] * _CROSSOVER, f"each of the L = {_S['L']} blocks keeps its own K and V, and "
          f"the heads together fill all d_model = {_S['d_model']} columns."),
    Guess("times-h", "too low, by a factor 12: did you count the heads' columns once, or once more per head?",
          _CROSSOVER / _S["h"], "the h heads split the d_model columns between them: d_head = d_model / h."),
    Guess("bytes-not-tokens", "that is a number of bytes; the question asks for tokens per sequence.",
          2 * _S["params"], "the answer is the length at which the batch's cache reaches the weights' bytes."),
]


@checker(kind="predict", mistakes=_CROSSOVER_GUESSES)
def check_cache_outgrows_weights(value) -> Verdict:
    return judge_number(value, _CROSSOVER, _CROSSOVER_GUESSES, rtol=0.02,
                        success=f"at about {_CROSSOVER:.0f} tokens per sequence the cache of {_S['B']} sequences "
                                f"weighs as much as the model, well inside GPT-2's context of {_S['max_T']}: "
                                f"the weights are shared, each sequence's cache is not.")


# --- extend: the FLOPs of T_q tokens after T_past cached ones --------------------------------------------------

@functools.cache   # the same few cases on every check: count each once per session
def _measured_chunk_flops(T_past, T_q, d_model, h, L, d_ff, vocab_size) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size, d_model, h, L, d_ff=d_ff, max_T=T_past + T_q, backend="plain")).eval()
    ids = torch.randint(0, vocab_size, (1, T_past + T_q), generator=_gen(0))
    caches = [KVCache() for _ in model.blocks]
    if T_past:
        with torch.no_grad():
            model(ids[:, :T_past], caches)
    return torch.tensor(float(count_flops(lambda: model(ids[:, T_past:], caches))), dtype=torch.float64)


def _chunk(T_past, T_q, d_model, h, L, d_ff, vocab_size, *, own_keys=True, entries="all", heads=1,
           layers=True, head_rows="all", mlp=True, width="d_ff", per="flop", rows="all", products=4, kv_past=0):
    """The FLOPs (the defaults), or the count with a planted slip: score ``entries`` "all", "kept" (the mask's
    triangle), "new" (T_q²) or "square" (T_k²); ``head_rows`` "all", "last", "none" or "blocks" (in every block);
    ``products``: a block's d_model × d_model products (W_Q, W_K, W_V, W_O), ``kv_past`` of them run on the past."""
    d = d_model
    q = 1 if rows == "one" else T_q
    T_k = T_past + T_q if own_keys else T_past
    table = {"all": q * T_k, "kept": T_q * T_past + T_q * (T_q + 1) // 2, "square": T_k * T_k, "new": q * T_q}[entries]
    ff = d_ff if width == "d_ff" else 4 * d
    attn = 4 * table * d * {1: 1, "h": h, "one": 1 / h}[heads]
    block = 2 * (q * products + T_past * kv_past) * d * d + attn + (4 * q * d * ff if mlp else 0)
    n_head = {"all": q, "last": 1, "none": 0, "blocks": q * (L if layers else 1)}[head_rows]
    n = (L if layers else 1) * block + 2 * n_head * d * vocab_size
    return torch.tensor(float(n / 2 if per == "madd" else n), dtype=torch.float64)


_CHUNK_MISTAKES = [Mistake("no-cache", "too high, and it grows with the whole sequence: which rows go through the "
            "projections and the MLP in a cached step?",
            lambda t, n, d, h, L, ff, V: torch.tensor(float(model_flops(1, t + n, d, h, L, V, ff)["model"]),
                                                      dtype=torch.float64),
            more="that is a forward pass over all T_past + T_q positions: with the cache only the new rows go "
                 "through the products; the past enters as keys and values."),
    *variants(_chunk, [
        ("own-keys", dict(own_keys=False), "a little low, in the attention part: do the new tokens' own keys count?",
         "the new queries score the cached keys AND the new ones, their own included."),
        ("masked-skipped", dict(entries="kept"), "too low with several new tokens: are masked score entries skipped?",
         "the plain path multiplies the whole T_q × (T_past + T_q) table, masked entries included."),
        ("quadratic", dict(entries="square"), "the attention part grows with the square of the whole sequence: "
         "how many query rows does this step have?", "only the T_q new positions are queries in a cached step."),
        ("past-keys-left-out", dict(entries="new"), "right for a prompt, too low after a cache: which keys does "
         "each new query score?", "each new query scores the cached keys as well as the new ones: T_past + T_q."),
        ("one-head", dict(heads="one"), "the attention part is h times too small: did you add up all h heads?",
         "each head works at width d_head; the h heads together cost what one head of width d_model would."),
        ("no-W_O", dict(products=3), "too low, by the same amount for every new row: which product of the "
         "attention sublayer is missing?", "the heads' output is multiplied by W_O (d_model × d_model) per row."),
        ("head-per-block", dict(head_rows="blocks"), "too high, by an amount that grows with vocab_size and L: how "
         "many times does the output head run?", "the head turns X_L into logits once, after the last block."),
        ("times-h", dict(heads="h"), "the attention part is h times too large: what do h heads of width d_head "
         "cost together?", "the heads split d_model into h slices; together they cost one head of width d_model."),
        ("kv-recomputed", dict(kv_past=2), "too high, by an amount that grows with T_past: which rows go "
         "through W_K and W_V in a cached step?", "the cache holds the past's K and V: only new rows are projected."),
        ("one-layer", dict(layers=False), "too low, by about a factor L: how many blocks do the new tokens go "
         "through?", "each of the L blocks does the same work for the new rows; only the head comes once."),
        ("no-head", dict(head_rows="none"), "too low, by an amount that grows with vocab_size: what turns the last "
         "rows of X_L into logits?", "each new row of X_L is multiplied by the (d_model, vocab_size) head."),
        ("head-once", dict(head_rows="last"), "right for one new token, too low for several: does the forward pass "
         "compute logits only for the last position?", "GPT's forward runs the head on all T_q new rows."),
        ("no-mlp", dict(mlp=False), "too low: which sublayer of the block is missing from your count?",
         "the MLP's two products are missing: from d_model to d_ff and back, for each new row."),
        ("d_ff-assumed", dict(width="4d"), "right when d_ff is four times d_model, wrong otherwise: which width "
         "does your MLP term use?", "the exercise gives d_ff, and the MLP costs in proportion to it."),
        ("multiply-adds", dict(per="madd"), "exactly half: what does one multiply-add count for, in FLOPs?",
         "a FLOP is one multiplication or one addition, so a multiply-add is 2."),
        ("one-new-token", dict(rows="one"), "right for one new token, too low for several: how many new rows go "
         "through each product?", "each product of the blocks and the head runs on all T_q new rows."),
    ]),
]


def _chunk_cases() -> list[tuple]:
    # (T_past, T_q, d_model, h, L, d_ff, vocab_size): one step, a chunk of 3 with d_ff = 1.5·d_model, a prompt
    return [(5, 1, 16, 4, 2, 64, 54), (40, 3, 32, 4, 3, 48, 100), (0, 6, 16, 2, 1, 40, 30)]


@checker(mistakes=_CHUNK_MISTAKES)
def check_chunk_flops(fn) -> Verdict:
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
