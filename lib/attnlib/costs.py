"""Appendix: what attention costs. FLOP, parameter and memory formulas per stage, and small measuring tools.

Conventions. A multiply-add counts as 2 FLOPs, so X (m, k) @ W (k, n) costs 2·m·k·n. The formulas count matrix
products only, the way ``torch.utils.flop_counter.FlopCounterMode`` does: bias additions, scaling, masking,
softmax, GELU and LayerNorm are elementwise work of lower order and are listed separately by
:func:`elementwise_ops`. The fused attention kernels of ``scaled_dot_product_attention`` are counted as the two
full (T × T) products even with ``is_causal=True`` (a causal kernel may skip the masked half).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ._validate import (
    boundary,
    require_callable,
    require_choice,
    require_device,
    require_divisible,
    require_flags,
    require_kv_heads,
    require_nonnegative,
    require_positive,
)

__all__ = [
    "attention_flops", "block_flops", "model_flops", "elementwise_ops", "block_params", "model_params",
    "activation_elements", "count_flops", "count_ops", "ops_called", "sync", "time_fn", "time_interleaved",
    "peak_memory", "attention_params", "kv_cache_bytes",
]


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.

_SIZES = ("B", "T", "d_model", "h", "L", "vocab_size", "max_T", "h_kv", "d_head", "bytes_per_number")


def _sizes_args(**args) -> dict:
    """The formulas' arguments: sizes positive ints (h divides d_model), d_ff an int (None: 4·d_model), a switch
    True or False, ``pos`` one of GPT's choices."""
    out = dict(zip((n for n in _SIZES if n in args), require_positive(**{n: args[n] for n in _SIZES if n in args})))
    if "h" in out:
        require_divisible(out["d_model"], out["h"])
    if "d_ff" in args:
        out["d_ff"] = 4 * out["d_model"] if args["d_ff"] is None else require_positive(d_ff=args["d_ff"])[0]
    for flag in ("bias", "backward"):
        if flag in args:
            out[flag], = require_flags(**{flag: args[flag]})
    if "pos" in args:
        out["pos"] = require_choice(args["pos"], "pos", ("learned", "sinusoidal", "rope", None))
    return out


def _attention_params_args(d_model, h, h_kv, bias):
    (d_model, h), (bias,) = require_positive(d_model=d_model, h=h), require_flags(bias=bias)
    require_divisible(d_model, h)
    return {"d_model": d_model, "h": h, "h_kv": require_kv_heads(h, h_kv), "bias": bias}


def _sync_args(device):
    return {"device": None if device is None else require_device(device)}


@boundary(_sizes_args)
def attention_flops(B: int, T: int, d_model: int, h: int) -> dict[str, int]:
    """Forward matmul FLOPs of causal multi-head self-attention on x (B, T, d_model), stage by stage.

    qkv 6·B·T·d_model², scores (Q Kᵀ) 2·B·T²·d_model, weights·V 2·B·T²·d_model, W_O 2·B·T·d_model².
    The number of heads h does not change the count: h heads of d_head = d_model / h columns each.
    """
    return {
        "qkv": 2 * B * T * d_model * 3 * d_model,
        "scores": 2 * B * T * T * d_model,
        "weights_v": 2 * B * T * T * d_model,
        "W_O": 2 * B * T * d_model * d_model,
    }


@boundary(_sizes_args)
def block_flops(B: int, T: int, d_model: int, h: int, d_ff: int | None = None) -> dict[str, int]:
    """Forward matmul FLOPs of one Transformer block: the attention stages, the MLP (4·B·T·d_model·d_ff), total.

    ``d_ff=None`` means 4·d_model, as in :class:`attnlib.Block`.
    """
    f = attention_flops(B, T, d_model, h)
    f["mlp"] = 2 * 2 * B * T * d_model * d_ff
    f["block"] = sum(f.values())
    return f


@boundary(_sizes_args)
def model_flops(B: int, T: int, d_model: int, h: int, L: int, vocab_size: int, d_ff: int | None = None,
                *, backward: bool = False) -> dict[str, int]:
    """Forward matmul FLOPs of :class:`attnlib.GPT` on ids (B, T): embedding 0 (a table lookup), L blocks, head.

    With ``backward=True`` the result is forward plus backward: every product A @ B needs two products of the
    same size backwards (the gradients of A and of B), so the total is 3 × forward.
    """
    f = {"embedding": 0, "blocks": L * block_flops(B, T, d_model, h, d_ff)["block"],
         "head": 2 * B * T * d_model * vocab_size}
    f["model"] = sum(f.values())
    if backward:
        f = {k: 3 * v for k, v in f.items()}
    return f


