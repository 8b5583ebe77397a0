"""Checker for the audit page (book/audit.ipynb): write a core with one planted bug, predict what the audit says.

The audit itself lives in :mod:`attnlib.audit`; it is imported when the checker runs (``attnlib.audit`` uses this
package's engine, so importing it here at module load would be circular).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._validate import _show
from ._core import Mistake, Verdict, _gen, checker, judge, named

__all__ = ["check_audit_prediction"]

_PREDICTION_STUB = Mistake("stub", "write your prediction first: replace `...` with a set of labels, then run the "
                           "cell.", more="a prediction is a set of label strings, such as {\"leak\"}, or an "
                           "empty set for a core you expect to pass.")
_NOT_LABELS = Mistake("type", "a prediction is a set of labels from attnlib.audit.LABELS, got {got}.",
                      more="each item must be one of the labels the audit uses: {labels}.")
_CORRECT_CORE = Mistake("no-bug", "the audit finds nothing wrong with your core: the exercise asks for a core "
                        "with one planted bug.", more="change one step of a correct core (the scale, the mask, "
                        "the softmax's axis, or what the weights multiply), then predict what the audit says.")
_MISSED = Mistake("missed", "your prediction {said}, but the audit {found}. Run audit(your_core) and read "
                  "the messages: which of your predictions did it not confirm, and why?",
                  more="the audit's verdict is {found}. Check each label against what your change does to the "
                  "computation, including the cached step (fewer queries than keys).")


# What stops the check before the audit runs: the core is not yet a core one can call (the engine's own verdicts).
_NOT_A_CORE = {"stub", "none", "not-callable", "error", "type", "shape", "length", "in-place", "shared"}


def _cases() -> list[tuple]:
    g = _gen(33)
    return [(torch.randn(1, 2, T, 8, generator=g), torch.randn(1, 2, T, 8, generator=g),
             torch.randn(1, 2, T, 12, generator=g)) for T in (2, 4)]


def _causal_core(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


@checker(mistakes=(_PREDICTION_STUB, _NOT_LABELS, _CORRECT_CORE, _MISSED))
def check_audit_prediction(core, prediction) -> Verdict:
    """Exercise: write a core with a bug, predict the set of labels ``audit(core)`` reports, and check."""
    from ..audit import LABELS, audit

    # first the core as a function (the engine's contract: not the stub, callable, returns a tensor of the right
    # shape); a planted bug that only changes the values is what the exercise asks for
    first = judge(core, _cases(), _causal_core)
    if not first.ok and first.mistake in _NOT_A_CORE:
        return first
    if prediction is ...:
        return named(_PREDICTION_STUB)
    if isinstance(prediction, str) or not isinstance(prediction, (set, frozenset, list, tuple)) or not all(
            isinstance(p, str) and p in LABELS for p in prediction):
        return named(_NOT_LABELS, got=_show(prediction), labels=", ".join(LABELS))
    report = audit(core, kind="core")
    found = set(report.labels)
    if not found:
        return named(_CORRECT_CORE)
    said = set(prediction)
    if said != found:
        show = lambda x: "finds nothing" if not x else "reports " + ", ".join(sorted(x))  # noqa: E731
        return named(_MISSED, said=show(said).replace("reports", "names").replace("finds nothing", "is empty"),
                     found=show(found))
    return Verdict(True, f"the audit reports {', '.join(sorted(found))}, as you predicted.")
