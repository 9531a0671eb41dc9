"""The Prometheus client `specpilot report` runs its range queries with (report and adapters are sibling layers)."""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.adapters.prom import PrometheusClient, PrometheusConnection


def open_range_client(
    url: str, headers: Mapping[str, str], insecure_skip_verify: bool, timeout_s: float
) -> PrometheusClient:
    """A bounded client (bytes, JSON values, nesting, total time per query); ValueError for what it refuses."""
    return PrometheusClient(
        PrometheusConnection(url, timeout_s=timeout_s, headers=dict(headers), insecure_skip_verify=insecure_skip_verify)
    )
