"""The Chinese book, as its reader sees it: built as strictly as the English one from the translated sources
(tools/translations.py), served beside the English book as the site publishes them (English at the root, Chinese
under zh/), and every page opened in headless Chromium: math typeset, images loaded, no broken internal link, no
page that scrolls sideways at 390 px, no serious or critical axe-core violation, the page in Chinese, and a link to
the same page in English that links back, and on a chapter a Colab button that opens the Chinese learner notebook
(learner/zh/). Colours and code are the English pages' own (test_rendered_book.py
checks their contrast), so axe's colour-contrast rule is not run again here."""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
import posixpath
import re
import subprocess
import sys
import threading
import time

import pytest

# ruff: noqa: F811  (the fixtures imported below are requested by name as test arguments)
from book_in_browser import (  # noqa: F401
    ANSI,
    IN_CI,
    TOC_PAGES,
    WARNING_LINE,
    _QuietHandler,
    _shared_folder,
    browser,
    browser_test,
    build,
    is_chapter,
    new_page,
    visit,
)
from helpers import ROOT


@pytest.fixture(scope="module")
def build_zh(tmp_path_factory) -> dict:
    """The Chinese book, built once for the whole run (the first worker builds, the others wait and read)."""
    from filelock import FileLock

    shared = _shared_folder(tmp_path_factory) / "rendered-book-zh"
    shared.mkdir(exist_ok=True)
    result = shared / "build.json"
    with FileLock(str(shared / "build.lock")):
        if not result.exists():
            src = shared / "src"
            t0 = time.monotonic()
            subprocess.run([sys.executable, str(ROOT / "tools" / "translations.py"), "sources", str(src)],
                           check=True, cwd=ROOT, capture_output=True)
            exe = pathlib.Path(sys.executable).with_name("jupyter-book")
            proc = subprocess.run([str(exe) if exe.exists() else "jupyter-book", "build", str(src), "-W", "-n",
                                   "--keep-going"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "NO_COLOR": "1"})
            log = ANSI.sub("", proc.stdout + "\n" + proc.stderr)
            result.write_text(json.dumps({
                "returncode": proc.returncode, "log": log, "seconds": time.monotonic() - t0,
                "warnings": [line.strip() for line in log.splitlines() if WARNING_LINE.search(line)]}))
    done = json.loads(result.read_text())
    return {**done, "html": shared / "src" / "_build" / "html"}


def test_chinese_book_builds_with_zero_warnings(build_zh):
    assert not build_zh["warnings"], "the strict build printed warnings:\n" + "\n".join(build_zh["warnings"])
    assert build_zh["returncode"] == 0, build_zh["log"][-4000:]
    missing = [d for d in TOC_PAGES if not (build_zh["html"] / f"{d}.html").is_file()]
    assert not missing, f"pages the Chinese build did not write: {missing}"


@pytest.fixture(scope="module")
def site_both(build, build_zh):
    """The English book at the root and the Chinese one under zh/, as they are published."""
    english, chinese = str(build.html), str(build_zh["html"])

    class Both(_QuietHandler):
        def translate_path(self, path):
            if path.startswith("/zh/"):
                return str(pathlib.Path(chinese) / path[len("/zh/"):].split("?")[0].split("#")[0])
            return super().translate_path(path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Both, directory=english))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def zh_visits(site_both, browser, build_zh):
    found: dict[str, object] = {}

    def get(doc):
        if doc not in found:
            found[doc] = visit(browser, site_both + "zh/", build_zh["html"], doc, translation=True)
        return found[doc]
    return get


@browser_test
@pytest.mark.parametrize("doc", TOC_PAGES)
def test_chinese_page_reads_right(zh_visits, doc):
    v = zh_visits(doc)
    f = v.facts
    problems = list(v.errors) + [f"broken link {b}" for b in v.broken_links] + [f"request to {u}" for u in v.outside]
    if f["math"] and (f["mjx"] < f["math"] or f["merror"]):
        problems.append(f"math not typeset: {f['mjx']} of {f['math']}, errors {f['merror']}")
    problems += [f"image did not load: {src}" for src in f["badImages"]]
    if f["sideways"]["width"] > f["sideways"]["viewport"] + 1:
        problems.append(f"scrolls sideways at 390 px: {f['sideways']}")
    problems += [f"axe {a['rule']} ({a['impact']}): {a['target']}" for a in f["axe"] + f["axePhone"]]
    if is_chapter(doc) and not any(u.endswith(f"/learner/zh/{doc.split('/')[-1]}.ipynb") for u in f["colab"]):
        problems.append(f"no Colab link to the Chinese learner notebook: {f['colab']}")
    assert not problems, f"zh/{doc}:\n" + "\n".join(problems[:20])


OTHER_LANGUAGE = re.compile(r'<p class="other-language"><a href="([^"]+)"')


@pytest.mark.parametrize("doc", TOC_PAGES)
def test_each_language_links_to_the_same_page_in_the_other(build, build_zh, doc):
    """As published (English at the root, Chinese under zh/): zh/<page> is in Chinese and links to <page>, which
    is in English and links back."""
    for file, here, there, lang in ((build.html / f"{doc}.html", f"{doc}.html", f"zh/{doc}.html", "en"),
                                    (build_zh["html"] / f"{doc}.html", f"zh/{doc}.html", f"{doc}.html", "zh-CN")):
        text = file.read_text(encoding="utf-8")
        assert f'<html lang="{lang}"' in text, f"{here} is not marked as {lang}"
        found = OTHER_LANGUAGE.findall(text)
        assert len(found) == 1, f"{here}: {len(found)} links to the other language"
        target = posixpath.normpath(posixpath.join(posixpath.dirname(here), found[0]))
        assert target == there, f"{here} links to {target}, not {there}"


@browser_test
def test_the_language_link_takes_a_reader_there_and_back(site_both, browser):
    outside: list[str] = []
    context, page = new_page(browser, site_both, outside)
    try:
        page.goto(site_both + "zh/book/04_mask.html", wait_until="domcontentloaded")
        assert page.evaluate("() => document.documentElement.lang").lower().startswith("zh")
        for lang, url in (("en", "book/04_mask.html"), ("zh", "zh/book/04_mask.html")):
            page.click("p.other-language a")
            page.wait_for_load_state("domcontentloaded")
            assert page.url == site_both + url
            assert page.evaluate("() => document.documentElement.lang").lower().startswith(lang)
    finally:
        context.close()
    assert not outside


def test_a_font_with_chinese_glyphs_is_installed():
    """Without one, the browser draws every Chinese character as a box (.ci/run installs fonts-noto-cjk)."""
    try:
        out = subprocess.run(["fc-list", ":lang=zh-cn", "family"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        out = ""
    if not out.strip():
        if IN_CI:
            pytest.fail("no font covers Chinese: install Debian's fonts-noto-cjk")
        pytest.skip("no font covers Chinese here; install Debian's fonts-noto-cjk to read the Chinese book")
