"""What one evaluation alone says (`propose`): the proposal stage of `decide`, from Valid measurements only (pure).

Speculation on: the reasons to switch it off, in order (acceptance, a failed probe, a latency regression, measured
slower, a canary that hurts), then a refit of K per batch size, else keep. Acceptance never disables speculation on
its own when a usable model or a measured comparison says it is faster.

Re-enabling: with speculation off there are no acceptance counters, so "off" is left only on other
evidence: a canary replica that speculates on the same traffic; load back under the level where a load-driven
disable happened; the baseline record showing speculation was faster at this load; or a scheduled probe
(`probeInterval` after an autotune disable, at no higher load than the disable) that turns speculation on, counted
against the budget, and keeps it only if acceptance then clears `enableAbove`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specpilot.api import rollout
from specpilot.api.durations import format_duration, parse_duration
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import (
    SpeculationOverride,
    SpeculativeDeploymentSpec,
)
from specpilot.autotune.model.baseline import (
    BaselineSummary,
    CanaryOutcome,
    Mode,
    bucket_label,
    compare_canary,
    load_bucket,
    summary,
)
from specpilot.autotune.model.forecast import (
    RateSample,
    outpacing,
    projected_ratios,
    projection_ahead_s,
    recent_peak_ratio,
    rising_trend,
)
from specpilot.autotune.model.k0tax import DrafterMemory, drafter_kv_gain, kv_bound
from specpilot.autotune.model.schedule import (
    FitSettings,
    Forecast,
    ThresholdPlan,
    ThresholdSupport,
    fit_support,
    model_consistency,
    payback_seconds,
    plan_threshold,
)
from specpilot.autotune.model.speed import (
    FASTER_MARGIN,
    PlainReference,
    Speed,
    SpeedVerdict,
    comparable_batches,
    compare_speed,
)
from specpilot.autotune.model.stepcost import (
    DRAFTER_BY_METHOD,
    AcceptanceProfile,
    Drafter,
    StepCostModel,
    k_for_batch,
    model_for_method,
    profile_from_positions,
    profile_geometric,
    speedup,
    with_context_length,
    with_emission,
    with_output_length,
    with_prefill,
)
from specpilot.autotune.model.stepfit import (
    MIN_BUCKETS,
    MIN_SAMPLES,
    StepFit,
    fit_step_cost,
    mean_context_tokens,
    mean_output_tokens,
    prefill_tokens_per_step,
)
from specpilot.autotune.policy.agreement import (
    anchor_intent,
)
from specpilot.autotune.policy.backlog import (
    BACKLOG_WAITING,
    Priced,
)
from specpilot.autotune.policy.state import (
    BASELINE_MAX_AGE,
    Action,
    OffReason,
    OffRecord,
    PolicyInputs,
    PolicyState,
    Proposal,
    refit_action,
)
from specpilot.autotune.policy.traffic import acceptance_fell, acceptance_for_fall
from specpilot.autotune.signals.measurements import Measurement, positions, valid_value, why_not_valid
from specpilot.autotune.signals.promql import LATENCY_SIGNALS, Signal
from specpilot.autotune.signals.reach import correct_positions
from specpilot.planning.plan import plan_memory
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import threshold_support_for
from specpilot.vllm.intent import (
    SpeculationIntent,
    complete_intent,
    intent_to_dict,
)
from specpilot.vllm.versions import VllmVersion

MISREAD_ACCEPTANCE_MARGIN = 0.1  # a speed record counts for the acceptance of a disable up to 10% above it


def probe_deadline(spec: SpeculativeDeploymentSpec) -> timedelta:
    """How long a probe may run without acceptance evidence before it counts as failed.

    The rollout itself (every wave of pods: manifests.rollout_budget_seconds), then the metrics settling (one window
    and two scrapes), then enough evaluations to agree (agreeingEvaluations x interval, at least the stabilization
    window), twice over, so a probe under thin traffic is not cut short, yet never stays on forever without evidence.
    """
    at = spec.autotune
    rollout = manifests.rollout_budget_seconds(spec, spec.replicas)
    settle = parse_duration(at.window) + 2 * parse_duration(at.scrape_interval)
    agree = max(at.agreeing_evaluations * parse_duration(at.interval), parse_duration(at.stabilization))
    return timedelta(seconds=rollout + 2 * (settle + agree))


def _count(value: float | None) -> str:
    if value is None:
        return "?"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}"


EVIDENCE_SIGNALS = (
    Signal.ACCEPTANCE_RATE,
    Signal.MEAN_ACCEPTANCE_LENGTH,
    Signal.ACCEPTANCE_BY_POSITION,
    Signal.DRAFT_TOKENS_IN_WINDOW,
    Signal.REQUESTS_IN_WINDOW,
    Signal.BATCH_SIZE,
    Signal.TPOT_MEAN,
)


def window_evidence(inputs: PolicyInputs) -> dict[str, Any]:
    metric = inputs.spec.autotune.latency.metric.value
    signals = (*EVIDENCE_SIGNALS, *LATENCY_SIGNALS[metric])
    return {
        "window": inputs.window.promql(),
        **({"windowNote": inputs.window.note} if inputs.window.note else {}),
        "current": intent_to_dict(inputs.current),
        "measurements": {
            s.value: {k: v for k, v in inputs.measurements[s].to_dict().items() if k != "detail" or v}
            for s in signals
            if s in inputs.measurements
        },
    }


def propose(inputs: PolicyInputs, state: PolicyState, now: datetime, *, probe_now: bool = False) -> Proposal:
    """What this evaluation alone says; Valid measurements only, and the state for history (read-only).

    `probe_now` lets a one-shot reevaluate token start a due-or-not probe.
    """
    inputs = with_measured_context(inputs)
    evidence = window_evidence(inputs)
    filed = _Filed()
    if inputs.current.enabled:
        proposal = _propose_while_on(inputs, state, now, evidence, filed)
    else:
        proposal = _propose_while_off(inputs, state, now, evidence, filed, probe_now=probe_now)
    return replace(proposal, priced=Priced(filed.speed, filed.plan))


@dataclass
class _Filed:
    """The speed verdict and the schedule fit filed in one evaluation's evidence, as they are filed (the newest
    wins): the proposal's `priced`, so no code reads the evidence back."""

    speed: SpeedVerdict | None = None
    plan: ThresholdPlan | None = None


