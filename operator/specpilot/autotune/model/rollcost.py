"""What one configuration change costs in serving, by the path its rollout takes (pure; docs/rollout.md).

The fit prices a change by `FitSettings.restart_cost_s`: the seconds of the whole deployment's serving one change
removes, repaid by the change's gain. That figure depends on how the pods are replaced (spec.rollout):

- One replica without surge: the only pod is down for the restart. An outage of `restart_s`, and every request in
  flight or arriving meanwhile is lost (unless the pod drains, which only delays the outage by the drain).
- N >= 2 replicas without surge: `maxUnavailable` pods at a time drain (no new requests, in-flight ones finish) and
  restart while the others take the arrivals. Each wave removes unavailable/N of the serving for `restart_s`; the
  ceil(N / unavailable) waves together remove restart_s x waves x unavailable / N seconds of the whole deployment's
  serving (restart_s when unavailable divides N). The same capacity as an outage at full load, spread so that no
  request is dropped: below (N - unavailable) / N of capacity the other pods absorb it all.
- Those seconds are capacity. What a wave takes from the serving in use depends on the load: while the pods left
  serving carry every arrival (the running config's capacity over its load at least N / (N - unavailable):
  `needed_headroom`, schedule.capacity_over_load), nothing that was being served is lost, and the change costs no
  serving at all; past that the pods left queue, and the wave costs at least the capacity it removes.
- With surge (maxSurge >= 1, maxUnavailable 0): each new pod loads beside the old ones and an old pod drains only
  once its replacement serves, so the deployment never serves below its N pods: no serving is removed (the price
  is the surge pod's GPUs for the rollout, not paid in serving). With both, surge + unavailable pods are replaced
  per wave and only the unavailable ones remove serving.
- Carrying every arrival is not the same as serving it well: the pods left serving settle at a larger batch, and
  each of their requests gets its tokens more slowly for the wave. Where the CR declares a TPOT objective
  (`tpot_target_ms`), a wave is free only while the predicted mean TPOT of the pods left serving stays within it;
  past it their requests miss the SLO, and the wave costs its nominal capacity (schedule.restart_at_load).
- Past what the pods left serving carry, the arrivals they cannot serve queue. Behind a Service each pod keeps its
  own queue and drains it only at what it serves above its share; a pod a wave takes out first finishes its queue
  and its longest request in flight, and with a trial the pods still on the old config carry the first wave's
  queue through the analysis (`RolloutShape`, rollqueue). Where the CR declares a TTFT deadline, the requests that
  wait past it count for nothing: the change costs at least the seconds of arrivals the waves make late
  (rollqueue.late_arrival_seconds), which near capacity is many times the nominal figure, and unbounded where the
  new configuration cannot drain the queue while the load lasts.
- Where pods serve beside each wave (or a surge pod loads first) and the vLLM version has --shutdown-timeout, a pod
  taken out finishes its requests in flight for up to the drain time (`drain_for`): a rollout drops none of them,
  only the capacity above. One replica without surge is priced as an outage, requests in flight included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from specpilot.api import rollout
from specpilot.api.v1alpha1 import LatencyMetric, LatencySpec, SpeculativeDeploymentSpec
from specpilot.vllm.dialects import rendered_drain_seconds
from specpilot.vllm.versions import VllmVersion


def outage(replicas: int, max_surge: int) -> bool:
    """One replica without surge: the only pod stops for the restart, and every request in flight counts as lost."""
    return replicas <= 1 and max_surge == 0


def pods_out_per_wave(replicas: int, max_surge: int, max_unavailable: int) -> int:
    """How many of the `replicas` pods a rollout wave takes out of serving at once: `max_unavailable`, at least one
    without surge (the Deployment controller cannot replace a pod otherwise), none with surge and maxUnavailable 0."""
    return min(max_unavailable if max_surge else max(1, max_unavailable), replicas)


def needed_headroom(replicas: int, max_surge: int, max_unavailable: int) -> float | None:
    """The capacity over load the pods left serving need to carry every arrival while a wave is out: N / (N - u).
    None where no wave leaves pods serving beside it (one replica, or every pod at once) or none is taken out."""
    out = pods_out_per_wave(replicas, max_surge, max_unavailable)
    if out == 0 or out >= replicas:
        return None
    return RolloutShape(replicas, out).needed


def restart_cost_seconds(restart_s: float, replicas: int, max_surge: int, max_unavailable: int) -> float:
    """Seconds of the whole deployment's serving one rollout removes (module docstring), for `replicas` pods that
    each take `restart_s` to start, replaced `max_unavailable` at a time with `max_surge` extra pods."""
    if outage(replicas, max_surge):
        return restart_s
    out_at_once = pods_out_per_wave(replicas, max_surge, max_unavailable)
    if out_at_once == 0:
        return 0.0
    waves = math.ceil(replicas / (out_at_once + max_surge))
    return restart_s * waves * out_at_once / replicas


@dataclass(frozen=True)
class RolloutShape:
    """How a rollout replaces pods while others serve beside it: `replicas` pods, `out_per_wave` out of the endpoints
    at a time and, where the change goes to one pod first (a trial that takes one of the pods), the analysis span
    between that pod and the rest."""

    replicas: int
    out_per_wave: int
    analysis_s: float | None = None
    surge: int = 0  # pods replaced beside each wave without leaving the endpoints (not followed: they only shorten it)

    @property
    def needed(self) -> float:
        """The capacity over load the pods left serving need to carry every arrival (needed_headroom)."""
        return self.replicas / (self.replicas - self.out_per_wave)

    def waves(self) -> tuple[int, ...]:
        """The pods each wave takes out, in order: the trial's one first, then the rest `out_per_wave` at a time."""
        first = (1,) if self.analysis_s is not None else ()
        rest = self.replicas - len(first)
        return first + tuple(min(self.out_per_wave, rest - i) for i in range(0, rest, self.out_per_wave))

    def pod_restart_s(self, restart_cost_s: float) -> float:
        """One pod's restart from what the rollout costs (restart_cost_seconds, which is proportional to it)."""
        return restart_cost_s / restart_cost_seconds(1.0, self.replicas, self.surge, self.out_per_wave)

    def length_s(self, restart_cost_s: float) -> float:
        """How long a rollout keeps pods out of the endpoints from start to end: each wave's restart, and the
        analysis after the first."""
        return len(self.waves()) * self.pod_restart_s(restart_cost_s) + (self.analysis_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "outPerWave": self.out_per_wave,
            "surge": self.surge,
            "analysisSeconds": self.analysis_s,
        }


