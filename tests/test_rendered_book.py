"""The rendered book, as a reader sees it.

One strict build (`jupyter-book build . -W -n --keep-going`) into a temporary folder, then every page opened in
headless Chromium with all traffic to other hosts blocked: math typeset by the local MathJax, images loaded,
a Colab link on every chapter that opens its learner edition, no broken internal link or anchor, no console
errors, search working, download and copy buttons present, plots readable in the dark theme, no code block wider
than its column at a 1280 px desktop viewport, and the verdict glyphs ✓ and ✗ drawn with a font that has them.
Every reader: axe-core finds no serious or critical violation at desktop or phone width (390 px), no page scrolls
sideways on a phone, every image has alt text that says what it shows, and print cuts no line of code.

Screenshots for book/how_to_use.md are taken here too. They are written to book/images/ only with
UPDATE_SCREENSHOTS=1 (`make screenshots`); otherwise they go to a temporary folder and the committed ones
are checked to be valid PNGs.

Locally the browser tests skip when Chromium or playwright is missing; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import html.parser
import pathlib
import re
import shutil
import struct
import subprocess
import urllib.parse

import pytest

# ruff: noqa: F811  (the fixtures imported below are requested by name as test arguments)
from book_in_browser import (  # noqa: F401
    CHAPTERS,
    HARMLESS_OUTSIDE_REQUESTS,
    IN_CI,
    PAGES,
    SCREENSHOTS,
    TOC_PAGES,
    UPDATE_SCREENSHOTS,
    _browser_missing,
    browser,
    browser_test,
    build,
    hide_floating_buttons,
    is_chapter,
    new_page,
    site,
    visits,
    wait_for_images,
    wait_for_math,
)
from helpers import BOOK, ROOT, config, repo_url


def test_book_builds_with_zero_warnings(build):
    if build.warnings:
        pytest.fail(f"the strict build printed {len(build.warnings)} warning(s):\n" + "\n".join(build.warnings))
    assert build.returncode == 0, f"the build failed (exit {build.returncode}):\n{build.log[-4000:]}"
    for doc in TOC_PAGES:
        assert (build.html / f"{doc}.html").is_file(), f"{doc}.html was not written"

# ----------------------------------------------------------------------------------------------------------------
# Per-page checks
# ----------------------------------------------------------------------------------------------------------------



@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_request_to_another_host(visits, doc):
    v = visits[doc]
    unexpected = sorted({u for u in v.outside if not any(u.startswith(h) for h in HARMLESS_OUTSIDE_REQUESTS)})
    assert not unexpected, f"{doc}: the page tried to load from other hosts (blocked):\n" + "\n".join(unexpected)


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_math_is_typeset_offline(visits, doc):
    f = visits[doc].facts
    assert not f["problems"], f"{doc}: {f['problems']}"
    assert f["mjx"] == f["math"], (f"{doc}: {f['math']} math nodes but {f['mjx']} typeset by MathJax "
                                   f"(scripts: {f['mathjaxScripts']})")
    assert not f["merror"], f"{doc}: MathJax could not typeset: {f['merror']}"
    if f["math"]:
        remote = [s for s in f["mathjaxScripts"] if not s.startswith("http://127.0.0.1")]
        assert not remote, f"{doc}: MathJax is not the local copy: {remote}"


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_every_image_loads(visits, doc):
    bad = visits[doc].facts["badImages"]
    assert not bad, f"{doc}: images that did not load: {bad}"


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_broken_internal_link_or_anchor(visits, doc):
    broken = visits[doc].broken_links
    assert not broken, f"{doc}: broken internal links:\n" + "\n".join(broken)


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_console_errors(visits, doc):
    errors = visits[doc].errors
    assert not errors, f"{doc}: console errors:\n" + "\n".join(errors)


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_serious_accessibility_violation_at_desktop_or_phone_width(visits, doc):
    f = visits[doc].facts
    bad = [(width, v["rule"], v["target"], v["html"]) for width, found in (("desktop", f["axe"]),
                                                                          ("phone", f["axePhone"]))
           for v in found]
    assert not bad, f"{doc}: axe-core's serious or critical violations:\n" + "\n".join(map(str, bad))


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(visits, doc):
    s = visits[doc].facts["sideways"]
    assert s["width"] <= s["viewport"] + 1, f"{doc}: {s['width']} px wide at {s['viewport']} px: {s['culprits']}"


FILE_NAME = re.compile(r"(\.(png|svg|jpe?g|gif)$)|_images/|^[0-9a-f]{16,}", re.I)


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_every_image_has_alt_text_that_says_what_it_shows(visits, doc):
    bad = [a for a in visits[doc].facts["alts"]
           if not a["alt"] or FILE_NAME.search(a["alt"].strip()) or len(a["alt"].split()) < 4]
    assert not bad, f"{doc}: images whose alt text is missing or a file name: {bad}"


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_print_keeps_every_character_of_the_code(visits, doc):
    cut = visits[doc].facts["printCut"]
    assert not cut, f"{doc}: {len(cut)} code block(s) cut at the right edge in print, e.g. {cut[:3]}"


@browser_test
@pytest.mark.parametrize("doc", CHAPTERS)
def test_plots_have_an_opaque_background(visits, doc):
    """attnlib.setup() gives figures an opaque white background, readable on the light and the dark theme."""
    bad = visits[doc].facts["seeThroughPlots"]
    assert not bad, f"{doc}: plots with a transparent background (was attnlib.setup() called first?): {bad}"


def learner_notebook(doc: str) -> str:
    """The learner edition of a chapter ("book/04_mask" → "learner/04_mask.ipynb"): what Colab should open."""
    return f"learner/{doc.rsplit('/', 1)[-1]}.ipynb"


@browser_test
@pytest.mark.parametrize("doc", CHAPTERS)
def test_chapter_has_an_open_in_colab_link_to_the_learner_edition(visits, doc):
    owner_repo = urllib.parse.urlsplit(repo_url()).path.strip("/")
    branch = config()["repository"].get("branch", "main")
    target = learner_notebook(doc)
    links = visits[doc].facts["colab"]
    good = [h for h in links if h.endswith(f"/blob/{branch}/{target}") and f"/github/{owner_repo}/" in h]
    assert good, f"{doc}: no Colab link to github/{owner_repo}/blob/{branch}/{target}; found {links}"
    assert (ROOT / target).is_file(), f"the Colab link opens {target}, which is not in the repository"
    wrong = [h for h in links if h.endswith(f"/{doc}.ipynb")]
    assert not wrong, f"{doc}: a Colab link opens the edition with solutions: {wrong}"


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_no_code_block_needs_horizontal_scrolling(visits, doc):
    """At a 1280 px desktop viewport every code cell and every output fits its column (dropdowns opened)."""
    over = visits[doc].facts["overflow"]
    assert not over, f"{doc}: {len(over)} code block(s) wider than the column at 1280 px:\n" + "\n".join(
        f"  {o['kind']} in {o['section']}: {o['px']} px too wide, longest line {o['chars']} characters: "
        f"{o['line']!r}" for o in over)


@browser_test
@pytest.mark.parametrize("doc", CHAPTERS)
def test_verdict_glyphs_are_in_the_checker_outputs(visits, doc):
    f = visits[doc].facts
    if not f["exercises"]:
        pytest.skip(f"{doc} has no exercise")
    text = f["outputText"]
    assert "✗ not yet: " in text, f"{doc}: no stub verdict ('✗ not yet: …') among the outputs"
    assert "✓ correct: " in text, f"{doc}: no solution verdict ('✓ correct: …') among the outputs"


@browser_test
@pytest.mark.parametrize("doc", TOC_PAGES)
def test_download_button_offers_the_source(visits, doc, build):
    downloads = visits[doc].facts["downloads"]
    sources = [h for h in downloads if "_sources/" in h]
    assert sources, f"{doc}: no download button for the page source; found {downloads}"
    if is_chapter(doc):
        assert any(h.split("?")[0].endswith(f"{doc}.ipynb") for h in sources), f"{doc}: {sources}"


@browser_test
@pytest.mark.parametrize("doc", PAGES)
def test_copy_buttons_on_every_code_block(visits, doc):
    f = visits[doc].facts
    assert f["copyButtons"] == f["codeBlocks"], f"{doc}: {f['codeBlocks']} code blocks, {f['copyButtons']} copy buttons"
    if is_chapter(doc):
        assert f["copyButtons"] > 0, f"{doc}: a chapter without a copy button"


# ----------------------------------------------------------------------------------------------------------------
# The verdict glyphs ✓ and ✗ have a real font
# ----------------------------------------------------------------------------------------------------------------

VERDICT_GLYPHS = {"✓": "2713", "✗": "2717"}


def fonts_covering(codepoint: str, mono: bool = False) -> set[str]:
    """Font families fontconfig says contain the code point (hex), e.g. fonts_covering("2713", mono=True)."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        _browser_missing("fontconfig's fc-list is not installed")
    pattern = f":charset={codepoint}" + (":spacing=mono" if mono else "")
    out = subprocess.run([fc_list, pattern, "family"], capture_output=True, text=True, check=True).stdout
    return {family.strip() for line in out.splitlines() for family in line.split(",") if family.strip()}


