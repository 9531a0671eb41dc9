"""The autotuner's decision: measurements + durable state -> what speculation config to run (pure).

`decide(inputs, state, now)` is deterministic: the same inputs, state and time give the same decision and new state.
The state is a plain JSON document kept in `status.autotune` (state.py), so it survives operator restarts.

`decide`, in the HPA's shape (the rules of docs/design/decisions.md):
1. Observation: a spec or deployment change resets what it invalidates (`_reset_on_spec_change`); mode Off and
   measurement Errors hold (4 in a row -> MetricsAvailable=False); a settled window is filed into the records
   (`_observe`) and the measured restart (`measured_restart_s`); pause, a rollout in flight or a config still
   settling hold (`_before_proposal`).
2. Proposal: what this one evaluation alone says (`proposals.propose`), from Valid measurements only, with minimum
   samples.
3. Agreement: the streak continues or starts, and its wait is priced (`_agree`, `_stabilization`).
4. Gates, in the fixed order of `GATES`: agreement (K consecutive evaluations spanning the stabilization window;
   a new `specpilot.dev/reevaluate` token counts as full agreement once), publish (mode Recommend), budget (min
   interval, per hour/day, longer after a reversal; kept in status: budget.py), backlog. The first that holds
   concludes; past all of them the shell actuates and then calls `record_actuation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from specpilot.api import rollout
from specpilot.api.durations import format_duration, parse_duration
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import (
    AutotuneMode,
    SpeculationConfig,
    SpeculationOverride,
    SpeculativeDeploymentSpec,
    spec_running,
)
from specpilot.autotune.model.baseline import (
    Mode,
    decay_load,
    entry_from_window,
    load_bucket,
    record,
    side_by_side,
)
from specpilot.autotune.model.forecast import RateSample, add_rate
from specpilot.autotune.model.rollcost import restart_cost_for, ttft_deadline_s
from specpilot.autotune.model.speed import (
    Speed,
)
from specpilot.autotune.model.stepcost import (
    k_for_batch,
)
from specpilot.autotune.model.stepfit import (
    add_sample,
    sample_from_window,
)
from specpilot.autotune.policy.agreement import (
    agree_by_effect,
    experiment_wait,
    keys_agree,
    shed_alike,
    sheds,
    stabilization_for,
    stabilized,
)
from specpilot.autotune.policy.backlog import (
    K0_TAX_GAIN,
    MEASURED_SPEED_GAIN,
    BacklogVerdict,
    QueueSeen,
    proposal_gain,
    restart_seconds_under_backlog,
    restart_under_backlog,
)
from specpilot.autotune.policy.budget import budget_check
from specpilot.autotune.policy.proposals import measured_speed, propose, saturation, window_evidence
from specpilot.autotune.policy.state import (
    FRESH_RECORDS,
    Action,
    ActuationRecord,
    Decision,
    PolicyEvent,
    PolicyInputs,
    PolicyState,
    Proposal,
    Streak,
    TrialSpan,
    deployment_fingerprint,
    spec_fingerprints,
)
from specpilot.autotune.policy.traffic import acceptance_for_fall, acceptance_seen_after
from specpilot.autotune.signals.measurements import Measurement, count_errors, valid_value
from specpilot.autotune.signals.promql import Signal
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import UnsupportedCombination, render_command
from specpilot.vllm.intent import (
    ChosenIntent,
    IntentSource,
    SpeculationIntent,
    complete_intent,
    intent_from_dict,
    intent_from_spec,
    schedule_from_list,
)

ERROR_LIMIT = 4  # Argo Rollouts' consecutiveErrorLimit default


def apply_overrides(spec: SpeculativeDeploymentSpec, intent: SpeculationIntent) -> SpeculationIntent:
    """User pins win over any autotune choice."""
    overrides = spec.autotune.overrides
    if overrides.speculation is SpeculationOverride.FORCE_OFF:
        intent = replace(intent, enabled=False)
    elif overrides.speculation is SpeculationOverride.FORCE_ON:
        intent = replace(intent, enabled=True)
    if overrides.pin_batch_threshold:
        intent = replace(
            intent, disable_above_batch_size=spec.speculation.disable_above_batch_size, batch_schedule=None
        )
    return intent


def desired_intent(spec: SpeculativeDeploymentSpec, state: PolicyState) -> ChosenIntent:
    """The one place that decides the config to render: autotune's choice (unless mode Off) under the user's pins.

    Autotune's choice counts only while the spec parts it was made for are unchanged: an edit of spec.speculation
    or the engine version wins at once, before the autotuner runs again (level-based). The choice is kept
    losslessly (K, threshold, schedule survive speculation off), and completed from the spec, so turning
    speculation on never renders without K.
    """
    _, intent_fingerprint = spec_fingerprints(spec)
    selected = state.selected
    if state.intent_fingerprint is not None and state.intent_fingerprint != intent_fingerprint:
        selected = None
    chosen = selected if selected is not None and spec.autotune.mode is not AutotuneMode.OFF else None
    base = complete_intent(chosen, spec) if chosen is not None else intent_from_spec(spec)
    intent = apply_overrides(spec, base)
    # a promoted candidate drafter runs with the config selected for it, so it counts only while that does
    drafter = next((c for c in spec.speculation.candidates if c.name == state.drafter), None) if chosen else None
    if intent != base:
        return ChosenIntent(intent, IntentSource.OVERRIDE, drafter=drafter)
    return ChosenIntent(intent, IntentSource.AUTOTUNE if chosen is not None else IntentSource.SPEC, drafter=drafter)


def running_intent(status: Mapping[str, Any], spec: SpeculativeDeploymentSpec) -> SpeculationIntent | None:
    """What the pods were rendered with: status.effective.intent, the lossless record the reconcile writes.

    A status written before that record existed has only the display fields, which drop K and the schedule while
    speculation is off; those are completed from the spec, so a re-enable never renders a bare speculative config.
    """
    effective = status.get("effective")
    if not effective:
        return None
    record = effective.get("intent")
    if record:
        try:
            return complete_intent(intent_from_dict(record), spec)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"status.effective.intent is malformed: {err}") from None
    try:
        schedule = schedule_from_list(effective.get("batchSchedule"))
    except (TypeError, ValueError) as err:
        raise ValueError(f"status.effective is malformed: {err}") from None
    legacy = SpeculationIntent(
        enabled=bool(effective.get("speculation")),
        num_speculative_tokens=effective.get("numSpeculativeTokens"),
        disable_above_batch_size=effective.get("disableAboveBatchSize"),
        batch_schedule=schedule,
    )
    return complete_intent(legacy, spec)


def revert_failed_rollout(state: PolicyState) -> tuple[PolicyState, ActuationRecord | None]:
    """After an autotune rollout missed its deadline: select the config it replaced (recorded losslessly), and after
    a candidate drafter's promotion, the drafter that ran before it."""
    if not state.actuations:
        return state, None
    last = state.actuations[-1]
    drafter = last.from_intent.get("drafter") if last.action is Action.TRY_CANDIDATE else state.drafter
    selected = intent_from_dict(last.from_intent)
    return replace(state, selected=selected, drafter=drafter, probe_started=None, streak=None), last


