"""Run a report's range queries with prometheus-api-client (I/O only; analysis.py does the arithmetic)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests import RequestException
from urllib3.util.retry import Retry

from specpilot.report.analysis import Sample
from specpilot.report.queries import RangeQuery, Series


class ReportQueryError(RuntimeError):
    """A range query failed: the message names the query and Prometheus' answer."""


@dataclass(frozen=True)
class RangeSource:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    disable_ssl: bool = False
    timeout_s: float = 30.0


def run_range_queries(
    source: RangeSource, queries: tuple[RangeQuery, ...], start: datetime, end: datetime, step_s: int
) -> dict[Series, list[Sample]]:
    """Every query over [start, end] at `step_s`; an empty result is an empty list, a failure raises."""
    # No connection retries: "Prometheus is down" should be said at once; a busy one (502/503/504) gets two more tries.
    retry = Retry(total=2, connect=0, read=0, status=2, backoff_factor=0.5, status_forcelist=(502, 503, 504))
    client = PrometheusConnect(
        url=source.url, headers=dict(source.headers), disable_ssl=source.disable_ssl, retry=retry
    )
    out: dict[Series, list[Sample]] = {}
    for query in queries:
        try:
            result: list[dict[str, Any]] = client.custom_query_range(
                query.promql, start_time=start, end_time=end, step=f"{step_s}s", timeout=source.timeout_s
            )
        except (PrometheusApiClientException, RequestException) as err:
            raise ReportQueryError(f"{query.series.value}: {query.promql}: {err}") from err
        out[query.series] = [
            Sample(
                labels={str(k): str(v) for k, v in item.get("metric", {}).items()},
                points=tuple((float(t), float(v)) for t, v in item.get("values", []) if not math.isnan(float(v))),
            )
            for item in result
        ]
    return out
