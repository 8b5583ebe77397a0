"""Every notebook is stored as executed from a fresh kernel; otherwise nbval would pass it checking nothing."""

from __future__ import annotations

import re
import sys

import nbformat
import pytest

from helpers import BOOK, ROOT, notebooks, repo_url

sys.path.insert(0, str(ROOT / "tools"))
import colab_cell  # noqa: E402  (the template of the set-up cell, a maintainer tool)

NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.fixture(params=NOTEBOOKS, ids=IDS)
def nb(request):
    return nbformat.read(request.param, as_version=4)


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 9, [p.name for p in NOTEBOOKS]


def test_valid_nbformat_and_python3_kernel(nb):
    nbformat.validate(nb)
    # exactly what a current JupyterLab writes on save, so saving a notebook leaves its metadata unchanged
    assert dict(nb.metadata["kernelspec"]) == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                               "name": "python3"}


def test_execution_counts_run_from_one_in_order(nb):
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), counts


def test_outputs_are_stored(nb):
    cells = code_cells(nb)
    with_output = [c for c in cells if c.outputs]
    # The Colab cell prints nothing; nearly every other cell shows something.
    assert len(with_output) >= len(cells) // 2, f"only {len(with_output)} of {len(cells)} code cells have outputs"


def test_no_run_timestamps_in_cell_metadata(nb):
    """Re-running a notebook must not change bytes that nobody reads (`make notebooks` turns the timing off)."""
    stamped = [i for i, c in enumerate(nb.cells) if "execution" in c.metadata]
    assert not stamped, f"cells {stamped[:5]} carry metadata.execution timestamps"


def test_no_errors_and_no_warnings_in_outputs(nb):
    for c in code_cells(nb):
        for out in c.outputs:
            assert out.output_type != "error", out.get("ename")
            if out.output_type == "stream" and out.name == "stderr":
                pytest.fail(f"stderr output (a warning?) in cell:\n{c.source[:200]}\n---\n{out.text[:500]}")


def test_no_paths_of_the_authors_machine(nb):
    text = nbformat.writes(nb)
    for pattern in (str(ROOT), "/home/", "/root/", "/tmp/", "site-packages", r"C:\\Users"):
        assert not re.search(re.escape(pattern) if "\\" not in pattern else pattern, text), pattern


def test_first_cell_is_the_hidden_colab_setup_naming_the_configured_repository(nb):
    first = nb.cells[0]
    assert first.cell_type == "code" and "remove-cell" in first.metadata.get("tags", [])
    assert '"google.colab" in sys.modules' in first.source
    urls = re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", first.source)
    assert urls == [repo_url()], f"the Colab cell names {urls}, _config.yml names {repo_url()}"
    assert first.source == colab_cell.source(), "the set-up cell differs from its template: run `make colab-cell`"
    assert not first.outputs, "the set-up cell prints nothing outside Colab"


def test_library_is_imported_and_set_up_before_anything_else(nb):
    second = code_cells(nb)[1].source
    assert "attnlib" in second and "setup()" in second, second


def test_no_notebook_hard_codes_a_device(nb):
    for c in code_cells(nb):
        assert ".cuda(" not in c.source and "'cuda'" not in c.source and '"cuda"' not in c.source, c.source
        # also "cuda:0", "mps", .mps(): the device comes from setup() only
        assert not re.search(r"""["'](cuda|mps)(:\d+)?["']|\.mps\(""", c.source), c.source


def test_every_notebook_is_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text()
    for p in NOTEBOOKS:
        assert f"book/{p.stem}" in toc, p.name
    for md in BOOK.glob("*.md"):
        assert f"book/{md.stem}" in toc, md.name


CHAPTERS = [p for p in NOTEBOOKS if re.match(r"\d\d_", p.name)]
KINDS = ("Build", "Predict", "Extend", "Find the bug")
STUDY_PAGES: set[str] = set()   # pages that measure rather than build and have no exercise (none now)
EXERCISE = re.compile(r"```\{exercise\} ([^\n]*)\n:label: (\S+)")


