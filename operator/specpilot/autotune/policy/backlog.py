"""A restart while requests queue: wait, or pay for the dropped work (pure).

Every actuation restarts vLLM pods (the speculative config is fixed at engine start): the requests they run and the
requests queued on them (vLLM's `num_requests_waiting`) are aborted, and the arrivals during the restart find no ready
endpoint. At low load that is a handful of requests; in a flash crowd it is the whole backlog plus a restart's worth of
arrivals. The change itself is worth its gain in served requests per second, for as long as it runs. So while requests
queue, the restart waits as long as the
gain it would have brought in the meantime is smaller than what it drops now:

    dropped  = waiting + running + request rate x restart cost           (requests a restart now loses; see below)
    forgone  = gain x request rate x time deferred                        (requests the change would have won)
    wait while the window's mean waiting is a backlog and the forgone gain by the next evaluation (time deferred
    so far + the evaluation interval) stays within what the restart drops, priced at the first deferral (at most
    the fit's horizon)

A hold lasts until the next evaluation, so it forgoes the gain of a whole interval: holding while only the time
deferred so far is below the bound overshoots it by up to one interval, and a restart that drops less than one
interval's gain would still wait an interval.

A backlog is a queue beyond the scheduler's churn: at least BACKLOG_WAITING requests and BACKLOG_SHARE of those running.
At high concurrency a few requests always wait for the next step's admission; holding a restart for them gains nothing,
since the load is steady, not a crowd.

Only work that could still meet its SLO is a loss. With a TTFT deadline S declared (`ttftDeadline`, or `p99Target`
when the guarded metric is ttft), a request is worth keeping only if it can still get its first token within S. vLLM
admits the waiting queue first come, first served, and requests leave the engine at the measured completion rate X
(`request_rate`: finished requests per second), so a running slot opens about every 1/X seconds and the request at
queue position p (0 = next) starts about p / X seconds from now: it can meet S only if p <= X x S. Requests have
already waited some time, so X x S bounds from above the queued requests still in time. An arrival u seconds into
the restart window, had the pod kept serving, would find at least waiting - X x u requests ahead of it (the queue
drains at most at X), so it can meet S only once u >= waiting / X - S. The rest miss their SLO whether the pod
restarts or not: serving them late adds no goodput, dropping them loses none. So, with C the restart cost:

    queued in time   = min(waiting, X x S)                          (all of waiting when no S is declared)
    arrivals in time = X x max(0, C - max(0, waiting - X x S) / D)  (X x C when no S is declared)
    running in time  = running x F                                  (all running when no S is declared)
    dropped          = queued in time + running in time + arrivals in time

A drained rollout aborts none of the requests in flight (FitSettings.drain_s: pods serve beside each wave, or a
surge pod loads first, and the vLLM version has --shutdown-timeout). The pod a wave takes out receives no new
requests and finishes those it holds, queued and running, for up to the drain time at its share of the completion
rate; wave after wave, the deployment's pods finish about X x drain of the in-flight requests that way, and only
the rest is dropped:

    in flight dropped = max(0, queued in time + running in time - X x drain)

The arrivals term stays on the path's restart cost (rollcost): the pods left serving take the arrivals, but the
capacity the wave removes is lost all the same. One replica without surge, or a version that cannot drain, is an
outage: drain 0, every request in flight counts.

D is how fast the queue drains: the queue's measured shrink per second since the change was first proposed (the
window's mean queue then and now), at most X, the fastest it can drain (no arrivals); X where nothing was measured.
A queue longer than X x S that did not shrink lets no arrival in (D <= 0: none in time).

F is the share of the window's first tokens that came within S: the TTFT histogram's bucket at the smallest bound
>= S over its count (promql.ttft_within_deadline; decided at an exact bucket bound, never interpolated). Why it
prices the running requests: a running request has had its first token (vLLM prefills on admission), and a request
whose first token came after S has missed its SLO whatever happens next: finishing it adds no goodput, aborting it
loses none. The running gauge does not say which of them came in time, but they are the window's newest first
tokens: by Little's law a request stays running about running / X seconds (256 / 18 = 14 s in a crowd at 256 running), a
fraction of the window. F is their share if the wait in the queue was the same over the window; a queue growing
over the window made the newest wait longest, so F then overstates them (toward holding). A queue draining over the
window made the newest wait less than the window's average, but FIFO bounds that too: the request admitted now had
the whole queue now behind it, arrived while it was at least as long (it drains), and so waited at least
waiting / X; once waiting > X x S the running requests admitted lately missed S as well, and F, the window's
share, still counts those admitted early in the window in time when they were. Without a valid F (no deadline,
too few finished requests) every running request counts, as before.

Each bound errs toward counting a request as in time, that is toward holding the restart. A queue no longer than
X x S counts whole, as without a deadline; a queue longer than X x (S + C) leaves only the X x S at its head and
the running requests that got their first token in time. Example, a flash crowd past capacity: 9,490
queued, X = 18/s, S = 2 s (bound 2.5 s), C = 90 s: 36 of them can still start in time, arrivals during a restart
would wait about 9 minutes behind the rest, and of the window's first tokens none came within 2.5 s (every one
waited minutes), so a restart drops about 36 instead of 36 + 256 running (9,566 without the deadline). With the
flash-crowd test's S = 600 s, X x S exceeds its queue: all of it counts.

A flash crowd drains before the forgone gain adds up (the restart happens after it, or is no longer proposed); a
lasting overload that the change would relieve gets the restart once the deferral has cost as much as the restart.
`gain` is the change's relative gain in throughput when the proposal carries one (measured speed, predicted
schedule gain, K = 0 tax); otherwise the latency regression tolerance the disable acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from specpilot.autotune.model.schedule import ThresholdPlan
from specpilot.autotune.model.speed import Speed, SpeedVerdict
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Signal

BACKLOG_WAITING = 1.0  # mean requests waiting over the window (all engines): requests queue instead of running
BACKLOG_SHARE = 0.1  # ... and at least this share of the running requests (fewer is admission churn, not a backlog)


@dataclass(frozen=True)
class BacklogVerdict:
    hold: bool
    reason: str  # empty when there is no backlog to speak of
    evidence: dict[str, Any]  # for people; the figures code reads are the fields below
    dropped: float | None = None  # requests a restart now drops (droppedByRestart); None without a backlog
    request_rate: float = 0.0  # the completion rate they were priced at (requestRate)


def queued_in_time(waiting: float, completion_rate: float, deadline_s: float | None) -> float:
    """The queued requests that can still start within the TTFT deadline: FIFO admission, one slot per completion,
    so position p starts after about p / completion_rate seconds (module docstring). All of them without a deadline
    or without a measured completion rate (nothing says how fast the queue moves)."""
    if deadline_s is None or completion_rate <= 0:
        return waiting
    return min(waiting, completion_rate * deadline_s)


def arrivals_in_time(
    waiting: float,
    completion_rate: float,
    deadline_s: float | None,
    restart_cost_s: float,
    drain_rate: float | None = None,
) -> float:
    """The arrivals during a restart's downtime that, had the pod kept serving, could have started within the TTFT
    deadline: those arriving once the queue ahead, draining at most at completion_rate, is short enough (module
    docstring). All of them (completion_rate x restart cost) without a deadline.

    `drain_rate`: how fast the queue was measured to shrink (requests per second, negative while it grows; None:
    not measured). The queue drains at the completion rate less the arrivals, so the completion rate alone is the
    fastest it can drain and a measured slower drain only makes the arrivals later. A queue longer than
    completion_rate x deadline that did not shrink (drain_rate <= 0) lets none of them in: the queue ahead of each
    is at least as long as now (docs/design/decisions.md).
    """
    if deadline_s is None or completion_rate <= 0:
        return completion_rate * restart_cost_s
    excess = waiting - completion_rate * deadline_s  # queued beyond what can start within the deadline
    if excess <= 0:
        return completion_rate * restart_cost_s
    drain = completion_rate if drain_rate is None else min(completion_rate, drain_rate)
    if drain <= 0:
        return 0.0
    late_s = excess / drain
    return completion_rate * max(0.0, restart_cost_s - late_s)


def running_in_time(running: float, share_within_deadline: float | None) -> float:
    """The running requests whose first token came within the TTFT deadline: running x the window's share of first
    tokens within it (module docstring); all of them without a measured share."""
    if share_within_deadline is None:
        return running
    return running * min(1.0, max(0.0, share_within_deadline))


MEASURED_SPEED_GAIN = "measured speed against plain"
K0_TAX_GAIN = "the K = 0 tax"


@dataclass(frozen=True)
class Priced:
    """What a proposal's gain is read from (proposal_gain): the speed verdict and the schedule fit its evaluation
    filed in its evidence, kept typed, since evidence is written for people and never read back."""

    speed: SpeedVerdict | None = None
    plan: ThresholdPlan | None = None


def proposal_gain(priced: Priced, fallback: float, *, at_load: bool = False) -> tuple[float, str]:
    """The relative gain a proposal expects, from its own figures; `fallback` when it carries none.

    A fit's gain is the one at the batch running now (`ThresholdPlan.gain_now`) where the fit priced a refit: both
    callers price a wait (the stabilization of a shed, a deferral under a backlog), and a wait forgoes the gain at the
    load it runs at, not the gain averaged over the load record (agreement.py). `at_load`: the per-request speed-up at
    the load served now (`gain_at_load`, schedule.gain_at_same_load), what a wait below capacity forgoes; the
    backlog gate keeps the throughput gain at the batch now, what a queue drains by."""
    speed, plan = priced.speed, priced.plan
    if speed is not None and speed.outcome is Speed.SLOWER and speed.speedup:
        return 1 / speed.speedup - 1, MEASURED_SPEED_GAIN
    off = plan.off if plan is not None else None
    if off is not None and off.off_wins and off.tax:
        return off.tax, K0_TAX_GAIN
    if plan is not None and at_load and plan.gain_at_load is not None:
        return plan.gain_at_load, "the schedule's predicted per-request speed-up at the load now"
    if plan is not None and plan.gain_now is not None:
        return plan.gain_now, "the schedule's predicted gain at the batch now"
    return fallback, "the regression tolerance (no gain figure in the proposal)"


@dataclass(frozen=True)
class QueueSeen:
    """The window's mean queue at one evaluation (the first of an agreement streak), to measure its trend by."""

    at: datetime
    waiting: float

    def drain_rate(self, waiting_now: float, now: datetime) -> float | None:
        """Requests per second the queue shrank by since then (negative: it grew); None without time between."""
        seconds = (now - self.at).total_seconds()
        return None if seconds <= 0 else (self.waiting - waiting_now) / seconds


