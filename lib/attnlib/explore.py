"""Interactive attention figures for the rendered book, JupyterLab and Colab, with no download at all.

``explore(S, tokens, d_k)`` returns a figure that a notebook displays as one self-contained piece of HTML:
the raw scores S = Q Kᵀ (rounded to 4 decimals) and the figure's words (:data:`WORDS`) as JSON in a
``<script type="application/json">``, the style, and one script made of the small modules in ``attnlib/js/``
(:data:`MODULES`: helpers, layout, painting, the table, focus and keys, the view that joins them, the figure, the
start), which finds its own container through ``document.currentScript``. In the browser that code computes

    P = softmax(S / (√d_k · τ) + M)        (√d_k and M only where switched on, τ the temperature)

from the stored numbers, draws P with queries on rows and keys on columns, and draws lines from a query
token to every key it reads, as strong as the weight. :meth:`AttentionExplorer.weights` computes the same P in
Python from the same stored numbers, with the library's ``scale``, ``causal_mask`` and ``softmax``.

The HTML is the same bytes on every call: no element ids, no random names, no time stamps. Where scripts do
not run (a notebook that is not trusted), a sentence stays in their place saying how to bring the figure to life.

Every reader can use it. Beside the pictures, the HTML holds (before any script runs):

- a readout (``role="status"``, ``aria-live="polite"``) that names the query token, the key token and the weight
  of the cell under the pointer or the keyboard focus, so that a screen reader announces it;
- help text for both kinds of device, ``.ax-help-hover`` ("Hover … or use the arrow keys") and
  ``.ax-help-touch`` ("Tap …"); the stylesheet shows the one that fits through ``@media (hover: …)``;
- the weights as a table inside a ``<details>`` the reader can open, to 3 decimals as the readout shows them,
  computed by :meth:`AttentionExplorer.weights` (float64) for what the figure shows first; the script rewrites
  it when a control changes.

The script draws the heatmap as an ARIA grid (rows of gridcells; one tab stop, ``tabindex`` roving: the arrow
keys move between cells, Home/End go to the row's ends, Ctrl+Home/End to the table's corners, Enter or Space
picks the row's query) and the query tokens as a listbox (one tab stop; the arrow keys pick a query). Each
picture carries a label that says what it shows ("attention weights of block 0 head 1 over 16 tokens"). The
heatmap scales down to its card; on a narrow card the readout sits directly under the heatmap and stays on
screen (sticky) while the reader taps the tokens below. All text in the figure meets a 4.5:1 contrast: a cell's
number is black or white, whichever contrasts more with that cell (never below 4.58:1 on any colour).
"""

from __future__ import annotations

import copy
import html
import json
import re
from functools import cache
from importlib import resources

import numpy as np
import torch

from ._validate import (
    _show,
    boundary,
    require_choice,
    require_flags,
    require_ids,
    require_labels,
    require_nonnegative,
    require_number,
    require_positive,
    require_tensor,
)
from .attention import causal_mask, scale, scores, softmax
from .heads import repeat_kv
from .text import labels

__all__ = ["AttentionExplorer", "explore", "model_scores", "CONTROLS", "MAX_T", "MAX_NUMBERS", "WORDS"]

CONTROLS = ("scale", "mask", "temperature")   # switches a figure may offer; layer and head menus come by themselves
MAX_T = 64                                    # tokens per axis
MAX_NUMBERS = 20_000                          # stored scores per figure (L·h·T·T), to keep pages light
TEMPERATURE_RANGE = (0.1, 4.0, 0.1)           # the slider: smallest τ, largest τ, step

