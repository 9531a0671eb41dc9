"""The range queries behind a report (pure): per-window increases, split by config hash.

Every query is `sum by (<config-hash label>[, le]) (increase(...[step]))` (or an `*_over_time` for gauges), evaluated
every `step`, so consecutive points cover adjacent, non-overlapping windows: counts add up exactly over any set of
windows, and latency quantiles of "all speculating windows" come from summed bucket counts instead of an average of
per-window quantiles (which has no meaning).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specpilot.autotune.signals.promql import Scope, Window
from specpilot.vllm.metrics import MetricNames


class Series(StrEnum):
    ACCEPTED = "accepted_tokens"
    DRAFTED = "draft_tokens"
    DRAFTS = "drafts"
    TTFT = "ttft_buckets"
    TPOT = "tpot_buckets"
    E2E = "e2e_buckets"
    GENERATED = "generation_tokens"
    RUNNING = "running_requests"
    KV_CACHE = "kv_cache_usage"


HISTOGRAMS = (Series.TTFT, Series.TPOT, Series.E2E)


@dataclass(frozen=True)
class RangeQuery:
    series: Series
    promql: str


def build_range_queries(names: MetricNames, scope: Scope, step: Window) -> tuple[RangeQuery, ...]:
    """All configurations of one deployment (scope without a hash), grouped by the config-hash label."""
    if scope.config_hash is not None:
        raise ValueError("a report compares configurations: build it from a scope without a config hash")
    sel, cfg, w = scope.selector(), scope.config_hash_label, step.promql()

    def increase(metric: str, extra: str = "") -> str:
        return f"sum by ({cfg}{extra}) (increase({metric}{sel}[{w}]))"

    queries = [
        RangeQuery(Series.ACCEPTED, increase(names.accepted_tokens)),
        RangeQuery(Series.DRAFTED, increase(names.draft_tokens)),
        RangeQuery(Series.TTFT, increase(f"{names.time_to_first_token}_bucket", ", le")),
        RangeQuery(Series.E2E, increase(f"{names.e2e_latency}_bucket", ", le")),
        RangeQuery(Series.GENERATED, increase(names.generation_tokens)),
        RangeQuery(Series.RUNNING, f"sum by ({cfg}) (avg_over_time({names.running_requests}{sel}[{w}]))"),
        RangeQuery(Series.KV_CACHE, f"max by ({cfg}) (avg_over_time({names.kv_cache_usage}{sel}[{w}]))"),
    ]
    if names.drafts is not None:
        queries.append(RangeQuery(Series.DRAFTS, increase(names.drafts)))
    if names.per_token_latency is not None:
        queries.append(RangeQuery(Series.TPOT, increase(f"{names.per_token_latency}_bucket", ", le")))
    return tuple(queries)
