"""The autotuner's decision: measurements + durable state -> what speculation config to run (pure).

`decide(inputs, state, now)` is deterministic: the same inputs, state and time give the same decision and new state.
The state is a plain JSON document kept in `status.autotune`, so agreement streaks, the actuation budget, the
baseline record and the reason speculation was switched off survive operator restarts (HPA loses all of these on a
restart; KEP-853 explains why that causes instant scaling).

`decide`, in the HPA's shape (the rules of docs/design/decisions.md):
1. Observation: a spec or deployment change resets what it invalidates (`_reset_on_spec_change`); mode Off and
   measurement Errors hold (4 in a row -> MetricsAvailable=False); a settled window is filed into the records
   (`_observe`) and the measured restart (`measured_restart_s`); pause, a rollout in flight or a config still
   settling hold (`_before_proposal`).
2. Proposal: what this one evaluation alone says (`propose`), from Valid measurements only, with minimum samples.
3. Agreement: the streak continues or starts, and its wait is priced (`_agree`, `_stabilization`).
4. Gates, in the fixed order of `GATES`: agreement (K consecutive evaluations spanning the stabilization window;
   a new `specpilot.dev/reevaluate` token counts as full agreement once), publish (mode Recommend), budget (min
   interval, per hour/day, longer after a reversal; kept in status), backlog. The first that holds concludes;
   past all of them the shell actuates and then calls `record_actuation`.

Re-enabling: with speculation off there are no acceptance counters, so "off" is left only on other
evidence: a canary replica that speculates on the same traffic; load back under the level where a load-driven
disable happened; the baseline record showing speculation was faster at this load; or a scheduled probe
(`probeInterval` after an autotune disable, at no higher load than the disable) that turns speculation on, counted
against the budget, and keeps it only if acceptance then clears `enableAbove`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specpilot.api.durations import format_duration, parse_duration
from specpilot.api.timestamps import format_time, parse_time
from specpilot.api.v1alpha1 import (
    AutotuneMode,
    BudgetSpec,
    SpeculationConfig,
    SpeculationOverride,
    SpeculativeDeploymentSpec,
    spec_running,
)
from specpilot.autotune.model.baseline import (
    BaselineEntry,
    BaselineSummary,
    CanaryOutcome,
    Mode,
    bucket_label,
    compare_canary,
    decay_load,
    entry_from_window,
    load_bucket,
    record,
    side_by_side,
    summary,
)
from specpilot.autotune.model.costprofile import GPU_PRODUCT_LABEL
from specpilot.autotune.model.forecast import RateSample, add_rate, projected_ratios, projection_ahead_s, rising_trend
from specpilot.autotune.model.k0tax import DrafterMemory, drafter_kv_gain, kv_bound
from specpilot.autotune.model.rollcost import restart_cost_for
from specpilot.autotune.model.schedule import (
    FitSettings,
    Forecast,
    ThresholdPlan,
    ThresholdSupport,
    fit_support,
    forgone_rate,
    model_consistency,
    plan_threshold,
    schedule_text,
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
    StepSample,
    add_sample,
    fit_step_cost,
    mean_context_tokens,
    mean_output_tokens,
    prefill_tokens_per_step,
    sample_from_window,
)
from specpilot.autotune.policy.agreement import (
    agree_by_effect,
    anchor_intent,
    further_shed,
    keys_agree,
    sheds,
    stabilization_for,
    stabilized,
)
from specpilot.autotune.policy.backlog import (
    K0_TAX_GAIN,
    MEASURED_SPEED_GAIN,
    BacklogVerdict,
    Priced,
    QueueSeen,
    proposal_gain,
    restart_seconds_under_backlog,
    restart_under_backlog,
    ttft_deadline_s,
)
from specpilot.autotune.signals.measurements import Measurement, count_errors, positions, valid_value, why_not_valid
from specpilot.autotune.signals.promql import LATENCY_SIGNALS, Signal, Window
from specpilot.autotune.signals.reach import correct_positions
from specpilot.planning.plan import plan_memory
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import UnsupportedCombination, render_command, threshold_support_for
from specpilot.vllm.intent import (
    ChosenIntent,
    IntentSource,
    SpeculationIntent,
    complete_intent,
    intent_from_dict,
    intent_from_spec,
    intent_to_dict,
    schedule_from_list,
)
from specpilot.vllm.versions import VllmVersion

ERROR_LIMIT = 4  # Argo Rollouts' consecutiveErrorLimit default
BASELINE_MAX_AGE = timedelta(days=1)  # older latency records describe another traffic mix
ACTUATION_HISTORY = 50
MAX_DWELL = timedelta(days=1)
STATE_VERSION = 1
MISREAD_ACCEPTANCE_MARGIN = 0.1  # a speed record counts for the acceptance of a disable up to 10% above it


class Action(StrEnum):
    KEEP = "Keep"
    DISABLE = "DisableSpeculation"
    ENABLE = "EnableSpeculation"
    CHANGE_THRESHOLD = "ChangeBatchThreshold"  # a batch-size schedule or a V0 threshold
    CHANGE_K = "ChangeSpeculativeTokens"  # one K for every batch size, where the engine has no schedule
    TRY_CANDIDATE = "TryCandidate"  # a one-pod trial of a candidate drafter: charged to the budget, selects nothing


def refit_action(support: ThresholdSupport) -> Action:
    """The action a refit of the fit is: one K where the engine has no batch-size schedule, else the schedule."""
    return Action.CHANGE_K if support is ThresholdSupport.NONE else Action.CHANGE_THRESHOLD


class OffReason(StrEnum):
    """Why autotune switched speculation off; decides how it may come back."""

    ACCEPTANCE = "acceptance"  # the drafter is poor on this traffic: only a probe or a canary can tell otherwise
    LOAD = "load"  # the drafter is fine but the batch is too large: back on when the load falls
    CANARY = "canary"  # a plain canary was faster on the same traffic


# ------------------------------------------------------------------------------------------------ intents


def describe_intent(intent: SpeculationIntent) -> str:
    if not intent.enabled:
        return "speculation off"
    k = intent.num_speculative_tokens
    text = f"speculation on (K={k if k is not None else 'model default'})"
    if intent.batch_schedule:
        return f"{text}, schedule {schedule_text(intent.batch_schedule)}"
    if intent.disable_above_batch_size is not None:
        return f"{text}, off at batch >= {intent.disable_above_batch_size}"
    return text


# ------------------------------------------------------------------------------------------------ state


@dataclass(frozen=True)
class Streak:
    """Consecutive evaluations proposing the same change."""

    key: str
    action: Action
    count: int
    since: datetime
    waiting: float | None = None  # the window's mean queue at the first proposal: the backlog's trend (backlog.py)


@dataclass(frozen=True)
class ActuationRecord:
    """One applied change, kept for the budget (evidence goes to status.actuations, not here)."""

    at: datetime
    action: Action
    from_intent: dict[str, Any]
    to_intent: dict[str, Any]
    reason: str
    probe: bool = False
    reversal: bool = False


@dataclass(frozen=True)
class OffRecord:
    kind: OffReason
    at: datetime
    batch: float | None
    detail: str
    acceptance: float | None = None  # the window's acceptance when it was switched off (absent in older states)
    # the offered load then, in finished requests per second: unlike the batch, the config does not move it
    request_rate: float | None = None


@dataclass(frozen=True)
class PolicyState:
    """Controller memory; `to_dict`/`from_dict` round-trip it through status.autotune."""

    spec_fingerprint: str | None = None
    intent_fingerprint: str | None = None
    deployment_fingerprint: str | None = None  # the deployment the records below describe (deployment_fingerprint)
    consecutive_errors: int = 0
    metrics_available: bool | None = None
    paused: bool = False
    throttled: bool = False
    streak: Streak | None = None
    last_recommendation: str | None = None
    actuations: tuple[ActuationRecord, ...] = ()
    selected: SpeculationIntent | None = None  # the config autotune chose; None: the spec's own
    # the spec.speculation.candidates[].name a one-pod trial promoted to every pod; None: the declared drafter
    drafter: str | None = None
    off: OffRecord | None = None
    probe_started: datetime | None = None
    last_probe: datetime | None = None
    baseline: tuple[BaselineEntry, ...] = ()
    load: Mapping[int, float] = field(default_factory=dict)  # seconds per load bucket, decayed
    load_updated: datetime | None = None
    step_samples: tuple[StepSample, ...] = ()  # (batch, K, step time) per settled window, for the online fit
    step_sampled: datetime | None = None
    backlog_since: datetime | None = None  # an agreed restart first deferred because requests queued (backlog.py)
    backlog_dropped: float | None = None  # what that restart would have dropped then: prices the wait (backlog.py)
    # seconds of serving forgone by not installing a refit: its per-request speed-up at the load of each evaluation
    # times the interval, while that is past the fit's minimum gain (schedule.repaid_by_waiting: rent or buy)
    forgone_s: float = 0.0
    # the finished-request rate of each evaluation over the last hour: where the offered load is heading (forecast.py)
    request_rates: tuple[RateSample, ...] = ()
    # seconds of serving one of this deployment's own restarts took, per pod: from autotune's last actuation to the
    # rollout's completion (measured_restart_s); None until one was measured, when the profile's assumption prices it
    restart_measured_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "specFingerprint": self.spec_fingerprint,
            "intentFingerprint": self.intent_fingerprint,
            "deploymentFingerprint": self.deployment_fingerprint,
            "consecutiveErrors": self.consecutive_errors,
            "metricsAvailable": self.metrics_available,
            "paused": self.paused,
            "throttled": self.throttled,
            "streak": None
            if self.streak is None
            else {
                "key": self.streak.key,
                "action": self.streak.action.value,
                "count": self.streak.count,
                "since": format_time(self.streak.since),
                **({} if self.streak.waiting is None else {"waiting": self.streak.waiting}),
            },
            "lastRecommendation": self.last_recommendation,
            "actuations": [
                {
                    "at": format_time(a.at),
                    "action": a.action.value,
                    "from": a.from_intent,
                    "to": a.to_intent,
                    "reason": a.reason,
                    "probe": a.probe,
                    "reversal": a.reversal,
                }
                for a in self.actuations
            ],
            "selected": None if self.selected is None else intent_to_dict(self.selected),
            "drafter": self.drafter,
            "off": None
            if self.off is None
            else {
                "kind": self.off.kind.value,
                "at": format_time(self.off.at),
                "batch": self.off.batch,
                "detail": self.off.detail,
                **({} if self.off.acceptance is None else {"acceptance": self.off.acceptance}),
                **({} if self.off.request_rate is None else {"requestRate": self.off.request_rate}),
            },
            "probeStarted": _t(self.probe_started),
            "lastProbe": _t(self.last_probe),
            "baseline": [e.to_dict() for e in self.baseline],
            "load": {str(b): round(w, 1) for b, w in sorted(self.load.items())},
            "loadUpdated": _t(self.load_updated),
            "stepSamples": [s.to_dict() for s in self.step_samples],
            "stepSampled": _t(self.step_sampled),
            "backlogSince": _t(self.backlog_since),
            "backlogDropped": self.backlog_dropped,
            "forgoneSeconds": round(self.forgone_s, 1),
            "requestRates": [r.to_list() for r in self.request_rates],
            "restartMeasuredSeconds": self.restart_measured_s,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> PolicyState:
        """Read status.autotune; a missing or foreign-version document starts fresh (nothing to trust in it)."""
        if not raw or raw.get("version") != STATE_VERSION:
            return cls()
        streak = raw.get("streak")
        off = raw.get("off")
        return cls(
            spec_fingerprint=raw.get("specFingerprint"),
            intent_fingerprint=raw.get("intentFingerprint"),
            deployment_fingerprint=raw.get("deploymentFingerprint"),
            consecutive_errors=int(raw.get("consecutiveErrors", 0)),
            metrics_available=raw.get("metricsAvailable"),
            paused=bool(raw.get("paused", False)),
            throttled=bool(raw.get("throttled", False)),
            streak=None
            if not streak
            else Streak(
                key=str(streak["key"]),
                action=Action(streak["action"]),
                count=int(streak["count"]),
                since=parse_time(streak["since"]),
                waiting=None if streak.get("waiting") is None else float(streak["waiting"]),
            ),
            last_recommendation=raw.get("lastRecommendation"),
            actuations=tuple(
                ActuationRecord(
                    at=parse_time(a["at"]),
                    action=Action(a["action"]),
                    from_intent=dict(a["from"]),
                    to_intent=dict(a["to"]),
                    reason=str(a.get("reason", "")),
                    probe=bool(a.get("probe", False)),
                    reversal=bool(a.get("reversal", False)),
                )
                for a in raw.get("actuations") or ()
            ),
            selected=None if not raw.get("selected") else intent_from_dict(raw["selected"]),
            drafter=None if not raw.get("drafter") else str(raw["drafter"]),
            off=None
            if not off
            else OffRecord(
                kind=OffReason(off["kind"]),
                at=parse_time(off["at"]),
                batch=None if off.get("batch") is None else float(off["batch"]),
                detail=str(off.get("detail", "")),
                acceptance=None if off.get("acceptance") is None else float(off["acceptance"]),
                request_rate=None if off.get("requestRate") is None else float(off["requestRate"]),
            ),
            probe_started=_pt(raw.get("probeStarted")),
            last_probe=_pt(raw.get("lastProbe")),
            baseline=tuple(BaselineEntry.from_dict(e) for e in raw.get("baseline") or ()),
            load={int(b): float(w) for b, w in (raw.get("load") or {}).items()},
            load_updated=_pt(raw.get("loadUpdated")),
            step_samples=tuple(StepSample.from_dict(s) for s in raw.get("stepSamples") or ()),
            step_sampled=_pt(raw.get("stepSampled")),
            backlog_since=_pt(raw.get("backlogSince")),
            backlog_dropped=None if raw.get("backlogDropped") is None else float(raw["backlogDropped"]),
            forgone_s=float(raw.get("forgoneSeconds") or 0.0),
            request_rates=tuple(RateSample.from_list(r) for r in raw.get("requestRates") or ()),
            restart_measured_s=None
            if raw.get("restartMeasuredSeconds") is None
            else float(raw["restartMeasuredSeconds"]),
        )

    @classmethod
    def from_status(cls, raw: object) -> tuple[PolicyState, str | None]:
        """status.autotune as stored, or a fresh state and why it could not be read.

        The CRD keeps status.autotune free-form (newer operators add evidence), so the API server accepts whatever a
        status edit, a foreign operator build or a bad write left there: a malformed document is reported by the
        caller and ignored, never a crash in the reconcile or the evaluation that reads it.
        """
        if raw is not None and not isinstance(raw, Mapping):
            return cls(), f"status.autotune is malformed (a {type(raw).__name__}, not an object); ignored"
        try:
            return cls.from_dict(raw), None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as err:
            return cls(), f"status.autotune is malformed ({type(err).__name__}: {err!s:.80}); ignored"


# What one deployment's records start as: everything learned from its own windows and rollouts.
FRESH_RECORDS: dict[str, Any] = {
    "baseline": (),
    "load": {},
    "load_updated": None,
    "step_samples": (),
    "step_sampled": None,
    "request_rates": (),
    "forgone_s": 0.0,
    "off": None,
    "probe_started": None,
    "last_probe": None,
    "restart_measured_s": None,
    "streak": None,
    "backlog_since": None,
    "backlog_dropped": None,
}


def _t(at: datetime | None) -> str | None:
    return None if at is None else format_time(at)


def _pt(text: Any) -> datetime | None:
    return None if not text else parse_time(str(text))


# ------------------------------------------------------------------------------------------------ inputs, outputs


PAUSED_BY_ANNOTATION = "annotation specpilot.dev/pause=true"


@dataclass(frozen=True)
class PolicyInputs:
    """Everything one evaluation may look at. The shell gathers it; nothing here reads a clock, env or cluster."""

    spec: SpeculativeDeploymentSpec
    current: SpeculationIntent  # what the pods run now (from the child's pod template, not from status)
    measurements: Mapping[str, Measurement]
    window: Window
    paused: bool = False
    # why: the pause annotation unless the shell says otherwise (automation halted after a failed rollout)
    pause_reason: str = PAUSED_BY_ANNOTATION
    reevaluate_token: str | None = None
    last_handled_reevaluate: str | None = None
    rollout_in_progress: bool = False
    config_since: datetime | None = None  # when every pod ran the current config hash
    canary: Mapping[str, Measurement] | None = None  # measurements of a canary running the other mode
    fit: FitSettings = field(default_factory=FitSettings)


@dataclass(frozen=True)
class PolicyEvent:
    """An event to post on a transition (Normal or Warning; reason equals the condition reason)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Proposal:
    """What one evaluation alone recommends."""

    action: Action
    target: SpeculationIntent
    reason: str
    evidence: dict[str, Any]
    probe: bool = False
    off_kind: OffReason | None = None
    priced: Priced = field(default_factory=Priced)  # what its gain is read from (propose fills it)

    def key(self) -> str:
        """Agreement key: the action and the config it proposes."""
        return self.action.value + ":" + json.dumps(intent_to_dict(self.target), sort_keys=True)


