"""A status the API server accepted but the operator never wrote (a hand edit, a broken tool, another build): each
reader either recovers or names the field, table-driven over what the CRD's schema lets through."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.policy.decision import running_intent
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
