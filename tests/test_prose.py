"""The pages' prose: each page within its word budget, and no test-suite business on a learner's page."""

from __future__ import annotations

import re

import nbformat
import pytest

from helpers import BOOK

CHAPTER_BUDGET = 2_800      # chapters 1–8
PAGE_BUDGET = 3_300         # every other notebook and book/*.md page
BOOK_BUDGET = 38_000        # the whole book

WORD = re.compile(r"[A-Za-z]+")


def prose_words(path) -> int:
    """Words (matches of ``[A-Za-z]+``) a reader reads on a page: every markdown cell of a notebook except those
    of a solution (from ``solution-start`` to ``solution-end``, or a ``{solution}`` directive); a Markdown page
    whole."""
    if path.suffix == ".md":
        return len(WORD.findall(path.read_text(encoding="utf-8")))
    words, in_solution = 0, False
    for cell in nbformat.read(path, as_version=4).cells:
        src = cell.source
        if "solution-start" in src:
            in_solution = True
        if cell.cell_type == "markdown" and not in_solution and "{solution}" not in src:
            words += len(WORD.findall(src))
        if "solution-end" in src:
            in_solution = False
    return words


PAGES = sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md"))


def budget(path) -> int:
    return CHAPTER_BUDGET if re.match(r"0[1-8]_", path.name) else PAGE_BUDGET


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_page_within_its_word_budget(path):
    words = prose_words(path)
    assert words <= budget(path), f"{path.name}: {words} prose words, budget {budget(path)}"


def test_book_within_its_word_budget():
    counts = {p.name: prose_words(p) for p in PAGES}
    total = sum(counts.values())
    longest = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
    assert total <= BOOK_BUDGET, f"{total} prose words, budget {BOOK_BUDGET}; longest pages: {longest}"


def test_the_count_leaves_solutions_out_and_counts_what_a_reader_reads(tmp_path):
    md = nbformat.v4.new_markdown_cell
    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        md("# Two words"),
        md("```{exercise}\n:label: ex-x\nBuild it now.\n```"),               # exercise, directive names: 7 words
        md("````{solution-start} ex-x\n```"),                                   # solution: left out
        code("x = 1  # a comment inside the solution"),
        md("Prose inside the solution is left out too."),
        md("````{solution-end}\n```"),
        md("```{solution} ex-y\nA plain solution.\n```"),                       # a {solution} directive: left out
        md("Last three words"),
    ])
    path = tmp_path / "01_page.ipynb"
    nbformat.write(nb, path)
    assert prose_words(path) == 2 + 7 + 3
    assert budget(path) == CHAPTER_BUDGET and budget(tmp_path / "capstone.ipynb") == PAGE_BUDGET


# --- a page teaches; the suite checks ---------------------------------------------------------------------------
# The stored outputs are made portable, compared on a second kernel path and checked in a browser: all of that is
# the maintainers' business (README), and none of it belongs in the prose or the code comments a learner reads.
SUITE_TALK = re.compile("|".join([
    r"kernel path", r"vector instructions?", r"\bAVX", r"\bSIMD\b", r"\bBLAS\b", r"browser tests?", r"\bnbval\b",
    r"test suite", r"every machine", r"another machine", r"other machines", r"same digits", r"last digits",
    r"shipped weights", r"stored outputs?",
]), re.IGNORECASE)

LEARNER_PAGES = sorted(BOOK.glob("*.ipynb")) + [BOOK / "intro.md", BOOK / "how_to_use.md"]


def suite_talk(path) -> list[str]:
    """Each passage of a page (markdown, code and its comments) that talks about the test suite."""
    if path.suffix == ".md":
        sources = [path.read_text(encoding="utf-8")]
    else:
        sources = [c.source for c in nbformat.read(path, as_version=4).cells]
    found = []
    for src in sources:
        for m in SUITE_TALK.finditer(src):
            found.append(src[max(0, m.start() - 40):m.end() + 40].replace("\n", " "))
    return found


@pytest.mark.parametrize("path", LEARNER_PAGES, ids=[p.name for p in LEARNER_PAGES])
def test_no_test_suite_business_on_a_learners_page(path):
    found = suite_talk(path)
    assert not found, f"{path.name} talks about the test suite: {found}"


def test_the_grep_finds_suite_talk(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("Fine prose.\n\nThe browser test checks the kernel path, so the same digits print.\n")
    assert len(suite_talk(page)) == 3
    page.write_text("The model runs in your browser; vectors have the same length.\n")
    assert suite_talk(page) == []