# Every word the figures show, in one place: the page's markup takes them from here, and the script receives
# them with the figure's data (data.words), filling in the {names}. live.py adds its own (LIVE_WORDS).
WORDS = {
    "figure": "interactive attention figure", "liveFigure": "live model",
    "label": "attention weights{which} over {T} tokens",
    "ofLayer": " of {layerLabel} {layer} head {head}", "ofHead": " of head {head}", "head": "head",
    "scaled": "divided by \u221ad_k", "unscaled": "not divided by \u221ad_k",
    "maskOn": "causal mask on", "maskOff": "causal mask off", "temperature": "temperature \u03c4 = {tau}",
    "rows": ". Rows: queries i; columns: keys j; 3 decimals", "masked": "; \u2014: a future key, masked (weight 0).",
    "corner": "query \\ key", "query": "query {name}", "key": "key {name}",
    "reads": "query {q} reads {n} keys; largest weight {w} on key {k}",
    "maskedCell": "query {q} \u2192 key {k}: masked (a future key), weight 0",
    "cell": "query {q} \u2192 key {k}: weight {w}",
    "tokens": "query tokens; lines from query {q} to the keys it reads, as strong as the weight",
    "scaleSwitch": "divide by \u221ad_k (d_k = {d_k})", "maskSwitch": "causal mask M",
    "tauSlider": "temperature \u03c4 ",
}
# Words only the page's markup shows (the script never needs them, so they stay out of its data).
PAGE_WORDS = {
    "summary": "The weights as a table",
    "fallback": "Interactive attention figure ({sizes}T = {T} tokens){title}: a heatmap of the attention weights, "
                "queries in rows and keys in columns, that changes as you pick a head or flip a switch. It needs "
                "scripts: run this cell or trust the notebook to explore it. The table below holds every weight "
                "shown first.",
    "hover": "Rows: queries i; columns: keys j. Hover a cell to read its weight, or a query token (the list beside "
             "the heatmap) to draw the keys it reads. From the keyboard: Tab to the heatmap, move with the arrow "
             "keys (Home/End: the row's ends), Enter picks the row's query.",
    "touch": "Rows: queries i; columns: keys j. Tap a cell to read its weight, or a query token (the list under the "
             "heatmap) to draw the keys it reads. Every weight is in the table below.",
}
# The script's modules, in the order they are inlined: each adds its part to one registry (kit) local to the
# script; start runs last. MODULES for a figure of stored scores, live.py's LIVE_MODULES for the live model.
VIEW_MODULES = ("core", "layout", "paint", "table", "keys", "view")
MODULES = VIEW_MODULES + ("stored", "start")


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _layer_head(layer, head, L: int, h: int, of: str = "") -> dict:
    layer, head = require_nonnegative(layer=layer, head=head)
    if layer >= L or head >= h:
        raise ValueError(f"layer must be in 0..{L - 1} and head in 0..{h - 1}{of}, got layer={layer}, head={head}")
    return {"layer": layer, "head": head}


def _weights_args(self, layer, head, scaled, causal, temperature):
    scaled, causal = require_flags(scaled=scaled, causal=causal)
    return {**_layer_head(layer, head, self._data["L"], self._data["h"]), "scaled": scaled, "causal": causal,
            "temperature": require_number(temperature, "temperature", above=0)}


_EXPLORER_KEYS = ("tokens", "labels", "d_k", "L", "h", "T", "S", "controls", "state", "words")


def _explorer_args(self, data):
    """The payload :func:`explore` builds (the figure is made by explore, not by hand)."""
    if not isinstance(data, dict):
        raise TypeError(f"data must be the payload explore() builds (a dict), got {_show(data)}; make the figure "
                        "with explore(S, tokens, d_k)")
    missing = [k for k in _EXPLORER_KEYS if k not in data]
    if missing:
        raise ValueError(f"data must hold the keys explore() writes, {list(_EXPLORER_KEYS)}, got keys "
                         f"{sorted(data)[:12]} (missing {missing}); make the figure with explore(S, tokens, d_k)")


