"""Chapter 8's trained model, live in the page: the reader types a text and the page runs the model on it.

``live(model, tokenizer, text)`` returns a figure that a notebook displays as one self-contained piece of HTML,
as :func:`attnlib.explore.explore` does, with the same style and the same modules of its script (``attnlib/js/``:
the heatmap, the token list, the readout, the table and the keyboard), and two of its own: ``model.js`` (the model)
and ``live.js`` (the figure), in the order :data:`LIVE_MODULES` names. The JSON in it holds the model's sizes, its
weights, every parameter rounded to float16 (2 bytes each, in base64), and the figure's words (explore's
``WORDS`` and :data:`LIVE_WORDS`). In the browser ``model.js`` runs the model's forward pass in plain JavaScript,
with every value kept in float32, and ``live.js`` shows on every keystroke:

- the ten most likely next characters, with their probabilities;
- the attention weights of every block and head on the typed text, all of them at once as small pictures, and
  the one picked in the same heatmap, token list, readout and table as the other figures (the same code);
- a "Continue" button that appends n characters, each the most likely one (τ = 0) or drawn from
  softmax(logits / τ) with a seeded generator.

The page's text follows one rule, :func:`page_text`: an upper-case letter A–Z becomes its lower-case
letter (the model was trained on lower-case fables), any other character outside the model's vocabulary is left
out, and the page names what it left out. A text holds at most :data:`MAX_CHARS` characters, so that a heatmap
stays readable; a keystroke past that is refused with a visible message.

:attr:`LiveModel.model` is the model the page runs: a float32 copy whose parameters are the float16 values in the
page, so that the library computes what the page computes.
"""

from __future__ import annotations

import base64
import copy
import html
import math
from collections.abc import Mapping

import numpy as np
import torch

from ._validate import _show, boundary, require_pieces, require_weights
from .explore import PAGE_WORDS, VIEW_MODULES, WORDS, _asset, _Figure, _help_html, _script, _table_box
from .text import CharTokenizer, labels

__all__ = ["LiveModel", "live", "half_model", "page_model", "page_text", "MAX_CHARS", "LIVE_WORDS"]

MAX_CHARS = 64                         # a text's characters at most: 64 × 64 cells still read on a phone
TAU_RANGE = (0.0, 2.0, 0.05)           # the continuation's temperature slider: τ = 0 takes the argmax
ROPE_BASE = 10000.0                    # attnlib.position's base
LIVE_MODULES = VIEW_MODULES + ("model", "live", "start")   # the script's modules, in order (see explore.MODULES)

# The live figure's own words (with explore's WORDS, they reach the script in the figure's data).
LIVE_WORDS = {
    "box": "Your text ({max} characters at most)", "characters": "characters", "seed": "seed", "go": "Continue",
    "argmax": "\u03c4 = 0: each new character is the most likely one (argmax).",
    "drawn": "\u03c4 = {tau}: each new character is drawn from softmax(logits / \u03c4) with the seed's generator; "
             "the same text, \u03c4 and seed give the same characters.",
    "overview": "every head at once: pick one for the heatmap", "block": "block",
    "liveCaption": "{label} on the text above. Rows: queries i; columns: keys j; 3 decimals; \u2014: a future key, "
                   "masked (weight 0).",
    "empty": "Type a character to see what the model predicts.",
    "next": "The next character after \u201c{text}\u201d, the model's ten most likely:",
    "choice": "\u201c{ch}\u201d: {p}", "space": "space", "newline": "new line", "quoted": "\u201c{ch}\u201d",
    "tab": "tab",
    "leftOut": "Left out {chars}: the model knows only its {n} characters (a\u2013z, space, new line, digits "
               "1 6 7 8 and . , ; : ! ? ' \" ( ) -).",
    "refused": "Refused: {max} characters at most, so that the heatmap stays readable.",
    "first": "Type a character first: the model continues a text.",
    "addedOne": "Added {n} character", "added": "Added {n} characters",
    "stopped": " (stopped at {max}, the most the box holds).",
}
# Words only the live figure's markup shows.
LIVE_PAGE_WORDS = {
    **PAGE_WORDS,
    "fallback": "Live character model (its weights are in this page){title}: it predicts the next character of the "
                "text you type and shows the weights each head gives. It needs scripts: run this cell or trust the "
                "notebook to type your own text.",
    "table": "attention weights",
}


