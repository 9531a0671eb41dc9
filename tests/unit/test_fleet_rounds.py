"""Fleet rounds (issue 12), the pure parts: when each object is due, and evaluations that write nothing."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specpilot.api.v1alpha1 import parse_spec
from specpilot.autotune.evaluation import Cadence, DueMarks, format_time, is_due, phase_offset, without_heartbeat

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
SPEC = parse_spec(
    {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
        "autotune": {"mode": "Recommend", "prometheus": {"url": "http://prometheus:9090"}, "interval": "60s"},
    }
)
CADENCE = Cadence.of(SPEC)


def evaluated(at: datetime) -> dict[str, Any]:
    return {"observed": {"evaluatedAt": format_time(at)}}


def test_phase_is_stable_and_within_the_interval() -> None:
    offsets = [phase_offset(f"uid-{i}", 60) for i in range(1000)]
    assert offsets == [phase_offset(f"uid-{i}", 60) for i in range(1000)], "same in every process"
    assert all(0 <= o < 60 for o in offsets)
    # spread: every 10-second sixth of the interval holds about a sixth of a thousand objects
    sixths = [sum(1 for o in offsets if k * 10 <= o < (k + 1) * 10) for k in range(6)]
    assert min(sixths) > 120, sixths
    assert max(sixths) < 215, sixths


def test_a_burst_spreads_over_the_interval_after_the_first_evaluation() -> None:
    """A thousand objects evaluated in the same second fall due spread over the interval (10 s rounds), and from
    then on each is evaluated once per interval, give or take a round."""
    times = {f"uid-{i}": [NOW] for i in range(1000)}
    due_in_round: list[int] = []
    for round_ in range(1, 19):  # three intervals
        now = NOW + timedelta(seconds=10 * round_)
        due = [u for u, at in times.items() if is_due(CADENCE, DueMarks.of(evaluated(at[-1]), {}), now, phase_key=u)]
        for uid in due:
            times[uid].append(now)
        due_in_round.append(len(due))
    assert max(due_in_round) < 215, due_in_round
    for uid, at in times.items():
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(at)]
        assert gaps[0] <= 70, (uid, gaps)
        assert all(50 <= gap <= 70 for gap in gaps[1:]), (uid, gaps)


@pytest.mark.parametrize(
    ("last_seconds_ago", "memory_seconds_ago", "due"),
    [
        (None, None, True),  # never evaluated
        (5, None, False),  # just evaluated
        (130, None, True),  # overdue (a restart)
        (130, 5, False),  # this process evaluated moments ago; the watch has not delivered it yet
    ],
)
def test_due_reads_status_and_this_process_memory(
    last_seconds_ago: int | None, memory_seconds_ago: int | None, due: bool
) -> None:
    status = evaluated(NOW - timedelta(seconds=last_seconds_ago)) if last_seconds_ago is not None else {}
    memory = NOW - timedelta(seconds=memory_seconds_ago) if memory_seconds_ago is not None else None
    assert is_due(CADENCE, DueMarks.of(status, {}), NOW, phase_key="uid-1", evaluated_at=memory) is due


@pytest.mark.parametrize("recorded", ["yesterday", "2026-13-01T00:00:00Z", "x" * 10_000])
def test_a_malformed_evaluated_at_is_refused_naming_the_field(recorded: str) -> None:
    with pytest.raises(ValueError, match=r"status\.observed\.evaluatedAt '.*' is not an RFC 3339 time") as raised:
        is_due(CADENCE, DueMarks.of({"observed": {"evaluatedAt": recorded}}, {}), NOW, phase_key="uid-1")
    assert len(str(raised.value)) < 200, "the field's value is cut, not copied whole"


def test_a_new_reevaluate_token_is_due_at_once() -> None:
    annotations = {"specpilot.dev/reevaluate": "t2"}
    assert is_due(CADENCE, DueMarks.of(evaluated(NOW), annotations), NOW, phase_key="uid-1")
    handled = {**evaluated(NOW), "lastHandledReevaluate": "t2"}
    assert not is_due(CADENCE, DueMarks.of(handled, annotations), NOW, phase_key="uid-1"), "handled: not again"


@pytest.mark.parametrize(
    ("autotune", "cadence"),
    [
        ({"mode": "Recommend", "prometheus": {"url": "http://p:9090"}, "interval": "60s"}, Cadence(None, 60.0)),
        ({"mode": "Auto", "prometheus": {"url": "http://p:9090"}, "interval": "5m"}, Cadence(None, 300.0)),
        ({"mode": "Off", "prometheus": {"url": "http://p:9090"}, "interval": "60s"}, Cadence("AutotuneOff", 60.0)),
        ({"mode": "Recommend", "interval": "2m"}, Cadence("NoPrometheus", 120.0)),  # no Prometheus to ask
    ],
)
def test_the_cadence_is_what_the_spec_says_about_when_to_evaluate(autotune: dict[str, Any], cadence: Cadence) -> None:
    spec = parse_spec({**SPEC.model_dump(mode="json", by_alias=True, exclude_none=True), "autotune": autotune})
    assert Cadence.of(spec) == cadence
    assert Cadence.of(spec).active is (cadence.idle is None)
    assert not is_due(Cadence("AutotuneOff", 60.0), DueMarks(), NOW), "inactive: never due, not even unevaluated"


def test_our_own_status_write_moves_the_marks_but_keeps_the_annotations_token() -> None:
    """The round reads the status our last patch produced (before the watch delivers it) with the kept token."""
    kept = DueMarks.of({"observed": {"evaluatedAt": "2026-11-26T11:00:00Z"}}, {"specpilot.dev/reevaluate": "t3"})
    written = {"observed": {"evaluatedAt": format_time(NOW)}, "lastHandledReevaluate": "t3"}
    assert kept.with_status(written) == DueMarks("t3", "t3", format_time(NOW))
    assert is_due(CADENCE, kept, NOW, phase_key="uid-1"), "token not yet handled in the kept status"
    assert not is_due(CADENCE, kept.with_status(written), NOW, phase_key="uid-1")


STORED = {
    "observed": {"window": "5m", "evaluatedAt": "2026-11-26T11:59:00Z", "acceptanceRate": 0.7},
    "recommendation": {"action": "Keep", "at": "2026-11-26T11:59:00Z", "reason": "ok"},
    "autotune": {"consecutiveErrors": 0},
}


def test_an_evaluation_that_found_nothing_new_keeps_the_stored_timestamps() -> None:
    fields = {
        "observed": {"window": "5m", "evaluatedAt": "2026-11-26T12:00:00Z", "acceptanceRate": 0.7, "p99TpotMs": None},
        "recommendation": {"action": "Keep", "at": "2026-11-26T12:00:00Z", "reason": "ok"},
        "autotune": {"consecutiveErrors": 0},
        "autotuneHalt": None,
    }
    kept = without_heartbeat(fields, STORED)
    assert kept["observed"]["evaluatedAt"] == kept["recommendation"]["at"] == "2026-11-26T11:59:00Z"
    assert kept["observed"]["p99TpotMs"] is None
    assert kept["autotuneHalt"] is None


def test_an_evaluation_that_found_something_new_is_written_whole() -> None:
    fields = {
        "observed": {"window": "5m", "evaluatedAt": "2026-11-26T12:00:00Z", "acceptanceRate": 0.71},
        "recommendation": {"action": "Keep", "at": "2026-11-26T12:00:00Z", "reason": "ok"},
        "autotune": {"consecutiveErrors": 0},
    }
    assert without_heartbeat(fields, STORED) == fields
