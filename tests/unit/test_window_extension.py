"""At low traffic the window extends until the sample minimums are met (promql.wider_windows,
measurements.short_gates, evaluate.window_limit_s); where no window meets them the spec's stands and NoData holds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from specpilot.api.timestamps import format_time
from specpilot.autotune.evaluate import Subject, measure, measure_many, running_since, window_limit_s
from specpilot.autotune.evaluation import measurement_starts
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass, RawResult, short_gates
from specpilot.autotune.signals.promql import MAX_WINDOW_S, Signal, Window, extended, wider_windows
from specpilot.vllm.intent import SpeculationIntent
from tests.unit.test_evaluate import NOW, SCOPE, CannedPrometheus, spec

FIVE_MINUTES = Window(300.0, 300.0, "")
MINIMUMS = {Signal.REQUESTS_IN_WINDOW: 50.0, Signal.DRAFT_TOKENS_IN_WINDOW: 2000.0}


@pytest.mark.parametrize(
    ("base", "limit_s", "expected"),
    [
        (FIVE_MINUTES, None, []),  # the configuration's start unknown: only the spec's window
        (FIVE_MINUTES, 200.0, []),  # younger than the spec's window: nothing wider
        (FIVE_MINUTES, 300.0, []),
        (FIVE_MINUTES, 450.9, ["450s"]),  # capped at the configuration's age, whole seconds
        (FIVE_MINUTES, 700.0, ["10m", "700s"]),
        (FIVE_MINUTES, 86_400.0, ["10m", "20m", "40m", "1h"]),  # doubling, then MAX_WINDOW_S
        (Window(1800.0, 1800.0, ""), 86_400.0, ["1h"]),
        (Window(3600.0, 3600.0, ""), 86_400.0, []),  # already the longest
        (Window(90.0, 30.0, "raised"), 400.0, ["3m", "6m", "400s"]),
    ],
)
def test_wider_windows_double_up_to_the_cap_and_the_configurations_age(
    base: Window, limit_s: float | None, expected: list[str]
) -> None:
    windows = wider_windows(base, limit_s)
    assert [w.promql() for w in windows] == expected
    assert all(w.requested_seconds == base.requested_seconds for w in windows)
    assert all(w.seconds <= MAX_WINDOW_S for w in windows)


def test_an_extended_window_says_what_it_replaced_and_why() -> None:
    wider = extended(
        Window(300.0, 60.0, "window 1m raised to 5m: the evaluation interval 5m"), Window(600, 60, ""), "x"
    )
    assert wider.promql() == "10m"
    assert wider.note == "window 1m raised to 5m: the evaluation interval 5m; window 5m extended to 10m: x"


def _gate(name: Signal, klass: MeasurementClass, value: float | None) -> Measurement:
    return Measurement(name.value, "q", klass, value, None, "")


VALID, NO_DATA, ERROR = MeasurementClass.VALID, MeasurementClass.NO_DATA, MeasurementClass.ERROR


@pytest.mark.parametrize(
    ("requests", "drafts", "short"),
    [
        ((VALID, 31.0), (VALID, 9000.0), {Signal.REQUESTS_IN_WINDOW: 31.0}),
        ((VALID, 50.0), (VALID, 2000.0), {}),  # a minimum met exactly is met
        ((VALID, 80.0), (VALID, 700.0), {Signal.DRAFT_TOKENS_IN_WINDOW: 700.0}),
        ((VALID, 31.0), (NO_DATA, None), {Signal.REQUESTS_IN_WINDOW: 31.0}),  # speculation off: no drafts series
        ((VALID, 0.0), (VALID, 0.0), {Signal.REQUESTS_IN_WINDOW: 0.0, Signal.DRAFT_TOKENS_IN_WINDOW: 0.0}),
        ((NO_DATA, None), (NO_DATA, None), {}),  # no series at all: a wider window adds nothing
        ((ERROR, None), (VALID, 10.0), {Signal.DRAFT_TOKENS_IN_WINDOW: 10.0}),  # a failed query is not short
    ],
)
def test_short_gates_are_the_valid_counts_below_their_minimum(
    requests: tuple[MeasurementClass, float | None],
    drafts: tuple[MeasurementClass, float | None],
    short: dict[Signal, float],
) -> None:
    measurements = {
        Signal.REQUESTS_IN_WINDOW.value: _gate(Signal.REQUESTS_IN_WINDOW, *requests),
        Signal.DRAFT_TOKENS_IN_WINDOW.value: _gate(Signal.DRAFT_TOKENS_IN_WINDOW, *drafts),
    }
    assert short_gates(measurements, MINIMUMS) == short


@pytest.mark.parametrize(
    ("since", "limit_s"),
    [
        (None, None),
        (NOW - timedelta(hours=2), 7200.0 - 30.0),  # less the two 15 s scrapes a new configuration settles for
        (NOW - timedelta(seconds=20), -10.0),
    ],
)
def test_a_window_reaches_back_no_further_than_the_settled_configuration(
    since: datetime | None, limit_s: float | None
) -> None:
    assert window_limit_s(spec(scrapeInterval="15s"), since, NOW) == limit_s


def test_the_configuration_runs_since_its_rollout_completed() -> None:
    completed = {"type": "Progressing", "status": "False", "reason": "RolloutCompleted",
                 "lastTransitionTime": "2026-11-26T10:00:00Z"}  # fmt: skip
    assert running_since([completed]) == datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
    assert running_since([{**completed, "status": "True", "reason": "RollingOut"}]) is None
    assert running_since([]) is None


class Traffic(CannedPrometheus):
    """Requests finished at a steady rate per minute for each config hash (150 draft tokens each); answers each gate
    for the range it selects, every other query with one number, one labelled series per hash the query names."""

    def __init__(self, per_minute: dict[str, float]) -> None:
        super().__init__([])
        self.per_minute = per_minute

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        super().query(promql, at)
        found = re.search(r"\[(\d+)([smh])\]", promql)
        assert found is not None, promql
        span = int(found[1]) * {"s": 1 / 60, "m": 1, "h": 60}[found[2]]
        series = []
        for config_hash, rate in self.per_minute.items():
            if f"{config_hash}" not in promql:
                continue
            value = 0.005
            if "increase(vllm:e2e_request_latency_seconds_count" in promql:
                value = rate * span
            elif "increase(vllm:spec_decode_num_draft_tokens" in promql:
                value = rate * span * 150
            labels = {"namespace": SCOPE.namespace, "specpilot_dev_deployment": SCOPE.deployment,
                      "specpilot_dev_config_hash": config_hash}  # fmt: skip
            series.append({"metric": labels, "value": [0, repr(value)]})
        return RawResult.from_response(200, {"status": "success", "data": {"resultType": "vector", "result": series}})


@pytest.mark.parametrize(
    ("per_minute", "window", "tpot"),
    [
        (12.0, "5m", VALID),  # 60 requests in 5m: the spec's window
        (6.0, "10m", VALID),  # 30 in 5m, 60 in 10m
        (3.0, "20m", VALID),
        (1.0, "1h", VALID),  # 60 in the hour
        (0.5, "5m", NO_DATA),  # 30 even in the hour: the spec's window stands, and NoData holds
    ],
)
def test_the_shortest_window_that_meets_the_minimums_is_measured(
    per_minute: float, window: str, tpot: MeasurementClass
) -> None:
    client = Traffic({SCOPE.config_hash or "": per_minute})
    measured = measure(spec(), SCOPE, client, NOW, since=NOW - timedelta(days=1))
    assert measured.window.promql() == window
    assert measured[Signal.TPOT_MEAN].klass is tpot
    assert all(f"[{window}]" in m.query for m in measured.values() if m.query), "one window for every measurement"
    if window != "5m":
        assert measured.window.note.startswith(f"window 5m extended to {window}: ")
        assert f"requests_in_window {per_minute * 5:.0f} in 5m < minimum 50, " in measured.window.note
    else:
        assert measured.window.note == ""


def test_without_a_known_start_the_spec_window_stands() -> None:
    client = Traffic({SCOPE.config_hash or "": 6.0})
    measured = measure(spec(), SCOPE, client, NOW)
    assert measured.window.promql() == "5m"
    assert measured[Signal.TPOT_MEAN].klass is NO_DATA
    assert measured[Signal.REQUESTS_IN_WINDOW].value == 30.0, "the gate was measured, and was short"
    assert all("[5m]" in q for q in client.asked)


def test_a_fleet_round_extends_only_the_scopes_short_of_samples() -> None:
    busy, quiet = SCOPE, SCOPE.with_config_hash("quiet")
    client = Traffic({SCOPE.config_hash or "": 12.0, "quiet": 6.0})
    since = NOW - timedelta(days=1)
    round_ = measure_many([Subject("busy", spec(), busy, since), Subject("quiet", spec(), quiet, since)], client, NOW)
    assert round_.measurements["busy"].window.promql() == "5m"
    assert round_.measurements["quiet"].window.promql() == "10m"
    assert round_.measurements["quiet"][Signal.TPOT_MEAN].valid
    assert round_.measurements["busy"][Signal.TPOT_MEAN].valid
    alone = measure(spec(), quiet, Traffic({"quiet": 6.0}), NOW, since=since)
    assert dict(round_.measurements["quiet"]) == dict(alone), "a fleet round measures each scope as alone"


def trial_status(*, ready_min_ago: float | None, completed_h_ago: float | None = 24.0) -> dict[str, object]:
    """status as the operator stores it: Progressing, and a Running one-pod trial (trials.to_status), ready or not."""
    on = SpeculationIntent(True, 3, None)
    trial = trials.start(
        intent=SpeculationIntent(False, 3, None), config_hash="slot", incumbent=on, incumbent_hash=SCOPE.config_hash
        or "", action="DisableSpeculation", now=NOW - timedelta(hours=1),
    )  # fmt: skip
    if ready_min_ago is not None:
        trial = trial.model_copy(update={"ready_at": format_time(NOW - timedelta(minutes=ready_min_ago))})
    progressing: dict[str, object] = {"type": "Progressing", "status": "False", "reason": "RolloutCompleted"}
    if completed_h_ago is None:
        progressing.update(status="True", reason="RollingOut")
    progressing["lastTransitionTime"] = format_time(NOW - timedelta(hours=completed_h_ago or 0))
    return {"conditions": [progressing], "trial": trials.to_status(trial)}


def garbled(field: str, value: str | None) -> dict[str, object]:
    """A ready trial's stored record with one time field replaced (None: removed)."""
    status = trial_status(ready_min_ago=12)
    record = dict(cast(dict[str, object], status["trial"]))
    if value is None:
        del record[field]
    else:
        record[field] = value
    return {**status, "trial": record}


