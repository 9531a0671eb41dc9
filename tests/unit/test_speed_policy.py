"""Deciding on measured speed, not acceptance (issue 13 item 3) and agreeing on a decision, not on its jitter.

The adaptive-verification trap: acceptance falls while speculation gets faster (keep); its mirror: acceptance high
while speculation is slower than plain at the same load (disable); an acceptance collapse with no speed comparison
under adaptive verification is published as a recommendation with its reason, never applied. Plus the agreement key:
fitted schedules whose boundaries jitter by a batch size or two between windows still agree.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import tests.unit.test_policy as tp
from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.model.baseline import Mode
from specpilot.autotune.model.costprofile import fit_settings_for
from specpilot.autotune.model.k0tax import OffComparison
from specpilot.autotune.model.schedule import FitSettings, ThresholdPlan, ThresholdSupport, schedule_text
from specpilot.autotune.model.speed import FASTER_MARGIN, PlainReference, Speed, SpeedVerdict, compare_speed
from specpilot.autotune.model.stepcost import LLAMA8B_H100
from specpilot.autotune.model.stepfit import StepSample
from specpilot.autotune.policy.agreement import (
    agree_by_effect,
    anchor_intent,
    boundary_close,
    experiment_wait,
    intents_agree,
    keys_agree,
    shed_alike,
    sheds,
    stabilization_for,
    stabilized,
)
from specpilot.autotune.policy.backlog import Priced
from specpilot.autotune.policy.budget import record_actuation
from specpilot.autotune.policy.decision import decide, evaluate_alone, prices_its_own_gain
from specpilot.autotune.policy.state import (
    AcceptanceSeen,
    Action,
    Decision,
    OffReason,
    OffRecord,
    PolicyState,
    Proposal,
    Streak,
)
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Signal
from specpilot.vllm.intent import SpeculationIntent, intent_to_dict

T0, MINUTE, ON, OFF = tp.T0, tp.MINUTE, tp.ON, tp.OFF


def spec_with(*, adaptive: bool = False, **autotune: Any) -> SpeculativeDeploymentSpec:
    raw = tp.make_spec(**autotune).model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["speculation"]["adaptiveVerification"] = adaptive
    return parse_spec(raw)


def plain_baseline(tpot_mean_ms: float, *, bucket: int = 5, p99_ms: float = 40.0) -> PolicyState:
    """A plain (speculation off) record at batch [16,32) with this mean TPOT; P99 high enough not to regress."""
    return PolicyState(baseline=(tp.baseline(Mode.OFF, bucket, p99_ms, tpot_mean_ms=tpot_mean_ms),))


# ------------------------------------------------------------------------------------------------ the verdict


@pytest.mark.parametrize(
    ("on_ms", "plain_ms", "tolerance", "outcome"),
    [
        (10.0, 15.0, 0.1, Speed.FASTER),
        (15.0 / (1 + FASTER_MARGIN) - 0.01, 15.0, 0.1, Speed.FASTER),
        (14.5, 15.0, 0.1, Speed.EVEN),  # 3% faster: inside the noise margin
        (16.4, 15.0, 0.1, Speed.EVEN),  # 9% slower: inside the tolerance
        (16.6, 15.0, 0.1, Speed.SLOWER),
        (15.5, 15.0, 0.0, Speed.SLOWER),
        (None, 15.0, 0.1, Speed.UNKNOWN),
    ],
)
def test_speed_verdict_table(on_ms: float | None, plain_ms: float, tolerance: float, outcome: Speed) -> None:
    verdict = compare_speed(
        tpot_on_ms=on_ms, plain=PlainReference(plain_ms, "baseline", "baseline at batch [16,32)"), tolerance=tolerance
    )
    assert verdict.outcome is outcome
    if outcome is not Speed.UNKNOWN:
        assert verdict.evidence["plainTpotMs"] == plain_ms
        assert "plain (baseline at batch [16,32))" in verdict.reason


def test_no_reference_says_why() -> None:
    verdict = compare_speed(tpot_on_ms=12.0, plain=None, tolerance=0.1, missing="no plain mean TPOT at batch [16,32)")
    assert verdict.outcome is Speed.UNKNOWN
    assert verdict.reason == "no measured speed comparison: no plain mean TPOT at batch [16,32)"


# ------------------------------------------------------------------------------------------------ the trap table


@pytest.mark.parametrize(
    ("case", "adaptive", "acceptance", "tpot_on_s", "state", "action", "in_reason"),
    [
        # the adaptive-verification trap: acceptance down, speed up -> keep
        ("trap", True, 0.20, 0.010, plain_baseline(15.0), Action.KEEP, "kept: mean TPOT 10.00 ms with speculation"),
        # the benchmark's fault (a): EAGLE-3 K=3 at aggregate acceptance 0.36, faster than plain -> keep
        ("eagle3-0.36", False, 0.36, 0.011, plain_baseline(15.0), Action.KEEP, "acceptance is a warning here"),
        # the mirror: acceptance high, slower than plain at this load -> disable
        ("mirror", True, 0.85, 0.0175, plain_baseline(15.0), Action.DISABLE, "0.86x, slower beyond the tolerance 10%"),
        ("mirror-plain", False, 0.85, 0.0175, plain_baseline(15.0), Action.DISABLE, "0.86x, slower beyond"),
        # low acceptance and no measured gain: acceptance decides, with the comparison in the reason
        ("even", False, 0.30, 0.0145, plain_baseline(15.0), Action.DISABLE, "within -5%/+10%"),
        # high acceptance, no gain and no loss: nothing to do
        ("even-high", False, 0.80, 0.0145, plain_baseline(15.0), Action.KEEP, ">= disableBelow"),
        # no comparison, and the cost model (consistent with the measured TPOT) says speculation still pays: hold
        ("no-evidence", False, 0.30, 0.010, PolicyState(), Action.KEEP, "predicts 1.42x over plain at batch 20"),
        # no comparison, and the model says it does not pay: the acceptance gate acts as before
        ("collapse", False, 0.05, 0.010, PolicyState(), Action.DISABLE, "acceptance 0.05 < disableBelow 0.50"),
        # no comparison under adaptive verification: hold, with the reason (tested for mode Recommend below)
        ("no-evidence-adaptive", True, 0.30, 0.010, PolicyState(), Action.KEEP, "lowers acceptance by design"),
    ],
)
def test_decide_on_measured_speed(
    case: str,
    adaptive: bool,
    acceptance: float,
    tpot_on_s: float,
    state: PolicyState,
    action: Action,
    in_reason: str,
) -> None:
    spec = spec_with(adaptive=adaptive)
    measurements = tp.observed(acceptance=acceptance, batch=20, p99=0.030, tpot_s=tpot_on_s)
    decision = evaluate_alone(tp.inputs(spec, measurements), state, T0)
    assert decision.action is action, decision.reason
    assert in_reason in decision.reason
    speed = decision.evidence["speed"]
    if not state.baseline:
        assert speed["outcome"] == "Unknown"
    if case.startswith("mirror"):
        assert decision.off_kind is OffReason.LOAD, "the drafter is fine: the load is the problem"
        assert speed["outcome"] == "Slower"


@pytest.mark.parametrize("mode", ["Auto", "Recommend"])
def test_collapse_without_speed_evidence_under_adaptive_verification_holds_in_both_modes(mode: str) -> None:
    """Acceptance low by design and nothing measured faster or slower: nothing is applied, and nothing recommended."""
    spec = spec_with(adaptive=True, agreeingEvaluations=1, stabilization="0s", mode=mode)
    result = tp.run(spec, [tp.observed(acceptance=0.25, batch=20)] * 3)
    assert len(result.decisions) == 3, "three evaluations ran"
    assert result.acted == []
    assert [d.action for d in result.decisions] == [Action.KEEP] * 3
    decision = result.decisions[-1]
    assert decision.reason.startswith("holding: acceptance 0.25 < disableBelow 0.50")
    assert "adaptive verification lowers acceptance by design" in decision.reason
    assert "no plain mean TPOT at batch [16,32)" in decision.reason
    assert result.current == ON


@pytest.mark.parametrize(
    ("acceptance", "tpot_s", "acts", "words"),
    [
        # consistent model, speculation priced 1.42x plain: hold, with the prediction in the reason
        (0.30, 0.010, False, "the cost model (model llama8b-h100 predicts TPOT 5.78 ms"),
        (0.05, 0.010, True, "acceptance 0.05 < disableBelow 0.50 over 5m, 41k draft tokens"),  # model: 0.86x
        # the model is off by x5 and there is no comparison: acceptance alone holds
        (0.30, 0.030, False, "holding: acceptance 0.30 < disableBelow 0.50 over 5m, 41k draft tokens"),
        # too few requests for a mean TPOT (low traffic): no prediction, so the same
        (0.30, None, False, "holding: acceptance 0.30 < disableBelow 0.50 over 5m, 41k draft tokens"),
        (0.05, None, False, "holding: acceptance 0.05 < disableBelow 0.50 over 5m, 41k draft tokens"),
    ],
)
def test_without_measured_speed_a_plain_deployment_acts_only_when_the_model_agrees(
    acceptance: float, tpot_s: float | None, acts: bool, words: str
) -> None:
    """Acceptance never switches speculation off on its own: a usable cost model pricing speculation slower than
    plain, or a measured comparison, must say so; with neither (NoData TPOT, a model the window refutes) it holds."""
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    ms = tp.observed(acceptance=acceptance, batch=20, tpot_s=tpot_s or 0.010)
    if tpot_s is None:
        ms[Signal.TPOT_MEAN] = tp.m(Signal.TPOT_MEAN, None, tp.NO_DATA)
    result = tp.run(spec, [ms, ms])
    decision = result.decisions[0]
    assert decision.action is (Action.DISABLE if acts else Action.KEEP), decision.reason
    assert [d.actuate for d in result.decisions] == [acts, False]
    assert words in decision.reason
    if acts:
        assert decision.reason.startswith(words)
    else:
        assert decision.reason.startswith("holding: acceptance")
        assert "acceptance alone never switches speculation off" in decision.reason


def with_replicas(spec: SpeculativeDeploymentSpec, replicas: int) -> SpeculativeDeploymentSpec:
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return parse_spec({**raw, "replicas": replicas})


@pytest.mark.parametrize(
    ("replicas", "mode", "acceptance", "tpot_s", "load", "action", "opening"),
    [
        # a pod to spare in Auto, the engine saturated: neither a usable model nor a comparison, so plain is measured
        # on one pod
        (2, "Auto", 0.30, 0.090, (240, 0), Action.DISABLE, "experiment: acceptance 0.30 < disableBelow 0.50"),
        (2, "Auto", 0.30, None, (20, 12), Action.DISABLE, "experiment: acceptance 0.30 < disableBelow 0.50"),
        # a small batch and no queue: speculation's own regime, not worth two restarts without a reason
        (2, "Auto", 0.30, 0.030, (20, 0), Action.KEEP, "holding: acceptance 0.30 < disableBelow 0.50"),
        # one replica (an outage to restart) or Recommend (nothing runs on its own): acceptance alone holds
        (1, "Auto", 0.30, 0.030, (20, 12), Action.KEEP, "holding: acceptance 0.30 < disableBelow 0.50"),
        (2, "Recommend", 0.30, 0.030, (20, 12), Action.KEEP, "holding: acceptance 0.30 < disableBelow 0.50"),
        # acceptance at disableBelow raises no doubt: nothing to measure
        (2, "Auto", 0.55, 0.030, (20, 12), Action.KEEP, "acceptance 0.55 >= disableBelow 0.50"),
    ],
)
def test_with_neither_a_model_nor_a_comparison_the_only_action_is_a_one_pod_experiment(
    replicas: int, mode: str, acceptance: float, tpot_s: float | None, load: tuple[float, float], action: Action,
    opening: str,
) -> None:  # fmt: skip
    """Low acceptance with no usable cost model (off by x3 or more here, or no mean TPOT) and no plain comparison:
    where a pod can be spared in Auto and the engine runs at its limit (batch >= 90% of max_num_seqs, or requests
    waiting), the proposal is plain on one pod (an experiment its trial promotes only when measured faster), never a
    threshold; elsewhere the config holds."""
    spec = with_replicas(spec_with(agreeingEvaluations=1, stabilization="0s", mode=mode), replicas)
    batch, waiting = load
    ms = tp.observed(acceptance=acceptance, batch=batch, tpot_s=tpot_s or 0.010)
    ms[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, waiting)
    if tpot_s is None:
        ms[Signal.TPOT_MEAN] = tp.m(Signal.TPOT_MEAN, None, tp.NO_DATA)
    decision = tp.run(spec, [ms]).decisions[0]
    assert decision.proposal is action, decision.reason
    assert decision.reason.startswith(opening), decision.reason
    assert decision.experiment is (action is Action.DISABLE)
    if decision.experiment:  # its actuation through a trial: test_progressive
        assert "at saturation" in decision.reason
        assert decision.off_kind is OffReason.SATURATION  # measured at this load only: back on when the rate falls
        assert "kept only if faster beyond 10%" in decision.reason


@pytest.mark.parametrize(
    ("replicas", "deadline", "horizon_s", "acts", "words"),
    [
        # one pod: an outage of the nominal 90 s, repaid by the model's 0.57x (+75%) in 2 m
        (1, "3s", 300.0, True, "predicts 0.57x over plain at batch 200, K=3"),
        # two pods, no TTFT deadline: the pod left serving queues, priced at the nominal capacity removed
        (2, None, 300.0, True, "predicts 0.57x over plain at batch 200, K=3"),
        # two pods, 3 s deadline: the pod left serves 0.52x the load, and then carries its queue through the trial's
        # 5.5 m analysis at 1.04x its share: 417 s of arrivals late, repaid in 9 m: past a 5 m horizon it holds,
        # within an hour it acts
        (2, "3s", 300.0, False, "but at this load its rollout costs 417s of serving, which +75.2% does not repay"),
        (2, "3s", 3600.0, True, "predicts 0.57x over plain at batch 200, K=3"),
    ],
)
def test_a_model_priced_disable_near_capacity_must_repay_the_queue_its_rollout_builds(
    replicas: int, deadline: str | None, horizon_s: float, acts: bool, words: str
) -> None:
    """Acceptance 0.05 at batch 200 of 256, where the consistent model prices speculation at 0.57x plain and the
    running config can serve 1.04x its load: a disable must repay its rollout like any change."""
    spec = with_replicas(spec_with(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True}), replicas)
    if deadline is not None:
        raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        raw["autotune"]["latency"]["ttftDeadline"] = deadline
        spec = parse_spec(raw)
    fit = replace(fit_settings_for(spec), horizon_s=horizon_s)
    decision = tp.run(spec, [tp.observed(acceptance=0.05, batch=200, tpot_s=0.020)], fit=fit).decisions[0]
    assert (decision.action is Action.DISABLE) is acts, decision.reason
    assert words in decision.reason, decision.reason
    if not acts:
        assert decision.reason.startswith("holding: acceptance 0.05 < disableBelow 0.50")
        assert decision.evidence["threshold"]["restartAtLoad"]["lateSeconds"] == pytest.approx(417, abs=1)


def test_a_proposal_between_acting_and_holding_restarts_the_streak() -> None:
    """At a borderline prediction the model alternates between pricing speculation faster (hold) and slower (disable):
    a hold between two disables breaks their agreement, so nothing acts until two agree in a row."""
    spec = spec_with(agreeingEvaluations=2, stabilization="0s")
    holding = tp.observed(acceptance=0.30, batch=20, tpot_s=0.010)  # the model predicts 1.42x: hold
    acting = tp.observed(acceptance=0.05, batch=20, tpot_s=0.010)  # the model predicts 0.86x: may act
    mixed = tp.run(spec, [holding, acting, holding, acting])
    assert [d.action for d in mixed.decisions] == [Action.KEEP, Action.KEEP, Action.KEEP, Action.KEEP]
    assert mixed.acted == []
    assert tp.run(spec, [acting, acting]).acted == [1]


@pytest.mark.parametrize(
    ("case", "acceptances", "acted", "holding"),
    [
        # at batch 20 and 10 ms the consistent model predicts 0.10 -> 0.98x, 0.12 -> 1.03x, 0.14 -> 1.07x over plain
        ("priced faster than plain", [0.12, 0.12, 0.14], [], [True, True, True]),
        ("priced slower than plain", [0.10, 0.10], [1], [False, False]),
        ("faster, then slower", [0.14, 0.12, 0.10, 0.10], [3], [True, True, False, False]),
    ],
)
def test_an_acceptance_disable_acts_only_where_the_model_prices_speculation_slower_than_plain(
    case: str, acceptances: list[float], acted: list[int], holding: list[bool]
) -> None:
    """One line, plain's speed: a model that prices speculation no slower than plain holds the config (acceptance a
    warning in the reason); priced slower, the disable may act."""
    spec = spec_with(agreeingEvaluations=2, stabilization="0s")
    result = tp.run(spec, [tp.observed(acceptance=a, batch=20, tpot_s=0.010) for a in acceptances])
    assert result.acted == acted
    assert [d.reason.startswith("holding:") for d in result.decisions] == holding


def test_the_same_collapse_acts_once_plain_is_measured_not_faster() -> None:
    spec = spec_with(adaptive=True, agreeingEvaluations=1, stabilization="0s")
    result = tp.run(spec, [tp.observed(acceptance=0.25, batch=20, tpot_s=0.0149)], state=plain_baseline(15.0))
    assert result.acted == [0]
    assert "mean TPOT 14.90 ms with speculation vs 15.00 ms plain" in result.decisions[0].reason


def test_a_plain_canary_is_the_reference_at_the_same_load() -> None:
    spec = spec_with(adaptive=True)
    main = tp.observed(acceptance=0.2, batch=20, tpot_s=0.010)
    canary = tp.observed(on=False, batch=22, tpot_s=0.016, p99=0.030)
    decision = evaluate_alone(tp.inputs(spec, main, canary=canary), PolicyState(), T0)
    assert decision.action is Action.KEEP
    assert "16.00 ms plain (plain canary at batch 22.0 vs 20.0)" in decision.reason
    far = tp.observed(on=False, batch=60, tpot_s=0.016, p99=0.030)  # not comparable load: no reference
    again = evaluate_alone(tp.inputs(spec, main, canary=far), PolicyState(), T0)
    assert again.action is Action.KEEP
    assert again.reason.startswith("holding: acceptance 0.20 < disableBelow"), "no comparison: acceptance alone holds"
    assert "16.00 ms plain" not in again.reason


def test_force_on_keeps_and_says_acceptance_is_below() -> None:
    spec = spec_with(overrides={"speculation": "ForceOn"})
    decision = evaluate_alone(tp.inputs(spec, tp.observed(acceptance=0.2, batch=20)), PolicyState(), T0)
    assert decision.action is Action.KEEP
    assert decision.reason.startswith("acceptance 0.20 < disableBelow 0.50")


# ------------------------------------------------------------------------------------------------ while off


def test_an_acceptance_disable_is_undone_when_speculation_at_that_acceptance_was_faster() -> None:
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    record = tp.baseline(Mode.ON, 4, 20.0, acceptance=0.36, tpot_mean_ms=10.0)
    off = OffRecord(OffReason.ACCEPTANCE, T0 - 5 * MINUTE, 10, "acceptance 0.36 < disableBelow 0.50")
    state = PolicyState(baseline=(record,), off=off, selected=OFF)
    plain_now = tp.observed(on=False, batch=10, p99=0.030, tpot_s=0.015)
    decision = evaluate_alone(tp.inputs(spec, plain_now, OFF), state, T0)
    assert decision.action is Action.ENABLE
    assert decision.reason.startswith(
        "the acceptance gate misread this drafter: with speculation at acceptance 0.36 (below disableBelow 0.50) "
        "at batch [8,16), mean TPOT 10.00 ms with speculation vs 15.00 ms plain (plain now at batch 10.0): 1.50x"
    )
    # a record from before the drafter degraded (acceptance 0.8) proves nothing about the degraded drafter
    stale = replace(state, baseline=(replace(record, acceptance=0.8),))
    assert evaluate_alone(tp.inputs(spec, plain_now, OFF), stale, T0).action is Action.KEEP
    # at that low acceptance speculation was not faster: the disable was right
    slow = replace(state, baseline=(replace(record, tpot_mean_ms=14.8),))
    assert evaluate_alone(tp.inputs(spec, plain_now, OFF), slow, T0).action is Action.KEEP


@pytest.mark.parametrize(
    ("off_acceptance", "action"),
    [
        (None, Action.ENABLE),  # a state written before the disable's acceptance was kept: the record decides
        (0.36, Action.ENABLE),  # the record was taken at the acceptance the disable acted on
        (0.33, Action.ENABLE),  # ... or within 10% of it
        (0.30, Action.KEEP),  # the record describes a better drafter than the one switched off
        (0.11, Action.KEEP),  # the benchmark's drafter-degraded: healthy record 0.36, disabled at 0.11
    ],
)
def test_a_speed_record_undoes_an_acceptance_disable_only_at_that_acceptance(
    off_acceptance: float | None, action: Action
) -> None:
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    record = tp.baseline(Mode.ON, 4, 20.0, acceptance=0.36, tpot_mean_ms=10.0)
    off = OffRecord(OffReason.ACCEPTANCE, T0 - 5 * MINUTE, 10, "acceptance < disableBelow 0.50", off_acceptance)
    state = PolicyState(baseline=(record,), off=off, selected=OFF)
    assert PolicyState.from_dict(state.to_dict()).off == off, "the disable's acceptance survives the status"
    plain_now = tp.observed(on=False, batch=10, p99=0.030, tpot_s=0.015)
    decision = evaluate_alone(tp.inputs(spec, plain_now, OFF), state, T0)
    assert decision.action is action, decision.reason


def test_an_acceptance_disable_records_its_acceptance() -> None:
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    result = tp.run(spec, [tp.observed(acceptance=0.05, batch=20, tpot_s=0.010)])
    assert result.acted == [0]
    assert result.state.off is not None
    assert result.state.off.kind is OffReason.ACCEPTANCE
    assert result.state.off.acceptance == pytest.approx(0.05)


def test_a_probe_is_confirmed_by_measured_speed() -> None:
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    state = replace(plain_baseline(15.0), probe_started=T0 - 30 * MINUTE)
    result = tp.run(spec, [tp.observed(acceptance=0.4, batch=20, tpot_s=0.010)], state=state)
    assert result.acted == []
    assert result.state.probe_started is None, "faster than plain at this load: the probe keeps speculation"


# ------------------------------------------------------------------------------------------------ agreement


S = SpeculationIntent(True, 3, 24, ((1, 23, 3), (24, 256, 0)))


@pytest.mark.parametrize(
    ("other", "agree"),
    [
        (S, True),
        (replace(S, disable_above_batch_size=25, batch_schedule=((1, 24, 3), (25, 256, 0))), True),
        (replace(S, disable_above_batch_size=22, batch_schedule=((1, 21, 3), (22, 256, 0))), True),
        (replace(S, disable_above_batch_size=30, batch_schedule=((1, 29, 3), (30, 256, 0))), False),
        (replace(S, batch_schedule=((1, 23, 2), (24, 256, 0))), False),  # another K: another decision
        (replace(S, batch_schedule=((1, 10, 3), (11, 23, 1), (24, 256, 0))), False),  # another shape
        (replace(S, num_speculative_tokens=4), False),
        (replace(S, enabled=False), False),
        (replace(S, batch_schedule=None), False),
    ],
)
def test_intents_agree_with_a_tolerance_on_boundaries(other: SpeculationIntent, agree: bool) -> None:
    assert intents_agree(S, other) is agree
    assert intents_agree(other, S) is agree


@pytest.mark.parametrize(("a", "b", "close"), [(24, 26, True), (24, 27, False), (200, 219, True), (200, 223, False)])
def test_boundary_tolerance_is_two_batches_or_ten_percent(a: int, b: int, close: bool) -> None:
    assert boundary_close(a, b) is close


def test_keys_agree_needs_the_same_action() -> None:
    on = SpeculationIntent(True, 3)
    assert keys_agree("Keep:x", "Keep:x")
    assert not keys_agree("ChangeBatchThreshold:" + "{}", "DisableSpeculation:{}")
    assert not keys_agree("garbage", "DisableSpeculation:{}")
    assert keys_agree(Proposal(Action.ENABLE, on, "", {}).key(), Proposal(Action.ENABLE, on, "x", {}).key())


def tuned_at_batch_180() -> tuple[SpeculativeDeploymentSpec, PolicyState, dict[str, Measurement]]:
    """A tuned schedule (3 agreeing evaluations over 2m, maxNumSeqs 256), a load record at batch 8 and a window at
    batch 180, where the fit sheds from the running K = 3."""
    spec = tp.make_spec(agreeingEvaluations=3, stabilization="2m", batchThreshold={"tune": True, "min": 4, "max": 256})
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    return spec, PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE), tp.tuned_observation(batch=180)


def test_jittering_fitted_schedules_reach_agreement_and_install() -> None:
    """Fault (b) of the benchmark: the streak survives a fitted boundary that moved by one since its first window."""
    spec, state, measurements = tuned_at_batch_180()
    first = evaluate_alone(tp.inputs(spec, measurements), state, T0)
    assert first.action is Action.CHANGE_THRESHOLD
    schedule = first.target.batch_schedule
    assert schedule is not None
    assert len(schedule) >= 2
    lo, hi, k = schedule[-1]
    shifted = (*schedule[:-2], (schedule[-2][0], schedule[-2][1] + 1, schedule[-2][2]), (lo + 1, hi, k))
    threshold = first.target.disable_above_batch_size
    jittered = replace(first.target, batch_schedule=shifted, disable_above_batch_size=threshold and threshold + 1)
    anchor = Proposal(Action.CHANGE_THRESHOLD, jittered, "", {}).key()
    streak = Streak(anchor, Action.CHANGE_THRESHOLD, 2, T0 - 5 * MINUTE)
    decision, after = decide(tp.inputs(spec, measurements), replace(state, streak=streak), T0)
    assert after.streak is not None
    assert after.streak.count == 3, "the jittered boundary is the same decision"
    assert after.streak.key == anchor, "the streak keeps its first proposal as the anchor"
    assert decision.actuate
    assert decision.target == first.target, "the newest fit is installed"


# ------------------------------------------------------------------------------------------------ gate vs the fit


SCHED, NO_SCHED = "0.32.0", "0.20.0"  # releases with and without a per-batch-size schedule


def tuned_spec(*, tune: bool = True, version: str = SCHED) -> SpeculativeDeploymentSpec:
    """The benchmark's closed-loop spec: vLLM 0.32 (batch-size schedules), maxNumSeqs 256, the threshold tuned."""
    spec = tp.make_spec(
        version=version,
        agreeingEvaluations=3,
        stabilization="2m",
        batchThreshold={"tune": tune, "min": 8, "max": 256},
    )
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})