def restart_seconds_under_backlog(
    measurements: Mapping[str, Measurement],
    *,
    restart_cost_s: float,
    ttft_deadline_s: float | None,
    queue_before: QueueSeen | None,
    now: datetime,
    drain_s: float = 0.0,
) -> float | None:
    """What a restart now costs, in seconds of serving at the measured completion rate, when requests queue: the
    work it drops that could still meet its TTFT deadline (`restart_under_backlog`'s figure) over that rate, at most
    the restart cost. None without a backlog or a deadline, or without a completion rate to divide by.

    A restart costs a pod's capacity for its duration (restart_cost_s). In an overload whose queue is longer than can
    start within the deadline and does not drain, that capacity serves only requests that miss their SLO anyway, so
    the restart costs the goodput of the few it drops in time, not its whole duration. The stabilization of a shed
    (agreement.stabilization_for) repays this cost, not the nominal one (docs/design/decisions.md).
    """
    if ttft_deadline_s is None:
        return None
    verdict = restart_under_backlog(
        measurements,
        restart_cost_s=restart_cost_s,
        gain=0.0,
        gain_source="",
        deferred_since=None,
        now=now,
        horizon_s=restart_cost_s,  # no wait is priced here, only what the restart drops
        ttft_deadline_s=ttft_deadline_s,
        queue_before=queue_before,
        drain_s=drain_s,
    )
    if verdict.dropped is None or verdict.request_rate <= 0:
        return None
    return min(restart_cost_s, verdict.dropped / verdict.request_rate)


