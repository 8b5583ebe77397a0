"""No hint a learner sees gives the fix away, and every exercise says how hard it is and how long it takes.

A learner sees, for each exercise, the stub's verdict (stored in the notebook) and, for each mistake the checker
can name, its first hint level (``check_…(fn)``), and the second when asked for (``hint=2``). None of these may
hold the code of the solution: no backticked expression from it, and no run of five or more of its tokens, where
the run is not also in what the learner already has (the exercise's text and its stub): conftest.hint_leak.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import nbformat
import pytest

from attnlib import checks
from attnlib.checks import _core
from helpers import BOOK, ROOT, hint_leak, notebooks

sys.path.insert(0, str(ROOT / "tools"))
import editions  # noqa: E402

DIFFICULTY = re.compile(r"^\*\*Difficulty ([1-3]) of 3 · about (\d+) minutes\*\*$")
LABEL = re.compile(r"^:label:\s*(\S+)", re.M)


@dataclass
class Exercise:
    notebook: str
    label: str
    text: str            # the exercise's own markdown
    stub: str            # the stub cell's code
    stub_output: str     # what the stub cell shows
    solution: str        # the solution's code cells, joined
    checker: str


def _output_text(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


def exercises_of(path) -> list[Exercise]:
    nb = nbformat.read(path, as_version=4)
    found, current, code = [], None, {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and "{exercise}" in cell.source and "solution" not in cell.metadata.get(
                "tags", []):
            stub = nb.cells[i + 1]
            found.append(Exercise(path.name, LABEL.search(cell.source).group(1), cell.source, stub.source,
                                  _output_text(stub), "", editions.checker_called(stub.source)))
        elif cell.cell_type == "markdown" and (m := re.search(r"\{solution-start\}\s*(\S+)", cell.source)):
            current = m.group(1)
            code[current] = []
        elif cell.cell_type == "markdown" and "{solution-end}" in cell.source:
            current = None
        elif cell.cell_type == "code" and current is not None:
            code[current].append(cell.source)
    for e in found:
        e.solution = "\n\n".join(code.get(e.label, []))
    return found


EXERCISES = [e for p in notebooks() for e in exercises_of(p)]
IDS = [e.label for e in EXERCISES]


def leak(text: str, e: Exercise) -> str | None:
    """The part of ``text`` that is the solution's code and not already the learner's, or None."""
    return hint_leak(text, e.solution, known_text=e.text, known_code=e.stub)


def test_every_exercise_is_found_with_its_solution_and_checker():
    assert len(EXERCISES) == sum(len(editions.find_exercises(nbformat.read(p, as_version=4), p.name))
                                 for p in notebooks())
    for e in EXERCISES:
        assert e.solution and e.checker and hasattr(checks, e.checker), e.label


@pytest.mark.parametrize("e", EXERCISES, ids=IDS)
def test_no_hint_holds_the_solutions_code(e):
    """The first level (what ``check_…(fn)`` says) must not; the second (``hint=2``) says more, but in words."""
    check = getattr(checks, e.checker)
    leaks = [(m.label, level, found) for m in check.mistakes
             for level, text in ((1, m.hint), (2, m.more or "")) if (found := leak(text, e))]
    assert not leaks, leaks


@pytest.mark.parametrize("e", EXERCISES, ids=IDS)
def test_the_stubs_verdict_holds_no_solution_code(e):
    assert e.stub_output.startswith("✗ not yet"), e.stub_output
    assert leak(e.stub_output, e) is None, leak(e.stub_output, e)


def test_the_leak_finder_finds_a_quoted_fix_and_a_run_of_its_tokens():
    e = Exercise("x.ipynb", "ex", "Write `masked(S)`.", "def masked(S):\n    raise NotImplementedError",
                 "", "def masked(S):\n    T = S.shape[-1]  # the length\n    return torch.softmax(S + M(T), dim=-1)",
                 "check_x")
    assert leak("use `torch.softmax(S + M(T), dim=-1)`", e)              # quoted
    assert leak("the answer is softmax(S + M(T)) in the end", e)         # five tokens in a row
    assert leak("did you take `dim=-1`?", e)                             # a short quoted expression
    assert leak("which axis does each row of weights run along?", e) is None
    assert leak("is `masked(S)` a tensor?", e) is None                   # the stub already says it
    assert leak("the length of the sequence", e) is None                 # comments are not code
    assert leak("is `dim` right?", e) is None                            # a name alone is not the fix


def test_every_rejection_a_chapter_checker_gives_comes_from_a_registered_mistake():
    """A chapter's checker module builds no rejecting Verdict by hand: each comes from a Mistake or Guess that its
    checker registers, so the tests above read every hint a learner can see."""
    import inspect

    for module in checks._CHAPTERS + checks._STUDIES:
        source = inspect.getsource(module)
        assert "Verdict(False" not in source, module.__name__


@pytest.mark.parametrize("e", EXERCISES, ids=IDS)
def test_each_exercise_states_its_difficulty_and_minutes_first(e):
    body = e.text.split("\n")
    options_end = max(i for i, line in enumerate(body) if line.startswith(":label:"))
    first = body[options_end + 1]
    m = DIFFICULTY.match(first)
    assert m, f"{e.label}: the line after the options is {first!r}"
    assert 3 <= int(m.group(2)) <= 45, first
    assert body[options_end + 2] == "", e.label


def test_the_difficulties_are_spread():
    levels = [int(DIFFICULTY.match(line).group(1)) for e in EXERCISES for line in e.text.split("\n")
              if DIFFICULTY.match(line)]
    assert {1, 2, 3} <= set(levels), levels


def test_the_general_hints_are_registered_on_every_checker():
    for name in checks.__all__:
        if name.startswith("check_"):
            check = getattr(checks, name)
            assert set(_core._GENERAL_OF[check.kind]) <= set(check.mistakes), name


def test_how_to_use_states_the_number_of_exercises_per_chapter():
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"]
    text = (BOOK / "how_to_use.md").read_text(encoding="utf-8")
    m = re.search(r"Each chapter ends with (\w+) to (\w+) exercises", text)
    counts = [len(exercises_of(p)) for p in notebooks()]   # every chapter in the table of contents
    assert m and (words.index(m.group(1)), words.index(m.group(2))) == (min(counts), max(counts)), counts


@pytest.mark.parametrize("e", EXERCISES, ids=IDS)
def test_every_mistake_of_an_exercise_has_a_second_hint_level(e):
    own = [m for m in getattr(checks, e.checker).mistakes if m not in _core._GENERAL]
    flat = [m.label for m in own if not m.more or m.more == m.hint]
    assert own and not flat, flat


def test_a_wrong_prediction_is_told_its_side_or_its_unit_never_the_method():
    """A typical wrong guess is answered with too high or too low and the part of the count that is off (or, for
    a number in the wrong unit, what the question asks for), at the first level."""
    from attnlib.checks._core import Guess

    for name in checks.__all__:
        check = getattr(checks, name)
        for g in (m for m in getattr(check, "mistakes", ()) if isinstance(m, Guess)):
            assert re.search(r"too (high|low)|asks for", g.hint), (name, g.label, g.hint)
            assert check(g.value).mistake == g.label, (name, g.label)