HEAVY = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)  # batch [128,256) all along


def tpot_ms(measurements: dict[str, Measurement]) -> float:
    value = measurements[Signal.TPOT_MEAN].value
    assert value is not None
    return value * 1000


@pytest.mark.parametrize(
    ("case", "version", "tune", "alpha", "tpot_scale", "plain_measured", "action", "in_reason"),
    [
        # the benchmark's mixed-temperature: EAGLE-3 K=3 at aggregate acceptance 0.34, batch 214, no plain record:
        # the fit (K=1 at the top, priced above off by the K = 0 comparison) is proposed, not speculation off
        ("mixed-temperature", SCHED, True, 0.55, 1.0, False, Action.CHANGE_THRESHOLD, "prices a refit above both"),
        # the threshold is not tuned: the acceptance gate acts as before
        ("tune-off", SCHED, False, 0.55, 1.0, False, Action.DISABLE, "acceptance 0.34 < disableBelow 0.50 over 5m"),
        # a mean TPOT five times what the cost model predicts: no usable model, no comparison, so acceptance alone holds
        ("inconsistent", SCHED, True, 0.55, 5.0, False, Action.KEEP, "acceptance alone never switches speculation off"),
        # a collapsed drafter: no K beats off, the gate acts
        ("collapse", SCHED, True, 0.10, 1.0, False, Action.DISABLE, "acceptance 0.04 < disableBelow 0.50 over 5m"),
        # plain measured at this load, as fast as speculation now: the measurement decides, not the model
        ("measured", SCHED, True, 0.55, 1.0, True, Action.DISABLE, "with speculation vs"),
        # vLLM 0.20 has no batch-size schedule: one K for every batch size, priced above off, not speculation off
        ("no schedule", NO_SCHED, True, 0.55, 1.0, False, Action.CHANGE_K, "K = 1 at every batch size"),
    ],
)  # fmt: skip
def test_an_acceptance_disable_without_measured_speed_gives_way_to_a_fit_that_beats_off(
    case: str,
    version: str,
    tune: bool,
    alpha: float,
    tpot_scale: float,
    plain_measured: bool,
    action: Action,
    in_reason: str,
) -> None:
    measurements = tp.tuned_observation(batch=214, alpha=alpha)
    on_ms = tpot_ms(measurements) * tpot_scale
    measurements[Signal.TPOT_MEAN] = tp.m(Signal.TPOT_MEAN, on_ms / 1000, samples=800)
    state = HEAVY
    if plain_measured:
        state = replace(state, baseline=(tp.baseline(Mode.OFF, 8, 400.0, tpot_mean_ms=on_ms),))
    decision = evaluate_alone(tp.inputs(tuned_spec(tune=tune, version=version), measurements), state, T0)
    assert decision.action is action, decision.reason
    assert in_reason in decision.reason
    if version == NO_SCHED:
        assert decision.target == SpeculationIntent(True, 1)
    elif action is Action.CHANGE_THRESHOLD:
        schedule = decision.target.batch_schedule
        assert schedule is not None
        assert decision.target.enabled
        assert schedule[-1] == (115, 256, 1), "K=1 where the deployment runs"
        tax = decision.evidence["threshold"]["k0Tax"]
        assert tax["offWins"] is False
        assert tax["netSeconds"] < 0