def _settled(inputs: PolicyInputs, now: datetime) -> tuple[bool, str]:
    """Metrics of a fresh config are trusted only after one full window plus two scrapes."""
    ready = inputs.trusted_from()
    if inputs.config_since is None or ready is None or now >= ready:
        return True, ""
    return False, (
        f"settling: config running since {format_time(inputs.config_since)}, metrics trusted from "
        f"{format_time(ready)} (window {inputs.window.promql()} + 2 scrape intervals)"
    )


def _observe(inputs: PolicyInputs, state: PolicyState, now: datetime) -> PolicyState:
    """File this window into the load histogram and the baseline record."""
    at = inputs.spec.autotune
    batch = valid_value(inputs.measurements, Signal.BATCH_SIZE)
    if batch is not None:
        interval = parse_duration(at.interval)
        elapsed = interval if state.load_updated is None else (now - state.load_updated).total_seconds()
        elapsed = min(max(elapsed, 0.0), 2 * interval)
        state = replace(
            state, load=decay_load(state.load, bucket=load_bucket(batch), elapsed_s=elapsed), load_updated=now
        )
    rate = valid_value(inputs.measurements, Signal.REQUEST_RATE)
    if rate is not None:
        filed = RateSample(now, rate, _in_engines(inputs.measurements))
        rates = add_rate(state.request_rates, filed, inputs.fit.horizon_s)
        state = replace(state, request_rates=rates)
    entry = entry_from_window(
        inputs.measurements,
        mode=Mode.ON if inputs.current.enabled else Mode.OFF,
        metric=at.latency.metric.value,
        min_requests=at.min_samples.requests,
        now=now,
    )
    acceptance = acceptance_for_fall(inputs.measurements, at.min_samples.requests)
    seen = acceptance_seen_after(state.acceptance_seen, inputs.current, acceptance, now)
    state = replace(state, acceptance_seen=seen)
    spacing = timedelta(seconds=inputs.window.seconds)
    if entry is not None:
        state = replace(state, baseline=record(state.baseline, entry, min_spacing=spacing, now=now))
    if state.step_sampled is None or now - state.step_sampled >= spacing:  # overlapping windows repeat data
        current = inputs.current
        max_k = current.num_speculative_tokens or 1
        sample = sample_from_window(
            inputs.measurements, speculating=current.enabled, k_at=lambda b: k_for_batch(current, b, max_k)
        )
        if sample is not None:
            state = replace(state, step_samples=add_sample(state.step_samples, sample), step_sampled=now)
    return state


