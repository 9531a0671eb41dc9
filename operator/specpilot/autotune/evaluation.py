"""Autotune inside the operator: one evaluation per `spec.autotune.interval`, turned into status, events and intent.

`measure` (Prometheus through a QueryClient) and `decision.decide` (pure) do the work; this module maps their answer
onto the CR: `status.observed`, `status.recommendation`, `status.autotune` (the controller memory that survives
restarts), the last 10 `status.actuations`, the MetricsAvailable / Throttled / Paused conditions and the events. An
actuation only changes `status.autotune.selected`; the reconcile renders it, so the rollout goes through the same
path (one Deployment write, one replica at a time) as a user's edit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from specpilot.api import rollout, timestamps, v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.autotune.evaluate import QueryClient, effective_window, measure, running_since
from specpilot.autotune.model.costprofile import fit_settings_for
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.policy import drafters, framework_rules
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.policy.budget import actuation_entry, budget_check, record_actuation, record_candidate_trial
from specpilot.autotune.policy.decision import (
    decide,
    desired_intent,
    rendered_hash,
    revert_failed_rollout,
    running_intent,
)
from specpilot.autotune.policy.state import (
    PAUSED_BY_ANNOTATION,
    Action,
    Decision,
    OffReason,
    OffRecord,
    PolicyInputs,
    PolicyState,
)
from specpilot.autotune.policy.traffic import traffic_of, traffic_shift
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass, valid_value
from specpilot.autotune.signals.promql import Scope, Signal, Window
from specpilot.reconcile import conditions as cond
from specpilot.reconcile.core import Event, ObservedDeployment, ReconcileInputs, trial_command
from specpilot.vllm.intent import ChosenIntent, SpeculationIntent, intent_to_dict

ACTUATION_HISTORY = 10
ACTION_EVENT_REASONS = {
    Action.DISABLE: "SpeculationDisabled",
    Action.ENABLE: "SpeculationEnabled",
    Action.CHANGE_THRESHOLD: "BatchThresholdChanged",
    Action.CHANGE_K: "SpeculativeTokensChanged",
}
# ObservedStatus field -> (signal, scale): seconds become milliseconds for people.
OBSERVED_FIELDS: dict[str, tuple[Signal, float]] = {
    "acceptance_rate": (Signal.ACCEPTANCE_RATE, 1.0),
    "mean_acceptance_length": (Signal.MEAN_ACCEPTANCE_LENGTH, 1.0),
    "p50_tpot_ms": (Signal.TPOT_P50, 1000.0),
    "p99_tpot_ms": (Signal.TPOT_P99, 1000.0),
    "p99_ttft_ms": (Signal.TTFT_P99, 1000.0),
    "p99_e2e_ms": (Signal.E2E_P99, 1000.0),
    "running_requests": (Signal.RUNNING_REQUESTS, 1.0),
    "waiting_requests": (Signal.WAITING_REQUESTS, 1.0),
    "request_rate": (Signal.REQUEST_RATE, 1.0),
    "kv_cache_usage": (Signal.KV_CACHE_USAGE, 1.0),
}


@dataclass(frozen=True)
class AutotuneOutcome:
    fields: dict[str, Any]
    conditions: list[cond.ConditionUpdate]
    events: list[Event]
    actuated: bool = False
    decision: dict[str, Any] = field(default_factory=dict)


def format_time(at: datetime) -> str:
    """Whole seconds, like condition timestamps (timestamps.format_time keeps sub-seconds for policy state)."""
    return timestamps.format_time(at.replace(microsecond=0))


@dataclass(frozen=True)
class Cadence:
    """What in a spec decides when the object is due: all the fleet's rounds keep per object between evaluations
    (a few bytes, where the parsed spec is ~20 KiB of objects), so a round parses only the specs it evaluates."""

    idle: str | None  # why autotune cannot run ("AutotuneOff", "NoPrometheus"; see idle_conditions), None when it can
    interval_s: float

    @property
    def active(self) -> bool:
        return self.idle is None

    @staticmethod
    def of(spec: v1alpha1.SpeculativeDeploymentSpec) -> Cadence:
        idle = (
            "AutotuneOff"
            if spec.autotune.mode == v1alpha1.AutotuneMode.OFF
            else "NoPrometheus"
            if spec.autotune.prometheus is None
            else None
        )
        return Cadence(idle, parse_duration(spec.autotune.interval))


@dataclass(frozen=True)
class DueMarks:
    """The only parts of an object's annotations and status `is_due` reads. The periodic pass keeps them per object
    (shell.memory.BodySummary), so a round unpacks and parses only the objects that are due."""

    reevaluate: str | None = None  # metadata.annotations[specpilot.dev/reevaluate]
    handled: str | None = None  # status.lastHandledReevaluate
    evaluated_at: str | None = None  # status.observed.evaluatedAt

    @staticmethod
    def of(status: Mapping[str, Any], annotations: Mapping[str, str]) -> DueMarks:
        return DueMarks(annotations.get(v1alpha1.ANNOTATION_REEVALUATE)).with_status(status)

    def with_status(self, status: Mapping[str, Any]) -> DueMarks:
        """The same annotation with another status's marks (the status our last write produced, before the watch
        delivers it)."""
        handled = status.get("lastHandledReevaluate")
        recorded = (status.get("observed") or {}).get("evaluatedAt")
        return DueMarks(
            self.reevaluate, str(handled) if handled is not None else None, str(recorded) if recorded else None
        )


def _evaluated_at(recorded: str) -> datetime:
    try:
        return timestamps.parse_time(recorded)
    except ValueError:
        raise ValueError(f"status.observed.evaluatedAt {recorded[:64]!r} is not an RFC 3339 time") from None


def is_due(
    cadence: Cadence,
    marks: DueMarks,
    now: datetime,
    *,
    phase_key: str | None = None,
    evaluated_at: datetime | None = None,
) -> bool:
    """Evaluate once every `interval`, and at once when a new reevaluate token arrives.

    With `phase_key` (the object's UID) each object is due once per interval slot, at its own offset within the
    interval (a stable hash of the key): deployments created in one burst spread over the interval after their
    first evaluation instead of all falling due in the same round forever. `evaluated_at` is this process's own
    record of the last evaluation, for when the watch has not yet delivered the status that says so.
    """
    if not cadence.active:
        return False
    if marks.reevaluate and marks.reevaluate != marks.handled:
        return True
    recorded = marks.evaluated_at
    candidates = [t for t in (_evaluated_at(recorded) if recorded else None, evaluated_at) if t]
    if not candidates:
        return True
    last = max(candidates)
    interval = cadence.interval_s
    elapsed = (now - last).total_seconds()
    if phase_key is None:
        return elapsed >= interval
    offset = phase_offset(phase_key, interval)
    slot = math.floor((now.timestamp() - offset) / interval)
    # evaluatedAt is stored in whole seconds, so the last evaluation may read up to a second early: counted a second
    # late instead, it can never look like one from the previous slot (which would evaluate twice in a row).
    return slot > math.floor((last.timestamp() + 1 - offset) / interval)


def phase_offset(key: str, interval_s: float) -> float:
    """A stable offset in [0, interval) for `key`: the same in every process and after every restart."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval_s


def rollout_state(status: Mapping[str, Any], deployment: ObservedDeployment | None) -> tuple[bool, datetime | None]:
    """(rollout in progress, since when the current config runs everywhere), from the child and Progressing."""
    effective_hash = (status.get("effective") or {}).get("configHash")
    progressing = cond.find(status.get("conditions", []) or [], cond.PROGRESSING) or {}
    in_progress = (
        deployment is None or deployment.template_config_hash != effective_hash or progressing.get("status") != "False"
    )
    return in_progress, running_since(status.get("conditions", []) or [])


def observed_fields(measurements: Mapping[str, Measurement], window: str, now: datetime) -> dict[str, Any]:
    """status.observed through its model, so every key is one the CRD keeps (the API server prunes the rest).

    Signals without a valid value are written as null: in a merge patch that removes the previous window's number.
    """
    values: dict[str, Any] = {"window": window, "evaluated_at": format_time(now)}
    for name, (signal, scale) in OBSERVED_FIELDS.items():
        m = measurements.get(signal)
        valid = m is not None and m.klass == MeasurementClass.VALID and m.value is not None
        values[name] = round(m.value * scale, 4) if valid and m is not None and m.value is not None else None
    return v1alpha1.ObservedStatus.model_validate(values).model_dump(by_alias=True)


def _conditions(state: PolicyState, previous: list[dict[str, Any]], halted: str | None) -> list[cond.ConditionUpdate]:
    metrics_before = cond.find(previous, cond.METRICS_AVAILABLE) or {}
    if state.metrics_available is False:
        metrics = cond.ConditionUpdate(
            cond.METRICS_AVAILABLE,
            "False",
            "MetricsUnavailable",
            f"{state.consecutive_errors} consecutive evaluations with query errors; holding the current config",
        )
    elif state.metrics_available is True:
        reason = "MetricsRestored" if metrics_before.get("status") == "False" else "MetricsAvailable"
        metrics = cond.ConditionUpdate(cond.METRICS_AVAILABLE, "True", reason, "every query answered")
    else:
        metrics = cond.ConditionUpdate(cond.METRICS_AVAILABLE, "Unknown", "NotYetObserved", "")
    throttled = (
        cond.ConditionUpdate(cond.THROTTLED, "True", "ActuationThrottled", "actuation budget exhausted; holding")
        if state.throttled
        else cond.ConditionUpdate(cond.THROTTLED, "False", "WithinBudget", "")
    )
    if halted:
        paused = cond.ConditionUpdate(cond.PAUSED, "True", "AutomationPaused", halted)
    elif state.paused:
        paused = cond.ConditionUpdate(
            cond.PAUSED, "True", "AutomationPaused", f"annotation {v1alpha1.ANNOTATION_PAUSE}=true"
        )
    else:
        paused = cond.ConditionUpdate(cond.PAUSED, "False", "NotPaused", "")
    return [metrics, throttled, paused]


def idle_conditions(why: str) -> list[cond.ConditionUpdate]:
    """Conditions while autotune cannot run (`why`, a Cadence's idle: mode Off, or no Prometheus configured).

    The seed framework's conditions are judged from the same measurements, so they say why they cannot be judged
    rather than "NotYetObserved", which would read as "wait" on an object that will never be evaluated.
    """
    cause = "spec.autotune.mode is Off" if why == "AutotuneOff" else "spec.autotune.prometheus is not set"
    unjudged = f"judged from Prometheus measurements, which autotune does not take: {cause}"
    return [
        cond.ConditionUpdate(cond.METRICS_AVAILABLE, "Unknown", why, cause),
        cond.ConditionUpdate(cond.THROTTLED, "False", why, ""),
        cond.ConditionUpdate(cond.PAUSED, "False", why, ""),
        *(cond.ConditionUpdate(ctype, "Unknown", why, unjudged) for ctype in cond.FRAMEWORK_CONDITIONS),
    ]


def rollback_after_failed_rollout(
    status: Mapping[str, Any], state: PolicyState
) -> tuple[PolicyState, str | None, list[Event]]:
    """An autotune config that missed the rollout deadline goes back to the last good one, and automation halts."""
    degraded = cond.find(status.get("conditions", []) or [], cond.DEGRADED) or {}
    source = (status.get("effective") or {}).get("source")
    if degraded.get("status") != "True" or degraded.get("reason") != "RolloutFailed" or source != "autotune":
        return state, None, []
    state, last = revert_failed_rollout(state)
    if last is None:
        return state, None, []
    message = (
        f"the {last.action.value} rollout of {format_time(last.at)} missed its deadline; reverted to the previous "
        "config and halted automation (change the specpilot.dev/reevaluate annotation to resume)"
    )
    return state, message, [Event("Warning", "RolloutFailed", message)]


def evaluation_scopes(
    spec: v1alpha1.SpeculativeDeploymentSpec, *, name: str, namespace: str, status: Mapping[str, Any]
) -> tuple[Scope, Scope | None] | None:
    """What one evaluation measures: the pods of the running config, and the canary replica's (other mode, same
    Service, told apart by its config hash alone); None before a config has been rendered."""
    effective = status.get("effective") or {}
    effective_hash = effective.get("configHash")
    if running_intent(status, spec) is None or effective_hash is None:
        return None
    scope = Scope(namespace=namespace, deployment=name, config_hash=effective_hash)
    canary_hash = (effective.get("canary") or {}).get("configHash")
    return scope, scope.with_config_hash(str(canary_hash)) if canary_hash else None


def measurement_starts(status: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """How far back a window short of samples may reach (evaluate.Subject.since) for the running config's pods and
    for the one-pod slot: since the running config completed its rollout, and since the trial pod was first seen
    ready. While a trial runs, the incumbents' window stays within the trial's span too, so an analysis extended at
    low traffic compares both groups over the trial's own traffic. A slot outside a trial keeps the spec's window."""
    main = running_since(status.get("conditions", []) or [])
    trial = trials.running(status)
    ready = timestamps.parse_time(trial.ready_at) if trial is not None and trial.ready_at else None
    if ready is None:
        return main, None
    return (None if main is None else max(main, ready)), ready


def run_autotune(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    *,
    name: str,
    namespace: str,
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    deployment: ObservedDeployment | None,
    now: datetime,
    client: QueryClient,
) -> AutotuneOutcome:
    """Measure (Prometheus), then conclude (pure): status fields, condition updates and events."""
    scopes = evaluation_scopes(spec, name=name, namespace=namespace, status=status)
    if scopes is None:
        return AutotuneOutcome({}, [], [])
    scope, canary_scope = scopes
    main_since, slot_since = measurement_starts(status)
    measured = measure(spec, scope, client, now, since=main_since)
    canary = measure(spec, canary_scope, client, now, since=slot_since) if canary_scope else None
    return conclude(
        spec,
        annotations=annotations,
        status=status,
        deployment=deployment,
        measurements=measured,
        canary=canary,
        now=now,
        window=measured.window,
    )


def conclude(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    *,
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    deployment: ObservedDeployment | None,
    measurements: Mapping[str, Measurement],
    canary: Mapping[str, Measurement] | None,
    now: datetime,
    window: Window | None = None,
    fit: FitSettings | None = None,
) -> AutotuneOutcome:
    """One evaluation's measurements + the stored status -> decision, as status fields, conditions and events.

    `window`: the window the measurements were taken over (Measured.window); None: the spec's (effective_window).
    `fit`: the cost model and restart cost decisions price with; None: the spec's (fit_settings_for). The benchmark
    passes its own where it runs on a compressed clock.

    Pure: everything it reads is in its arguments, so the seam from stored status to the next render is tested
    with exactly what the API server stores.
    """
    token = annotations.get(v1alpha1.ANNOTATION_REEVALUATE)
    state, halted, events = _resume(status, token)
    current = running_intent(status, spec)
    if current is None:
        return AutotuneOutcome({}, [], [])
    in_progress, since = rollout_state(status, deployment)
    trial = trials.running(status)
    window = window or effective_window(spec.autotune)
    inputs = PolicyInputs(
        spec=spec,
        current=current,
        measurements=measurements,
        window=window,
        paused=annotations.get(v1alpha1.ANNOTATION_PAUSE, "").lower() == "true" or bool(halted),
        pause_reason=f"halted: {halted}" if halted else PAUSED_BY_ANNOTATION,
        reevaluate_token=token,
        last_handled_reevaluate=status.get("lastHandledReevaluate"),
        # a trial pod beside the incumbents is a rollout in progress: its outcome, not a new decision, comes next
        rollout_in_progress=in_progress or trial is not None,
        config_since=since,
        canary=None if trial is not None else canary,
        fit=fit or fit_settings_for(spec),
        promoted_trial=trials.promoted_span(status),
    )
    decision, state = decide(inputs, state, now)
    record, decision, state = _with_trial(spec, status, decision, state, (measurements, canary), now, events)
    actuations = list(status.get("actuations") or [])
    actuated = decision.actuate and not halted
    if actuated:
        state, actuations, started = _applied(spec, status, decision, state, current, measurements, now, events)
        record = started or record
    events.extend(Event(e.type, e.reason, e.message) for e in decision.events)
    quiet = actuated or inputs.paused or in_progress  # a candidate trial starts only when nothing else is under way
    turn = _CandidateTurn(current, measurements, quiet, now)
    record, candidates, state, tried = _candidate_turn(spec, status, record, state, turn, events)
    previous = list(status.get("conditions", []) or [])
    framework = _framework_turn(inputs, state, status, previous, now, events)
    fields: dict[str, Any] = {
        "observed": observed_fields(measurements, window.promql(), now),
        "recommendation": _recommendation(spec, decision, (measurements, canary), framework, now),
        "autotune": {**state.to_dict(), "framework": framework.stored},
        "actuations": [*actuations, *tried][-ACTUATION_HISTORY:],
        "autotuneHalt": {"reason": halted, "token": token} if halted else None,
    }
    if decision.handled_reevaluate is not None:
        fields["lastHandledReevaluate"] = decision.handled_reevaluate
    conditions = _conditions(state, previous, halted) + [f.update() for f in framework.verdicts]
    if candidates or status.get("candidates"):  # none left in the spec: none in status either
        fields["candidates"] = drafters.to_status(candidates)
    recommended = drafters.recommended(spec, candidates)
    if recommended is not None:
        fields["recommendation"]["drafter"] = recommended
    if record is not None:
        fields["trial"] = trials.to_status(record)
        conditions.append(trial_condition(record))
    return AutotuneOutcome(fields, conditions, events, actuated, decision.to_dict())


def _recommendation(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    decision: Decision,
    measured: tuple[Mapping[str, Measurement], Mapping[str, Measurement] | None],
    framework: _FrameworkTurn,
    now: datetime,
) -> dict[str, Any]:
    """status.recommendation: the decision with what it was made from, for people (never read back)."""
    measurements, canary = measured
    out: dict[str, Any] = {
        **decision.to_dict(),
        "mode": spec.autotune.mode.value,
        "at": format_time(now),
        "measurements": {str(k): m.to_dict() for k, m in measurements.items()},
        "canaryMeasurements": None if canary is None else {str(k): m.to_dict() for k, m in canary.items()},
    }
    if framework.findings:
        out["framework"] = [f.to_dict() for f in framework.findings]
    return out


def _resume(status: Mapping[str, Any], token: str | None) -> tuple[PolicyState, str | None, list[Event]]:
    """The stored state (a fresh one where status.autotune cannot be read), why automation is halted (None: it is
    not; a reevaluate token other than the halt's resumes it), and the events of reading them: a malformed state,
    the rollback of a failed rollout (which halts)."""
    state, malformed = PolicyState.from_status(status.get("autotune"))
    halt = status.get("autotuneHalt") or {}
    halted = halt.get("reason")
    if halted and token and token != halt.get("token"):
        halted = None  # a human asked for a fresh evaluation: resume
    state, rollback_message, events = rollback_after_failed_rollout(status, state)
    if malformed:
        events.insert(0, Event("Warning", "MalformedAutotuneStatus", f"{malformed}: starting from a fresh state"))
    if rollback_message:
        halted = rollback_message
    return state, halted, events


@dataclass(frozen=True)
class _FrameworkTurn:
    findings: list[framework_rules.Finding]  # this window's, as measured (status.recommendation.framework)
    verdicts: list[framework_rules.Finding]  # the conditions: an inconclusive window keeps the last verdict
    stored: Any  # status.autotune.framework


def _framework_turn(
    inputs: PolicyInputs,
    state: PolicyState,
    status: Mapping[str, Any],
    previous: list[Any],
    now: datetime,
    events: list[Event],
) -> _FrameworkTurn:
    """The seed framework's rules over this window, unless automation is paused (the stored record kept then)."""
    stored = status.get("autotune")
    framework = stored.get("framework") if isinstance(stored, Mapping) else None
    if inputs.paused:
        return _FrameworkTurn([], [], framework)
    findings, framework_state = framework_rules.assess(inputs, state.baseline, framework, previous, now)
    verdicts = framework_rules.keep_verdicts(findings, previous)
    events.extend(Event(*e) for e in framework_rules.events_for(verdicts, previous))
    return _FrameworkTurn(findings, verdicts, framework_state.to_dict())


def _action_events(action: str, reason: str) -> list[Event]:
    """The event an applied action posts (SpeculationDisabled, ...); none for an action without one, or for a trial
    label that names no autotune action."""
    kind = next((a for a in Action if a.value == action), None)
    name = ACTION_EVENT_REASONS.get(kind) if kind is not None else None
    if name is None:
        return []
    return [Event("Warning" if kind is Action.DISABLE else "Normal", name, reason)]


def _running_traffic(
    status: Mapping[str, Any], measurements: Mapping[str, Measurement]
) -> v1alpha1.MeasuredTraffic | None:
    """The traffic the pods of the running config (status.effective.configHash) measured this window."""
    running_hash = (status.get("effective") or {}).get("configHash")
    return traffic_of(measurements, str(running_hash)) if running_hash else None


def _with_trial(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    decision: Decision,
    state: PolicyState,
    measured: tuple[Mapping[str, Measurement], Mapping[str, Measurement] | None],
    now: datetime,
    events: list[Event],
) -> tuple[v1alpha1.TrialStatus | None, Decision, PolicyState]:
    """The trial record after this evaluation: a running trial advanced (the decision held meanwhile, as during any
    rollout), or the last one kept; an agreed change to a config its trial rolled back waits for retryAfter."""
    record = trials.read_trial(status)
    running = trials.running(status)
    if running is not None:
        record, state = _trial_turn(spec, status, running, state, measured[0], measured[1], now, events)
    elif record is not None and decision.actuate:
        traffic_now = _running_traffic(status, measured[0])
        if trials.blocks_retry(record, decision.target, now, traffic_now):
            gate = f"trial rolled back; not tried again before {record.retry_after} unless the traffic shifts"
            decision = replace(decision, actuate=False, gate=gate)
        elif shift := trials.reopened_by(record, decision.target, now, traffic_now):
            why = f"tried again before its retryAfter {record.retry_after}: the traffic shifted since its rollback"
            decision = replace(decision, reason=f"{decision.reason} ({why}, {shift})")
    return record, decision, state


@dataclass(frozen=True)
class _CandidateTurn:
    """What a candidate turn reads of this evaluation: the running config, the incumbent pods' measurements (their
    traffic), whether something else is under way, and the time."""

    current: SpeculationIntent
    measurements: Mapping[str, Measurement]
    quiet: bool
    now: datetime


def _candidate_turn(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    record: v1alpha1.TrialStatus | None,
    state: PolicyState,
    turn: _CandidateTurn,
    events: list[Event],
) -> tuple[v1alpha1.TrialStatus | None, list[v1alpha1.CandidateStatus], PolicyState, list[dict[str, Any]]]:
    """status.candidates after this evaluation: the verdict of a candidate trial that just ended (with the traffic it
    was measured on), then, where nothing else is under way (`quiet` is False, no trial running) and the budget
    allows, the next candidate's trial recorded: an Untried one, or a loser re-opened by a shift of the traffic.
    Returns the trial record, the candidates' records, the state and the status.actuations entry of a new trial."""
    current, now = turn.current, turn.now
    records = drafters.reconcile_records(spec, status.get("candidates"))
    before = trials.running(status)
    if before is not None and before.candidate_name is not None and record is not None:
        index = drafters.find(records, before.candidate_name)
        if index is not None and record.phase is not v1alpha1.TrialPhase.RUNNING:
            records[index] = _candidate_ended(records[index], record, spec, events)
    if turn.quiet or before is not None or (record is not None and record.phase is v1alpha1.TrialPhase.RUNNING):
        return record, records, state, []
    incumbent_hash = (status.get("effective") or {}).get("configHash")
    traffic_now = _running_traffic(status, turn.measurements)
    index = drafters.next_candidate(records, now, traffic_now) if drafters.untried_reason(spec) is None else None
    if index is None:
        return record, records, state, []
    candidate = spec.speculation.candidates[index]
    shift = traffic_shift(records[index].traffic, traffic_now)
    target = drafters.trial_intent(current, candidate)
    allowed, why = budget_check(state, spec.autotune.budget, current, target, now)
    if not allowed or not incumbent_hash:
        if records[index].verdict is v1alpha1.CandidateVerdict.UNTRIED and why:
            records[index] = records[index].model_copy(update={"reason": f"waiting for the actuation budget: {why}"})
        return record, records, state, []
    reason = f"candidate {candidate.name} ({candidate.drafter()}) on one pod beside the incumbent pods"
    if shift is not None:
        reason += f", re-opened: the traffic shifted since its verdict ({shift})"
    started = trials.start(
        intent=target,
        config_hash=trial_command(spec, target, candidate).config_hash,
        incumbent=current,
        incumbent_hash=str(incumbent_hash),
        action=Action.TRY_CANDIDATE.value,
        now=now,
        candidate_name=candidate.name,
        incumbent_tpot_before_ms=_ms(valid_value(turn.measurements, Signal.TPOT_MEAN)),
        traffic_before=traffic_now,
    )
    records[index] = drafters.trialling(records[index], now)
    state = record_candidate_trial(state, current, target, now, reason)
    events.append(Event("Normal", "TrialStarted", f"one pod first: {reason}"))
    entry = {
        "at": format_time(now),
        "action": Action.TRY_CANDIDATE.value,
        "mode": spec.autotune.mode.value,
        "from": intent_to_dict(current),
        "to": intent_to_dict(target),
        "reason": reason,
    }
    return started, records, state, [entry]


def _candidate_ended(
    record: v1alpha1.CandidateStatus, trial: v1alpha1.TrialStatus, spec: v1alpha1.SpeculativeDeploymentSpec,
    events: list[Event],
) -> v1alpha1.CandidateStatus:  # fmt: skip
    """A candidate's record once its trial ended: Untried again when abandoned, else its verdict (event
    Candidate<verdict>), with the traffic the trial ended on."""
    if trial.phase is v1alpha1.TrialPhase.ABANDONED:
        return record.model_copy(update={"verdict": v1alpha1.CandidateVerdict.UNTRIED, "reason": trial.reason})
    done = drafters.concluded(record, trial, spec.autotune.latency.regression_tolerance, trial.traffic)
    kind = "Warning" if done.verdict is v1alpha1.CandidateVerdict.LOST else "Normal"
    events.append(Event(kind, f"Candidate{done.verdict.value}", f"candidate {record.name}: {trial.reason}"))
    return done


@dataclass(frozen=True)
class _Running:
    """What the incumbent pods run when a change is applied, and what they measured in the window that decided it."""

    config: SpeculationIntent
    drafter: v1alpha1.SpeculationCandidate | None  # the promoted candidate drafter, which a trial pod keeps
    tpot_mean_s: float | None  # the yardstick from before a trial that must measure its gain (trial.measured_gain)
    traffic: v1alpha1.MeasuredTraffic | None  # the traffic that yardstick was measured on (trial.yardstick_before)


def _applied(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    decision: Decision,
    state: PolicyState,
    current: SpeculationIntent,
    measurements: Mapping[str, Measurement],
    now: datetime,
    events: list[Event],
) -> tuple[PolicyState, list[Any], v1alpha1.TrialStatus | None]:
    """An applied decision counted against the budget, appended to status.actuations (the newest
    ACTUATION_HISTORY kept) and announced; the state, the actuations and the trial it starts, if any."""
    state = record_actuation(state, decision, current, now, spec.autotune.budget)
    entry = actuation_entry(decision, current, now, spec.autotune.mode)
    actuations = [*(status.get("actuations") or []), entry][-ACTUATION_HISTORY:]
    promoted = desired_intent(spec, state).drafter
    traffic = _running_traffic(status, measurements)
    running = _Running(current, promoted, valid_value(measurements, Signal.TPOT_MEAN), traffic)
    return state, actuations, _announce_actuation(spec, status, decision, running, now, events)


def _announce_actuation(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    decision: Decision,
    running: _Running,
    now: datetime,
    events: list[Event],
) -> v1alpha1.TrialStatus | None:
    """An applied decision starts a one-pod trial where it can (TrialStarted; its action's event waits for the
    promotion), else goes to every pod at once with its action's event."""
    started = _start_trial(spec, status, decision, running, now)
    if started is not None:
        events.append(Event("Normal", "TrialStarted", f"one pod first: {decision.reason}"))
    else:
        events.extend(_action_events(decision.action.value, decision.reason))
    return started


def _start_trial(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    decision: Decision,
    running: _Running,
    now: datetime,
) -> v1alpha1.TrialStatus | None:
    """The record of a one-pod trial of the decision's target (run by the running promoted candidate drafter, if
    any), when the deployment can spare a pod (rollout.can_trial); None: the change goes to every pod at once, as
    before. The trial is labelled with the decision's action, which posts its own event when promoted."""
    incumbent_hash = (status.get("effective") or {}).get("configHash")
    trial_hash = rendered_hash(spec, decision.target, running.drafter)
    if not rollout.can_trial(spec) or not incumbent_hash or trial_hash is None:
        return None
    return trials.start(
        intent=decision.target,
        config_hash=trial_hash,
        incumbent=running.config,
        incumbent_hash=str(incumbent_hash),
        action=decision.action.value,
        now=now,
        experiment=decision.experiment,
        incumbent_tpot_before_ms=_ms(running.tpot_mean_s),
        traffic_before=running.traffic,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _trial_turn(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    status: Mapping[str, Any],
    trial: v1alpha1.TrialStatus,
    state: PolicyState,
    measurements: Mapping[str, Measurement],
    slot: Mapping[str, Measurement] | None,
    now: datetime,
    events: list[Event],
) -> tuple[v1alpha1.TrialStatus, PolicyState]:
    """One evaluation of a running trial: abandoned when its config is no longer wanted, else advanced (wait,
    analyse, promote or roll back). `slot` measures the one-pod slot (status.effective.canary's config hash)."""
    wanted = trials.may_run(spec, trial) and _still_wanted(spec, state, trial)
    incumbent_traffic = traffic_of(measurements, trial.incumbent_config_hash)
    if not wanted:
        step = trials.abandon(trial, now, "its config is no longer the one autotune wants (spec, mode or pin changed)")
    else:
        on_slot = (status.get("effective") or {}).get("canary") or {}
        ready = on_slot.get("configHash") == trial.config_hash and int(on_slot.get("readyReplicas") or 0) >= 1
        observation = trials.TrialObservation(
            candidate=trials.GroupFigures.of(slot if ready and slot is not None else {}),
            incumbent=trials.GroupFigures.of(measurements),
            incumbent_pods=int(status.get("readyReplicas") or 0),
            incumbent_traffic=incumbent_traffic,
        )
        step = trials.advance(trial, spec=spec, ready=ready, observation=observation, now=now)
    if step.ended is not None:
        step = replace(step, trial=step.trial.model_copy(update={"traffic": incumbent_traffic}))
    if step.event is not None:
        events.append(Event(*step.event))
    if step.ended is v1alpha1.TrialPhase.PROMOTED and trial.action:
        events.extend(_action_events(trial.action, f"promoted after a one-pod trial: {step.trial.reason}"))
    ended_unpromoted = step.ended in (v1alpha1.TrialPhase.ROLLED_BACK, v1alpha1.TrialPhase.ABANDONED)
    if ended_unpromoted and trial.candidate_name is None:
        state = _back_to_incumbent(state, trial, now)
    if step.ended is v1alpha1.TrialPhase.PROMOTED and trial.candidate_name is not None:
        # the winner runs on every pod: its drafter, with the config it was measured with
        state = replace(state, selected=trials.trial_intent(trial), drafter=trial.candidate_name, streak=None)
    return step.trial, state


def _still_wanted(spec: v1alpha1.SpeculativeDeploymentSpec, state: PolicyState, trial: v1alpha1.TrialStatus) -> bool:
    """Whether the config on trial is still wanted: autotune's choice for an autotune change; for a candidate
    drafter, the candidate still in the spec unchanged, and the incumbent still autotune's choice."""
    desired = desired_intent(spec, state).intent
    if trial.candidate_name is None:
        return desired == trials.trial_intent(trial)
    candidate = drafters.candidate_named(spec, trial.candidate_name)
    incumbent = trials.incumbent_intent(trial)
    if candidate is None or desired != incumbent:
        return False
    return drafters.trial_intent(incumbent, candidate) == trials.trial_intent(trial)


def _back_to_incumbent(state: PolicyState, trial: v1alpha1.TrialStatus, now: datetime) -> PolicyState:
    """Select the incumbent again after a trial ended without promotion. The trial's actuation stays in the budget
    (a pod was restarted for it). A trial that switched speculation on and lost leaves it off for the reason a plain
    canary would give: the plain pods were faster on the same traffic."""
    incumbent = trials.incumbent_intent(trial)
    if state.selected != trials.trial_intent(trial):
        return state  # autotune has moved on (the spec changed): nothing of the trial's is selected
    off = state.off
    if not incumbent.enabled and off is None:
        off = OffRecord(OffReason.CANARY, now, None, "a one-pod trial of speculation on was not faster")
    elif incumbent.enabled:
        off = None
    return replace(state, selected=incumbent, off=off, probe_started=None, streak=None)


def trial_condition(trial: v1alpha1.TrialStatus) -> cond.ConditionUpdate:
    """The Trial condition: True while a trial pod runs, False once it ended (the reason says how)."""
    reasons = {
        v1alpha1.TrialPhase.PROMOTED: "TrialPromoted",
        v1alpha1.TrialPhase.ROLLED_BACK: "TrialRolledBack",
        v1alpha1.TrialPhase.ABANDONED: "TrialAbandoned",
        v1alpha1.TrialPhase.RECOMMENDED: "TrialRecommended",
    }
    if trial.phase is v1alpha1.TrialPhase.RUNNING:
        reason = "TrialInconclusive" if trial.extended else "TrialStarted"
        message = (
            f"config {trial.config_hash} on one pod since {trial.started_at}; incumbent {trial.incumbent_config_hash}"
        )
        return cond.ConditionUpdate(cond.TRIAL, "True", reason, message)
    return cond.ConditionUpdate(cond.TRIAL, "False", reasons[trial.phase], trial.reason or "")


# Fields that say when an evaluation ran, not what it found.
EVALUATION_TIMESTAMPS = (("observed", "evaluatedAt"), ("recommendation", "at"))


def without_heartbeat(fields: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation that found exactly what status already says keeps the stored timestamps, so it writes nothing.

    No per-tick heartbeats: at a thousand idle deployments a heartbeat is a status write per object
    per interval, and every write wakes every watcher (Argo CD included). `evaluatedAt` then reads "the evaluation
    that last changed something"; the operator's metrics count every evaluation.
    """

    def timeless(key: str, value: Any) -> Any:
        value = _without_nulls(value)
        for outer, inner in EVALUATION_TIMESTAMPS:
            if key == outer and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != inner}
        return value

    if any(timeless(k, v) != timeless(k, status.get(k)) for k, v in fields.items()):
        return dict(fields)
    kept = dict(fields)
    for outer, inner in EVALUATION_TIMESTAMPS:
        stored = (status.get(outer) or {}).get(inner)
        if outer in kept and isinstance(kept[outer], Mapping) and stored is not None:
            kept[outer] = {**kept[outer], inner: stored}
    return kept


def _without_nulls(value: Any) -> Any:
    """As the API server stores it: a merge patch deletes null members."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def choose_intent(inputs: ReconcileInputs) -> ChosenIntent | None:
    """The configuration the reconcile renders for `inputs`: autotune's choice under the user's pins (desired_intent).

    The autotune status is this tick's evaluation, if one ran, else the stored one; a malformed record counts as
    empty (the evaluation reports it). None when the spec does not parse: the reconcile reports that itself.
    """
    try:
        spec = v1alpha1.parse_spec(dict(inputs.spec))
    except v1alpha1.InvalidSpec:
        return None
    state = PolicyState.from_status(inputs.autotune_fields.get("autotune", inputs.status.get("autotune")))[0]
    chosen = desired_intent(spec, state)
    chosen = replace(chosen, reason=state.actuations[-1].reason if state.actuations else None)
    trial = trials.running({"trial": inputs.autotune_fields.get("trial", inputs.status.get("trial"))})
    if trial is None:
        return chosen
    candidate = drafters.candidate_named(spec, trial.candidate_name)
    # An autotune change is selected for every pod while on trial; a candidate drafter's trial selects nothing.
    on_trial = trials.trial_intent(trial) if trial.candidate_name is None else trials.incumbent_intent(trial)
    if chosen.intent != on_trial or (trial.candidate_name is not None and candidate is None):
        return chosen
    # One pod first: the other pods keep the incumbent until the analysis promotes the trial. Where a trial may not
    # run (no pod to spare, a mode that runs no such trial), no pod runs it; the next evaluation abandons it.
    spare = trials.may_run(spec, trial)
    return replace(
        chosen,
        intent=trials.incumbent_intent(trial),
        trial=trials.trial_intent(trial) if spare else None,
        trial_candidate=(candidate or chosen.drafter) if spare else None,
    )
