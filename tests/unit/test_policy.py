"""The autotune policy: evidence, agreement, hysteresis, budget, overrides, re-enabling and durable state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpilot.api.v1alpha1 import BudgetSpec, SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.model.baseline import BaselineEntry, Mode
from specpilot.autotune.model.stepcost import LLAMA8B_H100, AcceptanceProfile
from specpilot.autotune.policy.budget import budget_check, record_actuation, required_dwell
from specpilot.autotune.policy.decision import (
    ERROR_LIMIT,
    apply_overrides,
    decide,
    desired_intent,
    evaluate_alone,
    no_op_as_keep,
)
from specpilot.autotune.policy.proposals import probe_deadline
from specpilot.autotune.policy.state import (
    STATE_VERSION,
    Action,
    ActuationRecord,
    Decision,
    OffReason,
    OffRecord,
    PolicyInputs,
    PolicyState,
    Proposal,
)
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Signal, Window
from specpilot.reconcile import manifests
from specpilot.vllm.intent import ChosenIntent, IntentSource, SpeculationIntent, intent_to_dict

VALID, NO_DATA, ERROR = MeasurementClass.VALID, MeasurementClass.NO_DATA, MeasurementClass.ERROR
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WINDOW = Window(300, 300, "")
ON = SpeculationIntent(True, 3)
OFF = ON.without_speculation()


def make_spec(
    mode: str = "Auto", version: str = "0.33.0", enabled: bool = True, **autotune: Any
) -> SpeculativeDeploymentSpec:
    tuned: dict[str, Any] = {
        "mode": mode,
        "prometheus": {"url": "http://prometheus.monitoring:9090"},
        "agreeingEvaluations": 3,
        "stabilization": "10m",
        "batchThreshold": {"tune": False},
        "budget": {"minInterval": "15m", "maxPerHour": 2, "maxPerDay": 8, "reversalBackoff": 2},
    }
    tuned.update(autotune)
    return parse_spec(
        {
            "engine": {"image": f"vllm/vllm-openai:v{version}", "version": version},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {
                "method": "eagle3",
                "enabled": enabled,
                "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                "numSpeculativeTokens": 3,
            },
            "autotune": tuned,
        }
    )


def m(signal: Signal, value: float | None, klass: MeasurementClass = VALID, **extra: Any) -> Measurement:
    detail = extra.pop("detail", f"{value}" if klass is VALID else "empty result: no series matched in the window")
    return Measurement(signal.value, f"q_{signal.value}", klass, value, extra.pop("samples", None), detail, **extra)


def observed(
    *,
    on: bool = True,
    acceptance: float | None = 0.72,
    draft_tokens: float = 41_000,
    requests: float = 800,
    batch: float = 12.0,
    p50: float = 0.011,
    p99: float = 0.030,
    tpot_s: float = 0.012,
    **overrides: Measurement | None,
) -> dict[str, Measurement]:
    """One evaluation's measurements; speculation off means the spec-decode families are absent (NoData)."""
    out: dict[str, Measurement] = {}
    if on:
        out[Signal.DRAFT_TOKENS_IN_WINDOW] = m(Signal.DRAFT_TOKENS_IN_WINDOW, draft_tokens)
        out[Signal.ACCEPTANCE_RATE] = m(Signal.ACCEPTANCE_RATE, acceptance, samples=draft_tokens)
    else:
        out[Signal.DRAFT_TOKENS_IN_WINDOW] = m(Signal.DRAFT_TOKENS_IN_WINDOW, None, NO_DATA)
        out[Signal.ACCEPTANCE_RATE] = m(Signal.ACCEPTANCE_RATE, None, NO_DATA)
    out[Signal.REQUESTS_IN_WINDOW] = m(Signal.REQUESTS_IN_WINDOW, requests)
    out[Signal.BATCH_SIZE] = m(Signal.BATCH_SIZE, batch)
    out[Signal.TPOT_P50] = m(Signal.TPOT_P50, p50, samples=requests)
    out[Signal.TPOT_P99] = m(Signal.TPOT_P99, p99, samples=requests)
    out[Signal.TPOT_MEAN] = m(Signal.TPOT_MEAN, tpot_s, samples=requests)
    for name, value in overrides.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def inputs(
    spec: SpeculativeDeploymentSpec, measurements: Mapping[str, Measurement], current: SpeculationIntent = ON, **kw: Any
) -> PolicyInputs:
    return PolicyInputs(spec=spec, current=current, measurements=measurements, window=WINDOW, **kw)


@dataclass
class Run:
    decisions: list[Decision]
    state: PolicyState
    current: SpeculationIntent

    @property
    def acted(self) -> list[int]:
        return [i for i, d in enumerate(self.decisions) if d.actuate]


def run(
    spec: SpeculativeDeploymentSpec,
    steps: list[dict[str, Measurement]],
    *,
    state: PolicyState | None = None,
    current: SpeculationIntent = ON,
    start: datetime = T0,
    every: timedelta = MINUTE,
    apply: bool = True,
    **kw: Any,
) -> Run:
    """Evaluate a sequence of windows; like the shell, apply each actuation and record it."""
    state = state or PolicyState()
    decisions: list[Decision] = []
    for i, measurements in enumerate(steps):
        now = start + i * every
        decision, state = decide(inputs(spec, measurements, current, **kw), state, now)
        decisions.append(decision)
        if decision.actuate and apply:
            state = record_actuation(state, decision, current, now, spec.autotune.budget)
            current = decision.target
    return Run(decisions, state, current)


# ------------------------------------------------------------------------------------------------ evidence


def test_low_acceptance_reason_carries_numbers_window_and_evidence() -> None:
    decision = evaluate_alone(inputs(make_spec(), observed(acceptance=0.05)), PolicyState(), T0)
    assert decision.action is Action.DISABLE
    assert decision.reason.startswith("acceptance 0.05 < disableBelow 0.50 over 5m, 41k draft tokens; the cost model")
    assert "predicts 0.87x over plain at batch 12, K=3" in decision.reason
    assert decision.target == OFF
    measured = decision.evidence["measurements"]["acceptance_rate"]
    assert measured["query"] == "q_acceptance_rate"
    assert measured["value"] == 0.05
    assert measured["samples"] == 41_000
    assert measured["class"] == "Valid"