def with_measured_context(inputs: PolicyInputs) -> PolicyInputs:
    """The cost model priced at this window's measured prompt lengths, for every use below (the consistency check,
    the speed prediction, the fit and the K = 0 comparison): the mean context of the KV reads
    (stepfit.mean_context_tokens) instead of the profile's assumed one, and the prompt tokens chunked into each
    step (stepfit.prefill_tokens_per_step) at the running config's measured step time (mean TPOT x tokens per step).
    Unchanged when the window has no Valid mean prompt length."""
    m = inputs.measurements
    model = with_context_length(inputs.fit.model, mean_context_tokens(m))
    tpot = valid_value(m, Signal.TPOT_MEAN)
    per_step = valid_value(m, Signal.MEAN_ACCEPTANCE_LENGTH) if inputs.current.enabled else 1.0
    batch = valid_value(m, Signal.BATCH_SIZE)
    if tpot is not None and per_step is not None and batch is not None:
        prefill = prefill_tokens_per_step(m, tpot * 1000 * per_step)
        prompt = valid_value(m, Signal.MEAN_PROMPT_TOKENS)
        b = max(1, round(batch))
        k = k_for_batch(inputs.current, b, inputs.current.num_speculative_tokens or 0)
        model = with_prefill(model, prefill, b, k, prompt)
    return inputs if model is inputs.fit.model else replace(inputs, fit=replace(inputs.fit, model=model))


def _keep(inputs: PolicyInputs, reason: str, evidence: dict[str, Any]) -> Proposal:
    return Proposal(Action.KEEP, inputs.current, reason, evidence)


def _propose_while_on(
    inputs: PolicyInputs, state: PolicyState, now: datetime, evidence: dict[str, Any], filed: _Filed
) -> Proposal:
    """Speculation on: the reasons to switch it off, in order (unless pinned on), then a refit, else keep."""
    speed = measured_speed(inputs, state, now)
    evidence["speed"] = {"outcome": speed.outcome.value, "reason": speed.reason, **speed.evidence}
    filed.speed = speed
    drafted = _Drafted.of(inputs)
    if inputs.spec.autotune.overrides.speculation is not SpeculationOverride.FORCE_ON:
        off = _reason_to_switch_off(inputs, state, now, speed, drafted, evidence, filed)
        if off is not None:
            return off
    return _refit_or_keep(inputs, state, now, speed, drafted, evidence, filed)


@dataclass(frozen=True)
class _Drafted:
    """This window's acceptance and the draft tokens behind it, as the reasons quote them."""

    acceptance: float | None
    tokens: str  # draft tokens in the window (_count)
    window: str  # the window, as PromQL

    @classmethod
    def of(cls, inputs: PolicyInputs) -> _Drafted:
        m = inputs.measurements
        tokens = _count(valid_value(m, Signal.DRAFT_TOKENS_IN_WINDOW))
        return cls(valid_value(m, Signal.ACCEPTANCE_RATE), tokens, inputs.window.promql())

    def against(self, below: float) -> str:
        """The acceptance against disableBelow; only for a measured acceptance."""
        assert self.acceptance is not None
        relation = "<" if self.acceptance < below else ">="
        return (
            f"acceptance {self.acceptance:.2f} {relation} disableBelow {below:.2f} over {self.window}, "
            f"{self.tokens} draft tokens"
        )


def _reason_to_switch_off(
    inputs: PolicyInputs, state: PolicyState, now: datetime, speed: SpeedVerdict, drafted: _Drafted,
    evidence: dict[str, Any], filed: _Filed,
) -> Proposal | None:  # fmt: skip
    """The first of: acceptance below disableBelow (unless measured faster), a probe that did not reach enableAbove
    or found no evidence by its deadline, a latency regression, measured slower, a canary that hurts."""
    at = inputs.spec.autotune
    m = inputs.measurements
    acceptance = drafted.acceptance
    below, above = at.acceptance.disable_below, at.acceptance.enable_above
    off_target = inputs.current.without_speculation()
    faster = speed.outcome is Speed.FASTER
    if acceptance is not None and acceptance < below and not faster:
        reason = drafted.against(below)
        if speed.known:
            return Proposal(
                Action.DISABLE, off_target, f"{reason}; {speed.reason}", evidence, off_kind=OffReason.ACCEPTANCE
            )
        return _below_disable_without_comparison(inputs, state, now, reason, speed, evidence, filed)
    if state.probe_started is not None and acceptance is not None and acceptance < above and not faster:
        reason = (
            f"probe since {format_time(state.probe_started)}: acceptance {acceptance:.2f} did not reach "
            f"enableAbove {above:.2f} over {drafted.window}, {drafted.tokens} draft tokens"
        )
        return Proposal(Action.DISABLE, off_target, reason, evidence, off_kind=OffReason.ACCEPTANCE)
    deadline = probe_deadline(inputs.spec)
    if state.probe_started is not None:
        evidence["probe"] = {
            "started": format_time(state.probe_started),
            "deadline": format_time(state.probe_started + deadline),
        }
    if state.probe_started is not None and acceptance is None and now - state.probe_started > deadline:
        reason = (
            f"probe since {format_time(state.probe_started)} found no acceptance evidence within "
            f"{format_duration(deadline.total_seconds())} ({why_not_valid(m, Signal.ACCEPTANCE_RATE)})"
        )
        return Proposal(Action.DISABLE, off_target, reason, evidence, off_kind=OffReason.ACCEPTANCE)
    regression, regression_evidence = _latency_regression(inputs, state, now)
    evidence["baseline"] = regression_evidence
    if regression or speed.outcome is Speed.SLOWER:  # slower than plain, by P99 or by measured speed
        kind = OffReason.LOAD if acceptance is not None and acceptance >= below else OffReason.ACCEPTANCE
        tail = f", acceptance {acceptance:.2f}" if acceptance is not None else ""
        return Proposal(Action.DISABLE, off_target, f"{regression or speed.reason}{tail}", evidence, off_kind=kind)
    if inputs.canary is not None:
        verdict = compare_canary(
            m, inputs.canary, metric=at.latency.metric.value, tolerance=at.latency.regression_tolerance,
            enable_above=above,
        )  # fmt: skip
        evidence["canary"] = {"outcome": verdict.outcome.value, "reason": verdict.reason, **verdict.evidence}
        if verdict.outcome is CanaryOutcome.HURTS:
            return Proposal(
                Action.DISABLE, off_target, f"canary: {verdict.reason}", evidence, off_kind=OffReason.CANARY
            )
    return None


