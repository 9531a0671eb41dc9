"""One pod first: the trial of a speculation config beside the incumbent pods, and its analysis (pure).

In Auto, an autotune change to a deployment that can spare one pod (spec.replicas >= 2, or maxSurge >= 1) first runs
on one pod only, behind the same Service, while the other pods keep the incumbent config. The trial is generic over
"a speculation config to try": it carries a `SpeculationIntent` and its config hash, and knows nothing of why it was
chosen.

Its life is a small state machine over `status.trial` (the typed record; the operator reads back only its intents,
hashes, times, phase, `extended`, `experiment`, `incumbent_tpot_before_ms`, `traffic_before` and `traffic`):

    Running --ready--> analysis at readyAt + window + 2 scrapes --Successful--> Promoted (every pod rolls to it;
                                                                                 a candidate drafter or an experiment
                                                                                 only when faster beyond the tolerance)
                       (sooner where decisive: beyond twice the tolerance either way, at any evaluation once the
                       sample, measured and load gates pass; for a gain to measure, the smaller of its two gains)
                                                               --Successful, a candidate drafter in Recommend-->
                                                                                 Recommended (trial pod removed)
                                                               --Failed--------> RolledBack (trial pod removed)
                                                               --Inconclusive--> extended once by the same span,
                                                                                 then RolledBack
    Running --not ready within one pod's rollout budget--> RolledBack
    Running --its config no longer wanted (spec edit, mode, pin)--> Abandoned

An Inconclusive analysis after its extension rolls back rather than promotes (Argo Rollouts would pause for a
person): automation must end in a known state, and the incumbent config is the one with evidence behind it. A rolled
back config is not tried again before `retryAfter` (its end + spec.autotune.probeInterval) unless the traffic shifts
from the traffic the trial ended on (`traffic`, as a losing candidate drafter is re-opened).

The analysis is in the HPA's shape: one typed observation (`TrialObservation`, the two groups' figures over the same
window and traffic) -> named gates in a fixed order (`GATES`) -> one outcome.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from specpilot.api import rollout, v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.api.timestamps import format_time, parse_time
from specpilot.api.v1alpha1 import MeasuredTraffic, TrialOutcome, TrialPhase, TrialStatus
from specpilot.autotune.model.speed import COMPARABLE_BATCH_FACTOR
from specpilot.autotune.policy.state import TrialSpan
from specpilot.autotune.policy.traffic import traffic_shift
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Signal
from specpilot.reconcile import manifests
from specpilot.vllm.intent import SpeculationIntent, intent_from_dict, intent_to_dict

# How many times an Inconclusive analysis gets one more analysis span before the trial rolls back.
EXTENSIONS = 1
# The gates of one analysis, in the order they are applied; the first that does not pass names the outcome.
GATES = ("sample", "measured", "load", "speed")


# ------------------------------------------------------------------------------------------------ observation


@dataclass(frozen=True)
class GroupFigures:
    """One side of the comparison over the analysis window: the trial pod, or the incumbent pods together."""

    tpot_mean_s: float | None
    batch: float | None
    requests: float | None
    token_rate: float | None = None  # generated tokens per second, all pods of the group together
    acceptance: float | None = None
    mean_acceptance_length: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None
    request_rate: float | None = None  # finished requests per second, all pods of the group together

    @classmethod
    def of(cls, measurements: Mapping[str, Measurement]) -> GroupFigures:
        def v(signal: Signal) -> float | None:
            return valid_value(measurements, signal)

        return cls(
            tpot_mean_s=v(Signal.TPOT_MEAN),
            batch=v(Signal.BATCH_SIZE),
            requests=v(Signal.REQUESTS_IN_WINDOW),
            token_rate=v(Signal.GENERATION_TOKEN_RATE),
            acceptance=v(Signal.ACCEPTANCE_RATE),
            mean_acceptance_length=v(Signal.MEAN_ACCEPTANCE_LENGTH),
            tpot_p50_s=v(Signal.TPOT_P50),
            tpot_p99_s=v(Signal.TPOT_P99),
            request_rate=v(Signal.REQUEST_RATE),
        )

    def to_status(self, pods: int) -> dict[str, Any]:
        """status.trial.candidate / .incumbent (v1alpha1.TrialFigures): evidence for people, never read back."""

        def ms(seconds: float | None) -> float | None:
            return None if seconds is None else round(seconds * 1000, 3)

        per_pod = None if self.token_rate is None or pods < 1 else round(self.token_rate / pods, 2)
        figures = v1alpha1.TrialFigures(
            output_tokens_per_second=per_pod,
            mean_batch_size=_rounded(self.batch, 2),
            acceptance_rate=_rounded(self.acceptance, 4),
            mean_acceptance_length=_rounded(self.mean_acceptance_length, 3),
            p50_tpot_ms=ms(self.tpot_p50_s),
            p99_tpot_ms=ms(self.tpot_p99_s),
            requests=None if self.requests is None else int(self.requests),
        )
        return figures.model_dump(by_alias=True, exclude_none=True)


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class TrialObservation:
    """What one evaluation measured of both groups, over the same window of the same live traffic; the incumbent
    group's figures are its `incumbent_pods` pods together (batch: their mean)."""

    candidate: GroupFigures
    incumbent: GroupFigures
    incumbent_pods: int = 1
    incumbent_traffic: MeasuredTraffic | None = None  # what the incumbents serve now (acceptance, length mix)