@pytest.mark.parametrize(
    ("agreeing", "stabilization", "first_action"),
    [(3, "10m", 10), (3, "0s", 2), (1, "0s", 0), (5, "2m", 4), (2, "5m", 5)],
)
def test_disable_waits_for_k_agreeing_evaluations_and_the_stabilization_window(
    agreeing: int, stabilization: str, first_action: int
) -> None:
    spec = make_spec(agreeingEvaluations=agreeing, stabilization=stabilization)
    result = run(spec, [observed(acceptance=0.05)] * 15)
    assert result.acted == [first_action]
    waiting = result.decisions[0]
    if first_action > 0:
        assert waiting.action is Action.KEEP
        assert waiting.proposal is Action.DISABLE
        assert f"1/{agreeing} evaluations" in waiting.gate
    assert result.decisions[first_action].action is Action.DISABLE
    assert result.current == OFF


@pytest.mark.parametrize(("mode", "actuate", "gate"), [("Recommend", False, "mode Recommend"), ("Auto", True, "")])
def test_recommend_publishes_and_auto_acts(mode: str, actuate: bool, gate: str) -> None:
    result = run(make_spec(mode=mode, agreeingEvaluations=1, stabilization="0s"), [observed(acceptance=0.05)])
    decision = result.decisions[0]
    assert decision.action is Action.DISABLE
    assert decision.actuate is actuate
    assert gate in decision.gate


@pytest.mark.parametrize(
    "pattern",
    [
        [0.3, 0.7] * 10,  # flapping across the threshold
        [0.3, 0.3, 0.7] * 7,  # agreement never reaches 3
        [0.3, None, 0.3, None] * 5,  # NoData in between resets the streak
    ],
)
def test_flapping_inputs_never_act(pattern: list[float | None]) -> None:
    spec = make_spec(agreeingEvaluations=3, stabilization="0s")
    steps = [
        observed(acceptance=a) if a is not None else observed(acceptance_rate=m(Signal.ACCEPTANCE_RATE, None, NO_DATA))
        for a in pattern
    ]
    result = run(spec, steps)
    assert result.acted == []
    assert all(d.action is Action.KEEP for d in result.decisions)


@pytest.mark.parametrize(
    ("acceptance", "detail"),
    [
        (m(Signal.ACCEPTANCE_RATE, None, NO_DATA, detail="NaN: no observations in the window (0/0)"), "NaN"),
        (m(Signal.ACCEPTANCE_RATE, None, NO_DATA, detail="+Inf: division by zero in the window"), "+Inf"),
        (m(Signal.ACCEPTANCE_RATE, None, NO_DATA, detail="-Inf: division by zero in the window"), "-Inf"),
        (m(Signal.ACCEPTANCE_RATE, None, NO_DATA), "empty result"),
        (
            m(
                Signal.ACCEPTANCE_RATE,
                0.1,
                NO_DATA,
                samples=300,
                detail="too few samples: draft_tokens_in_window 300 < minimum 2000 (0.1)",
            ),
            "too few samples",
        ),
        (  # after a vLLM restart the counters start from 0: the window holds few increments
            m(
                Signal.ACCEPTANCE_RATE,
                0.2,
                NO_DATA,
                samples=40,
                detail="too few samples: draft_tokens_in_window 40 < minimum 2000 (0.2)",
            ),
            "40 < minimum",
        ),
    ],
)
def test_nodata_holds_never_reads_as_zero_and_resets_agreement(acceptance: Measurement, detail: str) -> None:
    spec = make_spec(agreeingEvaluations=2, stabilization="0s")
    result = run(spec, [observed(acceptance=0.05), observed(acceptance_rate=acceptance), observed(acceptance=0.05)])
    assert result.acted == [], "a NoData window between two low readings breaks the agreement"
    hold = result.decisions[1]
    assert hold.action is Action.KEEP
    assert hold.proposal is Action.KEEP
    assert detail in hold.reason
    assert hold.metrics_available is True, "NoData is not an error"


@pytest.mark.parametrize("acceptance", [0.50, 0.55, 0.64, 0.65, 0.99])
def test_hysteresis_keeps_speculation_between_thresholds(acceptance: float) -> None:
    decision = evaluate_alone(inputs(make_spec(), observed(acceptance=acceptance)), PolicyState(), T0)
    assert decision.action is Action.KEEP
    assert f"acceptance {acceptance:.2f} >= disableBelow 0.50" in decision.reason


# ------------------------------------------------------------------------------------------------ errors, pause


def test_consecutive_errors_set_metrics_unavailable_and_hold() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s")
    broken = observed(acceptance=0.05, tpot_p99=m(Signal.TPOT_P99, None, ERROR, detail="transport: refused"))
    result = run(spec, [broken] * (ERROR_LIMIT + 1) + [observed(acceptance=0.7)])
    assert result.acted == [], "never act on an evaluation with errors, even with low acceptance in it"
    availability = [d.metrics_available for d in result.decisions]
    assert availability == [None, None, None, False, False, True]
    events = [[e.reason for e in d.events] for d in result.decisions]
    assert events == [[], [], [], ["MetricsUnavailable"], [], ["MetricsRestored"]]
    assert "4 in a row" in result.decisions[3].reason
    assert "tpot_p99: transport: refused" in result.decisions[3].reason
    assert result.state.consecutive_errors == 0


def test_one_error_does_not_break_an_agreement_streak() -> None:
    spec = make_spec(agreeingEvaluations=3, stabilization="0s")
    broken = observed(acceptance=0.05, batch_size=m(Signal.BATCH_SIZE, None, ERROR))
    result = run(spec, [observed(acceptance=0.05), broken, observed(acceptance=0.05), observed(acceptance=0.05)])
    assert result.acted == [3]