@dataclass(frozen=True)
class Decision:
    action: Action  # the recommendation after agreement (Keep while a proposal still waits)
    target: SpeculationIntent  # config to run if this decision is applied
    reason: str
    evidence: dict[str, Any]
    proposal: Action  # what this evaluation alone proposed
    actuate: bool  # Auto mode, agreed, within budget: the shell should apply `target` now
    gate: str  # why a proposal is not (yet) applied; empty when actuating or nothing to do
    metrics_available: bool | None
    throttled: bool
    paused: bool
    probe: bool = False
    off_kind: OffReason | None = None
    batch: float | None = None
    request_rate: float | None = None  # this window's finished requests per second (Valid only)
    acceptance: float | None = None  # this window's acceptance rate (Valid only)
    handled_reevaluate: str | None = None  # write to status.lastHandledReevaluate
    events: tuple[PolicyEvent, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "reason": self.reason,
            "to": intent_to_dict(self.target),
            "proposal": self.proposal.value,
            "actuate": self.actuate,
            "gate": self.gate,
            "probe": self.probe,
            "evidence": self.evidence,
        }


# ------------------------------------------------------------------------------------------------ helpers


def fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def deployment_fingerprint(spec: SpeculativeDeploymentSpec) -> str:
    """What this deployment's measurements describe: the target, the drafter and method, the GPU and its
    parallelism, the image and the vLLM version. Every record the decisions learn from (the baseline, the step
    samples, the load and request-rate history, the off record, the measured restart) belongs to one fingerprint; a
    change starts them fresh (_reset_on_spec_change)."""
    speculation = spec.speculation
    return fingerprint(
        {
            "target": spec.target.model_dump(mode="json", by_alias=True),
            "method": speculation.method.value,
            "draft": None if speculation.draft is None else speculation.draft.model_dump(mode="json", by_alias=True),
            "gpu": spec.resources.node_selector.get(GPU_PRODUCT_LABEL),
            "gpuMemoryGiB": spec.resources.gpu_memory_gi_b,
            "parallelism": spec.parallelism.model_dump(mode="json", by_alias=True),
            "image": spec.engine.image,
            "version": spec.engine.version,
        }
    )


