"""check_audit_labels: the prediction of the labels that the audit gives a core whose mask also blocks the diagonal."""

from __future__ import annotations

import pytest

from attnlib import audit
from attnlib.audit import LABELS
from attnlib.checks import check_audit_labels, core_to_audit
from attnlib.checks.audit import _LABEL_MISTAKES

RIGHT = {"mask-offset", "nan-empty-row"}


def test_the_core_is_what_the_exercise_says():
    assert set(audit(core_to_audit, kind="core").labels) == RIGHT


@pytest.mark.parametrize("answer", [RIGHT, frozenset(RIGHT), sorted(RIGHT), tuple(RIGHT)])
def test_the_right_set_in_any_container_is_accepted(answer):
    v = check_audit_labels(answer)
    assert v.ok and str(v).startswith("✓ correct"), v


@pytest.mark.parametrize("answer, label", [
    (..., "stub"), (None, "stub"), ("mask-offset", "type"), ({"offset"}, "type"), (3, "type"),
    (set(), "empty"), ({"mask-offset"}, "missed-nan"), ({"nan-empty-row"}, "missed-offset"),
])
def test_the_typical_wrong_sets_are_named(answer, label):
    v = check_audit_labels(answer)
    assert not v.ok and v.mistake == label, v


@pytest.mark.parametrize("extra", sorted(_LABEL_MISTAKES))
def test_each_label_not_reported_is_named_as_an_extra(extra):
    assert extra in LABELS and extra not in RIGHT
    v = check_audit_labels(RIGHT | {extra})
    assert not v.ok and v.mistake == f"extra-{extra}", v
    assert check_audit_labels(RIGHT | {extra}, hint=2).message.startswith(f"`{extra}` means")


def test_a_label_without_a_table_entry_gets_the_reported_set():
    assert set(LABELS) - RIGHT == set(_LABEL_MISTAKES)   # every wrong label has its reason
    assert check_audit_labels.kind == "predict"