def test_pause_holds_posts_one_event_and_restarts_agreement() -> None:
    spec = make_spec(agreeingEvaluations=2, stabilization="0s")
    low = observed(acceptance=0.05)
    state = run(spec, [low]).state
    assert state.streak is not None
    paused = run(spec, [low, low, low], state=state, start=T0 + MINUTE, paused=True)
    assert paused.acted == []
    assert [[e.reason for e in d.events] for d in paused.decisions] == [["AutomationPaused"], [], []]
    assert all(d.paused and d.gate == "paused" for d in paused.decisions)
    assert paused.state.streak is None
    resumed = run(spec, [low, low], state=paused.state, start=T0 + 5 * MINUTE)
    assert resumed.acted == [1], "agreement counts again from the first unpaused evaluation"
    assert resumed.decisions[0].paused is False


def test_mode_off_does_nothing_even_with_errors() -> None:
    broken = observed(acceptance_rate=m(Signal.ACCEPTANCE_RATE, None, ERROR))
    result = run(make_spec(mode="Off", agreeingEvaluations=1, stabilization="0s"), [broken] * 5)
    assert result.acted == []
    assert result.state.consecutive_errors == 0
    assert all(d.gate == "mode Off" for d in result.decisions)


@pytest.mark.parametrize(
    ("kw", "gate"),
    [
        ({"rollout_in_progress": True}, "rollout in progress"),
        ({"config_since": T0 - 2 * MINUTE}, "settling"),  # window 5m + 2 x 15s not yet elapsed
    ],
)
def test_rollouts_and_fresh_configs_hold(kw: dict[str, Any], gate: str) -> None:
    result = run(make_spec(agreeingEvaluations=1, stabilization="0s"), [observed(acceptance=0.05)], **kw)
    assert result.acted == []
    assert result.decisions[0].gate == gate


def test_settled_config_is_judged() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s")
    result = run(spec, [observed(acceptance=0.05)], config_since=T0 - 6 * MINUTE)
    assert result.acted == [0]


# ------------------------------------------------------------------------------------------------ reevaluate


def test_reevaluate_token_acts_once_without_waiting() -> None:
    spec = make_spec(agreeingEvaluations=3, stabilization="10m")
    low = observed(acceptance=0.05)
    fresh = run(spec, [low], reevaluate_token="2026-11-26T12:00", last_handled_reevaluate="old")
    assert fresh.acted == [0]
    assert fresh.decisions[0].handled_reevaluate == "2026-11-26T12:00"
    handled = run(spec, [low], reevaluate_token="t1", last_handled_reevaluate="t1")
    assert handled.acted == []
    assert handled.decisions[0].handled_reevaluate is None


def test_reevaluate_token_waits_out_errors_and_respects_the_budget() -> None:
    spec = make_spec(agreeingEvaluations=3)
    broken = observed(acceptance=0.05, batch_size=m(Signal.BATCH_SIZE, None, ERROR))
    errored = run(spec, [broken], reevaluate_token="t2", last_handled_reevaluate="t1")
    assert errored.acted == []
    # Consumed all the same: the evaluation ran and says why it held; a token left pending would make every tick
    # due and query Prometheus every 10 s (at most one evaluation per interval, also while holding).
    assert errored.decisions[0].handled_reevaluate == "t2"
    assert "measurement error" in errored.decisions[0].reason
    recent = PolicyState(
        actuations=(ActuationRecord(T0 - 5 * MINUTE, Action.ENABLE, intent_to_dict(OFF), intent_to_dict(ON), "x"),)
    )
    throttled = run(
        spec, [observed(acceptance=0.05)], state=recent, reevaluate_token="t2", last_handled_reevaluate="t1"
    )
    assert throttled.acted == []
    assert throttled.decisions[0].throttled
    assert throttled.decisions[0].handled_reevaluate == "t2"


# ------------------------------------------------------------------------------------------------ budget


def act(
    minutes_ago: float,
    action: Action = Action.CHANGE_THRESHOLD,
    *,
    frm: SpeculationIntent = ON,
    to: SpeculationIntent = ON,
    reversal: bool = False,
) -> ActuationRecord:
    return ActuationRecord(
        T0 - timedelta(minutes=minutes_ago), action, intent_to_dict(frm), intent_to_dict(to), "r", reversal=reversal
    )


@pytest.mark.parametrize(
    ("history", "current", "target", "at_minutes", "allowed", "why"),
    [
        ((), ON, OFF, 0, True, ""),
        ((act(10),), ON, OFF, 0, False, "dwell 15m, next allowed at 2026-11-26T12:05:00Z"),
        ((act(16),), ON, OFF, 0, True, ""),
        (
            (act(50), act(20)),
            ON,
            OFF,
            0,
            False,
            "2 actuations in the last 1h (maxPerHour 2), next allowed at 2026-11-26T12:10:00Z",
        ),
        ((act(50), act(20)), ON, OFF, 11, True, ""),
        (
            tuple(act(60 + 120 * i) for i in reversed(range(8))),
            ON,
            OFF,
            0,
            False,
            "8 actuations in the last 24h (maxPerDay 8), next allowed at 2026-11-26T21:00:00Z",
        ),
        # enabling right after a disable reverses it: minInterval x reversalBackoff
        ((act(20, Action.DISABLE, to=OFF),), OFF, ON, 0, False, "dwell 30m (x2 per reversal)"),
        ((act(20, Action.DISABLE, to=OFF),), OFF, ON, 11, True, ""),
        # a second quick reversal doubles again
        (
            (act(90, Action.DISABLE, to=OFF), act(40, Action.ENABLE, frm=OFF, to=ON, reversal=True)),
            ON,
            OFF,
            0,
            False,
            "dwell 1h (x2 per reversal)",
        ),
        # after a reversal chain even a new kind of change waits longer
        (
            (act(90, Action.DISABLE, to=OFF), act(20, Action.ENABLE, frm=OFF, to=ON, reversal=True)),
            ON,
            replace(ON, disable_above_batch_size=64),
            0,
            False,
            "dwell 30m",
        ),
        # a reversal hours later is not quick: plain minInterval
        ((act(300, Action.DISABLE, to=OFF),), OFF, ON, 0, True, ""),
    ],
)
def test_budget(
    history: tuple[ActuationRecord, ...],
    current: SpeculationIntent,
    target: SpeculationIntent,
    at_minutes: float,
    allowed: bool,
    why: str,
) -> None:
    budget = BudgetSpec(min_interval="15m", max_per_hour=2, max_per_day=8, reversal_backoff=2)
    ok, text = budget_check(
        PolicyState(actuations=history), budget, current, target, T0 + timedelta(minutes=at_minutes)
    )
    assert ok is allowed
    assert why in text
    if allowed:
        assert text == ""


