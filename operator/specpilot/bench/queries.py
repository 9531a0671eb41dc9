"""Answer the operator's PromQL from the simulator's scraped samples, as Prometheus would (pure).

The benchmark runs specpilot's real measurement code (`evaluate.measure`: the queries of `promql.build_queries`,
their evidence gates and classification) against a `ScrapeHistory`: the runner's scrape loop (bench.prometheus.
ScrapeClock: every `scrape_interval` with jitter, some scrapes missed) copies the engine's counters, gauges and
histograms at each scrape, like a Prometheus scrape, into the series of the running configuration (the
`specpilot_dev_config_hash` the query selects). A missed scrape or a restart ends the series with a staleness marker;
a configuration that runs again later continues its series from a fresh engine's zeros, a counter reset. Each query
string is mapped back to the signal it was built for and computed with Prometheus' semantics over the samples in the
range (bench.prometheus): rate() and increase() with Prometheus' extrapolation and reset handling per series,
avg/max_over_time of gauge samples, histogram_quantile over the per-bucket rates. A family that does not exist (spec
decode while speculation is off) gives an empty result, as in Prometheus.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specpilot.api.durations import parse_duration
from specpilot.autotune.signals.measurements import RawResult
from specpilot.autotune.signals.promql import (
    Query,
    Scope,
    Signal,
    Window,
    build_queries,
    short_output_bound,
    ttft_bound,
)
from specpilot.bench.prometheus import Point, bucket_quantile, extrapolated_rate, ms
from specpilot.sim.metrics import MetricsState
from specpilot.vllm.metrics import MetricNames

RANGE = re.compile(r"\[(\d+(?:ms|s|m|h))\]")  # a range selector's duration, as Window.promql renders it


@dataclass(frozen=True)
class Sample:
    t: float
    counters: dict[str, dict[tuple[str, ...], float]]
    gauges: dict[str, float]
    histograms: dict[str, tuple[tuple[float, ...], tuple[int, ...], float, int]]  # bounds, cumulative, sum, count
    stale: bool = False  # a staleness marker for every series of the scrape before it
    # Several pods' scrape at one instant (merge_pods): each pod's gauges by pod id, aggregated per query as PromQL's
    # outer aggregation does; empty for one pod's own sample, whose `gauges` are that pod's.
    pods: dict[int, dict[str, float]] = field(default_factory=dict)


def merge_pods(samples: dict[int, Sample], t: float) -> Sample:
    """The scrapes of several pods at instant `t` as one sample: counters and histograms summed (the `sum(rate())`
    and `sum by (le)` of the operator's queries), gauges kept per pod (`Sample.pods`)."""
    counters: dict[str, dict[tuple[str, ...], float]] = {}
    histograms: dict[str, tuple[tuple[float, ...], tuple[int, ...], float, int]] = {}
    for sample in samples.values():
        for name, series in sample.counters.items():
            merged = counters.setdefault(name, {})
            for labels, value in series.items():
                merged[labels] = merged.get(labels, 0.0) + value
        for name, (bounds, cumulative, total, count) in sample.histograms.items():
            if name in histograms:
                _, cum0, total0, count0 = histograms[name]
                cumulative = tuple(a + b for a, b in zip(cum0, cumulative, strict=True))
                total, count = total0 + total, count0 + count
            histograms[name] = (bounds, cumulative, total, count)
    gauges: dict[str, float] = {}
    for sample in samples.values():
        for name, value in sample.gauges.items():
            gauges[name] = gauges.get(name, 0.0) + value
    return Sample(t, counters, gauges, histograms, pods={pod: dict(s.gauges) for pod, s in samples.items()})


def snapshot(state: MetricsState, t: float) -> Sample:
    return Sample(
        t=ms(t),
        counters={name: dict(series) for name, series in state.counters.items()},
        gauges={name: series.get((), 0.0) for name, series in state.gauges.items()},
        histograms={name: (h.bounds, tuple(h.cumulative()), h.total, h.count) for name, h in state.histograms.items()},
    )


@dataclass
class ScrapeHistory:
    """What Prometheus stored of one pod: per configuration (the series' config hash label) its samples in time
    order, staleness markers included. `target` is the configuration the pod serves now; `add` stores under it."""

    target: str = "sim"
    series: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, sample: Sample) -> None:
        self.series.setdefault(self.target, []).append(sample)

    def scrape_failed(self, t: float) -> None:
        """A failed scrape (or the target gone): Prometheus marks the previous scrape's series stale."""
        samples = self.series.get(self.target)
        if samples and not samples[-1].stale:
            samples.append(Sample(ms(t), {}, {}, {}, stale=True))

    def retarget(self, target: str, t: float) -> None:
        """The pod was replaced at `t` by one serving configuration `target`: the old series end there."""
        self.scrape_failed(t)
        self.target = target

    def window(self, now: float, seconds: float, target: str | None = None) -> list[Sample]:
        """The samples a range selector [now - seconds, now] returns for one configuration, markers dropped."""
        samples = self.series.get(self.target if target is None else target, [])
        return [s for s in samples if not s.stale and now - seconds <= s.t <= now]

    def points(self, target: str, name: str, labels: tuple[str, ...] = ()) -> list[Point]:
        """One counter series as Prometheus stores it: (t, value), a staleness marker as NaN."""
        out: list[Point] = []
        for s in self.series.get(target, []):
            series = _counter(s, name)
            if s.stale:
                out.append((s.t, math.nan))
            elif series is not None and labels in series:
                out.append((s.t, series[labels]))
        return out


