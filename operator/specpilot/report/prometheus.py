"""Run a report's range queries through a bounded Prometheus client and read the matrices (no I/O of its own).

The client is adapters.prom.PrometheusClient, handed in by the command line (report and adapters are sibling layers):
every answer is bounded in bytes, JSON values, nesting and total time there. Here a failed or malformed answer is one
ReportQueryError naming the query, and every label copied into the report is cut to a bounded length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from specpilot.autotune.signals.measurements import RawResult, bounded_text, transport_failure
from specpilot.report.analysis import Sample
from specpilot.report.queries import RangeQuery, Series

BUSY = (502, 503, 504)  # a busy Prometheus (or its proxy) gets two more tries; "down" is said at once
RETRIES = 2
RETRY_PAUSE_S = 0.5


class RangeClient(Protocol):
    def query_range(self, promql: str, start: datetime, end: datetime, step_s: int) -> RawResult: ...


class ReportQueryError(RuntimeError):
    """A range query failed: the message names the query and Prometheus' answer."""


def run_range_queries(
    client: RangeClient, queries: tuple[RangeQuery, ...], start: datetime, end: datetime, step_s: int
) -> dict[Series, list[Sample]]:
    """Every query over [start, end] at `step_s`; an empty result is an empty list, a failure raises."""
    out: dict[Series, list[Sample]] = {}
    for query in queries:
        raw = client.query_range(query.promql, start, end, step_s)
        for attempt in range(RETRIES):
            if raw.http_status not in BUSY:
                break
            time.sleep(RETRY_PAUSE_S * 2**attempt)
            raw = client.query_range(query.promql, start, end, step_s)
        where = f"{query.series.value}: {query.promql}"
        failure = transport_failure(raw)
        if not failure and (raw.result_type != "matrix" or not isinstance(raw.result, list)):
            failure = f"unexpected result type {raw.result_type!r} (want matrix)"
        if failure:
            raise ReportQueryError(f"{where}: {failure}")
        out[query.series] = [_sample(item, where) for item in raw.result]
    return out


def _sample(item: Any, where: str) -> Sample:
    metric = item.get("metric") if isinstance(item, Mapping) else None
    values = item.get("values") if isinstance(item, Mapping) else None
    if not isinstance(metric, Mapping) or not isinstance(values, list):
        raise ReportQueryError(f"{where}: malformed series {bounded_text(item, 120)}")
    points = []
    for point in values:
        try:
            t, v = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError, KeyError):
            raise ReportQueryError(f"{where}: malformed point {bounded_text(point, 120)}") from None
        if not math.isnan(v):
            points.append((t, v))
    return Sample(labels={bounded_text(k): bounded_text(v) for k, v in metric.items()}, points=tuple(points))
