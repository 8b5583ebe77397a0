"""Exercise checkers for the costs appendix.

``check_kv_cache_bytes(value)``: a prediction, the bytes of KV cache a GPT-2-small-shaped model (L = 12,
d_model = 768, h = 12) holds after T = 1024 tokens in float16.
``check_cached_step_flops(fn)``: ``fn(T_past, d_model, h, L, vocab_size)`` must return the forward matmul FLOPs of
one generation step with a KV cache holding T_past positions (d_ff = 4·d_model, B = 1).
"""

from __future__ import annotations

import numbers

import torch

from ..costs import activation_elements, count_flops, model_flops
from ..heads import KVCache
from ..model import GPT
from ._core import Guess, Mistake, Verdict, _gen, checker, judge, judge_number, variants

__all__ = ["check_kv_cache_bytes", "check_cached_step_flops", "GPT2_SMALL"]

GPT2_SMALL = {"L": 12, "d_model": 768, "h": 12, "T": 1024}
"""The shape of the KV-cache prediction: GPT-2 small's layers, width and heads, at T = 1024 tokens."""


# --- predict: the bytes of a KV cache ----------------------------------------------------------------------------

def _kv_cache_bytes(L: int, T: int, d_model: int, h: int, dtype: torch.dtype, B: int = 1) -> int:
    """K and V of every layer: L · 2·B·T·d_model elements (the library's formula), times the bytes of dtype."""
    return L * activation_elements(B, T, d_model, h)["kv_cache"] * torch.empty((), dtype=dtype).element_size()


