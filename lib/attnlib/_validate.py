"""Input checks at the library's boundary: the ``require_…`` validators and the :func:`boundary` decorator.

Every public function, constructor and ``forward`` of attnlib validates its arguments once, where they come in,
so a wrong input fails at once with a message that names what was expected and what came, e.g.
``x must be (B, T, d_model=64), got (2, 7, 32)``, instead of a deep torch traceback, a hang or a silently
wrong result. A wrong type or dtype raises TypeError; a wrong size, shape or value raises ValueError.

Sizes may be Python or NumPy integers (they come back as ``int``). Tensors may be views of any layout
(transposed, sliced, expanded): :func:`boundary` makes them contiguous before computing, so a view gives exactly
the bits of its copy. Nothing is broadcast quietly: tensors that are combined must share their batch axes.
NaN and ±inf inside tensors are *not* looked for: that would cost a pass over every input on every call,
and torch's own kernels do not look either.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import math
import numbers
import operator
import os

import numpy as np
import torch

__all__ = [
    "boundary", "user_code", "require_fits",
    "require_tensor", "require_shape", "require_same", "require_like", "require_input", "require_batch",
    "require_divisible", "require_positive", "require_nonnegative", "require_number", "require_flags",
    "require_choice", "require_callable", "require_device", "require_dtype", "require_ids", "require_id_list",
    "require_targets", "require_pieces", "require_labels", "require_cache", "require_caches", "require_axis",
    "require_kv_heads", "require_is_pad", "require_mask", "require_positions", "require_weights",
]


_INSIDE = contextvars.ContextVar("attnlib_inside_boundary", default=False)


def boundary(spec):
    """Decorate a public entry point with its argument spec, by reference: ``@boundary(_name_args)`` above the
    ``def``, the spec defined before it (never a name looked up as a string).

    The spec receives every argument by name (defaults filled in) and raises a clear error for a bad one. It may
    return a dict of normalised values (``int`` for a NumPy size, a filled-in config, …) for names the function
    takes; any other name is an error, not dropped. After it, every tensor argument is made contiguous, here and
    nowhere else: a view of any layout (transposed, sliced, expanded) gives exactly the bits of its copy. The
    decorated body is then the computation alone.

    A call made while another boundary is running (the library calling its own public functions, a model's
    forward calling its blocks) skips the spec: those arguments were checked where they came in, or the library
    made them, so a model's forward reads its ``ids`` once, not once per layer. A spec that calls the library
    with values of its own making must therefore check what a nested call would have checked (``train`` checks
    its T against the model's max_T). Where the library runs *user* code inside a boundary (a learner's function,
    a callback), it runs it under :func:`user_code`, so the library functions that code calls check their
    arguments again.
    """
    if isinstance(spec, str) or not callable(spec):
        raise TypeError(f"boundary takes the spec function itself, @boundary(_name_args), got {_show(spec)}")

    def wrap(fn):
        signature = inspect.signature(fn)
        takes = tuple(signature.parameters)
        _require_spec_takes(spec, fn, takes)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            if _INSIDE.get():
                return fn(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{fn.__qualname__}(): {e}") from None
            bound.apply_defaults()
            normalised = spec(**bound.arguments)
            if normalised:
                unknown = [k for k in normalised if k not in takes]
                if unknown:
                    raise TypeError(f"the spec {spec.__qualname__} of {fn.__qualname__} returned {unknown}, which "
                                    f"{fn.__qualname__} does not take (it takes {list(takes)})")
                bound.arguments.update(normalised)
            for k, v in bound.arguments.items():
                if isinstance(v, torch.Tensor):
                    bound.arguments[k] = v.contiguous()   # any memory layout gives the bits of a plain copy
            token = _INSIDE.set(True)
            try:
                return fn(*bound.args, **bound.kwargs)
            finally:
                _INSIDE.reset(token)

        checked.__signature__ = signature
        checked.spec = spec
        return checked

    return wrap


def _require_spec_takes(spec, fn, takes: tuple) -> None:
    """A spec takes every argument of its function by name (or ``**args``), and nothing that has no default more."""
    try:
        params = inspect.signature(spec).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    missing = [n for n in takes if n not in params]
    extra = [n for n, p in params.items() if n not in takes and p.default is p.empty
             and p.kind not in (p.VAR_POSITIONAL,)]
    if missing or extra:
        raise TypeError(f"the spec {spec.__qualname__} must take the arguments of {fn.__qualname__}, {list(takes)}: "
                        f"missing {missing}, extra {extra}")


@contextlib.contextmanager
def user_code():
    """Run code that is not the library's (a learner's function, a callback) inside a boundary: the library
    functions it calls check their arguments again, as they would at the top level."""
    token = _INSIDE.set(False)
    try:
        yield
    finally:
        _INSIDE.reset(token)


def _show(v) -> str:
    """A value as a message shows it: its repr (shortened) and, where that is ambiguous, its type."""
    text = repr(v)
    if len(text) > 48:
        text = text[:45] + "..."
    plain = isinstance(v, (int, float)) and not isinstance(v, bool)
    return text if plain else f"{text} ({type(v).__name__})"


# ------------------------------------------------------------------------------------------ plain values


def _integer(v, name: str, what: str) -> int:
    if not (isinstance(v, (bool, np.bool_)) or isinstance(v, torch.Tensor) and v.dtype == torch.bool):
        try:
            return operator.index(v)   # int, NumPy integers, one-element integer tensors
        except TypeError:
            pass
    raise TypeError(f"{name} must be {what}, got {_show(v)}")


def require_positive(**values) -> tuple[int, ...]:
    """Every named size must be a positive integer (Python or NumPy); returns them as ints, in order."""
    out = []
    for name, v in values.items():
        n = _integer(v, name, "a positive integer")
        if n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n}")
        out.append(n)
    return tuple(out)


def require_nonnegative(**values) -> tuple[int, ...]:
    """Every named position or count must be an integer ≥ 0; returns them as ints, in order.

    A negative position is never read "from the end": it is an error.
    """
    out = []
    for name, v in values.items():
        n = _integer(v, name, "an integer ≥ 0")
        if n < 0:
            raise ValueError(f"{name} must be an integer ≥ 0, got {n}")
        out.append(n)
    return tuple(out)


def require_divisible(d_model: int, h: int) -> int:
    """Return d_head = d_model // h, or raise if h does not divide d_model."""
    h, d_model = require_positive(h=h, d_model=d_model)
    if d_model % h:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}: each head needs d_model/h dimensions")
    return d_model // h


