"""A status the API server accepted but the operator never wrote (a hand edit, a broken tool, another build): each
reader either recovers or names the field, table-driven over what the CRD's schema lets through."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from specpilot.api import timestamps, v1alpha1
from specpilot.autotune.policy.decision import running_intent
from specpilot.autotune.policy.drafters import read_records
from specpilot.autotune.policy.state import PolicyState
from specpilot.reconcile.core import RolloutClock
from specpilot.vllm.intent import schedule_from_list

NOW = "2026-11-29T08:00:00Z"
SPEC = v1alpha1.parse_spec(
    {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
        "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
    }
)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, None),
        ([], None),
        ([[1, 64, 3]], ((1, 64, 3),)),
        ([[1, 8, 4], [9, 64, 2]], ((1, 8, 4), (9, 64, 2))),
    ],
)
def test_a_well_formed_schedule_reads_as_ranges(stored: Any, expected: Any) -> None:
    assert schedule_from_list(stored) == expected


@pytest.mark.parametrize("stored", [[[1, 64]], [[1, 64, 3, 4]], [[1, 64, "3"]], [5], [[1, 8, 4], [9]]])
def test_a_schedule_entry_that_is_not_a_triple_is_named(stored: Any) -> None:
    with pytest.raises(ValueError, match=r"batchSchedule entry .* is not a \[first, last, K\] triple"):
        schedule_from_list(stored)


@pytest.mark.parametrize(
    ("effective", "field"),
    [
        ({"speculation": True, "configHash": "h", "intent": {"enabled": True, "batchSchedule": [[1, 64]]}},
         "status.effective.intent"),
        ({"speculation": True, "configHash": "h", "batchSchedule": [[1, 64]]}, "status.effective"),
    ],
)  # fmt: skip
def test_a_malformed_running_intent_names_its_field(effective: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field} is malformed: batchSchedule entry \[1, 64\]"):
        running_intent({"effective": effective}, SPEC)


@pytest.mark.parametrize(
    ("started", "completed", "expected"),
    [
        ("2026-11-29T07:00:00Z", None, RolloutClock("2026-11-29T07:00:00Z", None)),
        ("2026-11-29T07:00:00Z", "2026-11-29T07:05:00Z", RolloutClock("2026-11-29T07:00:00Z", "2026-11-29T07:05:00Z")),
        ("yesterday", None, RolloutClock(NOW, None)),
        ("yesterday", "2026-11-29T07:05:00Z", RolloutClock(NOW, None)),
        ("2026-11-29T07:00:00Z", "soon", RolloutClock(NOW, None)),
        ("2026-11-29T07:00:00", None, RolloutClock(NOW, None)),  # no zone: not comparable with the operator's clock
    ],
)
def test_a_rollout_clock_with_a_time_that_does_not_parse_starts_again(
    started: str, completed: str | None, expected: RolloutClock
) -> None:
    effective = {"configHash": "h", "rolloutStarted": started, "rolloutCompleted": completed}
    clock = RolloutClock.of(effective, "h", NOW)
    assert clock == expected
    assert not clock.overdue(NOW, 7200)


@pytest.mark.parametrize(
    ("text", "parses"),
    [
        ("2026-11-29T07:00:00Z", True),
        ("2026-11-29T09:00:00+02:00", True),
        ("2026-11-29T07:00:00.250Z", True),
        ("2026-11-29T07:00:00", False),  # no zone: not comparable with the operator's clock
        ("2026-11-29", False),
        ("yesterday", False),
    ],
)
def test_a_stored_time_parses_only_with_a_zone(text: str, parses: bool) -> None:
    assert timestamps.is_zoned_time(text) is parses
    if parses:
        assert timestamps.parse_time(text) == datetime(2026, 11, 29, 7, 0, 0, 250000 if ".250" in text else 0, UTC)
    else:
        with pytest.raises(ValueError, match=r"has no time zone|Invalid isoformat"):
            timestamps.parse_time(text)


@pytest.mark.parametrize(
    "autotune",
    [
        {"version": 1, "streak": {"key": "k", "action": "Keep", "count": 1, "since": "2026-11-29T07:00:00"}},
        {"version": 1, "actuations": [{"at": "2026-11-29T07:00:00", "action": "Keep", "from": {}, "to": {}}]},
        {"version": 1, "backlogSince": "2026-11-29T07:00:00"},
    ],
    ids=["streak-since", "actuation-at", "backlog-since"],
)
def test_a_policy_state_with_a_time_without_zone_starts_fresh_and_says_why(autotune: dict[str, Any]) -> None:
    """Read as a naive time it would fail only later, comparing with the clock in the middle of a decision."""
    fresh, problem = PolicyState.from_status(autotune)
    assert fresh == PolicyState()
    assert problem is not None
    assert "status.autotune is malformed" in problem
    assert "has no time zone" in problem


@pytest.mark.parametrize(
    ("seen", "error"),
    [
        ({"intent": {"enabled": True, "numSpeculativeTokens": 3}, "rate": "high", "at": "2026-11-29T07:00:00Z"},
         "ValueError"),
        ({"rate": 0.36, "at": "2026-11-29T07:00:00Z"}, "KeyError"),
        ({"intent": {"enabled": True, "numSpeculativeTokens": 3}, "rate": 0.36, "at": "2026-11-29T07:00:00"},
         "has no time zone"),
        ("0.36", "TypeError"),
    ],
    ids=["rate", "intent-missing", "at-without-zone", "not-an-object"],
)  # fmt: skip
def test_a_malformed_acceptance_record_starts_fresh_and_says_why(seen: Any, error: str) -> None:
    """status.autotune.acceptanceSeen as a status edit or a foreign build may leave it: a fresh state and the reason,
    never a crash in the evaluation that reads it."""
    fresh, problem = PolicyState.from_status({"version": 1, "acceptanceSeen": seen})
    assert fresh == PolicyState()
    assert problem is not None
    assert "status.autotune is malformed" in problem
    assert error in problem


@pytest.mark.parametrize("field", ["retryAfter", "trialStarted", "evidenceTime"])
def test_a_candidate_record_with_a_time_without_zone_is_dropped(field: str) -> None:
    """An unreadable status.candidates element is dropped: its candidate starts Untried again (read_records)."""
    record = {"name": "a", "method": "ngram", "drafter": "ngram", "verdict": "Inconclusive",
              field: "2026-11-29T07:00:00"}  # fmt: skip
    assert read_records([record]) == []
    assert len(read_records([{**record, field: "2026-11-29T07:00:00Z"}])) == 1
