"""The one-pod trial's analysis and lifecycle (autotune/policy/trial.py), table-driven on plain values."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specpilot.api import rollout, v1alpha1
from specpilot.api.v1alpha1 import TrialOutcome, TrialPhase
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.policy.state import TrialSpan
from specpilot.autotune.policy.trial import AnalysisSettings, GroupFigures, TrialObservation
from specpilot.vllm.intent import SpeculationIntent
from tests.seams import ROUND_TRIP_SPEC

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SETTINGS = AnalysisSettings(min_requests=50, tolerance=0.05)
INCUMBENT = GroupFigures(tpot_mean_s=0.010, batch=4.0, requests=400)


def group(
    tpot: float | None = 0.010, batch: float | None = 4.0, requests: float | None = 400, rate: float | None = None
) -> GroupFigures:
    return GroupFigures(tpot_mean_s=tpot, batch=batch, requests=requests, request_rate=rate)


@pytest.mark.parametrize(
    ("candidate", "incumbent", "outcome", "gate"),
    [
        (group(tpot=0.008), INCUMBENT, TrialOutcome.SUCCESSFUL, "speed"),  # faster
        (group(tpot=0.0104), INCUMBENT, TrialOutcome.SUCCESSFUL, "speed"),  # 4% slower: within the 5% noise
        (group(tpot=0.0106), INCUMBENT, TrialOutcome.FAILED, "speed"),  # 6% slower
        (group(tpot=0.020), INCUMBENT, TrialOutcome.FAILED, "speed"),
        (group(requests=49), INCUMBENT, TrialOutcome.INCONCLUSIVE, "sample"),  # the trial pod saw too little
        (group(), group(requests=None), TrialOutcome.INCONCLUSIVE, "sample"),
        (group(tpot=None), INCUMBENT, TrialOutcome.INCONCLUSIVE, "measured"),
        (group(), group(batch=None), TrialOutcome.INCONCLUSIVE, "measured"),
        (group(tpot=0.002, batch=9.0), INCUMBENT, TrialOutcome.INCONCLUSIVE, "load"),  # batch 9 vs 4: not comparable
        (group(tpot=0.020, batch=1.0), INCUMBENT, TrialOutcome.INCONCLUSIVE, "load"),  # slower, but at 1/4 the batch
        (group(tpot=0.0106, requests=10), INCUMBENT, TrialOutcome.INCONCLUSIVE, "sample"),  # sample before speed
        # round robin: the same request rate per pod, and the slower incumbents run the larger batch
        (group(tpot=0.003, batch=1.5, rate=2.0), group(batch=9.0, rate=2.2), TrialOutcome.SUCCESSFUL, "speed"),
        (group(tpot=0.030, batch=20.0, rate=2.0), group(batch=4.0, rate=2.2), TrialOutcome.FAILED, "speed"),
        # neither the batches nor the request rates comparable: another traffic
        (group(tpot=0.003, batch=1.5, rate=0.5), group(batch=9.0, rate=2.2), TrialOutcome.INCONCLUSIVE, "load"),
        (group(tpot=0.003, batch=1.5, rate=2.0), group(batch=9.0), TrialOutcome.INCONCLUSIVE, "load"),  # no rate
    ],
)
def test_analysis_gates_in_order(
    candidate: GroupFigures, incumbent: GroupFigures, outcome: TrialOutcome, gate: str
) -> None:
    analysis = trials.analyse(TrialObservation(candidate, incumbent), SETTINGS)
    assert (analysis.outcome, analysis.gate) == (outcome, gate), analysis.reason


@pytest.mark.parametrize(("pods", "outcome"), [(3, TrialOutcome.SUCCESSFUL), (1, TrialOutcome.INCONCLUSIVE)])
def test_request_rates_compare_per_pod(pods: int, outcome: TrialOutcome) -> None:
    """Three incumbent pods finishing 6 requests/s between them serve 2/s each, like the trial pod."""
    observation = TrialObservation(group(tpot=0.003, batch=1.5, rate=2.0), group(batch=9.0, rate=6.0), pods)
    assert trials.analyse(observation, SETTINGS).outcome is outcome


def test_speedup_is_incumbent_over_candidate_tpot() -> None:
    analysis = trials.analyse(TrialObservation(group(tpot=0.008), INCUMBENT), SETTINGS)
    assert analysis.speedup == 1.25
    assert "-20%" in analysis.reason


def spec(**changes: Any) -> v1alpha1.SpeculativeDeploymentSpec:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["replicas"] = changes.pop("replicas", 3)
    raw["autotune"]["mode"] = changes.pop("mode", "Auto")
    if "surge" in changes:
        raw["rollout"] = {"maxSurge": changes.pop("surge"), "maxUnavailable": 0}
    return v1alpha1.parse_spec(raw)


@pytest.mark.parametrize(
    ("replicas", "mode", "surge", "trial"),
    [
        (3, "Auto", None, True),
        (2, "Auto", None, True),
        (1, "Auto", None, False),  # no pod to spare: all at once, priced as an outage
        (1, "Auto", 1, True),  # surge: the trial pod is the extra one
        (3, "Recommend", None, False),  # Recommend never creates trial pods
        (3, "Off", None, False),
    ],
)
def test_who_can_trial(replicas: int, mode: str, surge: int | None, trial: bool) -> None:
    extra = {} if surge is None else {"surge": surge}
    assert rollout.can_trial(spec(replicas=replicas, mode=mode, **extra)) is trial


OFF = SpeculationIntent(False, 4, 16)
ON = SpeculationIntent(True, 4, 16)


def started() -> v1alpha1.TrialStatus:
    return trials.start(
        intent=OFF, config_hash="trialhash", incumbent=ON, incumbent_hash="inchash", action="DisableSpeculation", now=T0
    )


def test_start_records_both_configs_before_any_pod() -> None:
    record = trials.to_status(started())
    assert record["phase"] == "Running"
    assert record["intent"] == {"enabled": False, "numSpeculativeTokens": 4, "disableAboveBatchSize": 16}
    assert record["incumbentConfigHash"] == "inchash"
    assert "readyAt" not in record
    assert "analysisAt" not in record


def observe(candidate_tpot: float, requests: float = 400) -> TrialObservation:
    return TrialObservation(group(tpot=candidate_tpot, requests=requests), INCUMBENT, incumbent_pods=2)


def test_lifecycle_waits_for_ready_then_for_the_window_then_promotes() -> None:
    sp = spec()
    span = rollout.analysis_span(sp)  # window 2m + 2 x 15 s
    assert span == timedelta(seconds=150)
    trial = started()
    step = trials.advance(trial, spec=sp, ready=False, observation=observe(0.009), now=T0 + timedelta(minutes=1))
    assert (step.trial, step.ended) == (trial, None)  # the pod is loading: nothing moves
    ready_at = T0 + timedelta(minutes=2)
    step = trials.advance(step.trial, spec=sp, ready=True, observation=observe(0.009), now=ready_at)
    assert step.ended is None
    assert step.trial.ready_at == "2026-11-26T12:02:00Z"
    assert step.trial.analysis_at == "2026-11-26T12:04:30Z"
    before = ready_at + span - timedelta(seconds=1)
    step = trials.advance(step.trial, spec=sp, ready=True, observation=observe(0.009), now=before)
    assert step.ended is None
    assert step.trial.outcome is None
    step = trials.advance(step.trial, spec=sp, ready=True, observation=observe(0.009), now=ready_at + span)
    assert step.ended is TrialPhase.PROMOTED
    assert step.event is not None
    assert step.event[1] == "TrialPromoted"
    assert step.trial.outcome is TrialOutcome.SUCCESSFUL
    assert step.trial.speedup == 1.1111
    assert step.trial.candidate is not None
    assert step.trial.candidate.requests == 400


def stored(trial: v1alpha1.TrialStatus) -> dict[str, Any]:
    return {"trial": copy.deepcopy(trials.to_status(trial))}


def test_a_promoted_trial_tells_its_rollout_how_long_its_pod_was_analysed() -> None:
    ready_at = T0 + timedelta(minutes=2)
    running = analysed(started(), 0.009, ready_at)
    assert running.ended is None
    assert trials.promoted_span(stored(running.trial)) is None  # still running: the rollout is not over
    promoted = analysed(running.trial, 0.009, ready_at + rollout.analysis_span(spec()))
    assert promoted.ended is TrialPhase.PROMOTED
    assert trials.promoted_span(stored(promoted.trial)) == TrialSpan(T0, 150.0)
    rolled_back = analysed(running.trial, 0.020, ready_at + timedelta(minutes=3))
    assert rolled_back.ended is TrialPhase.ROLLED_BACK
    assert trials.promoted_span(stored(rolled_back.trial)) is None  # no rollout to every pod followed
    assert trials.promoted_span({"trial": {"phase": "Promoted"}}) is None  # unreadable: nothing to subtract


def analysed(trial: v1alpha1.TrialStatus, tpot: float, now: datetime, requests: float = 400) -> trials.Step:
    return trials.advance(trial, spec=spec(), ready=True, observation=observe(tpot, requests), now=now)


def test_slower_trial_rolls_back_and_blocks_a_retry_until_probe_interval() -> None:
    step = analysed(started(), 0.009, T0)  # ready now
    step = analysed(step.trial, 0.020, T0 + timedelta(minutes=3))
    assert step.ended is TrialPhase.ROLLED_BACK
    assert step.trial.outcome is TrialOutcome.FAILED
    assert step.event is not None
    assert step.event[:2] == ("Warning", "TrialRolledBack")
    assert step.trial.retry_after == "2026-11-26T12:13:00Z"  # probeInterval 10m after the rollback
    assert trials.blocks_retry(step.trial, OFF, T0 + timedelta(minutes=12), None)
    assert not trials.blocks_retry(step.trial, OFF, T0 + timedelta(minutes=13), None)
    assert not trials.blocks_retry(step.trial, SpeculationIntent(True, 3, 16), T0 + timedelta(minutes=5), None)


def ended_on(acceptance: float | None, output: float | None = 200.0, config: str = "on") -> v1alpha1.MeasuredTraffic:
    return v1alpha1.MeasuredTraffic(config_hash=config, acceptance_rate=acceptance, output_tokens_p50=output)


@pytest.mark.parametrize(
    ("then", "now", "blocked"),
    [
        (ended_on(0.40), ended_on(0.45), True),  # window-to-window drift: the verdict holds
        (ended_on(0.40), ended_on(0.20), False),  # acceptance fell by 0.20: the verdict says nothing of it
        (ended_on(0.40), ended_on(0.40, output=500.0), False),  # outputs 2.5x longer
        (ended_on(0.40), ended_on(0.20, config="other"), True),  # acceptance under another config is not comparable
        (ended_on(0.40), None, True),  # nothing measured now: no shift assumed
        (None, ended_on(0.20), True),  # a record from before the trial kept its traffic
        (ended_on(None), ended_on(0.20), True),
    ],
)
def test_a_rollback_holds_until_its_retry_time_unless_the_traffic_shifts(
    then: v1alpha1.MeasuredTraffic | None, now: v1alpha1.MeasuredTraffic | None, blocked: bool
) -> None:
    step = analysed(started(), 0.009, T0)
    step = analysed(step.trial, 0.020, T0 + timedelta(minutes=3))
    assert step.ended is TrialPhase.ROLLED_BACK
    record = step.trial.model_copy(update={"traffic": then})
    assert trials.blocks_retry(record, OFF, T0 + timedelta(minutes=5), now) is blocked
    assert (trials.reopened_by(record, OFF, T0 + timedelta(minutes=5), now) is None) is blocked  # the words for people
    assert not trials.blocks_retry(record, OFF, T0 + timedelta(minutes=13), now)  # past retryAfter either way
    assert trials.reopened_by(record, OFF, T0 + timedelta(minutes=13), now) is None  # nothing held it


@pytest.mark.parametrize(
    ("tpot", "experiment", "phase"),
    [
        # 5% faster: within the 10% tolerance. A priced change needs only not to be slower; an experiment, which
        # nothing priced, needs a measured gain, so the incumbent config stays
        (0.0095, False, TrialPhase.PROMOTED),
        (0.0095, True, TrialPhase.ROLLED_BACK),
        # 15% faster: beyond the tolerance (within twice it, so at the end of the span), promoted either way
        (0.0085, True, TrialPhase.PROMOTED),
        (0.0115, True, TrialPhase.ROLLED_BACK),
    ],
)
def test_an_experiment_is_promoted_only_when_measured_faster(tpot: float, experiment: bool, phase: TrialPhase) -> None:
    trial = trials.start(intent=OFF, config_hash="trialhash", incumbent=ON, incumbent_hash="inchash",
                         action="DisableSpeculation", now=T0, experiment=experiment)  # fmt: skip
    assert trials.to_status(trial)["experiment"] is experiment
    step = analysed(trial, tpot, T0)  # ready now; nothing decisive
    assert step.ended is None
    step = analysed(step.trial, tpot, T0 + timedelta(minutes=3))
    assert step.ended is phase, step.trial.reason
    if experiment and phase is TrialPhase.ROLLED_BACK:
        assert step.event is not None
        assert "not faster beyond 10%" in step.event[2] or "slower beyond 10%" in step.event[2]


@pytest.mark.parametrize(
    ("before_ms", "speedup"),
    [
        (None, 1.4286),  # no figure from before the trial: the verdict during it stands
        (12.0, 1.4286),  # the incumbents ran slower before: the smaller speedup is the one during the trial
        (7.35, 1.05),  # they ran at 7.35 ms before and 10 ms during it (its restart's backlog): 5% is the gain
    ],
)
def test_an_experiment_counts_the_smaller_gain_over_the_incumbents_before_and_during_it(
    before_ms: float | None, speedup: float
) -> None:
    verdict = trials.analyse(observe(0.007), SETTINGS)
    assert verdict.speedup == 1.4286
    counted = trials.measured_gain(verdict, group(tpot=0.007), before_ms)
    assert counted.speedup == speedup
    assert ("before the trial" in counted.reason) is (speedup != 1.4286)


@pytest.mark.parametrize(
    ("tpot", "before_ms", "ends_early"),
    [
        (0.007, 10.0, True),  # 1.43x faster during the trial and before it: decisive
        (0.007, 8.0, False),  # 1.14x faster than before the trial: beyond the tolerance, not twice it
        (0.007, None, False),  # nothing from before the trial: the flattered comparison waits for the span
        (0.020, None, True),  # 2x slower: a slower trial pod ends early whatever came before
    ],
)
def test_an_experiment_ends_early_only_on_a_decisive_gain_over_the_incumbents_before_it_too(
    tpot: float, before_ms: float | None, ends_early: bool
) -> None:
    trial = trials.start(intent=OFF, config_hash="trialhash", incumbent=ON, incumbent_hash="inchash",
                         action="DisableSpeculation", now=T0, experiment=True,
                         incumbent_tpot_before_ms=before_ms)  # fmt: skip
    step = analysed(trial, tpot, T0)  # ready now: the analysis span has not passed
    assert (step.ended is not None) is ends_early, step.trial
    if ends_early:
        assert step.trial.reason is not None
        assert "decisive before" in step.trial.reason
        assert step.ended is (TrialPhase.PROMOTED if tpot < 0.010 else TrialPhase.ROLLED_BACK)


@pytest.mark.parametrize(
    ("during", "phase"),
    [
        # the incumbents' acceptance held (0.40 -> 0.36): plain at 7 ms is 1.43x faster than the incumbents during the
        # trial but only 1.05x faster than they ran before it (7.35 ms), not beyond the 10% tolerance: rolled back
        (ended_on(0.36, config="inchash"), TrialPhase.ROLLED_BACK),
        # their acceptance fell (0.40 -> 0.15) during the trial: the figure from before it was measured on other
        # traffic and is set aside; the comparison on the same traffic promotes plain
        (ended_on(0.15, config="inchash"), TrialPhase.PROMOTED),
        (None, TrialPhase.ROLLED_BACK),  # nothing measured of the traffic now: no shift assumed
    ],
)
def test_the_yardstick_from_before_an_experiment_holds_only_while_the_traffic_does(
    during: v1alpha1.MeasuredTraffic | None, phase: TrialPhase
) -> None:
    trial = trials.start(intent=OFF, config_hash="trialhash", incumbent=ON, incumbent_hash="inchash",
                         action="DisableSpeculation", now=T0, experiment=True, incumbent_tpot_before_ms=7.35,
                         traffic_before=ended_on(0.40, config="inchash"))  # fmt: skip
    assert trials.to_status(trial)["trafficBefore"] == {"configHash": "inchash", "acceptanceRate": 0.4,
                                                        "outputTokensP50": 200.0}  # fmt: skip
    seen = replace(observe(0.007), incumbent_traffic=during)
    step = trials.advance(trial, spec=spec(), ready=True, observation=seen, now=T0)
    assert step.ended is None  # set aside, the guard against a flattering backlog is the whole span
    step = trials.advance(step.trial, spec=spec(), ready=True, observation=seen, now=T0 + timedelta(minutes=3))
    assert step.ended is phase, step.trial.reason
    assert step.trial.reason is not None
    assert ("figure from before the trial set aside" in step.trial.reason) is (phase is TrialPhase.PROMOTED)


@pytest.mark.parametrize(
    ("before", "now", "kept"),
    [
        (ended_on(0.40), ended_on(0.36), True),
        (ended_on(0.40), ended_on(0.20), False),
        (ended_on(0.40), ended_on(0.40, output=100.0), False),  # outputs half as long
        (None, ended_on(0.20), True),  # a trial recorded without its traffic keeps its yardstick
    ],
)
def test_yardstick_before(before: v1alpha1.MeasuredTraffic | None, now: v1alpha1.MeasuredTraffic, kept: bool) -> None:
    trial = trials.start(intent=OFF, config_hash="trialhash", incumbent=ON, incumbent_hash="on",
                         action="DisableSpeculation", now=T0, experiment=True, incumbent_tpot_before_ms=9.0,
                         traffic_before=before)  # fmt: skip
    figure, why = trials.yardstick_before(trial, now)
    assert (figure, why == "") == ((9.0, True) if kept else (None, False))


def test_inconclusive_extends_once_then_rolls_back() -> None:
    step = analysed(started(), 0.009, T0)
    step = analysed(step.trial, 0.009, T0 + timedelta(minutes=3), requests=5)
    assert step.ended is None
    assert step.trial.extended
    assert step.event is not None
    assert step.event[1] == "TrialInconclusive"
    assert step.trial.analysis_at == "2026-11-26T12:05:30Z"
    step = analysed(step.trial, 0.009, T0 + timedelta(minutes=4), requests=5)
    assert step.ended is None  # the extension's window has not passed
    step = analysed(step.trial, 0.009, T0 + timedelta(minutes=6), requests=5)
    assert step.ended is TrialPhase.ROLLED_BACK
    assert step.trial.outcome is TrialOutcome.INCONCLUSIVE


def test_inconclusive_then_successful_in_the_extension_promotes() -> None:
    step = analysed(started(), 0.009, T0)
    step = analysed(step.trial, 0.009, T0 + timedelta(minutes=3), requests=5)
    step = analysed(step.trial, 0.009, T0 + timedelta(minutes=6))
    assert step.ended is TrialPhase.PROMOTED


def test_a_trial_pod_never_ready_rolls_back_after_one_pod_replacement() -> None:
    sp = spec()
    limit = trials.readiness_deadline(sp)
    step = trials.advance(started(), spec=sp, ready=False, observation=observe(0.009), now=T0 + limit)
    assert step.ended is None
    later = T0 + limit + timedelta(seconds=1)
    step = trials.advance(step.trial, spec=sp, ready=False, observation=observe(0.009), now=later)
    assert step.ended is TrialPhase.ROLLED_BACK
    assert step.event is not None
    assert "did not become ready" in step.event[2]


@pytest.mark.parametrize("raw", [None, "text", {"phase": "Running"}, {"phase": "Nonsense", "intent": {}}])
def test_unreadable_trial_records_start_nothing(raw: object) -> None:
    assert trials.running({"trial": raw}) is None


@pytest.mark.parametrize(
    ("candidate", "decisive"),
    [
        (group(tpot=0.008), True),  # 25% faster, beyond twice 5%
        (group(tpot=0.0095), False),  # 5% faster: Successful, but within twice the tolerance
        (group(tpot=0.0125), True),  # 25% slower: Failed, and beyond twice the tolerance
        (group(tpot=0.0108), False),  # 8% slower: Failed, within twice the tolerance
        (group(tpot=0.005, requests=10), False),  # twice as fast on too small a sample
        (group(tpot=0.005, batch=1.0), False),  # twice as fast at a quarter of the load
        (group(tpot=None), False),  # not measured
    ],
)
def test_an_analysis_is_decisive_beyond_twice_the_tolerance_on_a_sample_at_comparable_load(
    candidate: GroupFigures, decisive: bool
) -> None:
    verdict = trials.analyse(TrialObservation(candidate, INCUMBENT), SETTINGS)
    assert trials.decisive(verdict, SETTINGS.tolerance) is decisive


def test_a_decisive_analysis_ends_the_trial_at_the_evaluation_that_sees_its_pod_ready() -> None:
    step = analysed(started(), 0.008, T0)  # 0.8 of the incumbents' 10 ms: beyond twice 10%
    assert step.ended is TrialPhase.PROMOTED
    assert step.trial.reason is not None
    assert "decisive before 2026-11-26T12:02:30Z" in step.trial.reason
    step = analysed(started(), 0.013, T0)
    assert step.ended is TrialPhase.ROLLED_BACK
    assert step.trial.outcome is TrialOutcome.FAILED