@pytest.mark.parametrize(
    ("chain", "reversing", "minutes"), [(0, False, 15), (0, True, 30), (2, False, 60), (2, True, 120), (9, True, 1440)]
)
def test_required_dwell_backs_off_exponentially_and_caps_at_a_day(chain: int, reversing: bool, minutes: int) -> None:
    history = (act(500), *tuple(act(400 - i, reversal=True) for i in range(chain)))
    budget = BudgetSpec(min_interval="15m", reversal_backoff=2)
    assert required_dwell(history, budget, reversing=reversing) == timedelta(minutes=minutes)


def test_exhausted_budget_throttles_with_one_event_then_recovers() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s")
    history = (act(50), act(20))
    steps = [observed(acceptance=0.05)] * 12
    result = run(spec, steps, state=PolicyState(actuations=history))
    throttled = [d.throttled for d in result.decisions]
    assert throttled[:10] == [True] * 10
    assert [e.reason for e in result.decisions[0].events] == ["ActuationThrottled"]
    assert all(not d.events for d in result.decisions[1:10])
    assert result.acted == [10], "the hour rolls past the oldest actuation at 12:10"
    assert result.decisions[0].action is Action.DISABLE, "the throttled decision still says what it would do"
    assert not result.decisions[10].throttled


def test_reversal_is_recorded_and_lengthens_the_next_dwell() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s")
    budget = spec.autotune.budget
    disable = Decision(
        Action.DISABLE, OFF, "r", {}, Action.DISABLE, True, "", True, False, False, off_kind=OffReason.LOAD, batch=40.0
    )
    state = record_actuation(PolicyState(), disable, ON, T0, budget)
    enable = replace(disable, action=Action.ENABLE, target=ON, off_kind=None)
    state = record_actuation(state, enable, OFF, T0 + 30 * MINUTE, budget)
    assert [a.reversal for a in state.actuations] == [False, True]
    assert state.off is None
    ok, why = budget_check(state, budget, ON, OFF, T0 + 80 * MINUTE)
    assert not ok
    assert "dwell 1h" in why


# ------------------------------------------------------------------------------------------------ overrides


def test_force_off_never_fights_the_reconcile_and_wins_in_the_rendered_intent() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", overrides={"speculation": "ForceOff"})
    decision = evaluate_alone(inputs(spec, observed(on=False), OFF), PolicyState(), T0)
    assert decision.action is Action.KEEP
    assert "ForceOff" in decision.reason
    assert desired_intent(spec, PolicyState(selected=ON)).intent.enabled is False


def test_force_on_ignores_low_acceptance() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", overrides={"speculation": "ForceOn"})
    result = run(spec, [observed(acceptance=0.05)] * 3)
    assert result.acted == []
    assert desired_intent(spec, PolicyState(selected=OFF)).intent.enabled is True


def test_pin_batch_threshold_restores_the_spec_threshold() -> None:
    spec = make_spec(overrides={"pinBatchThreshold": True})
    chosen = replace(ON, disable_above_batch_size=64, batch_schedule=((1, 63, 3), (64, 256, 0)))
    assert apply_overrides(spec, chosen) == ON


def test_desired_intent_ignores_autotune_choice_in_mode_off() -> None:
    assert desired_intent(make_spec(mode="Off"), PolicyState(selected=OFF)) == ChosenIntent(ON, IntentSource.SPEC)
    assert desired_intent(make_spec(mode="Recommend"), PolicyState(selected=OFF)) == ChosenIntent(
        OFF, IntentSource.AUTOTUNE
    )


def test_spec_change_resets_stabilization_and_intent_change_clears_the_choice() -> None:
    spec = make_spec(agreeingEvaluations=3, stabilization="0s")
    first = run(spec, [observed(acceptance=0.05)] * 2)
    assert first.state.streak is not None
    assert first.state.streak.count == 2
    edited = make_spec(agreeingEvaluations=3, stabilization="0s", acceptance={"disableBelow": 0.45, "enableAbove": 0.6})
    second = run(edited, [observed(acceptance=0.05)], state=replace(first.state, selected=OFF), start=T0 + 2 * MINUTE)
    assert second.state.streak is not None
    assert second.state.streak.count == 1, "the edited spec starts agreement afresh"
    assert second.state.selected == OFF, "an autotune edit does not undo the chosen config"
    retuned = parse_spec(
        {
            **edited.model_dump(by_alias=True, mode="json"),
            "speculation": {
                **edited.speculation.model_dump(by_alias=True, mode="json", exclude_none=True),
                "numSpeculativeTokens": 5,
            },
        }
    )
    third = run(retuned, [observed(acceptance=0.7)], state=second.state, start=T0 + 3 * MINUTE)
    assert third.state.selected is None, "a speculation edit applies at once: the spec's own intent runs"


# ------------------------------------------------------------------------------------------------ off -> on


def test_speculation_off_has_no_acceptance_and_that_is_not_an_error() -> None:
    spec = make_spec(enabled=False, agreeingEvaluations=1, stabilization="0s")
    result = run(spec, [observed(on=False)] * 3, current=OFF)
    assert result.acted == []
    assert result.state.consecutive_errors == 0
    assert "off as written in spec" in result.decisions[0].reason


