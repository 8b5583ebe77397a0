"""The interactive figures in the rendered book, in headless Chromium: the weights each stored figure computes
against the library's, the keyboard, a phone, contrast, and chapter 8's model running live in the page against
the library's forward pass."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

# ruff: noqa: F811  (the fixtures imported below are requested by name as test arguments)
from book_in_browser import (  # noqa: F401
    PHONE,
    TOC_PAGES,
    _is_local,
    browser,
    browser_test,
    build,
    open_watched,
    run_axe,
    site,
)

# ----------------------------------------------------------------------------------------------------------------
# Interactive attention figures (attnlib.explore)
# ----------------------------------------------------------------------------------------------------------------

EXPLORE_CHAPTERS = ["book/03_scaling", "book/04_mask", "book/05_softmax", "book/06_multi_head", "book/08_stack",
                    "book/trained_heads"]
STORED = "div.attnlib-explore:not(.attnlib-live)"   # figures of stored scores; chapter 8's live model has its own tests
READOUT = re.compile(r"query (\d+):.* \u2192 key (\d+):.*: (?:weight (\d\.\d{3})|masked)")
HOVER_LINE_JS = "(f) => f.querySelectorAll('.ax-lines line').length"


def _figures_in(build, doc: str) -> int:
    return (build.html / f"{doc}.html").read_text(encoding="utf-8").count('<div class="attnlib-explore">')


def each_figure(page):
    """(n, the figure scrolled into view, its data as its script reads it) for every stored figure of the page."""
    figures = page.locator(STORED)
    for n in range(figures.count()):
        fig = figures.nth(n)
        fig.scroll_into_view_if_needed()
        yield n, fig, json.loads(fig.locator('script[type="application/json"]').text_content())


def test_chapters_3_to_8_hold_at_least_five_interactive_figures(build):
    counts = {doc: _figures_in(build, doc) for doc in EXPLORE_CHAPTERS if (build.html / f"{doc}.html").is_file()}
    assert sum(counts.values()) >= 5, counts
    assert all(counts.values()), f"chapters without their interactive figure: {counts}"


def _expected_weights(data: dict, layer: int, head: int, scaled: bool, causal: bool, tau: float):
    """P (T, T) from the scores in the page, through the library: softmax(scale(S, d_k) / τ + M)."""
    import torch

    from attnlib import causal_mask, scale, softmax

    S = torch.tensor(data["S"][layer][head], dtype=torch.float64)
    if scaled:
        S = scale(S, data["d_k"])
    S = S / tau
    if causal:
        S = S + causal_mask(S.shape[-1], dtype=S.dtype)
    return softmax(S)


def _check_cells(page, fig, data, state, cells) -> int:
    """Hover each (i, j) cell and compare the weight the figure shows with the library's. Returns the count."""
    P = _expected_weights(data, state["layer"], state["head"], state["scaled"], state["causal"], state["tau"])
    for i, j in cells:
        fig.locator(f"rect.ax-cell[data-i='{i}'][data-j='{j}']").hover(timeout=5_000)
        text = fig.locator(".ax-readout").inner_text()
        m = READOUT.search(text)
        assert m and (int(m.group(1)), int(m.group(2))) == (i, j), f"cell ({i}, {j}): readout {text!r}"
        if state["causal"] and j > i:
            assert m.group(3) is None and "masked" in text, f"cell ({i}, {j}) is in the future: {text!r}"
            assert float(P[i, j]) == 0.0
        else:
            assert m.group(3) is not None, text
            assert abs(float(m.group(3)) - float(P[i, j])) <= 5e-4 + 1e-9, (
                f"{state}: cell ({i}, {j}) shows {m.group(3)}, the library gives {float(P[i, j]):.6f}")
    return len(cells)


def _check_lines(fig, data, state, queries) -> None:
    """Hover each query token: one line per key with a weight above 0."""
    P = _expected_weights(data, state["layer"], state["head"], state["scaled"], state["causal"], state["tau"])
    for i in queries:
        fig.locator(f"text.ax-query[data-i='{i}']").hover(timeout=5_000)
        drawn = fig.evaluate(HOVER_LINE_JS)
        want = int((P[i] > 0).sum())
        assert drawn == want, f"{state}: query {i} draws {drawn} lines, expected {want} (keys it reads)"
        if state["causal"]:
            assert drawn == i + 1