def require_number(v, name: str, *, minimum: float | None = None, above: float | None = None) -> float:
    """A finite real number (Python, NumPy or a one-element tensor) ≥ ``minimum`` or > ``above``; as a float."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not (v.dtype == torch.bool or v.is_complex()):
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {x}")
    if minimum is not None and x < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {x}")
    if above is not None and x <= above:
        raise ValueError(f"{name} must be greater than {above}, got {x}")
    return x


def require_flags(**values) -> tuple[bool, ...]:
    """Every named switch must be True or False (a NumPy bool too); returns them as bools, in order."""
    out = []
    for name, v in values.items():
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {_show(v)}")
        out.append(bool(v))
    return tuple(out)


def require_choice(v, name: str, options: tuple):
    """``v`` must be one of ``options`` (strings or None): ``norm must be 'pre' or 'post', got 'middle'``."""
    if any(v is o or (isinstance(v, str) and v == o) for o in options):
        return None if v is None else str(v)
    shown = [repr(o) for o in options]
    raise ValueError(f"{name} must be {', '.join(shown[:-1])} or {shown[-1]}, got {_show(v)}")


def require_callable(fn, name: str = "fn"):
    if not callable(fn):
        raise TypeError(f"{name} must be a function to call (e.g. lambda: model(x)), got {_show(fn)}")
    return fn


def require_device(device, name: str = "device") -> torch.device:
    """A device name torch knows ('cpu', 'cuda', 'cuda:1', 'mps', …) or a torch.device, that this machine has;
    as a torch.device. ``'cuda'`` on a machine without CUDA says so here, not in torch's "not compiled with CUDA"."""
    if not isinstance(device, torch.device):
        if not isinstance(device, str):
            raise TypeError(f"{name} must be a device name such as 'cpu' or 'cuda', or a torch.device, got "
                            f"{_show(device)}")
        try:
            device = torch.device(device)
        except (RuntimeError, ValueError):
            raise ValueError(f"{name}={device!r} is not a device torch knows; expected a name such as "
                             "'cpu', 'cuda', 'cuda:1' or 'mps'") from None
    if device.type in ("cuda", "mps"):
        from .runtime import accelerators  # the library's one probe (tests replace it, never torch's)

        if not accelerators()[device.type]:
            what = "CUDA" if device.type == "cuda" else "MPS (Apple's GPU)"
            raise ValueError(f"{name}={str(device)!r}: {what} was asked for, but this machine has none; "
                             "expected 'cpu' or a device that attnlib.pick_device() finds")
    return device