def off_state(kind: OffReason, *, minutes_ago: float, batch: float, rate: float | None = 4.0) -> PolicyState:
    return PolicyState(
        off=OffRecord(
            kind, T0 - timedelta(minutes=minutes_ago), batch, "acceptance 0.38 < disableBelow 0.50", request_rate=rate
        ),
        actuations=(act(minutes_ago, Action.DISABLE, to=OFF),),
        selected=OFF,
    )


def test_probe_after_probe_interval_then_keep_or_revert_by_enable_above() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", probeInterval="6h")
    state = off_state(OffReason.ACCEPTANCE, minutes_ago=300, batch=6)
    early = run(spec, [observed(on=False, batch=5)], state=state, current=OFF)
    assert early.acted == []
    assert "next probe after 2026-11-26T13:00:00Z" in early.decisions[0].reason

    busier = observed(on=False, batch=40, request_rate=m(Signal.REQUEST_RATE, 9.0))
    for_load = off_state(OffReason.LOAD, minutes_ago=300, batch=6)
    busy = run(spec, [busier], state=for_load, current=OFF, start=T0 + 61 * MINUTE)
    assert busy.acted == []
    assert (
        "probe waits for the request rate to fall to 4.00/s, where speculation was disabled" in busy.decisions[0].reason
    )

    probe = run(spec, [observed(on=False, batch=5)], state=state, current=OFF, start=T0 + 61 * MINUTE)
    assert probe.acted == [0]
    assert probe.decisions[0].probe
    assert probe.decisions[0].reason.startswith("probe: speculation off since")
    assert probe.state.probe_started == T0 + 61 * MINUTE
    assert probe.current == ON

    after = T0 + 90 * MINUTE
    failed = run(spec, [observed(acceptance=0.58)] * 3, state=probe.state, current=ON, start=after)
    assert failed.acted == [1], "0.58 would keep a running config, but a probe must clear enableAbove 0.65"
    assert "dwell 30m (x2 per reversal)" in failed.decisions[0].gate, "undoing the probe is a quick reversal"
    assert "did not reach enableAbove 0.65" in failed.decisions[0].reason
    assert failed.state.off is not None
    assert failed.state.actuations[-1].reversal, "the probe's revert counts as a quick reversal"

    confirmed = run(spec, [observed(acceptance=0.8)], state=probe.state, current=ON, start=after)
    assert confirmed.acted == []
    assert confirmed.state.probe_started is None
    assert confirmed.state.off is None


def test_probes_can_be_disabled() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", probeInterval="0s")
    state = off_state(OffReason.ACCEPTANCE, minutes_ago=24 * 60, batch=6)
    result = run(spec, [observed(on=False, batch=2)], state=state, current=OFF)
    assert result.acted == []
    assert "probes disabled" in result.decisions[0].reason


def baseline(
    mode: Mode,
    bucket: int,
    p99_ms: float,
    *,
    minutes_ago: float = 30,
    acceptance: float | None = None,
    tpot_mean_ms: float | None = None,
) -> BaselineEntry:
    return BaselineEntry(
        mode, bucket, "tpot", p99_ms / 2, p99_ms, tpot_mean_ms, acceptance, 900, T0 - timedelta(minutes=minutes_ago)
    )


def test_latency_regression_at_load_disables_for_load_and_load_drop_reenables() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s")
    state = PolicyState(baseline=(baseline(Mode.OFF, 5, 30.0),))  # batch [16,32) without speculation: P99 30 ms
    slow = run(spec, [observed(acceptance=0.7, batch=20, p99=0.045, request_rate=m(Signal.REQUEST_RATE, 4.0))],
               state=state)  # fmt: skip
    assert slow.acted == [0]
    reason = slow.decisions[0].reason
    assert "P99 TPOT 45.0 ms is +50% vs the non-speculative baseline 30.0 ms at batch [16,32)" in reason
    assert "acceptance 0.70" in reason
    assert slow.state.off is not None
    assert slow.state.off.kind is OffReason.LOAD
    assert slow.state.off.request_rate == 4.0

    later = T0 + 40 * MINUTE

    def plain(batch: float, rate: float) -> dict[str, Measurement]:
        return observed(on=False, batch=batch, request_rate=m(Signal.REQUEST_RATE, rate))

    # off, the same traffic runs at a larger batch: the load has not fallen
    still_busy = run(spec, [plain(40, 3.8)], state=slow.state, current=OFF, start=later)
    assert still_busy.acted == []
    quiet = run(spec, [plain(6, 1.5)], state=slow.state, current=OFF, start=later)
    assert quiet.acted == [0]
    assert "load back under the crossover: 1.50 requests/s, below the 4.00 at which" in quiet.decisions[0].reason


@pytest.mark.parametrize(
    ("p99", "target", "disables"),
    [(0.032, None, False), (0.034, None, True), (0.032, "31ms", True), (0.032, "25ms", False)],
)
def test_regression_tolerance_and_p99_target(p99: float, target: str | None, disables: bool) -> None:
    latency: dict[str, Any] = {"metric": "tpot", "regressionTolerance": 0.1}
    if target:
        latency["p99Target"] = target
    spec = make_spec(latency=latency)
    state = PolicyState(baseline=(baseline(Mode.OFF, 5, 30.0),))
    decision = evaluate_alone(inputs(spec, observed(batch=20, p99=p99)), state, T0)
    assert (decision.action is Action.DISABLE) is disables


def test_regression_needs_a_baseline_at_the_same_load() -> None:
    state = PolicyState(baseline=(baseline(Mode.OFF, 2, 10.0),))  # only at batch [2,4)
    decision = evaluate_alone(inputs(make_spec(), observed(batch=20, p99=0.2)), state, T0)
    assert decision.action is Action.KEEP
    assert decision.evidence["baseline"]["note"] == "no non-speculative baseline at batch [16,32) yet"


