"""The built book in headless Chromium: one strict build shared by every test and worker, a local server,
the browser, and what a visit to a page finds. Used by test_rendered_book.py and test_figures_in_browser.py."""

from __future__ import annotations

import dataclasses
import functools
import html.parser
import http.server
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import yaml

from helpers import ROOT

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
UPDATE_SCREENSHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
INSTALL_HINT = ("install Debian's Chromium (`sudo apt-get install chromium`) and the Python requirements "
                "(`make setup`, which installs playwright); no browser download is needed")

# Screenshots shown on the "How to use this book" page (book/images/<name>).
SCREENSHOTS = {
    "launch-buttons.png": "a chapter with the launch menu open (the Colab button)",
    "exercise-solution.png": "an exercise with its checker output and the solution dropdown open",
    "plot-dark-theme.png": "a chapter plot in the dark theme",
}

# Requests to other hosts that are known and harmless. None is needed today: the book, MathJax included,
# is self-contained. Add an entry only with the reason next to it.
HARMLESS_OUTSIDE_REQUESTS: dict[str, str] = {}

# Console errors that come from the toolchain, not from the book, and break nothing the reader uses. None today:
# sphinx-thebe's doubled inline script, which used to redeclare THEBE_JS_URL, is removed by book/_ext/unique_scripts.py.
HARMLESS_CONSOLE_ERRORS: set[str] = set()

# axe-core (shipped inside the axe-playwright-python package: nothing is downloaded) runs WCAG 2.1 A and AA and
# its best practices on every page, at a desktop and at a phone width, plus "label in name" (WCAG 2.5.3), which
# axe counts as experimental and leaves off by default. A serious or critical violation fails, and none is excused:
# where the theme's or docutils' markup broke a rule, book/_templates/ and book/_static/names.js correct it.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
AXE_EXPERIMENTAL = {"label-content-name-mismatch": True}
PHONE = {"width": 390, "height": 844}
A4 = {"width": 794, "height": 1123}   # an A4 page at 96 dpi

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WARNING_LINE = re.compile(r"\b(WARNING|ERROR|CRITICAL|SEVERE)\b:")


# ----------------------------------------------------------------------------------------------------------------
# Pages
# ----------------------------------------------------------------------------------------------------------------

def toc_pages() -> list[str]:
    """Every page of the table of contents in reading order, as document names ("book/01_embeddings")."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return [re.sub(r"\.(md|ipynb)$", "", p) for p in pages]


def is_chapter(doc: str) -> bool:
    """A page with runnable code: a notebook (the chapters, the pages after them, the capstone, the appendix)."""
    return (ROOT / f"{doc}.ipynb").is_file()


TOC_PAGES = toc_pages()
CHAPTERS = [d for d in TOC_PAGES if is_chapter(d)]
PAGES = TOC_PAGES + ["search", "genindex"]


# ----------------------------------------------------------------------------------------------------------------
# The build
# ----------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Build:
    returncode: int
    log: str
    warnings: list[str]
    html: pathlib.Path
    seconds: float


def _shared_folder(tmp_path_factory) -> pathlib.Path:
    """A folder that every pytest-xdist worker of this run shares (each worker's own temporary folder is one of its
    subfolders), or this process's own folder without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Build:
    """The book, built once for the whole run, strictly, into a temporary folder (never into the repository's
    _build). The browser tests are spread over the xdist workers, which share no fixtures: the first worker to get
    here builds under a file lock, and the others wait and read what it wrote."""
    from filelock import FileLock

    shared = _shared_folder(tmp_path_factory) / "rendered-book"
    shared.mkdir(exist_ok=True)
    result = shared / "build.json"
    with FileLock(str(shared / "build.lock")):
        if not result.exists():
            exe = pathlib.Path(sys.executable).with_name("jupyter-book")
            cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(ROOT), "-W", "-n", "--keep-going",
                   "--path-output", str(shared)]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "NO_COLOR": "1"})
            log = ANSI.sub("", proc.stdout + "\n" + proc.stderr)
            warnings = [line.strip() for line in log.splitlines() if WARNING_LINE.search(line)]
            result.write_text(json.dumps({"returncode": proc.returncode, "log": log, "warnings": warnings,
                                          "seconds": time.monotonic() - t0}))
    done = json.loads(result.read_text())
    return Build(done["returncode"], done["log"], done["warnings"], shared / "_build" / "html", done["seconds"])