def _in_engines(m: Mapping[str, Measurement]) -> float | None:
    """Requests running or waiting in the engines, every pod (forecast.outpacing); None without the running count."""
    running = valid_value(m, Signal.RUNNING_REQUESTS)
    return None if running is None else running + (valid_value(m, Signal.WAITING_REQUESTS) or 0.0)


def measured_restart_s(
    state: PolicyState,
    config_since: datetime | None,
    spec: SpeculativeDeploymentSpec,
    trial: TrialSpan | None = None,
) -> float | None:
    """What autotune's last restart cost: from its actuation to the rollout's completion, less the analysis of the
    trial it began with (`trial`, when that trial started at the actuation: its pod was serving, not restarting),
    divided by the rollout's waves (manifests.rollout_waves), so it is one pod's drain and restart. Only a completion
    within the rollout's budget (manifests.rollout_budget_seconds) after the actuation is its rollout; a later one is
    someone else's. The previous figure otherwise."""
    if not state.actuations or config_since is None:
        return state.restart_measured_s
    started = state.actuations[-1].at
    took = (config_since - started).total_seconds()
    if trial is not None and trial.started == started:
        took -= trial.analysed_s
    if not 0 < took <= manifests.rollout_budget_seconds(spec, spec.replicas):
        return state.restart_measured_s
    return took / max(1, manifests.rollout_waves(spec, spec.replicas))


def with_measured_restart(inputs: PolicyInputs, state: PolicyState) -> PolicyInputs:
    """The restart priced at this deployment's own measured restart once it has one (on its rollout path, rollcost);
    the profile's assumption before."""
    if state.restart_measured_s is None:
        return inputs
    cost = restart_cost_for(inputs.spec, state.restart_measured_s)
    return replace(inputs, fit=replace(inputs.fit, restart_cost_s=cost, restart_measured=True))


def _largest_gain_vs_anchor(proposal: Proposal) -> float | None:
    """The proposal's largest predicted difference from its streak's first proposal at any batch size where their K
    differ (schedule.plan_threshold's `vsAnchor`); None when not priced."""
    plan = proposal.priced.plan
    versus = None if plan is None else plan.vs_anchor
    return None if versus is None or versus.at_batch is None else versus.largest_gain


def _as_running(spec: SpeculativeDeploymentSpec, drafter: str | None) -> SpeculativeDeploymentSpec:
    """The spec as its pods run it: with the promoted candidate drafter `drafter` in place of the declared one."""
    candidate = next((c for c in spec.speculation.candidates if c.name == drafter), None)
    return spec if candidate is None else spec_running(spec, candidate)


def _reset_on_spec_change(state: PolicyState, spec: SpeculativeDeploymentSpec) -> PolicyState:
    """Level-based: a spec edit resets agreement, a change of what the intent derives from the choice, and a change
    of the deployment (deployment_fingerprint, of the drafter that runs: a promoted candidate's) every record learned
    from the previous one."""
    whole, intent = spec_fingerprints(spec)
    if state.spec_fingerprint is not None and state.spec_fingerprint != whole:
        state = replace(state, streak=None, last_recommendation=None)
    if state.intent_fingerprint is not None and state.intent_fingerprint != intent:
        state = replace(state, selected=None, drafter=None, off=None, probe_started=None)
    deployment = deployment_fingerprint(_as_running(spec, state.drafter))
    if state.deployment_fingerprint is not None and state.deployment_fingerprint != deployment:
        state = replace(state, **FRESH_RECORDS)
    return replace(state, spec_fingerprint=whole, intent_fingerprint=intent, deployment_fingerprint=deployment)


@dataclass
class _Round:
    """One evaluation on its way through the gates: the inputs, the events posted so far, and what a Decision about
    it carries whatever it concludes."""

    inputs: PolicyInputs
    now: datetime
    events: list[PolicyEvent] = field(default_factory=list)

    @property
    def fresh_token(self) -> bool:
        token = self.inputs.reevaluate_token
        return bool(token) and token != self.inputs.last_handled_reevaluate

    @property
    def handled(self) -> str | None:
        """The reevaluate token this evaluation consumes; a held one consumes it too, or a paused or settling object
        with a fresh token would look due, and query Prometheus, on every tick."""
        return self.inputs.reevaluate_token if self.fresh_token else None

    def value(self, signal: Signal) -> float | None:
        return valid_value(self.inputs.measurements, signal)

    def hold(self, reason: str, gate: str, state: PolicyState) -> tuple[Decision, PolicyState]:
        """Keep the running config before any proposal."""
        decision = Decision(
            Action.KEEP, self.inputs.current, reason, {}, Action.KEEP, False, gate, state.metrics_available,
            state.throttled, state.paused, batch=self.value(Signal.BATCH_SIZE), handled_reevaluate=self.handled,
            events=tuple(self.events),
        )  # fmt: skip
        return decision, state


