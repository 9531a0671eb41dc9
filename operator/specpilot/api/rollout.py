"""spec.rollout with its defaults filled in: surge, unavailability and the drain time of a stopping vLLM pod.

The defaults depend on other fields (maxUnavailable on maxSurge, drainSeconds on maxModelLen and the latency
objective), so the model leaves them unset and this module is the one place that completes them.
"""

from __future__ import annotations

import math
from datetime import timedelta

from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import AutotuneMode, LatencyMetric, SpeculativeDeploymentSpec

# Time per output token assumed when no TPOT objective is set: a large model at a busy batch decodes a token in
# 30-50 ms on current GPUs; the slower end keeps long generations inside the drain.
DEFAULT_EXPECTED_TPOT_SECONDS = 0.05
# The longest default drain: a request that could still run for longer than five minutes is cut at the drain's end
# rather than holding every rollout (and the GPUs of the next pod) for it.
MAX_DEFAULT_DRAIN_SECONDS = 300


def max_surge(spec: SpeculativeDeploymentSpec) -> int:
    """Pods a rollout may start above spec.replicas."""
    return spec.rollout.max_surge


def max_unavailable(spec: SpeculativeDeploymentSpec) -> int:
    """Pods a rollout may take down at once: as set, else 1 without surge and 0 with it."""
    if spec.rollout.max_unavailable is not None:
        return spec.rollout.max_unavailable
    return 0 if spec.rollout.max_surge > 0 else 1


def expected_tpot_seconds(spec: SpeculativeDeploymentSpec) -> float:
    """The time per output token a drain is sized for: the TPOT objective when there is one, else the default."""
    latency = spec.autotune.latency
    if latency.metric is LatencyMetric.TPOT and latency.p99_target is not None:
        return parse_duration(latency.p99_target)
    return DEFAULT_EXPECTED_TPOT_SECONDS


def default_drain_seconds(spec: SpeculativeDeploymentSpec) -> int:
    """Time for the longest request the engine admits (maxModelLen tokens) to finish, capped; at least 1 s."""
    longest = spec.engine.max_model_len * expected_tpot_seconds(spec)
    return max(1, min(MAX_DEFAULT_DRAIN_SECONDS, math.ceil(longest)))


def drain_seconds(spec: SpeculativeDeploymentSpec) -> int:
    """spec.rollout.drainSeconds, or its default: how long a stopping pod may finish its in-flight requests."""
    if spec.rollout.drain_seconds is not None:
        return spec.rollout.drain_seconds
    return default_drain_seconds(spec)


def spare_pod(spec: SpeculativeDeploymentSpec) -> bool:
    """Whether one pod can run a trial beside the others: two replicas or more, or surge. One replica without surge
    keeps the all-at-once rollout (an outage, docs/rollout.md)."""
    return spec.replicas >= 2 or (spec.replicas >= 1 and max_surge(spec) >= 1)


def can_trial(spec: SpeculativeDeploymentSpec) -> bool:
    """Progressive actuation of an autotune change (one pod first): Auto only, with a pod to spare."""
    return spec.autotune.mode is AutotuneMode.AUTO and spare_pod(spec)


def analysis_span(spec: SpeculativeDeploymentSpec) -> timedelta:
    """From a trial pod's readiness to its analysis: one full window of its own metrics, plus two scrapes."""
    at = spec.autotune
    return timedelta(seconds=parse_duration(at.window) + 2 * parse_duration(at.scrape_interval))
