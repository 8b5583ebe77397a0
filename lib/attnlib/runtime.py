"""Notebook set-up: seeds, deterministic CPU threads, print options and the device choice."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._validate import check_device, check_nonnegative

__all__ = ["setup", "pick_device", "seed_everything", "show_source"]


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
        return check_device(forced, "ATTNLIB_DEVICE")
    found = accelerators()
    return torch.device(next((kind for kind in ("cuda", "mps") if found[kind]), "cpu"))


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch so a notebook prints the same numbers on every run."""
    seed, = check_nonnegative(seed=seed)
    if seed >= 2**32:
        raise ValueError(f"seed must be below 2**32 (NumPy's limit), got {seed}")
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


def show_source(obj):
    """Display the library's own source of ``obj`` as a highlighted code block (never a pasted copy)."""
    import inspect

    from IPython.display import Markdown

    return Markdown(f"```python\n{inspect.getsource(obj).rstrip()}\n```")