def test_the_fit_is_agreed_and_installed_through_the_stored_status() -> None:
    """Like the operator: each evaluation reads the state back from status.autotune as the API server stores it."""
    spec = tuned_spec()
    state, current = HEAVY, ON
    applied: list[int] = []
    for i in range(4):
        stored, malformed = PolicyState.from_status(json.loads(json.dumps(state.to_dict())))
        assert malformed is None
        now = T0 + i * MINUTE
        decision, state = decide(tp.inputs(spec, tp.tuned_observation(batch=214, alpha=0.55), current), stored, now)
        assert decision.proposal is Action.CHANGE_THRESHOLD, decision.reason
        if decision.actuate:
            state = record_actuation(state, decision, current, now, spec.autotune.budget)
            applied.append(i)
            current = decision.target
            break
    assert applied == [2], "three agreeing evaluations over the 2m stabilization, then one install"
    assert current.enabled
    assert current.batch_schedule is not None
    assert current.batch_schedule[-1][2] == 1
    assert state.off is None, "nothing was switched off"


def shifted(intent: SpeculationIntent, by: int) -> SpeculationIntent:
    """The same fit with every boundary between ranges moved by `by` batch sizes."""
    schedule = intent.batch_schedule
    assert schedule is not None
    moved = tuple(
        (lo if i == 0 else lo + by, hi if i == len(schedule) - 1 else hi + by, k)
        for i, (lo, hi, k) in enumerate(schedule)
    )
    threshold = intent.disable_above_batch_size
    return replace(intent, batch_schedule=moved, disable_above_batch_size=threshold and threshold + by)


@pytest.mark.parametrize(
    ("case", "count", "minutes", "by", "anchor_after", "count_after"),
    [
        # agreed (3 of 3 over the 2m window) and held by a gate: the anchor follows the newest fit
        ("agreed, held", 5, 10, 2, "newest", 6),
        # still gathering agreement: the first proposal stays the anchor (no creeping into agreement)
        ("agreeing", 1, 1, 2, "first", 2),
        # agreed, but the newest fit moved back toward more speculation, beyond the tolerance: a fresh streak
        ("agreed, another fit", 5, 10, -30, "newest", 1),
        # the newest fit sheds further than the streak's first, beyond the tolerance: the same decision, newest applies
        ("agreeing, a further shed", 1, 1, 30, "newest", 2),
    ],
)
def test_an_agreed_streak_follows_a_drifting_fit(
    case: str, count: int, minutes: int, by: int, anchor_after: str, count_after: int
) -> None:
    spec, state, measurements = tuned_at_batch_180()
    newest = evaluate_alone(tp.inputs(spec, measurements), state, T0).target
    first = Proposal(Action.CHANGE_THRESHOLD, shifted(newest, by), "", {}).key()
    streak = Streak(first, Action.CHANGE_THRESHOLD, count, T0 - minutes * MINUTE)
    _, after = decide(tp.inputs(spec, measurements), replace(state, streak=streak), T0)
    assert after.streak is not None
    assert after.streak.count == count_after
    newest_key = Proposal(Action.CHANGE_THRESHOLD, newest, "", {}).key()
    assert after.streak.key == (newest_key if anchor_after == "newest" else first)


@pytest.mark.parametrize(
    ("case", "anchor", "count_after", "acts"),
    [
        # temperature-shift: a disable, then a refit; both speculate less than the running K = 3: one streak, whose
        # third evaluation installs the newest proposal
        ("a disable, then a refit", Proposal(Action.DISABLE, tp.ON.without_speculation(), "", {}), 3, True),
        # a streak toward more speculation, then a shed: another decision, a fresh streak
        ("more K, then a shed", Proposal(Action.CHANGE_K, SpeculationIntent(True, 4), "", {}), 1, False),
    ],
)
def test_a_shed_continues_a_streak_of_sheds_of_another_action(
    case: str, anchor: Proposal, count_after: int, acts: bool
) -> None:
    spec, state, measurements = tuned_at_batch_180()
    newest = evaluate_alone(tp.inputs(spec, measurements), state, T0)
    assert newest.action is Action.CHANGE_THRESHOLD
    streak = Streak(anchor.key(), anchor.action, 2, T0 - 2 * MINUTE)
    decision, after = decide(tp.inputs(spec, measurements), replace(state, streak=streak), T0)
    assert after.streak is not None
    assert (after.streak.count, after.streak.action) == (count_after, Action.CHANGE_THRESHOLD)
    assert after.streak.key == Proposal(Action.CHANGE_THRESHOLD, newest.target, "", {}).key()
    assert decision.actuate is acts
    assert decision.target == (newest.target if acts else tp.ON)  # a held decision keeps the running config