@boundary(_sizes_args)
def elementwise_ops(B: int, T: int, d_model: int, h: int, d_ff: int | None = None) -> dict[str, int]:
    """Rough counts of the elementwise work in one block (not matmuls, so FlopCounterMode counts none of it).

    scale + mask: 2 per score; softmax: about 5 per score (max, subtract, exp, sum, divide); GELU: about 8 per
    hidden unit; each LayerNorm: about 8 per element.
    """
    n_scores = B * h * T * T
    return {"scale_mask": 2 * n_scores, "softmax": 5 * n_scores,
            "gelu": 8 * B * T * d_ff, "layernorms": 2 * 8 * B * T * d_model}


@boundary(_sizes_args)
def block_params(d_model: int, d_ff: int | None = None, *, bias: bool = True) -> dict[str, int]:
    """Parameters of one block: W_QKV and W_O (4·d_model² + biases), MLP (2·d_model·d_ff + biases), 2 LayerNorms.

    ``bias=False`` (as in ``Block(bias=False)``) drops every bias: the projections', the MLP's and the
    LayerNorms' shifts, which leaves each LayerNorm its d_model scales.
    """
    b = 1 if bias else 0
    p = {
        "qkv": 3 * d_model * d_model + b * 3 * d_model,
        "W_O": d_model * d_model + b * d_model,
        "mlp": 2 * d_model * d_ff + b * (d_ff + d_model),
        "layernorms": 2 * (1 + b) * d_model,             # scale and shift of each LayerNorm
    }
    p["block"] = sum(p.values())
    return p


@boundary(_sizes_args)
def model_params(vocab_size: int, d_model: int, L: int, max_T: int, d_ff: int | None = None,
                 *, pos: str | None = "learned") -> dict[str, int]:
    """Parameters of :class:`attnlib.GPT`: token table, position table (learned only), L blocks, final LN, head."""
    p = {
        "embedding": vocab_size * d_model,
        "positions": max_T * d_model if pos == "learned" else 0,
        "blocks": L * block_params(d_model, d_ff)["block"],
        "ln_f": 2 * d_model,
        "head": d_model * vocab_size,
    }
    p["model"] = sum(p.values())
    return p


@boundary(_sizes_args)
def activation_elements(B: int, T: int, d_model: int, h: int, d_ff: int | None = None) -> dict[str, int]:
    """Elements of the tensor each stage of one block produces (multiply by bytes per element for memory).

    X₀ and every residual stream (B, T, d_model); Q, K, V together 3·B·T·d_model; the scores S and the
    weights P (B, h, T, T) each: the only stages that grow with T²; the MLP's hidden layer B·T·d_ff;
    the K and V a cache keeps for generation, 2·B·T·d_model per block.
    """
    return {
        "X": B * T * d_model,
        "qkv": 3 * B * T * d_model,
        "scores": B * h * T * T,
        "weights": B * h * T * T,
        "weights_v": B * T * d_model,
        "W_O": B * T * d_model,
        "mlp_hidden": B * T * d_ff,
        "kv_cache": 2 * B * T * d_model,
    }


# ---------------------------------------------------------------------------------------------- measuring
# The measuring functions run ``fn()``, the caller's own code, so they are no @boundary: inside a boundary the
# library's functions that fn calls would skip their checks (and their copies of views), and be measured without.
# (Code that must run user code inside a boundary runs it under _validate.user_code(), which restores the checks.)


def count_flops(fn: Callable[[], object]) -> int:
    """Matmul FLOPs torch counts while running ``fn()`` (torch.utils.flop_counter.FlopCounterMode)."""
    require_callable(fn)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def count_ops(fn: Callable[[], object], match: str | tuple[str, ...] | None = None) -> int:
    """How many aten operators ``fn()`` runs, every call counted: one per kernel a plain eager loop launches.

    ``match`` counts only the operators whose name contains one of its strings, as in :func:`ops_called`:
    ``match="mm"`` counts the matrix products (mm, addmm, bmm). The total depends on the torch release (how
    many views and reshapes a call runs); the matrix products of a plain ``nn.Linear`` do not.
    """
    require_callable(fn)
    match = _match_patterns(match) if match is not None else None
    n = 0

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal n
            if match is None or any(m in str(func.overloadpacket.__name__) for m in match):
                n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return n


def ops_called(fn: Callable[[], object], match: tuple[str, ...] = ("attention", "softmax")) -> list[str]:
    """Names of the aten operators ``fn()`` runs whose name contains one of ``match``, in order of first use.

    It shows which kernel does the work, e.g. ``_scaled_dot_product_flash_attention_for_cpu``. A single
    string is one pattern (``match="mm"``), never a sequence of letters.
    """
    require_callable(fn)
    match = _match_patterns(match)
    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket.__name__)
            if any(m in name for m in match) and name not in seen:
                seen.append(name)
            return func(*args, **(kwargs or {}))

    with Record():
        fn()
    return seen