def spec_fingerprints(spec: SpeculativeDeploymentSpec) -> tuple[str, str]:
    """(whole spec, what the speculation intent derives from): the first resets agreement, the second the choice,
    which was made for one deployment (deployment_fingerprint)."""
    whole = fingerprint(spec.model_dump(mode="json", by_alias=True))
    intent = fingerprint(
        {
            "speculation": spec.speculation.model_dump(mode="json", by_alias=True),
            "deployment": deployment_fingerprint(spec),
            "maxNumSeqs": spec.engine.max_num_seqs,
        }
    )
    return whole, intent


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


def _evidence(inputs: PolicyInputs) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------------------------ proposal


def propose(inputs: PolicyInputs, state: PolicyState, now: datetime, *, probe_now: bool = False) -> Proposal:
    """What this evaluation alone says; Valid measurements only, and the state for history (read-only).

    `probe_now` lets a one-shot reevaluate token start a due-or-not probe.
    """
    inputs = with_measured_context(inputs)
    evidence = _evidence(inputs)
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
    speed = _speed(inputs, state, now)
    evidence["speed"] = {"outcome": speed.outcome.value, "reason": speed.reason, **speed.evidence}
    filed.speed = speed
    if inputs.spec.autotune.overrides.speculation is not SpeculationOverride.FORCE_ON:
        off = _reason_to_switch_off(inputs, state, now, speed, evidence, filed)
        if off is not None:
            return off
    return _refit_or_keep(inputs, state, now, speed, evidence, filed)


