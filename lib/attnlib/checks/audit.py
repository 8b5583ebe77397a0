"""Checkers for the audit page (book/audit.ipynb): predict the audit's labels for a given buggy core; write a core
with one planted bug and predict what the audit says.

The audit itself lives in :mod:`attnlib.audit`; it is imported when the checker runs (``attnlib.audit`` uses this
package's engine, so importing it here at module load would be circular).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._validate import _show
from ._core import Mistake, Verdict, _gen, checker, judge, named

__all__ = ["check_audit_prediction", "check_audit_labels", "masked_after_softmax"]

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


# --- predict the labels for a given core ---------------------------------------------------------------------------

def masked_after_softmax(Q, K, V):
    """Causal attention with one bug: the future is blanked out of the weights after softmax, not before."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])     # (B, h, T_q, T_k)
    P = torch.softmax(Z, dim=-1)
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)   # the queries are the last T_q
    return P.masked_fill(future, 0.0) @ V                      # (B, h, T_q, d_v)


_LABELS_STUB = Mistake("stub", "write your prediction first: replace `...` with a set of labels, then run the cell.",
                       more="a prediction is a set of label strings from LABELS, such as {\"scale\"}.")
# A label the learner added that the audit does not report: why it is not there.
_EXTRA = {
    "cached-step": "a cached step builds its blanked region from T_q and T_k: do its rows differ from the last "
                   "rows of the full computation, or are both wrong in the same way?",
    "nan-empty-row": "every row keeps its own key, and a row of weights filled with 0 is finite: where would a "
                     "NaN come from?",
    "nan": "every row keeps its own key, and a row of weights filled with 0 is finite: where would a NaN come "
           "from?",
    "softmax-axis": "which axis does this softmax run over, and is it the keys?",
    "mask-offset": "which keys does each query keep after the fill: the diagonal's, or one more or one fewer?",
    "mask-convention": "is a boolean mask handed to a function that reads True the other way?",
    "scale": "which width does the code divide by, and is it d_k?",
    "weights-times-K": "which tensor do the weights multiply?",
    "batch-mixing": "does any step of the core combine two sequences of the batch?",
    "head-split": "a core receives Q already split into heads: can it split them wrongly?",
    "half-precision": "which step could overflow in float16 here: the scores are those of ordinary attention.",
    "unstable": "torch.softmax subtracts each row's maximum: can large scores overflow?",
}
_LABEL_MISTAKES = {label: Mistake(f"extra-{label}", f"the audit does not report `{label}`: {why}",
                                  more=f"`{label}` means: {{meaning}}. Compare that with what the core computes "
                                       "step by step.")
                   for label, why in _EXTRA.items()}
_EMPTY = Mistake("empty", "you predict a clean report, but one step of this core is out of place: which?",
                 more="compare the core with causal attention step by step: where does it blank out the future?")
_NO_LEAK = Mistake("missed-leak", "one more label: after the fill, is row i's weight on key j ≤ i still "
                   "independent of the scores of keys after i?",
                   more="softmax divides by a sum over the whole row, the future keys included; blanking them "
                        "afterwards does not remove them from that sum. Which label is an earlier output that "
                        "moves when a later input changes?")
_NO_WHERE = Mistake("missed-where", "one more label: the audit also reads the trace and sees where the blanking "
                    "happens. Which label names that place?",
                    more="the audit names a leak by its cause when it sees one: the future blanked out of the "
                         "weights, after softmax, not of the scores before it.")
_OTHER = Mistake("other", "the audit reports {found}; you said {said}. Read each label's meaning in LABELS.",
                 more="the audit reports {found}; you said {said}. For each label, ask whether this core's "
                      "output or its trace shows what the label means.")


@checker(kind="predict", mistakes=(_LABELS_STUB, _NOT_LABELS, _EMPTY, _NO_LEAK, _NO_WHERE, _OTHER,
                                   *_LABEL_MISTAKES.values()))
def check_audit_labels(prediction) -> Verdict:
    """``prediction``: the set of labels ``audit(masked_after_softmax, kind="core")`` reports (the audit is run)."""
    from ..audit import LABELS, audit

    if prediction is ... or prediction is None:
        return named(_LABELS_STUB)
    if isinstance(prediction, str) or not isinstance(prediction, (set, frozenset, list, tuple)) or not all(
            isinstance(p, str) and p in LABELS for p in prediction):
        return named(_NOT_LABELS, got=_show(prediction), labels=", ".join(LABELS))
    said, found = set(prediction), set(audit(masked_after_softmax, kind="core").labels)
    if said == found:
        return Verdict(True, f"the audit reports {', '.join(sorted(found))}, as you predicted.")
    if not said:
        return named(_EMPTY)
    for label in sorted(said - found):
        if label in _LABEL_MISTAKES:
            return named(_LABEL_MISTAKES[label], meaning=LABELS[label][1])
    missing = found - said
    if missing == {"leak"}:
        return named(_NO_LEAK)
    if missing == {"mask-after-softmax"}:
        return named(_NO_WHERE)
    return named(_OTHER, found=", ".join(sorted(found)), said=", ".join(sorted(said)))
