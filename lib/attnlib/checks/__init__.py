"""Exercise checkers, one module per chapter. Each ``check_…(fn)`` returns a :class:`Verdict` and never raises."""

import importlib

from ._core import Guess, Mistake, Verdict, checker, judge, judge_number, progress

# the chapters in the book's order, then the pages that measure or audit (after the chapters they need)
_CHAPTERS, _STUDIES = (tuple(importlib.import_module(f".{name}", __name__) for name in names.split()) for names in (
    "embeddings projections scaling mask softmax heads block stack capstone costs tiled gqa batches",
    "trained_heads audit"))
__all__ = ["Verdict", "Mistake", "Guess", "judge", "judge_number", "checker", "progress"]
__all__ += [name for m in _CHAPTERS + _STUDIES for name in m.__all__]
globals().update({name: getattr(m, name) for m in _CHAPTERS + _STUDIES for name in m.__all__})