def restart_under_backlog(
    measurements: Mapping[str, Measurement],
    *,
    restart_cost_s: float,
    gain: float,
    gain_source: str,
    deferred_since: datetime | None,
    now: datetime,
    horizon_s: float,
    dropped_at_deferral: float | None = None,
    ttft_deadline_s: float | None = None,
    interval_s: float = 0.0,
    queue_before: QueueSeen | None = None,
    drain_s: float = 0.0,
) -> BacklogVerdict:
    """Hold a restart while requests queue, until the gain forgone by waiting matches the work a restart drops.

    `dropped_at_deferral`: what a restart would have dropped at the first deferral (kept in the policy state). The
    bound on the wait is priced from it, not from the queue now: a queue that keeps growing while the restart waits
    shows an overload that is not passing, and must not push its own restart further out.

    `ttft_deadline_s`: the CR's TTFT objective (rollcost.ttft_deadline_s); only the queued requests and restart-window
    arrivals that could still start within it count as dropped: a crowd's queue mostly misses its SLO anyway. The
    running requests count by the window's share of first tokens within the deadline
    (`Signal.TTFT_WITHIN_DEADLINE`).

    `interval_s`: the evaluation interval; a hold lasts until the next evaluation, so it is priced at the time
    deferred by then (module docstring).

    `queue_before`: the queue when the change was first proposed (the agreement streak's start, kept in the policy
    state). Its change since then is the measured drain rate that `arrivals_in_time` prices the restart's arrivals
    with, and what a restart drops is priced at the lower of the first deferral's figure and now's: the first may
    have been priced without the trend (the queue draining at the full completion rate, the assumption most in
    favour of holding), and taking the lower never lets a growing queue push the restart further out.

    `drain_s`: how long a pod a drained rollout takes out finishes its requests in flight (FitSettings.drain_s; 0
    where a restart aborts them): about the completion rate times it of the queued and running are not dropped.
    """
    waiting = valid_value(measurements, Signal.WAITING_REQUESTS)
    running = valid_value(measurements, Signal.RUNNING_REQUESTS) or 0.0
    if waiting is None or waiting < max(BACKLOG_WAITING, BACKLOG_SHARE * running):
        return BacklogVerdict(False, "", {})
    drop = _drop_now(measurements, waiting, running, restart_cost_s, ttft_deadline_s, queue_before, now, drain_s)
    deferred_s = 0.0 if deferred_since is None else max(0.0, (now - deferred_since).total_seconds())
    gain = max(gain, 0.0)
    forgone = gain * drop.rate * deferred_s
    if dropped_at_deferral is None or deferred_since is None:
        priced = drop.dropped
    else:  # with a measured trend, now's figure where lower (docstring); without, the first deferral's
        priced = min(dropped_at_deferral, drop.dropped) if queue_before is not None else dropped_at_deferral
    limit_s = min(horizon_s, priced / (gain * drop.rate)) if gain > 0 and drop.rate > 0 else horizon_s
    evidence: dict[str, Any] = {
        **drop.evidence(restart_cost_s, ttft_deadline_s, interval_s, queue_before),
        "droppedAtFirstDeferral": round(priced),
        "gain": round(gain, 4),
        "gainSource": gain_source,
        "deferredSeconds": round(deferred_s),
        "forgoneRequests": round(forgone),
        "maxDeferralSeconds": round(limit_s),
    }
    numbers = (
        f"{waiting:.0f} requests waiting and {running:.0f} running; a restart now drops about {drop.dropped:.0f} "
        f"({drop.parts(restart_cost_s, ttft_deadline_s, queue_before)})"
    )
    if deferred_s + interval_s < limit_s:
        return BacklogVerdict(
            True,
            f"restart deferred while requests queue: {numbers}, more than the {forgone:.0f} the change's "
            f"{gain:+.0%} ({gain_source}) has gained in {deferred_s:.0f}s of waiting; waits up to {limit_s:.0f}s",
            evidence,
            drop.dropped,
            drop.rate,
        )
    return BacklogVerdict(
        False,
        f"restart despite the queue: {numbers}; waiting {deferred_s:.0f}s already forwent {forgone:.0f} requests "
        f"to the change's {gain:+.0%} ({gain_source})",
        evidence,
        drop.dropped,
        drop.rate,
    )