def _relative_luminance(rgb: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+(?:\.\d+)?", rgb)[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(fg: str, bg: str) -> float:
    a, b = sorted((_relative_luminance(fg), _relative_luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


@browser_test
@pytest.mark.parametrize("doc", [d for d in EXPLORE_CHAPTERS if d in TOC_PAGES])
def test_interactive_figures_compute_the_library_weights(site, browser, build, doc):
    """Drive every figure of the page: hover cells and tokens, every layer and head, every switch, the slider;
    the shown weights equal the library's to the 3 printed decimals; nothing leaves the page, no console error;
    the figure stays legible in the dark theme."""
    if not _figures_in(build, doc):
        pytest.fail(f"{doc} has no interactive attention figure")

    outside: list[str] = []
    errors: list[str] = []
    context, page = open_watched(browser, site, doc, outside, errors)
    try:
        hovered = 0
        for n, fig, data in each_figure(page):
            assert fig.get_attribute("data-ax-ready") == "1", f"{doc}: figure {n} was not drawn by its script"
            assert fig.locator(".ax-fallback").count() == 0, f"{doc}: figure {n} still shows its fallback text"
            T, s0 = data["T"], data["state"]
            state = {"layer": s0["layer"], "head": s0["head"], "scaled": s0["scaled"], "causal": s0["causal"],
                     "tau": s0["temperature"]}
            assert fig.locator("rect.ax-cell").count() == T * T
            cells = sorted({(T - 1, 0), (T - 1, T - 1), (T // 2, T // 3), (T - 1, T // 2), (1, 0), (0, T - 1),
                            (T // 2, T - 1)})
            queries = sorted({0, T // 2, T - 1})
            hovered += _check_cells(page, fig, data, state, cells)
            _check_lines(fig, data, state, queries)
            if data["L"] > 1 or data["h"] > 1:                        # every layer and head
                for layer in range(data["L"]):
                    for head in range(data["h"]):
                        if data["L"] > 1:
                            fig.locator("select.ax-layer").select_option(index=layer)
                        if data["h"] > 1:
                            fig.locator("select.ax-head").select_option(index=head)
                        state.update(layer=layer, head=head)
                        hovered += _check_cells(page, fig, data, state, cells[:3])
                _check_lines(fig, data, state, queries)
            if data["controls"]["scale"]:
                fig.locator("input.ax-scale").click()
                state["scaled"] = not state["scaled"]
                hovered += _check_cells(page, fig, data, state, cells)
                P = _expected_weights(data, state["layer"], state["head"], state["scaled"], state["causal"],
                                      state["tau"])
                fig.locator("input.ax-scale").click()
                state["scaled"] = not state["scaled"]
                P_back = _expected_weights(data, state["layer"], state["head"], state["scaled"], state["causal"],
                                           state["tau"])
                assert (P.max(-1).values > P_back.max(-1).values + 1e-3).any(), "the switch changes nothing"
                hovered += _check_cells(page, fig, data, state, cells[:2])
            if data["controls"]["mask"]:
                fig.locator("input.ax-mask").click()
                state["causal"] = not state["causal"]
                hovered += _check_cells(page, fig, data, state, cells)
                _check_lines(fig, data, state, queries)
                if not state["causal"]:                                 # the leak: weight above the diagonal
                    fig.locator(f"rect.ax-cell[data-i='0'][data-j='{T - 1}']").hover()
                    shown = READOUT.search(fig.locator(".ax-readout").inner_text())
                    assert shown and shown.group(3) and float(shown.group(3)) > 0
                fig.locator("input.ax-mask").click()
                state["causal"] = not state["causal"]
                hovered += _check_cells(page, fig, data, state, cells[:2])
            if data["controls"]["temperature"]:
                for tau in ("0.5", "2", "4", "1"):
                    fig.locator("input.ax-temp").evaluate(
                        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", tau)
                    state["tau"] = float(tau)
                    assert fig.locator(".ax-temp-value").inner_text() == f"{float(tau):.2f}"
                    hovered += _check_cells(page, fig, data, state, cells)
                    _check_lines(fig, data, state, queries[-1:])
            # the dark theme: the figure's text keeps a readable contrast with its own background
            page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; }")
            colours = fig.evaluate("""(f) => {
                const t = f.querySelector('svg text'), r = f.querySelector('.ax-readout');
                return {bg: getComputedStyle(f).backgroundColor, svgText: getComputedStyle(t).fill,
                        readout: getComputedStyle(r).color, label: getComputedStyle(f).color};
            }""")
            for what in ("svgText", "readout", "label"):
                ratio = _contrast(colours[what], colours["bg"])
                assert ratio >= 4.5, f"{doc}: figure {n}, dark theme: {what} {colours[what]} on {colours['bg']} " \
                                     f"has contrast {ratio:.1f} < 4.5"
            page.evaluate("() => { document.documentElement.dataset.theme = 'light'; }")
        page.wait_for_timeout(100)
    finally:
        context.close()
    assert hovered >= 10
    assert not outside, f"{doc}: requests to other hosts during the interaction: {outside}"
    assert not errors, f"{doc}: console errors during the interaction:\n" + "\n".join(errors)


@browser_test
def test_interactive_figures_without_scripts_show_how_to_bring_them_to_life(site, browser, build):
    """Where scripts do not run (a notebook that is not trusted), each figure says so instead of staying blank."""
    docs = [d for d in EXPLORE_CHAPTERS if d in TOC_PAGES and _figures_in(build, d)]
    if not docs:
        pytest.fail("no page holds an interactive attention figure")
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    outside: list[str] = []
    context.route("**/*", lambda r: r.continue_() if _is_local(r.request.url, site)
                  else (outside.append(r.request.url), r.abort()))
    try:
        page = context.new_page()
        page.goto(site + f"{docs[0]}.html", wait_until="load", timeout=30_000)
        figures = page.locator(STORED)
        assert figures.count() == _figures_in(build, docs[0])
        for n in range(figures.count()):
            note = figures.nth(n).locator(".ax-fallback")
            assert note.count() == 1 and note.is_visible(), f"{docs[0]}: figure {n} shows no fallback text"
            assert "run this cell or trust the notebook" in note.inner_text()
            assert figures.nth(n).locator("svg").count() == 0
    finally:
        context.close()
    assert not outside, outside


# ----------------------------------------------------------------------------------------------------------------
# Interactive attention figures for every reader: keyboard, screen reader, phone, contrast
# ----------------------------------------------------------------------------------------------------------------

AX_SUMMARY = re.compile(r"query (\d+):.* reads (\d+) keys; largest weight (\d\.\d{3}) on key (\d+):")
AX_LABEL = re.compile(r"attention weights(?: of (?:\w+ \d+ )?head \d+)? over \d+ tokens")
AX_WCAG = {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}   # WCAG alone, on a figure

# What the page says about one figure: its state, where the tab stops are, what has the focus.
AX_FOCUS_JS = """(f) => {
  const a = document.activeElement, on = a && f.contains(a);
  const frame = f.querySelector('.ax-focus');
  return {
    cell: on && a.matches('rect.ax-cell') ? [+a.dataset.i, +a.dataset.j] : null,
    query: on && a.matches('text.ax-query') ? +a.dataset.i : null,
    tag: a ? a.tagName + '.' + (a.getAttribute('class') || '') : null,
    cellStops: Array.from(f.querySelectorAll('rect.ax-cell[tabindex="0"]')).map(r => [+r.dataset.i, +r.dataset.j]),
    queryStops: f.querySelectorAll('text.ax-query[tabindex="0"]').length,
    frame: frame.getAttribute('visibility') + ' ' + (frame.getAttribute('transform') || ''),
    selected: Array.from(f.querySelectorAll('text.ax-query[aria-selected="true"]')).map(t => +t.dataset.i),
    live: f.querySelector('[aria-live="polite"]').textContent,
  };
}"""


def _ax_state(data: dict) -> dict:
    s0 = data["state"]
    return {"layer": s0["layer"], "head": s0["head"], "scaled": s0["scaled"], "causal": s0["causal"],
            "tau": s0["temperature"]}


def _ax_check_announced(text: str, i: int, j: int, P, causal: bool, where: str) -> None:
    """The live readout names query i, key j and the library's weight P[i, j] to the 3 decimals it shows."""
    m = READOUT.search(text)
    assert m and (int(m.group(1)), int(m.group(2))) == (i, j), f"{where}: cell ({i}, {j}) announces {text!r}"
    if causal and j > i:
        assert m.group(3) is None and "masked" in text, f"{where}: ({i}, {j}) is a future key: {text!r}"
    else:
        assert m.group(3) is not None, f"{where}: {text!r}"
        assert abs(float(m.group(3)) - float(P[i, j])) <= 5e-4 + 1e-9, (
            f"{where}: cell ({i}, {j}) announces {m.group(3)}, the library gives {float(P[i, j]):.6f}")


def _ax_start_before(page, fig) -> None:
    """Put the sequential focus starting point at the top of the figure (a click on its title or its padding)."""
    title = fig.locator(".ax-title")
    if title.count():
        title.click()
    else:
        fig.click(position={"x": 2, "y": 2})


@browser_test
@pytest.mark.parametrize("doc", [d for d in EXPLORE_CHAPTERS if d in TOC_PAGES])
def test_interactive_figures_work_from_the_keyboard(site, browser, build, doc):
    """Tab reaches the heatmap (one tab stop), the arrow keys move between cells, Home/End and Ctrl+Home/End go to
    the ends, and the polite live readout announces each cell's query, key and the library's weight; Enter picks
    the query; the query tokens are one more tab stop; the table behind the summary holds the library's weights.
    The figure's pictures say what they show, and axe-core (WCAG 2.1 A/AA) finds nothing in the figure."""
    if not _figures_in(build, doc):
        pytest.fail(f"{doc} has no interactive attention figure")


    outside: list[str] = []
    errors: list[str] = []
    context, page = open_watched(browser, site, doc, outside, errors, failed_responses=True)
    try:
        for n, fig, data in each_figure(page):
            where = f"{doc}: figure {n}"
            T, state = data["T"], _ax_state(data)
            P = _expected_weights(data, state["layer"], state["head"], state["scaled"], state["causal"],
                                  state["tau"])
            q0 = data["state"]["query"]
            # what each part is
            heat, view = fig.locator("svg.ax-heatmap"), fig.locator("svg.ax-tokens")
            assert heat.get_attribute("role") == "grid" and view.get_attribute("role") == "listbox", where
            label = heat.get_attribute("aria-label")
            assert AX_LABEL.fullmatch(label) and f"over {T} tokens" in label, f"{where}: heatmap label {label!r}"
            if data["L"] > 1:
                # the menu and the label number blocks 1 … L
                assert f"{data['layerLabel']} {state['layer'] + 1} head {state['head']}" in label, label
            assert "query" in view.get_attribute("aria-label"), where
            assert fig.locator("g[role='row']").count() == T and fig.locator("[role='gridcell']").count() == T * T
            assert fig.locator("[role='option']").count() == T, where
            # one tab stop in the heatmap, one in the tokens
            facts = fig.evaluate(AX_FOCUS_JS)
            assert facts["cellStops"] == [[q0, 0]] and facts["queryStops"] == 1, f"{where}: {facts}"
            _ax_start_before(page, fig)
            for _ in range(12):
                page.keyboard.press("Tab")
                facts = fig.evaluate(AX_FOCUS_JS)
                if facts["cell"] is not None:
                    break
            assert facts["cell"] == [q0, 0], f"{where}: Tab did not reach the heatmap (focus on {facts['tag']})"
            assert facts["frame"].startswith("visible"), f"{where}: the focused cell shows no frame: {facts}"
            _ax_check_announced(facts["live"], q0, 0, P, state["causal"], where)
            # a walk with the keys; expected position after each
            i, j = q0, 0
            walk = [("ArrowRight", 0, 1), ("ArrowRight", 0, 1), ("ArrowUp", -1, 0), ("ArrowLeft", 0, -1),
                    ("End", None, None), ("ArrowDown", 1, 0), ("Home", None, None), ("Control+Home", None, None),
                    ("ArrowUp", -1, 0), ("ArrowLeft", 0, -1), ("Control+End", None, None), ("ArrowDown", 1, 0),
                    ("ArrowRight", 0, 1)]
            for key, di, dj in walk:
                page.keyboard.press(key)
                if key == "End":
                    j = T - 1
                elif key == "Home":
                    j = 0
                elif key == "Control+Home":
                    i, j = 0, 0
                elif key == "Control+End":
                    i, j = T - 1, T - 1
                else:
                    i, j = min(T - 1, max(0, i + di)), min(T - 1, max(0, j + dj))
                facts = fig.evaluate(AX_FOCUS_JS)
                assert facts["cell"] == [i, j], f"{where}: after {key} focus is on {facts['cell']}, not {[i, j]}"
                assert facts["cellStops"] == [[i, j]], f"{where}: after {key}, tab stops {facts['cellStops']}"
                _ax_check_announced(facts["live"], i, j, P, state["causal"], f"{where}, {key}")
            for key in ("Enter", " "):                               # picks the row's query
                page.keyboard.press("Control+Home")
                page.keyboard.press("ArrowDown")
                page.keyboard.press(key)
                facts = fig.evaluate(AX_FOCUS_JS)
                m = AX_SUMMARY.search(facts["live"])
                assert m and int(m.group(1)) == 1 and facts["selected"] == [1], f"{where}, {key!r}: {facts}"
                assert abs(float(m.group(3)) - float(P[1].max())) <= 5e-4 + 1e-9, facts["live"]
                assert int(m.group(2)) == (2 if state["causal"] else T)
            # the query tokens: one more tab stop; the arrows pick a query, as hovering does
            page.keyboard.press("Tab")
            facts = fig.evaluate(AX_FOCUS_JS)
            assert facts["query"] == 1, f"{where}: Tab after the heatmap lands on {facts['tag']}"
            for key, want in (("ArrowDown", 2), ("End", T - 1), ("ArrowUp", T - 2), ("Home", 0)):
                page.keyboard.press(key)
                facts = fig.evaluate(AX_FOCUS_JS)
                m = AX_SUMMARY.search(facts["live"])
                assert facts["query"] == want and facts["selected"] == [want] and m and int(m.group(1)) == want, \
                    f"{where}, tokens, {key}: {facts}"
                assert abs(float(m.group(3)) - float(P[want].max())) <= 5e-4 + 1e-9, facts["live"]
            # the text alternative: the next tab stop opens the table, which holds the library's weights
            page.keyboard.press("Tab")
            assert page.evaluate("() => document.activeElement.tagName") == "SUMMARY", where
            page.keyboard.press("Enter")
            shown = fig.evaluate("""(f) => { const t = f.querySelector('.ax-table table');
                return {open: t.closest('details').open, visible: t.getBoundingClientRect().height > 0,
                        caption: t.caption.textContent,
                        cells: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).slice(1)
                                                                    .map(c => c.textContent))}; }""")
            assert shown["open"] and shown["visible"], f"{where}: Enter on the summary did not open the table"
            assert shown["caption"].startswith(label), (shown["caption"], label)
            for a in range(T):
                for b in range(T):
                    v = shown["cells"][a][b]
                    if state["causal"] and b > a:
                        assert v == "\u2014", f"{where}: table ({a}, {b}) = {v!r}, a masked key"
                    else:
                        assert abs(float(v) - float(P[a, b])) <= 5e-4 + 1e-9, (
                            f"{where}: table ({a}, {b}) = {v}, the library gives {float(P[a, b]):.6f}")
            # axe-core on the figure, table open
            found = run_axe(page, context=".attnlib-explore", run_only=AX_WCAG, impacts=None)
            assert not found, f"{where}: axe-core finds " + "; ".join(
                f"{v['rule']} ({v['impact']}): {v['target']}" for v in found[:5])
            fig.evaluate("(f) => { f.querySelector('.ax-table').open = false; }")
    finally:
        context.close()
    assert not outside, f"{doc}: requests to other hosts: {outside}"
    assert not errors, f"{doc}: console errors:\n" + "\n".join(errors)


@browser_test
@pytest.mark.parametrize("doc", [d for d in EXPLORE_CHAPTERS if d in TOC_PAGES])
def test_interactive_figures_fit_a_phone(site, browser, build, doc):
    """At 390 × 844 on a touch screen: the heatmap is no wider than its card and shows every column, the readout
    sits right under it after a tap and stays on screen while the reader taps the last query token, and the help
    text says "Tap", never "Hover"."""
    if not _figures_in(build, doc):
        pytest.fail(f"{doc} has no interactive attention figure")
    outside: list[str] = []
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True,
                                  service_workers="block")
    context.route("**/*", lambda r: r.continue_() if _is_local(r.request.url, site)
                  else (outside.append(r.request.url), r.abort()))
    try:
        page = context.new_page()
        page.goto(site + f"{doc}.html", wait_until="load", timeout=30_000)
        assert page.evaluate("() => matchMedia('(hover: none)').matches"), "the phone context still hovers"
        for n, fig, data in each_figure(page):
            where = f"{doc}: figure {n} at 390 px"
            T = data["T"]
            box = fig.evaluate("""(f) => {
                const c = f.getBoundingClientRect(), cs = getComputedStyle(f);
                const inner = [c.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft),
                               c.right - parseFloat(cs.borderRightWidth) - parseFloat(cs.paddingRight)];
                const h = f.querySelector('svg.ax-heatmap').getBoundingClientRect();
                const cols = Array.from(f.querySelectorAll('rect.ax-cell')).map(r => r.getBoundingClientRect());
                return {card: [c.left, c.right], inner, heat: [h.left, h.right],
                        cellsRight: Math.max(...cols.map(r => r.right)),
                        scroll: f.scrollWidth - f.clientWidth, page: document.documentElement.scrollWidth,
                        help: Array.from(f.querySelectorAll('.ax-help span')).filter(s => s.offsetParent)
                                   .map(s => s.innerText)};
            }""")
            assert box["heat"][1] - box["heat"][0] <= box["inner"][1] - box["inner"][0] + 0.5, f"{where}: {box}"
            assert box["heat"][0] >= box["inner"][0] - 0.5 and box["heat"][1] <= box["inner"][1] + 0.5, box
            assert box["cellsRight"] <= box["inner"][1] + 0.5, f"{where}: the last column is cut off: {box}"
            assert box["scroll"] <= 1, f"{where}: the card scrolls sideways by {box['scroll']} px"
            assert box["help"] and all("hover" not in t.lower() for t in box["help"]), \
                f"{where}: the help shown on a phone says {box['help']}"
            assert any("Tap" in t for t in box["help"]), box["help"]
            # tap a cell of the last row: the readout is right under the heatmap, on screen
            fig.locator(f"rect.ax-cell[data-i='{T - 1}'][data-j='{T // 2}']").tap()
            spot = fig.evaluate("""(f) => {
                const h = f.querySelector('svg.ax-heatmap').getBoundingClientRect(),
                      r = f.querySelector('[aria-live="polite"]').getBoundingClientRect();
                return {gap: r.top - h.bottom, top: r.top, bottom: r.bottom, vh: innerHeight,
                        text: f.querySelector('[aria-live="polite"]').textContent};
            }""")
            assert READOUT.search(spot["text"]), f"{where}: a tap on a cell announces {spot['text']!r}"
            assert -1 <= spot["gap"] <= 40, f"{where}: the readout is {spot['gap']:.0f} px below the heatmap"
            assert 0 <= spot["top"] and spot["bottom"] <= spot["vh"], f"{where}: readout off screen: {spot}"
            # tap the last query token (far below on a phone): the readout is still on screen
            last = fig.locator(f"text.ax-query[data-i='{T - 1}']")
            last.scroll_into_view_if_needed()
            last.tap()
            spot = fig.evaluate("""(f) => { const r = f.querySelector('[aria-live="polite"]').getBoundingClientRect();
                return {top: r.top, bottom: r.bottom, vh: innerHeight,
                        text: f.querySelector('[aria-live="polite"]').textContent}; }""")
            assert AX_SUMMARY.search(spot["text"]) and AX_SUMMARY.search(spot["text"]).group(1) == str(T - 1), spot
            assert 0 <= spot["top"] and spot["bottom"] <= spot["vh"], f"{where}: readout off screen: {spot}"
    finally:
        context.close()
    assert not outside, outside


AX_TEXT_CONTRAST_JS = """(f) => {
  // Every piece of SVG text against what it sits on: a cell's number on its cell, the rest on the white card.
  const bg = getComputedStyle(f).backgroundColor, out = [];
  f.querySelectorAll('svg text').forEach(t => {
    if (!t.textContent || getComputedStyle(t).display === 'none') return;
    let under = bg;
    if (t.classList.contains('ax-cell-text')) {
      const x = +t.getAttribute('x'), y = +t.getAttribute('y');
      const cell = Array.from(f.querySelectorAll('rect.ax-cell')).find(r =>
        +r.getAttribute('x') <= x && x <= +r.getAttribute('x') + +r.getAttribute('width') &&
        +r.getAttribute('y') <= y && y <= +r.getAttribute('y') + +r.getAttribute('height'));
      under = getComputedStyle(cell).fill;
    }
    out.push([t.getAttribute('class') || '', t.textContent, getComputedStyle(t).fill, under]);
  });
  return out;
}"""


@browser_test
@pytest.mark.parametrize("doc", [d for d in EXPLORE_CHAPTERS if d in TOC_PAGES])
def test_interactive_figure_text_meets_4_5_to_1_at_every_weight(site, browser, build, doc):
    """The contrast of every text in the figure, computed in the page: cell numbers on their cells at every weight
    the controls reach (every τ of the slider, every switch, every head), masked key labels, the picked query,
    and axe-core's color-contrast on the figure's HTML text (controls, readout, help, table)."""
    if not _figures_in(build, doc):
        pytest.fail(f"{doc} has no interactive attention figure")


    outside: list[str] = []
    context, page = open_watched(browser, site, doc, outside)
    try:
        for n, fig, data in each_figure(page):
            where = f"{doc}: figure {n}"
            worst: dict[str, float] = {}
            bad: list[str] = []

            def measure(what: str, fig=fig, worst=worst, bad=bad) -> None:
                for cls, text, fg, under in fig.evaluate(AX_TEXT_CONTRAST_JS):
                    ratio = _contrast(fg, under)
                    kind = "cell number" if "ax-cell-text" in cls else (cls.split()[-1] if cls else "text")
                    worst[kind] = min(worst.get(kind, 99.0), ratio)
                    if ratio < 4.5:
                        bad.append(f"{what}: {kind} {text!r} {fg} on {under}: {ratio:.2f}")

            fig.locator(f"text.ax-query[data-i='{data['T'] // 2}']").hover()     # masked keys and a picked query
            measure("first state")
            if data["controls"]["temperature"]:
                lo, hi, step = data["tempRange"]
                for k in range(round((hi - lo) / step) + 1):
                    fig.locator("input.ax-temp").evaluate(
                        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }",
                        f"{lo + k * step:.1f}")
                    measure(f"tau {lo + k * step:.1f}")
            for switch in ("scale", "mask"):
                if data["controls"][switch]:
                    fig.locator(f"input.ax-{switch}").click()
                    measure(f"{switch} switched")
                    fig.locator(f"input.ax-{switch}").click()
            if data["L"] > 1 or data["h"] > 1:
                for layer in range(data["L"]):
                    for head in range(data["h"]):
                        if data["L"] > 1:
                            fig.locator("select.ax-layer").select_option(index=layer)
                        if data["h"] > 1:
                            fig.locator("select.ax-head").select_option(index=head)
                        measure(f"layer {layer} head {head}")
            assert not bad, f"{where}: text below 4.5:1:\n" + "\n".join(bad[:20])
            if data["T"] <= 10:
                assert "cell number" in worst, f"{where}: the cells show no numbers"
            fig.evaluate("(f) => { f.querySelector('.ax-table').open = true; }")
            for theme in ("light", "dark"):                   # the card stays white on the dark page
                page.evaluate("(t) => { document.documentElement.dataset.theme = t; }", theme)
                found = run_axe(page, context=".attnlib-explore", run_only=["color-contrast"], impacts=None)
                assert not found, f"{where}, {theme} theme: axe color-contrast: " + "; ".join(
                    f"{v['target']}: {v['why']}" for v in found[:5])
            page.evaluate("() => { document.documentElement.dataset.theme = 'light'; }")
            fig.evaluate("(f) => { f.querySelector('.ax-table').open = false; }")
    finally:
        context.close()
    assert not outside, outside


# ----------------------------------------------------------------------------------------------------------------
# Chapter 8's model, live in the page: the page's forward pass against the library's, on the weights it embeds
# ----------------------------------------------------------------------------------------------------------------

LIVE_DOC = "book/08_stack"
LIVE = "div.attnlib-live"
# Prompts of 1 and of 64 characters (the longest), capitals, characters outside the vocabulary (left out, and
# named), a new line, every kind of punctuation the fables have.
LIVE_PROMPTS = [
    "t",
    "the lion and the mouse",
    "The Lion, 2 µ said: \"run!\"",
    "once upon a time, a fox saw grapes hanging high on a vine; he sa",
    "a fox\nsaw the grapes (they were 7 feet up) - 'sour', he said",
    "Zeus? zzz! 1678 ;:",
]
# The page and the library run the same float16-rounded weights in float32; they differ only in the order of
# their sums (the page sums in double, then rounds) and in exp, erf, cos and sin of other code. A float32 rounding
# is 6e-8 of a value; through two blocks it stays near 1e-6 on logits of size ~10. 1e-4 leaves that a hundredfold
# room and is still five times below the 5e-4 that the 3 decimals the page prints can hide.
LIVE_TOLERANCE = 1e-4
LIVE_KEYSTROKE_MS = 50
LIVE_STATE_JS = """(f) => ({text: f.attnlibLive.text(), probs: f.attnlibLive.probs(),
                            weights: f.attnlibLive.weights()})"""
# A keystroke's time, from its keydown event: to its answer computed and laid out (the listener below runs after the
# figure's own and asks for the layout), and to the end of the frame that paints it.
LIVE_TIMER_JS = """(f) => { const box = f.querySelector('textarea'); let t0 = 0; f.axTimes = [];
  document.addEventListener('keydown', (e) => { t0 = e.timeStamp; }, true);
  box.addEventListener('input', () => { const start = t0; f.getBoundingClientRect();
    const laid = performance.now() - start;
    requestAnimationFrame(() => setTimeout(() => f.axTimes.push([laid, performance.now() - start]), 0)); }); }"""


def _live_reference(page, fig):
    """The library's model rebuilt from the weights in the page (attnlib.live.page_model), and the vocabulary."""
    from attnlib.live import page_model

    data = json.loads(fig.locator('script[type="application/json"]').text_content())
    return page_model(data), data


def _live_expected(model, vocab, text):
    """Next-character probabilities (V,) and weights (L, h, T, T) of the library for the text the page runs."""
    import torch

    from attnlib.induction import head_weights

    ids = torch.tensor([[vocab.index(c) for c in text]])
    with torch.no_grad():
        probs = torch.softmax(model(ids)[0, -1].double(), -1)
        P = head_weights(model, ids)[:, 0].double()
    return ids, probs, P


def _live_type(fig, text):
    box = fig.locator("textarea.ax-live-text")
    box.fill(text)
    return fig.evaluate(LIVE_STATE_JS)


@dataclasses.dataclass
class LivePage:
    page: object
    fig: object
    outside: list
    errors: list


@pytest.fixture(scope="module")
def live_page(site, browser, build):
    """Chapter 8 loaded once for the live figure's tests (a desktop window; the phone check resizes it)."""
    if LIVE_DOC not in TOC_PAGES or 'class="attnlib-explore attnlib-live"' not in \
            (build.html / f"{LIVE_DOC}.html").read_text(encoding="utf-8"):
        pytest.fail(f"{LIVE_DOC} holds no live model")
    outside: list[str] = []
    errors: list[str] = []
    context, page = open_watched(browser, site, LIVE_DOC, outside, errors)
    fig = page.locator(LIVE)
    fig.scroll_into_view_if_needed()
    try:
        yield LivePage(page, fig, outside, errors)
    finally:
        context.close()


@browser_test
def test_live_model_computes_what_the_library_computes(live_page):
    """On chapter 8's live figure: for six prompts the page's next-character probabilities and every head's
    weights equal the library's on the page's own weights within 1e-4; Continue at τ = 0 writes the 20 characters
    GPT.generate picks; sampling with a seed gives the same characters every time; a keystroke past 64 characters
    is refused where the reader sees it; every keystroke at 64 characters is answered (computed and laid out)
    within 50 ms of its key event."""
    import torch

    from attnlib.live import page_text

    page, fig = live_page.page, live_page.fig
    assert fig.count() == 1 and fig.get_attribute("data-ax-ready") == "1"
    model, data = _live_reference(page, fig)
    vocab, L, h = data["vocab"], data["config"]["L"], data["config"]["h"]
    gaps = {}
    for prompt in LIVE_PROMPTS:
        shown = _live_type(fig, prompt)
        runs, left = page_text(prompt, vocab)
        assert shown["text"] == runs, f"{prompt!r}: the page runs {shown['text']!r}, the rule gives {runs!r}"
        note = fig.locator(".ax-live-note").inner_text()
        assert all(c in note for c in left) and (("Left out" in note) == bool(left)), (prompt, note)
        _, probs, P = _live_expected(model, vocab, runs)
        page_P = torch.tensor(shown["weights"], dtype=torch.float64)
        assert page_P.shape == (L, h, len(runs), len(runs))
        gap_p = float((torch.tensor(shown["probs"], dtype=torch.float64) - probs).abs().max())
        gap_w = float((page_P - P).abs().max())
        gaps[prompt] = (len(runs), gap_p, gap_w)
        assert gap_p <= LIVE_TOLERANCE and gap_w <= LIVE_TOLERANCE, f"{prompt!r}: {gaps[prompt]}"
        # what the reader sees: the ten most likely, to 3 decimals, and the heatmap of the picked head
        top = torch.argsort(-probs, stable=True)[:10].tolist()
        bars = fig.locator(".ax-live-p").all_inner_texts()
        assert [float(b) for b in bars] == pytest.approx([float(probs[i]) for i in top], abs=5e-4 + 1e-9)
        assert fig.locator("rect.ax-cell:not([aria-hidden])").count() == len(runs) ** 2
    assert len(LIVE_PROMPTS[3]) == 64 and gaps[LIVE_PROMPTS[3]][0] == 64 and gaps["t"][0] == 1
    # an empty box: no prediction, no picture, a sentence that says what to do (and no error, checked below)
    assert _live_type(fig, "")["probs"] is None
    assert "Type a character" in fig.locator(".ax-live-heading").inner_text()
    assert fig.locator("rect.ax-cell").count() == 0
    # Continue at τ = 0: GPT.generate's characters (their top two logits far apart, so the test means it)
    for prompt in ("the lion ", "a fox saw"):
        _live_type(fig, prompt)
        fig.locator("button.ax-live-go").click()
        ids = torch.tensor([[vocab.index(c) for c in prompt]])
        want = model.generate(ids, 20)
        with torch.no_grad():
            top2 = model(want[:, :-1])[0, ids.shape[1] - 1:].topk(2, -1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 100 * LIVE_TOLERANCE
        got = fig.evaluate("(f) => f.attnlibLive.text()")
        assert got == "".join(vocab[i] for i in want[0].tolist()), (got, prompt)
        assert "Added 20 characters" in fig.locator(".ax-live-note").inner_text()
    # sampling: the same text, τ and seed give the same characters; another seed others
    fig.locator("input.ax-live-temp").evaluate(
        "(el) => { el.value = '0.8'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
    assert "drawn from softmax" in fig.locator(".ax-live-tau").inner_text()
    drawn = {}
    for seed in ("3", "3", "4"):
        _live_type(fig, "the lion ")
        fig.locator("input.ax-live-seed").fill(seed)
        fig.locator("button.ax-live-go").click()
        drawn.setdefault(seed, []).append(fig.evaluate("(f) => f.attnlibLive.text()"))
    assert drawn["3"][0] == drawn["3"][1] and drawn["3"][0] != drawn["4"][0], drawn
    assert all(len(t) == 29 and t.startswith("the lion ") for t in drawn["3"] + drawn["4"])
    # the limit: a keystroke past 64 characters is refused, visibly
    longest = LIVE_PROMPTS[3]
    _live_type(fig, longest)
    box = fig.locator("textarea.ax-live-text")
    box.click()
    page.keyboard.press("End")
    page.keyboard.type("x")
    assert fig.evaluate("(f) => f.attnlibLive.text()") == longest and box.input_value() == longest
    note = fig.locator(".ax-live-note")
    assert note.is_visible() and "Refused: 64 characters at most" in note.inner_text()
    assert fig.locator(".ax-live-count").inner_text() == "64 / 64"
    # every keystroke at the longest text: delete the last character, type one, type one that is refused;
    # after six to warm up, 21 of them, the best of three rounds (another test may load the machine a moment)
    for k in range(6):
        page.keyboard.press(("Backspace", "e")[k % 2])
    fig.evaluate(LIVE_TIMER_JS)
    rounds = []
    for _ in range(3):
        fig.evaluate("(f) => { f.axTimes = []; }")
        for k in range(21):
            page.keyboard.press(("Backspace", "e", "x")[k % 3])
            page.wait_for_timeout(60)
        page.wait_for_function("() => document.querySelector('div.attnlib-live').axTimes.length >= 21",
                               timeout=5_000)
        rounds.append(fig.evaluate("(f) => f.axTimes.slice()"))
        if max(t for t, _ in rounds[-1]) < LIVE_KEYSTROKE_MS:
            break
    best = min(rounds, key=lambda r: max(t for t, _ in r))
    laid = sorted(round(t) for t, _ in best)
    framed = sorted(round(t) for _, t in best)
    assert laid[-1] < LIVE_KEYSTROKE_MS, f"keystrokes at 64 characters: answers laid out after {laid} ms " \
                                         f"(frames painted after {framed} ms)"
    assert fig.evaluate("(f) => f.attnlibLive.text()") == longest[:-1] + "e"
    assert not live_page.outside, f"requests to other hosts: {live_page.outside}"
    assert not live_page.errors, "console errors:\n" + "\n".join(live_page.errors)


@browser_test
def test_live_model_from_the_keyboard_and_on_a_phone(live_page):
    """The live figure's heads are buttons that pick the heatmap, the heatmap is the grid every figure has (Tab,
    arrows, a readout with the library's weight, the table), axe-core finds nothing in it; at 390 px with 64
    characters nothing scrolls sideways but the heatmap's own box, and its cells stay big enough to tap."""
    page, fig = live_page.page, live_page.fig
    model, data = _live_reference(page, fig)
    text = "a lion ran"                                                    # a short text keeps axe-core quick
    _live_type(fig, text)
    _, _, P = _live_expected(model, data["vocab"], text)
    thumbs = fig.locator("button.ax-live-thumb")
    assert thumbs.count() == data["config"]["L"] * data["config"]["h"]
    thumbs.nth(6).click()                                              # block 2 head 2 (model.blocks[1])
    assert thumbs.nth(6).get_attribute("aria-pressed") == "true"
    assert fig.locator("button.ax-live-thumb[aria-pressed='true']").count() == 1
    label = fig.locator("svg.ax-heatmap").get_attribute("aria-label")
    assert label == f"attention weights of block 2 head 2 over {len(text)} tokens", label
    assert fig.locator("select.ax-layer").input_value() == "1" and fig.locator("select.ax-head").input_value() == "2"
    # the keyboard: from the box, Tab reaches the heatmap's one tab stop; the arrows read the library's weights
    fig.locator("textarea.ax-live-text").focus()
    for _ in range(20):
        page.keyboard.press("Tab")
        facts = fig.evaluate(AX_FOCUS_JS)
        if facts["cell"] is not None:
            break
    T = len(text)
    assert facts["cell"] == [T - 1, 0], f"Tab did not reach the heatmap (focus on {facts['tag']})"
    i, j = T - 1, 0
    for key, di, dj in (("ArrowRight", 0, 1), ("ArrowUp", -1, 0), ("ArrowRight", 0, 1), ("End", 0, None)):
        page.keyboard.press(key)
        i, j = i + di, (T - 1 if dj is None else j + dj)
        facts = fig.evaluate(AX_FOCUS_JS)
        assert facts["cell"] == [i, j] and facts["cellStops"] == [[i, j]], (key, facts)
        _ax_check_announced(facts["live"], i, j, P[1, 2], True, f"live figure, {key}")
    fig.evaluate("(f) => { f.querySelector('.ax-table').open = true; }")
    page.wait_for_function("() => document.querySelector('div.attnlib-live .ax-table td')")
    cells = fig.evaluate("(f) => Array.from(f.querySelector('.ax-table tbody').rows).map(r => "
                         "Array.from(r.cells).slice(1).map(c => c.textContent))")
    assert len(cells) == T and all(len(r) == T for r in cells)
    for a in range(T):
        for b in range(T):
            v = cells[a][b]
            assert v == "\u2014" if b > a else abs(float(v) - float(P[1, 2, a, b])) <= 5e-4 + 1e-9, (a, b, v)
    found = run_axe(page, context=LIVE, run_only=AX_WCAG, impacts=None)
    assert not found, "axe-core finds in the live figure: " + "; ".join(
        f"{v['rule']} ({v['impact']}): {v['target']}" for v in found[:5])
    fig.evaluate("(f) => { f.querySelector('.ax-table').open = false; }")
    # a phone's width, the longest text
    page.set_viewport_size(PHONE)
    _live_type(fig, LIVE_PROMPTS[3])
    fig.scroll_into_view_if_needed()
    box = fig.evaluate("""(f) => { const h = f.querySelector('.ax-heat');
        return {page: document.documentElement.scrollWidth, card: f.scrollWidth - f.clientWidth,
                heat: [h.scrollWidth, h.clientWidth], cell: f.querySelector('rect.ax-cell')
                .getBoundingClientRect().width}; }""")
    assert box["page"] <= PHONE["width"] and box["card"] <= 1, f"the phone scrolls sideways: {box}"
    assert box["cell"] >= 7, f"cells of {box['cell']:.1f} px are too small to tap: {box}"
    target = fig.locator("rect.ax-cell[data-i='63'][data-j='40']")
    target.scroll_into_view_if_needed()
    target.click()
    m = READOUT.search(fig.locator(".ax-readout").inner_text())
    assert m and (m.group(1), m.group(2)) == ("63", "40"), fig.locator(".ax-readout").inner_text()
    page.set_viewport_size({"width": 1280, "height": 800})
    assert not live_page.outside, f"requests to other hosts: {live_page.outside}"
    assert not live_page.errors, "console errors:\n" + "\n".join(live_page.errors)
