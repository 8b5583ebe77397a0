"""The checkers against wrong answers that nobody tuned them to (tests/wrong_answers/): written from the exercise
texts, each verified wrong. None is accepted, none is told of a mistake it did not make, at least 85 % are named,
and every exercise has at least five. Each answer is judged once; the verdicts serve every assertion."""

from __future__ import annotations

import collections
import functools
import importlib
import pkgutil

import pytest

import attnlib.checks as checks
import wrong_answers
from wrong_answers import GENERIC, Args

WRONG = [w for info in pkgutil.iter_modules(wrong_answers.__path__)
         for w in importlib.import_module(f"wrong_answers.{info.name}").WRONG]
MODULES = sorted(info.name for info in pkgutil.iter_modules(wrong_answers.__path__))


@functools.cache
def _verdicts() -> list:
    return [getattr(checks, w.check)(*w.answer) if isinstance(w.answer, Args) else getattr(checks, w.check)(w.answer)
            for w in WRONG]


def _describe(w, v) -> str:
    return f"{w.exercise}: {w.made} -> {v.mistake}: {v.message[:120]}"


def test_no_wrong_answer_is_accepted():
    accepted = [_describe(w, v) for w, v in zip(WRONG, _verdicts()) if v.ok]
    assert not accepted, accepted


def test_no_wrong_answer_is_told_of_a_mistake_it_did_not_make():
    misled = [_describe(w, v) for w, v in zip(WRONG, _verdicts())
              if not v.ok and v.mistake not in w.names and v.mistake not in GENERIC]
    assert not misled, misled


def test_at_least_85_percent_are_named_and_each_exercise_has_five():
    named = [v.mistake in w.names for w, v in zip(WRONG, _verdicts())]
    share = sum(named) / len(named)
    generic = [f"{w.exercise}: {w.made}" for w, n in zip(WRONG, named) if not n]
    assert share >= 0.85, f"{share:.0%} named; generic: {generic}"
    per = collections.Counter(w.exercise for w in WRONG)
    few = {e: n for e, n in per.items() if n < 5}
    assert not few, few


@pytest.mark.parametrize("module", MODULES)
def test_each_page_has_its_wrong_answers(module):
    assert importlib.import_module(f"wrong_answers.{module}").WRONG, module