def test_an_installed_monospace_font_has_the_verdict_glyphs():
    for glyph, code in VERDICT_GLYPHS.items():
        assert fonts_covering(code, mono=True), (
            f"no installed monospace font has {glyph} (U+{code}): checker verdicts would show a box; install "
            f"DejaVu Sans Mono (Debian: fonts-dejavu-core)")


@browser_test
def test_verdict_glyphs_render_with_a_font_that_has_them(site, browser, build):
    """Chromium draws the glyphs of a verdict with fonts that contain them (not a box from a fallback font)."""
    covering = set.intersection(*(fonts_covering(code) for code in VERDICT_GLYPHS.values()))
    pages = _pages_with(build, "✓ correct: ")
    if not pages:
        _cannot_take("no chapter page shows a verdict '✓ correct: …'")
    outside: list[str] = []
    context, page = new_page(browser, site, outside)
    try:
        page.goto(site + f"{pages[0]}.html", wait_until="load")
        found = page.evaluate("""() => {
            const pre = Array.from(document.querySelectorAll('.cell_output pre'))
              .find(p => p.textContent.includes('✓ correct: '));
            if (!pre) return false;
            const probe = document.createElement('span');
            probe.id = 'verdict-glyph-probe';
            probe.textContent = '✓✗';
            pre.appendChild(probe);
            return true;
        }""")
        assert found, f"{pages[0]}: no output block holds '✓ correct: '"
        cdp = context.new_cdp_session(page)
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "#verdict-glyph-probe"})["nodeId"]
        used = {f["familyName"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]}
    finally:
        context.close()
    assert used, f"{pages[0]}: Chromium reports no font for the verdict glyphs"
    assert used <= covering, (f"{pages[0]}: the verdict glyphs are drawn with {sorted(used)}, but only "
                              f"{sorted(covering)} contain both ✓ and ✗")