@dataclass
class _Verdict:
    """A proposal and its evidence, concluded as a Decision by whichever gate ends the evaluation."""

    round: _Round
    proposal: Proposal
    evidence: dict[str, Any]

    def decision(self, state: PolicyState, *, actuate: bool, gate: str, throttled: bool) -> Decision:
        """The proposal itself, applied or held at `gate`."""
        return self._decision(state, self.proposal.action, self.proposal.target, self.proposal.reason, actuate=actuate,
                              gate=gate, throttled=throttled)  # fmt: skip

    def keep(self, state: PolicyState, reason: str, gate: str, throttled: bool) -> Decision:
        """The running config kept, the proposal still waiting."""
        r = self.round
        return self._decision(state, Action.KEEP, r.inputs.current, reason, actuate=False, gate=gate,
                              throttled=throttled)  # fmt: skip

    def _decision(
        self, state: PolicyState, action: Action, target: SpeculationIntent, reason: str, **kw: Any
    ) -> Decision:
        r, p = self.round, self.proposal
        return Decision(
            action, target, reason, self.evidence, proposal=p.action, metrics_available=state.metrics_available,
            paused=False, probe=p.probe, off_kind=p.off_kind, experiment=p.experiment,
            batch=r.value(Signal.BATCH_SIZE), request_rate=r.value(Signal.REQUEST_RATE),
            acceptance=r.value(Signal.ACCEPTANCE_RATE),
            handled_reevaluate=r.handled, events=tuple(r.events), **kw,
        )  # fmt: skip


Gate = Callable[[_Verdict, PolicyState, "_Wait"], tuple[Decision | None, PolicyState]]


def decide(inputs: PolicyInputs, state: PolicyState, now: datetime) -> tuple[Decision, PolicyState]:
    """One evaluation: the decision and the state to persist. Observation and the holds first (_before_proposal),
    then this window's proposal, then the named gates in a fixed order (GATES); the first that holds concludes."""
    state = _reset_on_spec_change(state, inputs.spec)
    r = _Round(inputs, now)
    held, state = _before_proposal(r, state)
    if held is not None:
        return held, state
    proposal = no_op_as_keep(r.inputs, propose(r.inputs, state, now, probe_now=r.fresh_token))
    at = inputs.spec.autotune
    history = side_by_side(state.baseline, metric=at.latency.metric.value, now=now)
    verdict = _Verdict(r, proposal, {**proposal.evidence, "history": history})
    if proposal.action is Action.KEEP:
        state = _note_recommendation(state, r.inputs, proposal, r.events, agreed=True)
        done = verdict.keep(state, proposal.reason, "", throttled=False)
        return done, replace(state, streak=None, throttled=False, backlog_since=None, backlog_dropped=None)
    wait, state = _agree(verdict, state)
    for gate in GATES:
        held, state = gate(verdict, state, wait)
        if held is not None:
            return held, state
    return verdict.decision(state, actuate=True, gate="", throttled=False), replace(state, throttled=False)


def _before_proposal(r: _Round, state: PolicyState) -> tuple[Decision | None, PolicyState]:
    """Mode Off, measurement errors, then the observation is filed (settled windows only), then pause, rollout in
    flight and settling hold. `r.inputs` leaves priced at the deployment's measured restart."""
    inputs, now = r.inputs, r.now
    if inputs.spec.autotune.mode is AutotuneMode.OFF:
        state = replace(state, streak=None, throttled=False)
        return r.hold("autotune mode is Off: the spec's config runs as written", "mode Off", state)
    errors = count_errors(inputs.measurements)
    if errors:
        return r.hold(*_count_errors(r, state, errors))
    if state.metrics_available is False:
        r.events.append(PolicyEvent("Normal", "MetricsRestored", "all measurements answered again"))
    state = replace(state, consecutive_errors=0, metrics_available=True)
    settled, settle_note = _settled(inputs, now)
    if settled and not inputs.rollout_in_progress:
        state = _observe(inputs, state, now)
        measured = measured_restart_s(state, inputs.config_since, inputs.spec, inputs.promoted_trial)
        state = replace(state, restart_measured_s=measured)
    r.inputs = with_measured_restart(inputs, state)
    state = _confirm_probe(r.inputs, state, now)
    if inputs.paused:
        if not state.paused:
            message = f"{inputs.pause_reason}: measuring only, no recommendation or change"
            r.events.append(PolicyEvent("Normal", "AutomationPaused", message))
        return r.hold(f"automation paused: {inputs.pause_reason}", "paused", replace(state, paused=True, streak=None))
    state = replace(state, paused=False)
    if inputs.rollout_in_progress:
        return r.hold("a rollout is in progress; deciding after it completes", "rollout in progress", state)
    if not settled:
        return r.hold(settle_note, "settling", replace(state, streak=None))
    return None, state