def _reason_to_switch_off(
    inputs: PolicyInputs, state: PolicyState, now: datetime, speed: SpeedVerdict, evidence: dict[str, Any],
    filed: _Filed,
) -> Proposal | None:  # fmt: skip
    """The first of: acceptance below disableBelow (unless measured faster), a probe that did not reach enableAbove
    or found no evidence by its deadline, a latency regression, measured slower, a canary that hurts."""
    at = inputs.spec.autotune
    m = inputs.measurements
    w = inputs.window.promql()
    acceptance = valid_value(m, Signal.ACCEPTANCE_RATE)
    drafted = _count(valid_value(m, Signal.DRAFT_TOKENS_IN_WINDOW))
    below, above = at.acceptance.disable_below, at.acceptance.enable_above
    off_target = inputs.current.without_speculation()
    faster = speed.outcome is Speed.FASTER
    if acceptance is not None and acceptance < below and not faster:
        reason = f"acceptance {acceptance:.2f} < disableBelow {below:.2f} over {w}, {drafted} draft tokens"
        if speed.known:
            return Proposal(
                Action.DISABLE, off_target, f"{reason}; {speed.reason}", evidence, off_kind=OffReason.ACCEPTANCE
            )
        return _below_disable_without_comparison(inputs, state, now, reason, speed, evidence, filed)
    if state.probe_started is not None and acceptance is not None and acceptance < above and not faster:
        reason = (
            f"probe since {format_time(state.probe_started)}: acceptance {acceptance:.2f} did not reach "
            f"enableAbove {above:.2f} over {w}, {drafted} draft tokens"
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
    inputs: PolicyInputs, state: PolicyState, now: datetime, speed: SpeedVerdict, evidence: dict[str, Any],
    filed: _Filed,
) -> Proposal:  # fmt: skip
    """No reason to switch off: a K = 0 window's proposal while acceptance is unknown, else the fit's refit (or the
    K = 0 tax's disable), else keep, with the acceptance summary."""
    at = inputs.spec.autotune
    m = inputs.measurements
    w = inputs.window.promql()
    acceptance = valid_value(m, Signal.ACCEPTANCE_RATE)
    drafted = _count(valid_value(m, Signal.DRAFT_TOKENS_IN_WINDOW))
    below = at.acceptance.disable_below
    off_target = inputs.current.without_speculation()
    batch = valid_value(m, Signal.BATCH_SIZE)
    if acceptance is None:
        at_k0 = _k0_window_proposal(inputs, state, now, batch, off_target, evidence, filed)
        if at_k0 is not None:
            return at_k0
        return _keep(inputs, f"holding: {why_not_valid(m, Signal.ACCEPTANCE_RATE)}", evidence)
    if acceptance < below:  # kept only because speculation is measured faster (or pinned on)
        summary_text = f"acceptance {acceptance:.2f} < disableBelow {below:.2f} over {w}, {drafted} draft tokens"
        if speed.outcome is Speed.FASTER:
            summary_text += f", kept: {speed.reason} (acceptance is a warning here, not the trigger)"
    else:
        summary_text = f"acceptance {acceptance:.2f} >= disableBelow {below:.2f} over {w}, {drafted} draft tokens"
    if batch is not None:
        summary_text += f", batch {batch:.1f} per engine"
    plan = _fit_plan(inputs, state, now, acceptance, batch, evidence, filed)
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
    predicted, prediction = _predicted_speedup(inputs, state, acceptance, batch)
    evidence["predictedSpeed"] = {
        "speedup": None if predicted is None else round(predicted, 3),
        "note": prediction,
    }
    missing = speed.missing or speed.reason
    plan = _fit_plan(inputs, state, now, acceptance, batch, evidence, filed)
    if plan is not None and plan.proposed is not None and _fit_beats_off(plan):
        reason = (
            f"{reason}, but there is no measured speed comparison yet ({missing}) and the cost model, "
            f"consistent with the measured TPOT, prices a refit above both the running config and speculation "
            f"off: {plan.reason}"
        )
        return Proposal(refit_action(plan.support), plan.proposed, reason, evidence)
    return _acceptance_only(inputs, reason, predicted, prediction, missing, evidence)