def require_dtype(dtype, name: str = "dtype", *, allow_bool: bool = False) -> torch.dtype:
    """A floating-point torch dtype (or torch.bool where ``allow_bool``)."""
    kinds = "a floating-point torch dtype" + (" or torch.bool" if allow_bool else "")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be {kinds} (e.g. torch.float32), got {_show(dtype)}")
    if not (dtype.is_floating_point or (allow_bool and dtype == torch.bool)):
        raise TypeError(f"{name} must be {kinds}, got {dtype}")
    return dtype


# ------------------------------------------------------------------------------------------ tensors


def require_tensor(x, name: str) -> torch.Tensor:
    """Raise TypeError unless ``x`` is a torch.Tensor."""
    if not isinstance(x, torch.Tensor):
        hint = " (convert it with torch.as_tensor)" if isinstance(x, (np.ndarray, list, tuple)) else ""
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}{hint}")
    return x


def require_shape(x, name: str, dims: str, *, float_only: bool = True, **sizes: int) -> dict[str, int]:
    """Check ``x`` against a shape spec and return the named sizes.

    ``dims`` names the axes, e.g. ``"B T d_model"``; a leading ``"..."`` allows any number of extra leading
    axes. Keyword arguments pin sizes: ``require_shape(x, "x", "B T d_model", d_model=64)``.
    An axis that appears twice must have the same size both times. Every named axis but the batch axis B
    must hold at least one entry (leading ``...`` axes and B may be empty).
    """
    require_tensor(x, name)
    names = dims.split()
    leading = bool(names) and names[0] == "..."
    if leading:
        names = names[1:]
    spec = ", ".join(f"{n}={sizes[n]}" if n in sizes else n for n in names)
    spec = f"(..., {spec})" if leading else f"({spec})"
    got = tuple(x.shape)
    if (len(got) < len(names)) if leading else (len(got) != len(names)):
        raise ValueError(f"{name} must be {spec}, got {got} ({x.dim()} axes)")
    found: dict[str, int] = {}
    for n, size in zip(names, got[len(got) - len(names):]):
        want = sizes.get(n, found.get(n))
        if want is not None and size != want:
            extra = "" if n in sizes else f" (both {n} axes must match)"
            raise ValueError(f"{name} must be {spec}, got {got}{extra}")
        found[n] = size
    for n, size in found.items():
        if size == 0 and n != "B":
            what = "is an empty sequence" if n.startswith("T") else f"has an empty {n} axis"
            raise ValueError(f"{name} {what}: {n} must be at least 1, got shape {got}")
    if float_only and not x.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {x.dtype}")
    return found