def _count_errors(r: _Round, state: PolicyState, errors: Sequence[Measurement]) -> tuple[str, str, PolicyState]:
    """Hold on any Error; the ERROR_LIMIT-th in a row sets MetricsAvailable=False, with one Warning."""
    n = state.consecutive_errors + 1
    available = False if n >= ERROR_LIMIT else state.metrics_available
    first = errors[0]
    message = f"{len(errors)} measurement error(s), {n} in a row: {first.name}: {first.detail}"
    if n >= ERROR_LIMIT and state.metrics_available is not False:
        r.events.append(PolicyEvent("Warning", "MetricsUnavailable", f"{message}; holding the current config"))
    state = replace(state, consecutive_errors=n, metrics_available=available)
    return f"{message} (limit {ERROR_LIMIT}); holding the current config", "metrics errors", state


def _confirm_probe(inputs: PolicyInputs, state: PolicyState, now: datetime) -> PolicyState:
    """A probe confirmed by acceptance at enableAbove, or by measured speed against plain: speculation stays."""
    if not inputs.current.enabled or state.probe_started is None:
        return state
    acceptance = valid_value(inputs.measurements, Signal.ACCEPTANCE_RATE)
    if (acceptance is not None and acceptance >= inputs.spec.autotune.acceptance.enable_above) or measured_speed(
        inputs, state, now
    ).outcome is Speed.FASTER:
        return replace(state, probe_started=None, off=None)
    return state


@dataclass(frozen=True)
class _Wait:
    """How long an agreed proposal waits: the stabilization span, and why it is shorter where it is."""

    window: timedelta
    shortened: bool  # priced by the change's own payback (agreement.stabilization_for)
    restart_s: float  # the restart as priced (under a hopeless backlog: the work it drops in time; 0 while free)
    gain: float
    gain_source: str
    free: bool = False  # the fit priced a rollout at the load now at no serving (ThresholdPlan.restart_free)
    trial: bool = False  # an experiment's: the length of the one-pod trial it starts (agreement.experiment_wait)

    @property
    def payback(self) -> bool:
        """Shortened to a payback, judged up to the next evaluation (agreement.stabilized); a trial's length is not."""
        return self.shortened and not self.trial

    @property
    def shortened_by(self) -> str:
        """What shortened the span, for the gate's words."""
        if self.free:
            return "a rollout costs no serving now"
        return "the one-pod trial's length" if self.trial else "the change's payback"


def _agree(v: _Verdict, state: PolicyState) -> tuple[_Wait, PolicyState]:
    """Continue or start the agreement streak (agreement.py) and price its wait; the evidence says both."""
    r, proposal = v.round, v.proposal
    at, streak = r.inputs.spec.autotune, state.streak
    key = proposal.key()
    max_num_seqs = r.inputs.spec.engine.max_num_seqs
    shed = sheds(r.inputs.current, proposal.target, max_num_seqs)
    agrees = streak is not None and keys_agree(streak.key, key)
    # the proposal continues the streak: the same decision, a shed like the anchor's (agreement by direction), or
    # the same action with boundaries (or bands) the cost model cannot tell from the anchor's (agreement.py)
    alike = streak is not None and not agrees and shed and shed_alike(streak.key, key, r.inputs.current, max_num_seqs)
    gain_vs_anchor = _largest_gain_vs_anchor(proposal)
    by_effect = (
        streak is not None
        and not agrees
        and not alike
        and agree_by_effect(streak.key, key, gain_vs_anchor, r.inputs.fit.min_gain)
    )
    wait = _stabilization(r, state, proposal, shed=shed, continues=agrees or alike or by_effect)
    needed = at.agreeing_evaluations
    interval = timedelta(seconds=parse_duration(at.interval))
    if r.fresh_token:
        streak = Streak(key, proposal.action, needed, r.now - wait.window)
    elif streak is not None and (agrees or by_effect):
        # the same decision; once agreed, the anchor follows the newest fit: the decision is made and waits only
        # for a gate (budget, backlog), so a boundary drifting a batch at a time must not restart the window
        agreed = streak.count >= needed and stabilized(r.now - streak.since, wait.window, priced=wait.payback,
                                                       interval=interval)  # fmt: skip
        streak = replace(streak, count=streak.count + 1, key=key if agreed else streak.key)
    elif streak is not None and alike:
        # another shed from the running config: the same decision in the safe direction, the newest applied
        streak = replace(streak, count=streak.count + 1, key=key, action=proposal.action)
    else:
        streak = Streak(key, proposal.action, 1, r.now, r.value(Signal.WAITING_REQUESTS))
    state = replace(state, streak=streak)
    v.evidence["agreement"] = _agreement_evidence(r, state, wait, by_effect=by_effect)
    return wait, state