def _refit_or_keep(
    inputs: PolicyInputs, state: PolicyState, now: datetime, speed: SpeedVerdict, drafted: _Drafted,
    evidence: dict[str, Any], filed: _Filed,
) -> Proposal:  # fmt: skip
    """No reason to switch off: a K = 0 window's proposal while acceptance is unknown, else the fit's refit (or the
    K = 0 tax's disable), else keep, with the acceptance summary."""
    at = inputs.spec.autotune
    m = inputs.measurements
    acceptance = drafted.acceptance
    below = at.acceptance.disable_below
    off_target = inputs.current.without_speculation()
    batch = valid_value(m, Signal.BATCH_SIZE)
    if acceptance is None:
        at_k0 = _k0_window_proposal(inputs, state, now, batch, off_target, evidence, filed)
        if at_k0 is not None:
            return at_k0
        return _keep(inputs, f"holding: {why_not_valid(m, Signal.ACCEPTANCE_RATE)}", evidence)
    summary_text = drafted.against(below)
    if acceptance < below and speed.outcome is Speed.FASTER:  # kept only because measured faster (or pinned on)
        summary_text += f", kept: {speed.reason} (acceptance is a warning here, not the trigger)"
    if batch is not None:
        summary_text += f", batch {batch:.1f} per engine"
    plan = _fit_plan(inputs, state, now, acceptance, batch, evidence, filed, usable_step_model(inputs, state))
    if plan is not None:
        if plan.disable and at.overrides.speculation is not SpeculationOverride.FORCE_ON:
            return Proposal(Action.DISABLE, off_target, plan.reason, evidence, off_kind=OffReason.LOAD)
        if plan.proposed is not None:
            return Proposal(refit_action(plan.support), plan.proposed, plan.reason, evidence)
        summary_text += f"; threshold unchanged: {plan.reason}"
    return _keep(inputs, summary_text, evidence)


def _below_disable_without_comparison(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    reason: str,
    speed: SpeedVerdict,
    evidence: dict[str, Any],
    filed: _Filed,
) -> Proposal:
    """Acceptance below disableBelow, no measured speed comparison: a refit the fit prices above both the running
    config and off, else whatever the model and the hardware-free bound support (_acceptance_only)."""
    acceptance = valid_value(inputs.measurements, Signal.ACCEPTANCE_RATE)
    batch = valid_value(inputs.measurements, Signal.BATCH_SIZE)
    assert acceptance is not None
    step_model = usable_step_model(inputs, state)
    predicted, prediction = _predicted_speedup(inputs, step_model, acceptance, batch)
    evidence["predictedSpeed"] = {
        "speedup": None if predicted is None else round(predicted, 3),
        "note": prediction,
    }
    missing = speed.missing or speed.reason
    plan = _fit_plan(inputs, state, now, acceptance, batch, evidence, filed, step_model)
    if plan is not None and plan.proposed is not None and _fit_beats_off(plan):
        reason = (
            f"{reason}, but there is no measured speed comparison yet ({missing}) and the cost model, "
            f"consistent with the measured TPOT, prices a refit above both the running config and speculation "
            f"off: {plan.reason}"
        )
        return Proposal(refit_action(plan.support), plan.proposed, reason, evidence)
    doubt = saturation(inputs) or _prior_contradicted(inputs, step_model) or _acceptance_fell(inputs, state, step_model)
    return _acceptance_only(inputs, reason, (predicted, prediction), missing, evidence, plan, doubt)


def _acceptance_only(
    inputs: PolicyInputs,
    reason: str,
    model_says: tuple[float | None, str],
    missing: str,
    evidence: dict[str, Any],
    plan: ThresholdPlan | None,
    doubt: str,
) -> Proposal:
    """Acceptance below disableBelow without a measured speed comparison: acceptance alone never switches speculation
    off. Where the drafts add so few tokens per step that no hardware makes speculation measurably faster
    (_speedup_ceiling), the disable acts. A usable cost model that prices speculation slower than plain supports the
    disable. With no usable model and a `doubt` (saturation, _prior_contradicted, _acceptance_fell), the disable is an
    experiment on one pod where one can be spared. Otherwise the config holds, with acceptance as a warning in the
    reason: under adaptive verification (which lowers acceptance by design), where a usable model prices speculation no
    slower than plain, and where there is no usable model and no doubt (too few requests for a mean TPOT, a small
    batch). `model_says`: the speed-up over plain a usable model predicts (None without one) and why
    (_predicted_speedup)."""
    predicted, prediction = model_says
    off_target = inputs.current.without_speculation()
    ceiling = _speedup_ceiling(inputs)
    if ceiling is not None and ceiling < 1 + FASTER_MARGIN:
        return Proposal(
            Action.DISABLE,
            off_target,
            f"{reason}: {ceiling:.3f} tokens per step, so on any hardware speculation is at most {ceiling - 1:.1%} "
            f"faster than plain, within the noise margin {FASTER_MARGIN:.0%}",
            evidence,
            off_kind=OffReason.ACCEPTANCE,
        )
    if inputs.spec.speculation.adaptive_verification:
        why = "adaptive verification lowers acceptance by design"
    elif predicted is None and rollout.can_trial(inputs.spec) and doubt:
        return _experiment(inputs, off_target, f"{reason} {doubt}, no measured speed comparison yet ({missing})",
                           evidence)  # fmt: skip
    elif predicted is None:
        why = f"no usable cost model ({prediction})"
    elif predicted >= 1.0:
        why = prediction
    elif unpaid := _disable_unpaid(plan, predicted, inputs.fit.horizon_s):
        why = f"{prediction}, {unpaid}"
    else:
        return Proposal(Action.DISABLE, off_target, f"{reason}; {prediction}", evidence, off_kind=OffReason.ACCEPTANCE)
    return _keep(
        inputs,
        f"holding: {reason}, but there is no measured speed comparison yet ({missing}) and {why}; acceptance alone "
        "never switches speculation off",
        evidence,
    )


def _disable_unpaid(plan: ThresholdPlan | None, predicted: float, horizon_s: float) -> str | None:
    """Why a disable the cost model prices faster than the running config (1 / predicted - 1) does not repay its
    rollout at the load now within the horizon; None where it does or the fit did not price the rollout. Near
    capacity a wave queues arrivals past their TTFT deadline (RestartAtLoad.cost_s): a few percent faster does not
    repay that."""
    if plan is None or plan.off_cost_s is None:
        return None
    gain = 1 / predicted - 1
    payback = payback_seconds(gain, plan.off_cost_s)
    if payback <= horizon_s:
        return None
    if math.isinf(plan.off_cost_s):
        return "but at this load speculation off could not drain the queue its rollout builds"
    return (
        f"but at this load its rollout costs {plan.off_cost_s:.0f}s of serving, which {gain:+.1%} does not repay "
        f"within {horizon_s / 60:.0f}m"
    )


# The share of max_num_seqs from which a running batch is saturation: the engine admits no more (saturation).
SATURATED_BATCH_SHARE = 0.9