# ----------------------------------------------------------------------------------------------------------------
# Search
# ----------------------------------------------------------------------------------------------------------------

@browser_test
def test_search_finds_attention(site, browser):
    outside: list[str] = []
    context, page = new_page(browser, site, outside)
    try:
        page.goto(site + "search.html?q=attention", wait_until="load", timeout=30_000)
        page.wait_for_selector("#search-results ul.search li", timeout=20_000)
        hits = page.locator("#search-results ul.search li").count()
        summary = page.inner_text("#search-results .search-summary")
    finally:
        context.close()
    assert hits > 0, summary
    assert not outside, outside


# ----------------------------------------------------------------------------------------------------------------
# Screenshots for "How to use this book", and plots in the dark theme
# ----------------------------------------------------------------------------------------------------------------

def png_size(path: pathlib.Path) -> tuple[int, int]:
    """(width, height) of a PNG file; raises AssertionError if it is not one."""
    data = path.read_bytes()[:33]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])


def _cannot_take(msg: str):
    """A screenshot that cannot be taken: a failure in CI or when retaking screenshots, a skip otherwise."""
    if IN_CI or UPDATE_SCREENSHOTS:
        pytest.fail(msg)
    pytest.skip(msg)


def assert_size(path: pathlib.Path, width: tuple[int, int], height: tuple[int, int]) -> None:
    w, h = png_size(path)
    assert width[0] <= w <= width[1] and height[0] <= h <= height[1], (
        f"{path.name} is {w}×{h} px; expected a width in {width} and a height in {height}")