@dataclass(frozen=True)
class _Drop:
    """What a restart now drops: the queued, running and arriving requests that could still meet the TTFT deadline
    (module docstring), from one window's queue, running requests and completion rate."""

    waiting: float
    running: float
    rate: float
    in_time: float
    running_kept: float
    arriving: float
    share: float | None  # the window's first tokens within the deadline
    drain: float | None  # the queue's measured shrink per second since the change was first proposed
    finished_by_drain: float  # of the in-flight requests in time, those a drained rollout finishes before its pods stop

    @property
    def dropped(self) -> float:
        return self.in_time + self.running_kept - self.finished_by_drain + self.arriving

    def evidence(
        self, restart_cost_s: float, ttft_deadline_s: float | None, interval_s: float, queue_before: QueueSeen | None
    ) -> dict[str, Any]:
        return {
            "formula": _FORMULA,
            "waiting": round(self.waiting, 1),
            "ttftDeadlineSeconds": ttft_deadline_s,
            "queuedInTime": round(self.in_time, 1),
            "arrivalsInTime": round(self.arriving, 1),
            "running": round(self.running, 1),
            "ttftWithinDeadline": None if self.share is None else round(self.share, 4),
            "runningInTime": round(self.running_kept, 1),
            "intervalSeconds": interval_s,
            "requestRate": round(self.rate, 2),
            "restartCostSeconds": restart_cost_s,
            "waitingWhenProposed": None if queue_before is None else round(queue_before.waiting, 1),
            "queueDrainPerSecond": None if self.drain is None else round(self.drain, 3),
            "finishedByDrain": round(self.finished_by_drain, 1),
            "droppedByRestart": round(self.dropped),
        }

    def parts(self, restart_cost_s: float, ttft_deadline_s: float | None, queue_before: QueueSeen | None) -> str:
        """What the dropped requests are, for people."""
        rate, waiting, running = self.rate, self.waiting, self.running
        if self.in_time >= waiting and self.arriving >= rate * restart_cost_s and self.running_kept >= running:
            parts = f"queued + running + {rate:.1f}/s x {restart_cost_s:.0f}s restart"
        else:
            running_part = (
                "running"
                if self.running_kept >= running or self.share is None
                else f"the {self.running_kept:.0f} running whose first token came in time ({self.share:.0%} of the "
                "window's)"
            )
            parts = (
                f"the {self.in_time:.0f} queued that can still start within the {ttft_deadline_s:g}s TTFT deadline at "
                f"{rate:.1f} completions/s + {running_part} + {self.arriving:.0f} of the arrivals during the "
                f"{restart_cost_s:.0f}s restart; the other {waiting - self.in_time:.0f} queued, "
                f"{running - self.running_kept:.0f} running and {rate * restart_cost_s - self.arriving:.0f} arriving "
                "miss it either way"
            )
        if self.finished_by_drain > 0:
            parts += f", less the {self.finished_by_drain:.0f} in flight the drained rollout finishes"
        if self.drain is not None and queue_before is not None and ttft_deadline_s is not None:
            parts += (
                f"; the queue went from {queue_before.waiting:.0f} to {waiting:.0f} since the change was first "
                f"proposed ({self.drain:+.2f}/s drained)"
            )
        return parts