def _explore_args(S, tokens, d_k, title, controls, scaled, causal, temperature, layer, head, query, layer_label):
    """S raw scores of a square table (checked, not converted: the body converts it), controls as a set, query as a
    position (T − 1 for None)."""
    S = _scores_table(S)
    L, h, T = S.shape[0], S.shape[1], S.shape[2]
    if T > MAX_T:
        raise ValueError(f"T must be at most {MAX_T} tokens for a readable figure, got T={T}")
    if S.numel() > MAX_NUMBERS:
        raise ValueError(f"S must hold at most {MAX_NUMBERS} scores (L·h·T·T) to keep the page light, got "
                         f"{S.numel()} for shape (L={L}, h={h}, T={T}, T={T}); show fewer tokens or heads")
    tokens = require_labels(tokens, T)
    d_k, = require_positive(d_k=d_k)
    if isinstance(controls, str) or not isinstance(controls, (list, tuple, set, frozenset)):
        raise TypeError(f"controls must be a tuple of names from {CONTROLS}, got {controls!r} "
                        f"({type(controls).__name__})")
    chosen = {require_choice(c, "each control", CONTROLS) for c in controls}
    scaled, causal = require_flags(scaled=scaled, causal=causal)
    lo, hi, _ = TEMPERATURE_RANGE
    temperature = require_number(temperature, "temperature", above=0)
    if not lo <= temperature <= hi:
        raise ValueError(f"temperature must be between {lo} and {hi} (the slider's range), got {temperature}")
    where = _layer_head(layer, head, L, h, f" for S of shape (L={L}, h={h}, T, T)")
    query = T - 1 if query is None else require_nonnegative(query=query)[0]
    if query >= T:
        raise ValueError(f"query must be a position in 0..{T - 1}, got {query}")
    if not isinstance(title, str) or not isinstance(layer_label, str):
        bad = "title" if not isinstance(title, str) else "layer_label"
        raise TypeError(f"{bad} must be a string, got {type(title if bad == 'title' else layer_label).__name__}")
    return {"tokens": tokens, "d_k": d_k, "controls": chosen, "scaled": scaled, "causal": causal,
            "temperature": temperature, **where, "query": query}


def _model_scores_args(model, ids):
    """A Pre-Norm GPT and one sequence of its token IDs, (T,) or (1, T) → (1, T), on any device but meta."""
    from .model import GPT

    if not isinstance(model, GPT):
        raise TypeError(f"model must be an attnlib GPT, got {type(model).__name__}")
    if model.config.norm != "pre":
        raise ValueError(f"model must be Pre-Norm (norm='pre') so that block l's Q and K come from ln_1(X_l), "
                         f"got norm={model.config.norm!r}")
    require_tensor(ids, "ids")
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"ids must be one sequence, (T,) or (1, T), got shape {tuple(ids.shape)}")
    if ids.device.type == "meta":
        raise ValueError("ids are on the meta device, which hold no values: expected token IDs on a device such "
                         "as 'cpu' or 'cuda' (they are copied to the CPU)")
    require_ids(ids, model.config.vocab_size)      # here: the model's own check is skipped inside this call
    if ids.shape[1] > model.config.max_T:
        raise ValueError(f"ids hold T={ids.shape[1]} tokens, more than the model's max_T={model.config.max_T}")
    return {"ids": ids}


@cache
def _asset(name: str) -> str:
    """A file shipped with the package (js/*.js, explore.css), read once, as it is inlined into a page.

    Indentation, blank lines, whole-line ``//`` comments, one-line JSDoc types (``/** @type {…} */``, for the
    type check) and a ``//`` comment after a line's code (where the code ends in ``;``, ``{``, ``}``, ``,`` or
    ``)``) are left out (a third of the bytes); the first file's opening comment stays, so that the page says what
    the code is.
    """
    text = resources.files("attnlib").joinpath(name).read_text(encoding="utf-8")
    lines = (re.sub(r"([;{},)])\s+//.*$", r"\1", line.strip()) for line in text.splitlines())
    return "\n".join(line for line in lines
                     if line and not line.startswith("//") and not (line.startswith("/**") and line.endswith("*/")))


def _scores_table(S) -> torch.Tensor:
    """Raw scores (T, T), (h, T, T) or (L, h, T, T) as a float64 (L, h, T, T) tensor on the CPU."""
    if isinstance(S, torch.Tensor):
        if S.dtype == torch.bool or S.is_complex() or not (S.is_floating_point() or S.dtype in (torch.int64,
                                                                                                  torch.int32)):
            raise TypeError(f"S must hold real numbers, got dtype {S.dtype}")
        if S.device.type == "meta":
            raise ValueError("S is on the meta device, which holds no values: expected raw scores on a device "
                             "such as 'cpu' or 'cuda' (they are copied to the CPU)")
        S = S.detach().to("cpu", torch.float64)
    elif isinstance(S, np.ndarray):
        if not (np.issubdtype(S.dtype, np.floating) or np.issubdtype(S.dtype, np.integer)):
            raise TypeError(f"S must hold real numbers, got dtype {S.dtype}")
        S = torch.from_numpy(S.astype(np.float64))
    else:
        raise TypeError(f"S must be a torch.Tensor or NumPy array of raw scores Q Kᵀ, got {type(S).__name__}")
    if S.dim() not in (2, 3, 4) or 0 in S.shape or S.shape[-1] != S.shape[-2]:
        raise ValueError(f"S must be raw scores (T, T), (h, T, T) or (L, h, T, T) with square T × T tables, "
                         f"got shape {tuple(S.shape)}")
    if not bool(torch.isfinite(S).all()):
        raise ValueError("S must hold finite raw scores Q Kᵀ (the mask is applied by the figure), "
                         "got inf or NaN")
    while S.dim() < 4:
        S = S[None]
    return S


