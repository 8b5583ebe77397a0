"""Notebook set-up: seeds, deterministic CPU threads, print options and the device choice; the agreements a
page prints. (What a page shows of the library's source is :mod:`attnlib.display`.)"""

from __future__ import annotations

import math
import numbers
import os
import random
import warnings

import numpy as np
import torch

from ._validate import _show, boundary, require_device, require_nonnegative, require_number

__all__ = ["setup", "pick_device", "seed_everything", "agree", "at_most", "bound_text"]


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _seed_args(seed):
    seed, = require_nonnegative(seed=seed)     # an integer: a float seed is rejected, not truncated
    if seed >= 2**32:
        raise ValueError(f"seed must be below 2**32 (NumPy's limit), got {seed}")
    return {"seed": seed}


def accelerators() -> dict[str, bool]:
    """Which accelerators torch can use here: ``{"cuda": …, "mps": …}``.

    The one place that asks torch; tests replace this function, never torch's own probes.
    """
    mps = getattr(torch.backends, "mps", None)
    return {"cuda": torch.cuda.is_available(), "mps": mps is not None and mps.is_available()}


def pick_device() -> torch.device:
    """The best device here: cuda, else mps, else cpu. ``ATTNLIB_DEVICE`` overrides the choice."""
    forced = os.environ.get("ATTNLIB_DEVICE")
    if forced:
        return require_device(forced, "ATTNLIB_DEVICE")
    found = accelerators()
    return torch.device(next((kind for kind in ("cuda", "mps") if found[kind]), "cpu"))


@boundary(_seed_args)
def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch so a notebook prints the same numbers on every run.

    ``seed``: an integer in 0 … 2**32 − 1 (a float such as 1.5 is an error, never cut to 1).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0) -> torch.device:
    """Call once at the top of every chapter. Returns the device to use.

    One CPU thread makes reductions run in a fixed order, so printed numbers do not change between runs
    or machines; the models in this course are small enough that it costs little.
    """
    seed_everything(seed)
    torch.set_num_threads(1)
    # transformers' progress bars (tqdm.auto) warn in a notebook without ipywidgets; the pages draw none
    warnings.filterwarnings("ignore", message="IProgress not found")
    device = pick_device()
    if device.type != "cpu":
        # Accelerator kernels may pick non-deterministic algorithms; ask for deterministic ones (a warning where
        # there are none). On the CPU one thread already fixes the order, and this call would cost two seconds
        # of imports (torch._inductor) in every notebook.
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    try:
        import matplotlib as mpl

        mpl.rcParams.update({
            # An opaque white card reads well on both the light and the dark theme of the book.
            "figure.facecolor": "white", "savefig.facecolor": "white", "axes.facecolor": "white",
            "figure.dpi": 100, "figure.figsize": (6.0, 4.0), "font.size": 10,
            "axes.grid": False, "image.cmap": "viridis",
        })
    except ImportError:  # plots are optional for library users
        pass
    return device


def _bound(bound, name: str = "bound") -> float:
    """A bound > 0 as a float; a NumPy float32 bound is read as the digits it prints (np.float32(1e-3) is 0.001)."""
    if isinstance(bound, np.floating) and not isinstance(bound, float):
        bound = float(str(bound)) if np.isfinite(bound) else float(bound)
    ok = isinstance(bound, numbers.Real) and not isinstance(bound, (bool, np.bool_)) and bound > 0
    if not (ok and math.isfinite(bound)):
        raise ValueError(f"{name} must be a positive number, got {_show(bound)}")
    return float(bound)


def bound_text(bound: float) -> str:
    """A bound as the page prints it: ``1e-12``, ``2.5e-6``, ``0.0005``, ``0.001``: its shortest exact digits
    (``repr``'s, which read back as the same float), so the printed bound is never below the bound itself."""
    bound = _bound(bound)
    mantissa, _, exponent = repr(bound).partition("e")
    mantissa = mantissa.removesuffix(".0")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def _as_array(x, name: str) -> np.ndarray:
    """A tensor, array, number or nested list as a NumPy array on the CPU (complex kept complex)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta tensor, which holds no values to compare: expected {name} on a "
                             "device such as 'cpu' or 'cuda'")
        x = x.detach().cpu()
        x = x.resolve_conj().resolve_neg().numpy() if x.dtype != torch.bfloat16 else x.float().numpy()
    try:
        a = np.asarray(x)
    except (TypeError, ValueError):
        a = None
    if a is None or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise TypeError(f"{name} must be a tensor, an array or a number, got {_show(x)}")
    return a


def _max_gap(a, b) -> float:
    """max |a − b| over every element, in float64 (complex128 if either is complex) on the CPU; tensors, arrays or
    numbers of one shape."""
    a, b = _as_array(a, "a"), _as_array(b, "b")
    kind = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    a, b = (torch.as_tensor(x.astype(kind)) for x in (a, b))
    if a.shape != b.shape:
        raise ValueError(f"cannot compare shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.numel() == 0:
        return 0.0
    both_inf = torch.isinf(a) & (a == b)           # −∞ against −∞ (a mask) agrees exactly
    gap = (a - b).abs().masked_fill(both_inf, 0.0)
    return float(gap.nan_to_num(nan=float("inf")).max())


def at_most(value: float, bound: float, what: str = "") -> str:
    """Assert that a measured error ``value`` is at most ``bound``; return the sentence a page prints.

    The page prints the bound, never the measured digits: those belong to one processor, one BLAS build and one
    kernel path, and another machine would print other ones.
    """
    bound = _bound(bound)
    text, what = bound_text(bound), _require_what(what)
    value = require_number(value, "value", minimum=0) if not _is_nan(value) else float("nan")
    if not value <= bound:   # also catches NaN
        raise AssertionError(f"{what or 'the error'}: {value:.3g} is above the bound {text}")
    return f"{what}: within {text}" if what else f"within {text}"


def _is_nan(v) -> bool:
    return isinstance(v, (float, np.floating)) and v != v


def _require_what(what) -> str:
    if not isinstance(what, str):
        raise TypeError(f"what must be a string (what the page says agrees), got {_show(what)}")
    return what


def agree(a, b, *, within: float, what: str = "") -> str:
    """Assert max |a − b| ≤ ``within`` and return ``"<what>: equal within <bound>"``, the way every chapter says it.

    a, b: tensors, arrays or numbers of the same shape (compared in float64; equal infinities agree).
    """
    within = _bound(within, "within")
    text, what = bound_text(within), _require_what(what)
    gap = _max_gap(a, b)
    if not gap <= within:
        raise AssertionError(f"{what or 'the two'} differ by {gap:.3g}, more than {text}")
    return f"{what}: equal within {text}" if what else f"equal within {text}"