_FORMULA = (
    "wait while waiting >= max(1, 0.1 x running) and gain x rate x (deferred + interval) < queuedInTime "
    "+ runningInTime + arrivalsInTime at the first deferral; with a ttftDeadline queuedInTime = min(waiting, "
    "rate x ttftDeadline), runningInTime = running x ttftWithinDeadline and arrivalsInTime = rate x max(0, "
    "restartCost - max(0, waiting - rate x ttftDeadline) / drain)) with drain = min(rate, the queue's "
    "measured shrink per second since the change was first proposed; none in time if it did not shrink), else "
    "waiting, running and rate x restartCost; a drained rollout finishes finishedByDrain = min(queuedInTime + "
    "runningInTime, rate x drainSeconds) of those in flight; the drop is priced at the lower of the first "
    "deferral's and now's"
)


def _drop_now(
    measurements: Mapping[str, Measurement],
    waiting: float,
    running: float,
    restart_cost_s: float,
    ttft_deadline_s: float | None,
    queue_before: QueueSeen | None,
    now: datetime,
    drain_s: float,
) -> _Drop:
    rate = valid_value(measurements, Signal.REQUEST_RATE) or 0.0
    drain = None if queue_before is None else queue_before.drain_rate(waiting, now)
    share = valid_value(measurements, Signal.TTFT_WITHIN_DEADLINE) if ttft_deadline_s is not None else None
    in_time = queued_in_time(waiting, rate, ttft_deadline_s)
    running_kept = running_in_time(running, share)
    return _Drop(
        waiting=waiting,
        running=running,
        rate=rate,
        in_time=in_time,
        running_kept=running_kept,
        arriving=arrivals_in_time(waiting, rate, ttft_deadline_s, restart_cost_s, drain),
        share=share,
        drain=drain,
        finished_by_drain=min(in_time + running_kept, rate * max(0.0, drain_s)),
    )