def _acceptance_only(
    inputs: PolicyInputs,
    reason: str,
    predicted: float | None,
    prediction: str,
    missing: str,
    evidence: dict[str, Any],
) -> Proposal:
    """Acceptance below disableBelow without a measured speed comparison: acceptance alone never switches speculation
    off. Where the drafts add so few tokens per step that no hardware makes speculation measurably faster
    (_speedup_ceiling), the disable acts. A usable cost model that prices speculation slower than plain supports the
    disable. Otherwise the config holds, with acceptance as a warning in the reason: under adaptive verification
    (which lowers acceptance by design), where a usable model prices speculation no slower than plain, and where
    there is no usable model (too few requests for a mean TPOT, a model this deployment's windows do not confirm)."""
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
    elif predicted is None:
        why = f"no usable cost model ({prediction})"
    elif predicted >= 1.0:
        why = prediction
    else:
        return Proposal(Action.DISABLE, off_target, f"{reason}; {prediction}", evidence, off_kind=OffReason.ACCEPTANCE)
    return _keep(
        inputs,
        f"holding: {reason}, but there is no measured speed comparison yet ({missing}) and {why}; acceptance alone "
        "never switches speculation off",
        evidence,
    )


@dataclass(frozen=True)
class StepModel:
    """The step-cost model decisions may price with, and the deployment's own fit it came from or fell back from."""

    model: StepCostModel | None  # None: none is usable, and nothing is priced
    fit: StepFit
    note: str


def usable_step_model(inputs: PolicyInputs, state: PolicyState) -> StepModel:
    """The fit of the deployment's own settled windows when its error on them is small (stepfit.MAX_ERROR), else the
    profile calibrated on this set-up. A profile of another set-up (an unknown GPU, another size) is only the fit's
    prior: its shape is not this deployment's, so until its own windows fit, nothing is priced with it."""
    prior = inputs.fit.model
    fit = fit_step_cost(state.step_samples, model_for_method(prior, inputs.spec.speculation.method.value))
    if fit.model is not None:
        return StepModel(fit.model, fit, f"the deployment's own fit ({fit.note})")
    if inputs.fit.calibrated:
        return StepModel(prior, fit, f"profile {prior.name}, calibrated on this set-up")
    thin = fit.samples < MIN_SAMPLES or fit.buckets < MIN_BUCKETS
    own = (
        f"its own fit needs {MIN_SAMPLES} settled windows over {MIN_BUCKETS} load buckets ({fit.samples} over "
        f"{fit.buckets} so far)"
        if thin
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
) -> ThresholdPlan | None:
    """The threshold/schedule fit priced with the usable step model (usable_step_model); filed in `evidence`."""
    step_model = usable_step_model(inputs, state)
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
    the K = 0 tax is paid. Found in the simulator: a schedule with K = 0 above 64 at a sustained batch of 181 held
    ("acceptance NoData") forever. The K = 0 comparison then runs with the newest acceptance the baseline record
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
    inputs: PolicyInputs, state: PolicyState, acceptance: float, batch: float | None
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
    step_model = usable_step_model(inputs, state)
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