def saturation(inputs: PolicyInputs) -> str:
    """The model-free evidence that the engine runs at its limit, where speculation loses (each verify step is
    compute-bound and the drafts cost batch slots): requests waiting on average over the window (BACKLOG_WAITING,
    the backlog gate's own floor), or a running batch at SATURATED_BATCH_SHARE of max_num_seqs. Empty where neither:
    at a small batch, on hardware its profile describes, speculation is in the regime where it pays, and an experiment
    would cost two restarts of a pod for little (_prior_contradicted is the other doubt)."""
    m = inputs.measurements
    waiting = valid_value(m, Signal.WAITING_REQUESTS)
    batch = valid_value(m, Signal.BATCH_SIZE)
    limit = inputs.spec.engine.max_num_seqs
    if waiting is not None and waiting >= BACKLOG_WAITING:
        return f"at saturation ({waiting:.0f} requests waiting on average)"
    if batch is not None and batch >= SATURATED_BATCH_SHARE * limit:
        return f"at saturation (batch {batch:.0f} of max_num_seqs {limit})"
    return ""


def _prior_contradicted(inputs: PolicyInputs, step_model: StepModel) -> str:
    """The deployment's own windows contradict its only cost profile: a profile of another set-up (an unknown GPU),
    and its fit refused on windows enough for one (out of range, or too poor). The hardware is then not what any
    model here describes, and the rule that speculation pays at a small batch is the prior's too: on a GPU whose
    roofline ridge is lower, a K that pays on the prior's GPU can lose at a moderate batch. Empty otherwise: a
    calibrated profile, no fit tried yet (too few windows), or a fit that is used."""
    fit = step_model.fit
    if inputs.fit.calibrated or step_model.model is not None or fit.too_thin:
        return ""
    return f"on hardware its profile does not describe ({fit.note})"


def _acceptance_fell(inputs: PolicyInputs, state: PolicyState, step_model: StepModel) -> str:
    """On a GPU without a calibrated profile and with no usable model, the running config's acceptance fell by
    traffic.ACCEPTANCE_SHIFT or more since its first window. What held the config there is the prior's claim that
    speculation pays at this batch, a claim about another GPU, made at the acceptance the config had: each draft now
    adds fewer tokens, and on a GPU whose roofline ridge is unknown that can turn a win into a loss at the same batch.
    Empty otherwise: a calibrated profile or a usable fit prices the fall itself."""
    if inputs.fit.calibrated or step_model.model is not None:
        return ""
    acceptance = acceptance_for_fall(inputs.measurements, inputs.spec.autotune.min_samples.requests)
    fell = acceptance_fell(state.acceptance_seen, inputs.current, acceptance)
    if fell is None:
        return ""
    return (
        f"after a fall from {fell.rate:.2f} in this config's first window ({format_time(fell.at)}), on hardware "
        "its profile does not describe"
    )


def _experiment(inputs: PolicyInputs, off_target: SpeculationIntent, doubt: str, evidence: dict[str, Any]) -> Proposal:
    """Neither a usable cost model nor a measured comparison can say whether speculation pays, and acceptance and
    `doubt` (saturation, windows the only profile cannot explain, or a fall in acceptance there) say it may not: measure
    instead of guessing. Plain goes to one pod beside the speculating ones on the same traffic (a one-pod trial), and is
    promoted only when that pod is measured faster beyond the tolerance; otherwise the trial rolls back and is not tried
    again before probeInterval. Only where a pod can be spared (rollout.can_trial): elsewhere the config holds, as
    acceptance alone never switches speculation off. An experiment started by saturation measures plain at that load
    only (OffReason.SATURATION): speculation comes back once the request rate falls below the one it was measured at, as
    after a disable for load; its probe is not gated on the rate, which past capacity, or with clients that wait for
    each answer, is moved by the config itself."""
    reason = (
        f"experiment: {doubt} and no usable cost model; measuring plain on one pod beside the speculating ones, "
        f"kept only if faster beyond {inputs.spec.autotune.latency.regression_tolerance:.0%}"
    )
    kind = OffReason.SATURATION if saturation(inputs) else OffReason.CANARY
    return Proposal(Action.DISABLE, off_target, reason, evidence, off_kind=kind, experiment=True)


@dataclass(frozen=True)
class StepModel:
    """The step-cost model decisions may price with, and the deployment's own fit it came from or fell back from."""

    model: StepCostModel | None  # None: none is usable, and nothing is priced
    fit: StepFit
    note: str


def usable_step_model(inputs: PolicyInputs, state: PolicyState) -> StepModel:
    """The fit of the deployment's own settled windows when its error on them is small (stepfit.MAX_ERROR), else the
    profile calibrated on this set-up. A profile of another set-up (an unknown GPU, another size) is only the fit's
    prior: its shape is not this deployment's (its roofline ridge is fitted too where its own is refused), so until
    its own windows fit, nothing is priced with it."""
    prior = inputs.fit.model
    method = inputs.spec.speculation.method.value
    fit = fit_step_cost(state.step_samples, model_for_method(prior, method), fit_ridge=not inputs.fit.calibrated)
    if fit.model is not None:
        return StepModel(fit.model, fit, f"the deployment's own fit ({fit.note})")
    if inputs.fit.calibrated:
        return StepModel(prior, fit, f"profile {prior.name}, calibrated on this set-up (its own fit: {fit.note})")
    own = (
        f"its own fit needs {MIN_SAMPLES} settled windows over {MIN_BUCKETS} load buckets ({fit.samples} over "
        f"{fit.buckets} so far)"
        if fit.too_thin
        else f"its own fit is refused ({fit.note})"
    )
    return StepModel(None, fit, f"no usable cost model: {prior.name} is another set-up's profile, a prior only; {own}")


def _speedup_ceiling(inputs: PolicyInputs) -> float | None:
    """The most speculation can beat plain by whatever the hardware: a step that verifies drafts costs at least a plain
    step, so the speed-up is at most the tokens it emits per step (vLLM's mean acceptance length, else 1 + acceptance x
    K, the most K drafts can add). None when neither is measured."""
    m = inputs.measurements
    per_step = valid_value(m, Signal.MEAN_ACCEPTANCE_LENGTH)
    if per_step is not None:
        return per_step
    acceptance, k = valid_value(m, Signal.ACCEPTANCE_RATE), inputs.current.num_speculative_tokens
    return None if acceptance is None or not k else 1 + acceptance * k