def _stabilization(r: _Round, state: PolicyState, proposal: Proposal, *, shed: bool, continues: bool) -> _Wait:
    """A shed waits no longer than it takes to repay its restart (agreement.stabilization_for), priced by its own
    gain only (prices_its_own_gain) and, under a hopeless backlog, at the work the restart drops in time; while the
    fit priced a rollout at the load now at no serving, a shed has nothing to repay and waits only for its agreeing
    evaluations (acting wrongly costs no serving, and the one-pod trial bounds it). An experiment at saturation
    waits no longer than its one-pod trial takes (agreement.experiment_wait); one started by windows that contradict
    the profile keeps the span, in which more windows may make a model usable. A change toward more speculation
    keeps the span."""
    at, fit = r.inputs.spec.autotune, r.inputs.fit
    own = prices_its_own_gain(proposal)
    gain, source = proposal_gain(proposal.priced, 0.0, at_load=True) if own else (0.0, "")
    plan = proposal.priced.plan
    free = shed and plan is not None and plan.restart_free
    restart_s = 0.0 if free else fit.restart_cost_s
    if shed and own and not free:
        queue = queue_when_proposed(state.streak) if continues and not r.fresh_token else None
        under_backlog = restart_seconds_under_backlog(
            r.inputs.measurements, restart_cost_s=restart_s, ttft_deadline_s=ttft_deadline_s(at.latency),
            queue_before=queue, now=r.now, drain_s=fit.drain_s,
        )  # fmt: skip
        if under_backlog is not None and under_backlog < restart_s:
            restart_s = under_backlog
    span = timedelta(seconds=parse_duration(at.stabilization))
    if proposal.experiment and not free and saturation(r.inputs):
        trial = timedelta(seconds=fit.restart_cost_s) + rollout.analysis_span(r.inputs.spec)
        window, shortened = experiment_wait(span, trial)
        return _Wait(window, shortened, restart_s, gain, source, free, trial=shortened)
    window, shortened = stabilization_for(span, gain, restart_s) if shed else (span, False)
    return _Wait(window, shortened, restart_s, gain, source, free)


def _agreement_evidence(r: _Round, state: PolicyState, wait: _Wait, *, by_effect: bool) -> dict[str, Any]:
    """The streak and its wait, for people."""
    at, fit = r.inputs.spec.autotune, r.inputs.fit
    assert state.streak is not None
    out: dict[str, Any] = {"count": state.streak.count, "needed": at.agreeing_evaluations,
                           "since": format_time(state.streak.since), "stabilization": at.stabilization}  # fmt: skip
    if by_effect:
        out["byEffect"] = (
            f"boundaries past the tolerance of the streak's first proposal, but within {fit.min_gain:.0%} of it "
            "at every batch size (threshold.vsAnchor): the same decision"
        )
    if not wait.shortened:
        return out
    out["stabilizationShortenedTo"] = format_duration(wait.window.total_seconds())
    if wait.free:
        out["why"] = (
            "a rollout costs no serving at the load now (threshold.restartAtLoad): a shed has nothing to repay and "
            "waits only for its agreeing evaluations"
        )
        return out
    if wait.trial:
        out["why"] = (
            f"an experiment at saturation waits as long as its one-pod trial takes (restart "
            f"{fit.restart_cost_s:.0f}s and the analysis window): a saturation that lasts that long is measured by "
            "the trial, one that passes sooner is not"
        )
        return out
    priced = (
        f"restart {wait.restart_s:.0f}s"
        if wait.restart_s >= fit.restart_cost_s
        else f"restart (priced at {wait.restart_s:.1f}s of serving: the work it drops that can still meet the TTFT "
        f"deadline, backlog.restart_seconds_under_backlog; nominal {fit.restart_cost_s:.0f}s)"
    )
    out["why"] = (
        f"{priced} repaid by the change's {wait.gain:+.1%} ({wait.gain_source}) in "
        f"{format_duration(wait.window.total_seconds())}, sooner than the stabilization"
    )
    return out


