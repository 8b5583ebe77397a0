"""Checkers for the audit page (book/audit.ipynb). The audit is imported when a checker runs (it uses this engine).

``check_audit_prediction(core, prediction)``: ``core(Q, K, V)`` with one planted bug and the set of labels that
``audit(core)`` reports.
``check_audit_labels(prediction)``: the set of labels ``audit(core_to_audit, kind="core")`` reports.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._validate import _show
from ._core import Mistake, Verdict, _gen, checker, judge, named

__all__ = ["check_audit_prediction", "check_audit_labels", "core_to_audit"]

_PREDICTION_STUB = Mistake("stub", "write your prediction first: replace `...` with a set of labels, then run the "
                           "cell.", more="a prediction is a set of label strings, such as {\"leak\"}, or set().")
_NOT_LABELS = Mistake("type", "a prediction is a set of labels from attnlib.audit.LABELS, got {got}.",
                      more="each item must be one of the labels the audit uses: {labels}.")
_CORRECT_CORE = Mistake("no-bug", "the audit finds nothing wrong with your core: where is its planted bug?",
                        more="change one step of a correct core: the scale, the mask, the softmax's axis, or what "
                             "the weights multiply.")
_MISSED = Mistake("missed", "your prediction {said}, but the audit {found}: which messages of audit(your_core) "
                  "did you not expect?", more="the audit's verdict is {found}. Check each label against what your "
                  "change does, the cached step (fewer queries than keys) included.")


def _not_labels(prediction, labels) -> Verdict | None:
    if isinstance(prediction, str) or not isinstance(prediction, (set, frozenset, list, tuple)) or not all(
            isinstance(p, str) and p in labels for p in prediction):
        return named(_NOT_LABELS, got=_show(prediction), labels=", ".join(labels))
    return None


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
    from ..audit import LABELS, audit

    # first the core as a function (the engine's contract); a bug that only changes the values is what is asked for
    first = judge(core, _cases(), _causal_core)
    if not first.ok and first.mistake in _NOT_A_CORE:
        return first
    if prediction is ...:
        return named(_PREDICTION_STUB)
    if (wrong := _not_labels(prediction, LABELS)) is not None:
        return wrong
    found, said = set(audit(core, kind="core").labels), set(prediction)
    if not found:
        return named(_CORRECT_CORE)
    if said != found:
        return named(_MISSED, said=f"names {', '.join(sorted(said))}" if said else "is empty",
                     found=f"reports {', '.join(sorted(found))}")
    return Verdict(True, f"the audit reports {', '.join(sorted(found))}, as you predicted.")


# --- predict the labels for a given core ---------------------------------------------------------------------------

def core_to_audit(Q, K, V):
    """Causal attention."""
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Z = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])                # (B, h, T_q, T_k)
    future = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q)    # the queries are the last T_q
    return torch.softmax(Z.masked_fill(future, float("-inf")), dim=-1) @ V   # (B, h, T_q, d_v)


_LABELS_STUB = Mistake("stub", "write your prediction first: replace `...` with a set of labels, then run the cell.",
                       more="a prediction is a set of label strings from LABELS, such as {\"scale\"}.")
# A label the learner added that the audit does not report: why it is not there.
_EXTRA = {"cached-step": "do a cached step's rows differ from the last rows of the full computation, or are both wrong "
                   "in the same way?",
    "nan": "the NaN comes from a row that the code's own mask empties: which of the two NaN labels says so?",
    "leak": "which keys does each query keep after the fill: any key after its own?",
    "mask-after-softmax": "where does this core fill its mask: on the scores or on the weights?",
    "softmax-axis": "which axis does this softmax run over, and is it the keys?",
    "mask-convention": "is a boolean mask handed to a function that reads True the other way?",
    "scale": "which width does the code divide by, and is it d_k?",
    "weights-times-K": "which tensor do the weights multiply?",
    "batch-mixing": "does any step of the core combine two sequences of the batch?",
    "head-split": "a core receives Q already split into heads: can it split them wrongly?",
    "half-precision": "float32 input already gives NaN here: what is left for half precision to break?",
    "unstable": "torch.softmax subtracts each row's maximum: can large scores overflow?",
}
_LABEL_MISTAKES = {label: Mistake(f"extra-{label}", f"the audit does not report `{label}`: {why}",
                                  more=f"`{label}` means: {{meaning}}. Does the core compute that, step by step?")
                   for label, why in _EXTRA.items()}
_EMPTY = Mistake("empty", "you predict a clean report, but one step of this core is out of place: which?",
                 more="compare the core's mask with causal attention's: which keys does each query keep?")
_NO_NAN = Mistake("missed-nan", "one more label: which keys may query 0 read, and what is softmax of a row with "
                  "none?", more="query 0 may read only its own key, and this mask blocks it: the row is all −∞.")
_NO_OFFSET = Mistake("missed-offset", "one more label: the NaN has a cause in the mask. Which label names it?",
                     more="compare the offset of the core's triu with causal attention's: which key does each "
                          "query lose?")
_OTHER = Mistake("other", "the audit reports {found}; you said {said}. Read each label's meaning in LABELS.",
                 more="the audit reports {found}; you said {said}. Does this core's output or trace show what "
                      "each label means?")


@checker(kind="predict", mistakes=(_LABELS_STUB, _NOT_LABELS, _EMPTY, _NO_NAN, _NO_OFFSET, _OTHER,
                                   *_LABEL_MISTAKES.values()))
def check_audit_labels(prediction) -> Verdict:
    from ..audit import LABELS, audit

    if prediction is ... or prediction is None:
        return named(_LABELS_STUB)
    if (wrong := _not_labels(prediction, LABELS)) is not None:
        return wrong
    said, found = set(prediction), set(audit(core_to_audit, kind="core").labels)
    if said == found:
        return Verdict(True, f"the audit reports {', '.join(sorted(found))}, as you predicted.")
    if not said:
        return named(_EMPTY)
    for label in sorted(said - found):
        if label in _LABEL_MISTAKES:
            return named(_LABEL_MISTAKES[label], meaning=LABELS[label][1])
    missing = found - said
    if missing == {"nan-empty-row"}:
        return named(_NO_NAN)
    if missing == {"mask-offset"}:
        return named(_NO_OFFSET)
    return named(_OTHER, found=", ".join(sorted(found)), said=", ".join(sorted(said)))