def require_same(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise if two tensors that are combined live on different devices or have different dtypes."""
    if a.device != b.device:
        raise ValueError(f"{name_a} is on {a.device} but {name_b} is on {b.device}; move both to one device")
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {a.dtype} but {name_b} has dtype {b.dtype}; use one dtype")


def require_like(x: torch.Tensor, weight: torch.Tensor, name: str = "x") -> None:
    """An input must have the dtype and the device of the weights that multiply it."""
    if x.device != weight.device:
        raise ValueError(f"{name} is on {x.device} but the weights are on {weight.device}; "
                         f"use model.to({str(x.device)!r}) or {name}.to({str(weight.device)!r})")
    if x.dtype != weight.dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but the weights are {weight.dtype}; "
                        f"use model.to({x.dtype}) or {name}.to({weight.dtype})")


def require_input(x, name: str, dims: str, weight: torch.Tensor, **sizes: int) -> dict[str, int]:
    """:func:`require_shape` for a module's input, then the same dtype and device as the module's ``weight``."""
    found = require_shape(x, name, dims, **sizes)
    require_like(x, weight, name)
    return found


def require_batch(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str, core: int = 2) -> None:
    """Two tensors that are multiplied must have the same batch axes (all but the last ``core`` axes).

    Nothing is broadcast quietly: Q of shape (2, 5, 8) against K of shape (3, 5, 8) is an error.
    """
    ba, bb = tuple(a.shape[:a.dim() - core]), tuple(b.shape[:b.dim() - core])
    if ba != bb:
        raise ValueError(f"{name_b} must have the batch axes of {name_a}, {ba}, before its last {core} axes, "
                         f"got {bb} ({name_a} is {tuple(a.shape)}, {name_b} is {tuple(b.shape)})")


# ------------------------------------------------------------------------------------------ token IDs

_ID_DTYPES = (torch.int64, torch.int32)


def require_ids(ids, vocab_size: int, name: str = "ids", *, like: torch.Tensor | None = None) -> torch.Tensor:
    """Check that ``ids`` is an integer tensor of shape (T,) or (B, T) with values in 0..vocab_size-1.

    ``like`` (a weight) also pins the device. An empty batch (B = 0) is allowed, an empty sequence is not.
    """
    require_tensor(ids, name)
    vocab_size, = require_positive(vocab_size=vocab_size)
    if ids.dtype not in _ID_DTYPES:
        raise TypeError(f"{name} must be an integer tensor (torch.long), got dtype {ids.dtype}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"{name} must be (T,) or (B, T), got {tuple(ids.shape)}")
    if ids.shape[-1] == 0:
        raise ValueError(f"{name} is an empty sequence: T must be at least 1, got shape {tuple(ids.shape)}")
    if like is not None and ids.device != like.device:
        raise ValueError(f"{name} is on {ids.device} but the model is on {like.device}; "
                         f"use {name}.to({str(like.device)!r})")
    require_readable(ids, name)
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary 0..{vocab_size - 1}")
    return ids


def require_id_list(ids, vocab_size: int, name: str = "ids") -> list[int]:
    """One sequence of token IDs (a (T,) integer tensor or array, or a list of ints) as a list of ints."""
    vocab_size, = require_positive(vocab_size=vocab_size)
    if isinstance(ids, torch.Tensor):
        require_readable(ids, name)
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        if ids.ndim != 1:
            raise ValueError(f"{name} must be one sequence (T,), got shape {tuple(ids.shape)}; decode each row")
        integer = (not (ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex())
                   if isinstance(ids, torch.Tensor) else np.issubdtype(ids.dtype, np.integer))
        if not integer:
            raise TypeError(f"{name} must hold integer token IDs, got dtype {ids.dtype}")
        ids = ids.tolist()
    elif isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{name} must be a sequence of token IDs, got {_show(ids)}")
    out = [_integer(i, f"every token id in {name}", "an integer") for i in ids]
    for i in out:
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} is outside the vocabulary 0..{vocab_size - 1}")
    return out


def require_targets(targets, ids: torch.Tensor, vocab_size: int, ignore_index: int) -> torch.Tensor:
    """Targets (B, T) for ids (B, T): integer IDs in 0..vocab_size-1, or ``ignore_index`` to skip a position.

    Returns them as torch.long. At least one target must count, or there would be nothing to average.
    """
    require_tensor(targets, "targets")
    if targets.dtype not in _ID_DTYPES:
        raise TypeError(f"targets must be an integer tensor (torch.long), got dtype {targets.dtype}")
    if targets.shape != ids.shape:
        raise ValueError(f"targets must be (B, T) = {tuple(ids.shape)}, the shape of ids, got {tuple(targets.shape)}")
    if targets.device != ids.device:
        raise ValueError(f"targets are on {targets.device} but ids are on {ids.device}; move both to one device")
    if targets.numel() == 0:
        raise ValueError(f"targets are empty, shape {tuple(targets.shape)}: expected at least one target to average")
    counted = targets != ignore_index
    if not bool(counted.any()):
        raise ValueError(f"every target is the ignored value {ignore_index}: expected at least one target to "
                         "count (the mean loss over none would be NaN)")
    bad = targets[counted & ((targets < 0) | (targets >= vocab_size))]
    if bad.numel():
        raise ValueError(f"target {int(bad[0])} is outside the vocabulary 0..{vocab_size - 1} "
                         f"(or {ignore_index} to skip a position)")
    return targets.long()


def require_pieces(pieces, name: str = "vocab") -> list[str]:
    """A non-empty list of distinct, non-empty strings (a vocabulary, or a token per position)."""
    if isinstance(pieces, (str, bytes)) or not isinstance(pieces, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, got {_show(pieces)}")
    for k, p in enumerate(pieces):
        if not isinstance(p, str) or not p:
            raise TypeError(f"{name}[{k}] must be a non-empty string, got {_show(p)}")
    if not pieces:
        raise ValueError(f"{name} is empty: expected at least one piece")
    if len(set(pieces)) != len(pieces):
        seen: set = set()
        twice = next(p for p in pieces if p in seen or seen.add(p))
        raise ValueError(f"{name} has repeated pieces, e.g. {twice!r}: every piece must appear once")
    return list(pieces)


def require_labels(tokens, T: int | None, name: str = "tokens") -> list[str]:
    """One label (a string) per position of a (T, T) table: exactly T of them (any number if T is None)."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name} must be a list of T strings, got {_show(tokens)}")
    if not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name} must be a list of strings, got {[type(t).__name__ for t in tokens][:5]}")
    if T is not None and len(tokens) != T:
        raise ValueError(f"{name} must hold one label per position, T={T}, got {len(tokens)}")
    return list(tokens)