def _fit_plan(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    acceptance: float,
    batch: float | None,
    evidence: dict[str, Any],
    filed: _Filed,
    step_model: StepModel,
) -> ThresholdPlan | None:
    """The threshold/schedule fit priced with the usable step model (usable_step_model); filed in `evidence`."""
    evidence["stepFit"] = step_model.fit.to_dict()
    plan = _plan(inputs, state, now, acceptance, batch, step_model)
    if plan is not None:
        evidence["threshold"] = {"reason": plan.reason, **plan.evidence}
        filed.plan = plan
    return plan


def _fit_beats_off(plan: ThresholdPlan) -> bool:
    """Did the K = 0 comparison (k0tax.compare_with_off) price the fitted schedule above speculation off?

    Only a schedule fit runs that comparison, and only with a cost model that matched the measured TPOT (a plan
    from an inconsistent model proposes nothing). Where it did, an acceptance-only disable must not act: past
    capacity a smaller K can serve far more than off (docs/design/decisions.md).
    """
    off = plan.off
    return not plan.disable and off is not None and not off.off_wins and off.net_s is not None and off.net_s < 0


def _k0_window_proposal(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    batch: float | None,
    off_target: SpeculationIntent,
    evidence: dict[str, Any],
    filed: _Filed,
) -> Proposal | None:
    """A window spent entirely in a K = 0 range drafts nothing, so acceptance is NoData; yet that is exactly when
    the K = 0 tax is paid, and a load that stays in that range would otherwise hold the schedule for as long as it
    stays ("acceptance NoData"). The K = 0 comparison then runs with the newest acceptance the baseline record
    kept for this deployment, or enableAbove (generous to the K > 0 ranges, so off wins only on the tax), and may
    only propose off; nothing else is decided on a window without acceptance."""
    current = inputs.current
    max_k = current.num_speculative_tokens
    if batch is None or not max_k or k_for_batch(current, max(1, round(batch)), max_k) > 0:
        return None
    recorded = [e for e in state.baseline if e.mode is Mode.ON and e.acceptance is not None]
    if recorded:
        newest = max(recorded, key=lambda e: e.at)
        assert newest.acceptance is not None
        acceptance, source = newest.acceptance, f"the baseline record's newest ({format_time(newest.at)})"
    else:
        acceptance, source = inputs.spec.autotune.acceptance.enable_above, "enableAbove (none recorded)"
    plan = _plan(inputs, state, now, acceptance, batch, usable_step_model(inputs, state))
    if plan is None:
        return None
    evidence["threshold"] = {"reason": plan.reason, "acceptanceAtK0": {"value": acceptance, "source": source},
                             **plan.evidence}  # fmt: skip
    filed.plan = plan
    if plan.disable and inputs.spec.autotune.overrides.speculation is not SpeculationOverride.FORCE_ON:
        reason = f"{plan.reason} (this window ran at K=0 only: acceptance {acceptance:.2f} from {source})"
        return Proposal(Action.DISABLE, off_target, reason, evidence, off_kind=OffReason.LOAD)
    return None


def _latency_regression(inputs: PolicyInputs, state: PolicyState, now: datetime) -> tuple[str, dict[str, Any]]:
    """Is P99 with speculation worse than without it at the same load? Empty string when not (or unknown)."""
    at = inputs.spec.autotune
    metric = at.latency.metric.value
    _, p99_signal = LATENCY_SIGNALS[metric]
    p99 = valid_value(inputs.measurements, p99_signal)
    batch = valid_value(inputs.measurements, Signal.BATCH_SIZE)
    if p99 is None or batch is None:
        missing = p99_signal if p99 is None else Signal.BATCH_SIZE
        return "", {"note": f"no comparison: {why_not_valid(inputs.measurements, missing)}"}
    bucket = load_bucket(batch)
    base = summary(state.baseline, mode=Mode.OFF, bucket=bucket, metric=metric, now=now, max_age=BASELINE_MAX_AGE)
    if base is None:
        return "", {"note": f"no non-speculative baseline at batch {bucket_label(bucket)} yet"}
    p99_ms = p99 * 1000
    tolerance = at.latency.regression_tolerance
    evidence = {"offBaseline": base.to_dict(), "p99Ms": round(p99_ms, 3), "tolerance": tolerance}
    requests = _count(valid_value(inputs.measurements, Signal.REQUESTS_IN_WINDOW))
    name = f"P99 {metric.upper()}"
    if p99_ms > base.p99_ms * (1 + tolerance):
        return (
            f"{name} {p99_ms:.1f} ms is {p99_ms / base.p99_ms - 1:+.0%} vs the non-speculative baseline "
            f"{base.p99_ms:.1f} ms at batch {bucket_label(bucket)} (tolerance {tolerance:.0%}) over "
            f"{inputs.window.promql()}, {requests} requests",
            evidence,
        )
    if at.latency.p99_target is not None:
        target_ms = parse_duration(at.latency.p99_target) * 1000
        if p99_ms > target_ms >= base.p99_ms:
            return (
                f"{name} {p99_ms:.1f} ms breaches p99Target {target_ms:.0f} ms while the non-speculative baseline "
                f"met it ({base.p99_ms:.1f} ms at batch {bucket_label(bucket)}) over {inputs.window.promql()}, "
                f"{requests} requests",
                evidence,
            )
    return "", evidence


def _predicted_speedup(
    inputs: PolicyInputs, step_model: StepModel, acceptance: float, batch: float | None
) -> tuple[float | None, str]:
    """The cost model's speedup over plain at this batch and K, from the measured acceptance profile.

    Only a model consistent with this deployment's measured TPOT (within FitSettings.modelTolerance) counts: the
    fitted step-cost curve when there is one, else the assumed profile. Without it (no TPOT, an inconsistent model,
    K = 0 here): None and why.
    """
    current = inputs.current
    tpot = valid_value(inputs.measurements, Signal.TPOT_MEAN)
    if batch is None or tpot is None:
        return None, "no cost-model prediction: batch or mean TPOT not measured"
    b = max(1, round(batch))
    profile, unmeasured = _acceptance_profile(inputs, acceptance)
    if profile is None:
        return None, f"no cost-model prediction: {unmeasured or 'K unknown'}"
    max_k = current.num_speculative_tokens or profile.max_k
    profile = with_output_length(profile, mean_output_tokens(inputs.measurements))
    k = k_for_batch(current, b, max_k)
    if k <= 0:
        return None, f"no cost-model prediction: K = 0 at batch {b}"
    if step_model.model is None:
        return None, step_model.note
    model = with_emission(model_for_method(step_model.model, inputs.spec.speculation.method.value), profile)
    ok, note = model_consistency(
        model, profile, batch=b, k=k, tpot_ms=tpot * 1000, tolerance=inputs.fit.model_tolerance
    )
    if not ok:
        return None, f"no cost-model prediction: {note}"
    predicted = speedup(profile, model, b, k)
    return predicted, f"the cost model ({note}) predicts {predicted:.2f}x over plain at batch {b}, K={k}"