def _agreement_gate(v: _Verdict, state: PolicyState, wait: _Wait) -> tuple[Decision | None, PolicyState]:
    """K consecutive agreeing evaluations spanning the stabilization window (as priced by _stabilization)."""
    r, at = v.round, v.round.inputs.spec.autotune
    assert state.streak is not None
    stable = r.now - state.streak.since
    interval = timedelta(seconds=parse_duration(at.interval))
    needed = at.agreeing_evaluations
    if state.streak.count >= needed and stabilized(stable, wait.window, priced=wait.payback, interval=interval):
        return None, state
    span = at.stabilization
    if wait.shortened:
        span = f"{format_duration(wait.window.total_seconds())} ({wait.shortened_by})"
    gate = (
        f"waiting for agreement: {state.streak.count}/{needed} evaluations, stable for "
        f"{format_duration(stable.total_seconds())} of {span}"
    )
    return v.keep(state, f"{v.proposal.reason}; {gate}", gate, throttled=state.throttled), state


def _publish_gate(v: _Verdict, state: PolicyState, wait: _Wait) -> tuple[Decision | None, PolicyState]:
    """Mode Recommend publishes the agreed proposal and applies nothing."""
    r = v.round
    if r.inputs.spec.autotune.mode is not AutotuneMode.RECOMMEND:
        return None, state
    state = _note_recommendation(state, r.inputs, v.proposal, r.events, agreed=True)
    gate = "mode Recommend: published, not applied"
    return v.decision(state, actuate=False, gate=gate, throttled=False), replace(state, throttled=False)


def _budget_gate(v: _Verdict, state: PolicyState, wait: _Wait) -> tuple[Decision | None, PolicyState]:
    """The actuation budget (budget_check); exhausted: Throttled, with one Warning."""
    r, p = v.round, v.proposal
    allowed, why = budget_check(state, r.inputs.spec.autotune.budget, r.inputs.current, p.target, r.now)
    if allowed:
        return None, state
    if not state.throttled:
        r.events.append(PolicyEvent("Warning", "ActuationThrottled", f"{p.action.value} held: {why}"))
    state = replace(state, throttled=True)
    return v.decision(state, actuate=False, gate=f"throttled: {why}", throttled=True), state


def _backlog_gate(v: _Verdict, state: PolicyState, wait: _Wait) -> tuple[Decision | None, PolicyState]:
    """A restart waits while requests queue until waiting has cost what it would drop (backlog_gate)."""
    backlog, state = backlog_gate(v.round.inputs, state, v.proposal, v.round.now)
    if backlog.dropped is not None:
        v.evidence["backlog"] = {"reason": backlog.reason, **backlog.evidence}
    if not backlog.hold:
        return None, state
    held = v.decision(state, actuate=False, gate=f"backlog: {backlog.reason}", throttled=False)
    return held, replace(state, throttled=False)


# The gates an agreed proposal passes, in this order; the first that holds concludes the evaluation.
GATES: tuple[Gate, ...] = (_agreement_gate, _publish_gate, _budget_gate, _backlog_gate)


def backlog_gate(
    inputs: PolicyInputs, state: PolicyState, proposal: Proposal, now: datetime
) -> tuple[BacklogVerdict, PolicyState]:
    """An agreed, budgeted restart waits while requests queue until waiting has cost what the restart would drop
    (backlog.py); the first deferral's time is kept in the state so the wait is bounded across evaluations. What it
    drops is priced at the queue's measured trend for a change with a gain of its own (prices_its_own_gain) and for
    an experiment, whose downside its own one-pod analysis bounds; otherwise at the queue draining at the completion
    rate, the assumption most in favour of holding."""
    gain, source = proposal_gain(proposal.priced, inputs.spec.autotune.latency.regression_tolerance)
    measured_trend = prices_its_own_gain(proposal) or proposal.experiment
    verdict = restart_under_backlog(
        inputs.measurements,
        restart_cost_s=inputs.fit.restart_cost_s,
        gain=gain,
        gain_source=source,
        deferred_since=state.backlog_since,
        now=now,
        horizon_s=inputs.fit.horizon_s,
        dropped_at_deferral=state.backlog_dropped,
        ttft_deadline_s=ttft_deadline_s(inputs.spec.autotune.latency),
        interval_s=parse_duration(inputs.spec.autotune.interval),
        queue_before=queue_when_proposed(state.streak) if measured_trend else None,
        drain_s=inputs.fit.drain_s,
    )
    if verdict.hold:
        first = state.backlog_since is None or state.backlog_dropped is None
        dropped = (None if verdict.dropped is None else round(verdict.dropped)) if first else state.backlog_dropped
        return verdict, replace(state, backlog_since=state.backlog_since or now, backlog_dropped=dropped)
    return verdict, replace(state, backlog_since=None, backlog_dropped=None)