@dataclass(frozen=True)
class Range:
    """The range of a range selector: [start, end] seconds."""

    start: float
    end: float


def _counter(sample: Sample, name: str) -> dict[tuple[str, ...], float] | None:
    return sample.counters.get(name.removesuffix("_total"))


def _rate(
    samples: list[Sample], span: Range, name: str, labels: tuple[str, ...] = (), is_rate: bool = True
) -> float | None:
    """rate() (or increase()) of one counter series over the range."""
    points = [(s.t, c[labels]) for s in samples if (c := _counter(s, name)) is not None and labels in c]
    return extrapolated_rate(points, span.start, span.end, is_rate=is_rate)


def _hist_parts(
    samples: list[Sample], span: Range, name: str, is_rate: bool = True
) -> tuple[tuple[float, ...], list[float], float, float] | None:
    """rate() of every `le` bucket series, of `_sum` and of `_count`: (bounds, bucket rates, sum rate, count rate)."""
    base = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
    present = [s for s in samples if base in s.histograms]
    if len(present) < 2:
        return None
    bounds = present[-1].histograms[base][0]
    rates: list[float] = []
    for i in range(len(bounds) + 1):
        points = [(s.t, float(s.histograms[base][1][i])) for s in present]
        rates.append(extrapolated_rate(points, span.start, span.end, is_rate=is_rate) or 0.0)
    total = extrapolated_rate([(s.t, s.histograms[base][2]) for s in present], span.start, span.end, is_rate=is_rate)
    count = extrapolated_rate([(s.t, float(s.histograms[base][3])) for s in present], span.start, span.end,
                              is_rate=is_rate)  # fmt: skip
    return bounds, rates, total or 0.0, count or 0.0


def histogram_quantile(q: float, bounds: tuple[float, ...], cumulative: list[float]) -> float:
    """Prometheus' histogram_quantile over cumulative bucket rates (the last one is +Inf)."""
    return bucket_quantile(q, list(zip([*bounds, math.inf], cumulative, strict=True)))


