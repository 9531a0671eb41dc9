"""Which candidate drafter to try next on live traffic, and the verdict of its trial (pure).

Each of spec.speculation.candidates is tried one at a time through the one-pod trial (trial.py): the trial pod runs
the spec with the candidate's drafter in place of the declared one (v1alpha1.spec_running), beside the incumbent
pods, and is analysed by the trial's gates. Its record is status.candidates[i] (v1alpha1.CandidateStatus); the
operator reads back only each record's identity (name, method, drafter, K), verdict, trials, retryAfter and traffic.

Trials run in Auto and Recommend, where the deployment can spare a pod (trial.can_trial_candidates). A winner is
promoted in Auto; in Recommend its trial ends Recommended (the pod removed, the incumbent config kept) and it is
published as status.recommendation.drafter. One replica without surge runs no trial: every candidate stays Untried
with the reason, and nothing is recommended without measurements.

The order is the spec's: the first candidate that is Untried, or Lost / Inconclusive re-opened. A loser is remembered
with its evidence and the traffic it was measured on (MeasuredTraffic) and is not tried again until that traffic
shifts (traffic_shift: acceptance under the same incumbent config, or the length mix); an Inconclusive candidate is
also re-opened by its retry wait (probeInterval), since it lacked evidence rather than speed. A Won candidate is not
tried again. A verdict needs a margin: Won when the trial pod's mean time per output token is faster
than the incumbents' beyond spec.autotune.latency.regressionTolerance, Lost when slower beyond it (or its pod never
became ready), Inconclusive otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from specpilot.api import rollout, v1alpha1
from specpilot.api.timestamps import format_time, parse_time
from specpilot.api.v1alpha1 import (
    CandidateStatus,
    CandidateVerdict,
    MeasuredTraffic,
    SpeculationCandidate,
    TrialOutcome,
    TrialStatus,
)
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.policy.traffic import traffic_shift
from specpilot.vllm.intent import SpeculationIntent

NEEDS_MODE = "not tried: trials of candidate drafters run in spec.autotune.mode Auto or Recommend, not Off"
NEEDS_SPARE_POD = (
    "not tried: a trial needs a pod to spare (spec.replicas >= 2, or spec.rollout.maxSurge >= 1); "
    "one replica without surge is recommend-only"
)


def untried_reason(spec: v1alpha1.SpeculativeDeploymentSpec) -> str | None:
    """Why no candidate can be tried on this deployment; None when trials can run."""
    if spec.autotune.mode is v1alpha1.AutotuneMode.OFF:
        return NEEDS_MODE
    if not rollout.spare_pod(spec):
        return NEEDS_SPARE_POD
    return None


def _untried(candidate: SpeculationCandidate, reason: str | None) -> CandidateStatus:
    return CandidateStatus(
        name=candidate.name,
        method=candidate.method.value,
        drafter=candidate.drafter(),
        num_speculative_tokens=candidate.num_speculative_tokens,
        verdict=CandidateVerdict.UNTRIED,
        reason=reason,
    )


def _same_candidate(record: CandidateStatus, candidate: SpeculationCandidate) -> bool:
    identity = (candidate.name, candidate.method.value, candidate.drafter(), candidate.num_speculative_tokens)
    return (record.name, record.method, record.drafter, record.num_speculative_tokens) == identity


def read_records(stored: Any) -> list[CandidateStatus]:
    """status.candidates as stored; an unreadable element is dropped (its candidate starts Untried again)."""
    records: list[CandidateStatus] = []
    for raw in stored if isinstance(stored, list) else []:
        try:
            records.append(CandidateStatus.model_validate(raw))
        except ValueError:
            continue
    return records


def reconcile_records(spec: v1alpha1.SpeculativeDeploymentSpec, stored: Any) -> list[CandidateStatus]:
    """One record per spec candidate, in the spec's order: the stored one while the candidate is unchanged (same
    name, method, drafter and K), else Untried. An Untried record says why it cannot be tried where it cannot."""
    why = untried_reason(spec)
    kept = {r.name: r for r in read_records(stored)}
    records: list[CandidateStatus] = []
    for candidate in spec.speculation.candidates:
        record = kept.get(candidate.name)
        if record is None or not _same_candidate(record, candidate):
            record = _untried(candidate, why)
        elif record.verdict is CandidateVerdict.UNTRIED:
            record = record.model_copy(update={"reason": why})
        records.append(record)
    return records


def reopened(record: CandidateStatus, now: datetime, traffic: MeasuredTraffic | None) -> bool:
    """Whether a Lost or Inconclusive candidate may be tried again: the traffic shifted since its verdict, or (an
    Inconclusive one) its retry wait is over."""
    if record.verdict not in (CandidateVerdict.LOST, CandidateVerdict.INCONCLUSIVE):
        return False
    if traffic_shift(record.traffic, traffic) is not None:
        return True
    return record.retry_after is not None and now >= parse_time(record.retry_after)


def next_candidate(
    records: Sequence[CandidateStatus], now: datetime, traffic: MeasuredTraffic | None = None
) -> int | None:
    """The index of the candidate to try now: the first Untried, or the first Lost / Inconclusive re-opened by a
    traffic shift (or, Inconclusive, by its retry wait). A Won or Trialling candidate is not tried."""
    for index, record in enumerate(records):
        if record.verdict is CandidateVerdict.UNTRIED or reopened(record, now, traffic):
            return index
    return None


def trial_intent(current: SpeculationIntent, candidate: SpeculationCandidate) -> SpeculationIntent:
    """What the trial pod runs: speculation on with the candidate's K (the declared K where it has none) and the
    running threshold. A batch schedule tuned for the declared drafter is not carried over to another drafter."""
    k = candidate.num_speculative_tokens or current.num_speculative_tokens
    return SpeculationIntent(
        enabled=True, num_speculative_tokens=k, disable_above_batch_size=current.disable_above_batch_size
    )


def trialling(record: CandidateStatus, now: datetime) -> CandidateStatus:
    """The record once its trial is recorded (before the trial pod is created)."""
    return record.model_copy(
        update={
            "verdict": CandidateVerdict.TRIALLING,
            "trial_started": format_time(now),
            "trials": (record.trials or 0) + 1,
            "retry_after": None,
            "reason": "one pod runs this drafter beside the incumbent pods",
        }
    )


def verdict_of(trial: TrialStatus, tolerance: float) -> CandidateVerdict:
    """The verdict of a candidate's ended trial: a win or a loss needs a margin beyond the tolerance."""
    if trial.outcome is None or trial.outcome is TrialOutcome.FAILED:
        return CandidateVerdict.LOST  # never ready, or slower beyond the tolerance
    if trial.outcome is TrialOutcome.SUCCESSFUL and trials.faster_with_margin(trial.speedup, tolerance):
        return CandidateVerdict.WON
    return CandidateVerdict.INCONCLUSIVE