def prices_its_own_gain(proposal: Proposal) -> bool:
    """Does the proposal carry a gain figure of its own change: a refit's predicted gain, or for a disable the measured
    speed against plain or the K = 0 tax? Only such a change gets a restart priced at the work it drops in time
    (backlog.restart_seconds_under_backlog, and the queue's trend in the backlog gate): past capacity that makes the
    restart nearly free, so the wait rests on the gain alone, and the gain of an acceptance-only disable is not its
    own (the schedule fit's predicted gain is a refit's; the gate's fallback, the regression tolerance, an
    assumption). Such a change keeps the nominal pricing (docs/design/decisions.md)."""
    gain, source = proposal_gain(proposal.priced, 0.0)
    if gain <= 0:
        return False
    if proposal.action is Action.DISABLE:
        return source in (MEASURED_SPEED_GAIN, K0_TAX_GAIN)
    return True


def queue_when_proposed(streak: Streak | None) -> QueueSeen | None:
    """The queue at the streak's first proposal, where it was measured: what the backlog's trend is measured from."""
    if streak is None or streak.waiting is None:
        return None
    return QueueSeen(streak.since, streak.waiting)


def rendered_hash(
    spec: SpeculativeDeploymentSpec, intent: SpeculationIntent, drafter: SpeculationConfig | None = None
) -> str | None:
    """The config hash the renderer gives this intent (with `drafter` in place of the declared one, if given); None
    when this vLLM version cannot render it."""
    try:
        return render_command(spec if drafter is None else spec_running(spec, drafter), intent).config_hash
    except UnsupportedCombination:
        return None


def no_op_as_keep(inputs: PolicyInputs, proposal: Proposal) -> Proposal:
    """A change whose rendered command line equals the running one restarts pods for nothing: keep instead.

    Compared by the renderer's config hash (a schedule the version compiles from the same threshold, a K = 0 range
    the engine would not see), so no budget is spent and no event posted for a change vLLM would not notice. A
    target this version cannot render at all is kept too, with the renderer's reason.
    """
    if proposal.action is Action.KEEP:
        return proposal
    try:
        target_hash = render_command(inputs.spec, proposal.target).config_hash
    except UnsupportedCombination as err:
        return Proposal(
            Action.KEEP,
            inputs.current,
            f"{proposal.action.value} not proposed: vLLM {inputs.spec.engine.version} cannot render it "
            f"({err.field}: {err})",
            proposal.evidence,
            priced=proposal.priced,
        )
    if target_hash == rendered_hash(inputs.spec, inputs.current):
        return Proposal(
            Action.KEEP,
            inputs.current,
            f"{proposal.action.value} not proposed: it renders the same vLLM command line as the running config "
            f"({target_hash}); {proposal.reason}",
            proposal.evidence,
            priced=proposal.priced,
        )
    return proposal


def _note_recommendation(
    state: PolicyState, inputs: PolicyInputs, proposal: Proposal, events: list[PolicyEvent], *, agreed: bool
) -> PolicyState:
    """Recommend mode posts RecommendationChanged when the published recommendation changes."""
    if inputs.spec.autotune.mode is not AutotuneMode.RECOMMEND or not agreed:
        return state
    key = proposal.key() if proposal.action is not Action.KEEP else Action.KEEP.value
    first_keep = state.last_recommendation is None and proposal.action is Action.KEEP
    changed = state.last_recommendation is None or not keys_agree(state.last_recommendation, key)
    if changed and not first_keep:
        events.append(PolicyEvent("Normal", "RecommendationChanged", f"{proposal.action.value}: {proposal.reason}"))
    return replace(state, last_recommendation=key if changed else state.last_recommendation)


def evaluate_alone(inputs: PolicyInputs, state: PolicyState, now: datetime) -> Decision:
    """The decision this evaluation alone supports, stabilization and budget aside (the `evaluate` dry run).

    Errors still hold (a decision on a failed query would be a guess), and mode Off still means nothing to do.
    """
    errors = count_errors(inputs.measurements)
    available = not errors
    if inputs.spec.autotune.mode is AutotuneMode.OFF or errors:
        reason = (
            "autotune mode is Off: the spec's config runs as written"
            if not errors
            else f"{len(errors)} measurement error(s): {errors[0].name}: {errors[0].detail}; holding"
        )
        return Decision(
            Action.KEEP,
            inputs.current,
            reason,
            window_evidence(inputs),
            Action.KEEP,
            False,
            "mode Off" if not errors else "metrics errors",
            available,
            False,
            False,
        )
    proposal = propose(inputs, state, now)
    return Decision(
        proposal.action,
        proposal.target,
        proposal.reason,
        proposal.evidence,
        proposal.action,
        actuate=False,
        gate="dry run: stabilization and budget not applied",
        metrics_available=True,
        throttled=False,
        paused=False,
        probe=proposal.probe,
        off_kind=proposal.off_kind,
        experiment=proposal.experiment,
        batch=valid_value(inputs.measurements, Signal.BATCH_SIZE),
    )