class SimQueryClient:
    """A QueryClient (specpilot.autotune.evaluate) over one ScrapeHistory, for one scope: it answers the scope's
    queries over whatever range they select (the spec's window, or a wider one the measurement extends to), as
    Prometheus does."""

    def __init__(
        self,
        names: MetricNames,
        scope: Scope,
        history: ScrapeHistory,
        clock: Any,
        short_output_tokens: int = 50,
        max_model_len: int | None = None,
        ttft_deadline_s: float | None = None,
    ) -> None:
        self.names = names
        self.scope = scope
        self.short_output_tokens = short_output_tokens
        self.max_model_len = max_model_len
        self.ttft_deadline_s = ttft_deadline_s
        self.history = history
        self.config_hash = scope.config_hash
        self.clock = clock  # datetime -> virtual seconds
        self.by_promql: dict[str, tuple[Query, float]] = {}  # the queries of every range asked so far

    def _known(self, promql: str) -> tuple[Query, float] | None:
        """The query `promql` was built as (by promql.build_queries for this scope), and its range in seconds."""
        if promql not in self.by_promql:
            ranges = set(RANGE.findall(promql))
            if len(ranges) != 1:
                return None
            window = Window(parse_duration(ranges.pop()), 0.0, "")
            queries = build_queries(
                self.names, self.scope, window, self.short_output_tokens, self.max_model_len, self.ttft_deadline_s
            )
            self.by_promql.update((q.promql, (q, window.seconds)) for q in queries if q.promql is not None)
        return self.by_promql.get(promql)

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        known = self._known(promql)
        if known is None or at is None:
            return RawResult(status="error", error_type="bad_data", error=f"simulated Prometheus cannot run {promql}")
        query, seconds = known
        now = ms(self.clock(at))
        samples = self.history.window(now, seconds, self.config_hash)
        value = self._value(query.signal, samples, Range(now - seconds, now), seconds)
        if isinstance(value, dict):
            result = [{"metric": {"position": k}, "value": [0, _fmt(v)]} for k, v in sorted(value.items())]
        elif value is None:
            result = []
        else:
            result = [{"metric": {}, "value": [0, _fmt(value)]}]
        return RawResult(status="success", result_type="vector", result=result, http_status=200)

    def _value(self, signal: Signal, s: list[Sample], span: Range, w: float) -> float | dict[str, float] | None:
        """The signal over the samples of the range `span`, `w` seconds long."""
        n = self.names
        if signal is Signal.DRAFT_TOKENS_IN_WINDOW:
            r = _rate(s, span, n.draft_tokens)
            return None if r is None else r * w
        if signal is Signal.REQUESTS_IN_WINDOW:
            parts = _hist_parts(s, span, n.e2e_latency)
            return None if parts is None else parts[3] * w
        if signal in _ACCEPTANCE:
            return self._acceptance(signal, s, span)
        if signal in _LATENCY:
            return self._latency(signal, s, span)
        if signal in _GAUGES:
            return _gauge(s, *_GAUGES[signal](n))
        if signal is Signal.REQUEST_RATE:
            parts = _hist_parts(s, span, n.e2e_latency)
            return None if parts is None else parts[3]
        if signal is Signal.GENERATION_TOKEN_RATE:
            return _rate(s, span, n.generation_tokens)
        if signal is Signal.PREEMPTION_RATE:
            return _rate(s, span, n.preemptions)
        if signal is Signal.MEAN_PROMPT_TOKENS:
            parts = _hist_parts(s, span, n.request_prompt_tokens)
            return None if parts is None else _ratio(parts[2], parts[3])
        if signal in (Signal.OUTPUT_SHORT_FRACTION, Signal.OUTPUT_TOKENS_P50):
            return self._output_length(signal, s, span)
        if signal is Signal.TTFT_WITHIN_DEADLINE:
            return self._ttft_within_deadline(s, span)
        return None

    def _acceptance(self, signal: Signal, s: list[Sample], span: Range) -> float | dict[str, float] | None:
        """Accepted over drafted tokens, the mean acceptance length, or the acceptance at each draft position."""
        n = self.names
        if signal is Signal.ACCEPTANCE_RATE:
            return _ratio(_rate(s, span, n.accepted_tokens), _rate(s, span, n.draft_tokens))
        if n.drafts is None:
            return None
        if signal is Signal.MEAN_ACCEPTANCE_LENGTH:
            ratio = _ratio(_rate(s, span, n.accepted_tokens), _rate(s, span, n.drafts))
            return None if ratio is None else (1 + ratio if n.mean_acceptance_length_includes_bonus else ratio)
        if n.accepted_per_position is None or len(s) < 2:
            return None
        drafts = _rate(s, span, n.drafts)
        series = _counter(s[-1], n.accepted_per_position)
        if not drafts or series is None:
            return None
        out: dict[str, float] = {}
        for labels in series:
            r = _rate(s, span, n.accepted_per_position, labels)
            if r is not None:
                out[labels[0]] = r / drafts
        return out or None

    def _latency(self, signal: Signal, s: list[Sample], span: Range) -> float | None:
        """A TPOT quantile or mean, or a TTFT or end-to-end quantile, from the histogram's rated buckets."""
        n = self.names
        if signal in (Signal.TPOT_P50, Signal.TPOT_P99, Signal.TPOT_MEAN):
            if n.per_token_latency is None:
                return None
            parts = _hist_parts(s, span, n.per_token_latency)
            if parts is None:
                return None
            if signal is Signal.TPOT_MEAN:
                return _ratio(parts[2], parts[3])
            return histogram_quantile(0.5 if signal is Signal.TPOT_P50 else 0.99, parts[0], parts[1])
        name, q = {
            Signal.TTFT_P50: (n.time_to_first_token, 0.5),
            Signal.TTFT_P99: (n.time_to_first_token, 0.99),
            Signal.E2E_P50: (n.e2e_latency, 0.5),
            Signal.E2E_P99: (n.e2e_latency, 0.99),
        }[signal]
        parts = _hist_parts(s, span, name)
        return None if parts is None else histogram_quantile(q, parts[0], parts[1])

    def _ttft_within_deadline(self, s: list[Sample], span: Range) -> float | None:
        """The TTFT histogram's bucket at promql.ttft_bound(deadline) over its count, both rated."""
        parts = _hist_parts(s, span, self.names.time_to_first_token)
        if parts is None or self.ttft_deadline_s is None:
            return None
        bounds, cumulative, _, count = parts
        bound = ttft_bound(self.ttft_deadline_s)
        if bound is None:
            return _ratio(count, count)
        if bound not in bounds:
            return None  # no such bucket: an empty result, as Prometheus gives
        return _ratio(cumulative[bounds.index(bound)], count)

    def _output_length(self, signal: Signal, s: list[Sample], span: Range) -> float | None:
        """The generation-token histogram: the share at or below the short bound (a bucket edge), or the median."""
        parts = _hist_parts(s, span, self.names.request_generation_tokens)
        if parts is None:
            return None
        bounds, cumulative, _, count = parts
        if signal is Signal.OUTPUT_TOKENS_P50:
            return histogram_quantile(0.5, bounds, cumulative)
        bound = short_output_bound(self.short_output_tokens)
        if bound > bounds[-1]:
            return _ratio(cumulative[-1], count)
        if float(bound) not in bounds:
            return None  # no such bucket: an empty result, as Prometheus gives for a bucket edge that is not there
        return _ratio(cumulative[bounds.index(float(bound))], count)


