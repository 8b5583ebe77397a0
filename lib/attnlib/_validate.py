"""Input checks at the library's boundary.

Every public function calls these first, so a wrong input fails with a message that names what was
expected and what came, e.g. ``x must be (B, T, d_model=64), got (2, 7, 32)``, instead of a deep torch
traceback.
"""

from __future__ import annotations

import torch

__all__ = ["check_tensor", "check_shape", "check_same", "check_divisible", "check_positive"]


def check_tensor(x, name: str) -> torch.Tensor:
    """Raise TypeError unless ``x`` is a torch.Tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_shape(x, name: str, dims: str, *, float_only: bool = True, **sizes: int) -> dict[str, int]:
    """Check ``x`` against a shape spec and return the named sizes.

    ``dims`` names the axes, e.g. ``"B T d_model"``; a leading ``"..."`` allows any number of extra leading
    axes. Keyword arguments pin sizes: ``check_shape(x, "x", "B T d_model", d_model=64)``.
    An axis that appears twice must have the same size both times.
    """
    check_tensor(x, name)
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
    if "T" in found and found["T"] == 0:
        raise ValueError(f"{name} is an empty sequence: T must be at least 1, got shape {got}")
    if float_only and not x.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {x.dtype}")
    return found


def check_same(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise if two tensors that are combined live on different devices or have different dtypes."""
    if a.device != b.device:
        raise ValueError(f"{name_a} is on {a.device} but {name_b} is on {b.device}; move both to one device")
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {a.dtype} but {name_b} has dtype {b.dtype}; use one dtype")


def check_divisible(d_model: int, h: int) -> int:
    """Return d_head = d_model // h, or raise if h does not divide d_model."""
    check_positive(h=h, d_model=d_model)
    if d_model % h:
        raise ValueError(f"d_model={d_model} is not divisible by h={h}: each head needs d_model/h dimensions")
    return d_model // h


def check_positive(**values: int) -> None:
    """Raise ValueError unless every named size is a positive int."""
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
