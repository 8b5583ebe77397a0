"""Shared paths and small functions for the test suite."""

from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def notebooks() -> list[pathlib.Path]:
    """Every notebook of the book, in name order."""
    return sorted(p for p in BOOK.glob("*.ipynb"))


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repo_url() -> str:
    """The repository URL: kept in _config.yml only."""
    return config()["repository"]["url"]


def assert_accepted(verdict) -> None:
    """A checker's verdict on a correct answer."""
    assert verdict.ok and verdict.mistake is None, verdict
    assert repr(verdict).startswith("✓ correct")


def assert_named(verdict, label: str) -> None:
    """A checker's verdict on a planted mistake: rejected, and recognised as that mistake."""
    assert not verdict.ok and verdict.mistake == label, (label, verdict)
    assert repr(verdict).startswith("✗ not yet")


def assert_mistakes_distinct(case: tuple, reference, mistakes) -> None:
    """On ``case``, the answer and every planted mistake give pairwise different outputs, so each can be named."""
    from attnlib.checks._core import _close

    outs = [reference(*case)] + [m.wrong(*case) for m in mistakes]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert not _close(outs[i], outs[j], 1e-5), (i, j)


# The slowest files first: pytest-xdist (--dist loadfile) hands out whole files in collection order, so a slow
# file collected last would keep one worker busy while the other sits idle.
SLOW_FIRST = ("test_rendered_book.py", "test_learner_edition.py", "test_learner_runs.py", "test_colab_path.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        name = item.path.name
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)   # stable: the order within a file and among the other files is kept