RANGES = SpeculationIntent(True, 4, None, ((1, 7, 4), (8, 34, 3), (35, 89, 2), (90, 256, 1)))
MOVED = replace(RANGES, batch_schedule=((1, 12, 4), (13, 38, 3), (39, 95, 2), (96, 256, 1)))  # diurnal's drift
# a band at the schedule's edge: K = 4 at batch 1 only, where K = 4 and K = 3 tie
EDGE_BAND = SpeculationIntent(True, 4, None, ((1, 27, 3), (28, 78, 2), (79, 256, 1)))
WITH_K4_AT_ONE = replace(EDGE_BAND, batch_schedule=((1, 1, 4), (2, 28, 3), (29, 78, 2), (79, 256, 1)))


@pytest.mark.parametrize(
    ("anchor", "key", "largest_gain", "agree"),
    [
        (RANGES, MOVED, 0.017, True),  # past the tolerance, within the model's 3% at every batch
        (RANGES, MOVED, -0.029, True),
        (RANGES, MOVED, 0.031, False),  # the model tells them apart: another decision
        (RANGES, MOVED, -0.03, False),
        (RANGES, MOVED, None, False),  # not priced (no fit this evaluation): only the tolerance counts
        # a band more or fewer, where the model cannot tell them apart, is the same decision; where it can, not
        (RANGES, replace(MOVED, batch_schedule=((1, 12, 4), (13, 95, 2), (96, 256, 1))), 0.0, True),
        (RANGES, replace(MOVED, batch_schedule=((1, 12, 4), (13, 95, 2), (96, 256, 1))), 0.04, False),
        (EDGE_BAND, WITH_K4_AT_ONE, 0.004, True),
        (EDGE_BAND, WITH_K4_AT_ONE, -0.05, False),
        (RANGES, replace(MOVED, num_speculative_tokens=5), 0.0, True),
        (RANGES, replace(MOVED, disable_above_batch_size=200), 0.0, True),
        (RANGES, replace(MOVED, disable_above_batch_size=200), 0.2, False),
    ],
)
def test_fits_past_the_tolerance_agree_when_the_model_cannot_tell_them_apart(
    anchor: SpeculationIntent, key: SpeculationIntent, largest_gain: float | None, agree: bool
) -> None:
    first = Proposal(Action.CHANGE_THRESHOLD, anchor, "", {}).key()
    newest = Proposal(Action.CHANGE_THRESHOLD, key, "", {}).key()
    assert not keys_agree(first, newest), "past the boundary tolerance"
    assert agree_by_effect(first, newest, largest_gain, 0.03) is agree
    assert not agree_by_effect(
        first, newest.replace("ChangeBatchThreshold", "DisableSpeculation", 1), largest_gain, 0.03
    )


def test_a_streaks_anchor_is_read_back_only_for_its_own_action() -> None:
    key = Proposal(Action.CHANGE_THRESHOLD, RANGES, "", {}).key()
    assert anchor_intent(key, Action.CHANGE_THRESHOLD.value) == RANGES
    assert anchor_intent(key, Action.DISABLE.value) is None
    assert anchor_intent("garbage", Action.CHANGE_THRESHOLD.value) is None


@pytest.mark.parametrize(
    ("case", "first_boundary_by", "all_boundaries_by", "count_after", "by_effect"),
    [
        # K = 3 -> 2 moved 74 -> 62 (past the 10% tolerance): K = 2 within 1.9% of K = 3 there, the same decision
        ("flat crossover", -12, 0, 3, True),
        # every boundary 10 lower: K = 1 from 161, where K = 2 is 6.8% faster until the CUDA-graph cliff at 171
        ("cliff", 0, -10, 1, False),
    ],
)
def test_a_boundary_that_moved_where_the_model_sees_a_tie_keeps_the_streak(
    case: str, first_boundary_by: int, all_boundaries_by: int, count_after: int, by_effect: bool
) -> None:
    """Through the stored status, like the operator: the streak's first proposal is read back from its key, the
    newest fit is priced against it at every batch size, and only a difference the model can see starts over."""
    spec, state, measurements = tuned_at_batch_180()
    newest = evaluate_alone(tp.inputs(spec, measurements), state, T0).target
    assert newest.batch_schedule == ((1, 74, 3), (75, 170, 2), (171, 256, 1))
    (lo1, hi1, k1), (lo2, hi2, k2), last = newest.batch_schedule
    anchor = shifted(replace(newest, batch_schedule=((lo1, hi1 + first_boundary_by, k1), (lo2 + first_boundary_by,
                     hi2, k2), last)), all_boundaries_by)  # fmt: skip
    first = Proposal(Action.CHANGE_THRESHOLD, anchor, "", {}).key()
    streak = Streak(first, Action.CHANGE_THRESHOLD, 2, T0 - 2 * MINUTE)
    stored, malformed = PolicyState.from_status(json.loads(json.dumps(replace(state, streak=streak).to_dict())))
    assert malformed is None
    decision, after = decide(tp.inputs(spec, measurements), stored, T0)
    versus = decision.evidence["threshold"]["vsAnchor"]
    assert versus["anchor"] == schedule_text(anchor.batch_schedule)
    assert (abs(versus["largestGain"]) < 0.03) is by_effect
    assert after.streak is not None
    assert after.streak.count == count_after
    assert ("byEffect" in decision.evidence["agreement"]) is by_effect
    assert decision.actuate is by_effect, "3 of 3 over the 2m window: the agreed fit goes in"
    if by_effect:
        assert decision.target == newest, "the newest fit is the one installed"


# ------------------------------------------------------------------------------------------------ priced agreement


@pytest.mark.parametrize(
    ("gain", "restart_s", "expected_s", "shortened"),
    [
        (0.0, 90.0, 600.0, False),  # no gain figure: the full span
        (0.10, 90.0, 600.0, False),  # repaid in 15m: longer than the span
        (0.15, 90.0, 600.0, False),  # repaid in exactly the span
        (0.30, 90.0, 300.0, True),
        (0.42, 300.0, 600.0, False),  # a 70B restart of 300 s repays in 12m
        (3.0, 90.0, 30.0, True),
        (0.0, 0.0, 0.0, True),  # a restart that costs nothing has nothing to repay, whatever the gain
        (-0.01, 0.0, 0.0, True),
    ],
)
def test_the_stabilization_is_no_longer_than_the_changes_payback(
    gain: float, restart_s: float, expected_s: float, shortened: bool
) -> None:
    span, short = stabilization_for(timedelta(minutes=10), gain, restart_s)
    assert span.total_seconds() == pytest.approx(expected_s)
    assert short is shortened


@pytest.mark.parametrize(
    ("trial_s", "expected_s", "shortened"),
    [
        (390.0, 390.0, True),  # a 90 s restart and a 5m window with two 15 s scrapes, within the 10m span
        (599.0, 599.0, True),
        (600.0, 600.0, False),  # a trial as long as the span: the span as declared
        (750.0, 600.0, False),  # a 70B restart of 420 s and the same analysis: never longer than the span
    ],
)
def test_an_experiment_waits_no_longer_than_its_trial(trial_s: float, expected_s: float, shortened: bool) -> None:
    span, short = experiment_wait(timedelta(minutes=10), timedelta(seconds=trial_s))
    assert span.total_seconds() == pytest.approx(expected_s)
    assert short is shortened


@pytest.mark.parametrize(
    ("stable_s", "span_s", "priced", "expected"),
    [
        # a payback span: act once holding to the next evaluation (60 s) would pass it (drafter-degraded: 3 minutes
        # stable of a 3m11s payback acts at 1,500 s instead of 1,560 s)
        (180.0, 191.0, True, True),
        (120.0, 213.0, True, False),  # 2 minutes + the next minute is still within a 3m29s payback
        (153.0, 213.0, True, True),  # exactly the payback at the next evaluation
        (0.0, 45.0, True, True),  # a payback shorter than an interval: only the agreeing evaluations remain
        # a declared stabilization is kept as written: every recommendation within it agreed
        (540.0, 600.0, False, False),
        (600.0, 600.0, False, True),
        (0.0, 0.0, False, True),
    ],
)
def test_a_payback_span_counts_the_gain_forgone_until_the_next_evaluation(
    stable_s: float, span_s: float, priced: bool, expected: bool
) -> None:
    """A hold lasts one interval: holding while the time stable so far is below the payback forgoes up to an interval
    more than a wrong restart costs (the backlog gate counts its deferral the same way). Benchmark, drafter-degraded,
    seed 1: the agreed K = 1 went in at 1,560 s; now 1,500 s, goodput 7,598.72 -> 7,685.10."""
    assert (
        stabilized(
            timedelta(seconds=stable_s), timedelta(seconds=span_s), priced=priced, interval=timedelta(seconds=60)
        )
        is expected
    )


K3 = SpeculationIntent(enabled=True, num_speculative_tokens=3)
FIT_321 = replace(K3, batch_schedule=((1, 45, 3), (46, 170, 2), (171, 256, 1)))
FIT_21 = replace(K3, batch_schedule=((1, 119, 2), (120, 256, 1)))
FIT_1 = replace(K3, batch_schedule=((1, 256, 1),))
FIT_3_0 = replace(K3, batch_schedule=((1, 63, 3), (64, 256, 0)), disable_above_batch_size=64)


@pytest.mark.parametrize(
    ("current", "target", "expected"),
    [
        (K3, FIT_321, True),
        (K3, FIT_1, True),
        (K3, K3.without_speculation(), True),  # off is K = 0 everywhere
        (K3, FIT_3_0, True),
        (FIT_321, FIT_21, True),
        (FIT_21, FIT_321, False),  # K 3 again at low batch: more speculation there
        (FIT_3_0, FIT_1, False),  # less at low batch, more above 64
        (K3, K3, False),  # no change is no shed
        (K3.without_speculation(), K3, False),
        (replace(K3, num_speculative_tokens=2), K3, False),
    ],
)
def test_a_shed_speculates_less_at_every_batch_size(
    current: SpeculationIntent, target: SpeculationIntent, expected: bool
) -> None:
    assert sheds(current, target, 256) is expected


def key(intent: SpeculationIntent, action: Action = Action.CHANGE_THRESHOLD) -> str:
    return Proposal(action, intent, "", {}).key()


@pytest.mark.parametrize(
    ("anchor", "newest", "expected"),
    [
        (key(FIT_321), key(FIT_21), True),  # the drafter-degraded fit falling as its window fills
        (key(FIT_321), key(FIT_1), True),
        (key(FIT_21), key(FIT_21), True),
        (key(FIT_1), key(FIT_21), False),  # the same action back toward more speculation: a fit not settled
        (key(FIT_3_0), key(FIT_1), False),  # the same action, neither further than the other
        # temperature-shift: a disable and a refit taking turns, both less speculation than the running K = 3
        (key(K3.without_speculation(), Action.DISABLE), key(FIT_1), True),
        (key(FIT_321), key(K3.without_speculation(), Action.DISABLE), True),
        (key(FIT_1), key(replace(K3, num_speculative_tokens=2), Action.CHANGE_K), True),  # another action, K 2 < 3
        (key(K3), key(FIT_1), False),  # the streak's first proposes no shed
        (key(FIT_1, Action.DISABLE), key(replace(K3, num_speculative_tokens=4), Action.CHANGE_K), False),  # more K
        ("garbage", key(FIT_1), False),
    ],
)
def test_sheds_agree_by_direction(anchor: str, newest: str, expected: bool) -> None:
    assert shed_alike(anchor, newest, K3, 256) is expected