def exercises(nb) -> list[tuple[str, str]]:
    """(title, label) of every exercise in the notebook, in order."""
    return [m.groups() for c in nb.cells if c.cell_type == "markdown" for m in EXERCISE.finditer(c.source)]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_has_checked_exercises_with_solutions_and_a_summary(path):
    nb = nbformat.read(path, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    labels = [label for _, label in exercises(nb)]
    assert 2 <= len(labels) <= 5, labels
    for label in labels:
        assert re.search(r"```\{solution-start\} " + re.escape(label) + r"\b", markdown), label
    shown = [o.get("data", {}).get("text/plain", "") for c in code_cells(nb) for o in c.outputs]
    # the checker is shown on the stub ("not yet") and on the solution ("correct") for every exercise
    assert sum(s.startswith("✗ not yet") for s in shown) >= len(labels)
    assert sum(s.startswith("✓ correct") for s in shown) >= len(labels)
    assert "## Summary" in markdown


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_exercises_name_their_kind_and_one_makes_the_learner_think(path):
    """Every chapter, the capstone and the appendix: each title starts with its kind, and at least one exercise is
    a prediction, an extension or a bug hunt rather than code shown earlier."""
    titles = [title for title, _ in exercises(nbformat.read(path, as_version=4))]
    if not titles and path.name in STUDY_PAGES:
        pytest.skip(f"{path.name} is a study page; its exercise comes with a checker of the new engine")
    assert titles, "no exercise"
    for title in titles:
        assert title.split(":")[0] in KINDS, f"{title!r} does not start with one of {KINDS}"
    assert any(not t.startswith("Build:") for t in titles), titles


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_solution_cells_and_only_they_are_tagged_solution(path):
    """The learner edition removes the cells tagged `solution`: exactly those from a solution-start marker to its
    solution-end marker."""
    inside = False
    for i, c in enumerate(nbformat.read(path, as_version=4).cells):
        starts = c.cell_type == "markdown" and "```{solution-start}" in c.source
        inside = inside or starts
        assert ("solution" in c.metadata.get("tags", [])) == inside, f"cell {i}: {c.source[:80]!r}"
        if c.cell_type == "markdown" and "```{solution-end}" in c.source:
            inside = False
    assert not inside, "a solution-start marker without its solution-end"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_exercises_come_together_at_the_end_before_the_summary(path):
    headings = []
    for c in nbformat.read(path, as_version=4).cells:
        if c.cell_type == "markdown":
            headings += [("## " + line[3:].strip()) for line in c.source.splitlines() if line.startswith("## ")]
            if EXERCISE.search(c.source):
                headings.append("exercise")
    if "exercise" not in headings:
        return
    first, last = headings.index("exercise"), len(headings) - 1 - headings[::-1].index("exercise")
    assert "## Exercises" in headings and headings.index("## Exercises") == first - 1, headings
    after = [h for h in headings[last + 1:] if h != "exercise"]
    assert after in ([], ["## Summary"]), f"after the exercises come {after}"


# A number in scientific notation below 1e-4 is almost always a rounding error, whose digits belong to one
# processor, BLAS build and kernel path: print the bound it meets instead (attnlib.agree, attnlib.at_most).
SCIENTIFIC = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.])")
SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.S)
NUMBER_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.])|(?<![\w.])\.\d+(?:[eE][-+]?\d+)?")


def _finfo_constants() -> set[float]:
    import torch

    found = set()
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        fi = torch.finfo(dtype)
        found |= {fi.eps, fi.tiny, fi.smallest_normal, fi.resolution}
    return found


def small_numbers_printed(cell) -> list[str]:
    """The numbers below 1e-4 in scientific notation that a code cell's stored outputs print, less the exceptions:
    an exact 0, a literal of the cell's own source (a bound such as 1e-12, an ``eps=1e-05``), and a machine
    constant that the cell takes from ``finfo``. The scripts of an HTML output (a figure's code and data, such as
    a LayerNorm's eps) are not printed text."""
    source = cell.source
    literals = {float(m) for m in NUMBER_LITERAL.findall(source)}
    machine = _finfo_constants() if "finfo" in source else set()
    found = []
    for out in cell.outputs:
        data = out.get("data", {})
        shown = SCRIPT.sub("", data.get("text/html", ""))
        text = out.get("text", "") + data.get("text/plain", "") + shown
        for m in SCIENTIFIC.finditer(text):
            value = abs(float(m.group(0)))
            if value == 0 or value >= 1e-4 or value in literals:
                continue
            digits = len(m.group(0).split("e")[0].lower().lstrip("+-").replace(".", "")) or 1
            if any(abs(value - c) <= 0.5 * 10 ** (1 - digits) * c for c in machine):
                continue
            found.append(m.group(0))
    return found


def test_the_small_number_scan_finds_rounding_errors_and_spares_the_exceptions():
    cell = nbformat.v4.new_code_cell("x = torch.finfo(torch.float32).eps; print(x, 1e-12, gap)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="1.19e-07 1e-12 max |Δ| 4.4e-16, 0.0e+00, 2.5E-5, 3e-4\n")]
    assert small_numbers_printed(cell) == ["4.4e-16", "2.5E-5"]
    cell.source = "print(gap, 1e-12)"               # without finfo, the same eps is a printed digit
    assert small_numbers_printed(cell) == ["1.19e-07", "4.4e-16", "2.5E-5"]
    html = '<p>gap 3.3e-16</p><script type="application/json">{"eps": 1e-05}</script><script>x < 1e-17</script>'
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": html})]
    assert small_numbers_printed(cell) == ["3.3e-16"]  # what the page shows, not its scripts


def test_no_stored_output_prints_a_rounding_error(nb):
    hits = []
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and "nbval-ignore-output" not in c.metadata.get("tags", []):
            hits += [f"cell {i}: {n}" for n in small_numbers_printed(c)]
    assert not hits, ("stored outputs print digits of a rounding error, which another machine prints otherwise; "
                      f"print the bound it meets (attnlib.agree / at_most): {hits[:8]}")


CODE_WIDTH = 88   # what a code block of the rendered book shows without scrolling (book/_static/custom.css)


def test_code_the_page_shows_fits_its_block(nb):
    """Every line of a shown code cell fits the page's code block; the browser test measures the same at 1280 px,
    this finds it without a build."""
    long = [f"cell {i}: {len(line)} characters: {line[:50]!r}…"
            for i, c in enumerate(nb.cells) if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])
            for line in c.source.splitlines() if len(line) > CODE_WIDTH]
    assert not long, f"lines wider than {CODE_WIDTH} characters: {long[:6]}"