def _measured_cache_bytes(L: int, T: int, d_model: int, h: int, dtype: torch.dtype) -> int:
    """Bytes of the K and V the library's GPT caches while it reads T tokens (a small model, so it is quick)."""
    g = _gen(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(16, d_model, h, L, max_T=T).to(dtype).eval()
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model(torch.randint(0, 16, (1, T), generator=g), caches)
    return sum(c.K.nbytes + c.V.nbytes for c in caches)


@checker(kind="predict")
def check_kv_cache_bytes(value) -> Verdict:
    """Check a predicted number of bytes of K and V cached by a model of GPT2_SMALL's shape in float16."""
    # The formula must agree with what the library really caches; a small model measures it in milliseconds.
    small = dict(L=3, T=20, d_model=48, h=4, dtype=torch.float16)
    measured = _measured_cache_bytes(**small)
    if measured != _kv_cache_bytes(**small):
        return Verdict(False, f"the checker's formula disagrees with a measured cache ({measured} bytes at "
                              f"{small}); please report this.", "error")
    L, d, h, T = GPT2_SMALL["L"], GPT2_SMALL["d_model"], GPT2_SMALL["h"], GPT2_SMALL["T"]
    want = _kv_cache_bytes(L, T, d, h, torch.float16)
    guesses = [
        Guess("half",
              "that is half: either only K is counted (V is cached too, a factor 2), or elements are counted "
              "instead of bytes (a float16 number takes 2 bytes).", want / 2),
        Guess("float32",
              "that is twice too much: float32 takes 4 bytes per number, float16 only 2.", want * 2),
        Guess("one-layer",
              "that is one twelfth: one layer's cache (or one head's d_head = 64 columns). Each of the L = 12 "
              "layers keeps its own K and V, for all heads together: d_model = 768 columns.", want / L),
        Guess("times-h",
              "that is h = 12 times too much: the heads split the d_model columns (h · d_head = d_model), they "
              "do not add columns. Do not multiply by h.", want * h),
        Guess("T-squared",
              "that is the size of the attention weights (h tables of T × T per layer). The cache keeps K and V, "
              "T rows of d_model numbers each: it grows like T, not T².", L * h * T * T * 2),
        Guess("units",
              "that looks like mebibytes or megabytes. Give the number of bytes (1 MiB = 2²⁰ bytes).",
              want / 2**20),
    ]
    return judge_number(value, want, guesses, rtol=0.05,
                        success=f"2 (K and V) · L · T · d_model · 2 bytes = {want:,} bytes = "
                                f"{want / 2**20:.0f} MiB; a cache of the library's GPT at L = {small['L']}, "
                                f"T = {small['T']}, d_model = {small['d_model']} in float16 measures "
                                f"{measured:,} bytes, as the formula says.")


# --- extend: the FLOPs of one cached generation step ---------------------------------------------------------------

def _measured_step_flops(T_past, d_model, h, L, vocab_size):
    """Matmul FLOPs torch counts while the library's GPT (plain backend) reads one token after T_past cached."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(vocab_size, d_model, h, L, max_T=T_past + 1, backend="plain").eval()
    ids = torch.randint(0, vocab_size, (1, T_past + 1), generator=_gen(0))
    caches = [KVCache() for _ in model.blocks]
    if T_past:
        with torch.no_grad():
            model(ids[:, :T_past], caches)
    return torch.tensor(float(count_flops(lambda: model(ids[:, T_past:], caches))))


def _step(T_past, d_model, h, L, vocab_size, *, own_key=True, power=1, times_h=False, all_layers=True,
          mlp=True, head=True):
    """The FLOPs of one cached step with the planted mistakes' switches; the defaults count it right."""
    keys = T_past + 1 if own_key else T_past
    block = 8 * d_model**2 + (h if times_h else 1) * 4 * keys**power * d_model + (16 * d_model**2 if mlp else 0)
    n = (L if all_layers else 1) * block + (2 * d_model * vocab_size if head else 0)
    return torch.tensor(float(n))


_STEP_MISTAKES = [
    Mistake("no-cache",
            "that is a forward pass over all T_past + 1 tokens, as if nothing were cached. With the cache only "
            "the new token goes through W_QKV, W_O, the MLP and the head; only its scores against the "
            "T_past + 1 keys (and weights · V) depend on T_past.",
            lambda t, d, h, L, V: torch.tensor(float(model_flops(1, t + 1, d, h, L, V)["model"]))),
    *variants(_step, [
        ("own-key", dict(own_key=False),
         "the new token reads T_past + 1 keys, its own included, not T_past: scores and weights · V cost "
         "2·(T_past + 1)·d_model each."),
        ("quadratic", dict(power=2),
         "one new query row against T_past + 1 keys costs 2·(T_past + 1)·d_model for the scores: linear in "
         "the past, not (T_past + 1)². The T² of a full forward pass comes from T query rows."),
        ("times-h", dict(times_h=True),
         "the heads split d_model into h slices of d_head, so all heads together cost what one head of "
         "width d_model would: do not multiply the attention part by h."),
        ("one-layer", dict(all_layers=False),
         "that is one block plus the head. Each of the L blocks does the same work for the new token: "
         "L × the block's FLOPs."),
        ("no-head", dict(head=False),
         "the output head is missing: the new token's X_L row times the (d_model, vocab_size) head costs "
         "2·d_model·vocab_size."),
        ("no-mlp", dict(mlp=False),
         "the MLP is missing: (1, d_model) @ (d_model, d_ff) and back cost 4·d_model·d_ff = 16·d_model² for "
         "d_ff = 4·d_model."),
    ]),
]


@checker
def check_cached_step_flops(fn) -> Verdict:
    """Check ``fn(T_past, d_model, h, L, vocab_size)`` → the FLOPs torch counts for one cached generation step."""
    if not callable(fn):
        return judge(fn, [], None)

    def as_number(*args):
        n = fn(*args)
        if isinstance(n, numbers.Real) and not isinstance(n, bool):
            return torch.tensor(float(n))
        return n

    return judge(as_number, [(5, 16, 4, 2, 54), (40, 32, 4, 3, 100)], _measured_step_flops, _STEP_MISTAKES,
                 success="L · (24·d_model² + 4·(T_past + 1)·d_model) + 2·d_model·vocab_size, as torch counts "
                         "it: with a cache one step grows linearly with the past.")