def _acceptance_profile(inputs: PolicyInputs, acceptance: float) -> tuple[AcceptanceProfile | None, str]:
    """The survival profile the cost model prices: measured per position when vLLM exports it, else geometric.

    Under a running batch-size schedule the per-position rates are divided by the share of drafts that reached each
    position (reach.py: the counter's denominator counts every draft, so the schedule's own low-K ranges made the
    next fit see a worthless position and install K = 1 everywhere). Lookup drafters propose fewer tokens than K by
    themselves, so their mean K says nothing about the schedule and they are left as measured. (None, why) when a
    position the schedule drafts only at low batch was not drafted in this window; (None, "") when K is unknown.
    """
    current = inputs.current
    k = current.num_speculative_tokens
    by_position = inputs.measurements.get(Signal.ACCEPTANCE_BY_POSITION)
    if by_position is None or not by_position.valid or not by_position.by_label:
        return (profile_geometric(acceptance, k), "") if k is not None else (None, "")
    measured = positions(by_position)
    max_k = k or (max(measured) + 1)
    method = inputs.spec.speculation.method.value
    if current.batch_schedule and DRAFTER_BY_METHOD.get(method) is not Drafter.LOOKUP:
        levels = [min(range_k, max_k) for _lo, _hi, range_k in current.batch_schedule]
        corrected = correct_positions(measured, levels=levels, acceptance_rate=acceptance)
        if corrected.unmeasured:
            return None, corrected.note
        profile = profile_from_positions(corrected.by_position, max_k)
        if corrected.note:
            profile = replace(profile, source=f"{profile.source}; {corrected.note}")
        return profile, ""
    return profile_from_positions(measured, max_k), ""


def measured_speed(inputs: PolicyInputs, state: PolicyState, now: datetime) -> SpeedVerdict:
    """Speculation's mean TPOT against plain at the same load: a plain canary first, else the baseline record."""
    at = inputs.spec.autotune
    m = inputs.measurements
    tolerance = at.latency.regression_tolerance
    tpot = valid_value(m, Signal.TPOT_MEAN)
    tpot_ms = None if tpot is None else tpot * 1000
    batch = valid_value(m, Signal.BATCH_SIZE)
    if inputs.canary is not None and batch is not None:
        plain_tpot = valid_value(inputs.canary, Signal.TPOT_MEAN)
        plain_batch = valid_value(inputs.canary, Signal.BATCH_SIZE)
        if plain_tpot is not None and plain_batch is not None and comparable_batches(batch, plain_batch):
            detail = f"plain canary at batch {plain_batch:.1f} vs {batch:.1f}"
            return compare_speed(
                tpot_on_ms=tpot_ms, plain=PlainReference(plain_tpot * 1000, "canary", detail), tolerance=tolerance
            )
    if batch is None:
        return compare_speed(
            tpot_on_ms=tpot_ms, plain=None, tolerance=tolerance, missing=why_not_valid(m, Signal.BATCH_SIZE)
        )
    bucket = load_bucket(batch)
    base = summary(
        state.baseline, mode=Mode.OFF, bucket=bucket, metric=at.latency.metric.value, now=now, max_age=BASELINE_MAX_AGE
    )
    if base is None or base.tpot_mean_ms is None:
        missing = f"no plain mean TPOT at batch {bucket_label(bucket)} (baseline record or canary) yet"
        return compare_speed(tpot_on_ms=tpot_ms, plain=None, tolerance=tolerance, missing=missing)
    detail = (
        f"baseline at batch {bucket_label(bucket)}, {base.windows} window{'s' if base.windows != 1 else ''}, "
        f"newest {format_time(base.newest)}"
    )
    return compare_speed(
        tpot_on_ms=tpot_ms, plain=PlainReference(base.tpot_mean_ms, "baseline", detail), tolerance=tolerance
    )


def _plan(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    acceptance: float,
    batch: float | None,
    step_model: StepModel,
) -> ThresholdPlan | None:
    """Fit the batch threshold or schedule (one K where the engine has neither), when allowed; None when tuning is
    out of scope. Where the step model's fit has rivals (stepfit.StepFit.rivals: other ridges that fit the windows as
    well), a change it proposes stands only where every rival's own plan proposes a change of the same kind
    (agreed_by_rivals).

    `step_model`: what the steps are priced with (usable_step_model); without a usable one nothing is refitted.
    """
    spec = inputs.spec
    at = spec.autotune
    if not at.batch_threshold.tune or at.overrides.pin_batch_threshold or state.probe_started is not None:
        return None
    support = fit_support(threshold_support_for(spec)[0])
    if batch is None:
        return None
    m = inputs.measurements
    if step_model.model is None:
        return ThresholdPlan(
            support, None, 0.0, math.inf, False, f"no refit: {step_model.note}", {"stepModel": step_model.note}
        )
    profile, unmeasured = _acceptance_profile(inputs, acceptance)
    if unmeasured:
        return ThresholdPlan(
            support, None, 0.0, math.inf, False, f"no refit: {unmeasured}", {"acceptance": {"note": unmeasured}}
        )
    if profile is None:
        return None
    profile = with_output_length(profile, mean_output_tokens(m))
    plan = _plan_at(inputs, state, now, profile, batch, step_model.model, support)
    rivals = step_model.fit.rivals
    if not rivals or not (plan.disable or plan.proposed is not None):
        return plan
    priced = [(r, _plan(inputs, state, now, acceptance, batch, StepModel(r.model, r, r.note))) for r in rivals]
    return agreed_by_rivals(plan, priced)


def _plan_at(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    profile: AcceptanceProfile,
    batch: float,
    model: StepCostModel,
    support: ThresholdSupport,
) -> ThresholdPlan:
    """plan_threshold for this window: the running config, the load record and the window's measurements, the steps
    priced with `model`, the fit of the kind the engine honours (`support`, fit_support)."""
    spec = inputs.spec
    at = spec.autotune
    m = inputs.measurements
    load = dict(state.load) or {load_bucket(batch): 1.0}
    tpot_on = valid_value(m, Signal.TPOT_MEAN)
    base = summary(
        state.baseline,
        mode=Mode.OFF,
        bucket=load_bucket(batch),
        metric=at.latency.metric.value,
        now=now,
        max_age=BASELINE_MAX_AGE,
    )
    return plan_threshold(
        version=VllmVersion.parse(spec.engine.version),
        support=support,
        current=inputs.current,
        method=spec.speculation.method.value,
        max_num_seqs=spec.engine.max_num_seqs,
        bounds=(at.batch_threshold.min, at.batch_threshold.max),
        profile=profile,
        load=load,
        batch_now=batch,
        tpot_on_ms=None if tpot_on is None else tpot_on * 1000,
        tpot_off_ms=None if base is None else base.tpot_mean_ms,
        settings=replace(inputs.fit, model=model),
        drafter_memory=drafter_memory(spec, m),
        forecast=_forecast(inputs, state.request_rates),
        anchor=None if state.streak is None else anchor_intent(state.streak.key, refit_action(support).value),
        objective=at.objective,
        declared_k=spec.speculation.num_speculative_tokens,
        inflight_s=valid_value(m, Signal.E2E_P99) or 0.0,
        tpot_spread_ms=_tpot_spread_ms(m),
        peak_ratio=_rate_peak(state.request_rates, inputs.fit),
    )