@pytest.mark.parametrize(
    ("case", "batch", "alphas", "acted", "shortened_to", "target"),
    [
        # +4.6% over the heavy record, nothing at batch 60, where the fit keeps K = 3: the full 10-minute span
        ("small gain", 60, [0.7] * 12, [10], None, None),
        # +43% at batch 180, and +165% per request at the load served now (the batch settles at 68,
        # schedule.gain_at_same_load): a 90 s restart repaid in 55 s, installed as soon as 3 evaluations agree
        # (before, priced at the same batch: 3m29s, installed at evaluation 3)
        ("large gain", 180, [0.3] * 12, [2], "55s", ((1, 256, 1),)),
        # the drafter-degraded sequence: each window's fit sheds further than the last, beyond the boundary
        # tolerance; one streak from the first, installed once the newest repays the restart
        ("falling fit", 180, [0.6, 0.5, 0.4] + [0.3] * 9, [2], "1m7s", ((1, 33, 2), (34, 256, 1))),
        # a fit rising back toward more speculation is another decision: the streak starts again at evaluation 2
        ("rising fit", 180, [0.3, 0.3, 0.6] + [0.6] * 9, [4], "1m50s", ((1, 30, 3), (31, 170, 2), (171, 256, 1))),
    ],
)
def test_a_priced_change_waits_for_its_payback_not_the_whole_stabilization(
    case: str,
    batch: int,
    alphas: list[float],
    acted: list[int],
    shortened_to: str | None,
    target: tuple[tuple[int, int, int], ...] | None,
) -> None:
    """Benchmark, drafter-degraded: the agreed shed waited 8 minutes for the span while K = 3 missed the SLO."""
    tuning = {"tune": True, "min": 8, "max": 256}
    spec = tp.make_spec(version="0.32.0", agreeingEvaluations=3, stabilization="10m", batchThreshold=tuning)
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    result = tp.run(spec, [tp.tuned_observation(batch=batch, alpha=a) for a in alphas], state=HEAVY)
    assert [i for i, d in enumerate(result.decisions) if d.actuate] == acted
    for i in acted:
        agreement = result.decisions[i].evidence["agreement"]
        assert agreement.get("stabilizationShortenedTo") == shortened_to
        if shortened_to is None:
            continue
        assert result.decisions[i].target.batch_schedule == target
        gain = result.decisions[i].evidence["threshold"]["predictedGainAtLoad"]
        assert (
            f"repaid by the change's {gain:+.1%} (the schedule's predicted per-request speed-up at the load now)"
            in (agreement["why"])
        )


@pytest.mark.parametrize(
    ("case", "load", "batch", "acted", "gain_now"),
    [
        # the drafter-degraded shape: the load record is the light batch before the collapse (+12% over it), the
        # batch now is 180, where K = 1 beats the collapsed K = 3 by +43% (+165% per request at the load now):
        # each minute waited forgoes that; installed as soon as 3 evaluations agree
        ("history light, now heavy", {6: 7200.0}, 180, [2], 0.4311),
        # the other way round: +42% over the heavy record, but only +13% at the batch now (+18% per request at the
        # load now, the batch settling from 40 at 34), repaid in 8m17s: waiting now forgoes little
        ("history heavy, now light", {8: 7200.0}, 40, [8], 0.1302),
    ],
)
def test_the_wait_for_a_shed_is_priced_at_the_batch_running_now(
    case: str, load: dict[int, float], batch: float, acted: list[int], gain_now: float
) -> None:
    """Benchmark, drafter-degraded: the payback of the agreed K = 1 was priced at +19..24% over the load record
    (mostly the light batch before the collapse) and the shed waited 6-8 minutes at batch 200+, where it was worth
    +46%; the stabilization now forgoes the gain at the batch now (agreement.stabilization_for)."""
    tuning = {"tune": True, "min": 8, "max": 256}
    spec = tp.make_spec(version="0.32.0", agreeingEvaluations=3, stabilization="10m", batchThreshold=tuning)
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    state = PolicyState(load=load, load_updated=T0 - MINUTE)
    result = tp.run(spec, [tp.tuned_observation(batch=batch, alpha=0.3) for _ in range(12)], state=state)
    assert [i for i, d in enumerate(result.decisions) if d.actuate] == acted
    decision = result.decisions[acted[0]]
    assert decision.target.batch_schedule == ((1, 256, 1),)
    assert decision.evidence["threshold"]["predictedGainNow"] == pytest.approx(gain_now, abs=1e-3)


@pytest.mark.parametrize(
    ("replicas", "batch", "acted", "free"),
    [
        # one pod: its restart is an outage of 90 s, repaid by K = 1 in more than the 10-minute span
        (1, 20, [10], False),
        # two pods at batch 20: the pod left serving carries both pods' arrivals (2.80x the load, a wave needs 2x;
        # no TPOT objective declared), so the rollout costs no serving and the shed waits only for its agreement
        (2, 20, [2], True),
        # two pods at batch 40: 1.68x, a wave costs the nominal 90 s, repaid by +18% per request in 8m17s
        (2, 40, [8], False),
    ],
)
def test_a_shed_whose_rollout_costs_no_serving_waits_only_for_agreement(
    replicas: int, batch: float, acted: list[int], free: bool
) -> None:
    """Benchmark, spike (seed 4, two replicas): a shed installed "while the restart is free" waited the 60 s
    stabilization; one evaluation whose wave was predicted 0.65 ms past the TPOT objective broke the streak at 54 s of
    60 s, and the flash crowd arrived before the next streak ended (67.1% of the oracle; installed at 48 s: 86.6%)."""
    spec = TUNED_256.model_copy(update={"replicas": replicas})
    state = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)
    steps = [tp.tuned_observation(batch=batch, alpha=0.3) for _ in range(12)]
    result = tp.run(spec, steps, state=state, fit=fit_settings_for(spec))
    assert result.acted == acted
    decision = result.decisions[acted[0]]
    assert decision.target.batch_schedule == ((1, 256, 1),)
    at_load = decision.evidence["threshold"].get("restartAtLoad")  # one pod: the outage's nominal price only
    assert (at_load is not None and at_load["restartCostSeconds"] == 0.0) is free
    agreement = decision.evidence["agreement"]
    assert ("costs no serving at the load now" in agreement.get("why", "")) is free
    if free:
        assert agreement["stabilizationShortenedTo"] == "0ms"


def test_a_rollout_is_not_free_while_the_load_rose_within_a_rollouts_length_just_now() -> None:
    """The free shed of the test above (two pods at batch 20, 2.80x the load, a wave needs 2x), after two evaluations
    at a request rate 1.5x the one now: a rollout starting now may meet that load again, where the pod left serving
    would carry 1.87x it. A rollout here lasts 8m30s (two waves of 90 s and the trial's 5m30s analysis), so the
    rollout is priced at the nominal 90 s, and the shed waits the stabilization, until the peak is older than that."""
    spec = TUNED_256.model_copy(update={"replicas": 2})
    state = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)
    rates = [15.0, 15.0] + [10.0] * 10
    steps = [tp.tuned_observation(batch=20, alpha=0.3) for _ in rates]
    for step, rate in zip(steps, rates, strict=True):
        step[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, rate)
    fit = fit_settings_for(spec)
    assert fit.rollout is not None
    assert fit.rollout.length_s(fit.restart_cost_s) == 510.0
    result = tp.run(spec, steps, state=state, fit=fit)
    at_load = [d.evidence["threshold"]["restartAtLoad"] for d in result.decisions]
    # at the peak itself the load now is the peak; from the third evaluation on the peak is behind, 8 minutes old
    # at the tenth (index 9) and 9 minutes at the eleventh
    assert [a.get("recentPeakRatio") for a in at_load] == [None, None] + [1.5] * 8 + [None, None]
    assert [a["restartCostSeconds"] for a in at_load[:11]] == [0.0, 0.0] + [90.0] * 8 + [0.0]
    assert "stable for 9m of 10m" in result.decisions[9].gate
    assert result.acted == [10]
    assert result.decisions[10].target.batch_schedule == ((1, 256, 1),)


def falling_behind(
    batch: float, finished: float, *, counted: bool = True, waiting: float = 0.0
) -> dict[str, Measurement]:
    """tuned_observation at acceptance 0.7 on one pod, `finished` requests/s, and (where `counted`) the requests in
    the engine as production's sums report them: running (the batch) and waiting."""
    ms = tp.tuned_observation(batch=batch, alpha=0.7)
    ms[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, finished)
    if counted:
        ms[Signal.RUNNING_REQUESTS] = tp.m(Signal.RUNNING_REQUESTS, batch)
        ms[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, waiting)
    return ms


@pytest.mark.parametrize(
    ("case", "growth", "counted", "waiting", "acted", "installs"),
    [
        # 0.5 more requests in the engine each second at 4 finished: 4.5 arrive, past K3's capacity by the model
        ("falling behind", 0.5, True, 0.0, [4], [True, True, True]),
        ("the same, running requests not measured", 0.5, False, 0.0, [], []),
        # 1.25% more arrive than finish: K3 settles at a larger batch within its capacity, which the record will show
        ("keeping up at a larger batch", 0.05, True, 0.0, [], [False, False, False]),
        ("past the limit: the backlog gate's", 0.5, True, 40.0, [], []),
    ],
)  # fmt: skip
def test_arrivals_outpacing_completions_price_a_refit_at_the_load_they_lead_to(
    case: str, growth: float, counted: bool, waiting: float, acted: list[int], installs: list[bool]
) -> None:
    """A refit worth +0.0% over the record (20 hours at batch 4-7 and the minutes at batch 60-90) while the batch
    climbs at a constant finished rate: the arrivals outpace what K3 completes, and held over the horizon they take
    it to max_num_seqs, where the schedule is +4.2%. From the third trusted window the refit is agreed, and it
    installs at the fifth (index 4). Without the running count, within capacity, or once requests wait (the backlog
    gate prices a queue), no outpacing forecast installs it."""
    batches = [60.0 + growth * 60 * i for i in range(6)]
    steps = [falling_behind(b, 4.0, counted=counted, waiting=waiting) for b in batches]
    result = tp.run(TUNED_256, steps, state=LIGHT_RECORD, config_since=T0 - 6 * MINUTE)
    assert result.acted == acted, [d.reason[-200:] for d in result.decisions]
    forecasts = [d.evidence.get("threshold", {}).get("forecast") for d in result.decisions[:5]]
    assert [f["installs"] for f in forecasts if f is not None] == installs, case
    if acted:
        decision = result.decisions[4]
        assert decision.target.batch_schedule == ((1, 74, 3), (75, 170, 2), (171, 256, 1))
        assert forecasts[4] is not None
        assert forecasts[4]["outpacing"]["arrivalsOverFinished"] == 1.125
        assert forecasts[4]["batches"] == {"256": 12.0}
        assert "arrivals outpace completions 1.12x" in decision.reason
    if installs and not installs[0]:
        assert "within the running config's capacity" in result.decisions[2].reason


