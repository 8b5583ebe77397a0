"""Pictures used by every chapter. Attention tables always put queries on rows and keys on columns."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes

from ._validate import require_flags, require_labels, require_number, require_positive, require_readable
from .text import labels

__all__ = ["attention_heatmap", "mask_picture", "heads_grid", "labels", "PIPELINE", "pipeline_figure", "save_pipeline"]


def _table(W, name: str, dims: str) -> np.ndarray:
    """A tensor or array of real numbers with the axes ``dims`` (e.g. "(T, T)"), as a float NumPy array."""
    if isinstance(W, torch.Tensor):
        if W.dtype == torch.bool or W.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {W.dtype}")
        require_readable(W, name)   # a meta tensor holds no values to draw
        W = W.detach().cpu().float().numpy()
    else:
        try:
            W = np.asarray(W, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a tensor or array of numbers, got {type(W).__name__}") from None
    want = dims.count(",") + 1
    if W.ndim != want or 0 in W.shape:
        raise ValueError(f"{name} must be a {dims} table with at least one entry per axis, got shape {W.shape}")
    return W


def _require_ax(ax):
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes (e.g. from plt.subplots()) or None, got {type(ax).__name__}")
    return ax


def _token_axes(ax, tokens: list[str], xlabel: str, ylabel: str) -> None:
    """Label columns with the keys and rows with the queries, as "position:token"."""
    names = [f"{k}:{t}" for k, t in enumerate(labels(tokens))]
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def attention_heatmap(P, tokens: list[str], ax=None, title: str | None = None, annotate: bool = True,
                      vmin: float = 0.0, vmax: float = 1.0, cmap: str = "Blues"):
    """Draw a (T, T) weight table P: row i = query position i, column j = key position j.
    For signed tables (raw scores) pass a diverging cmap such as "RdBu" with vmin = −vmax."""
    P = _table(P, "P", "(T, T)")
    if P.shape[0] != P.shape[1]:
        raise ValueError(f"P must be a square (T, T) table, got shape {P.shape}")
    tokens = require_labels(tokens, P.shape[0])
    annotate, = require_flags(annotate=annotate)
    vmin, vmax = require_number(vmin, "vmin"), require_number(vmax, "vmax")
    if vmin >= vmax:
        raise ValueError(f"vmin must be below vmax, got vmin={vmin} and vmax={vmax}")
    ax = _require_ax(ax) or plt.subplots(figsize=(0.55 * len(tokens) + 2.2, 0.5 * len(tokens) + 1.6))[1]
    im = ax.imshow(P, cmap=cmap, vmin=vmin, vmax=vmax)
    _token_axes(ax, tokens, "key position j (attended to)", "query position i (attending)")
    if annotate and len(tokens) <= 12:
        for i in range(P.shape[0]):
            for j in range(P.shape[1]):
                ax.text(j, i, f"{P[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if P[i, j] > 0.6 * vmax or P[i, j] < min(0.6 * vmin, 0) else "black")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def mask_picture(M, tokens: list[str], ax=None, title: str = "causal mask M"):
    """Draw a (T, T) mask: white 0 where query i may read key j, grey −∞ where key j is in i's future."""
    M = _table(M, "M", "(T, T)")
    if M.shape[0] != M.shape[1]:
        raise ValueError(f"M must be a square (T, T) mask, got shape {M.shape}")
    tokens = require_labels(tokens, M.shape[0])
    ax = _require_ax(ax) or plt.subplots(figsize=(0.55 * len(tokens) + 1.6, 0.5 * len(tokens) + 1.4))[1]
    blocked = np.isneginf(M)
    ax.imshow(blocked, cmap="Greys", vmin=0, vmax=2.5)   # a light grey: black "−∞" on it reads at 10:1
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            ax.text(j, i, "−∞" if blocked[i, j] else f"{M[i, j]:g}", ha="center", va="center", fontsize=8)
    _token_axes(ax, tokens, "key position j", "query position i")
    ax.set_title(title)
    return ax


