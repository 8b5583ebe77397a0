"""`attnlib.audit` on attention code it was not tuned to: the held-out set in audit_heldout.py (cores, layers and
models, buggy and correct). Every bug gets a finding whose label names it or its symptom; no correct one is
flagged. The table of verdicts is printed (pytest -s, or `python tests/audit_heldout.py`)."""

from __future__ import annotations

import torch

from audit_heldout import CASES, run_case


def test_every_held_out_bug_is_named_and_no_correct_code_is_flagged():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny tensors: a second thread only waits
    try:
        rows = [(case, *run_case(case)[:2]) for case in CASES]
    finally:
        torch.set_num_threads(threads)
    for case, verdict, found in rows:
        print(f"{verdict:11s} {case.kind:5s} {case.name:58s} {sorted(found)}")
    wrong = [f"{case.name}: {verdict}, want one of {sorted(case.labels) or 'nothing'}, got {sorted(found)}"
             for case, verdict, found in rows if verdict not in ("named", "clean")]
    assert sum(c.buggy for c in CASES) >= 30 and sum(not c.buggy for c in CASES) >= 10
    assert not wrong, "\n".join(wrong)
