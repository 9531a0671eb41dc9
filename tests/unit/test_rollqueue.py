"""The queues a rollout builds behind a Service (rollqueue) and the rollout's shape (rollcost.RolloutShape): each
figure below is worked by hand in its comment, in seconds of one pod's share of the load."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.model.rollcost import RolloutShape, restart_cost_seconds, rollout_shape, share_within
from specpilot.autotune.model.rollqueue import Phases, late_arrival_seconds, late_while
from tests.seams import ROUND_TRIP_SPEC


@pytest.mark.parametrize(
    ("queue", "arriving", "capacity", "span", "late"),
    [
        (0.0, 2.0, 1.2, 90.0, 85.5),  # grows 0.8/s, passes 3 s x 1.2 = 3.6 after 4.5 s
        (72.0, 1.0, 1.2, 60.0, 60.0),  # shrinks 0.2/s from 72: above 3.6 for 342 s, the whole span
        (72.0, 1.0, 2.0, 60.0, 60.0),  # shrinks 1/s: above 3 s x 2.0 = 6 for 66 s, past the span
        (10.0, 1.0, 2.0, 60.0, 4.0),  # shrinks 1/s from 10: above 6 for 4 s
        (5.0, 1.0, 1.0, 60.0, 60.0),  # steady above 3 s x 1.0: every arrival late
        (2.0, 1.0, 1.0, 60.0, 0.0),  # steady within it: none
        (0.0, 0.5, 1.0, 60.0, 0.0),  # no queue, served above the load
    ],
)
def test_how_long_a_pod_keeps_arrivals_waiting_past_the_deadline(
    queue: float, arriving: float, capacity: float, span: float, late: float
) -> None:
    assert late_while(queue, arriving, capacity, 3.0, span) == pytest.approx(late)


def phases(
    waves: tuple[int, ...] = (1, 1),
    *,
    drain: float = 300.0,
    inflight: float = 0.0,
    analysis: float | None = None,
    drained: bool = False,
) -> Phases:
    return Phases(
        waves, restart_s=90.0, drain_s=drain, inflight_s=inflight, analysis_s=analysis, restart_drained=drained
    )


@pytest.mark.parametrize(
    ("shape", "before", "after", "deadline", "late"),
    [
        # two pods: the pod left gets 2x its share and serves 2.5x: no queue
        (phases(), 2.5, 2.0, 3.0, 0.0),
        # ... serves 1.2x: late after 4.5 s of the first 90 s wave (85.5 s of its arrivals, all the deployment's);
        # the second pod then drains its 72 s queue itself (60 s) while the new pod, at 2.0x, carries exactly 2x
        (phases(), 1.2, 2.0, 3.0, 85.5),
        # ... the new config at 1.5x: the second wave (60 + 90 s) is late after 9 s (141 s), and its queue of 75 s
        # drains at 0.5/s to 4.5 for 141 s, half the arrivals: 85.5 + 141 + 70.5
        (phases(), 1.2, 1.5, 3.0, 297.0),
        # a drain cut at 30 s: the second wave is 120 s, late for 111, its queue of 60 drains for 111 s at half
        (phases(drain=30.0), 1.2, 1.5, 3.0, 85.5 + 111.0 + 55.5),
        # the longest request in flight keeps each pod 10 s longer: the first wave is 100 s, late for 95.5
        (phases(inflight=10.0), 1.2, 2.0, 3.0, 95.5),
        # a restart measured from the deployment's own rollouts holds its drain: the second wave is 90 s, not
        # 60 + 90; late after 9 s (81 s), then its queue of 45 drains at 0.5/s to 4.5, half the arrivals (40.5 s)
        (phases(drained=True), 1.2, 1.5, 3.0, 85.5 + 81.0 + 40.5),
        # ... and the request in flight ends within the measured 90 s
        (phases(inflight=10.0, drained=True), 1.2, 2.0, 3.0, 85.5),
        # a request in flight longer than the measured wave: the wave lasts it (120 s), late after 4.5 s
        (phases(inflight=120.0, drained=True), 1.2, 2.0, 3.0, 115.5),
        # the same, not measured: the drain and then the 90 s restart (210 s)
        (phases(inflight=120.0), 1.2, 2.0, 3.0, 205.5),
        # a trial: after the first wave the old pod carries its 72 s queue through 60 s of analysis, at its share,
        # draining 0.2/s and above 3.6 throughout (half the arrivals for 60 s), then drains the rest (50 s) itself
        (phases(analysis=60.0), 1.2, 2.0, 3.0, 85.5 + 30.0),
        # four pods two at a time: the two left get 2x, serve 1.5x, late after 9 s of the 90 (all the deployment's
        # arrivals: 81 s), then the new pair carries 2x at 2.0x while the old pair drains its queue itself
        (phases((2, 2)), 1.5, 2.0, 3.0, 81.0),
        # a deadline no queue reaches: nothing late
        (phases(), 1.2, 1.5, 600.0, 0.0),
        # the new config serves only the load: the queue the second wave leaves never drains
        (phases(), 1.2, 1.0, 3.0, math.inf),
        (phases(), 1.2, 0.9, 3.0, math.inf),
    ],
)
def test_the_arrivals_a_rollout_makes_wait_past_the_ttft_deadline(
    shape: Phases, before: float, after: float, deadline: float, late: float
) -> None:
    assert late_arrival_seconds(shape, before=before, after=after, deadline_s=deadline) == pytest.approx(late)


@pytest.mark.parametrize(
    ("replicas", "out", "analysis", "waves", "pod_restart", "length"),
    [
        (2, 1, None, (1, 1), 90.0, 180.0),  # restart_cost_seconds(R, 2, 0, 1) = R
        (2, 1, 150.0, (1, 1), 90.0, 330.0),  # the trial's pod first: the same two waves, and its analysis
        (5, 2, None, (2, 2, 1), 90.0 * 5 / 6, 225.0),  # three waves of two: 6/5 R
        (5, 2, 150.0, (1, 2, 2), 90.0 * 5 / 6, 375.0),  # the trial's one, then the other four two at a time
        (3, 2, None, (2, 1), 90.0 * 3 / 4, 135.0),  # two waves of two: 4/3 R
    ],
)
def test_a_rollouts_waves_and_one_pods_restart(
    replicas: int, out: int, analysis: float | None, waves: tuple[int, ...], pod_restart: float, length: float
) -> None:
    shape = RolloutShape(replicas, out, analysis)
    assert shape.pod_restart_s(restart_cost_seconds(pod_restart, replicas, 0, out)) == pytest.approx(pod_restart)
    assert shape.waves() == waves
    assert sum(shape.waves()) == replicas
    assert shape.pod_restart_s(90.0) == pytest.approx(pod_restart)
    assert shape.needed == replicas / (replicas - out)
    assert shape.length_s(90.0) == pytest.approx(length)


def spec(**changes: Any) -> v1alpha1.SpeculativeDeploymentSpec:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["replicas"] = changes.pop("replicas", 3)
    raw["autotune"]["mode"] = changes.pop("mode", "Auto")
    raw["rollout"] = changes
    return v1alpha1.parse_spec(raw)


@pytest.mark.parametrize(
    ("changes", "shape"),
    [
        ({}, RolloutShape(3, 1, 150.0)),  # Auto, three pods: one pod first, its analysis 2m + 2 x 15 s
        ({"mode": "Recommend"}, RolloutShape(3, 1, None)),  # a person applies it: no trial
        ({"maxUnavailable": 2}, RolloutShape(3, 2, 150.0)),
        ({"replicas": 1}, None),  # one pod: an outage, priced at the nominal restart
        ({"maxSurge": 1}, None),  # surge alone: no pod leaves the serving
        ({"replicas": 2, "maxUnavailable": 2}, None),  # every pod at once
        ({"maxSurge": 1, "maxUnavailable": 1}, RolloutShape(3, 1, None, 1)),  # a surge pod hosts the trial
    ],
)
def test_the_rollout_shape_a_spec_declares(changes: dict[str, Any], shape: RolloutShape | None) -> None:
    assert rollout_shape(spec(**changes)) == shape


@pytest.mark.parametrize(
    ("target", "p50", "p99", "share"),
    [
        (10.0, 10.0, 20.0, 0.5),  # at the median: half
        (20.0, 10.0, 20.0, 0.99),  # at the P99
        (5.0, 10.0, 20.0, 0.01),  # as far below the median as the P99 is above it (log scale)
        (10.0 * 2**0.5, 10.0, 20.0, 0.8776),  # half-way on the log scale: the normal's cdf at 2.326 / 2
        (15.0, 16.6, 30.0, 0.3452),  # a median past the objective: most requests miss it
        (9.0, 10.0, 10.0, 0.0),  # a single value: all past it ...
        (10.0, 10.0, 10.0, 1.0),  # ... or all within
    ],
)
def test_the_share_of_requests_within_an_objective_from_their_median_and_p99(
    target: float, p50: float, p99: float, share: float
) -> None:
    assert share_within(target, p50, p99) == pytest.approx(share, abs=1e-4)