def _speed(inputs: PolicyInputs, state: PolicyState, now: datetime) -> SpeedVerdict:
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
    out of scope.

    `step_model`: what the steps are priced with (usable_step_model); without a usable one nothing is refitted.
    """
    spec = inputs.spec
    at = spec.autotune
    version = VllmVersion.parse(spec.engine.version)
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
        version=version,
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
        settings=replace(inputs.fit, model=step_model.model),
        drafter_memory=drafter_memory(spec, m),
        forgone_s=state.forgone_s,
        forecast=_forecast(state.request_rates, inputs.fit.horizon_s),
        anchor=None if state.streak is None else anchor_intent(state.streak.key, refit_action(support).value),
        objective=at.objective,
        declared_k=spec.speculation.num_speculative_tokens,
    )


def _forecast(samples: Sequence[RateSample], horizon_s: float) -> Forecast | None:
    """The projected rise of the offered load over the next stretch (forecast.py), or None without a sustained one."""
    trend, why = rising_trend(samples)
    if trend is None:
        return None
    ahead = projection_ahead_s(trend, horizon_s)
    return Forecast(tuple(projected_ratios(trend, ahead)), ahead, why, trend.to_dict())


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
    if off is not None and off.kind is OffReason.LOAD and load is LoadSinceOff.LOWER:
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


# ------------------------------------------------------------------------------------------------ budget


def _same_intent(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as intents: status keeps no null members (a merge patch deletes them), so JSON text differs."""
    return intent_from_dict(a) == intent_from_dict(b)


def quick_reversal_window(budget: BudgetSpec) -> timedelta:
    """How soon an actuation that undoes the previous one counts as a reversal (and lengthens the next dwell)."""
    return max(timedelta(hours=1), 4 * timedelta(seconds=parse_duration(budget.min_interval)))


def is_reversal(
    history: tuple[ActuationRecord, ...],
    current: SpeculationIntent,
    target: SpeculationIntent,
    now: datetime,
    budget: BudgetSpec,
) -> bool:
    """Does applying `target` now undo the previous actuation quickly (within max(1h, 4 x minInterval))?"""
    if not history:
        return False
    last = history[-1]
    return (
        _same_intent(last.to_intent, intent_to_dict(current))
        and _same_intent(last.from_intent, intent_to_dict(target))
        and now - last.at <= quick_reversal_window(budget)
    )


def required_dwell(history: tuple[ActuationRecord, ...], budget: BudgetSpec, *, reversing: bool) -> timedelta:
    """minInterval x reversalBackoff^n, n = trailing reversals (+1 if this one reverses too), capped at one day."""
    chain = 0
    for record_ in reversed(history):
        if not record_.reversal:
            break
        chain += 1
    return dwell_after(budget, chain + (1 if reversing else 0))


def dwell_after(budget: BudgetSpec, reversals: int) -> timedelta:
    """The dwell after an actuation that ends a chain of `reversals` reversals: minInterval x reversalBackoff^n,
    capped at MAX_DWELL."""
    dwell = parse_duration(budget.min_interval) * budget.reversal_backoff**reversals
    return min(timedelta(seconds=dwell), MAX_DWELL)


def budget_check(
    state: PolicyState, budget: BudgetSpec, current: SpeculationIntent, target: SpeculationIntent, now: datetime
) -> tuple[bool, str]:
    """(allowed, why not): dwell since the last actuation, then per rolling hour and day."""
    history = state.actuations
    reversing = is_reversal(history, current, target, now, budget)
    if history:
        dwell = required_dwell(history, budget, reversing=reversing)
        ready = history[-1].at + dwell
        if now < ready:
            why = (
                f" (x{budget.reversal_backoff:g} per reversal)"
                if dwell > timedelta(seconds=parse_duration(budget.min_interval))
                else ""
            )
            return False, (
                f"last actuation at {format_time(history[-1].at)}; dwell {format_duration(dwell.total_seconds())}"
                f"{why}, next allowed at {format_time(ready)}"
            )
    for span, limit, name in (
        (timedelta(hours=1), budget.max_per_hour, "maxPerHour"),
        (timedelta(days=1), budget.max_per_day, "maxPerDay"),
    ):
        recent = [a for a in history if now - a.at < span]
        if len(recent) >= limit:
            next_at = f", next allowed at {format_time(recent[0].at + span)}" if recent else ""
            return (
                False,
                f"{len(recent)} actuations in the last {format_duration(span.total_seconds())} "
                f"({name} {limit}){next_at}",
            )
    return True, ""


def record_actuation(
    state: PolicyState, decision: Decision, current: SpeculationIntent, now: datetime, budget: BudgetSpec
) -> PolicyState:
    """The state after the shell applied `decision.target` (call only after the apply succeeded)."""
    reversal = is_reversal(state.actuations, current, decision.target, now, budget)
    entry = ActuationRecord(
        at=now,
        action=decision.action,
        from_intent=intent_to_dict(current),
        to_intent=intent_to_dict(decision.target),
        reason=decision.reason,
        probe=decision.probe,
        reversal=reversal,
    )
    keep_after = now - timedelta(days=1)
    history = [a for a in state.actuations if a.at > keep_after] or list(state.actuations[-2:])
    history = [*history, entry][-ACTUATION_HISTORY:]
    off = state.off
    probe_started = state.probe_started
    last_probe = state.last_probe
    if decision.action is Action.DISABLE and decision.off_kind is not None:
        off = OffRecord(
            decision.off_kind,
            now,
            decision.batch,
            decision.reason.split(" over ")[0],
            decision.acceptance,
            decision.request_rate,
        )
        probe_started = None
    elif decision.action is Action.ENABLE:
        if decision.probe:
            probe_started = last_probe = now
        else:
            off = None
    return replace(
        state,
        actuations=tuple(history),
        selected=decision.target,
        off=off,
        probe_started=probe_started,
        last_probe=last_probe,
        streak=None,
        throttled=False,
        backlog_since=None,
        backlog_dropped=None,
        forgone_s=0.0,
    )


