"""The decision's types: its inputs, its durable state (status.autotune), a proposal and a decision (pure).

The state is a plain JSON document kept in `status.autotune`, so agreement streaks, the actuation budget, the
baseline record and the reason speculation was switched off survive operator restarts (HPA loses all of these on a
restart; KEP-853 explains why that causes instant scaling). Its records are scoped to the deployment's fingerprint
(`deployment_fingerprint`): a change of target, drafter, GPU, image or version starts them fresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specpilot.api.durations import parse_duration
from specpilot.api.timestamps import format_time, parse_time
from specpilot.api.v1alpha1 import (
    SpeculativeDeploymentSpec,
)
from specpilot.autotune.model.baseline import (
    BaselineEntry,
)
from specpilot.autotune.model.costprofile import GPU_PRODUCT_LABEL
from specpilot.autotune.model.forecast import RateSample
from specpilot.autotune.model.schedule import (
    FitSettings,
    ThresholdSupport,
)
from specpilot.autotune.model.stepfit import (
    StepSample,
)
from specpilot.autotune.policy.backlog import (
    Priced,
)
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Window
from specpilot.vllm.intent import (
    SpeculationIntent,
    intent_from_dict,
    intent_to_dict,
)

BASELINE_MAX_AGE = timedelta(days=1)  # older latency records describe another traffic mix
STATE_VERSION = 1


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
    # an experiment at saturation measured plain faster at that load: back on when the request rate falls below the
    # one it was measured at; its probe is not gated on the rate, which at saturation is the config's own
    SATURATION = "saturation"


@dataclass(frozen=True)
class Streak:
    """Consecutive evaluations proposing the same change."""

    key: str
    action: Action
    count: int
    since: datetime
    waiting: float | None = None  # the window's mean queue at the first proposal: the backlog's trend (backlog.py)

    def to_dict(self) -> dict[str, Any]:
        waiting = {} if self.waiting is None else {"waiting": self.waiting}
        return {
            "key": self.key,
            "action": self.action.value,
            "count": self.count,
            "since": format_time(self.since),
            **waiting,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Streak:
        return cls(
            key=str(raw["key"]),
            action=Action(raw["action"]),
            count=int(raw["count"]),
            since=parse_time(raw["since"]),
            waiting=_opt_float(raw.get("waiting")),
        )


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": format_time(self.at),
            "action": self.action.value,
            "from": self.from_intent,
            "to": self.to_intent,
            "reason": self.reason,
            "probe": self.probe,
            "reversal": self.reversal,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ActuationRecord:
        return cls(
            at=parse_time(raw["at"]),
            action=Action(raw["action"]),
            from_intent=dict(raw["from"]),
            to_intent=dict(raw["to"]),
            reason=str(raw.get("reason", "")),
            probe=bool(raw.get("probe", False)),
            reversal=bool(raw.get("reversal", False)),
        )


@dataclass(frozen=True)
class OffRecord:
    kind: OffReason
    at: datetime
    batch: float | None
    detail: str
    acceptance: float | None = None  # the window's acceptance when it was switched off (absent in older states)
    # the offered load then, in finished requests per second: unlike the batch, the config does not move it
    request_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        acceptance = {} if self.acceptance is None else {"acceptance": self.acceptance}
        rate = {} if self.request_rate is None else {"requestRate": self.request_rate}
        return {
            "kind": self.kind.value,
            "at": format_time(self.at),
            "batch": self.batch,
            "detail": self.detail,
            **acceptance,
            **rate,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> OffRecord:
        return cls(
            kind=OffReason(raw["kind"]),
            at=parse_time(raw["at"]),
            batch=_opt_float(raw.get("batch")),
            detail=str(raw.get("detail", "")),
            acceptance=_opt_float(raw.get("acceptance")),
            request_rate=_opt_float(raw.get("requestRate")),
        )


@dataclass(frozen=True)
class AcceptanceSeen:
    """The acceptance the running config was first measured at, in its first settled window since it went in that
    holds the evidence a fall needs (traffic.acceptance_for_fall): the acceptance its holding rests on where no model
    prices it (traffic.acceptance_fell)."""

    intent: SpeculationIntent
    rate: float
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"intent": intent_to_dict(self.intent), "rate": self.rate, "at": format_time(self.at)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AcceptanceSeen:
        return cls(intent_from_dict(raw["intent"]), float(raw["rate"]), parse_time(raw["at"]))


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
    # the finished-request rate of each evaluation over the last hour: where the offered load is heading (forecast.py)
    request_rates: tuple[RateSample, ...] = ()
    # seconds of serving one of this deployment's own restarts took, per wave and its drain included: from
    # autotune's last actuation to the rollout's completion, less its trial's analysis (measured_restart_s); None
    # until one was measured, when the profile's assumption prices it
    restart_measured_s: float | None = None
    acceptance_seen: AcceptanceSeen | None = None  # the running config's first measured acceptance (traffic.py)

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
            "streak": None if self.streak is None else self.streak.to_dict(),
            "lastRecommendation": self.last_recommendation,
            "actuations": [a.to_dict() for a in self.actuations],
            "selected": None if self.selected is None else intent_to_dict(self.selected),
            "drafter": self.drafter,
            "off": None if self.off is None else self.off.to_dict(),
            "probeStarted": _t(self.probe_started),
            "lastProbe": _t(self.last_probe),
            "baseline": [e.to_dict() for e in self.baseline],
            "load": {str(b): round(w, 1) for b, w in sorted(self.load.items())},
            "loadUpdated": _t(self.load_updated),
            "stepSamples": [s.to_dict() for s in self.step_samples],
            "stepSampled": _t(self.step_sampled),
            "backlogSince": _t(self.backlog_since),
            "backlogDropped": self.backlog_dropped,
            "requestRates": [r.to_list() for r in self.request_rates],
            "restartMeasuredSeconds": self.restart_measured_s,
            "acceptanceSeen": None if self.acceptance_seen is None else self.acceptance_seen.to_dict(),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> PolicyState:
        """Read status.autotune; a missing or foreign-version document starts fresh (nothing to trust in it)."""
        if not raw or raw.get("version") != STATE_VERSION:
            return cls()
        streak, off, seen = raw.get("streak"), raw.get("off"), raw.get("acceptanceSeen")
        return cls(
            spec_fingerprint=raw.get("specFingerprint"),
            intent_fingerprint=raw.get("intentFingerprint"),
            deployment_fingerprint=raw.get("deploymentFingerprint"),
            consecutive_errors=int(raw.get("consecutiveErrors", 0)),
            metrics_available=raw.get("metricsAvailable"),
            paused=bool(raw.get("paused", False)),
            throttled=bool(raw.get("throttled", False)),
            streak=None if not streak else Streak.from_dict(streak),
            last_recommendation=raw.get("lastRecommendation"),
            actuations=tuple(ActuationRecord.from_dict(a) for a in raw.get("actuations") or ()),
            selected=None if not raw.get("selected") else intent_from_dict(raw["selected"]),
            drafter=None if not raw.get("drafter") else str(raw["drafter"]),
            off=None if not off else OffRecord.from_dict(off),
            probe_started=_pt(raw.get("probeStarted")),
            last_probe=_pt(raw.get("lastProbe")),
            baseline=tuple(BaselineEntry.from_dict(e) for e in raw.get("baseline") or ()),
            load={int(b): float(w) for b, w in (raw.get("load") or {}).items()},
            load_updated=_pt(raw.get("loadUpdated")),
            step_samples=tuple(StepSample.from_dict(s) for s in raw.get("stepSamples") or ()),
            step_sampled=_pt(raw.get("stepSampled")),
            backlog_since=_pt(raw.get("backlogSince")),
            backlog_dropped=_opt_float(raw.get("backlogDropped")),
            request_rates=tuple(RateSample.from_list(r) for r in raw.get("requestRates") or ()),
            restart_measured_s=_opt_float(raw.get("restartMeasuredSeconds")),
            acceptance_seen=None if not seen else AcceptanceSeen.from_dict(seen),
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
    "off": None,
    "probe_started": None,
    "last_probe": None,
    "restart_measured_s": None,
    "streak": None,
    "backlog_since": None,
    "backlog_dropped": None,
    "acceptance_seen": None,
}


def _t(at: datetime | None) -> str | None:
    return None if at is None else format_time(at)


def _pt(text: Any) -> datetime | None:
    return None if not text else parse_time(str(text))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


PAUSED_BY_ANNOTATION = "annotation specpilot.dev/pause=true"


@dataclass(frozen=True)
class TrialSpan:
    """The last promoted one-pod trial as a rollout's timing sees it: when it started (its actuation's time) and the
    seconds from its pod's readiness to its promotion, which the rollout spent analysing, not restarting."""

    started: datetime
    analysed_s: float


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
    promoted_trial: TrialSpan | None = None  # the last trial that was promoted (measured_restart_s)

    def trusted_from(self) -> datetime | None:
        """When the running config's metrics are trusted: one full window plus two scrapes after every pod ran it
        (None: since always)."""
        if self.config_since is None:
            return None
        scrape = parse_duration(self.spec.autotune.scrape_interval)
        return self.config_since + timedelta(seconds=self.window.seconds + 2 * scrape)


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
    experiment: bool = False  # nothing priced it: one pod first, promoted only when measured faster

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
    experiment: bool = False  # the proposal's: its trial is promoted only when measured faster
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