def _pages_with(build, needle: str) -> list[str]:
    return [d for d in CHAPTERS if needle in (build.html / f"{d}.html").read_text(encoding="utf-8")]


def _plot_page(build) -> str | None:
    pages = [d for d in CHAPTERS if re.search(r'class="cell_output[^"]*"[^>]*>\s*(?:<div[^>]*>\s*)*<img',
                                              (build.html / f"{d}.html").read_text(encoding="utf-8"))]
    return pages[0] if pages else None


@pytest.fixture(scope="module")
def shots_dir(tmp_path_factory) -> pathlib.Path:
    if UPDATE_SCREENSHOTS:
        (BOOK / "images").mkdir(exist_ok=True)
        return BOOK / "images"
    return tmp_path_factory.mktemp("screenshots")


@browser_test
def test_screenshot_launch_menu(site, browser, build, shots_dir):
    doc = _plot_page(build) or CHAPTERS[0]
    outside: list[str] = []
    context, page = new_page(browser, site, outside, width=1200, height=600)   # both sidebars and the article
    try:
        page.goto(site + f"{doc}.html", wait_until="load")
        wait_for_math(page)
        page.locator(".dropdown-launch-buttons button").first.click()
        page.locator(".dropdown-launch-buttons a[href*='colab']").first.wait_for(state="visible", timeout=5_000)
        page.wait_for_timeout(300)
        hide_floating_buttons(page)
        page.screenshot(path=str(shots_dir / "launch-buttons.png"))
    finally:
        context.close()
    assert_size(shots_dir / "launch-buttons.png", width=(1200, 1200), height=(600, 600))   # the viewport


@browser_test
def test_screenshot_exercise_with_solution_open(site, browser, build, shots_dir):
    pages = _pages_with(build, "solution dropdown")
    if not pages:
        _cannot_take("no chapter page has the class 'solution dropdown' (sphinx-exercise's gated solution): "
                     "cannot take exercise-solution.png")
    outside: list[str] = []
    context, page = new_page(browser, site, outside, width=1100, height=900)
    try:
        page.goto(site + f"{pages[0]}.html", wait_until="load")
        wait_for_math(page)
        solution = page.locator("div.solution.dropdown").first
        solution.locator("button.toggle-button").first.click()
        page.wait_for_timeout(400)
        hide_floating_buttons(page)
        page.add_style_tag(content=".bd-header-article { visibility: hidden !important; }")   # sticky, would cover
        box = page.evaluate("""() => {
            const sol = document.querySelector('div.solution.dropdown');
            const all = Array.from(document.querySelectorAll('div.exercise'));
            const ex = all.filter(e => e.compareDocumentPosition(sol) & Node.DOCUMENT_POSITION_FOLLOWING).pop() || sol;
            window.scrollTo(0, ex.getBoundingClientRect().top + window.scrollY - 16);
            const a = ex.getBoundingClientRect(), b = sol.getBoundingClientRect();
            return {y: a.top + window.scrollY, bottom: b.bottom + window.scrollY};
        }""")
        article = page.locator("article.bd-article").bounding_box()
        top = max(box["y"] - 12, 0)
        height = min(box["bottom"] - top + 16, 1400)
        page.screenshot(path=str(shots_dir / "exercise-solution.png"), full_page=True,
                        clip={"x": max(article["x"] - 4, 0), "y": top, "width": min(article["width"] + 8, 1100),
                              "height": height})
    finally:
        context.close()
    # the article column at a 1100 px viewport, from the exercise's title to the end of its open solution
    assert_size(shots_dir / "exercise-solution.png", width=(500, 1100), height=(150, 1400))


