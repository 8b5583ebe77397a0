"""attnlib.explore: the interactive attention figure's HTML, without a browser.

The browser side (hovering, menus, switches, the slider, dark theme, the keyboard, the announced readout, phone
width, contrast in the page) is tested in test_rendered_book.py on the figures of the built book.
"""

from __future__ import annotations

import copy
import hashlib
import html.parser
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnlib
from attnlib import GPT, GPTConfig
from attnlib.attention import attention_weights, causal_mask, softmax
from attnlib.explore import (
    MAX_NUMBERS,
    MAX_T,
    MODULES,
    WORDS,
    AttentionExplorer,
    _asset,
    _script,
    explore,
    model_scores,
)
from attnlib.induction import head_weights
from helpers import HtmlParts, html_parts

TOKENS = [" the", " cat", " chase", "s", " the", " dog"]


def raw(*shape, seed=0, spread=3.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * spread


def parts(fig) -> HtmlParts:
    return html_parts(fig.html)


def page_json(fig) -> dict:
    """The data exactly as the browser reads it: parsed out of the HTML text, not from the object."""
    found = [text for attrs, text in parts(fig).scripts if attrs.get("type") == "application/json"]
    assert len(found) == 1, f"expected one JSON script, found {len(found)}"
    return json.loads(found[0])


def test_two_calls_give_identical_bytes():
    S = raw(2, 3, 6, 6)
    a = explore(S, TOKENS, 8, controls=("scale", "mask", "temperature"), title="t")
    b = explore(S.clone(), list(TOKENS), 8, controls=("scale", "mask", "temperature"), title="t")
    assert a.html == b.html and a._repr_html_() == a.html
    assert repr(a) == repr(b) and len(repr(a)) < 120 and "\n" not in repr(a)
    assert explore(S + 1.0, TOKENS, 8).html != a.html            # the data is in it


def test_no_ids_no_external_urls_one_container():
    fig = explore(raw(2, 3, 6, 6), TOKENS, 8, controls=("scale", "mask", "temperature"))
    text = fig.html
    assert not re.search(r"\sid\s*=", text), "an element id would repeat when a page shows two figures"
    for bad in ("http:", "https:", "//cdn", "src=", "@import", "url("):
        assert bad not in text.replace("http://www.w3.org/2000/svg", ""), bad   # the SVG namespace is a name
    tags = parts(fig).tags
    assert tags[0] == ("div", {"class": "attnlib-explore"})
    assert [a.get("type") for t, a in tags if t == "script"] == ["application/json", None]
    assert "</script" not in text.split("<script>", 1)[1].rsplit("</script>", 1)[0]


def test_fallback_sentence_for_untrusted_notebooks():
    text = explore(raw(6, 6), TOKENS, 8).html
    m = re.search(r'<p class="ax-fallback">([^<]*)</p>', text)
    assert m and "run this cell or trust the notebook" in m.group(1)
    assert text.index("ax-fallback") < text.index("<script")     # visible before any script runs


def test_stored_scores_are_rounded_and_give_the_library_weights():
    S = raw(2, 4, 6, 6, spread=5.0)
    fig = explore(S, TOKENS, 16, controls=("scale", "mask", "temperature"))
    data = page_json(fig)
    stored = torch.tensor(data["S"], dtype=torch.float64)
    assert stored.shape == (2, 4, 6, 6) and data["L"] == 2 and data["h"] == 4 and data["T"] == 6
    assert (stored - S).abs().max() <= 5e-5 + 1e-12
    assert (stored * 1e4 - (stored * 1e4).round()).abs().max() < 1e-6        # 4 decimals, no more
    assert torch.equal(stored, fig.scores)
    for l, k in ((0, 0), (1, 3)):
        for scaled, causal, tau in ((True, True, 1.0), (False, True, 1.0), (True, False, 0.5), (False, False, 3.0)):
            div = (math.sqrt(16) if scaled else 1.0) * tau
            want = torch.softmax(S[l, k] / div + (causal_mask(6, dtype=S.dtype) if causal else 0), dim=-1)
            got = softmax(stored[l, k] / div + (causal_mask(6, dtype=S.dtype) if causal else 0))
            assert (got - want).abs().max() < 5e-4                          # the printed precision, 3 decimals
            torch.testing.assert_close(fig.weights(l, k, scaled=scaled, causal=causal, temperature=tau), got)
    P = fig.weights()
    assert (P.triu(1) == 0).all() and torch.allclose(P.sum(-1), torch.ones(6, dtype=P.dtype))


def test_initial_state_and_controls_in_the_data():
    fig = explore(raw(3, 6, 6), TOKENS, 8, controls=("temperature",), causal=False, temperature=0.5, head=2,
                  query=2)
    data = page_json(fig)
    assert data["controls"] == {"scale": False, "mask": False, "temperature": True}
    assert data["state"] == {"layer": 0, "head": 2, "scaled": True, "causal": False, "temperature": 0.5,
                             "query": 2}
    assert data["labels"][1] == "\u2581cat" and data["tokens"][1] == " cat"


def test_tokens_with_html_characters_stay_inside_the_json():
    tokens = ["</script>", "<b>", "&amp;", "x"]
    fig = explore(raw(4, 4), tokens, 4)
    assert "</script><" not in fig.html.split('application/json"', 1)[1].split("</script>", 1)[0]
    assert page_json(fig)["tokens"] == tokens


def test_model_scores_give_the_models_own_weights():
    torch.manual_seed(0)
    for pos in ("learned", "rope"):
        model = GPT(GPTConfig(20, d_model=16, h=4, L=2, max_T=16, pos=pos)).eval()
        ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
        S = model_scores(model, ids)
        assert S.shape == (2, 4, 8, 8) and S.dtype == torch.float64        # computed in float64
        P_lib = head_weights(model, ids[None])[:, 0]                        # (L, h, T, T), float32
        P = softmax(S / math.sqrt(4) + causal_mask(8, dtype=S.dtype))
        torch.testing.assert_close(P, P_lib.double(), atol=1e-5, rtol=1e-4)
        P64 = head_weights(copy.deepcopy(model).double(), ids[None])[:, 0]  # the float64 model's own weights
        torch.testing.assert_close(P, P64, atol=1e-12, rtol=0)
        assert model.head.weight.dtype == torch.float32                     # the model itself is untouched
        fig = explore(S, [str(t) for t in ids.tolist()], 4)
        assert (fig.weights(1, 3) - P_lib[1, 3].double()).abs().max() < 5e-4


def test_figure_size_stays_small():
    one = explore(raw(6, 6), TOKENS, 8, controls=("scale", "mask", "temperature"))
    many = explore(raw(2, 4, 24, 24), [f"t{k}" for k in range(24)], 8)
    # the code and style, shared by every figure: ~32 kB, a third of it the redraw that keeps a keystroke of the
    # live figure (chapter 8) under 50 ms; js/model.js, js/live.js and live.css are not in it
    assert one.nbytes < 34_000, one.nbytes
    assert "kit.storedFigure" in one.html and "liveModel" not in one.html and "ax-live-text" not in one.html
    assert many.nbytes < 80_000, many.nbytes          # + 4 decimals per score, + the shown head's table
    assert isinstance(one, AttentionExplorer)


@pytest.mark.parametrize("call, error, words", [
    (lambda: explore([[1.0]], ["a"], 1), TypeError, ["torch.Tensor or NumPy array", "list"]),
    (lambda: explore(torch.ones(2, 2, dtype=torch.bool), ["a", "b"], 1), TypeError, ["real numbers", "bool"]),
    (lambda: explore(np.array([["a"]]), ["a"], 1), TypeError, ["real numbers", "<U1"]),
    (lambda: explore(raw(6, 5), TOKENS, 8), ValueError, ["square", "(6, 5)"]),
    (lambda: explore(raw(6), TOKENS, 8), ValueError, ["(T, T), (h, T, T) or (L, h, T, T)", "(6,)"]),
    (lambda: explore(raw(1, 1, 1, 6, 6), TOKENS, 8), ValueError, ["(L, h, T, T)", "(1, 1, 1, 6, 6)"]),
    (lambda: explore(torch.full((2, 2), float("inf")), ["a", "b"], 1), ValueError, ["finite", "inf"]),
    (lambda: explore(raw(6, 6), TOKENS[:5], 8), ValueError, ["T=6", "got 5"]),
    (lambda: explore(raw(6, 6), "the cat", 8), TypeError, ["list of T strings", "str"]),
    (lambda: explore(raw(6, 6), TOKENS, 0), ValueError, ["d_k must be a positive integer", "0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8.0), TypeError, ["d_k", "8.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, controls=("sharpness",)), ValueError, ["'temperature'", "'sharpness'"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, controls="mask"), TypeError, ["tuple of names", "'mask'"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, temperature=0), ValueError, ["greater than 0", "0.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, temperature=9), ValueError, ["between 0.1 and 4.0", "9.0"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, causal=1), TypeError, ["True or False", "1"]),
    (lambda: explore(raw(3, 6, 6), TOKENS, 8, head=3), ValueError, ["head in 0..2", "head=3"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, query=6), ValueError, ["0..5", "6"]),
    (lambda: explore(raw(MAX_T + 1, MAX_T + 1), ["a"] * (MAX_T + 1), 8), ValueError, [f"at most {MAX_T}", "65"]),
    (lambda: explore(raw(12, 8, 20, 20), [str(k) for k in range(20)], 8), ValueError,
     [f"at most {MAX_NUMBERS}", "38400"]),
    (lambda: explore(raw(6, 6), TOKENS, 8, title=3), TypeError, ["title must be a string", "int"]),
    (lambda: model_scores("gpt", torch.tensor([1, 2])), TypeError, ["attnlib GPT", "str"]),
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1)), [1, 2]), TypeError, ["torch.Tensor", "list"]),
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1)), torch.ones(2, 3, dtype=torch.long)), ValueError,
     ["one sequence", "(2, 3)"]),
    # on another device ("meta" stands in for a GPU: it holds no values to copy to the CPU)
    (lambda: explore(raw(6, 6).to("meta"), TOKENS, 8), ValueError, ["S", "meta", "no values"]),
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1)), torch.tensor([1, 2], device="meta")), ValueError,
     ["ids", "meta", "no values"]),
    # the model's own check of its ids is skipped inside model_scores' call, so model_scores checks them
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1)), torch.tensor([1, 12])), ValueError, ["12", "0..9"]),
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1, max_T=4)), torch.ones(5, dtype=torch.long)), ValueError,
     ["T=5", "max_T=4"]),
    (lambda: model_scores(GPT(GPTConfig(10, 8, 2, 1, norm="post")), torch.tensor([1, 2])), ValueError,
     ["Pre-Norm", "'post'"]),
])
def test_bad_input_names_expected_and_actual(call, error, words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_weights_rejects_a_head_that_is_not_there():
    fig = explore(raw(2, 6, 6), TOKENS, 8)
    with pytest.raises(ValueError, match="head in 0..1"):
        fig.weights(0, 2)
    with pytest.raises(ValueError, match="greater than 0"):
        fig.weights(temperature=-1)


def test_attention_weights_agree_with_the_figure_on_the_library_path():
    g = torch.Generator().manual_seed(1)
    Q, K = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    fig = explore(Q @ K.T, TOKENS, 8, controls=("mask",))
    assert (fig.weights().float() - attention_weights(Q, K)).abs().max() < 5e-4


# ------------------------------------------------------------------------------------------------ every reader

class _Table(html.parser.HTMLParser):
    """The figure's text alternative: caption, header row, row headers and cells of its one <table>."""

    def __init__(self):
        super().__init__()
        self.caption, self.cols, self.rows, self.cells = "", [], [], []
        self._where: str | None = None
        self._text = ""
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        if tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr" and not self._in_head:
            self.cells.append([])
        if tag in ("caption", "th", "td"):
            self._where, self._text = tag, ""

    def handle_endtag(self, tag):
        if tag != self._where:
            return
        if tag == "caption":
            self.caption = self._text
        elif tag == "th" and self._in_head:
            self.cols.append(self._text)
        elif tag == "th":
            self.rows.append(self._text)
        elif tag == "td":
            self.cells[-1].append(self._text)
        self._where = None

    def handle_data(self, data):
        if self._where:
            self._text += data


def table_of(fig) -> _Table:
    t = _Table()
    t.feed(fig.html.split('<details class="ax-table">', 1)[1].split("</details>", 1)[0])
    return t


def tag_with(fig, cls: str) -> dict:
    found = [a for t, a in parts(fig).tags if cls in (a.get("class") or "").split()]
    assert len(found) == 1, f"expected one element of class {cls}, found {len(found)}"
    return found[0]


def test_readout_is_a_polite_live_region_before_any_script():
    fig = explore(raw(6, 6), TOKENS, 8)
    readout = tag_with(fig, "ax-readout")
    assert readout["aria-live"] == "polite" and readout["role"] == "status" and readout["aria-atomic"] == "true"
    assert fig.html.index('class="ax-readout"') < fig.html.index("<script")   # in the page before it changes


@pytest.mark.parametrize("shape, where, label", [
    ((6, 6), {}, "attention weights over 6 tokens"),
    ((3, 6, 6), {"head": 1}, "attention weights of head 1 over 6 tokens"),
    ((2, 4, 16, 16), {"layer": 0, "head": 1}, "attention weights of block 1 head 1 over 16 tokens"),
])
def test_each_figure_says_what_it_shows(shape, where, label):
    T = shape[-1]
    fig = explore(raw(*shape), [f"t{k}" for k in range(T)], 8, **where)
    assert fig.label == label
    region = tag_with(fig, "ax-table-scroll")       # the table's scroll box: named, reachable by the keyboard
    assert region["role"] == "region" and region["tabindex"] == "0" and region["aria-label"] == label
    assert table_of(fig).caption.startswith(label + ".")
    js = _script(MODULES)                           # the script writes the same words on the heatmap, from WORDS
    assert page_json(fig)["words"] == WORDS
    assert "kit.fmt(W.label, {which: which, T: v.T})" in js and "kit.fmt(W.ofLayer, {layerLabel: o.layerLabel" in js


def test_the_words_live_in_one_place():
    """The script shows no sentence of its own: every word comes from WORDS (live.py adds LIVE_WORDS), by name."""
    from attnlib.live import LIVE_MODULES, LIVE_WORDS
    for modules, words in ((MODULES, WORDS), (LIVE_MODULES, {**WORDS, **LIVE_WORDS})):
        used = set(re.findall(r"\bW\.(\w+)", _script(modules)))
        assert used and used <= set(words), sorted(used - set(words))
    assert not set(WORDS) & set(LIVE_WORDS)
    assert set(re.findall(r"\bW\.(\w+)", _script(MODULES))) | {"liveFigure"} >= set(WORDS) - {"liveFigure"}
    for english in ("attention weights", "causal mask on", "reads ", "masked (a future key)", "Rows: queries"):
        assert english not in _script(MODULES), english


def test_table_values_equal_the_library_weights():
    S = raw(2, 3, 7, 7, spread=4.0)
    tokens = TOKENS + ["<&>"]
    for kw in ({}, {"layer": 1, "head": 2, "causal": False, "temperature": 0.5},
               {"scaled": False, "head": 1, "controls": ("scale", "mask", "temperature")}):
        fig = explore(S, tokens, 16, **kw)
        st = page_json(fig)["state"]
        P = fig.weights(st["layer"], st["head"], scaled=st["scaled"], causal=st["causal"],
                        temperature=st["temperature"])
        t = table_of(fig)
        names = [f"{k}:{lab}" for k, lab in enumerate(page_json(fig)["labels"])]
        assert t.cols == ["query \\ key"] + names and t.rows == names        # html-escaped, read back as text
        assert len(t.cells) == 7 and all(len(r) == 7 for r in t.cells)
        for i in range(7):
            for j in range(7):
                shown = t.cells[i][j]
                if st["causal"] and j > i:
                    assert shown == "\u2014" and float(P[i, j]) == 0.0
                else:
                    assert re.fullmatch(r"\d\.\d{3}", shown), shown          # 3 decimals, as the readout
                    assert shown == f"{float(P[i, j]):.3f}"
                    assert abs(float(shown) - float(P[i, j])) <= 5e-4 + 1e-12
        assert t.cells == fig.table()
        assert ("masked" in t.caption) == st["causal"]
        assert ("temperature \u03c4 = 1.00" in t.caption) == ("controls" in kw)


def test_the_table_is_inside_a_details_the_reader_can_open():
    text = explore(raw(6, 6), TOKENS, 8).html
    m = re.search(r'<details class="ax-table"><summary>([^<]+)</summary>', text)
    assert m and "table" in m.group(1)
    assert "<details open" not in text                                      # closed until the reader opens it


def test_help_text_fits_the_device():
    fig = explore(raw(6, 6), TOKENS, 8)
    spans = re.findall(r'<span class="(ax-help-\w+)">([^<]+)</span>', fig.html)
    helps = dict(spans)
    assert set(helps) == {"ax-help-hover", "ax-help-touch"}
    assert "Hover" in helps["ax-help-hover"] and "arrow keys" in helps["ax-help-hover"]
    assert "hover" not in helps["ax-help-touch"].lower() and "Tap" in helps["ax-help-touch"]
    css = re.sub(r"\s+", " ", _asset("explore.css"))
    assert "@media (hover: none) { .attnlib-explore .ax-help-hover { display: none; } }" in css
    assert "@media (hover: hover) { .attnlib-explore .ax-help-touch { display: none; } }" in css


def test_the_script_makes_the_cells_and_tokens_focusable_with_one_tab_stop_each():
    """The DOM the script builds is checked in the browser (test_rendered_book.py); here: what it is built from."""
    js = _script(MODULES)
    for what in ('role: "grid"', 'role="row"', 'role="gridcell"', 'role: "listbox"', 'role="option"',
                 'tabindex: -1', 'tabindex="-1"', 'setAttribute("tabindex", "0")',
                 '"aria-selected"', '"ArrowRight"', '"ArrowLeft"', '"ArrowUp"',
                 '"ArrowDown"', '"Home"', '"End"', '"Enter"', '" "', 'setAttribute("aria-live", "polite")'):
        assert what in js, what
    text = explore(raw(6, 6), TOKENS, 8).html.split("<script", 1)[0]   # the markup before the script runs:
    focusable = re.findall(r'<[^>]*tabindex="0"[^>]*>', text)          # only the table's scroll box
    assert len(focusable) == 1 and 'class="ax-table-scroll"' in focusable[0], focusable


def _hex(c: str) -> tuple[int, int, int]:
    return tuple(int(c[k:k + 2], 16) for k in (1, 3, 5))


def _lum(c) -> float:
    lin = [v / 255 / 12.92 if v / 255 <= 0.03928 else ((v / 255 + 0.055) / 1.055) ** 2.4 for c_ in [c] for v in c_]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _ratio(a, b) -> float:
    hi, lo = sorted((_lum(a), _lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_every_text_colour_meets_4_5_to_1():
    css = _asset("explore.css")
    white = (255, 255, 255)
    text_colours = re.findall(r"(?<![-\w])(?:color|fill):\s*(#[0-9a-fA-F]{6})", css)
    assert "#9a9a9a" not in css.lower()                                    # the old masked-key grey: 2.81:1
    assert len(text_colours) >= 8
    for c in text_colours:                                                  # every text sits on the white card
        assert _ratio(_hex(c), white) >= 4.5, (c, round(_ratio(_hex(c), white), 2))
    # a cell's number: black or white, whichever contrasts more with the cell, at every weight (JS's rgb and ink)
    stops = [(247, 251, 255), (198, 219, 239), (107, 174, 214), (33, 113, 181), (8, 48, 107)]
    assert "[[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]]" in \
        _asset("js/paint.js")
    worst = 21.0
    for n in range(1001):
        x = n / 1000 * 4
        k = min(int(x), 3)
        f = x - k
        cell = tuple(math.floor(stops[k][c] + f * (stops[k + 1][c] - stops[k][c]) + 0.5) for c in range(3))
        L = _lum(cell)
        ink = (0, 0, 0) if (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) else white
        worst = min(worst, _ratio(ink, cell))
    assert worst >= 4.5, worst


def test_identical_bytes_in_a_fresh_process():
    """Nothing in the HTML depends on the process: hash seeds, dict order, the order assets were read."""
    code = ("import hashlib, torch; from attnlib.explore import explore; "
            "S = torch.arange(2 * 3 * 36, dtype=torch.float64).reshape(2, 3, 6, 6).sin() * 3; "
            "f = explore(S, [' the', ' cat', ' chase', 's', ' the', ' dog'], 8, title='t', "
            "controls=('scale', 'mask', 'temperature')); "
            "print(hashlib.sha256(f.html.encode()).hexdigest())")
    S = torch.arange(2 * 3 * 36, dtype=torch.float64).reshape(2, 3, 6, 6).sin() * 3
    here = explore(S, TOKENS, 8, title="t", controls=("scale", "mask", "temperature")).html
    want = hashlib.sha256(here.encode()).hexdigest()
    lib = os.pathsep.join([os.path.dirname(os.path.dirname(attnlib.__file__)), os.environ.get("PYTHONPATH", "")])
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": lib})
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == want


def _tsc() -> str | None:
    """TypeScript's compiler, where a maintainer installed it (`npm install --no-save typescript@5`, or globally)."""
    here = pathlib.Path(__file__).resolve().parents[1] / "node_modules" / ".bin" / "tsc"
    return str(here) if here.is_file() else shutil.which("tsc")


@pytest.mark.skipif(shutil.which("node") is None or _tsc() is None,
                    reason="needs node and TypeScript (npm install --no-save typescript@5); readers need neither")
def test_the_script_type_checks():
    """`tsc --checkJs` over the modules with js/kit.d.ts: kit's parts are named and called as declared, the DOM as
    typed. The page's script is the same code: the JSDoc lines are left out of it."""
    folder = pathlib.Path(attnlib.__file__).parent / "js"
    files = [str(folder / "kit.d.ts")] + sorted(str(f) for f in folder.glob("*.js"))
    out = subprocess.run([_tsc(), "--noEmit", "--allowJs", "--checkJs", "--target", "es5", "--lib", "es2015,dom",
                          *files], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
    assert "@type" not in _script(MODULES) and "@type" in (folder / "table.js").read_text()
