"""A restart while requests queue: wait, or pay for the dropped work (pure; issue 13, the spike scenario).

Every actuation restarts vLLM pods (performance.md §0.3): the requests they run and the requests queued on them
(vLLM's `num_requests_waiting`) are aborted, and the arrivals during the restart find no ready endpoint. At low load
that is a handful of requests; in a flash crowd it is the whole backlog plus a restart's worth of arrivals (the
decision benchmark's spike scenario dropped 7,193 requests on one disable). The change itself is worth its gain in
served requests per second, for as long as it runs. So while requests queue, the restart waits as long as the gain
it would have brought in the meantime is smaller than what it drops now:

    dropped  = waiting + running + request rate x restart cost           (requests a restart now loses)
    forgone  = gain x request rate x time deferred so far                 (requests the change would have won)
    wait while the window's mean waiting is a backlog and forgone < dropped at the first deferral (at most the
    fit's horizon)

A backlog is a queue beyond the scheduler's churn: at least BACKLOG_WAITING requests and BACKLOG_SHARE of those
running. At high concurrency a few requests always wait for the next step's admission (4 waiting beside 141 running
in the simulated 8B closed loop); holding a restart for them gains nothing, since the load is steady, not a crowd.

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

from specpilot.measurements import Measurement, valid_value
from specpilot.promql import Signal

BACKLOG_WAITING = 1.0  # mean requests waiting over the window (all engines): requests queue instead of running
BACKLOG_SHARE = 0.1  # ... and at least this share of the running requests (fewer is admission churn, not a backlog)


@dataclass(frozen=True)
class BacklogVerdict:
    hold: bool
    reason: str  # empty when there is no backlog to speak of
    evidence: dict[str, Any]


def proposal_gain(evidence: Mapping[str, Any], fallback: float) -> tuple[float, str]:
    """The relative throughput gain a proposal expects, from its own evidence; `fallback` when it carries none."""
    speed = evidence.get("speed") or {}
    if speed.get("outcome") == "Slower" and speed.get("speedup"):
        return 1 / float(speed["speedup"]) - 1, "measured speed against plain"
    threshold = evidence.get("threshold") or {}
    tax = threshold.get("k0Tax") or {}
    if tax.get("offWins") and tax.get("taxAtK0"):
        return float(tax["taxAtK0"]), "the K = 0 tax"
    if threshold.get("predictedGain"):
        return float(threshold["predictedGain"]), "the schedule's predicted gain"
    return fallback, "the regression tolerance (no gain figure in the proposal)"


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
) -> BacklogVerdict:
    """Hold a restart while requests queue, until the gain forgone by waiting matches the work a restart drops.

    `dropped_at_deferral`: what a restart would have dropped at the first deferral (kept in the policy state). The
    bound on the wait is priced from it, not from the queue now: a queue that keeps growing while the restart waits
    shows an overload that is not passing, and must not push its own restart further out. Found by the benchmark
    (mixed-temperature, 20 QPS past the capacity of K=3): the bound was recomputed from the growing queue at every
    evaluation, and an agreed change that the gate first held at 660 s (2,519 to drop, +17% predicted, bound 760 s)
    went in only at 2,460 s, with 3,374 queued.
    """
    waiting = valid_value(measurements, Signal.WAITING_REQUESTS)
    running = valid_value(measurements, Signal.RUNNING_REQUESTS) or 0.0
    if waiting is None or waiting < max(BACKLOG_WAITING, BACKLOG_SHARE * running):
        return BacklogVerdict(False, "", {})
    rate = valid_value(measurements, Signal.REQUEST_RATE) or 0.0
    dropped = waiting + running + rate * restart_cost_s
    deferred_s = 0.0 if deferred_since is None else max(0.0, (now - deferred_since).total_seconds())
    gain = max(gain, 0.0)
    forgone = gain * rate * deferred_s
    priced = dropped if dropped_at_deferral is None or deferred_since is None else dropped_at_deferral
    limit_s = min(horizon_s, priced / (gain * rate)) if gain > 0 and rate > 0 else horizon_s
    evidence: dict[str, Any] = {
        "formula": (
            "wait while waiting >= max(1, 0.1 x running) "
            "and gain x rate x deferred < waiting + running + rate x restartCost at the first deferral"
        ),
        "waiting": round(waiting, 1),
        "running": round(running, 1),
        "requestRate": round(rate, 2),
        "restartCostSeconds": restart_cost_s,
        "droppedByRestart": round(dropped),
        "droppedAtFirstDeferral": round(priced),
        "gain": round(gain, 4),
        "gainSource": gain_source,
        "deferredSeconds": round(deferred_s),
        "forgoneRequests": round(forgone),
        "maxDeferralSeconds": round(limit_s),
    }
    numbers = (
        f"{waiting:.0f} requests waiting and {running:.0f} running; a restart now drops about {dropped:.0f} "
        f"(queued + running + {rate:.1f}/s x {restart_cost_s:.0f}s restart)"
    )
    if deferred_s < limit_s:
        return BacklogVerdict(
            True,
            f"restart deferred while requests queue: {numbers}, more than the {forgone:.0f} the change's "
            f"{gain:+.0%} ({gain_source}) has gained in {deferred_s:.0f}s of waiting; waits up to {limit_s:.0f}s",
            evidence,
        )
    return BacklogVerdict(
        False,
        f"restart despite the queue: {numbers}; waiting {deferred_s:.0f}s already forwent {forgone:.0f} requests "
        f"to the change's {gain:+.0%} ({gain_source})",
        evidence,
    )