# ------------------------------------------------------------------------------------------ KV caches


def require_cache(cache, name: str = "cache", *, B: int | None = None, h: int | None = None,
                d_head: int | None = None, like: torch.Tensor | None = None, h_query: int | None = None) -> int:
    """A KV cache: K and V (B, h_kv, T_past, d_head), both set or both None, of one shape, dtype and device.

    The keyword arguments pin what the layer that extends it will append (``like``: its dtype and device);
    ``h`` is the number of key/value heads the cache holds, h_kv (equal to the query heads h unless the
    layer groups its queries, chapter 10); ``h_query``, the layer's query heads, only words the message.
    Returns T_past (0 for an empty cache).
    """
    if not (hasattr(cache, "K") and hasattr(cache, "V") and hasattr(cache, "extend")):
        raise TypeError(f"{name} must be a KVCache, got {type(cache).__name__}")
    K, V = cache.K, cache.V
    if K is None and V is None:
        return 0
    if K is None or V is None:
        raise ValueError(f"{name} holds {'V' if K is None else 'K'} but not {'K' if K is None else 'V'}: "
                         "set both or neither")
    spec = "(" + ", ".join(n if v is None else f"{n}={v}" for n, v in
                           (("B", B), ("h_kv", h), ("T_past", None), ("d_head", d_head))) + ")"
    for t, part in ((K, "K"), (V, "V")):
        require_tensor(t, f"{name}.{part}")
        if t.dim() == 4 and h is not None and t.shape[1] != h:
            of = "" if h_query is None else f" (for h={h_query} query heads)"
            raise ValueError(f"{name}.{part} holds {t.shape[1]} key/value heads, but this layer has h_kv={h}{of}: "
                             f"expected {spec}, got {tuple(t.shape)}; a cache keeps one K and V per key/value "
                             "head and belongs to one layer")
        if not (t.dim() == 4 and all(v is None or t.shape[k] == v for k, v in ((0, B), (1, h), (3, d_head)))):
            raise ValueError(f"{name}.{part} must be {spec}, got {tuple(t.shape)}; "
                             "a cache belongs to one layer and one batch")
        if not t.is_floating_point():
            raise TypeError(f"{name}.{part} must hold floating-point numbers, got dtype {t.dtype}")
    require_same(K, V, f"{name}.K", f"{name}.V")
    if K.shape != V.shape:
        raise ValueError(f"{name}.K and {name}.V must have one shape (B, h_kv, T_past, d_head), got {tuple(K.shape)} "
                         f"and {tuple(V.shape)}")
    if like is not None:
        if K.device != like.device:
            raise ValueError(f"{name} is on {K.device} but this layer's input is on {like.device}")
        if K.dtype != like.dtype:
            raise TypeError(f"{name} has dtype {K.dtype} but this layer computes in {like.dtype}")
    return K.shape[2]


