"""Wrong answers to the audit page's exercise ex-audit-labels (predict the audit's labels for a core whose mask
enters after softmax), written from its text."""

from __future__ import annotations

from . import Wrong, collect

_EX, _CHECK = "ex-audit-labels", "check_audit_labels"

only_where = Wrong(_EX, _CHECK, {"mask-after-softmax"},
                   "named where the mask enters, thought the blanked weights cannot leak", frozenset({"missed-leak"}))
only_leak = Wrong(_EX, _CHECK, {"leak"}, "named the leak, not where the mask enters", frozenset({"missed-where"}))
plus_cached = Wrong(_EX, _CHECK, {"mask-after-softmax", "leak", "cached-step"},
                    "expected a cached step to differ as well", frozenset({"extra-cached-step"}))
plus_nan = Wrong(_EX, _CHECK, {"mask-after-softmax", "leak", "nan-empty-row"},
                 "expected the zero-filled weights to give NaN", frozenset({"extra-nan-empty-row"}))
offset = Wrong(_EX, _CHECK, {"mask-offset", "leak"}, "read a late mask as a misplaced diagonal",
               frozenset({"extra-mask-offset"}))
axis = Wrong(_EX, _CHECK, {"softmax-axis", "leak"}, "thought softmax runs over the wrong axis",
             frozenset({"extra-softmax-axis"}))
clean = Wrong(_EX, _CHECK, set(), "thought a mask applied anywhere is enough", frozenset({"empty"}))
one_string = Wrong(_EX, _CHECK, "mask-after-softmax", "gave one label as a string, not a set", frozenset({"type"}))
with_number = Wrong(_EX, _CHECK, {"mask-after-softmax", "leak", "3"}, "added the question number as a label",
                    frozenset({"type"}))

WRONG = collect(globals())