def test_a_priced_change_toward_more_speculation_keeps_the_whole_stabilization() -> None:
    """Cooldowns are asymmetric, fast toward safe: the payback shortcut is for shedding
    speculation. Running K = 1 everywhere at light load, the fit prices K3@1/2@129 at +53% (repaid in under 3
    minutes); it still waits the 10-minute span: agreed at evaluation 3, installed at evaluation 10."""
    light = PolicyState(load={1: 7200.0}, load_updated=T0 - MINUTE)
    spec = tp.make_spec(
        version="0.32.0",
        agreeingEvaluations=3,
        stabilization="10m",
        batchThreshold={"tune": True, "min": 8, "max": 256},
    )
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    result = tp.run(spec, [tp.tuned_observation(batch=4, alpha=0.9) for _ in range(12)], state=light, current=FIT_1)
    acted = [i for i, d in enumerate(result.decisions) if d.actuate]
    assert acted == [10], [d.evidence.get("agreement") for d in result.decisions]
    decision = result.decisions[10]
    assert decision.action is Action.CHANGE_THRESHOLD
    assert decision.target.batch_schedule == ((1, 128, 3), (129, 256, 2))
    assert "stabilizationShortenedTo" not in decision.evidence["agreement"]


TUNED_256 = tp.make_spec(
    version="0.32.0", agreeingEvaluations=3, stabilization="10m", batchThreshold={"tune": True, "min": 8, "max": 256}
)
TUNED_256 = TUNED_256.model_copy(update={"engine": TUNED_256.engine.model_copy(update={"max_num_seqs": 256})})
LIGHT_RECORD = PolicyState(load={3: 72000.0}, load_updated=T0 - MINUTE)  # 20 hours at batch 4-7


def overloaded(waiting: float, alpha: float = 0.3) -> dict[str, Measurement]:
    """tuned_observation at batch 180 (+43% for K = 1 everywhere) with a queue, 18 completions/s and every first token
    of the window past a 2 s deadline: the benchmark's mixed-temperature, past K = 3's capacity."""
    ms = tp.tuned_observation(batch=180, alpha=alpha)
    ms[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, waiting)
    ms[Signal.RUNNING_REQUESTS] = tp.m(Signal.RUNNING_REQUESTS, 180.0)
    ms[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, 18.0)
    ms[Signal.TTFT_WITHIN_DEADLINE] = tp.m(Signal.TTFT_WITHIN_DEADLINE, 0.0)
    return ms


@pytest.mark.parametrize(
    ("case", "queues", "latency", "acted", "shortened_to"),
    [
        # no queue: the nominal 90 s restart, repaid by +165% per request at the load now in 55 s (as
        # test_a_priced_change_waits_for_its_payback)
        ("no backlog", [0.0] * 12, {"ttftDeadline": "2s"}, [2], "55s"),
        # the queue grows past what can start within 2 s: a restart drops the 36 queued in time, 2 s of serving,
        # repaid in 1 s; installed at the third agreeing evaluation (before: held 3m29s, then by the backlog gate)
        ("a growing queue past the deadline", [50.0 + 40 * i for i in range(12)], {"ttftDeadline": "2s"}, [2], "1s"),
        # no deadline: every queued request and every arrival counts, nothing is cheaper: agreed at the third
        # evaluation, then held by the backlog gate (which prices the throughput gain at the batch now, +43%) until
        # waiting has cost what the restart drops (1,930 at +43% of 18/s: 249 s)
        ("no deadline declared", [50.0 + 40 * i for i in range(12)], {}, [6], "55s"),
    ],
)
def test_a_shed_under_a_hopeless_backlog_repays_only_the_work_the_restart_drops_in_time(
    case: str, queues: list[float], latency: dict[str, str], acted: list[int], shortened_to: str
) -> None:
    """Benchmark, mixed-temperature (8B EAGLE-3 K=3 at 20 QPS past its 18 completions/s, 2 s TTFT SLO): the refit
    agreed 3/3 at 180 s waited its payback of a 90 s restart until 660 s, then the backlog gate until 960 s, while the
    queue grew past 1,000 and no request met its deadline (goodput 2,026; the oracle, static K = 1, 2,983). Priced at
    what it drops in time, the restart goes at 180 s (2,616)."""
    tuning = {"tune": True, "min": 8, "max": 256}
    spec = tp.make_spec(
        version="0.32.0", agreeingEvaluations=3, stabilization="10m", batchThreshold=tuning, latency=latency
    )
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    result = tp.run(spec, [overloaded(w) for w in queues], state=HEAVY)
    assert [i for i, d in enumerate(result.decisions) if d.actuate] == acted
    agreement = result.decisions[2].evidence["agreement"]
    assert agreement.get("stabilizationShortenedTo") == shortened_to
    if shortened_to == "1s":
        assert "priced at 2.0s of serving" in agreement["why"]
        assert result.decisions[2].evidence["backlog"]["arrivalsInTime"] == 0
    first = tp.run(spec, [overloaded(w) for w in queues[:1]], state=HEAVY).state.streak
    assert first is not None
    assert first.waiting == queues[0], "the queue at the first proposal is kept with the streak"
    assert PolicyState.from_dict(json.loads(json.dumps(result.state.to_dict()))).streak == result.state.streak


def _fitted(gain_now: float | None = None, off: OffComparison | None = None) -> Priced:
    plan = ThresholdPlan(ThresholdSupport.SCHEDULE, None, 0.0, math.inf, False, "", {}, off=off, gain_now=gain_now)
    return Priced(plan=plan)


@pytest.mark.parametrize(
    ("case", "action", "priced", "own"),
    [
        ("a refit's gain at the batch now", Action.CHANGE_THRESHOLD, _fitted(0.15), True),
        ("a refit predicted to lose", Action.CHANGE_THRESHOLD, _fitted(-0.02), False),
        # the fit ran beside an acceptance-only disable: its gain is the refit's, not the disable's (diurnal)
        ("a disable beside a refit's gain", Action.DISABLE, _fitted(0.15), False),
        ("a disable measured faster than speculation", Action.DISABLE,
         Priced(speed=SpeedVerdict(Speed.SLOWER, "", {}, speedup=0.8)), True),
        ("a disable by the K = 0 tax", Action.DISABLE, _fitted(off=OffComparison(True, "", {}, tax=0.08, net_s=400.0)),
         True),
        ("an acceptance-only disable", Action.DISABLE, Priced(), False),
    ],
)  # fmt: skip
def test_only_a_change_with_its_own_gain_figure_gets_the_restart_priced_in_time(
    case: str, action: Action, priced: Priced, own: bool
) -> None:
    assert prices_its_own_gain(Proposal(action, K3, "", {}, priced=priced)) is own


def test_an_acceptance_only_disable_waits_the_whole_stabilization_beside_a_refits_gain() -> None:
    """Benchmark, spike (8B EAGLE-3 K=3, a flash crowd at batch 160+): a refit not worth a restart over the light load
    record sat in the evidence of an acceptance-only disable, and its +87% per request at the load now shortened the
    disable's wait to 1m43s; speculation went off in the crowd and stayed off after it (goodput 2,936 -> 2,697). The
    disable's wait is priced by a gain of its own (prices_its_own_gain), and it has none: the whole 10 minutes."""
    result = tp.run(TUNED_256, [tp.tuned_observation(batch=180, alpha=0.45) for _ in range(2)], state=LIGHT_RECORD)
    second = result.decisions[1]
    assert second.action is Action.KEEP
    assert second.gate == "waiting for agreement: 2/3 evaluations, stable for 1m of 10m", second.gate
    assert second.evidence["threshold"]["predictedGainAtLoad"] > 1.0  # the refit's figure is there, and large
    assert "stabilizationShortenedTo" not in second.evidence["agreement"]
    assert result.state.streak is not None
    assert result.state.streak.action is Action.DISABLE


def test_what_waiting_has_forgone_never_buys_a_restart_the_record_does_not_repay() -> None:
    """Sunk serving is no reason to restart. +2.6% over a record of light load (within the 3% minimum gain, not
    worth it) while the batch now makes the refit +118% per request: ten evaluations at that batch keep the
    running config, each with the refit priced and its reason the record's payback. (A rent-or-buy account that
    bought the restart once the per-request gain had added up to it was removed: near capacity the waves it bought
    cost more than the change repaid, and once the load fell the past no longer predicted the gain.)"""
    result = tp.run(TUNED_256, [tp.tuned_observation(batch=180, alpha=0.45) for _ in range(10)], state=LIGHT_RECORD)
    priced = [d.evidence["threshold"] for d in result.decisions]
    assert len(priced) == 10
    assert all(t["predictedGainAtLoad"] > 1.0 for t in priced)
    assert all(t["predictedGain"] < FitSettings().min_gain for t in priced)  # over the record: within the error
    assert all("forgoneSeconds" not in t and "repaidByWaiting" not in t for t in priced)
    assert not any(d.actuate for d in result.decisions)


def test_a_status_an_older_operator_wrote_with_its_rent_or_buy_account_reads_without_it() -> None:
    """An upgrade: status.autotune still holds `forgoneSeconds` (written by the removed rent-or-buy account). It reads
    without a problem, to the same state as without the key, and the next write drops it."""
    state = tp.run(TUNED_256, [tp.tuned_observation(batch=180, alpha=0.45) for _ in range(3)], state=LIGHT_RECORD).state
    stored = json.loads(json.dumps(state.to_dict()))
    assert stored["streak"] is not None  # the runs made a state worth restoring
    read, problem = PolicyState.from_status({**stored, "forgoneSeconds": 282.2})
    assert problem is None
    assert read == PolicyState.from_dict(stored)
    assert "forgoneSeconds" not in read.to_dict()


def test_the_same_refit_goes_in_once_the_record_holds_the_load_that_repays_it() -> None:
    """The other direction: with a record at batch [128,256) the refit repays its restart and is installed after
    the agreeing evaluations."""
    result = tp.run(TUNED_256, [tp.tuned_observation(batch=180, alpha=0.45) for _ in range(4)], state=HEAVY)
    installed = [(i, d.action) for i, d in enumerate(result.decisions) if d.actuate]
    assert installed
    assert installed[0][1] is Action.CHANGE_THRESHOLD
    assert result.decisions[installed[0][0]].evidence["threshold"]["paybackSeconds"] <= FitSettings().horizon_s


def test_an_acceptance_only_disable_under_a_hopeless_backlog_keeps_the_nominal_restart() -> None:
    """Benchmark, diurnal (70B draft model K=4 at its peak, acceptance 0.46 < 0.50, no plain baseline): priced at the
    work still in time, an acceptance-only disable went in at 4,200 s while speculation was 1.41x faster than plain
    (goodput 2,631 -> 1,476). Its gain is the gate's fallback, not a figure of its own: the queue's trend is not used,
    the first deferral's pricing holds (1,049 to drop at the fallback 10% of 18/s: up to 583 s)."""
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", latency={"ttftDeadline": "2s"})

    def step(waiting: float) -> dict[str, Measurement]:
        ms = tp.observed(acceptance=0.05)  # the model prices speculation slower: the disable acts
        ms[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, waiting)
        ms[Signal.RUNNING_REQUESTS] = tp.m(Signal.RUNNING_REQUESTS, 255.0)
        ms[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, 18.0)
        ms[Signal.TTFT_WITHIN_DEADLINE] = tp.m(Signal.TTFT_WITHIN_DEADLINE, 0.0)
        return ms

    result = tp.run(spec, [step(643.0 + 106 * i) for i in range(12)])
    assert [i for i, d in enumerate(result.decisions) if d.actuate] == [9]
    held = result.decisions[1].evidence["backlog"]
    assert held["queueDrainPerSecond"] is None
    assert held["droppedAtFirstDeferral"] == 1049


def rising_rate(batch: float, rates: list[float]) -> list[dict[str, Measurement]]:
    """tuned_observation at acceptance 0.6 (K = 3 best up to batch 30, K = 2 to 170) with these request rates."""
    steps = []
    for rate in rates:
        ms = tp.tuned_observation(batch=batch, alpha=0.6)
        ms[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, rate)
        steps.append(ms)
    return steps


