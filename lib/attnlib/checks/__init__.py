"""Exercise checkers, one module per chapter. Each ``check_…(fn)`` returns a :class:`Verdict` and never raises."""

from ._core import Mistake, Verdict, judge
from .block import *  # noqa: F401,F403
from .embeddings import *  # noqa: F401,F403
from .heads import *  # noqa: F401,F403
from .mask import *  # noqa: F401,F403
from .projections import *  # noqa: F401,F403
from .scaling import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .stack import *  # noqa: F401,F403

__all__ = ["Verdict", "Mistake", "judge"]
