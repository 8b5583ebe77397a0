"""The Chinese edition cannot go stale: every English message has a current translation that keeps the markup,
the translated sources are the English ones with only prose swapped, learner/zh/ is generated from them, and the
glossary's Chinese terms are the ones the pages use. The Chinese book itself is built and opened in
test_book_zh.py."""

from __future__ import annotations

import json
import re
import shutil
import sys

import nbformat
import pytest

from helpers import BOOK, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import translations  # noqa: E402

import attnlib.live  # noqa: E402, F401  (registers the live figure, which redrawn draws)
from attnlib.explore import DATA, is_figure, redrawn  # noqa: E402

PAGES = [p.stem for p in translations.pages()]


def test_every_page_has_a_catalog():
    missing = [p for p in [translations.BOOK_CATALOG, *PAGES] if not translations.catalog_path(p).is_file()]
    assert not missing, f"pages without a catalog (run `make translations`): {missing}"


@pytest.mark.parametrize("page", [translations.BOOK_CATALOG, *PAGES])
def test_every_message_is_translated_current_and_keeps_its_markup(page):
    wrong = [line for line in translations.problems() if line.startswith(f"{page}:") or line.startswith(f"{page},")]
    assert not wrong, (f"{len(wrong)} message(s) of {page} need a translator (`make translations`, then edit "
                       f"{translations.CATALOGS}/{page}.po or use `tools/translations.py todo/apply`):\n"
                       + "\n".join(wrong[:20]))


@pytest.fixture
def copy_root(tmp_path):
    """The English pages, the configuration and the catalogs, copied: a repository to change in tests."""
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(BOOK, tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    shutil.copytree(ROOT / translations.CATALOGS, tmp_path / translations.CATALOGS)
    return tmp_path


def test_an_english_change_marks_its_translation_fuzzy_and_fails(copy_root):
    path = copy_root / "book" / "04_mask.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and translations.translatable(c.source)
                and not any(p.search(c.source) for p in translations.KEPT.values()))   # plain prose
    old = cell.source
    translations.update(copy_root)
    assert translations.apply("04_mask", {old: "一段译文。"}, copy_root) == []
    cell.source = old.replace(" ", "  ", 1)
    nbformat.write(nb, path)
    report = translations.update(copy_root)
    assert any("04_mask.po" in line and "1 changed" in line for line in report), report
    wrong = translations.problems(copy_root)
    assert any(line.startswith(f"04_mask, cell {cell.id}: the English changed") for line in wrong), wrong
    entry = translations.read("04_mask", copy_root).find(cell.source)
    assert entry.fuzzy and entry.previous_msgid == old, "the old English is kept beside the old translation"
    assert entry.msgstr == "一段译文。", "the old translation is kept"


def test_a_new_message_where_another_stood_is_new_not_a_fuzzy_edit(copy_root):
    """Only an edit of the old English inherits its translation; a different text at the same place starts empty."""
    path = copy_root / "book" / "04_mask.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and translations.translatable(c.source)
                and not any(p.search(c.source) for p in translations.KEPT.values()))
    translations.update(copy_root)
    assert translations.apply("04_mask", {cell.source: "一段译文。"}, copy_root) == []
    cell.source = "Nothing of the old paragraph is left in this one."
    nbformat.write(nb, path)
    translations.update(copy_root)
    entry = translations.read("04_mask", copy_root).find(cell.source)
    assert entry.msgstr == "" and not entry.fuzzy


def test_chinese_soft_line_breaks_are_joined_and_markdown_lines_kept():
    joined = translations.joined_lines("第一句的后半\n接着写。\n- 列表一\n- 列表二")
    assert joined == "第一句的后半接着写。\n- 列表一\n- 列表二"
    assert translations.joined_lines("用`x`\n计算") == "用`x`\n计算", "a break beside Latin text stays"
    assert translations.joined_lines("中文\n$$\na\n$$") == "中文\n$$\na\n$$"


def test_a_new_page_without_a_catalog_fails(copy_root):
    (copy_root / translations.catalog_path("notation", copy_root)).unlink()
    assert any(line.startswith("notation: no catalog") for line in translations.problems(copy_root))


def test_a_translation_that_drops_code_or_a_link_target_is_refused(copy_root):
    english = "Call `causal_mask(T)` and see {ref}`the mask <sec-mask>` or [the paper](https://x.org/a), $QK^T$."
    right = "调用 `causal_mask(T)`，见{ref}`掩码 <sec-mask>`或[论文](https://x.org/a)，$QK^T$。"
    assert translations.broken_markup(english, right) == []
    broken = translations.broken_markup(english, "调用 `causal_mask(t)`，见{ref}`掩码 <sec-masks>`，$QK$。")
    assert [b.split(":")[0] for b in broken] == ["inline code", "math", "link target", "role target"], broken
    msg = next(e for e in translations.read("04_mask", copy_root) if "`" in e.msgid)
    assert translations.apply("04_mask", {msg.msgid: "没有代码的译文。"}, copy_root), "one without the code is refused"
    assert translations.read("04_mask", copy_root).find(msg.msgid).msgstr == msg.msgstr, "and not written"