def _live_args(model, tokenizer, text, title):
    c = _require_gpt(model).config
    wanted = {"norm": "pre", "pos": "rope", "causal": True, "bias": True, "gelu": "exact", "tie": False}
    wrong = {k: getattr(c, k) for k, v in wanted.items() if getattr(c, k) != v}
    if wrong or c.h_kv != c.h:
        got = ", ".join(f"{k}={v!r}" for k, v in wrong.items()) or f"h_kv={c.h_kv}"
        kind = ", ".join(f"{k}={v!r}" for k, v in wanted.items())
        raise ValueError(f"the page runs chapter 8's kind of model ({kind}, h_kv = h), got {got}")
    if not isinstance(tokenizer, CharTokenizer) or tokenizer.vocab_size != c.vocab_size:
        raise ValueError(f"tokenizer must be the model's CharTokenizer, with vocab_size={c.vocab_size}, got "
                         f"{type(tokenizer).__name__}"
                         + (f" with {tokenizer.vocab_size}" if isinstance(tokenizer, CharTokenizer) else ""))
    if not isinstance(text, str) or not isinstance(title, str):
        raise TypeError(f"text and title must be strings, got {type(text).__name__} and {type(title).__name__}")
    kept, _ = page_text(text, tokenizer.vocab)
    if not 1 <= len(kept) <= MAX_CHARS:
        raise ValueError(f"text must keep 1 to {MAX_CHARS} characters of the model's vocabulary, got {len(kept)} "
                         f"from {text!r}")
    if c.max_T < MAX_CHARS:
        raise ValueError(f"the page runs up to {MAX_CHARS} positions, so the model's max_T must be at least "
                         f"{MAX_CHARS}, got max_T={c.max_T}")
    return {}


def _require_gpt(model, name: str = "model"):
    """An attnlib GPT whose weights can be read (not on the meta device)."""
    from .model import GPT

    if not isinstance(model, GPT):
        raise TypeError(f"{name} must be an attnlib GPT, got {_show(model)}")
    return require_weights(model, name)


def _page_text_args(text, vocab):
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {_show(text)}")
    if isinstance(vocab, str) or not isinstance(vocab, (list, tuple)) or not all(isinstance(v, str) for v in vocab):
        raise TypeError(f"vocab must be a list of strings (a CharTokenizer's vocab), got {_show(vocab)}")


def _half_model_args(model):
    _require_gpt(model)


_PAGE_KEYS = {"config": dict, "vocab": list, "weights": str, "tensors": list}
_PAGE_CONFIG = ("d_model", "h", "L", "d_ff", "max_T", "eps")


def _page_model_args(data):
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a live figure's payload (a dict, LiveModel.data), got {_show(data)}")
    missing = [k for k in _PAGE_KEYS if k not in data]
    if missing:
        raise ValueError(f"data must be a live figure's payload with keys {sorted(_PAGE_KEYS)}, got keys "
                         f"{sorted(data)} (missing {missing})")
    for k, kind in _PAGE_KEYS.items():
        if not isinstance(data[k], kind):
            raise TypeError(f"data[{k!r}] must be a {kind.__name__}, got {_show(data[k])}")
    absent = [k for k in _PAGE_CONFIG if k not in data["config"]]
    if absent:
        raise ValueError(f"data['config'] must hold {list(_PAGE_CONFIG)}, missing {absent}")
    try:
        n = len(base64.b64decode(data["weights"], validate=True)) // 2
        want = sum(math.prod(shape) for _, shape, _ in data["tensors"])
    except (ValueError, TypeError):
        raise ValueError("data['weights'] must be base64 float16 numbers and data['tensors'] a list of "
                         "[name, shape, offset]") from None
    if n != want:
        raise ValueError(f"data['weights'] holds {n} float16 numbers, but data['tensors'] describes {want}")
    from .model import GPT

    with torch.device("meta"):   # the shapes of the model the config builds, without its numbers
        wanted = {k: list(v.shape) for k, v in GPT(_page_config(data)).state_dict().items()}
    given = {name: list(shape) for name, shape, _ in data["tensors"]}
    for name in [*given, *wanted]:
        if wanted.get(name) != given.get(name):
            expected = f"{name!r} of shape {wanted[name]}" if name in wanted else f"no tensor named {name!r}"
            came = f"one of shape {given[name]}" if name in given else "none"
            raise ValueError(f"data['tensors'] must describe the GPT that data['config'] builds: expected "
                             f"{expected}, got {came}")


def _page_config(data):
    """The GPTConfig of a live figure's payload: chapter 8's kind of model over the payload's vocabulary."""
    from .model import GPTConfig

    c = data["config"]
    return GPTConfig(vocab_size=len(data["vocab"]), d_model=c["d_model"], h=c["h"], L=c["L"], d_ff=c["d_ff"],
                     max_T=c["max_T"], pos="rope", eps=c["eps"])


def _live_model_args(self, model, vocab, text, title):
    _require_gpt(model)
    vocab = require_pieces(vocab, "vocab")
    if len(vocab) != model.config.vocab_size:
        raise ValueError(f"vocab must hold one piece per token of the model, vocab_size={model.config.vocab_size}, "
                         f"got {len(vocab)}")
    if not isinstance(text, str) or not isinstance(title, str):
        raise TypeError(f"text and title must be strings, got {type(text).__name__} and {type(title).__name__}")
    return {"vocab": vocab}


def _live_ids_args(self, text):
    _page_text_args(text, self.vocab)


@boundary(_page_text_args)
def page_text(text: str, vocab: list[str]) -> tuple[str, list[str]]:
    """What the page does with a typed text: (the text it runs, the characters it left out, each once, in order).

    A–Z become a–z where the vocabulary lacks them; any other character outside the vocabulary is left out.
    (js/live.js applies the same rule to every keystroke.)
    """
    known, kept, left = set(vocab), [], []
    for ch in text:
        c = ch.lower() if ch not in known and "A" <= ch <= "Z" else ch
        if c in known:
            kept.append(c)
        elif ch not in left:
            left.append(ch)
    return "".join(kept), left