def test_baseline_record_reenables_when_speculation_was_faster_at_this_load() -> None:
    spec = make_spec()
    state = PolicyState(baseline=(baseline(Mode.ON, 4, 20.0, acceptance=0.8),))
    decision = evaluate_alone(inputs(spec, observed(on=False, batch=10, p99=0.040), OFF), state, T0)
    assert decision.action is Action.ENABLE
    assert decision.reason.startswith("baseline record: with speculation P99 TPOT was 20.0 ms at batch [8,16)")
    stale_drafter = replace(state, off=OffRecord(OffReason.ACCEPTANCE, T0 - 5 * MINUTE, 10, "acceptance 0.3"))
    again = evaluate_alone(inputs(spec, observed(on=False, batch=10, p99=0.040), OFF), stale_drafter, T0)
    assert again.action is Action.KEEP, "a record older than an acceptance-driven disable proves nothing"


def canary_group(*, on: bool, p99: float, batch: float, acceptance: float = 0.8) -> dict[str, Measurement]:
    return observed(on=on, acceptance=acceptance, p99=p99, batch=batch)


@pytest.mark.parametrize(
    ("current", "canary", "action"),
    [
        (OFF, canary_group(on=True, p99=0.020, batch=10), Action.ENABLE),
        (OFF, canary_group(on=True, p99=0.020, batch=10, acceptance=0.6), Action.KEEP),  # below enableAbove
        (OFF, canary_group(on=True, p99=0.020, batch=30), Action.KEEP),  # load not comparable
        (OFF, canary_group(on=True, p99=0.029, batch=10), Action.KEEP),  # within tolerance
        (ON, canary_group(on=False, p99=0.020, batch=10), Action.DISABLE),  # the plain canary is faster
        (ON, canary_group(on=False, p99=0.040, batch=10), Action.KEEP),
    ],
)
def test_canary_comparison_on_the_same_traffic(
    current: SpeculationIntent, canary: dict[str, Measurement], action: Action
) -> None:
    main = observed(on=current.enabled, acceptance=0.7, p99=0.030, batch=10)
    decision = evaluate_alone(inputs(make_spec(), main, current, canary=canary), PolicyState(), T0)
    assert decision.action is action
    if action is not Action.KEEP:
        assert decision.reason.startswith("canary: P99 TPOT")


# ------------------------------------------------------------------------------------------------ thresholds


def tuned_observation(batch: float, k: int = 3, alpha: float = 0.7) -> dict[str, Measurement]:
    """Per-position acceptance and a TPOT the llama8b-h100 model itself predicts at this batch."""
    profile = AcceptanceProfile(tuple(alpha**j for j in range(1, k + 1)), "synthetic")
    tpot_s = LLAMA8B_H100.step_ms(round(batch), k) / profile.expected_tokens(k) / 1000
    by_position = tuple((str(j), r) for j, r in enumerate(profile.survival))
    rate = sum(profile.survival) / k
    return observed(
        acceptance=rate,
        batch=batch,
        tpot_s=tpot_s,
        acceptance_by_position=m(Signal.ACCEPTANCE_BY_POSITION, None, by_label=by_position, samples=41_000),
    )


def test_heavy_load_installs_a_batch_schedule_with_its_reasoning() -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 256})
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    state = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)
    result = run(spec, [tuned_observation(batch=180)], state=state)
    decision = result.decisions[0]
    assert decision.action is Action.CHANGE_THRESHOLD
    assert decision.actuate
    schedule = decision.target.batch_schedule
    assert schedule is not None
    assert schedule[0][0] == 1
    assert schedule[-1][1] == 256
    assert [k for _, _, k in schedule] == sorted((k for _, _, k in schedule), reverse=True)
    assert "predicts +" in decision.reason
    fit = decision.evidence["threshold"]
    assert fit["acceptance"]["source"].startswith("measured per position")
    assert fit["predictedGain"] > 0.03
    assert "consistent" in fit["consistency"]
    assert result.state.selected == decision.target


@pytest.mark.parametrize(
    "autotune",
    [{"batchThreshold": {"tune": False}}, {"batchThreshold": {"tune": True}, "overrides": {"pinBatchThreshold": True}}],
)
def test_threshold_tuning_off_or_pinned(autotune: dict[str, Any]) -> None:
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", **autotune)
    state = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)
    decision = evaluate_alone(inputs(spec, tuned_observation(batch=180)), state, T0)
    assert decision.action is Action.KEEP
    assert "threshold" not in decision.evidence


@pytest.mark.parametrize(
    ("prompt_tokens", "context", "source", "verdict"),
    [
        (8000.0, 8300.0, "measured", "(consistent)"),  # 8k prompts + 600-token responses: L-bar 8000 + 600/2
        (None, 1000.0, "assumed", "off by more than x2"),  # nothing measured: the profile's 1000 tokens, refused
    ],
)
def test_the_cost_model_is_priced_at_the_measured_context(
    prompt_tokens: float | None, context: float, source: str, verdict: str
) -> None:
    """Found by the benchmark (long-context, 8B EAGLE-3 K=3): ~8k-token prompts measured TPOT about 3x the model's
    prediction at the assumed 1000-token context, so the fit was refused and speculation switched off blind. (Few
    requests per second here, so the prefill share of each step, also priced, stays small.)"""
    spec = make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 256})
    profile = AcceptanceProfile(tuple(0.7**j for j in range(1, 4)), "synthetic")
    true_model = replace(LLAMA8B_H100, mean_context_tokens=8300.0)
    window = tuned_observation(batch=64)
    window[Signal.TPOT_MEAN] = m(Signal.TPOT_MEAN, true_model.step_ms(64, 3) / profile.expected_tokens(3) / 1000)
    window[Signal.MEAN_ACCEPTANCE_LENGTH] = m(Signal.MEAN_ACCEPTANCE_LENGTH, profile.expected_tokens(3))
    window[Signal.REQUEST_RATE] = m(Signal.REQUEST_RATE, 0.2)
    window[Signal.GENERATION_TOKEN_RATE] = m(Signal.GENERATION_TOKEN_RATE, 120.0)
    if prompt_tokens is not None:
        window[Signal.MEAN_PROMPT_TOKENS] = m(Signal.MEAN_PROMPT_TOKENS, prompt_tokens)
    state = PolicyState(load={7: 7200.0}, load_updated=T0 - MINUTE)
    fit = evaluate_alone(inputs(spec, window), state, T0).evidence["threshold"]
    assert verdict in fit["consistency"]
    assert (fit["model"]["meanContextTokens"], fit["model"]["meanContextSource"]) == (context, source)
    # 0.2 requests/s of 8000-token prompts chunked into each step of the running config (TPOT x tokens per step)
    step_ms = true_model.step_ms(64, 3)
    prefill = 0.2 * 8000.0 * step_ms / 1000 if prompt_tokens is not None else 0.0
    assert fit["model"]["prefillTokensPerStep"] == pytest.approx(prefill, abs=0.1)