def test_without_translations_the_sources_are_the_english_pages(copy_root, tmp_path_factory):
    shutil.rmtree(copy_root / translations.CATALOGS)
    out = translations.write_sources(tmp_path_factory.mktemp("zh-src"), copy_root)
    for path in translations.pages(copy_root):
        if path.suffix == ".md":
            assert (out / "book" / path.name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
        else:
            a, b = (nbformat.read(p, as_version=4) for p in (path, out / "book" / path.name))
            assert [c.source for c in a.cells] == [c.source for c in b.cells], path.name


@pytest.mark.parametrize("page", PAGES)
def test_translated_sources_change_only_prose(page):
    """Code cells, outputs, cell ids and tags are the English ones; only markdown and alt text differ."""
    path = next(p for p in translations.pages() if p.stem == page)
    if path.suffix == ".md":
        pytest.skip("a Markdown page is all prose")
    english = nbformat.read(path, as_version=4)
    chinese = translations.translated_notebook(path)
    assert [c.id for c in chinese.cells] == [c.id for c in english.cells]
    for e, c in zip(english.cells, chinese.cells):
        assert c.metadata.get("tags") == e.metadata.get("tags")
        if e.cell_type == "code":
            assert c.source == e.source, f"{page}, cell {e.id}"
            assert [without_words(o) for o in c.outputs] == [without_words(o) for o in e.outputs], f"{page} {e.id}"


def without_words(output) -> str:
    """An output as JSON, a figure's words left out (they are what a translation changes)."""
    html = output.get("data", {}).get("text/html", "")
    if not is_figure(html):
        return json.dumps(output, sort_keys=True)
    data = json.loads(DATA.search(html).group(1))
    return json.dumps({k: v for k, v in data.items() if k not in ("words", "title", "layerLabel")}, sort_keys=True)


@pytest.mark.parametrize("page", [p.stem for p in translations.pages() if p.suffix == ".ipynb"])
def test_a_stored_figure_drawn_again_with_its_own_words_is_unchanged(page):
    """What lets a translation swap a figure's words: the figure is drawn from the data stored in the page."""
    path = next(p for p in translations.pages() if p.stem == page)
    for cell_id, html in translations.stored_figures(path):
        assert redrawn(html, lambda s: s) == html, f"{page}, cell {cell_id}"
        chinese = redrawn(html, lambda s: "译" + s)
        assert DATA.search(chinese) and "译" in chinese.split("<style>")[0], "the words are swapped"


def test_learner_zh_is_current_and_its_code_cells_are_the_learner_editions():
    files = translations.learner_files()
    stale = translations.editions().stale(ROOT / translations.LEARNER_ZH, files)
    assert not stale, f"learner/zh/ is stale (run `make translations`): {stale}"
    for name in files:
        if not name.endswith(".ipynb"):
            continue
        en, zh = (nbformat.read(ROOT / d / name, as_version=4) for d in ("learner", translations.LEARNER_ZH))
        assert [c.id for c in zh.cells] == [c.id for c in en.cells], name
        for a, b in zip(en.cells, zh.cells):
            if a.id == translations.editions().PROGRESS_CELL_ID:   # lists the exercises by their titles, translated
                assert re.findall(r"check_\w+", a.source) == re.findall(r"check_\w+", b.source), name
            elif a.cell_type == "code":
                assert a.source == b.source, f"{name} {a.id}"
                assert [without_words(o) for o in a.outputs] == [without_words(o) for o in b.outputs], f"{name} {a.id}"


# The terms that matter most, by their English (as the glossary's first column spells it).
KEY_TERMS = ["token", "embedding", "query, key, value", "causal mask", "attention weights",
             "multi-head attention (MHA)", "residual stream", "KV cache", "positional encoding"]


def glossary() -> dict[str, str]:
    """English term -> Chinese term, from book/glossary.md's table."""
    rows = [line.split("|")[1:3] for line in (BOOK / "glossary.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| English")]
    return {e.strip(): c.strip() for e, c in rows}


def test_the_key_terms_are_in_the_glossary():
    terms = glossary()
    assert not [t for t in KEY_TERMS if t not in terms], [t for t in KEY_TERMS if t not in terms]


@pytest.mark.parametrize("term", KEY_TERMS)
def test_each_page_that_uses_a_key_term_uses_its_chinese(term):
    """Where a page's English uses the term, its translation uses the glossary's Chinese (each alternative of
    "a / b" or "a、b"; with or without a space between Chinese and Latin letters, as "KV 缓存" or "KV缓存")."""
    chinese = re.split(r"\s*[/、]\s*", glossary()[term])
    english = [re.sub(r"\s*\(.*\)", "", w).strip() for w in term.split(",")]
    missing = []
    for page in PAGES:
        path = next(p for p in translations.pages() if p.stem == page)
        tr = translations.translation(page)
        msgs = translations.messages(path)
        text_en = " ".join(m.text for m in msgs)
        text_zh = "".join(tr(m.text) for m in msgs).replace(" ", "")
        for en, zh in zip(english, chinese):
            if re.search(rf"\b{re.escape(en)}s?\b", text_en, re.I) and zh.replace(" ", "") not in text_zh:
                missing.append(f"{page}: uses {en!r}, its translation never says {zh!r}")
    assert not missing, "\n".join(missing)
