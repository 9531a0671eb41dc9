"""The operator's own Prometheus metrics: what it reconciled, wrote, queried and decided."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

RECONCILES = Counter("specpilot_reconciles_total", "Reconciles run", ["trigger", "result"])
OBJECT_FAILURES = Counter(
    "specpilot_object_failures_total",
    "Exceptions kept to one SpeculativeDeployment (the rest of the fleet proceeds), by where they happened: the "
    "round's due check, measurement or conclusion, or a reconcile",
    ["stage"],
)
WATCH_FAILURES = Counter(
    "specpilot_watch_failures_total",
    "Watch streams that failed other than by expiring (an ERROR event, or a request still refused after retries) and "
    "were re-listed after a backoff, by resource",
    ["resource"],
)
RECONCILE_SECONDS = Histogram("specpilot_reconcile_duration_seconds", "Time spent in one reconcile", ["trigger"])
QUEUE_WAIT_SECONDS = Histogram(
    "specpilot_workqueue_wait_seconds",
    "Time an object waited in the work queue for a handler thread, by what queued it (controller-runtime's "
    "workqueue_queue_duration_seconds)",
    ["trigger"],
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
API_WRITES = Counter("specpilot_api_writes_total", "Write requests sent to the API server", ["kind", "verb"])
API_REQUEST_SECONDS = Histogram(
    "specpilot_api_request_duration_seconds",
    "Time the API server took to answer the operator's own requests (reconciles' share spent waiting on it)",
    ["kind", "verb"],
)
WRITE_ERRORS = Counter("specpilot_api_write_errors_total", "Writes the API server refused", ["kind", "verb", "code"])
EVENTS = Counter("specpilot_events_total", "Kubernetes events posted or suppressed", ["reason", "result"])
QUERIES = Counter("specpilot_metric_queries_total", "Prometheus queries run", ["measurement", "result"])
METRIC_ERRORS = Counter("specpilot_metric_errors_total", "Prometheus queries that failed", ["measurement"])
PROMETHEUS_QUERIES = Counter(
    "specpilot_prometheus_queries_total", "HTTP queries sent to Prometheus (one per metric per round and query shape)"
)
ROUND_SIZE = Histogram(
    "specpilot_round_deployments",
    "SpeculativeDeployments evaluated together in one round over one Prometheus connection",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000),
)
TICK_ENDED = Gauge(
    "specpilot_tick_ended_timestamp_seconds",
    "When the evaluation round's or the periodic pass's thread last ended a tick (SpecpilotTickerStuck)",
    ["ticker"],
)
TICK_FAILURES = Counter(
    "specpilot_tick_failures_total",
    "Ticks that ended in an exception (an aborted round or pass; SpecpilotTickerAborting)",
    ["ticker"],
)
ROUND_SECONDS = Histogram("specpilot_round_duration_seconds", "Time one evaluation round took")
DECISIONS = Counter("specpilot_decisions_total", "Autotune decisions", ["action", "mode"])
ACTUATIONS = Counter("specpilot_actuations_total", "Autotune actuations applied", ["action", "result"])
HEAP_BYTES = Gauge(
    "specpilot_heap_bytes",
    "The allocator's heap after the latest purge (jemalloc's stats.*): allocated by live objects, active in their "
    "pages, resident",
    ["state"],
)
LEADER = Gauge(
    "specpilot_leader",
    "1 while this replica acts (holds the leader Lease, or runs without leader election), 0 while it waits",
)
RECOMMENDATION = Gauge(
    "specpilot_recommendation", "Current recommendation (1 for the active action)", ["namespace", "name", "action"]
)

# Per-object state, one series per SpeculativeDeployment, so alerts and the dashboard are level-based (the counters
# above carry no object labels, and Events expire after an hour). kube-state-metrics style: one series per
# (type, status) pair, 1 for the status the condition has now, 0 for the others.
_CONDITION_STATUSES = ("True", "False", "Unknown")


@dataclass
class _ObjectState:
    conditions: dict[str, str] = field(default_factory=dict)  # type -> status
    speculation: bool | None = None
    threshold: float | None = None


class ObjectStates(Collector):
    """The per-object series, built at scrape time from one small record per object.

    A labelled Gauge child per series would cost a Gauge, a value and a lock for each of the ~30 series of every
    object (about 60 KiB per object, measured at 300 objects): most of the operator's memory at fleet scale.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._objects: dict[tuple[str, str], _ObjectState] = {}

    def observe(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        with self._guard:
            state = self._objects.setdefault((namespace, name), _ObjectState())
            for condition in status.get("conditions") or ():
                state.conditions[str(condition.get("type"))] = str(condition.get("status"))
            effective = status.get("effective") or {}
            if "speculation" in effective:
                state.speculation = bool(effective["speculation"])
            threshold = effective.get("disableAboveBatchSize")
            state.threshold = None if threshold is None else float(threshold)

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._objects.pop((namespace, name), None)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "specpilot_condition",
                "Status conditions of each SpeculativeDeployment (1 for the current status)",
                labels=["namespace", "name", "type", "status"],
            ),
            GaugeMetricFamily(
                "specpilot_speculation_enabled",
                "Whether the running pods speculate (status.effective.speculation)",
                labels=["namespace", "name"],
            ),
            GaugeMetricFamily(
                "specpilot_batch_threshold",
                "Batch size above which speculation is off (status.effective.disableAboveBatchSize); absent when unset",
                labels=["namespace", "name"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        condition, speculation, threshold = self._families()
        with self._guard:
            objects = [(key, replace(state, conditions=dict(state.conditions))) for key, state in self._objects.items()]
        for (namespace, name), state in objects:
            for ctype, current in state.conditions.items():
                for value in _CONDITION_STATUSES:
                    condition.add_metric([namespace, name, ctype, value], 1 if current == value else 0)
            if state.speculation is not None:
                speculation.add_metric([namespace, name], 1 if state.speculation else 0)
            if state.threshold is not None:
                threshold.add_metric([namespace, name], state.threshold)
        yield from (condition, speculation, threshold)


OBJECT_STATES = ObjectStates()
REGISTRY.register(OBJECT_STATES)


def observe_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Mirror one object's written status into the per-object series (call after every status write)."""
    OBJECT_STATES.observe(namespace, name, status)


def forget_object(namespace: str, name: str) -> None:
    """Drop a deleted object's series, so alerts do not fire for what no longer exists."""
    OBJECT_STATES.forget(namespace, name)
