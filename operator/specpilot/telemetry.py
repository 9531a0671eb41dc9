"""The operator's own Prometheus metrics: what it reconciled, wrote, queried and decided."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("specpilot_reconciles_total", "Reconciles run", ["trigger", "result"])
RECONCILE_SECONDS = Histogram("specpilot_reconcile_duration_seconds", "Time spent in one reconcile", ["trigger"])
API_WRITES = Counter("specpilot_api_writes_total", "Write requests sent to the API server", ["kind", "verb"])
WRITE_ERRORS = Counter("specpilot_api_write_errors_total", "Writes the API server refused", ["kind", "verb", "code"])
EVENTS = Counter("specpilot_events_total", "Kubernetes events posted or suppressed", ["reason", "result"])
QUERIES = Counter("specpilot_metric_queries_total", "Prometheus queries run", ["measurement", "result"])
METRIC_ERRORS = Counter("specpilot_metric_errors_total", "Prometheus queries that failed", ["measurement"])
DECISIONS = Counter("specpilot_decisions_total", "Autotune decisions", ["action", "mode"])
ACTUATIONS = Counter("specpilot_actuations_total", "Autotune actuations applied", ["action", "result"])
RECOMMENDATION = Gauge(
    "specpilot_recommendation", "Current recommendation (1 for the active action)", ["namespace", "name", "action"]
)