def _match_patterns(match) -> tuple[str, ...]:
    """``match`` as a tuple of non-empty strings: a single string is one pattern, never a sequence of letters."""
    match = (match,) if isinstance(match, str) else match
    if not isinstance(match, (tuple, list)) or not match or not all(isinstance(m, str) and m for m in match):
        raise TypeError(f"match must be a non-empty string or a tuple of them, e.g. ('attention', 'softmax'), "
                        f"got {match!r}")
    return tuple(match)


@boundary(_sync_args)
def sync(device=None) -> None:
    """Wait for queued GPU work, so a timer measures the work and not only its launch."""
    _wait(device)


def _wait(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device is not None and device.type == "mps":
        torch.mps.synchronize()


def time_fn(fn: Callable[[], object], *, repeat: int = 10, warmup: int = 2, device=None) -> list[float]:
    """Seconds of each of ``repeat`` calls of ``fn()`` after ``warmup`` untimed calls (GPU-synchronised).

    It takes as long as ``repeat + warmup`` calls of ``fn`` take: nothing bounds ``repeat`` but your patience."""
    require_callable(fn)
    return time_interleaved({"fn": fn}, repeat=repeat, warmup=warmup, device=device)["fn"]


def time_interleaved(fns: dict[str, Callable[[], object]], *, repeat: int = 10, warmup: int = 2,
                     device=None) -> dict[str, list[float]]:
    """Time several functions in turns A B A B …, so a slow spell of the machine hits all of them alike.

    Returns seconds per call for each name; compare medians, or the median of the ratios of neighbouring calls.
    """
    (repeat,), (warmup,) = require_positive(repeat=repeat), require_nonnegative(warmup=warmup)
    if not isinstance(fns, dict) or not fns:
        raise TypeError(f"fns must be a non-empty dict of name → function, got {type(fns).__name__}")
    for name, fn in fns.items():
        require_callable(fn, f"fns[{name!r}]")
    device = require_device(device) if device is not None else None
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _wait(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            _wait(device)
            times[name].append(time.perf_counter() - t0)
    return times


class _LiveTensors(TorchDispatchMode):
    """Counts the bytes of every tensor storage an operation creates while the mode is active, until freed."""

    def __init__(self):
        super().__init__()
        self.refs: dict = {}
        self.nbytes: dict = {}
        self.current = 0
        self.peak = 0

    def _release(self, key):
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.current -= self.nbytes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {(t.untyped_storage().data_ptr(), str(t.device))
                  for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key = (storage.data_ptr(), str(t.device))
                if key not in self.refs and key in inputs:
                    continue   # a view of (or in-place result on) a tensor that existed before: nothing new
                if key not in self.refs:
                    self.refs[key] = 0
                    self.nbytes[key] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                self.refs[key] += 1
                weakref.finalize(t, self._release, key)
        return out


def peak_memory(fn: Callable[[], object], device=None) -> int:
    """Peak bytes of the tensors allocated while ``fn()`` runs, above what was allocated before.

    On CUDA this is ``torch.cuda.max_memory_allocated`` (everything, a kernel's scratch space included). Elsewhere
    a dispatch mode counts the storage of every tensor an operation returns, from its creation until the tensor
    is freed: repeatable to the byte, but blind to buffers a kernel allocates and frees inside itself.
    """
    require_callable(fn)
    device = require_device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    mode = _LiveTensors()
    with mode:
        fn()
    return mode.peak


# ------------------------------------------------------------------------------- grouped-query attention (ch. 10)


@boundary(_attention_params_args)
def attention_params(d_model: int, h: int, h_kv: int | None = None, *, bias: bool = True) -> dict[str, int]:
    """Parameters of one ``MultiHeadAttention(d_model, h, h_kv=h_kv)``, matrix by matrix (biases included).

    W_Q and W_O are d_model × d_model; W_K and W_V are d_model × (h_kv·d_head) each, d_head = d_model / h.
    With h_kv = h this is 4·d_model² + 4·d_model; with h_kv = 1 (multi-query) W_K and W_V shrink by h.
    """
    b = 1 if bias else 0
    d_kv = h_kv * (d_model // h)                        # h_kv heads of d_head columns
    p = {"W_Q": d_model * d_model + b * d_model, "W_K": d_model * d_kv + b * d_kv,
         "W_V": d_model * d_kv + b * d_kv, "W_O": d_model * d_model + b * d_model}
    p["attention"] = sum(p.values())
    return p


@boundary(_sizes_args)
def kv_cache_bytes(L: int, h_kv: int, d_head: int, *, bytes_per_number: int = 2) -> int:
    """Bytes of KV cache one token adds to a model of L layers: 2 (K and V) · L · h_kv · d_head numbers.

    ``bytes_per_number``: 2 for float16 / bfloat16 (the default), 4 for float32. Multiply by T and B for a
    whole cache; the number of query heads h does not appear.
    """
    return 2 * L * h_kv * d_head * bytes_per_number