@boundary(_half_model_args)
def half_model(model):
    """A copy of ``model`` whose every parameter is rounded to float16 and kept in float32: the page's model."""
    model = copy.deepcopy(model).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


@boundary(_page_model_args)
def page_model(data: dict):
    """The GPT a live figure's JSON describes, rebuilt from its base64 float16 weights: what the page runs.

    data: the figure's payload (``LiveModel.data``, or the JSON read back out of a rendered page).
    """
    from .model import GPT

    model = GPT(_page_config(data))
    raw = np.frombuffer(base64.b64decode(data["weights"]), dtype="<f2")
    state = {name: torch.from_numpy(raw[at:at + math.prod(shape)].astype(np.float32)).reshape(shape)
             for name, shape, at in data["tensors"]}
    model.load_state_dict(state)
    return model.eval()


class LiveModel(_Figure):
    """The live figure: see :func:`live`. Displays itself as HTML in a notebook; ``nbytes`` counts its weights,
    scripts, style and text."""

    page_words = LIVE_PAGE_WORDS

    @boundary(_live_model_args)
    def __init__(self, model, vocab: list[str], text: str, title: str):
        self.model = half_model(model)
        self.vocab = vocab
        names, shapes, offsets, chunks, at = [], [], [], [], 0
        for name, p in self.model.state_dict().items():        # the parameters in the module's order
            chunks.append(p.detach().cpu().half().contiguous().view(-1))
            names.append(name)
            shapes.append(list(p.shape))
            offsets.append(at)
            at += p.numel()
        raw = torch.cat(chunks).view(torch.int16).numpy().astype("<i2").tobytes()   # little-endian, as read
        self.weights_nbytes = len(raw)
        c = self.model.config
        super().__init__({
            "v": 1, "kind": "live", "title": title, "vocab": vocab,
            "labels": [lab.replace("\n", "\u21b5") for lab in labels(vocab)],
            "config": {"d_model": c.d_model, "h": c.h, "L": c.L, "d_ff": c.d_ff, "max_T": c.max_T, "eps": c.eps,
                       "rope_base": ROPE_BASE},
            "tensors": [[n, s, o] for n, s, o in zip(names, shapes, offsets)],
            "weights": base64.b64encode(raw).decode("ascii"),
            "text": text, "maxChars": MAX_CHARS,
            "state": {"layer": 0, "head": 0, "query": None},
            "gen": {"n": 20, "temperature": 0.0, "seed": 0}, "tempRange": list(TAU_RANGE),
            "words": {**WORDS, **LIVE_WORDS},
        })

    @property
    def text(self) -> str:
        """The text the figure shows first."""
        return self._data["text"]

    @boundary(_live_ids_args)
    def page_text(self, text: str) -> tuple[str, list[str]]:
        """What the page does with a typed text: see :func:`page_text`."""
        return page_text(text, self.vocab)

    @boundary(_live_ids_args)
    def ids(self, text: str) -> torch.Tensor:
        """The token IDs (1, T) the page runs for a typed text (see :func:`page_text`)."""
        kept, _ = page_text(text, self.vocab)
        return torch.tensor([[self.vocab.index(c) for c in kept]], dtype=torch.long)

    @property
    def html(self) -> str:
        """The whole figure: fallback sentence, style, help, table, data and code; no id, no URL."""
        title = f", {self._data['title']}" if self._data["title"] else ""
        fallback = self.page_words["fallback"].format(title=title)
        return (
            '<div class="attnlib-explore attnlib-live">'
            f'<p class="ax-fallback">{html.escape(fallback)}</p>'
            f"<style>{_asset('explore.css')}{_asset('live.css')}</style>"
            '<div class="ax-readout" role="status" aria-live="polite" aria-atomic="true"></div>'
            f"{_help_html(self.page_words)}"
            f"{_table_box(self.page_words['table'], '<table><caption></caption></table>', self.page_words)}"
            f'<script type="application/json" class="ax-data">{self._json}</script>'
            f"<script>{_script(LIVE_MODULES)}</script>"
            "</div>"
        )

    def __repr__(self) -> str:
        c = self.model.config
        return (f"<live character model: d_model={c.d_model}, h={c.h}, L={c.L}, vocab {len(self.vocab)}, "
                f"float16 weights {self.weights_nbytes / 1000:.1f} kB>")


_Figure.kinds["live"] = LiveModel


@boundary(_live_args)
def live(model, tokenizer: CharTokenizer, text: str = "the lion and the mouse", *, title: str = "") -> LiveModel:
    """A figure that runs ``model`` (a Pre-Norm, causal, RoPE ``GPT`` over ``tokenizer``'s characters) in the page.

    text: what the box holds first (at most :data:`MAX_CHARS` characters, after :func:`page_text`).
    """
    return LiveModel(model, list(tokenizer.vocab), text, title)