def agreed_by_rivals(plan: ThresholdPlan, rivals: Sequence[tuple[StepFit, ThresholdPlan | None]]) -> ThresholdPlan:
    """`plan` where each rival's plan agrees with its change: speculation off where it goes off, some refit or off
    where it refits (the rival need not draw the same schedule: the change's direction is what the windows must
    support); else no change, with the first rival that dissents."""
    for fit, rival in rivals:
        if rival is not None and (rival.disable if plan.disable else rival.disable or rival.proposed is not None):
            continue
        if rival is None:
            dissent = "which prices nothing"
        else:
            dissent = "which does not price speculation off" if plan.disable else "which proposes no change"
            dissent += f" ({rival.reason})"
        held = f"held: the windows fit as well at ridge x{fit.ridge_scale:g} of the profile's, {dissent}"
        return replace(plan, proposed=None, worth_installing=False, disable=False, reason=f"{plan.reason}; {held}")
    return plan


def _tpot_spread_ms(m: Mapping[str, Measurement]) -> tuple[float, float] | None:
    """The median and P99 of the requests' TPOT in ms, where both were measured."""
    p50, p99 = valid_value(m, Signal.TPOT_P50), valid_value(m, Signal.TPOT_P99)
    return None if p50 is None or p99 is None else (p50 * 1000, p99 * 1000)


def _rate_peak(samples: Sequence[RateSample], fit: FitSettings) -> float:
    """The highest request rate over the last rollout's length relative to the rate now (forecast.recent_peak_ratio):
    the load a rollout starting now may meet. 1.0 where no wave leaves pods serving (the restart is never free)."""
    if fit.rollout is None:
        return 1.0
    return recent_peak_ratio(samples, fit.rollout.length_s(fit.restart_cost_s))


def _forecast(inputs: PolicyInputs, samples: Sequence[RateSample]) -> Forecast | None:
    """The projected rise of the offered load over the next stretch (forecast.py): a sustained rise of the request
    rate, else, before the engine reaches its limit (saturation: past it the queue is the backlog gate's), arrivals
    outpacing the running config's completions, held over the horizon as the load record is; None without either."""
    horizon_s = inputs.fit.horizon_s
    trend, why = rising_trend(samples, horizon_s)
    if trend is not None:
        ahead = projection_ahead_s(trend, horizon_s)
        return Forecast(tuple(projected_ratios(trend, ahead)), ahead, why, trend.to_dict())
    since = inputs.trusted_from()
    if since is None or saturation(inputs):
        return None
    found, why = outpacing(samples, since)
    if found is None:
        return None
    return Forecast(found.ratios(), horizon_s, why, {"outpacing": found.to_dict()}, past_capacity_only=True)


def drafter_memory(spec: SpeculativeDeploymentSpec, m: Mapping[str, Measurement]) -> DrafterMemory | None:
    """The drafter's memory for the K = 0 comparison: KV capacity without it (memory plan) and whether this window
    was KV-bound; None where the plan cannot size the models (an uncataloged model without an inline architecture)."""
    try:
        gain = drafter_kv_gain(plan_memory(spec))
    except ValueError:  # catalog.UnknownArchitecture and plan refusals
        return None
    if gain is None:
        return None
    bound, detail = kv_bound(
        valid_value(m, Signal.KV_CACHE_USAGE),
        valid_value(m, Signal.WAITING_REQUESTS),
        valid_value(m, Signal.PREEMPTION_RATE),
    )
    return DrafterMemory(gain, bound, detail, spec.engine.max_num_seqs)


def _propose_while_off(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    evidence: dict[str, Any],
    filed: _Filed,
    *,
    probe_now: bool,
) -> Proposal:
    at = inputs.spec.autotune
    m = inputs.measurements
    pin = at.overrides.speculation
    if pin is SpeculationOverride.FORCE_OFF:
        return _keep(inputs, "speculation pinned off by spec.autotune.overrides.speculation=ForceOff", evidence)
    if pin is SpeculationOverride.FORCE_ON:
        return _keep(
            inputs,
            "speculation pinned on by spec.autotune.overrides.speculation=ForceOn; the reconcile applies the pin",
            evidence,
        )
    on_target = complete_intent(inputs.current.with_speculation(), inputs.spec)
    metric = at.latency.metric.value
    tolerance = at.latency.regression_tolerance
    batch = valid_value(m, Signal.BATCH_SIZE)
    off = state.off

    if inputs.canary is not None:
        verdict = compare_canary(
            inputs.canary, m, metric=metric, tolerance=tolerance, enable_above=at.acceptance.enable_above
        )
        evidence["canary"] = {"outcome": verdict.outcome.value, "reason": verdict.reason, **verdict.evidence}
        if verdict.outcome is CanaryOutcome.HELPS:
            return Proposal(Action.ENABLE, on_target, f"canary: {verdict.reason}", evidence)

    if batch is None:
        return _keep(inputs, f"speculation off; holding: {why_not_valid(m, Signal.BATCH_SIZE)}", evidence)
    since = f" since {format_time(off.at)} ({off.detail})" if off else ""

    rate = valid_value(m, Signal.REQUEST_RATE)
    load = _load_since_off(off, rate, tolerance)
    if off is not None and off.kind in (OffReason.LOAD, OffReason.SATURATION) and load is LoadSinceOff.LOWER:
        return Proposal(
            Action.ENABLE,
            on_target,
            f"load back under the crossover: {rate:.2f} requests/s, below the {off.request_rate:.2f} at which "
            f"speculation was disabled{since} by more than the tolerance {tolerance:.0%}",
            evidence,
        )

    by_record = _enable_by_record(inputs, state, now, batch, on_target, evidence, filed)
    if by_record is not None:
        return by_record
    if off is None:
        origin = "as written in spec" if not inputs.spec.speculation.enabled else "by the running config"
        return _keep(inputs, f"speculation off {origin}; no canary, record or probe evidence to enable it", evidence)
    return _probe(inputs, state, now, evidence, load, probe_now=probe_now)