# --- one notation: every chapter's summary table agrees with notation.md --------------------------------------------

def _table_rows(markdown: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table whose header row starts with ``header``."""
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(header):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    return []


def notation() -> dict[str, tuple[str, str]]:
    """``plain name -> (shape, meaning)`` from notation.md's table."""
    rows = _table_rows((BOOK / "notation.md").read_text(encoding="utf-8"), "| symbol | plain |")
    return {name: (row[3], row[4]) for row in rows for name in row[1].split(", ")}


def _loose(shape: str) -> str:
    """A shape with what may be left out or spelled out: the batch and head axes (h or h_kv), T_q and T_k for T,
    h·d_k for d_k (all heads side by side), and d_head for d_k or d_v (the widths of one head)."""
    for axis in ("B, ", "h_kv, ", "h, "):
        shape = shape.replace(axis, "")
    shape = shape.replace("T_q", "T").replace("T_k", "T").replace(" ", "")
    return shape.replace("h_kv·", "").replace("h·", "")   # all heads side by side: h·d_k columns


def _same_shape(given: str, noted: str) -> bool:
    given, noted = _loose(given), _loose(noted)
    return given == noted or given == noted.replace("d_k", "d_head").replace("d_v", "d_head")


def summary_rows(path) -> list[tuple[str, str, str]]:
    """(symbol, meaning, shape) of each row of the notebook's summary table."""
    nb = nbformat.read(path, as_version=4)
    summary = next((c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Summary")),
                   "")
    return [tuple(row[:3]) for row in _table_rows(summary, "| symbol | meaning | shape |") if len(row) >= 3]


SUMMARIES = [p for p in NOTEBOOKS if summary_rows(p)]


def test_notation_lists_each_plain_name_once_with_a_shape():
    names = [n for row in _table_rows((BOOK / "notation.md").read_text(encoding="utf-8"), "| symbol | plain |")
             for n in row[1].split(", ")]
    assert len(names) == len(set(names)) > 30, names
    assert {"S", "Z", "T_q", "T_k", "N_q", "N_k"} <= set(names)
    assert all(re.fullmatch(r"—|\([^()]+\)", shape) for shape, _ in notation().values())


@pytest.mark.parametrize("path", SUMMARIES, ids=[p.name for p in SUMMARIES])
def test_summary_table_uses_the_notation(path):
    """Each symbol of notation.md that a summary table lists has notation.md's shape (batch and head axes may be
    left out, T may be T_q or T_k); S is never the scaled table."""
    known, wrong = notation(), []
    for symbol, meaning, shape in summary_rows(path):
        groups = symbol.split(" = ")[0].split(" / ")
        shapes = shape.split(" = ")[0].split(" / ")
        for group, group_shape in zip(groups, shapes if len(shapes) == len(groups) else [shapes[0]] * len(groups)):
            for name in group.split(", "):
                if name in known and known[name][0] != "—" and not _same_shape(group_shape, known[name][0]):
                    wrong.append(f"{name}: {group_shape!r}, notation.md says {known[name][0]!r}")
        if symbol.split(" = ")[0] == "S" and "scaled" in meaning:
            wrong.append(f"S is the raw score table, the scaled one is Z: {meaning!r}")
    assert not wrong, wrong


def test_the_notation_check_finds_a_wrong_shape_and_a_scaled_S(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "## Summary\n\n| symbol | meaning | shape |\n|---|---|---|\n| X₀ | input | T × d_model |\n"
        "| W_O | output projection | (d_model, d_model) |\n| S | scaled scores | (B, T, T) |\n"
        "| Q, K | queries, keys | (B, T, d_k) = (1, 6, 8) |\n")])
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(AssertionError) as e:
        test_summary_table_uses_the_notation(path)
    assert all(s in str(e.value) for s in ("X₀", "W_O", "raw score")) and "Q:" not in str(e.value)


# --- every plot carries alt text that says what it shows, set in the notebook for myst-nb ------------------------

def _plots(nb):
    return [c for c in code_cells(nb) if any("image/png" in o.get("data", {}) for o in c.outputs)]


def test_every_plot_has_alt_text_in_its_cells_metadata(nb):
    """myst-nb reads a cell's ``mystnb: image: alt`` for the image outputs of that cell; without it the rendered
    book's ``alt`` is the file's path, which a screen reader reads out as a hash."""
    missing = []
    for c in _plots(nb):
        alt = c.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        if len(alt.split()) < 6 or re.search(r"\.(png|svg)\b|_images/", alt):
            missing.append(c.source.splitlines()[0][:60])
    assert not missing, f"plots without alt text that says what they show: {missing}"
