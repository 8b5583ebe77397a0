"""Exercise checkers, one module per chapter. Each ``check_…(fn)`` returns a :class:`Verdict` and never raises."""

from . import (
               audit,
               batches,
               block,
               capstone,
               costs,
               embeddings,
               gqa,
               heads,
               mask,
               projections,
               scaling,
               softmax,
               stack,
               tiled,
               trained_heads,
)
from ._core import Guess, Mistake, Verdict, checker, judge, judge_number, progress
from .audit import *  # noqa: F401,F403
from .batches import *  # noqa: F401,F403
from .block import *  # noqa: F401,F403
from .capstone import *  # noqa: F401,F403
from .costs import *  # noqa: F401,F403
from .embeddings import *  # noqa: F401,F403
from .gqa import *  # noqa: F401,F403
from .heads import *  # noqa: F401,F403
from .mask import *  # noqa: F401,F403
from .projections import *  # noqa: F401,F403
from .scaling import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .stack import *  # noqa: F401,F403
from .tiled import *  # noqa: F401,F403
from .trained_heads import *  # noqa: F401,F403

_CHAPTERS = (embeddings, projections, scaling, mask, softmax, heads, block, stack, capstone, costs, tiled, gqa,
             batches)
_STUDIES = (trained_heads, audit)   # pages that measure or audit (after the chapters they need)
__all__ = ["Verdict", "Mistake", "Guess", "judge", "judge_number", "checker", "progress"]
__all__ += [name for m in _CHAPTERS for name in m.__all__]
__all__ += [name for m in _STUDIES for name in m.__all__]
