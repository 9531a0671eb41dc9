"""The operator's own Prometheus metrics: what it reconciled, wrote, queried and decided."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("specpilot_reconciles_total", "Reconciles run", ["trigger", "result"])
RECONCILE_SECONDS = Histogram("specpilot_reconcile_duration_seconds", "Time spent in one reconcile", ["trigger"])
API_WRITES = Counter("specpilot_api_writes_total", "Write requests sent to the API server", ["kind", "verb"])
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
ROUND_SECONDS = Histogram("specpilot_round_duration_seconds", "Time one evaluation round took")
DECISIONS = Counter("specpilot_decisions_total", "Autotune decisions", ["action", "mode"])
ACTUATIONS = Counter("specpilot_actuations_total", "Autotune actuations applied", ["action", "result"])
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
CONDITION = Gauge(
    "specpilot_condition",
    "Status conditions of each SpeculativeDeployment (1 for the current status)",
    ["namespace", "name", "type", "status"],
)
SPECULATION_ENABLED = Gauge(
    "specpilot_speculation_enabled",
    "Whether the running pods speculate (status.effective.speculation)",
    ["namespace", "name"],
)
BATCH_THRESHOLD = Gauge(
    "specpilot_batch_threshold",
    "Batch size above which speculation is off (status.effective.disableAboveBatchSize); absent when unset",
    ["namespace", "name"],
)
_CONDITION_STATUSES = ("True", "False", "Unknown")


def observe_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Mirror one object's written status into the per-object gauges (call after every status write)."""
    for condition in status.get("conditions") or ():
        current = condition.get("status")
        for value in _CONDITION_STATUSES:
            CONDITION.labels(namespace, name, str(condition.get("type")), value).set(1 if current == value else 0)
    effective = status.get("effective") or {}
    if "speculation" in effective:
        SPECULATION_ENABLED.labels(namespace, name).set(1 if effective["speculation"] else 0)
    threshold = effective.get("disableAboveBatchSize")
    if threshold is None:
        with contextlib.suppress(KeyError):
            BATCH_THRESHOLD.remove(namespace, name)
    else:
        BATCH_THRESHOLD.labels(namespace, name).set(float(threshold))


def forget_object(namespace: str, name: str) -> None:
    """Drop a deleted object's series, so alerts do not fire for what no longer exists."""
    for gauge in (SPECULATION_ENABLED, BATCH_THRESHOLD):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)
    for labels in [key for key in CONDITION._metrics if key[:2] == (namespace, name)]:
        CONDITION.remove(*labels)
