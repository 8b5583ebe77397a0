"""Wrong answers to the audit page's exercise ex-audit-labels (predict the audit's labels for a core whose mask
also blocks each query's own key), written from its text."""

from __future__ import annotations

from . import Wrong, collect

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

WRONG = collect(globals())