def heads_grid(P, tokens: list[str], title: str = "", cols: int = 4):
    """One heatmap per head for weights P (h, T, T); returns the figure."""
    P = _table(P, "P", "(h, T, T)")
    if P.shape[1] != P.shape[2]:
        raise ValueError(f"P must be (h, T, T) with square tables, got shape {P.shape}")
    tokens = require_labels(tokens, P.shape[1])
    cols, = require_positive(cols=cols)
    h = P.shape[0]
    cols = min(cols, h)
    rows = -(-h // cols)
    size = 0.32 * len(tokens) + 1.2
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size, rows * size), squeeze=False)
    names = labels(tokens)
    for k, ax in enumerate(axes.flat):
        if k >= h:
            ax.axis("off")
            continue
        ax.imshow(P[k], cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"head {k}", fontsize=9)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
    fig.supxlabel("key position j")
    fig.supylabel("query position i")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# The path of the course: (chapter, step, shape of its output). One sequence of T tokens, one head shown.
PIPELINE = [
    (1, "text → token IDs", "T"),
    (1, "embedding lookup + position:  X₀", "T × d_model"),
    (7, "LayerNorm of each token:  LN₁(X)", "T × d_model"),
    (2, "Q, K, V = LN₁(X) times W_Q, W_K, W_V", "T × d_k  (V: T × d_v)"),
    (3, "scores  S = Q Kᵀ", "T × T"),
    (3, "scale  Z = S / √d_k", "T × T"),
    (4, "add the causal mask  M", "T × T"),
    (5, "softmax over each row:  P", "T × T"),
    (5, "weighted sum  P V", "T × d_v"),
    (6, "h heads concatenated, then W_O", "T × d_model"),
    (7, "residual  H = Xₗ₋₁ + A,  A: attention", "T × d_model"),
    (7, "residual  Xₗ = H + F,  F = MLP(LN₂(H))", "T × d_model"),
    (8, "repeat for L blocks:  X_L", "T × d_model"),
    (8, "final LayerNorm, output head: logits", "T × vocab_size"),
]


def pipeline_figure():
    """The whole path as one picture: a box per step, the shape of the data on every arrow."""
    fig, ax = plt.subplots(figsize=(7.2, 0.62 * len(PIPELINE) + 0.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.8, len(PIPELINE) - 0.2)
    ax.invert_yaxis()
    ax.axis("off")
    colours = plt.get_cmap("tab10")
    for row, (chapter, step, shape) in enumerate(PIPELINE):
        colour = colours(chapter - 1)
        ax.add_patch(plt.Rectangle((1.1, row - 0.3), 5.2, 0.6, facecolor=colour, alpha=0.18, edgecolor=colour))
        ax.text(0.55, row, f"ch. {chapter}", ha="center", va="center", fontsize=9, color=colour, weight="bold")
        ax.text(1.3, row, step, ha="left", va="center", fontsize=10)
        if row < len(PIPELINE) - 1:
            ax.annotate("", xy=(3.7, row + 0.72), xytext=(3.7, row + 0.3),
                        arrowprops={"arrowstyle": "->", "color": "0.3"})
        ax.text(6.6, row, shape, ha="left", va="center", fontsize=10, family="monospace", color="0.15")
    ax.text(6.6, -0.65, "shape of the output", ha="left", fontsize=9, style="italic", color="0.35")
    ax.text(1.3, -0.65, "step", ha="left", fontsize=9, style="italic", color="0.35")
    fig.tight_layout()
    return fig


def save_pipeline(path: str = "book/images/pipeline.svg") -> None:
    """Write the intro's figure as an SVG with real text (searchable, sharp) and no timestamp."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file name ending in .svg, got {path!r} ({type(path).__name__})")
    if not str(path).endswith(".svg"):
        raise ValueError(f"path must be a file name ending in .svg, got {str(path)!r}")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"path must be in an existing folder, got {str(path)!r} (no folder {folder!r})")
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "attnlib"}):
        fig = pipeline_figure()
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)