@dataclass(frozen=True)
class AnalysisSettings:
    min_requests: float  # finished requests each group needs in the window (spec.autotune.minSamples.requests)
    tolerance: float  # a slowdown within it is noise (spec.autotune.latency.regressionTolerance)

    @classmethod
    def of(cls, spec: v1alpha1.SpeculativeDeploymentSpec) -> AnalysisSettings:
        at = spec.autotune
        return cls(min_requests=float(at.min_samples.requests), tolerance=at.latency.regression_tolerance)


@dataclass(frozen=True)
class Analysis:
    outcome: TrialOutcome
    gate: str  # the gate that decided (one of GATES)
    reason: str
    speedup: float | None = None  # incumbent over candidate mean TPOT: > 1 means the trial pod is faster


def analyse(observation: TrialObservation, settings: AnalysisSettings) -> Analysis:
    """The gates in order: enough requests on each side, mean TPOT and batch measured on each side, comparable
    load (per-pod batch or request rate, COMPARABLE_BATCH_FACTOR), then speed. The trial fails when its mean time
    per output token is slower than the incumbent's beyond the tolerance, and succeeds otherwise: the decision that
    proposed it already priced its gain, and the trial is the guard against that model being wrong on this traffic."""
    cand, inc = observation.candidate, observation.incumbent
    for side, group in (("trial pod", cand), ("incumbent pods", inc)):
        if group.requests is None or group.requests < settings.min_requests:
            have = "no" if group.requests is None else f"{group.requests:.0f}"
            why = f"{side}: {have} finished requests in the window, {settings.min_requests:.0f} needed"
            return Analysis(TrialOutcome.INCONCLUSIVE, "sample", why)
    c_tpot, c_batch, i_tpot, i_batch = cand.tpot_mean_s, cand.batch, inc.tpot_mean_s, inc.batch
    if c_tpot is None or c_batch is None or i_tpot is None or i_batch is None:
        side = "trial pod" if c_tpot is None or c_batch is None else "incumbent pods"
        return Analysis(TrialOutcome.INCONCLUSIVE, "measured", f"{side}: mean TPOT or batch not measured")
    c_rate = cand.request_rate
    i_rate = None if inc.request_rate is None else inc.request_rate / max(1, observation.incumbent_pods)
    if not (_within(c_batch, i_batch, 0.5) or _within(c_rate, i_rate, 1e-3)):
        rates = "" if c_rate is None or i_rate is None else f", {c_rate:.2f} vs {i_rate:.2f} requests/s per pod"
        why = f"load not comparable: batch {c_batch:.1f} on the trial pod vs {i_batch:.1f} on the incumbents{rates}"
        return Analysis(TrialOutcome.INCONCLUSIVE, "load", why)
    ratio = c_tpot / i_tpot if i_tpot > 0 else math.inf
    speedup = _speedup(ratio)
    shown = (
        f"mean TPOT {c_tpot * 1000:.2f} ms on the trial pod vs {i_tpot * 1000:.2f} ms on the incumbents "
        f"({ratio - 1:+.0%}) at batch {c_batch:.1f}/{i_batch:.1f}"
    )
    if ratio > 1 + settings.tolerance:
        return Analysis(TrialOutcome.FAILED, "speed", f"{shown}: slower beyond {settings.tolerance:.0%}", speedup)
    bar = "faster" if faster_with_margin(speedup, settings.tolerance) else "not slower"
    return Analysis(TrialOutcome.SUCCESSFUL, "speed", f"{shown}: {bar} beyond {settings.tolerance:.0%}", speedup)