RECORD_AT_23 = PolicyState(load={5: 3600.0}, load_updated=T0 - MINUTE)  # an hour at batch 16-31: K = 3 either way


@pytest.mark.parametrize(
    ("case", "rates", "acted"),
    [
        # the record prices the schedule at +0.1% and at the load now it is -0.8% per request: nothing to install
        ("a steady request rate", [1.0] * 35, []),
        # +0.1 requests/s a minute: from the 21st evaluation the line spans 20 minutes; projected 20 minutes ahead from
        # batch 40 the load passes K = 3's capacity, where the schedule is worth +6.5%, +9.8% of the serving now
        # (payback 15m); proposed from index 20, agreed 3/3 at 22, installed at the end of the 10-minute
        # stabilization (a change of the record's K nowhere: no gain at the load now to shorten it)
        ("a sustained rise", [1.0 + 0.1 * i for i in range(35)], [30]),
    ],
)
def test_a_refit_goes_in_ahead_of_a_sustained_rise_of_the_request_rate(
    case: str, rates: list[float], acted: list[int]
) -> None:
    """Benchmark, diurnal-within-capacity (70B K = 4, the load 10% -> 90% over 90 minutes): the record priced the
    fitted schedule near 0% until the batch passed 100, and the refit went in at 4,440 s at 76% load (goodput 3,465;
    the schedule from the start, 3,632). Read from the request rate's rise it went in at 3,660 s, 3,120 s with agreement
    by effect, and 2,940 s with the restart priced at the serving now (seed 1)."""
    result = tp.run(TUNED_256, rising_rate(40, rates), state=RECORD_AT_23)
    assert [i for i, d in enumerate(result.decisions) if d.actuate] == acted
    fits = [d.evidence["threshold"] for d in result.decisions]
    assert all(f["proposed"] == "schedule [[1,30,3],[31,170,2],[171,256,1]]" for f in fits), "the fit ran every time"
    assert len(result.state.request_rates) == len(rates)
    ahead = [f.get("forecast", {}).get("installs") for f in fits]
    if not acted:
        assert ahead == [None] * len(rates)
        assert fits[-1]["predictedGain"] < 0.03
        return
    # installed, the refit is the running config: nothing more to forecast
    assert ahead == [None] * 20 + [True] * 11 + [None] * 4
    assert fits[20]["forecast"]["aheadSeconds"] == 1200
    assert fits[20]["forecast"]["paybackSeconds"] == 919  # priced at the serving now: 300 s / +9.8% (+6.5% then)
    install = result.decisions[30]
    assert install.action is Action.CHANGE_THRESHOLD
    assert install.reason.endswith(
        "the request rate rose +300% over 30m (t > 1000): over the next 30m, at the batches it leads to (43-256), it "
        "is +7.5% (+11.5% of the serving now, which the restart drops) and repays the restart in 13m: installing "
        "ahead of the load"
    ), install.reason
    assert result.decisions[29].gate == "waiting for agreement: 10/3 evaluations, stable for 9m of 10m"
    assert PolicyState.from_dict(json.loads(json.dumps(result.state.to_dict()))) == result.state


def gpu_spec(product: str | None, memory_gib: float) -> SpeculativeDeploymentSpec:
    raw = tp.make_spec(agreeingEvaluations=1, stabilization="0s").model_dump(mode="json", by_alias=True)
    raw["resources"]["gpuMemoryGiB"] = memory_gib
    raw["resources"]["nodeSelector"] = {"nvidia.com/gpu.product": product} if product else {}
    return parse_spec(raw)


def own_windows(scale: float) -> tuple[StepSample, ...]:
    """Settled windows of this deployment: the H100 profile's step times times `scale`, at 3+ load buckets."""
    model = LLAMA8B_H100
    return tuple(
        StepSample(b, k, k > 0, model.step_ms(b, k, configured=k > 0) * scale)
        for b in (2, 6, 12, 24, 48, 96)
        for k in (0, 3)
    )


@pytest.mark.parametrize(
    ("case", "product", "memory", "samples", "action", "in_reason"),
    [
        # the calibrated set-up: the profile prices speculation at 0.87x of plain, the disable acts
        ("calibrated H100", "NVIDIA-H100-80GB-HBM3", 80.0, (), Action.DISABLE, "predicts 0.87x over plain"),
        # another GPU: the H100 profile is only a prior, measured TPOT within its x2 band or not
        ("A100, no fit", "NVIDIA-A100-SXM4-80GB", 80.0, (), Action.KEEP, "no usable cost model: llama8b-h100 is"),
        ("L4, no fit", "NVIDIA-L4", 24.0, (), Action.KEEP, "no usable cost model"),
        # the deployment's own windows fit it: that fit prices the steps, and the disable may act
        ("A100, own fit", "NVIDIA-A100-SXM4-80GB", 80.0, own_windows(1.2), Action.DISABLE, "predicts 0.8"),
    ],
)
def test_an_unknown_gpu_is_priced_only_by_its_own_fit(
    case: str, product: str, memory: float, samples: tuple[StepSample, ...], action: Action, in_reason: str
) -> None:
    """The nearest calibrated profile of another GPU is the online fit's prior, never a silent shape: without a fit
    of the deployment's own windows there is no usable cost model, and acceptance alone holds."""
    spec = gpu_spec(product, memory)
    measurements = tp.observed(acceptance=0.05, batch=12, tpot_s=0.012)
    state = PolicyState(step_samples=samples)
    decision = evaluate_alone(tp.inputs(spec, measurements, fit=fit_settings_for(spec)), state, T0)
    assert decision.action is action, decision.reason
    assert in_reason in decision.reason


def contradicting_windows() -> tuple[StepSample, ...]:
    """K = 3 windows whose step grows with the batch far faster than the H100 profile's (a lower roofline ridge):
    the prior's shape cannot fit them (a negative drafter term), so the fit is refused."""
    return tuple(
        StepSample(b, 3, True, LLAMA8B_H100.step_ms(b, 3, configured=True) * (1 + b / 24))
        for b in (2, 6, 12, 24, 48, 96)
    )


def without_queue(acceptance: float, requests: float = 800) -> dict[str, Measurement]:
    """One window at batch 20, 30 ms per token and no request waiting, with this acceptance and these requests."""
    measurements = tp.observed(acceptance=acceptance, batch=20, tpot_s=0.030, requests=requests)
    measurements[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, 0.0)
    return measurements


def decided_without_queue(product: str, replicas: int, state: PolicyState, requests: float = 800) -> Decision:
    """One evaluation at acceptance 0.30 below disableBelow, batch 20, no request waiting, no plain comparison, on
    `product` at `replicas`: where an experiment needs a doubt other than saturation."""
    spec = with_replicas(gpu_spec(product, 80.0), replicas)
    return evaluate_alone(tp.inputs(spec, without_queue(0.30, requests), fit=fit_settings_for(spec)), state, T0)


def assert_experiment_or_hold(decision: Decision, action: Action, in_reason: str) -> None:
    """A disable here is an experiment (a canary disable), and a hold is no experiment."""
    assert decision.action is action, decision.reason
    assert in_reason in decision.reason, decision.reason
    assert decision.experiment is (action is Action.DISABLE)
    if decision.experiment:
        assert decision.reason.startswith("experiment: acceptance 0.30 < disableBelow 0.50"), decision.reason
        assert decision.off_kind is OffReason.CANARY


@pytest.mark.parametrize(
    ("case", "product", "replicas", "samples", "action", "in_reason"),
    [
        # another GPU whose windows the prior's shape cannot fit: no model will price anything, so plain is
        # measured on one pod, even at a small batch with no queue
        ("A100, fit refused", "NVIDIA-A100-SXM4-80GB", 2, contradicting_windows(), Action.DISABLE,
         "on hardware its profile does not describe (fit out of range"),
        # too few windows to say the prior is wrong: acceptance alone holds
        ("A100, no fit yet", "NVIDIA-A100-SXM4-80GB", 2, (), Action.KEEP, "its own fit needs 6 settled windows"),
        # one replica: an experiment would be an outage, so it holds
        ("A100, one replica", "NVIDIA-A100-SXM4-80GB", 1, contradicting_windows(), Action.KEEP,
         "acceptance alone never switches speculation off"),
        # the calibrated set-up: its profile is this hardware's, a refused fit is not a doubt about it
        ("calibrated H100", "NVIDIA-H100-80GB-HBM3", 2, contradicting_windows(), Action.KEEP,
         "acceptance alone never switches speculation off"),
    ],
)  # fmt: skip
def test_windows_that_contradict_another_gpus_profile_start_an_experiment_at_any_batch(
    case: str, product: str, replicas: int, samples: tuple[StepSample, ...], action: Action, in_reason: str
) -> None:
    """Low acceptance at a small batch with no queue, no plain comparison and no usable model: on a GPU without a
    calibrated profile whose own windows refuse the prior's shape, the only action is a one-pod experiment; with too
    few windows to say so, on one replica, or on a calibrated set-up, the config holds."""
    decision = decided_without_queue(product, replicas, PolicyState(step_samples=samples))
    assert_experiment_or_hold(decision, action, in_reason)


A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("case", "product", "replicas", "requests", "seen", "action", "in_reason"),
    [
        # another GPU, no usable model, no queue: this config first measured 0.50 and now 0.30, so the prior's "pays
        # at this batch" was said at another acceptance; plain is measured on one pod
        ("A100, fell 0.50 -> 0.30", A100, 2, 800, AcceptanceSeen(ON, 0.50, T0 - 30 * MINUTE), Action.DISABLE,
         "after a fall from 0.50 in this config's first window (2026-11-26T11:30:00Z), on hardware its profile"),
        # a fall smaller than the shift is the drift of one window to the next: acceptance alone holds
        ("A100, fell 0.40 -> 0.30", A100, 2, 800, AcceptanceSeen(ON, 0.40, T0 - 30 * MINUTE), Action.KEEP,
         "acceptance alone never switches speculation off"),
        # a window of 400 requests is below ten times the minimum (50): too noisy to read a fall from
        ("A100, fell, thin window", A100, 2, 400, AcceptanceSeen(ON, 0.50, T0 - 30 * MINUTE), Action.KEEP,
         "acceptance alone never switches speculation off"),
        # the record is another config's (K 2): it says nothing of the running K 3
        ("A100, K 2's record", A100, 2, 800, AcceptanceSeen(SpeculationIntent(True, 2), 0.50, T0 - 30 * MINUTE),
         Action.KEEP, "acceptance alone never switches speculation off"),
        # one replica: an experiment would be an outage, so it holds
        ("A100, one replica", A100, 1, 800, AcceptanceSeen(ON, 0.50, T0 - 30 * MINUTE), Action.KEEP,
         "acceptance alone never switches speculation off"),
        # the calibrated set-up: its model prices the fall, which is no doubt about it
        ("calibrated H100", "NVIDIA-H100-80GB-HBM3", 2, 800, AcceptanceSeen(ON, 0.50, T0 - 30 * MINUTE), Action.KEEP,
         "acceptance alone never switches speculation off"),
    ],
)  # fmt: skip
def test_a_fall_in_acceptance_on_another_gpus_profile_starts_an_experiment(
    case: str, product: str, replicas: int, requests: float, seen: AcceptanceSeen, action: Action, in_reason: str
) -> None:
    """Low acceptance at a small batch with no queue, no plain comparison and no usable model: on a GPU without a
    calibrated profile, a fall of the running config's acceptance by the traffic shift since its first window starts
    the one-pod experiment; a smaller fall, a window too thin to read it from, another config's record, one replica
    or a calibrated set-up hold."""
    decision = decided_without_queue(product, replicas, PolicyState(acceptance_seen=seen), requests=requests)
    assert_experiment_or_hold(decision, action, in_reason)


