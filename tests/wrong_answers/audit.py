"""Wrong answers to the audit page's exercises, written from their texts: ex-audit-labels (predict the audit's
labels for a core whose mask also blocks each query's own key) and ex-audit-predict (plant one bug in a causal core
and predict the audit's labels)."""

from __future__ import annotations

import math

import torch

from . import Args, Wrong, collect

_EX, _CHECK = "ex-audit-labels", "check_audit_labels"

only_offset = Wrong(_EX, _CHECK, {"mask-offset"}, "saw the diagonal blocked, not the empty first row",
                    frozenset({"missed-nan"}))
only_nan = Wrong(_EX, _CHECK, {"nan-empty-row"}, "saw the NaN, not its cause in the mask",
                 frozenset({"missed-offset"}))
plain_nan = Wrong(_EX, _CHECK, {"mask-offset", "nan"}, "took the NaN for one of ordinary input",
                  frozenset({"extra-nan"}))
plus_leak = Wrong(_EX, _CHECK, {"mask-offset", "nan-empty-row", "leak"}, "thought a misplaced diagonal leaks",
                  frozenset({"extra-leak"}))
plus_cached = Wrong(_EX, _CHECK, {"mask-offset", "nan-empty-row", "cached-step"},
                    "expected a cached step to differ as well", frozenset({"extra-cached-step"}))
plus_half = Wrong(_EX, _CHECK, {"mask-offset", "nan-empty-row", "half-precision"},
                  "expected half precision to fail on the −∞ fill", frozenset({"extra-half-precision"}))
leak_only = Wrong(_EX, _CHECK, {"leak"}, "read the off-by-one as letting the future in", frozenset({"extra-leak"}))
clean = Wrong(_EX, _CHECK, set(), "did not see the triu's offset", frozenset({"empty"}))
one_string = Wrong(_EX, _CHECK, "mask-offset", "gave one label as a string, not a set", frozenset({"type"}))
with_number = Wrong(_EX, _CHECK, {"mask-offset", "nan-empty-row", "3"}, "added the question number as a label",
                    frozenset({"type"}))



# --- ex-audit-predict: the learner's own core and prediction -------------------------------------------------------

_PRED, _PCHECK = "ex-audit-predict", "check_audit_prediction"


def _core(Q, K, V, *, scale=None, mask=True, dim=-1):
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Z = Q @ K.transpose(-2, -1) * (scale or 1 / math.sqrt(Q.shape[-1]))
    if mask:
        Z = Z.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1 + T_k - T_q), float("-inf"))
    return torch.softmax(Z, dim=dim) @ V


no_bug = Wrong(_PRED, _PCHECK, Args((_core, {"leak"})), "planted nothing and predicted a leak",
               frozenset({"no-bug"}))
scale_d_k = Wrong(_PRED, _PCHECK, Args((lambda Q, K, V: _core(Q, K, V, scale=1 / Q.shape[-1]), {"scale", "leak"})),
                  "divided by d_k and expected a leak as well", frozenset({"missed"}))
no_mask_offset = Wrong(_PRED, _PCHECK, Args((lambda Q, K, V: _core(Q, K, V, mask=False), {"mask-offset"})),
                       "dropped the mask and called it a misplaced diagonal", frozenset({"missed"}))
query_axis_alone = Wrong(_PRED, _PCHECK, Args((lambda Q, K, V: _core(Q, K, V, dim=-2), set())),
                         "softmax over the queries, predicted that the audit finds nothing", frozenset({"missed"}))
label_string = Wrong(_PRED, _PCHECK, Args((lambda Q, K, V: _core(Q, K, V, mask=False), "leak")),
                     "gave the label as a string, not a set", frozenset({"type"}))
made_up_label = Wrong(_PRED, _PCHECK, Args((lambda Q, K, V: _core(Q, K, V, mask=False), {"future-leak"})),
                      "used a label the audit does not have", frozenset({"type"}))

WRONG = collect(globals())