_ACCEPTANCE = frozenset({Signal.ACCEPTANCE_RATE, Signal.MEAN_ACCEPTANCE_LENGTH, Signal.ACCEPTANCE_BY_POSITION})
_LATENCY = frozenset(
    {
        Signal.TPOT_P50,
        Signal.TPOT_P99,
        Signal.TPOT_MEAN,
        Signal.TTFT_P50,
        Signal.TTFT_P99,
        Signal.E2E_P50,
        Signal.E2E_P99,
    }
)
# each gauge: (its metric, the *_over_time of each pod's series, the aggregation across pods)
_GAUGES: dict[Signal, Callable[[MetricNames], tuple[str, str, str]]] = {
    Signal.RUNNING_REQUESTS: lambda n: (n.running_requests, "avg", "sum"),
    Signal.BATCH_SIZE: lambda n: (n.running_requests, "avg", "avg"),
    Signal.BATCH_SIZE_PEAK: lambda n: (n.running_requests, "max", "max"),
    Signal.WAITING_REQUESTS: lambda n: (n.waiting_requests, "avg", "sum"),
    Signal.KV_CACHE_USAGE: lambda n: (n.kv_cache_usage, "avg", "max"),
}


def _gauge(samples: list[Sample], name: str, over_time: str, across: str) -> float | None:
    """A gauge over the window: per pod then across pods where the samples have pods, else over the one series."""
    if any(x.pods for x in samples):
        return _across_pods(samples, name, over_time, across)
    values = [x.gauges[name] for x in samples if name in x.gauges]
    if not values:
        return None
    return max(values) if over_time == "max" else sum(values) / len(values)


def _across_pods(samples: list[Sample], name: str, over_time: str, across: str) -> float | None:
    """`across(over_time(name[window]))` over merged samples: each pod's series over the window, then across pods."""
    per_pod: dict[int, list[float]] = {}
    for sample in samples:
        for pod, gauges in sample.pods.items():
            if name in gauges:
                per_pod.setdefault(pod, []).append(gauges[name])
    if not per_pod:
        return None
    values = [max(v) if over_time == "max" else sum(v) / len(v) for v in per_pod.values()]
    if across == "sum":
        return sum(values)
    return max(values) if across == "max" else sum(values) / len(values)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _fmt(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))