def require_caches(caches, L: int, *, B: int, h: int, d_head: int, like: torch.Tensor,
                 h_query: int | None = None) -> int:
    """One KV cache per block, all distinct and of one length; returns that length T_past.

    ``h`` is the number of key/value heads each cache holds (h_kv; ``h_query``: see :func:`require_cache`).
    """
    if not isinstance(caches, (list, tuple)):
        raise TypeError(f"caches must be a list of one KVCache per block (L={L}), got {type(caches).__name__}")
    if len(caches) != L:
        raise ValueError(f"caches must hold one KVCache per block, L={L}, got {len(caches)}")
    for l, c in enumerate(caches):
        for m in range(l):
            if caches[m] is c:
                raise ValueError(f"caches[{l}] is the same object as caches[{m}]; each block needs its own "
                                 "cache: [KVCache() for _ in model.blocks]")
    lengths = [require_cache(c, f"caches[{l}]", B=B, h=h, d_head=d_head, like=like, h_query=h_query)
               for l, c in enumerate(caches)]
    if len(set(lengths)) > 1:
        raise ValueError(f"every block's cache must hold the same positions, got lengths {lengths} for "
                         f"caches[0..{L - 1}]")
    return lengths[0]


def require_axis(dim, x: torch.Tensor, name: str) -> int:
    """An axis of ``x`` (negative counts from the end, as in torch) that holds at least one entry."""
    dim = _integer(dim, "dim", "an integer axis")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for {name} with {x.dim()} axes, shape {tuple(x.shape)} "
                         f"(expected {-x.dim()}..{x.dim() - 1})" if x.dim() else
                         f"{name} is a single number (0 axes): expected at least one axis")
    if x.shape[dim] == 0:
        raise ValueError(f"{name} has an empty axis dim={dim}, shape {tuple(x.shape)}: expected at least one entry")
    return dim


# ------------------------------------------------------------------------------ grouped-query heads (heads.py)


def require_kv_heads(h: int, h_kv) -> int:
    """h_kv key/value heads for h query heads: None means h_kv = h; else 1 ≤ h_kv ≤ h and h_kv divides h."""
    h, = require_positive(h=h)
    if h_kv is None:
        return h
    h_kv = _integer(h_kv, "h_kv", "a positive integer (or None for h_kv = h)")
    if h_kv < 1:
        raise ValueError(f"h_kv must be a positive integer (at least one key/value head), got h_kv={h_kv}")
    if h_kv > h:
        raise ValueError(f"h_kv={h_kv} key/value heads is more than the h={h} query heads: expected "
                         f"1 ≤ h_kv ≤ h")
    if h % h_kv:
        raise ValueError(f"h={h} is not divisible by h_kv={h_kv}: each key/value head serves a group of "
                         "h / h_kv query heads")
    return h_kv


# ------------------------------------------------------------------------------------------ padding and masks
# (attention.py, batches.py and model.py: batches of prompts of different lengths)