def record_candidate_trial(
    state: PolicyState, current: SpeculationIntent, target: SpeculationIntent, now: datetime, reason: str
) -> PolicyState:
    """The state after a one-pod trial of a candidate drafter was recorded: charged to the actuation budget like any
    actuation (a pod restarts for it), while the config autotune selected for every pod stays as it is. The record
    keeps the running drafter beside the running intent, so a failed promotion returns to both."""
    entry = ActuationRecord(
        at=now,
        action=Action.TRY_CANDIDATE,
        from_intent={**intent_to_dict(current), "drafter": state.drafter},
        to_intent=intent_to_dict(target),
        reason=reason,
    )
    keep_after = now - timedelta(days=1)
    history = [a for a in state.actuations if a.at > keep_after] or list(state.actuations[-2:])
    return replace(state, actuations=tuple([*history, entry][-ACTUATION_HISTORY:]))


def actuation_entry(
    decision: Decision, current: SpeculationIntent, now: datetime, mode: AutotuneMode
) -> dict[str, Any]:
    """One item for status.actuations (keep the last 10): when, from -> to, reason, the queries and their values."""
    return {
        "at": format_time(now),
        "action": decision.action.value,
        "mode": mode.value,
        "from": intent_to_dict(current),
        "to": intent_to_dict(decision.target),
        "reason": decision.reason,
        "probe": decision.probe,
        "evidence": decision.evidence,
    }


# ------------------------------------------------------------------------------------------------ decide


def _settled(inputs: PolicyInputs, now: datetime) -> tuple[bool, str]:
    """Metrics of a fresh config are trusted only after one full window plus two scrapes."""
    if inputs.config_since is None:
        return True, ""
    scrape = parse_duration(inputs.spec.autotune.scrape_interval)
    ready = inputs.config_since + timedelta(seconds=inputs.window.seconds + 2 * scrape)
    if now >= ready:
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
        state = replace(state, request_rates=add_rate(state.request_rates, RateSample(now, rate)))
    entry = entry_from_window(
        inputs.measurements,
        mode=Mode.ON if inputs.current.enabled else Mode.OFF,
        metric=at.latency.metric.value,
        min_requests=at.min_samples.requests,
        now=now,
    )
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


def measured_restart_s(
    state: PolicyState, config_since: datetime | None, spec: SpeculativeDeploymentSpec
) -> float | None:
    """What autotune's last restart cost: from its actuation to the rollout's completion, divided by the rollout's
    waves (manifests.rollout_waves), so it is one pod's restart. Only a completion within the rollout's budget
    (manifests.rollout_budget_seconds) after the actuation is its rollout; a later one is someone else's. The
    previous figure otherwise."""
    if not state.actuations or config_since is None:
        return state.restart_measured_s
    took = (config_since - state.actuations[-1].at).total_seconds()
    if not 0 < took <= manifests.rollout_budget_seconds(spec, spec.replicas):
        return state.restart_measured_s
    return took / max(1, manifests.rollout_waves(spec, spec.replicas))


def with_measured_restart(inputs: PolicyInputs, state: PolicyState) -> PolicyInputs:
    """The restart priced at this deployment's own measured restart once it has one (on its rollout path, rollcost);
    the profile's assumption before."""
    if state.restart_measured_s is None:
        return inputs
    cost = restart_cost_for(inputs.spec, state.restart_measured_s)
    return replace(inputs, fit=replace(inputs.fit, restart_cost_s=cost))


def _accrue_forgone(state: PolicyState, proposal: Proposal, *, interval_s: float, min_gain: float) -> PolicyState:
    """Add this evaluation's forgone serving to the rent-or-buy account (schedule.repaid_by_waiting): a refit's
    per-request speed-up at the load now times the interval. The account empties when there is no refit to install
    (none fitted, the fit already installed, or its gain at the load now within the model's error): it measures one
    stretch of load past the crossover, not a sum over every peak of the day."""
    plan = proposal.priced.plan
    rate = forgone_rate(None if plan is None else plan.gain_at_load, min_gain)
    if rate == 0:
        return replace(state, forgone_s=0.0) if state.forgone_s else state
    return replace(state, forgone_s=state.forgone_s + rate * interval_s)


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
            paused=False, probe=p.probe, off_kind=p.off_kind, batch=r.value(Signal.BATCH_SIZE),
            request_rate=r.value(Signal.REQUEST_RATE), acceptance=r.value(Signal.ACCEPTANCE_RATE),
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
    state = _accrue_forgone(state, proposal, interval_s=parse_duration(at.interval), min_gain=inputs.fit.min_gain)
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
        state = replace(state, restart_measured_s=measured_restart_s(state, inputs.config_since, inputs.spec))
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
    if (acceptance is not None and acceptance >= inputs.spec.autotune.acceptance.enable_above) or _speed(
        inputs, state, now
    ).outcome is Speed.FASTER:
        return replace(state, probe_started=None, off=None)
    return state