@cache
def _script(modules: tuple[str, ...]) -> str:
    """One inline script from the modules in ``attnlib/js/``, in this order, sharing one local registry (kit)."""
    body = "\n".join(_asset(f"js/{m}.js") for m in modules)
    return f'(function (script) {{\n"use strict";\nvar kit = {{}};\n{body}\n}})(document.currentScript);'


def _round(S: torch.Tensor) -> list:
    """Nested lists of the scores rounded to 4 decimals, with −0.0 written as 0.0 (the same text every time)."""
    return (torch.round(S, decimals=4) + 0.0).tolist()


def _json_for_html(data: dict) -> str:
    """JSON that can sit inside <script> in any HTML page: ASCII only, and no '<', '>' or '&' left in it."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Figure:
    """A figure that is one piece of HTML holding its data as JSON: a notebook displays it as that HTML.

    Its HTML is drawn from its data (the words the script uses among them) and from ``page_words``, the words only
    the markup shows, so :func:`redrawn` can draw a stored figure again with its words translated."""

    page_words = PAGE_WORDS
    kinds: dict = {}    # data["kind"] -> class, for redrawn (the explorer has no kind; live.py adds "live")

    def __init__(self, data: dict):
        self._data = data
        self._json = _json_for_html(data)

    @property
    def data(self) -> dict:
        """The payload the figure's code reads, parsed back from the JSON in the HTML (a fresh copy)."""
        return json.loads(self._json)

    @property
    def html(self) -> str:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes this figure adds to a page (UTF-8)."""
        return len(self.html.encode("utf-8"))

    def _repr_html_(self) -> str:
        return self.html


def _table_box(label: str, table: str, page_words: dict) -> str:
    """The text alternative's box: the summary the reader opens, and a scroll region named ``label``."""
    return (f'<details class="ax-table"><summary>{page_words["summary"]}</summary>'
            f'<div class="ax-table-scroll" role="region" tabindex="0" aria-label="{html.escape(label)}">'
            f"{table}</div></details>")


