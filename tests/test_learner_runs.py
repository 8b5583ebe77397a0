"""The second half of the learner notebooks, run top to bottom (see test_learner_edition.py for the first half)."""

from __future__ import annotations

import pytest

from test_learner_edition import NOTEBOOKS, _check_run

SECOND_HALF = NOTEBOOKS[len(NOTEBOOKS) // 2:]


@pytest.mark.parametrize("path", SECOND_HALF, ids=[p.name for p in SECOND_HALF])
def test_learner_notebook_runs_and_every_checker_says_not_yet(path):
    _check_run(path)