@dataclass(frozen=True)
class _Wait:
    """How long an agreed proposal waits: the stabilization span, and why it is shorter where it is."""

    window: timedelta
    shortened: bool  # priced by the change's own payback (agreement.stabilization_for)
    bought: bool  # rent or buy: the forgone serving already repaid the restart (schedule.repaid_by_waiting)
    restart_s: float  # the restart as priced (under a hopeless backlog: the work it drops in time)
    gain: float
    gain_source: str


def _agree(v: _Verdict, state: PolicyState) -> tuple[_Wait, PolicyState]:
    """Continue or start the agreement streak (agreement.py) and price its wait; the evidence says both."""
    r, proposal = v.round, v.proposal
    at, streak = r.inputs.spec.autotune, state.streak
    key = proposal.key()
    max_num_seqs = r.inputs.spec.engine.max_num_seqs
    shed = sheds(r.inputs.current, proposal.target, max_num_seqs)
    agrees = streak is not None and keys_agree(streak.key, key)
    # the proposal continues the streak: the same decision, a further shed of it, or the same shape with boundaries
    # past the tolerance that the cost model cannot tell from the anchor's (agreement.py)
    further = (
        streak is not None and not agrees and shed and further_shed(streak.key, key, r.inputs.current, max_num_seqs)
    )
    gain_vs_anchor = _largest_gain_vs_anchor(proposal)
    by_effect = (
        streak is not None
        and not agrees
        and not further
        and agree_by_effect(streak.key, key, gain_vs_anchor, r.inputs.fit.min_gain)
    )
    wait = _stabilization(r, state, proposal, shed=shed, continues=agrees or further or by_effect)
    needed = at.agreeing_evaluations
    interval = timedelta(seconds=parse_duration(at.interval))
    if r.fresh_token:
        streak = Streak(key, proposal.action, needed, r.now - wait.window)
    elif streak is not None and (agrees or by_effect):
        # the same decision; once agreed, the anchor follows the newest fit: the decision is made and waits only
        # for a gate (budget, backlog), so a boundary drifting a batch at a time must not restart the window
        agreed = streak.count >= needed and stabilized(r.now - streak.since, wait.window, priced=wait.shortened,
                                                       interval=interval)  # fmt: skip
        streak = replace(streak, count=streak.count + 1, key=key if agreed else streak.key)
    elif streak is not None and further:
        # a further shed than the streak's first proposal: the same decision in the safe direction, newest applied
        streak = replace(streak, count=streak.count + 1, key=key)
    else:
        streak = Streak(key, proposal.action, 1, r.now, r.value(Signal.WAITING_REQUESTS))
    state = replace(state, streak=streak)
    v.evidence["agreement"] = _agreement_evidence(r, state, wait, by_effect=by_effect)
    return wait, state


def _stabilization(r: _Round, state: PolicyState, proposal: Proposal, *, shed: bool, continues: bool) -> _Wait:
    """A shed waits no longer than it takes to repay its restart (agreement.stabilization_for), priced by its own
    gain only (prices_its_own_gain) and, under a hopeless backlog, at the work the restart drops in time; a refit
    bought by waiting waits only for the agreeing evaluations. A change toward more speculation keeps the span."""
    at, fit = r.inputs.spec.autotune, r.inputs.fit
    own = prices_its_own_gain(proposal)
    gain, source = proposal_gain(proposal.priced, 0.0, at_load=True) if own else (0.0, "")
    restart_s = fit.restart_cost_s
    if shed and own:
        queue = queue_when_proposed(state.streak) if continues and not r.fresh_token else None
        under_backlog = restart_seconds_under_backlog(
            r.inputs.measurements, restart_cost_s=restart_s, ttft_deadline_s=ttft_deadline_s(at.latency),
            queue_before=queue, now=r.now,
        )  # fmt: skip
        if under_backlog is not None and under_backlog < restart_s:
            restart_s = under_backlog
    span = timedelta(seconds=parse_duration(at.stabilization))
    window, shortened = stabilization_for(span, gain, restart_s) if shed else (span, False)
    bought = shed and gain > 0 and proposal.priced.plan is not None and proposal.priced.plan.repaid_by_waiting
    if bought:
        window, shortened = timedelta(0), True
    return _Wait(window, shortened, bought, restart_s, gain, source)


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
    priced = (
        f"restart {wait.restart_s:.0f}s"
        if wait.restart_s >= fit.restart_cost_s
        else f"restart (priced at {wait.restart_s:.1f}s of serving: the work it drops that can still meet the TTFT "
        f"deadline, backlog.restart_seconds_under_backlog; nominal {fit.restart_cost_s:.0f}s)"
    )
    out["why"] = (
        f"waiting has already forgone {state.forgone_s:.0f}s of serving at the load, more than the {priced} "
        "(rent or buy, schedule.repaid_by_waiting): no further wait than the agreeing evaluations"
        if wait.bought
        else f"{priced} repaid by the change's {wait.gain:+.1%} ({wait.gain_source}) in "
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
    if state.streak.count >= needed and stabilized(stable, wait.window, priced=wait.shortened, interval=interval):
        return None, state
    span = (
        "0s (rent or buy: the serving forgone repaid the restart)"
        if wait.bought
        else format_duration(wait.window.total_seconds()) + " (the change's payback)"
        if wait.shortened
        else at.stabilization
    )
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
    (backlog.py); the first deferral's time is kept in the state so the wait is bounded across evaluations."""
    gain, source = proposal_gain(proposal.priced, inputs.spec.autotune.latency.regression_tolerance)
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
        queue_before=queue_when_proposed(state.streak) if prices_its_own_gain(proposal) else None,
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
            _evidence(inputs),
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
        batch=valid_value(inputs.measurements, Signal.BATCH_SIZE),
    )