def _enable_by_record(
    inputs: PolicyInputs, state: PolicyState, now: datetime, batch: float, on_target: SpeculationIntent,
    evidence: dict[str, Any], filed: _Filed,
) -> Proposal | None:  # fmt: skip
    """Speculation off: back on where a record with it at this load beats the window without it, by P99 (at an
    acceptance past enableAbove, newer than the disable) or by measured speed (the acceptance gate misread it)."""
    at = inputs.spec.autotune
    m = inputs.measurements
    metric = at.latency.metric.value
    tolerance = at.latency.regression_tolerance
    bucket = load_bucket(batch)
    off = state.off
    _, p99_signal = LATENCY_SIGNALS[metric]
    p99 = valid_value(m, p99_signal)
    on_record = summary(state.baseline, mode=Mode.ON, bucket=bucket, metric=metric, now=now, max_age=BASELINE_MAX_AGE)
    if on_record is not None:
        evidence["onRecord"] = on_record.to_dict()
    if (
        on_record is not None
        and p99 is not None
        and on_record.acceptance is not None
        and on_record.acceptance >= at.acceptance.enable_above
        and (off is None or on_record.newest > off.at)
        and on_record.p99_ms * (1 + tolerance) < p99 * 1000
    ):
        return Proposal(
            Action.ENABLE,
            on_target,
            f"baseline record: with speculation P99 {metric.upper()} was {on_record.p99_ms:.1f} ms at batch "
            f"{bucket_label(bucket)} (acceptance {on_record.acceptance:.2f}) vs {p99 * 1000:.1f} ms now without it",
            evidence,
        )

    trap = _acceptance_gate_misread(inputs, off, on_record, batch)
    if trap is not None:
        evidence["speed"] = {"outcome": trap.outcome.value, "reason": trap.reason, **trap.evidence}
        filed.speed = trap
        if trap.outcome is Speed.FASTER:
            assert on_record is not None
            assert on_record.acceptance is not None
            return Proposal(
                Action.ENABLE,
                on_target,
                f"the acceptance gate misread this drafter: with speculation at acceptance {on_record.acceptance:.2f} "
                f"(below disableBelow {at.acceptance.disable_below:.2f}) at batch {bucket_label(bucket)}, "
                f"{trap.reason}",
                evidence,
            )
    return None


def _probe(
    inputs: PolicyInputs,
    state: PolicyState,
    now: datetime,
    evidence: dict[str, Any],
    load: LoadSinceOff,
    *,
    probe_now: bool,
) -> Proposal:
    """After an autotune disable: turn speculation back on `probeInterval` later; after a disable for load, at no
    higher request rate. The finished-request rate rises with the config where clients wait for each answer or the
    engine is past capacity, so a probe of the drafter (an acceptance or canary disable) does not wait on it."""
    at, off = inputs.spec.autotune, state.off
    assert off is not None
    since = f" since {format_time(off.at)} ({off.detail})"
    on_target = complete_intent(inputs.current.with_speculation(), inputs.spec)
    rate = valid_value(inputs.measurements, Signal.REQUEST_RATE)
    batch = valid_value(inputs.measurements, Signal.BATCH_SIZE)
    probe_interval = parse_duration(at.probe_interval)
    if probe_interval <= 0:
        return _keep(inputs, f"speculation off{since}; probes disabled (probeInterval 0)", evidence)
    last = max(off.at, state.last_probe) if state.last_probe else off.at
    due = last + timedelta(seconds=probe_interval)
    if off.kind is OffReason.LOAD and load is LoadSinceOff.HIGHER:  # a drafter's probe re-measures the drafter
        return _keep(
            inputs,
            f"speculation off{since}; probe waits for the request rate to fall to {off.request_rate:.2f}/s, "
            f"where speculation was disabled (now {rate:.2f}/s)",
            evidence,
        )
    if now < due and not probe_now:
        return _keep(inputs, f"speculation off{since}; next probe after {format_time(due)}", evidence)
    return Proposal(
        Action.ENABLE,
        on_target,
        f"probe: speculation off{since}; re-measuring acceptance at batch {batch or 0:.1f} per engine "
        f"(probeInterval {format_duration(probe_interval)})",
        evidence,
        probe=True,
    )


class LoadSinceOff(StrEnum):
    """The offered load now against the disable's, in request rate (the config moves the batch, not the traffic)."""

    LOWER = "lower"
    SAME = "same"  # within the tolerance
    HIGHER = "higher"
    UNKNOWN = "unknown"  # no rate now, or none recorded with the disable


def _load_since_off(off: OffRecord | None, rate: float | None, tolerance: float) -> LoadSinceOff:
    if off is None or off.request_rate is None or rate is None:
        return LoadSinceOff.UNKNOWN
    if rate < off.request_rate * (1 - tolerance):
        return LoadSinceOff.LOWER
    if rate > off.request_rate * (1 + tolerance):
        return LoadSinceOff.HIGHER
    return LoadSinceOff.SAME


def _acceptance_gate_misread(
    inputs: PolicyInputs, off: OffRecord | None, on_record: BaselineSummary | None, batch: float
) -> SpeedVerdict | None:
    """After an acceptance-driven disable: was speculation, at that low acceptance, faster than plain is now?

    Only a record taken while acceptance was already below disableBelow counts (a record from before a drafter degraded
    proves nothing about the degraded drafter), and, where the state kept the acceptance the disable acted on, no more
    than MISREAD_ACCEPTANCE_MARGIN above it: a head healthy below disableBelow by design must not be switched back on by
    its healthy record after it degrades further (docs/design/decisions.md). Plain is this window's mean TPOT at the
    same load bucket.
    """
    if off is None or off.kind is not OffReason.ACCEPTANCE or on_record is None:
        return None
    if on_record.acceptance is None or on_record.acceptance >= inputs.spec.autotune.acceptance.disable_below:
        return None
    if off.acceptance is not None and on_record.acceptance > off.acceptance * (1 + MISREAD_ACCEPTANCE_MARGIN):
        return None
    if on_record.tpot_mean_ms is None:
        return None
    plain = valid_value(inputs.measurements, Signal.TPOT_MEAN)
    if plain is None:
        return None
    reference = PlainReference(plain * 1000, "this window", f"plain now at batch {batch:.1f}")
    return compare_speed(
        tpot_on_ms=on_record.tpot_mean_ms,
        plain=reference,
        tolerance=inputs.spec.autotune.latency.regression_tolerance,
    )