OPAQUE_CORNERS_JS = """() => Array.from(document.querySelectorAll('.cell_output img')).map(img => {
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  const corners = [[0, 0], [c.width - 1, 0], [0, c.height - 1], [c.width - 1, c.height - 1]];
  return {src: img.getAttribute('src').split('/').pop(), filter: getComputedStyle(img).filter,
          alpha: corners.map(([x, y]) => g.getImageData(x, y, 1, 1).data[3])};
})"""


@browser_test
def test_screenshot_dark_theme_plots_are_legible(site, browser, build, shots_dir):
    """Plots keep their opaque white background (attnlib.setup()) and are not dimmed by the dark theme."""
    doc = _plot_page(build)
    if doc is None:
        _cannot_take("no chapter page has an image inside a 'cell_output': cannot take plot-dark-theme.png")
    outside: list[str] = []
    context, page = new_page(browser, site, outside, width=1100, height=700)
    # the reader's choice of the dark theme, as the theme switch stores it, in place before the page loads
    context.add_init_script("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
    try:
        page.goto(site + f"{doc}.html", wait_until="load")
        wait_for_math(page)
        wait_for_images(page)
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        page.evaluate("""() => {
            const img = document.querySelector('.cell_output img');
            window.scrollTo(0, img.getBoundingClientRect().top + window.scrollY - 180);
        }""")
        page.wait_for_timeout(300)
        hide_floating_buttons(page)
        page.screenshot(path=str(shots_dir / "plot-dark-theme.png"))
        plots = page.evaluate(OPAQUE_CORNERS_JS)
    finally:
        context.close()
    assert_size(shots_dir / "plot-dark-theme.png", width=(1100, 1100), height=(700, 700))   # the viewport
    assert plots, f"{doc}: no plot found in the dark theme"
    dimmed = [p["src"] for p in plots if p["filter"] not in ("none", "")]
    see_through = [p["src"] for p in plots if min(p["alpha"]) < 255]
    assert not dimmed, f"{doc}: the dark theme dims these plots (book/_static/custom.css should stop it): {dimmed}"
    assert not see_through, (f"{doc}: plots with a transparent background (call attnlib.setup() before plotting): "
                             f"{see_through}")


def test_committed_screenshots_are_valid_pngs():
    text = (BOOK / "how_to_use.md").read_text()
    for name in SCREENSHOTS:
        path = BOOK / "images" / name
        assert path.is_file(), f"{path.relative_to(ROOT)} is missing; run `make screenshots`"
        w, h = png_size(path)
        assert 400 <= w <= 4000 and 200 <= h <= 4000, (name, w, h)
        assert f"images/{name}" in text, f"how_to_use.md does not show {name}"


# ----------------------------------------------------------------------------------------------------------------
# No notebook output is silently dropped
# ----------------------------------------------------------------------------------------------------------------

REMOVED_CELL_TAGS = {"remove-cell", "remove_cell"}
REMOVED_OUTPUT_TAGS = {"remove-output", "remove_output"}


class _CellOutputs(html.parser.HTMLParser):
    """For every rendered code cell of a page, in order: how many outputs its ``cell_output`` box shows."""

    def __init__(self):
        super().__init__()
        self.cells: list[int] = []          # per div.cell: children of its div.cell_output (0 when it has none)
        self._stack: list[tuple[str, str]] = []   # (tag, role) of every open element

    VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr", "area", "col", "embed", "param", "track"}

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        parent = self._stack[-1][1] if self._stack else ""
        if parent == "output-box":
            self.cells[-1] += 1
        role = ("cell" if tag == "div" and "cell" in classes and "docutils" in classes else
                "output-box" if tag == "div" and "cell_output" in classes else "")
        if role == "cell":
            self.cells.append(0)
        if tag not in self.VOID:
            self._stack.append((tag, role))

    def handle_startendtag(self, tag, attrs):
        if self._stack and self._stack[-1][1] == "output-box":
            self.cells[-1] += 1

    def handle_endtag(self, tag):
        for k in range(len(self._stack) - 1, -1, -1):
            if self._stack[k][0] == tag:
                del self._stack[k:]
                break


def _notebook_outputs(path: pathlib.Path) -> list[tuple[str, list[dict]]]:
    """(cell id, outputs as the book renders them) for every code cell the page shows, in order."""
    import copy

    import nbformat
    from myst_nb.core.utils import coalesce_streams

    merge = config().get("sphinx", {}).get("config", {}).get("nb_merge_streams", False)
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type != "code" or tags & REMOVED_CELL_TAGS:
            continue
        outputs = [] if tags & REMOVED_OUTPUT_TAGS else copy.deepcopy(cell.get("outputs", []))
        outputs = [o for o in outputs if not (o.get("output_type") == "stream" and
                                             f"remove-{o.get('name')}" in tags)]
        cells.append((cell.get("id", "?"), coalesce_streams(outputs) if merge else outputs))
    return cells


def test_every_notebook_output_has_a_renderable_type():
    """myst-nb silently skips a display output of a MIME type it does not know: none may have only such types."""
    from myst_nb.core.render import base_render_priority

    known = base_render_priority()["html"]
    dropped = []
    for doc in TOC_PAGES:
        path = ROOT / f"{doc}.ipynb"
        if not path.is_file():
            continue
        for cell_id, outputs in _notebook_outputs(path):
            for out in outputs:
                if out["output_type"] in ("display_data", "execute_result"):
                    mimes = sorted(out.get("data", {}))
                    if not any(known.get(m) is not None for m in mimes):
                        dropped.append(f"{doc}, cell {cell_id}: {mimes}")
    assert not dropped, "outputs that the HTML book would drop (no MIME type myst-nb renders):\n" + "\n".join(
        dropped)


def test_no_notebook_output_is_dropped_from_the_rendered_page(build):
    """Every rendered code cell shows at least as many outputs as its notebook cell holds (streams merged as the
    book merges them); cells without outputs show none."""
    problems = []
    checked = 0
    for doc in TOC_PAGES:
        path = ROOT / f"{doc}.ipynb"
        if not path.is_file():
            continue
        page = build.html / f"{doc}.html"
        if not page.is_file():
            problems.append(f"{doc}: no page was written")
            continue
        parser = _CellOutputs()
        parser.feed(page.read_text(encoding="utf-8"))
        cells = _notebook_outputs(path)
        if len(parser.cells) != len(cells):
            problems.append(f"{doc}: {len(cells)} code cells in the notebook, {len(parser.cells)} on the page")
            continue
        for (cell_id, outputs), shown in zip(cells, parser.cells):
            checked += 1
            if shown < len(outputs) or (shown > 0) != (len(outputs) > 0):
                problems.append(f"{doc}, cell {cell_id}: {len(outputs)} output(s) in the notebook "
                                f"({[o['output_type'] for o in outputs]}), {shown} shown on the page")
    assert checked > 100, f"only {checked} code cells compared: did the page structure change?"
    assert not problems, "\n".join(problems)