class AttentionExplorer(_Figure):
    """An interactive attention figure: see :func:`explore`. Displays itself as HTML in a notebook."""

    @boundary(_explorer_args)
    def __init__(self, data: dict):
        super().__init__(data)

    @property
    def scores(self) -> torch.Tensor:
        """The raw scores S = Q Kᵀ exactly as stored in the page: float64 (L, h, T, T), 4 decimals."""
        return torch.tensor(self.data["S"], dtype=torch.float64)

    @property
    def d_k(self) -> int:
        return self._data["d_k"]

    @boundary(_weights_args)
    def weights(self, layer: int = 0, head: int = 0, *, scaled: bool = True, causal: bool = True,
                temperature: float = 1.0) -> torch.Tensor:
        """P (T, T) = softmax(S / (√d_k · τ) + M) from the stored scores, as the figure computes it.

        Uses the library's ``scale``, ``causal_mask`` and ``softmax`` on the numbers written into the page.
        """
        S = self.scores[layer, head]                         # (T, T)
        if scaled:
            S = scale(S, self.d_k)
        S = S / temperature
        if causal:
            S = S + causal_mask(S.shape[-1], dtype=S.dtype)
        return softmax(S)

    # ----------------------------------------------------------------------------------------- how it shows
    @property
    def html(self) -> str:
        """The whole figure: fallback sentence, style, readout, help, weights table, data and code; no id, no URL."""
        d = self._data
        sizes = f"{d['L']} blocks × {d['h']} heads, " if d["L"] > 1 else (f"{d['h']} heads, " if d["h"] > 1 else "")
        fallback = self.page_words["fallback"].format(sizes=sizes, T=d["T"],
                                                      title=f", {d['title']}" if d["title"] else "")
        return (
            '<div class="attnlib-explore">'
            f'<p class="ax-fallback">{html.escape(fallback)}</p>'
            f"<style>{_asset('explore.css')}</style>"
            '<div class="ax-readout" role="status" aria-live="polite" aria-atomic="true"></div>'
            f"{_help_html(self.page_words)}"
            f"{self._table_html()}"
            f'<script type="application/json" class="ax-data">{self._json}</script>'
            f"<script>{_script(MODULES)}</script>"
            "</div>"
        )

    @property
    def label(self) -> str:
        """What the heatmap shows first, as its label says: "attention weights of block 0 head 1 over 16 tokens"."""
        d = self._data
        return _label(d["words"], d["L"], d["h"], d["T"], d["state"]["layer"], d["state"]["head"], d["layerLabel"])

    def table(self) -> list[list[str]]:
        """The text alternative's numbers, as the page writes them: T rows of T strings, 3 decimals, "—" masked."""
        d, st = self._data, self._data["state"]
        P = self.weights(st["layer"], st["head"], scaled=st["scaled"], causal=st["causal"],
                         temperature=st["temperature"]).tolist()
        T = d["T"]
        return [["\u2014" if st["causal"] and j > i else f"{P[i][j]:.3f}" for j in range(T)] for i in range(T)]

    def _table_html(self) -> str:
        d, st = self._data, self._data["state"]
        names = [f"{t}:{lab}" for t, lab in enumerate(d["labels"])]
        cells = self.table()
        head = "".join(f'<th scope="col">{html.escape(n)}</th>' for n in names)
        body = "".join(
            f'<tr><th scope="row">{html.escape(names[i])}</th>' + "".join(f"<td>{v}</td>" for v in row) + "</tr>"
            for i, row in enumerate(cells))
        caption = _caption(d["words"], self.label, d["controls"], st)
        corner = html.escape(d["words"]["corner"])
        return _table_box(self.label, f"<table><caption>{html.escape(caption)}</caption>"
                                      f'<thead><tr><th scope="col">{corner}</th>{head}</tr></thead>'
                                      f"<tbody>{body}</tbody></table>", self.page_words)

    def __repr__(self) -> str:
        d = self._data
        what = f"L={d['L']}, h={d['h']}, T={d['T']}, d_k={d['d_k']}"
        switches = [c for c in CONTROLS if d["controls"][c]]
        extra = f", controls: {', '.join(switches)}" if switches else ""
        return f"<interactive attention figure: {what}{extra}>"


_Figure.kinds[None] = AttentionExplorer


def _help_html(page_words: dict) -> str:
    """Help for both kinds of device; the stylesheet shows the one that fits (``@media (hover: …)``)."""
    return ('<p class="ax-help">'
            f'<span class="ax-help-hover">{html.escape(page_words["hover"])}</span>'
            f'<span class="ax-help-touch">{html.escape(page_words["touch"])}</span>'
            "</p>")


def _label(words: dict, L: int, h: int, T: int, layer: int, head: int, layer_label: str) -> str:
    """The heatmap's label, from the figure's words (the script fills in the same words when the head changes)."""
    which = (words["ofLayer"].format(layerLabel=layer_label, layer=layer + 1, head=head) if L > 1 else   # blocks 1 … L
             (words["ofHead"].format(head=head) if h > 1 else ""))
    return words["label"].format(which=which, T=T)


def _caption(words: dict, label: str, controls: dict, st: dict) -> str:
    """The table's caption: what it shows, with the switches' settings (the script writes it from the same words)."""
    parts = [label]
    if controls["scale"]:
        parts.append(words["scaled"] if st["scaled"] else words["unscaled"])
    if controls["mask"]:
        parts.append(words["maskOn"] if st["causal"] else words["maskOff"])
    if controls["temperature"]:
        parts.append(words["temperature"].format(tau=f"{st['temperature']:.2f}"))
    return ", ".join(parts) + words["rows"] + (words["masked"] if st["causal"] else ".")


DATA = re.compile(r'<script type="application/json" class="ax-data">(.*?)</script>', re.S)


