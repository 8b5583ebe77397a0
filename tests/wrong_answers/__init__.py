"""Wrong answers to every exercise, written from the exercise texts of the learner edition by readers who did not
write the checkers. One module per page; each holds ``WRONG``, a list of :class:`Wrong`.

tests/test_wrong_answers.py runs each through its checker: none may be accepted, none may be told of a mistake it
did not make, and at least 85 % must be named.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GENERIC = frozenset({"values", "shape", "type", "length", "error"})
"""Verdicts that say something differs without saying what the learner did."""


@dataclasses.dataclass(frozen=True)
class Wrong:
    exercise: str                  # the exercise's label, ex-…
    check: str                     # the checker's name in attnlib.checks
    answer: Any                    # what the learner passes: a function, a number, a module …
    made: str                      # the mistake, in words, as its writer meant it
    names: frozenset[str] = frozenset()
    """The verdict labels that name this mistake (read off the verdict's words, not its table). A verdict with
    another label outside GENERIC misleads; one in GENERIC but not here is generic."""


class Args(tuple):
    """An answer of several arguments, for a checker that takes more than one (passed as ``check(*answer)``)."""


def wrong(exercise: str, check: str, made: str, *names: str):
    """Decorator: ``@wrong("ex-…", "check_…", "what was done", "label", …)`` over a learner's function makes it a
    :class:`Wrong` (a module collects them with :func:`collect`)."""
    def make(answer):
        return Wrong(exercise, check, answer, made, frozenset(names))
    return make


def collect(namespace: dict) -> list[Wrong]:
    """Every Wrong defined at the top level of a module, in order."""
    return [v for v in namespace.values() if isinstance(v, Wrong)]