def test_versions_without_a_batch_size_schedule_tune_one_k() -> None:
    """vLLM 0.20 has no per-batch-size schedule: past the crossover the fit lowers K for every batch size."""
    spec = make_spec(version="0.20.0", batchThreshold={"tune": True})
    state = PolicyState(load={8: 7200.0}, load_updated=T0 - MINUTE)
    decision = evaluate_alone(inputs(spec, tuned_observation(batch=180)), state, T0)
    assert decision.action is Action.CHANGE_K
    assert decision.target.batch_schedule is None
    assert decision.target.disable_above_batch_size is None
    declared = spec.speculation.num_speculative_tokens
    assert declared is not None
    assert decision.target.num_speculative_tokens is not None
    assert 1 <= decision.target.num_speculative_tokens < declared
    assert "at every batch size" in decision.reason


# ------------------------------------------------------------------------------------------------ recommend events


def test_recommend_mode_posts_recommendation_changes_only_on_change() -> None:
    spec = make_spec(mode="Recommend", agreeingEvaluations=1, stabilization="0s")
    steps = [observed(acceptance=0.7), observed(acceptance=0.05), observed(acceptance=0.05), observed(acceptance=0.7)]
    result = run(spec, steps)
    assert [[e.reason for e in d.events] for d in result.decisions] == [
        [],
        ["RecommendationChanged"],
        [],
        ["RecommendationChanged"],
    ]
    assert result.current == ON, "Recommend never changes the running config"


# ------------------------------------------------------------------------------------------------ durability


def test_observations_feed_the_baseline_and_load_histogram() -> None:
    spec = make_spec(agreeingEvaluations=3, stabilization="10m")
    steps = [observed(batch=6 if i < 10 else 40, requests=900) for i in range(20)]
    state = run(spec, steps).state
    assert {(e.mode, e.bucket) for e in state.baseline} == {(Mode.ON, 3), (Mode.ON, 6)}
    assert all(e.acceptance == 0.72 for e in state.baseline)
    assert len([e for e in state.baseline if e.bucket == 3]) == 2, "one window per 5m: overlapping windows skipped"
    assert set(state.load) == {3, 6}


def test_few_requests_never_enter_the_baseline() -> None:
    spec = make_spec(minSamples={"draftTokens": 2000, "requests": 500})
    state = run(spec, [observed(requests=499)]).state
    assert state.baseline == ()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, 0.1, 0.45, 0.55, 0.7, 0.9]),
            st.floats(0.5, 300),
            st.sampled_from(["ok", "error", "off"]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_state_survives_a_restart_at_any_point(script: list[tuple[float | None, float, str]]) -> None:
    """Persisting status.autotune and reading it back changes no later decision (operator restarts are invisible)."""
    spec = make_spec(agreeingEvaluations=2, stabilization="2m", probeInterval="10m")
    state, current = PolicyState(), ON
    for i, (acceptance, batch, kind) in enumerate(script):
        now = T0 + i * MINUTE
        if kind == "off" or not current.enabled:
            measurements = observed(on=False, batch=batch)
        elif acceptance is None:
            measurements = observed(batch=batch, acceptance_rate=m(Signal.ACCEPTANCE_RATE, None, NO_DATA))
        else:
            measurements = observed(acceptance=acceptance, batch=batch)
        if kind == "error":
            measurements[Signal.TPOT_P99] = m(Signal.TPOT_P99, None, ERROR)
        restored = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
        a, next_state = decide(inputs(spec, measurements, current), state, now)
        b, next_restored = decide(inputs(spec, measurements, current), restored, now)
        assert a.to_dict() == b.to_dict()
        assert next_state.to_dict() == next_restored.to_dict()
        state = next_state
        if a.actuate:
            state = record_actuation(state, a, current, now, spec.autotune.budget)
            current = a.target


def test_decide_is_deterministic() -> None:
    spec = make_spec()
    state = PolicyState(baseline=(baseline(Mode.OFF, 4, 25.0),), load={4: 600.0}, load_updated=T0 - MINUTE)
    one = decide(inputs(spec, observed(acceptance=0.4, batch=9)), state, T0)
    two = decide(inputs(spec, observed(acceptance=0.4, batch=9)), state, T0)
    assert one[0] == two[0]
    assert one[1].to_dict() == two[1].to_dict()


def test_foreign_or_missing_state_starts_fresh() -> None:
    assert PolicyState.from_dict(None) == PolicyState()
    assert PolicyState.from_dict({"version": 99, "consecutiveErrors": 3}) == PolicyState()


# What the API server lets status.autotune hold (the CRD keeps it free-form): each is reported and ignored.
MALFORMED_AUTOTUNE: list[object] = [
    {"version": STATE_VERSION, "streak": {"key": "k"}},
    {"version": STATE_VERSION, "actuations": [{"at": "yesterday", "action": "Disable", "from": {}, "to": {}}]},
    {"version": STATE_VERSION, "load": {"many": 1}},
    {"version": STATE_VERSION, "off": {"kind": "Sulking", "at": "2026-01-01T00:00:00Z"}},
    {"version": STATE_VERSION, "consecutiveErrors": "lots"},
    {"version": STATE_VERSION, "baseline": ["x"]},
    {"version": STATE_VERSION, "selected": "on"},
    {"version": STATE_VERSION, "requestRates": [["2026-01-01T00:00:00Z"]]},
    {"version": STATE_VERSION, "requestRates": [["2026-01-01T00:00:00Z", "fast"]]},
    {"version": STATE_VERSION, "requestRates": [["2026-01-01T00:00:00Z", 3.0, "crowded"]]},
    {"version": STATE_VERSION, "requestRates": "rising"},
    ["version", STATE_VERSION],
    "paused",
]


@pytest.mark.parametrize("raw", MALFORMED_AUTOTUNE, ids=[json.dumps(r)[:40] for r in MALFORMED_AUTOTUNE])
def test_a_malformed_autotune_status_is_reported_and_ignored(raw: object) -> None:
    state, problem = PolicyState.from_status(raw)
    assert state == PolicyState()
    assert problem is not None
    assert problem.startswith("status.autotune is malformed (")
    assert problem.endswith("); ignored")


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ({"version": STATE_VERSION, "streak": {"key": "k"}}, "KeyError: 'action'"),
        ({"version": STATE_VERSION, "framework": ["x"], "load": {"4": "many"}}, "ValueError"),
        ("paused", "a str, not an object"),
        ([STATE_VERSION], "a list, not an object"),
    ],
    ids=["bad-streak", "bad-framework-and-load", "string", "list"],
)
def test_the_operator_survives_a_malformed_autotune_status_warns_once_and_stores_a_fresh_one(
    stored: object, problem: str
) -> None:
    """Through the operator's pure seams (reconcile, then an evaluation): no exception, one Warning event, and the
    stored status.autotune is readable again afterwards."""
    from tests.seams import ROUND_TRIP_SPEC, Cluster, window_measurements

    cluster = Cluster(dict(ROUND_TRIP_SPEC))
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)
    cluster.status["autotune"] = stored
    cluster.reconcile()
    outcome = cluster.evaluate(window_measurements(speculating=True, acceptance=0.8))
    warnings = [e for e in outcome.events if e.reason == "MalformedAutotuneStatus"]
    assert [w.type for w in warnings] == ["Warning"]
    assert problem in warnings[0].message
    assert PolicyState.from_status(cluster.status["autotune"])[1] is None
    cluster.advance(1)
    later = cluster.evaluate(window_measurements(speculating=True, acceptance=0.8))
    assert not [e for e in later.events if e.reason == "MalformedAutotuneStatus"]


