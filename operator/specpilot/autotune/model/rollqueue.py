"""The queues a rollout builds behind a Service, and the arrivals they make late (pure; docs/rollout.md).

A fluid model of the pods' queues while a rollout replaces them (rollcost.RolloutShape): a Kubernetes Service spreads
the arrivals evenly over the ready pods, so each pod has its own queue and drains it only at what it serves above
its own share. Units are one pod's share of the load: at full strength every pod receives 1 per second, and a
config serves up to `capacity` per second per pod (its capacity over its load).

The rollout runs in phases, and within a phase every rate is constant:

- a wave: its pods leave the endpoints and finish what they hold (their queue at their own capacity, then the
  longest request in flight), for at most the drain time, then restart (`Phases.wave_s`; a restart measured from
  the deployment's own rollouts already holds its drain); the pods still serving take all arrivals;
- with a trial, the analysis span after the first pod: that pod on the new config, the others on the old one
  carrying the queue the first wave left them;
- afterwards, every pod on the new config until its queue is back within the deadline.

A request that arrives at a pod whose queue would keep it waiting past the TTFT deadline (queue over capacity)
counts as late. The result is in seconds of the whole deployment's arrivals, the unit a restart is priced in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Phases:
    """A rollout's timing: each wave's pods (in order), one pod's restart once drained, the drain limit, the longest
    request in flight at the load now, and the analysis span after the first wave (None without a trial).

    `restart_drained`: `restart_s` is a whole wave as this deployment's own rollouts took it (measured from the
    actuation to the rollout's completion), its drain included; a wave then lasts that long, or as long as the drain
    alone where the queue and requests in flight now need longer."""

    waves: Sequence[int]
    restart_s: float
    drain_s: float
    inflight_s: float
    analysis_s: float | None = None
    restart_drained: bool = False

    def wave_s(self, queue: float, capacity: float) -> float:
        """How long a wave's pods are out of the endpoints: they finish their queue and the longest request in
        flight (up to the drain limit), then restart."""
        drain = min(self.drain_s, queue / capacity + self.inflight_s)
        return max(drain, self.restart_s) if self.restart_drained else drain + self.restart_s


@dataclass
class _Group:
    pods: int
    capacity: float
    queue: float = 0.0  # per pod, in seconds of one pod's share
    ready: bool = True


def late_while(queue: float, arriving: float, capacity: float, deadline_s: float, span_s: float) -> float:
    """Seconds of `span_s` during which a pod whose queue starts at `queue` and moves at `arriving - capacity` per
    second keeps a new arrival waiting past `deadline_s` (its queue above deadline_s x capacity)."""
    threshold = deadline_s * capacity
    net = arriving - capacity
    if net > 0:
        return max(0.0, span_s - max(0.0, (threshold - queue) / net))
    if net < 0:
        return min(span_s, max(0.0, (queue - threshold) / -net))
    return span_s if queue > threshold else 0.0


def late_arrival_seconds(phases: Phases, *, before: float, after: float, deadline_s: float) -> float:
    """Seconds of the deployment's arrivals that a rollout from a config serving `before` to one serving `after`
    (each over its load, per pod) makes wait past `deadline_s`; infinite where the new config cannot bring a queue
    back within the deadline while the load lasts."""
    groups = [_Group(pods, before) for pods in phases.waves]
    replicas = sum(phases.waves)
    late = 0.0

    def serve(span_s: float) -> None:
        nonlocal late
        ready = [g for g in groups if g.ready]
        arriving = replicas / sum(g.pods for g in ready)
        for g in ready:
            late += g.pods * arriving * late_while(g.queue, arriving, g.capacity, deadline_s, span_s) / replicas
            g.queue = max(0.0, g.queue + (arriving - g.capacity) * span_s)

    for i, wave in enumerate(groups):
        wave.ready = False
        serve(phases.wave_s(wave.queue, wave.capacity))
        wave.ready, wave.capacity, wave.queue = True, after, 0.0
        if i == 0 and phases.analysis_s is not None:
            serve(phases.analysis_s)
    backlog = [g for g in groups if g.queue > deadline_s * g.capacity]
    if backlog and after <= 1.0:
        return math.inf
    return late + sum(g.pods * (g.queue - deadline_s * after) / (after - 1.0) for g in backlog) / replicas