def _speedup(ratio: float) -> float | None:
    """Incumbent over trial-pod mean TPOT, to 4 places, from `ratio` (trial pod over incumbents); None when either
    is zero."""
    return None if ratio == 0 or math.isinf(ratio) else round(1 / ratio, 4)


# An analysis concludes before its span only beyond this multiple of regressionTolerance, either way (`decisive`).
DECISIVE_FACTOR = 2
DECISIVE_BAR = "faster or slower beyond twice the tolerance"


def decisive(verdict: Analysis, tolerance: float) -> bool:
    """Whether an analysis may conclude before its span is over: it passed the sample, measured and load gates, and
    the trial pod was faster or slower than the incumbents beyond twice the tolerance. The analysis runs at every
    evaluation, so an early conclusion on a difference within the span's own bar would be a test repeated until it
    passes; twice the tolerance keeps a difference that size rare to reach by noise on the minimum sample, while a
    change that ends a saturated config's misses (or a config that is clearly slower) acts an analysis span sooner.
    A trial that must measure its gain (`needs_gain`) is judged on `measured_gain`'s verdict, the smaller of its
    speedups over the incumbents during and before the trial: the backlog of the trial pod's own restart inflates
    only the first, so a fresh pod does not conclude early on the flattery of that backlog (`advance` waits for the
    span where there is no figure from before the trial)."""
    if verdict.gate != "speed" or verdict.speedup is None or verdict.speedup <= 0:
        return False
    margin = DECISIVE_FACTOR * tolerance
    return faster_with_margin(verdict.speedup, margin) or faster_with_margin(1 / verdict.speedup, margin)


def _within(a: float | None, b: float | None, floor: float) -> bool:
    """Whether two loads are within COMPARABLE_BATCH_FACTOR of each other (each raised to `floor`)."""
    if a is None or b is None:
        return False
    low, high = sorted((max(a, floor), max(b, floor)))
    return high / low <= COMPARABLE_BATCH_FACTOR


# ------------------------------------------------------------------------------------------------ lifecycle


def faster_with_margin(speedup: float | None, tolerance: float) -> bool:
    """Whether the trial pod was faster than the incumbents beyond the tolerance: the bar a candidate drafter must
    clear to replace the running one (a change of drafter must pay for itself, not merely not hurt)."""
    return speedup is not None and speedup > 1 + tolerance


def readiness_deadline(spec: v1alpha1.SpeculativeDeploymentSpec) -> timedelta:
    """How long the trial pod may take to become ready: one pod replacement (manifests.rollout_budget_seconds)."""
    return timedelta(seconds=manifests.rollout_budget_seconds(spec, 1))


def can_trial_candidates(spec: v1alpha1.SpeculativeDeploymentSpec) -> bool:
    """Trials of candidate drafters: Auto (the winner is promoted) and Recommend (the winner is recommended, its pod
    removed), with a pod to spare. Off runs none."""
    return spec.autotune.mode is not v1alpha1.AutotuneMode.OFF and rollout.spare_pod(spec)


def may_run(spec: v1alpha1.SpeculativeDeploymentSpec, trial: TrialStatus) -> bool:
    """Whether `trial` may keep its pod under this spec: a candidate drafter's by can_trial_candidates, an autotune
    change's by rollout.can_trial."""
    return can_trial_candidates(spec) if trial.candidate_name is not None else rollout.can_trial(spec)