def require_is_pad(is_pad, name: str = "is_pad", *, B: int | None = None, T: int | None = None) -> torch.Tensor:
    """A boolean (B, T) tensor, True at a padding token; ``B``, ``T`` pin the sizes where given."""
    require_tensor(is_pad, name)
    if is_pad.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = padding token), got dtype {is_pad.dtype}; "
                        f"from an attention_mask with 1 = real token use attention_mask == 0")
    spec = f"(B{'' if B is None else f'={B}'}, T{'' if T is None else f'={T}'})"
    got = tuple(is_pad.shape)
    if is_pad.dim() != 2 or (B is not None and got[0] != B) or (T is not None and got[1] != T):
        raise ValueError(f"{name} must be {spec}, one flag per token, got {got}")
    if got[1] == 0:
        raise ValueError(f"{name} is an empty sequence: T must be at least 1, got shape {got}")
    return is_pad


def require_mask(mask, shape, name: str = "mask", *, like: torch.Tensor | None = None,
               free_batch: bool = False) -> torch.Tensor:
    """A boolean mask (True = may attend) that broadcasts to ``shape`` (..., T_q, T_k) without enlarging it.

    ``free_batch``: only the last two axes of ``shape`` are pinned, the mask may have any leading axes.
    ``like``: the scores' device.
    """
    require_tensor(mask, name)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
                        "a float mask M (0 / -inf) is added to the scores instead")
    shape = tuple(shape)
    if free_batch:
        shape = tuple(mask.shape[:-2]) + shape[-2:]
    try:
        fits = mask.dim() <= len(shape) and torch.broadcast_shapes(mask.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} must broadcast to {shape} (..., T_q, T_k) with axes of size 1 or equal, "
                         f"got {tuple(mask.shape)}")
    if like is not None and mask.device != like.device:
        raise ValueError(f"{name} is on {mask.device} but the scores are on {like.device}; move both to one "
                         "device")
    return mask


# ------------------------------------------------------------------------------------------ running statistics
# (tiled.py: the online softmax keeps one running max and one running sum per row of scores)


def require_row_stats(x, name: str, S: torch.Tensor, S_name: str = "S") -> torch.Tensor:
    """One number per row of ``S`` (..., n): ``x`` must be (...,) = S.shape[:-1], with S's dtype and device."""
    require_tensor(x, name)
    want = tuple(S.shape[:-1])
    if tuple(x.shape) != want:
        raise ValueError(f"{name} must hold one number per row of {S_name}, shape {want} (the shape of {S_name} "
                         f"{tuple(S.shape)} without its last axis), got {tuple(x.shape)}")
    require_same(S, x, S_name, name)
    return x


def require_positions(positions, T: int, *, batch: int | None, name: str = "positions") -> torch.Tensor:
    """Integer positions ≥ 0 of shape (T,) or (B, T) (B pinned by ``batch`` where given)."""
    require_tensor(positions, name)
    if positions.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor (torch.long), got dtype {positions.dtype}")
    got = tuple(positions.shape)
    if positions.dim() not in (1, 2) or got[-1] != T or (positions.dim() == 2 and batch not in (None, got[0])):
        B = "B" if batch is None else f"B={batch}"
        raise ValueError(f"{name} must be (T={T},) or ({B}, T={T}), one position per row of x, got {got}")
    require_readable(positions, name)
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"{name} must be integers ≥ 0, got {int(positions.min())}")
    return positions


# ------------------------------------------------------------------------------------------ values that are read
# (embedding.py, position.py, heads.py: token IDs and positions are looked at, not only computed with)


def require_readable(x: torch.Tensor, name: str) -> torch.Tensor:
    """A tensor whose values the library reads (token IDs, positions): not a ``meta`` tensor, which has none."""
    if x.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor, which holds no values to read: expected {name} on a device "
                         "such as 'cpu' or 'cuda'")
    return x


def require_weights(model, name: str = "model"):
    """A model whose weights hold values: not on the ``meta`` device, which has shapes but no numbers."""
    p = next(model.parameters(), None)
    if p is not None and p.device.type == "meta":
        raise ValueError(f"{name} is on the meta device, which holds no weights to compute with: expected a model "
                         "on a device such as 'cpu' (model.to_empty(device='cpu'), then load its weights)")
    return model