def redrawn(stored_html: str, tr) -> str:
    """A stored figure's HTML drawn again from the data it holds, every word passed through ``tr`` (English ->
    a translation): the script's words, the title, the menu's word for a layer, and the words of the markup.
    ``tr`` = the identity gives the stored HTML back."""
    data = json.loads(DATA.search(stored_html).group(1))
    data["words"] = {k: tr(v) for k, v in data["words"].items()}
    data["title"] = tr(data["title"]) if data["title"] else ""
    if "layerLabel" in data:
        data["layerLabel"] = tr(data["layerLabel"])
    cls = _Figure.kinds[data.get("kind")]
    figure = cls.__new__(cls)
    _Figure.__init__(figure, data)
    figure.page_words = {k: tr(v) for k, v in cls.page_words.items()}
    return figure.html


def is_figure(html_text: str) -> bool:
    """Whether a notebook output's HTML is one of these figures."""
    return html_text.startswith('<div class="attnlib-explore') and DATA.search(html_text) is not None


@boundary(_explore_args)
def explore(S, tokens: list[str], d_k: int, *, title: str = "", controls=(), scaled: bool = True,
            causal: bool = True, temperature: float = 1.0, layer: int = 0, head: int = 0,
            query: int | None = None, layer_label: str = "block") -> AttentionExplorer:
    """An interactive figure of attention weights computed in the browser from raw scores.

    S: raw scores Q Kᵀ, unscaled and unmasked: (T, T) for one head, (h, T, T) for the heads of one layer,
    or (L, h, T, T) for every head of L blocks (a menu for the block and the head appears when there are
    several). tokens: T labels. d_k: the width of the dot products (d_head for a multi-head layer).
    controls: any of "scale" (a √d_k switch), "mask" (a causal-mask switch), "temperature" (a τ slider).
    scaled, causal, temperature, layer, head: what the figure shows first (layer as `model.blocks` indexes it: the
    menu shows it as block layer + 1). query: the query whose lines are
    drawn first (default: the last position, T − 1). layer_label: the menu's word for a layer.
    """
    S = torch.as_tensor(S).detach().to("cpu", torch.float64)     # raw scores, as float64 on the CPU
    S = S.reshape((1,) * (4 - S.dim()) + tuple(S.shape))         # (T, T) or (h, T, T) → (L, h, T, T)
    L, h, T, _ = S.shape
    data = {
        "v": 1, "title": title, "tokens": tokens,
        "labels": labels(tokens),   # a word-initial space shown as '▁', as in the plots
        "d_k": d_k, "L": L, "h": h, "T": T, "layerLabel": layer_label,
        "S": _round(S),
        "controls": {c: c in controls for c in CONTROLS},
        "state": {"layer": layer, "head": head, "scaled": scaled, "causal": causal,
                  "temperature": round(temperature, 4), "query": query},
        "tempRange": list(TEMPERATURE_RANGE), "words": WORDS,
    }
    return AttentionExplorer(data)


@boundary(_model_scores_args)
@torch.no_grad()
def model_scores(model, ids: torch.Tensor) -> torch.Tensor:
    """Raw scores S = Q Kᵀ (L, h, T, T) of every head of every block of a Pre-Norm ``GPT``, for ids (T,) or (1, T).

    Block l's Q and K come from its input X_l through its first LayerNorm (RoPE applied where the model uses
    it); where a layer has fewer key/value heads than query heads, each K head serves its group of queries.
    Scale by √d_head, add the mask and take the softmax to get the weights the model uses.

    The scores are float64, computed on the CPU by a float64 copy of the model: a page stores them rounded, and
    float32 rounding (which differs between processors and kernel paths) must not reach the stored digits.
    """
    model = copy.deepcopy(model).to("cpu", torch.float64)
    tables = []
    for block, X_l in zip(model.blocks, model.hidden_states(ids.cpu())):
        Q, K, _ = block.attn.qkv(block.ln_1(X_l))             # Q (1, h, T, d_head), K (1, h_kv, T, d_head)
        K = repeat_kv(K, Q.shape[1] // K.shape[1])            # each K head for its group of query heads
        tables.append(scores(Q, K)[0])                        # (h, T, T)
    return torch.stack(tables)