def read_trial(status: Mapping[str, Any]) -> TrialStatus | None:
    """status.trial as stored, or None when absent or unreadable (a malformed record starts no trial pod)."""
    raw = status.get("trial")
    if not isinstance(raw, Mapping):
        return None
    try:
        return TrialStatus.model_validate(raw)
    except ValueError:
        return None


def running(status: Mapping[str, Any]) -> TrialStatus | None:
    trial = read_trial(status)
    return trial if trial is not None and trial.phase is TrialPhase.RUNNING else None


def promoted_span(status: Mapping[str, Any]) -> TrialSpan | None:
    """The last trial's start and analysis (readyAt to endedAt) where it was promoted, so that its rollout went on to
    every pod; None otherwise."""
    trial = read_trial(status)
    if trial is None or trial.phase is not TrialPhase.PROMOTED or trial.ready_at is None or trial.ended_at is None:
        return None
    analysed = parse_time(trial.ended_at) - parse_time(trial.ready_at)
    return TrialSpan(parse_time(trial.started_at), max(0.0, analysed.total_seconds()))


def trial_intent(trial: TrialStatus) -> SpeculationIntent:
    return intent_from_dict(trial.intent.model_dump(by_alias=True))


def incumbent_intent(trial: TrialStatus) -> SpeculationIntent:
    return intent_from_dict(trial.incumbent_intent.model_dump(by_alias=True))


def start(
    *, intent: SpeculationIntent, config_hash: str, incumbent: SpeculationIntent, incumbent_hash: str, action: str,
    now: datetime, candidate_name: str | None = None, experiment: bool = False,
    incumbent_tpot_before_ms: float | None = None, traffic_before: MeasuredTraffic | None = None,
) -> TrialStatus:  # fmt: skip
    """The record of a new trial, written to status before its pod is created. `candidate_name`: the trial pod runs
    that spec.speculation.candidates element's drafter instead of the declared one. `experiment`: nothing priced the
    change. Both are promoted only on a measured gain (`needs_gain`), over the incumbents as they ran before the
    trial too (`incumbent_tpot_before_ms`, `measured_gain`) while the traffic holds (`traffic_before`)."""
    guarded = experiment or candidate_name is not None
    return TrialStatus.model_validate(
        {
            "intent": intent_to_dict(intent),
            "configHash": config_hash,
            "incumbentIntent": intent_to_dict(incumbent),
            "incumbentConfigHash": incumbent_hash,
            "action": action,
            "candidateName": candidate_name,
            "phase": TrialPhase.RUNNING,
            "startedAt": format_time(now),
            "experiment": experiment,
            "incumbentTpotBeforeMs": incumbent_tpot_before_ms if guarded else None,
            "trafficBefore": traffic_before.model_dump(by_alias=True) if guarded and traffic_before else None,
        }
    )


def _barred(trial: TrialStatus | None, target: SpeculationIntent, now: datetime) -> bool:
    """`target` is a config its trial rolled back, and its retryAfter is still ahead. A candidate drafter's trial
    says nothing of the declared drafter's configs: its retry wait is the candidate's own (status.candidates)."""
    if trial is None or trial.phase is not TrialPhase.ROLLED_BACK or trial.retry_after is None:
        return False
    if trial.candidate_name is not None:
        return False
    return trial_intent(trial) == target and now < parse_time(trial.retry_after)


def blocks_retry(
    trial: TrialStatus | None, target: SpeculationIntent, now: datetime, traffic: MeasuredTraffic | None
) -> bool:
    """A config rolled back by its trial is not tried again before retryAfter, unless the traffic (`traffic`, the
    incumbents' now) shifted from the traffic the trial ended on: its verdict says nothing of other traffic."""
    return _barred(trial, target, now) and traffic_shift(trial.traffic if trial else None, traffic) is None


def reopened_by(
    trial: TrialStatus | None, target: SpeculationIntent, now: datetime, traffic: MeasuredTraffic | None
) -> str | None:
    """The traffic shift, in words, that lets a config its trial rolled back be tried again before retryAfter; None
    where no retry wait holds it or the traffic did not shift."""
    return traffic_shift(trial.traffic, traffic) if trial is not None and _barred(trial, target, now) else None