def require_positions_on(positions, T: int, device: torch.device, *, batch: int | None, name: str = "positions",
                         of: str = "x") -> torch.Tensor:
    """:func:`require_positions`, read only once they are on ``device`` (that of ``of``) or on the CPU.

    CPU positions are moved to ``device`` by the computation; positions on any other device are an error.
    """
    require_tensor(positions, name)
    if positions.device not in (device, torch.device("cpu")):
        raise ValueError(f"{name} is on {positions.device} but {of} is on {device}; use "
                         f"{name}.to({str(device)!r})")
    require_readable(positions, name)
    return require_positions(positions, T, batch=batch, name=name)


def require_attention_mask(mask, shape, *, like: torch.Tensor, causal: bool, name: str = "mask") -> torch.Tensor:
    """A boolean mask (True = may attend, as SDPA) for scores of ``shape`` (..., T_q, T_k).

    Its batch layout is explicit: it has every axis of the scores (each of size 1 or equal), e.g. (B, 1, T_q, T_k)
    or a padding mask (B, 1, 1, T_k), or only (T_q, T_k). A mask with some but not all leading axes, such as
    (B, T_q, T_k) for scores (B, h, T_q, T_k), would line up with the last axes (its B with the heads), so it is
    an error. A mask that leaves no query any key (with the causal mask, where ``causal``) is in the other
    boolean convention (True = blocked, as ``nn.MultiheadAttention`` reads it): an error too, not all-zero output.
    """
    shape = tuple(shape)
    require_tensor(mask, name)
    if mask.dtype == torch.bool and mask.dim() not in (2, len(shape)):
        raise ValueError(f"{name} must have all {len(shape)} axes of the scores {shape} (each of size 1 or equal, "
                         f"e.g. (B, 1, T_q, T_k) for one mask per sequence) or only (T_q, T_k), got "
                         f"{tuple(mask.shape)}: with {mask.dim()} axes its first axis would be read as the scores' "
                         f"axis {len(shape) - mask.dim()}, not axis 0")
    require_mask(mask, shape, name, like=like)
    if math.prod(shape) and mask.device.type != "meta":
        T_q, T_k = shape[-2:]
        causal_part = torch.ones(T_q, T_k, dtype=torch.bool, device=mask.device).tril(T_k - T_q)
        readable = mask & causal_part if causal else mask   # the causal mask's True: key j ≤ query i + T_k − T_q
        other = ~mask & causal_part if causal else ~mask    # what the other convention would read
        empty = ~readable.flatten(-2).any(-1) & other.flatten(-2).any(-1)   # per sequence (and head) of the mask
        if bool(empty.any()):
            at = "" if empty.dim() == 0 else f" (at index {tuple(empty.nonzero()[0].tolist())} of its leading axes)"
            raise ValueError(f"{name} {tuple(mask.shape)} lets no query read any key"
                             f"{' (on or before its own position)' if causal else ''} in one sequence{at}, so its "
                             "outputs would all be 0, while the inverted mask would let them read: expected True = "
                             "may attend, as F.scaled_dot_product_attention reads it; a mask with True = blocked "
                             "(nn.MultiheadAttention's convention) must be inverted, ~mask")
    return mask


def require_fits(owner: str, parameters: dict[str, int], *, what: str = "parameters", device=None) -> None:
    """Fail before allocating when parameters cannot fit in this machine's memory, naming the size that asks most.

    parameters: each size as it was given (``"vocab_size=50257"``) → the number of entries it brings (``what``:
    "parameters" of a model, "numbers" of a mask, a table or a plan). Nothing is checked where nothing is allocated
    here (the meta device, an accelerator: ``device``, else torch's default) or the memory size is unknown.
    """
    where = torch.get_default_device() if device is None else torch.device(device)
    if where.type != "cpu" or not hasattr(os, "sysconf"):
        return
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    width = torch.empty((), dtype=torch.get_default_dtype()).element_size()
    total = sum(parameters.values())
    if total * width > memory:
        name = max(parameters, key=parameters.get)
        raise MemoryError(f"{owner} asks for about {total:,} {what}, {total * width:,} bytes of "
                          f"{torch.get_default_dtype()}, more than this machine's {memory:,} bytes of memory; the "
                          f"most is for {name}: {parameters[name] * width:,} bytes")