def concluded(
    record: CandidateStatus, trial: TrialStatus, tolerance: float, traffic: MeasuredTraffic | None = None
) -> CandidateStatus:
    """The record after its trial ended: verdict, both sides' figures, the evidence time, the traffic they were
    measured on, and (Inconclusive) the retry wait."""
    verdict = verdict_of(trial, tolerance)
    return record.model_copy(
        update={
            "verdict": verdict,
            "candidate": trial.candidate,
            "incumbent": trial.incumbent,
            "speedup": trial.speedup,
            "evidence_time": trial.ended_at,
            "retry_after": trial.retry_after if verdict is CandidateVerdict.INCONCLUSIVE else None,
            "reason": trial.reason,
            "traffic": traffic,
        }
    )


def recommended(spec: v1alpha1.SpeculativeDeploymentSpec, records: Sequence[CandidateStatus]) -> dict[str, Any] | None:
    """In Recommend, the drafter to switch to (status.recommendation.drafter): the Won candidate measured fastest
    against the incumbents. None in Auto (a winner is promoted instead) or when no candidate won."""
    if spec.autotune.mode is not v1alpha1.AutotuneMode.RECOMMEND:
        return None
    won = [r for r in records if r.verdict is CandidateVerdict.WON]
    if not won:
        return None
    best = max(won, key=lambda r: r.speedup or 0.0)
    return {
        "name": best.name,
        "method": best.method,
        "drafter": best.drafter,
        "numSpeculativeTokens": best.num_speculative_tokens,
        "speedup": best.speedup,
        "evidenceTime": best.evidence_time,
        "reason": f"set spec.speculation to candidate {best.name}: {best.reason}",
    }


def to_status(records: Sequence[CandidateStatus]) -> list[dict[str, Any]]:
    return [r.model_dump(by_alias=True, mode="json", exclude_none=True) for r in records]


def find(records: Sequence[CandidateStatus], name: str) -> int | None:
    return next((i for i, r in enumerate(records) if r.name == name), None)


def candidate_named(spec: v1alpha1.SpeculativeDeploymentSpec, name: str | None) -> SpeculationCandidate | None:
    return next((c for c in spec.speculation.candidates if c.name == name), None) if name else None