@pytest.mark.parametrize(
    ("status", "main_ago", "slot_ago"),
    [
        ({}, None, None),  # nothing known: the spec's window for both
        (trial_status(ready_min_ago=None), timedelta(hours=24), None),  # the trial pod not ready yet
        (trial_status(ready_min_ago=12), timedelta(minutes=12), timedelta(minutes=12)),  # both within the trial
        (trial_status(ready_min_ago=12, completed_h_ago=None), None, timedelta(minutes=12)),  # main rolling
        (trial_status(ready_min_ago=12, completed_h_ago=0.1), timedelta(minutes=6), timedelta(minutes=12)),
        ({**trial_status(ready_min_ago=12), "trial": {"phase": "RolledBack"}}, timedelta(hours=24), None),
        (garbled("readyAt", "garbage"), timedelta(hours=24), None),  # an unreadable record is no trial
        (garbled("readyAt", "2026-11-26T11:48:00"), timedelta(hours=24), None),  # no zone
        (garbled("startedAt", None), timedelta(hours=24), None),
    ],
    ids=["none", "not-ready", "trial", "main-rolling", "main-newer", "ended", "garbage", "no-zone", "no-start"],
)  # fmt: skip
def test_measurement_starts_keep_a_running_trials_groups_within_its_span(
    status: dict[str, object], main_ago: timedelta | None, slot_ago: timedelta | None
) -> None:
    main, slot = measurement_starts(status)
    assert main == (None if main_ago is None else NOW - main_ago)
    assert slot == (None if slot_ago is None else NOW - slot_ago)


@pytest.mark.parametrize(("ready_min_ago", "slot_window"), [(5.5, "5m"), (6.0, "5m"), (12.0, "10m")])
def test_a_quiet_trial_pod_is_measured_over_the_trials_span(ready_min_ago: float, slot_window: str) -> None:
    """The one trial pod sees a third of the traffic of the incumbents: at its first analysis (one window after it
    was ready) its sample is short and stays NoData (as at 6 minutes: 33 requests in 330 s, 50 needed); at the extended
    analysis its window reaches back to its readiness, and the incumbents, with samples enough, keep the spec's
    window."""
    slot = SCOPE.with_config_hash("slot")
    client = Traffic({SCOPE.config_hash or "": 12.0, "slot": 6.0})
    main_since, slot_since = measurement_starts(trial_status(ready_min_ago=ready_min_ago))
    round_ = measure_many(
        [Subject("main", spec(), SCOPE, main_since), Subject("slot", spec(), slot, slot_since)], client, NOW
    )
    assert round_.measurements["main"].window.promql() == "5m"
    assert round_.measurements["slot"].window.promql() == slot_window
    assert round_.measurements["slot"][Signal.TPOT_MEAN].valid is (slot_window == "10m")