# ----------------------------------------------------------------------------------------------------------------
# A local server and the browser
# ----------------------------------------------------------------------------------------------------------------

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(build):
    """The built HTML served on 127.0.0.1 at a free port; yields the base URL."""
    if not (build.html / "search.html").is_file():
        pytest.fail(f"the build wrote no HTML to show (exit {build.returncode}):\n{build.log[-3000:]}")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(build.html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _browser_missing(why: str):
    if IN_CI:
        pytest.fail(f"{why}: CI must run the rendered-book browser test ({INSTALL_HINT})")
    pytest.skip(f"{why}; to run the browser test, {INSTALL_HINT}")


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _browser_missing("the Python package playwright is not installed")
    if not pathlib.Path(CHROMIUM).exists():
        _browser_missing(f"Chromium is not installed at {CHROMIUM}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _is_local(url: str, base: str) -> bool:
    return url.startswith(base) or url.startswith(("data:", "blob:", "about:"))


def new_page(browser, base: str, outside: list[str], width: int = 1280, height: int = 800):
    """A fresh browser context and page that refuses (and records) every request to another host."""
    context = browser.new_context(viewport={"width": width, "height": height}, service_workers="block")

    def route(r):
        url = r.request.url
        if _is_local(url, base):
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    context.route("**/*", route)
    return context, context.new_page()


def open_watched(browser, base: str, doc: str, outside: list[str], errors: list[str] | None = None,
                 failed_responses: bool = False):
    """A fresh context and page on ``doc``, loaded: requests to other hosts go to ``outside``; console errors,
    uncaught exceptions and (with ``failed_responses``) responses of status 400 or more go to ``errors``."""
    context, page = new_page(browser, base, outside)
    try:
        if errors is not None:
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            if failed_responses:
                page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
            page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        page.goto(base + f"{doc}.html", wait_until="load", timeout=30_000)
    except BaseException:
        context.close()
        raise
    return context, page


def hide_floating_buttons(page):
    """What floats over a screenshot or repeats the sidebar: the "back to top" button, the "skip to main content"
    link (shown while it has the focus) and the header bar, whose search box repeats the sidebar's."""
    page.add_style_tag(content="#pst-back-to-top, #pst-skip-link, header.bd-header { display: none !important; }")


def wait_for_math(page):
    """Wait until MathJax has typeset the page (no-op on pages without math)."""
    if not page.evaluate("() => document.querySelectorAll('.math').length"):
        return
    page.wait_for_function("() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise",
                           timeout=20_000)
    page.evaluate("() => window.MathJax.startup.promise.then(() => true)")


def wait_for_images(page):
    page.evaluate("""() => Promise.all(Array.from(document.images).map(img => {
        img.loading = 'eager';
        if (img.complete) return null;
        return new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); });
    }))""")


PAGE_FACTS_JS = """() => {
  const q = s => Array.from(document.querySelectorAll(s));
  return {
    math: q('.math').length,
    mjx: q('mjx-container').length,
    merror: q('mjx-merror').map(e => e.getAttribute('data-mjx-error') || e.textContent.slice(0, 120)),
    badImages: q('img').filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    links: q('a[href]').map(a => a.href),
    colab: q('a[href*="colab.research.google.com"]').map(a => a.getAttribute('href')),
    downloads: q('.dropdown-download-buttons a[href]').map(a => a.getAttribute('href')),
    codeBlocks: q('div.highlight pre').length,
    copyButtons: q('div.highlight button.copybtn').length,
    mathjaxScripts: q('script[src*="mathjax" i], script[src*="tex-" i]').map(s => s.src),
    seeThroughPlots: q('.cell_output img').filter(img => {
      const c = document.createElement('canvas');
      c.width = img.naturalWidth; c.height = img.naturalHeight;
      if (!c.width || !c.height) return false;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      return [[0, 0], [c.width - 1, 0], [0, c.height - 1], [c.width - 1, c.height - 1]]
        .some(([x, y]) => g.getImageData(x, y, 1, 1).data[3] < 255);
    }).map(img => img.getAttribute('src').split('/').pop()),
  };
}"""


# Opens every dropdown (solutions, hidden cells) so that the code inside is laid out and can be measured.
OPEN_DROPDOWNS_JS = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('button.toggle-button').forEach(b => b.classList.remove('toggle-button-hidden'));
}"""

# Code blocks, input or output, that need a horizontal scroll bar: the <pre>, or a box around it, is wider inside
# than it is shown. Each is reported with where it is and the first characters of its longest line.
OVERFLOW_JS = """() => Array.from(document.querySelectorAll('article pre')).map(pre => {
  const boxes = [pre, pre.closest('div.highlight'), pre.closest('.output, .cell_output, .cell_input')]
    .filter(Boolean);
  const shown = boxes.filter(b => b.clientWidth > 0);
  if (!shown.length) return null;
  const over = Math.max(...shown.map(b => b.scrollWidth - b.clientWidth));
  if (over <= 1) return null;
  const kind = pre.closest('.cell_output, .output') ? 'output' : pre.closest('.cell_input') ? 'input' : 'code';
  const lines = pre.textContent.split('\\n');
  const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
  const sol = pre.closest('div.solution');
  const exercise = sol && sol.querySelector('.admonition-title a[href*="#"], p.admonition-title a[href*="#"]');
  const section = sol ? 'the solution of #' + (exercise ? exercise.getAttribute('href').split('#').pop() : sol.id)
                      : '#' + ((pre.closest('section[id]') || {}).id || '');
  return {kind, px: over, width: pre.clientWidth, chars: longest.length, section,
          line: longest.trim().slice(0, 50)};
}).filter(Boolean)"""


# The page is wider than the viewport (it scrolls sideways), and which elements stick out: none inside a box that
# clips or scrolls counts, since the page itself does not move then.
SIDEWAYS_JS = """() => {
  const W = document.documentElement.clientWidth, out = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.right <= W + 1 || r.width === 0) continue;
    let p = e.parentElement, clipped = false;
    for (; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') { clipped = true; break; }
    }
    if (!clipped) out.push(e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : '')
                            + ': ' + (e.textContent || '').trim().slice(0, 60));
  }
  return {width: document.documentElement.scrollWidth, viewport: W, culprits: out.slice(0, 5)};
}"""

# Every image's alt text; one that is empty or reads like a file name says nothing to a screen reader.
ALTS_JS = """() => Array.from(document.querySelectorAll('article img')).map(i => ({
  src: (i.getAttribute('src') || '').split('/').pop(), alt: i.getAttribute('alt')}))"""

# In print, every code block shows every line in full: none is wider inside than the page shows.
PRINT_CUT_JS = """() => Array.from(document.querySelectorAll('article pre'))
  .filter(p => p.clientWidth > 0 && p.scrollWidth > p.clientWidth + 1)
  .map(p => p.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '').trim().slice(0, 60))"""


def run_axe(page, context: str | None = None, run_only=None, impacts=("serious", "critical"),
            **rules) -> list[dict]:
    """axe-core's violations on the page (or inside ``context``, a CSS selector), those of ``impacts`` (None: all):
    (rule, impact, selector, snippet, why) of each node. ``run_only`` is the rule set (AXE_TAGS by default);
    ``rules`` switch single rules on or off."""
    from axe_playwright_python.sync_playwright import Axe

    options = {"runOnly": run_only or {"type": "tag", "values": AXE_TAGS}, "resultTypes": ["violations"],
               "preload": False}   # no preload: axe would refetch the theme's @import, a 404 in the console
    rules = {**AXE_EXPERIMENTAL, **rules} if run_only is None else rules
    if rules:
        options["rules"] = {name: {"enabled": on} for name, on in rules.items()}
    found = Axe().run(page, context=context, options=options).response["violations"]
    return [{"rule": v["id"], "impact": v["impact"], "target": " ".join(map(str, n["target"])),
             "html": n["html"][:120], "why": n.get("failureSummary", "")[:160]}
            for v in found if impacts is None or v["impact"] in impacts for n in v["nodes"]]


@dataclasses.dataclass
class Visit:
    doc: str
    facts: dict
    errors: list[str]
    outside: list[str]
    broken_links: list[str]


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


@functools.cache
def _ids_in(path: pathlib.Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def broken_internal_links(links: list[str], base: str, root: pathlib.Path, current: pathlib.Path,
                          live_ids: set[str]) -> list[str]:
    """Local links whose file is missing, or whose #anchor is not an id in the target page.

    Ids are read from the HTML files; for the page itself, ids that its scripts add (``live_ids``) count too.
    """
    broken = []
    for href in sorted(set(links)):
        if not href.startswith(base) or href.startswith(base + "zh/"):
            continue     # another host: a link, not a dependency; or the Chinese book, which test_book_zh.py opens
        parts = urllib.parse.urlsplit(href)
        rel = urllib.parse.unquote(parts.path)[len(urllib.parse.urlsplit(base).path):]   # from the book's root
        target = root / rel
        if rel == "" or rel.endswith("/"):
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{href[len(base) - 1:]} (no such file)")
            continue
        anchor = urllib.parse.unquote(parts.fragment)
        if anchor and target.suffix == ".html" and anchor not in _ids_in(target):
            if not (target.resolve() == current.resolve() and anchor in live_ids):
                broken.append(f"{href[len(base) - 1:]} (no id {anchor!r} in {rel or 'index.html'})")
    return broken


def visit(browser, base: str, root: pathlib.Path, doc: str, translation: bool = False) -> Visit:
    """Open ``doc`` and gather what the tests read. A ``translation`` shares its code, colours and layout with the
    English page, which is checked in full; on it axe runs once, at the phone width and without its colour-contrast
    rule, and the code blocks are not measured again."""
    outside: list[str] = []
    errors: list[str] = []
    context, page = new_page(browser, base, outside)
    try:
        page.on("console", lambda m: m.type == "error" and errors.append((m.text, (m.location or {}).get("url", ""))))
        page.on("pageerror", lambda e: errors.append((f"uncaught: {e}", "")))
        page.goto(base + f"{doc}.html", wait_until="load", timeout=30_000)
        problems = []
        try:
            wait_for_math(page)
        except Exception as exc:  # noqa: BLE001 - reported as a finding of this page
            problems.append(f"MathJax did not finish: {str(exc).splitlines()[0]}")
        wait_for_images(page)
        page.wait_for_timeout(100)                        # late console messages
        facts = page.evaluate(PAGE_FACTS_JS)
        page_ids = set(page.evaluate("() => Array.from(document.querySelectorAll('[id]')).map(e => e.id)"))
        facts["outputText"] = page.evaluate(
            "() => Array.from(document.querySelectorAll('.cell_output')).map(e => e.textContent).join('\\n')")
        facts["exercises"] = page.evaluate("() => document.querySelectorAll('div.exercise').length")
        page.evaluate(OPEN_DROPDOWNS_JS)
        page.wait_for_timeout(50)
        facts["overflow"] = [] if translation else page.evaluate(OVERFLOW_JS)
        facts["alts"] = page.evaluate(ALTS_JS)
        facts["axe"] = [] if translation else run_axe(page)              # desktop, dropdowns open
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(50)
        facts["sideways"] = page.evaluate(SIDEWAYS_JS)
        facts["axePhone"] = run_axe(page, **{"color-contrast": False})  # colours do not change with the width
        facts["printCut"] = []
        if not translation:
            page.emulate_media(media="print")
            page.set_viewport_size(A4)
            page.wait_for_timeout(50)
            facts["printCut"] = page.evaluate(PRINT_CUT_JS)
    finally:
        context.close()
    kept = []
    for text, url in errors:
        if url in outside and text.startswith("Failed to load resource"):
            continue                                      # reported by the outside-request test
        if any(h in text for h in HARMLESS_CONSOLE_ERRORS):
            continue
        kept.append(f"{text}" + (f" [{url}]" if url else ""))
    broken = broken_internal_links(facts["links"], base, root, root / f"{doc}.html", page_ids)
    facts["problems"] = problems
    return Visit(doc, facts, kept + problems, outside, broken)


class Visits(dict):
    """Each page opened once, when a test first asks for it; the tests read what was found. The scheduler in
    conftest.py keeps all of one page's tests on one worker, so a page is opened once per run."""

    def __init__(self, site, browser, build):
        super().__init__()
        self.site, self.browser, self.build = site, browser, build

    def __missing__(self, doc: str) -> Visit:
        try:
            found = visit(self.browser, self.site, self.build.html, doc)
        except Exception as exc:  # noqa: BLE001 - one page that cannot be opened must not hide the others
            nothing = {"math": 0, "mjx": 0, "merror": [], "badImages": [], "links": [], "colab": [], "downloads": [],
                       "codeBlocks": 0, "copyButtons": 0, "mathjaxScripts": [], "seeThroughPlots": [],
                       "outputText": "", "exercises": 0, "overflow": [], "alts": [], "axe": [],
                       "axePhone": [], "sideways": {"width": 0, "viewport": 0, "culprits": []}, "printCut": [],
                       "problems": [f"the page could not be opened: {str(exc).splitlines()[0]}"]}
            found = Visit(doc, nothing, list(nothing["problems"]), [], [])
        self[doc] = found
        return found


@pytest.fixture(scope="module")
def visits(site, browser, build) -> Visits:
    return Visits(site, browser, build)


browser_test = pytest.mark.browser