@dataclass(frozen=True)
class Step:
    """One evaluation of a running trial: its new record, and whether it ended (and how)."""

    trial: TrialStatus
    ended: TrialPhase | None = None  # Promoted or RolledBack when this step ended it
    event: tuple[str, str, str] | None = None  # (type, reason, message)


def advance(
    trial: TrialStatus,
    *,
    spec: v1alpha1.SpeculativeDeploymentSpec,
    ready: bool,
    observation: TrialObservation,
    now: datetime,
) -> Step:
    """Move a Running trial on by one evaluation: wait for its pod, wait for the analysis, then conclude."""
    if trial.ready_at is None:
        if not ready:
            if now - parse_time(trial.started_at) > readiness_deadline(spec):
                why = f"the trial pod did not become ready within {readiness_deadline(spec)}"
                return _rolled_back(trial, spec, now, why)
            return Step(trial)
        analysis_at = format_time(now + rollout.analysis_span(spec))
        trial = trial.model_copy(update={"ready_at": format_time(now), "analysis_at": analysis_at})
    assert trial.analysis_at is not None
    settings = AnalysisSettings.of(spec)
    verdict = analyse(observation, settings)
    before_ms, stale = yardstick_before(trial, observation.incumbent_traffic)
    if needs_gain(trial):
        verdict = measured_gain(verdict, observation.candidate, before_ms)
        verdict = replace(verdict, reason=f"{verdict.reason}; {stale}") if stale else verdict
    early = now < parse_time(trial.analysis_at)
    if early and not _may_end_early(trial, verdict, settings.tolerance, before_ms):
        return Step(trial)
    if early:
        verdict = replace(verdict, reason=f"{verdict.reason} (decisive before {trial.analysis_at}: {DECISIVE_BAR})")
    trial = trial.model_copy(
        update={
            "outcome": verdict.outcome,
            "candidate": v1alpha1.TrialFigures.model_validate(observation.candidate.to_status(1)),
            "incumbent": v1alpha1.TrialFigures.model_validate(
                observation.incumbent.to_status(observation.incumbent_pods)
            ),
            "speedup": verdict.speedup,
            "reason": f"{verdict.gate}: {verdict.reason}",
        }
    )
    return _conclude(trial, verdict, spec, now, settings.tolerance)


def _conclude(
    trial: TrialStatus, verdict: Analysis, spec: v1alpha1.SpeculativeDeploymentSpec, now: datetime, tolerance: float
) -> Step:
    """The end of an analysis by its verdict: promoted, recommended, rolled back, or extended once when
    Inconclusive. `tolerance`: spec.autotune.latency.regressionTolerance, as the analysis read it."""
    stamp, candidate = format_time(now), trial.candidate_name
    successful = verdict.outcome is TrialOutcome.SUCCESSFUL
    if successful and needs_gain(trial) and not faster_with_margin(verdict.speedup, tolerance):
        why = f"{_challenger(trial)} not faster beyond {tolerance:.0%}: {verdict.reason}"
        return _rolled_back(trial.model_copy(update={"reason": f"{verdict.gate}: {why}"}), spec, now, why)
    if successful and candidate is not None and spec.autotune.mode is not v1alpha1.AutotuneMode.AUTO:
        done = trial.model_copy(update={"phase": TrialPhase.RECOMMENDED, "ended_at": stamp})
        message = (
            f"candidate {candidate} recommended, not promoted (spec.autotune.mode {spec.autotune.mode.value}); "
            f"its pod is removed and the incumbent config stays: {verdict.reason}"
        )
        return Step(done, TrialPhase.RECOMMENDED, ("Normal", "TrialRecommended", message))
    if successful:
        done = trial.model_copy(update={"phase": TrialPhase.PROMOTED, "ended_at": stamp})
        return Step(done, TrialPhase.PROMOTED, ("Normal", "TrialPromoted", f"promoted to every pod: {verdict.reason}"))
    if verdict.outcome is TrialOutcome.INCONCLUSIVE and not trial.extended:
        later = format_time(now + rollout.analysis_span(spec))
        extended = trial.model_copy(update={"extended": True, "analysis_at": later})
        return Step(extended, None, ("Normal", "TrialInconclusive", f"{verdict.reason}; analysing again at {later}"))
    return _rolled_back(trial, spec, now, verdict.reason)


