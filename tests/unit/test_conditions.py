"""Condition merging: all types present, transition times stable, transitions detected for events."""

from __future__ import annotations

import pytest

from specpilot.reconcile import conditions as c


def test_merge_conditions_fills_every_standard_type_unknown() -> None:
    merged = c.merge_conditions([], [], generation=1, now="t0")
    assert [x["type"] for x in merged] == list(c.CONDITION_TYPES)
    assert {x["status"] for x in merged} == {"Unknown"}


def test_merge_conditions_keeps_transition_time_when_status_unchanged() -> None:
    first = c.merge_conditions([], [c.ConditionUpdate(c.READY, "True", "Available")], generation=1, now="t0")
    second = c.merge_conditions(first, [c.ConditionUpdate(c.READY, "True", "Available", "2/2")], generation=2, now="t1")
    ready = c.find(second, c.READY)
    assert ready is not None
    assert ready["lastTransitionTime"] == "t0"
    assert ready["observedGeneration"] == 2
    assert ready["message"] == "2/2"


def test_merge_conditions_moves_transition_time_on_flip() -> None:
    first = c.merge_conditions([], [c.ConditionUpdate(c.READY, "True", "Available")], generation=1, now="t0")
    second = c.merge_conditions(first, [c.ConditionUpdate(c.READY, "False", "RolloutFailed")], generation=1, now="t1")
    ready = c.find(second, c.READY)
    assert ready is not None
    assert ready["lastTransitionTime"] == "t1"


def test_transitions_reports_status_and_reason_changes_only() -> None:
    before = c.merge_conditions([], [c.ConditionUpdate(c.READY, "True", "Available")], generation=1, now="t0")
    same = c.merge_conditions(
        before, [c.ConditionUpdate(c.READY, "True", "Available", "new msg")], generation=1, now="t1"
    )
    assert c.transitions(before, same) == []
    flipped = c.merge_conditions(
        before, [c.ConditionUpdate(c.MEMORY_FIT, "False", "MemoryDoesNotFit")], generation=1, now="t1"
    )
    changed = c.transitions(before, flipped)
    assert [new["type"] for _, new in changed] == [c.MEMORY_FIT]


def test_a_later_update_of_the_same_type_keeps_the_stored_transition_time() -> None:
    """Reconcile lists the rollout's Degraded=False, then a write problem's Degraded=True: the stored True stays put."""
    existing = c.merge_conditions(
        [], [c.ConditionUpdate(c.DEGRADED, "True", "OwnershipConflict")], generation=1, now="t0"
    )
    again = c.merge_conditions(
        existing,
        [
            c.ConditionUpdate(c.DEGRADED, "False", "AsExpected"),
            c.ConditionUpdate(c.DEGRADED, "True", "OwnershipConflict"),
        ],
        generation=1,
        now="t1",
    )
    degraded = next(x for x in again if x["type"] == c.DEGRADED)
    assert (degraded["status"], degraded["lastTransitionTime"]) == ("True", "t0")


@pytest.mark.parametrize("ctype", ["QuantizationPenalty", "AcceptanceMethod", "ShortOutputs", "MixedWorkload"])
def test_framework_conditions_are_listed_from_the_first_reconcile(ctype: str) -> None:
    """The seed framework's conditions are standard types: Unknown before the first autotune evaluation, and in
    CONDITION_TYPES' order (not sorted after the others) once an evaluation sets them."""
    first = c.merge_conditions([], [], generation=1, now="t0")
    listed = c.find(first, ctype)
    assert listed is not None
    assert (listed["status"], listed["reason"]) == ("Unknown", "NotYetObserved")
    evaluated = c.merge_conditions(first, [c.ConditionUpdate(ctype, "True", ctype)], generation=1, now="t1")
    assert [x["type"] for x in evaluated] == list(c.CONDITION_TYPES)
    assert c.find(evaluated, ctype) == {**listed, "status": "True", "reason": ctype, "lastTransitionTime": "t1"}
    assert set(c.FRAMEWORK_CONDITIONS) <= set(c.CONDITION_TYPES)