def test_evaluate_alone_ignores_agreement_and_budget_but_not_errors() -> None:
    spec = make_spec(agreeingEvaluations=10, stabilization="1h")
    busy = PolicyState(actuations=(act(1),))
    decision = evaluate_alone(inputs(spec, observed(acceptance=0.05)), busy, T0)
    assert decision.action is Action.DISABLE
    assert decision.gate == "dry run: stabilization and budget not applied"
    broken = observed(acceptance=0.05, tpot_p99=m(Signal.TPOT_P99, None, ERROR, detail="HTTP 503"))
    held = evaluate_alone(inputs(spec, broken), PolicyState(), T0)
    assert held.action is Action.KEEP
    assert "HTTP 503" in held.reason


# ------------------------------------------------------------------------------------------------ issue 8 rules


def test_a_change_that_renders_the_same_command_is_not_proposed() -> None:
    """K=3 with a threshold at 16 compiles to the schedule [[1,15,3],[16,max,0]] on 0.33: proposing that schedule
    changes nothing vLLM sees, so no budget, no event, no restart."""
    spec = make_spec()
    current = SpeculationIntent(True, 3, disable_above_batch_size=16)
    same = replace(current, batch_schedule=((1, 15, 3), (16, 256, 0)), disable_above_batch_size=16)
    proposal = Proposal(Action.CHANGE_THRESHOLD, same, "fit", {})
    kept = no_op_as_keep(inputs(spec, observed(), current=current), proposal)
    assert kept.action is Action.KEEP
    assert "renders the same vLLM command line" in kept.reason
    moved = replace(same, batch_schedule=((1, 31, 3), (32, 256, 0)), disable_above_batch_size=32)
    assert no_op_as_keep(inputs(spec, observed(), current=current), replace(proposal, target=moved)) is not None
    assert no_op_as_keep(inputs(spec, observed(), current=current), replace(proposal, target=moved)).action is (
        Action.CHANGE_THRESHOLD
    )


def test_a_probe_without_acceptance_evidence_ends_at_its_deadline() -> None:
    spec = make_spec(probeInterval="30m")
    deadline = probe_deadline(spec)
    silent = observed(acceptance=None, draft_tokens=0)
    started = PolicyState(
        probe_started=T0 - deadline + MINUTE,
        off=OffRecord(OffReason.ACCEPTANCE, T0 - 2 * deadline, 4.0, "acceptance 0.20"),
    )
    early = run(spec, [silent], state=started)
    assert early.decisions[0].proposal is Action.KEEP
    late = run(spec, [silent] * 5, state=started, start=T0 + 2 * MINUTE)
    assert late.decisions[0].proposal is Action.DISABLE
    assert "found no acceptance evidence within" in late.decisions[0].reason


def test_a_probe_deadline_allows_the_rollout_of_every_replica() -> None:
    """The probe's rollout is one pod replacement per pod: eight replicas get seven more than one replica does."""
    one = make_spec()
    eight = one.model_copy(update={"replicas": 8})
    replacement = manifests.pod_replacement_seconds(one)
    assert probe_deadline(eight) - probe_deadline(one) == timedelta(seconds=7 * replacement)


def test_a_paused_object_consumes_a_new_reevaluate_token() -> None:
    """Held evaluations mark the token handled, so a paused CR with a token is not due (and queried) every tick."""
    held = run(make_spec(), [observed(acceptance=0.05)], paused=True, reevaluate_token="t9")
    assert held.acted == []
    assert held.decisions[0].gate == "paused"
    assert held.decisions[0].handled_reevaluate == "t9"
    settling = run(
        make_spec(), [observed(acceptance=0.05)], config_since=T0, reevaluate_token="t9", last_handled_reevaluate="t8"
    )
    assert settling.decisions[0].gate == "settling"
    assert settling.decisions[0].handled_reevaluate == "t9"