def _may_end_early(trial: TrialStatus, verdict: Analysis, tolerance: float, before_ms: float | None) -> bool:
    """Whether this verdict ends the trial before analysisAt: a decisive one, and for a gain to measure only when it
    was also measured against the incumbents before the trial (`before_ms`, yardstick_before); without that figure
    the comparison during the trial, which the backlog of the trial pod's own restart can flatter, waits for the
    span."""
    promising = verdict.outcome is TrialOutcome.SUCCESSFUL
    unguarded = needs_gain(trial) and promising and not before_ms
    return decisive(verdict, tolerance) and not unguarded


def yardstick_before(trial: TrialStatus, traffic_now: MeasuredTraffic | None) -> tuple[float | None, str]:
    """The incumbents' mean TPOT from before the trial (`incumbentTpotBeforeMs`) while the traffic holds, with ""; once
    the incumbents' traffic (`traffic_now`) has shifted from the traffic that figure was measured on
    (`trafficBefore`), None and why: the incumbents before the trial served other traffic, and only the comparison
    during the trial, on the same traffic, applies (it then waits for the whole analysis span)."""
    shift = traffic_shift(trial.traffic_before, traffic_now)
    if shift is None or not trial.incumbent_tpot_before_ms:
        return trial.incumbent_tpot_before_ms, ""
    return None, f"the incumbents' figure from before the trial set aside: the traffic shifted since ({shift})"


def needs_gain(trial: TrialStatus) -> bool:
    """Whether only a measured gain promotes the trial: a candidate drafter (a change of drafter must pay for itself)
    and an experiment (nothing priced it). Within the noise the incumbent config stays. An autotune change the
    decision priced needs only not to be slower: the trial guards against the model being wrong."""
    return trial.candidate_name is not None or trial.experiment


def measured_gain(verdict: Analysis, candidate: GroupFigures, before_ms: float | None) -> Analysis:
    """The verdict of a trial that must measure its gain (`needs_gain`: a candidate drafter, an experiment) against
    the incumbents both during the trial and as they ran before it: the smaller speedup counts. During the trial
    pod's restart the incumbents carry its traffic, and the backlog can inflate their time per token for the whole
    analysis, flattering a fresh trial pod; before the trial they ran at their own load."""
    c_tpot = candidate.tpot_mean_s
    if verdict.outcome is not TrialOutcome.SUCCESSFUL or not before_ms or c_tpot is None or verdict.speedup is None:
        return verdict
    ratio = c_tpot * 1000 / before_ms
    before = _speedup(ratio)
    if before is None or before >= verdict.speedup:
        return verdict
    why = f"{verdict.reason}; {before_ms:.2f} ms on the incumbents before the trial ({ratio - 1:+.0%})"
    return replace(verdict, speedup=before, reason=why)


def _challenger(trial: TrialStatus) -> str:
    return f"candidate {trial.candidate_name}" if trial.candidate_name else "the experiment's trial pod"


def _rolled_back(trial: TrialStatus, spec: v1alpha1.SpeculativeDeploymentSpec, now: datetime, why: str) -> Step:
    retry = format_time(now + timedelta(seconds=parse_duration(spec.autotune.probe_interval)))
    done = trial.model_copy(
        update={
            "phase": TrialPhase.ROLLED_BACK,
            "ended_at": format_time(now),
            "retry_after": retry,
            "reason": trial.reason or why,
        }
    )
    message = f"rolled back, the incumbent config stays: {why}; not tried again before {retry}"
    return Step(done, TrialPhase.ROLLED_BACK, ("Warning", "TrialRolledBack", message))


def abandon(trial: TrialStatus, now: datetime, why: str) -> Step:
    done = trial.model_copy(update={"phase": TrialPhase.ABANDONED, "ended_at": format_time(now), "reason": why})
    return Step(done, TrialPhase.ABANDONED, ("Normal", "TrialAbandoned", f"trial pod removed: {why}"))


def to_status(trial: TrialStatus) -> dict[str, Any]:
    return trial.model_dump(by_alias=True, mode="json", exclude_none=True)