@pytest.mark.parametrize(
    ("first", "first_requests", "then", "current_then", "experiment", "record"),
    [
        # the fall from the first window, read back from the stored status
        (0.50, 800, 0.30, ON, True, (ON, 0.50)),
        # within the shift
        (0.40, 800, 0.30, ON, False, (ON, 0.40)),
        # another config went in: its own first window is the record
        (0.50, 800, 0.30, SpeculationIntent(True, 2), False, (SpeculationIntent(True, 2), 0.30)),
        # a first window below ten times the requests minimum is no record: the next one is
        (0.50, 400, 0.30, ON, False, (ON, 0.30)),
    ],
)
def test_the_first_windows_acceptance_is_stored_and_read_back_per_config(
    first: float,
    first_requests: float,
    then: float,
    current_then: SpeculationIntent,
    experiment: bool,
    record: tuple[SpeculationIntent, float],
) -> None:
    """Seam: the acceptance of the running config's first settled window with the evidence a fall needs goes into
    status.autotune, survives the JSON round trip, and the later window's fall is measured from it; a config change
    starts a new record."""
    spec = with_replicas(gpu_spec(A100, 80.0), 2)
    fit = fit_settings_for(spec)
    decision, state = decide(tp.inputs(spec, without_queue(first, first_requests), fit=fit), PolicyState(), T0)
    assert not decision.experiment, decision.reason  # the first window is the record, not a fall
    stored = json.loads(json.dumps(state.to_dict()))
    if first_requests >= 500:
        assert stored["acceptanceSeen"] == {"intent": intent_to_dict(ON), "rate": first, "at": "2026-11-26T12:00:00Z"}
    else:
        assert stored["acceptanceSeen"] is None
    later = T0 + 10 * MINUTE
    decision, state = decide(
        tp.inputs(spec, without_queue(then), current_then, fit=fit), PolicyState.from_dict(stored), later
    )
    assert decision.experiment is experiment, decision.reason
    assert ("after a fall from" in decision.reason) is experiment
    kept = state.acceptance_seen
    assert kept is not None
    assert (kept.intent, kept.rate) == record


@pytest.mark.parametrize(
    ("waiting", "agreed_after_minutes", "why"),
    [
        # windows that contradict the profile, no queue: the span, in which more windows may make a model usable
        (0.0, 10, None),
        # the same at saturation: one pod's restart (90 s) and the analysis span (5m and two 15 s scrapes)
        (4.0, 7, "an experiment at saturation waits as long as its one-pod trial takes"),
    ],
)
def test_an_experiment_at_saturation_waits_its_trial_and_one_on_contradicted_windows_the_span(
    waiting: float, agreed_after_minutes: int, why: str | None
) -> None:
    """An experiment's wait: at saturation no longer than the one-pod trial it starts, so a queue does not grow for
    the whole stabilization; started by windows that contradict the profile, with no queue, the whole span."""
    raw = with_replicas(gpu_spec("NVIDIA-A100-SXM4-80GB", 80.0), 2).model_dump(mode="json", by_alias=True)
    raw["autotune"].update(agreeingEvaluations=2, stabilization="10m")
    spec = parse_spec(raw)
    measurements = tp.observed(acceptance=0.30, batch=20, tpot_s=0.030)
    measurements[Signal.WAITING_REQUESTS] = tp.m(Signal.WAITING_REQUESTS, waiting)
    state = PolicyState(step_samples=contradicting_windows())
    for minute in range(12):
        decision, state = decide(tp.inputs(spec, measurements, fit=fit_settings_for(spec)), state,
                                 T0 + timedelta(minutes=minute))  # fmt: skip
        assert decision.experiment, decision.reason
        if not decision.gate.startswith("waiting for agreement"):
            break  # agreed (a queue with no arrivals then meets the backlog gate, which is not this test's)
    assert minute == agreed_after_minutes, decision.gate
    assert decision.evidence["agreement"].get("why", "").startswith(why or "-") is (why is not None)


def edited(change: dict[str, Any]) -> SpeculativeDeploymentSpec:
    raw = tp.make_spec(agreeingEvaluations=1, stabilization="0s").model_dump(mode="json", by_alias=True)
    for path, value in change.items():
        *outer, last = path.split(".")
        node = raw
        for key in outer:
            node = node.setdefault(key, {})
        node[last] = value
    return parse_spec(raw)


@pytest.mark.parametrize(
    ("change", "fresh"),
    [
        ({"target.model": "meta-llama/Llama-3.3-70B-Instruct", "parallelism.tensorParallelSize": 4,
          "resources.gpusPerReplica": 4}, True),
        ({"speculation.draft.model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}, True),
        ({"speculation.method": "ngram", "speculation.draft": None}, True),
        ({"resources.nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "resources.gpuMemoryGiB": 24}, True),
        ({"engine.image": "vllm/vllm-openai:v0.33.0-cu129"}, True),
        ({"engine.version": "0.32.0", "engine.image": "vllm/vllm-openai:v0.32.0"}, True),
        # the same deployment, other knobs: the records stand
        ({"autotune.interval": "2m"}, False),
        ({"replicas": 2}, False),
        ({"speculation.numSpeculativeTokens": 4}, False),
    ],
)  # fmt: skip
def test_records_belong_to_the_deployments_fingerprint(change: dict[str, Any], fresh: bool) -> None:
    """A CR that ran an 8B and now runs a 70B (or another drafter, GPU, image or version) decides nothing from the
    old deployment's records: its plain baseline said the 70B's speculation was slower two minutes after the change."""
    old = tp.make_spec(agreeingEvaluations=1, stabilization="0s")
    records = PolicyState(
        baseline=(tp.baseline(Mode.OFF, 4, 20.0, tpot_mean_ms=6.0),),
        load={4: 600.0},
        step_samples=(StepSample(12, 0, False, 7.0),),
        off=OffRecord(OffReason.LOAD, T0 - 9 * MINUTE, 12.0, "earlier"),
        restart_measured_s=95.0,
    )
    before = tp.run(old, [tp.observed(acceptance=0.72)], state=records).state
    assert before.baseline, "the same deployment keeps its records"
    after = tp.run(edited(change), [tp.observed(acceptance=0.72, batch=12, tpot_s=0.020)], state=before,
                   start=T0 + MINUTE)  # fmt: skip
    state = after.state
    kept = [
        records.baseline[0] in state.baseline,
        records.step_samples[0] in state.step_samples,
        state.restart_measured_s == 95.0,
    ]
    assert kept == [not fresh] * 3
    if fresh:
        assert state.off is None
        assert after.decisions[0].action is not Action.DISABLE, after.decisions[0].reason


@pytest.mark.parametrize(("promoted", "fresh"), [(None, False), ("ngram", True)])
def test_a_promoted_candidate_drafter_starts_fresh_records(promoted: str | None, fresh: bool) -> None:
    """Once a candidate drafter won its trial and runs on every pod, the declared drafter's records (its baseline,
    step samples, measured restart) no longer describe the deployment."""
    spec = edited({"speculation.candidates": [{"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3}]})
    records = PolicyState(
        baseline=(tp.baseline(Mode.OFF, 4, 20.0, tpot_mean_ms=6.0),),
        step_samples=(StepSample(12, 0, False, 7.0),),
        restart_measured_s=95.0,
    )
    before = tp.run(spec, [tp.observed(acceptance=0.72)], state=records).state
    assert before.baseline, "the declared drafter keeps its records"
    assert before.drafter is None
    after = tp.run(spec, [tp.observed(acceptance=0.72)], state=replace(before, drafter=promoted), start=T0 + MINUTE)
    state = after.state
    kept = [records.baseline[0] in state.baseline, records.step_samples[0] in state.step_samples,
            state.restart_measured_s == 95.0]  # fmt: skip
    assert kept == [not fresh] * 3


@pytest.mark.parametrize(
    ("kind", "batch", "rate", "probes", "words"),
    [
        # off for load, the same traffic runs at twice the batch: the probe is due, the load did not rise
        (OffReason.LOAD, 40.0, 4.0, True, "probe: speculation off since"),
        (OffReason.LOAD, 20.0, 4.2, True, "probe: speculation off since"),  # within the tolerance
        (OffReason.LOAD, 20.0, 9.0, False, "probe waits for the request rate to fall to 4.00/s"),  # more traffic
        # off for the drafter: plain may finish more requests per second (clients waiting on answers), and the
        # probe re-measures the drafter, not the load
        (OffReason.ACCEPTANCE, 20.0, 9.0, True, "probe: speculation off since"),
    ],
)
def test_the_probe_is_gated_by_the_request_rate_not_the_batch_the_config_moves(
    kind: OffReason, batch: float, rate: float, probes: bool, words: str
) -> None:
    spec = spec_with(agreeingEvaluations=1, stabilization="0s", probeInterval="1h")
    off = OffRecord(kind, T0 - 2 * 60 * MINUTE, 20.0, "acceptance 0.30", 0.30, request_rate=4.0)
    state = PolicyState(off=off, selected=OFF)
    measurements = tp.observed(on=False, batch=batch, request_rate=tp.m(Signal.REQUEST_RATE, rate))
    result = tp.run(spec, [measurements], state=state, current=OFF)
    assert result.decisions[0].probe is probes, result.decisions[0].reason
    assert words in result.decisions[0].reason


def test_the_off_record_is_written_from_the_decisions_typed_fields_not_its_evidence() -> None:
    decision = evaluate_alone(tp.inputs(spec_with(), tp.observed(acceptance=0.05)), PolicyState(), T0)
    typed = replace(decision, evidence={}, acceptance=0.05, request_rate=3.0, batch=12.0, off_kind=OffReason.ACCEPTANCE)
    state = record_actuation(PolicyState(), typed, ON, T0, spec_with().autotune.budget)
    assert state.off is not None
    assert (state.off.acceptance, state.off.request_rate, state.off.batch) == (0.05, 3.0, 12.0)


@pytest.mark.parametrize(
    ("acceptance", "mean_length", "acts"),
    [
        (0.01, None, True),  # 1 + 0.01 x K=3 = 1.03 tokens per step: at most 3% faster on any hardware
        (0.01, 1.02, True),  # vLLM's own mean acceptance length, when it is measured
        (0.05, None, False),  # 1.15 per step could be faster: without a model or a comparison, hold
        (0.30, 1.04, True),  # the measured length wins over acceptance x K (a schedule drafting less)
    ],
)
def test_drafts_that_cannot_pay_on_any_hardware_are_switched_off_without_a_model(
    acceptance: float, mean_length: float | None, acts: bool
) -> None:
    """No usable model (no mean TPOT) and no comparison, yet a step that emits under 1.05 tokens cannot beat plain by
    the noise margin whatever the hardware: a step that verifies drafts costs at least a plain step."""
    spec = spec_with(agreeingEvaluations=1, stabilization="0s")
    ms = tp.observed(acceptance=acceptance, batch=20)
    ms[Signal.TPOT_MEAN] = tp.m(Signal.TPOT_MEAN, None, tp.NO_DATA)
    if mean_length is not None:
        ms[Signal.MEAN_ACCEPTANCE_LENGTH] = tp.m(Signal.MEAN_ACCEPTANCE_LENGTH, mean_length)
    result = tp.run(spec, [ms])
    assert result.acted == ([0] if acts else []), result.decisions[0].reason
    assert ("on any hardware speculation is at most" in result.decisions[0].reason) is acts
