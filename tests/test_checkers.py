"""What every exercise checker promises, whatever the chapter: it never raises, and it says why an answer fails.

The chapter files (test_checks_<chapter>.py) prove that each checker accepts its solution and names each planted
mistake; this file covers the behaviour they all share.
"""

from __future__ import annotations

import pytest
import torch

from attnlib import checks

CHECKERS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]
IDS = [c.__name__ for c in CHECKERS]


def stub(*args):
    raise NotImplementedError


def crashes(*args):
    raise RuntimeError("boom")


def test_every_chapter_has_at_least_two_checkers():
    for module in checks._CHAPTERS:
        names = [n for n in module.__all__ if n.startswith("check_")]
        assert len(names) >= 2, (module.__name__, names)


@pytest.mark.parametrize("check", CHECKERS, ids=IDS)
def test_the_stub_is_recognised(check):
    verdict = check(stub)
    assert not verdict.ok and verdict.mistake == "stub", verdict
    assert repr(verdict).startswith("✗ not yet") and "stub" in verdict.message


@pytest.mark.parametrize("check", CHECKERS, ids=IDS)
def test_a_checker_never_raises_on_a_broken_answer(check):
    for answer, label in [(crashes, "error"), (lambda *a: None, "none"), (42, "not-callable")]:
        verdict = check(answer)
        assert not verdict.ok and verdict.mistake == label, (label, verdict)
        assert verdict.message
    verdict = check(lambda *a: "not a tensor")
    assert not verdict.ok and verdict.message


@pytest.mark.parametrize("check", CHECKERS, ids=IDS)
def test_a_checker_leaves_the_learners_random_state_alone(check):
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    check(stub)
    assert torch.equal(torch.rand(3), want), "the checker reseeded or drew from the global generator"