def rollout_shape(spec: SpeculativeDeploymentSpec) -> RolloutShape | None:
    """The shape of the rollout path `spec` declares; None where no wave leaves pods serving beside it (one replica,
    every pod at once, or surge alone: needed_headroom). An autotune change to a deployment that runs trials
    (rollout.can_trial) goes to one pod first, and that pod is one of the replicas unless a surge pod hosts it."""
    surge, unavailable = rollout.max_surge(spec), rollout.max_unavailable(spec)
    if needed_headroom(spec.replicas, surge, unavailable) is None:
        return None
    analysis = rollout.analysis_span(spec).total_seconds() if rollout.can_trial(spec) and surge == 0 else None
    return RolloutShape(spec.replicas, pods_out_per_wave(spec.replicas, surge, unavailable), analysis, surge)


def restart_cost_for(spec: SpeculativeDeploymentSpec, restart_s: float) -> float:
    """restart_cost_seconds on the rollout path `spec` declares (spec.replicas, spec.rollout) for pods that each take
    `restart_s` to start."""
    return restart_cost_seconds(restart_s, spec.replicas, rollout.max_surge(spec), rollout.max_unavailable(spec))


def drain_for(spec: SpeculativeDeploymentSpec) -> float:
    """Seconds a pod a rollout wave takes out finishes its requests in flight while other pods serve: the
    --shutdown-timeout its version renders (module docstring); 0 on one replica without surge (an outage) and where
    the version cannot drain or does not parse."""
    if outage(spec.replicas, rollout.max_surge(spec)):
        return 0.0
    try:
        version = VllmVersion.parse(spec.engine.version)
    except ValueError:
        return 0.0
    return float(rendered_drain_seconds(spec, version))


def ttft_deadline_s(latency: LatencySpec) -> float | None:
    """The TTFT a request must meet to count, in seconds: `ttftDeadline`, else `p99Target` when the guarded metric is
    ttft; None when the CR declares neither (LatencySpec.per_request_objective_s)."""
    return latency.per_request_objective_s(LatencyMetric.TTFT)


def share_within(target: float, p50: float, p99: float) -> float:
    """The share of requests at or below `target`, from the median and P99 of their distribution (any one unit):
    the log-normal through those two quantiles, the usual shape of a latency. A single value (p99 <= p50) is all
    within or all past."""
    if p50 <= 0 or p99 <= p50:
        return 1.0 if target >= p50 else 0.0
    sigma = math.log(p99 / p50) / NormalDist().inv_cdf(0.99)
    return NormalDist().cdf(math.log(target / p50) / sigma)


def tpot_target_ms(latency: LatencySpec) -> float | None:
    """The mean TPOT a request must meet to count, in ms: `tpotTarget`, else `p99Target` when the guarded metric is
    tpot; None when the CR declares neither (LatencySpec.per_request_objective_s)."""
    seconds = latency.per_request_objective_s(LatencyMetric.TPOT)
    return None if seconds is None else seconds * 1000
