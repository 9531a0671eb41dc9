"""PromQL the autotuner runs, built from a vLLM version's metric names (pure).

Label contract. The operator labels every vLLM pod `specpilot.dev/deployment=<CR name>` and
`specpilot.dev/config-hash=<hash of the rendered command line>`. Prometheus turns pod labels into metric labels by
sanitising the name (every character outside `[a-zA-Z0-9_]` becomes `_`): a prometheus-operator PodMonitor with
`podTargetLabels: [specpilot.dev/deployment, specpilot.dev/config-hash]` and a plain `kubernetes_sd_configs` job with
`labelmap: __meta_kubernetes_pod_label_(.+)` both yield `specpilot_dev_deployment` and `specpilot_dev_config_hash`,
plus the conventional `namespace` label. Those three are the defaults of `Scope`; a Prometheus relabelled differently
passes its own names.

Query rules (docs/design/decisions.md, "Measurements"): rate before aggregating; numerator and denominator aggregated
separately, the denominator guarded with `> 0` so "nothing drafted" is an empty result instead of NaN; every query
aggregates without `by`, except `le` inside histogram_quantile and `position` for per-position acceptance, so a
scope that matches several pods still yields exactly one series; the window is at least four scrape intervals.

Fleet rounds. Every builder takes a `Selection`: one `Scope` renders exactly the per-deployment query
above; a `ScopeSet` renders the same query for many deployments at once, with set matchers on the scope labels and
those labels added to every `by` (and `on`), so one answer carries one series per deployment.
`measurements.split_answer` cuts it back into the answers the per-deployment queries would have given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from specpilot.vllm.metrics import TTFT_BUCKETS, MetricNames

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MIN_SCRAPES_PER_WINDOW = 4
# The longest window an evaluation extends to when the spec's holds too few samples (low traffic, wider_windows): a
# longer one would average over a day's changing traffic and answer a change of it an hour late.
MAX_WINDOW_S = 3600.0


class Signal(StrEnum):
    """Names of the measurements; also the keys of `evaluate` output and of the policy's evidence."""

    ACCEPTANCE_RATE = "acceptance_rate"
    MEAN_ACCEPTANCE_LENGTH = "mean_acceptance_length"
    ACCEPTANCE_BY_POSITION = "acceptance_by_position"
    TPOT_P50 = "tpot_p50"
    TPOT_P99 = "tpot_p99"
    TPOT_MEAN = "tpot_mean"
    TTFT_P50 = "ttft_p50"
    TTFT_P99 = "ttft_p99"
    E2E_P50 = "e2e_p50"
    E2E_P99 = "e2e_p99"
    RUNNING_REQUESTS = "running_requests"
    BATCH_SIZE = "batch_size"
    BATCH_SIZE_PEAK = "batch_size_peak"
    WAITING_REQUESTS = "waiting_requests"
    REQUEST_RATE = "request_rate"
    GENERATION_TOKEN_RATE = "generation_token_rate"
    PREEMPTION_RATE = "preemption_rate"
    KV_CACHE_USAGE = "kv_cache_usage"
    DRAFT_TOKENS_IN_WINDOW = "draft_tokens_in_window"
    REQUESTS_IN_WINDOW = "requests_in_window"
    OUTPUT_SHORT_FRACTION = "output_short_fraction"
    OUTPUT_TOKENS_P50 = "output_tokens_p50"
    MEAN_PROMPT_TOKENS = "mean_prompt_tokens"
    TTFT_WITHIN_DEADLINE = "ttft_within_deadline"


# The evidence gates: a measurement listed here is NoData unless its gate counted enough samples in the same window.
EVIDENCE_GATES: dict[Signal, Signal] = {
    Signal.ACCEPTANCE_RATE: Signal.DRAFT_TOKENS_IN_WINDOW,
    Signal.MEAN_ACCEPTANCE_LENGTH: Signal.DRAFT_TOKENS_IN_WINDOW,
    Signal.ACCEPTANCE_BY_POSITION: Signal.DRAFT_TOKENS_IN_WINDOW,
    Signal.TPOT_P50: Signal.REQUESTS_IN_WINDOW,
    Signal.TPOT_P99: Signal.REQUESTS_IN_WINDOW,
    Signal.TPOT_MEAN: Signal.REQUESTS_IN_WINDOW,
    Signal.TTFT_P50: Signal.REQUESTS_IN_WINDOW,
    Signal.TTFT_P99: Signal.REQUESTS_IN_WINDOW,
    Signal.E2E_P50: Signal.REQUESTS_IN_WINDOW,
    Signal.E2E_P99: Signal.REQUESTS_IN_WINDOW,
    Signal.OUTPUT_SHORT_FRACTION: Signal.REQUESTS_IN_WINDOW,
    Signal.OUTPUT_TOKENS_P50: Signal.REQUESTS_IN_WINDOW,
    Signal.MEAN_PROMPT_TOKENS: Signal.REQUESTS_IN_WINDOW,
    Signal.TTFT_WITHIN_DEADLINE: Signal.REQUESTS_IN_WINDOW,
}

# Latency signals by spec.autotune.latency.metric value.
LATENCY_SIGNALS: dict[str, tuple[Signal, Signal]] = {
    "tpot": (Signal.TPOT_P50, Signal.TPOT_P99),
    "ttft": (Signal.TTFT_P50, Signal.TTFT_P99),
    "e2e": (Signal.E2E_P50, Signal.E2E_P99),
}


@dataclass(frozen=True)
class Scope:
    """Which series belong to one deployment's pods running one configuration.

    `config_hash=None` drops the hash matcher (all configurations of the deployment): useful for a dry run before the
    hash is known, wrong for decisions, because a window straddling a rollout mixes two configurations.
    """

    namespace: str
    deployment: str
    config_hash: str | None
    namespace_label: str = "namespace"
    deployment_label: str = "specpilot_dev_deployment"
    config_hash_label: str = "specpilot_dev_config_hash"

    def __post_init__(self) -> None:
        for field in ("namespace_label", "deployment_label", "config_hash_label"):
            value = getattr(self, field)
            if not LABEL_NAME.match(value):
                raise ValueError(f"Scope.{field} {value!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if not self.namespace or not self.deployment:
            raise ValueError("Scope.namespace and Scope.deployment must not be empty")
        if self.config_hash == "":
            raise ValueError("Scope.config_hash must be a hash or None, not an empty string")

    def selector(self) -> str:
        """The label matchers: {namespace="ml",specpilot_dev_deployment="chat",specpilot_dev_config_hash="9f2c"}."""
        pairs = [(self.namespace_label, self.namespace), (self.deployment_label, self.deployment)]
        if self.config_hash is not None:
            pairs.append((self.config_hash_label, self.config_hash))
        return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs) + "}"

    def labels(self) -> tuple[str, ...]:
        """The label names this scope matches on, in selector order."""
        names = (self.namespace_label, self.deployment_label)
        return (*names, self.config_hash_label) if self.config_hash is not None else names

    def key(self) -> tuple[str, ...]:
        """The values of `labels()`: how a grouped answer names this scope's series."""
        values = (self.namespace, self.deployment)
        return (*values, self.config_hash) if self.config_hash is not None else values

    def grouping(self) -> tuple[str, ...]:
        """One scope needs no grouping labels: its queries aggregate to one series."""
        return ()

    def with_config_hash(self, config_hash: str | None) -> Scope:
        """The same deployment, another configuration (a canary replica, or the previous config)."""
        return replace(self, config_hash=config_hash)

    def to_dict(self) -> dict[str, str | None]:
        return {
            "namespace": self.namespace,
            "deployment": self.deployment,
            "configHash": self.config_hash,
            "selector": self.selector(),
        }


@dataclass(frozen=True)
class ScopeSet:
    """Many scopes of the same label names (and all with, or all without, a config hash), queried together.

    The selector uses one set matcher per label (`=~"a|b"`), so it matches the cross product of the values; the
    answer for a combination nobody asked for is simply not read. Values are regex-escaped, then PromQL-escaped.
    """

    scopes: tuple[Scope, ...]

    def __post_init__(self) -> None:
        if not self.scopes:
            raise ValueError("ScopeSet needs at least one scope")
        shapes = {s.labels() for s in self.scopes}
        if len(shapes) != 1:
            raise ValueError(f"ScopeSet scopes must share label names and hash presence, got {sorted(shapes)}")

    @classmethod
    def of(cls, scopes: Iterable[Scope]) -> ScopeSet:
        return cls(tuple(sorted(set(scopes), key=lambda s: s.key())))

    def labels(self) -> tuple[str, ...]:
        return self.scopes[0].labels()

    def grouping(self) -> tuple[str, ...]:
        return self.labels()

    def selector(self) -> str:
        matchers: list[str] = []
        for position, name in enumerate(self.labels()):
            values = sorted({s.key()[position] for s in self.scopes})
            if len(values) == 1:
                matchers.append(f'{name}="{escape_label_value(values[0])}"')
            else:
                pattern = "|".join(re.escape(value) for value in values)
                matchers.append(f'{name}=~"{escape_label_value(pattern)}"')
        return "{" + ",".join(matchers) + "}"


class Selection(Protocol):
    """What a query builder needs: the label matchers, and the labels every aggregation must keep."""

    def selector(self) -> str: ...

    def grouping(self) -> tuple[str, ...]: ...


def _agg(op: str, expr: str, selection: Selection, *keep: str) -> str:
    """`op(expr)`, keeping the selection's grouping labels and `keep`: `sum(x)`, `sum by (le) (x)`."""
    labels = (*selection.grouping(), *keep)
    return f"{op} by ({', '.join(labels)}) ({expr})" if labels else f"{op}({expr})"


def escape_label_value(value: str) -> str:
    """Escape a value for a double-quoted PromQL string (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class Window:
    """The range of every range vector in one evaluation."""

    seconds: float
    requested_seconds: float
    note: str  # empty unless the requested window was raised

    def promql(self) -> str:
        """Render as a PromQL duration in the largest unit that divides it exactly (5m, 90s, 1500ms)."""
        millis = round(self.seconds * 1000)
        for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
            if millis % size == 0:
                return f"{millis // size}{unit}"
        return f"{millis}ms"


def resolve_window(window_s: float, scrape_interval_s: float, evaluation_interval_s: float | None = None) -> Window:
    """Raise the window to max(4 x scrape interval, evaluation interval), saying why.

    rate() needs at least two samples in the window and is noisy with few (robustperception's 4x rule, Grafana's
    $__rate_interval); a window shorter than the evaluation interval would skip traffic between evaluations.
    """
    if window_s <= 0 or scrape_interval_s <= 0:
        raise ValueError("window and scrape interval must be positive durations")
    floor = MIN_SCRAPES_PER_WINDOW * scrape_interval_s
    reasons: list[str] = []
    seconds = window_s
    if seconds < floor:
        seconds = floor
        reasons.append(f"{MIN_SCRAPES_PER_WINDOW} x scrape interval {_secs(scrape_interval_s)}")
    if evaluation_interval_s is not None and seconds < evaluation_interval_s:
        seconds = evaluation_interval_s
        reasons.append(f"the evaluation interval {_secs(evaluation_interval_s)}")
    note = f"window {_secs(window_s)} raised to {_secs(seconds)}: " + " and ".join(reasons) if reasons else ""
    return Window(seconds=seconds, requested_seconds=window_s, note=note)


def _secs(seconds: float) -> str:
    return Window(seconds, seconds, "").promql()


def wider_windows(base: Window, limit_s: float | None) -> tuple[Window, ...]:
    """The windows to try, shortest first, when `base` holds too few samples: doubling, up to MAX_WINDOW_S and never
    further back than `limit_s` (how long the running configuration has run, settled: the series of the scope's
    config hash before then belong to an earlier run of it, with another configuration in between). None: not known,
    so no wider window. Each keeps the spec's requested window and says why it is wider."""
    if limit_s is None:
        return ()
    top = min(MAX_WINDOW_S, math.floor(limit_s))
    out: list[Window] = []
    seconds = base.seconds
    while seconds < top:
        seconds = min(2 * seconds, top)
        out.append(Window(seconds, base.requested_seconds, ""))
    return tuple(out)


def extended(base: Window, wider: Window, why: str) -> Window:
    """`wider` as the window of the evaluation, noting the base window it replaced and why."""
    note = f"window {base.promql()} extended to {wider.promql()}: {why}"
    return replace(wider, note=f"{base.note}; {note}" if base.note else note)


@dataclass(frozen=True)
class Query:
    """One measurement's PromQL, or why this vLLM version cannot provide it."""

    signal: Signal
    promql: str | None
    unit: str
    unavailable: str = ""  # set when promql is None
    group_by: str | None = None  # the one label the result is split by (per-position acceptance); None: one series

    @property
    def gate(self) -> Signal | None:
        return EVIDENCE_GATES.get(self.signal)


def _unavailable(signal: Signal, unit: str, why: str, group_by: str | None = None) -> Query:
    return Query(signal, None, unit, unavailable=why, group_by=group_by)


def _rate(metric: str, scope: Selection, window: Window) -> str:
    return f"rate({metric}{scope.selector()}[{window.promql()}])"


def _ratio(numerator: str, denominator: str, scope: Selection, window: Window) -> str:
    top = _agg("sum", _rate(numerator, scope, window), scope)
    return f"{top} / ({_agg('sum', _rate(denominator, scope, window), scope)} > 0)"


def acceptance_rate(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Accepted / proposed draft tokens: empty (NoData) when nothing was drafted, never NaN."""
    return Query(Signal.ACCEPTANCE_RATE, _ratio(names.accepted_tokens, names.draft_tokens, scope, window), "ratio")


def mean_acceptance_length(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Tokens emitted per verification step, defined as the version's own log line defines it.

    From 0.9.0 vLLM counts the bonus token (1 + accepted/drafts); 0.8.5-0.8.x logged accepted/drafts. Versions before
    0.8.5 have no drafts counter.
    """
    if names.drafts is None:
        return _unavailable(Signal.MEAN_ACCEPTANCE_LENGTH, "tokens", "this vLLM version has no drafts counter")
    ratio = _ratio(names.accepted_tokens, names.drafts, scope, window)
    promql = f"1 + {ratio}" if names.mean_acceptance_length_includes_bonus else ratio
    return Query(Signal.MEAN_ACCEPTANCE_LENGTH, promql, "tokens")


def acceptance_by_position(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Unconditional acceptance r_j of draft position j (label `position`, 0-based) per verification step."""
    if names.accepted_per_position is None or names.drafts is None:
        return _unavailable(
            Signal.ACCEPTANCE_BY_POSITION, "ratio", "this vLLM version has no per-position counter", "position"
        )
    per_position = _agg("sum", _rate(names.accepted_per_position, scope, window), scope, "position")
    drafts = f"({_agg('sum', _rate(names.drafts, scope, window), scope)} > 0)"
    on = ", ".join(scope.grouping())
    return Query(
        Signal.ACCEPTANCE_BY_POSITION, f"{per_position} / on({on}) group_left() {drafts}", "ratio", group_by="position"
    )


def quantile(
    signal: Signal, q: float, histogram: str | None, scope: Selection, window: Window, missing: str = ""
) -> Query:
    """histogram_quantile over classic buckets; NaN (NoData) when the window holds no observation."""
    if histogram is None:
        return _unavailable(signal, "seconds", missing or "this vLLM version does not export the histogram")
    rate = _rate(f"{histogram}_bucket", scope, window)
    return Query(signal, f"histogram_quantile({q}, {_agg('sum', rate, scope, 'le')})", "seconds")


def tpot_quantile(signal: Signal, q: float, names: MetricNames, scope: Selection, window: Window) -> Query:
    """Per-token latency from the per-request histogram, never the per-step inter-token one.

    Under speculation one inter-token observation covers up to K+1 tokens, so its quantiles mix step time with
    acceptance. The per-request TPOT histogram exists from 0.11.0; before that no
    per-token latency is exported and the measurement is unavailable.
    """
    return quantile(
        signal, q, names.per_token_latency, scope, window, "vllm:request_time_per_output_token_seconds needs vLLM 0.11+"
    )


def tpot_mean(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Mean per-token latency across finished requests (sum/count): no bucket interpolation error."""
    if names.per_token_latency is None:
        return _unavailable(Signal.TPOT_MEAN, "seconds", "vllm:request_time_per_output_token_seconds needs vLLM 0.11+")
    hist = names.per_token_latency
    return Query(Signal.TPOT_MEAN, _ratio(f"{hist}_sum", f"{hist}_count", scope, window), "seconds")


def _over_time(
    signal: Signal, outer: str, inner: str, metric: str, scope: Selection, window: Window, unit: str
) -> Query:
    return Query(signal, _agg(outer, f"{inner}({metric}{scope.selector()}[{window.promql()}])", scope), unit)


def running_requests(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Requests in model execution across all engines, averaged over the window (a gauge sampled at scrape time)."""
    return _over_time(
        Signal.RUNNING_REQUESTS, "sum", "avg_over_time", names.running_requests, scope, window, "requests"
    )


def batch_size(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Mean running requests per engine: the batch size vLLM's threshold and schedule compare against."""
    return _over_time(Signal.BATCH_SIZE, "avg", "avg_over_time", names.running_requests, scope, window, "requests")


def batch_size_peak(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Largest running-request sample of any engine in the window."""
    return _over_time(Signal.BATCH_SIZE_PEAK, "max", "max_over_time", names.running_requests, scope, window, "requests")


def waiting_requests(names: MetricNames, scope: Selection, window: Window) -> Query:
    return _over_time(
        Signal.WAITING_REQUESTS, "sum", "avg_over_time", names.waiting_requests, scope, window, "requests"
    )


def kv_cache_usage(names: MetricNames, scope: Selection, window: Window) -> Query:
    """The busiest engine's mean KV-cache usage (0..1): pressure is per engine, so take the max, not a mean."""
    return _over_time(Signal.KV_CACHE_USAGE, "max", "avg_over_time", names.kv_cache_usage, scope, window, "ratio")


def _sum_rate(signal: Signal, metric: str, scope: Selection, window: Window, unit: str) -> Query:
    return Query(signal, _agg("sum", _rate(metric, scope, window), scope), unit)


def request_rate(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Finished requests per second (the e2e histogram's count)."""
    return _sum_rate(Signal.REQUEST_RATE, f"{names.e2e_latency}_count", scope, window, "requests/s")


def generation_token_rate(names: MetricNames, scope: Selection, window: Window) -> Query:
    return _sum_rate(Signal.GENERATION_TOKEN_RATE, names.generation_tokens, scope, window, "tokens/s")


def preemption_rate(names: MetricNames, scope: Selection, window: Window) -> Query:
    return _sum_rate(Signal.PREEMPTION_RATE, names.preemptions, scope, window, "preemptions/s")


def draft_tokens_in_window(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Evidence gate for acceptance: draft tokens proposed in the window (empty while speculation is off)."""
    return Query(
        Signal.DRAFT_TOKENS_IN_WINDOW,
        _agg("sum", f"increase({names.draft_tokens}{scope.selector()}[{window.promql()}])", scope),
        "tokens",
    )


def requests_in_window(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Evidence gate for latency quantiles: requests finished in the window."""
    return Query(
        Signal.REQUESTS_IN_WINDOW,
        _agg("sum", f"increase({names.e2e_latency}_count{scope.selector()}[{window.promql()}])", scope),
        "requests",
    )


# vLLM's generation-token histogram uses 1-2-5 buckets (1, 2, 5, 10, 20, 50, 100, ...) up to max_model_len.
def short_output_bound(tokens: int) -> int:
    """The largest bucket bound <= `tokens`: "short" is counted exactly at a bucket edge, never interpolated."""
    bound, scale = 1, 1
    while True:
        for step in (1, 2, 5):
            if step * scale > tokens:
                return bound
            bound = step * scale
        scale *= 10


def output_short_fraction(
    names: MetricNames, scope: Selection, window: Window, short_output_tokens: int, max_model_len: int | None = None
) -> Query:
    """Share of the window's finished requests that generated at most `short_output_bound(tokens)` tokens.

    From the per-request generation-token histogram: the `le` bucket over the count, both rated. Prometheus 2
    keeps the exposition's `le="50.0"`, Prometheus 3 may normalise it; the regex matches both spellings. vLLM's
    buckets stop at the largest 1-2-5 value <= max_model_len (a real 0.32 scrape with 512 ends at 500): a bound
    above it has no bucket, and since no response can be longer, every response counts (`le="+Inf"`).
    """
    hist = names.request_generation_tokens
    bound = short_output_bound(short_output_tokens)
    if max_model_len is not None and bound > short_output_bound(max_model_len):
        selector = scope.selector()[:-1] + ',le="+Inf"}'
    else:
        selector = scope.selector()[:-1] + f',le=~"{bound}|{bound}[.]0"}}'
    short = _agg("sum", f"rate({hist}_bucket{selector}[{window.promql()}])", scope)
    total = f"({_agg('sum', _rate(f'{hist}_count', scope, window), scope)} > 0)"
    return Query(Signal.OUTPUT_SHORT_FRACTION, f"{short} / {total}", "ratio")


def output_tokens_p50(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Median response length in tokens (interpolated inside a 1-2-5 bucket: evidence to read, not to decide on)."""
    return quantile(Signal.OUTPUT_TOKENS_P50, 0.5, names.request_generation_tokens, scope, window)


def mean_prompt_tokens(names: MetricNames, scope: Selection, window: Window) -> Query:
    """Mean prompt length of the requests finished in the window (the prompt-token histogram's sum over its count).

    The histogram, not `vllm:prompt_tokens_total` over `request_rate`: it observes each finished request's whole
    prompt once, so numerator and denominator count the same requests, while the counter counts prefill work as it
    is done (at the start of other requests than the window finished; newer versions split it by cache source). The
    cost model wants the context a decode step attends over, which is the whole prompt, cached or not.
    """
    hist = names.request_prompt_tokens
    return Query(Signal.MEAN_PROMPT_TOKENS, _ratio(f"{hist}_sum", f"{hist}_count", scope, window), "tokens")


def ttft_bound(deadline_s: float) -> float | None:
    """The smallest TTFT bucket bound >= the deadline (a first token up to it counts as in time: the share errs
    toward in time); None above the largest finite bound (every first token counts, `le="+Inf"`)."""
    return next((b for b in TTFT_BUCKETS if b >= deadline_s - 1e-9), None)


def ttft_within_deadline(names: MetricNames, scope: Selection, window: Window, deadline_s: float | None) -> Query:
    """Share of the window's first tokens that came within the TTFT deadline (backlog.py: which running requests a
    restart would cost), counted exactly at a bucket bound, never interpolated: the `le`
    bucket over the count, both rated. Unavailable when the CR declares no TTFT deadline."""
    if deadline_s is None:
        return _unavailable(Signal.TTFT_WITHIN_DEADLINE, "ratio", "no TTFT deadline declared (latency.ttftDeadline)")
    hist = names.time_to_first_token
    bound = ttft_bound(deadline_s)
    if bound is None:
        selector = scope.selector()[:-1] + ',le="+Inf"}'
    else:
        text = f"{bound:g}".replace(".", "[.]")  # Prometheus 2 keeps "1.0", Prometheus 3 may write "1"
        selector = scope.selector()[:-1] + f',le=~"{text}|{text}[.]0"}}'
    within = _agg("sum", f"rate({hist}_bucket{selector}[{window.promql()}])", scope)
    total = f"({_agg('sum', _rate(f'{hist}_count', scope, window), scope)} > 0)"
    return Query(Signal.TTFT_WITHIN_DEADLINE, f"{within} / {total}", "ratio")


def build_queries(
    names: MetricNames,
    scope: Selection,
    window: Window,
    short_output_tokens: int = 50,
    max_model_len: int | None = None,
    ttft_deadline_s: float | None = None,
) -> tuple[Query, ...]:
    """Every measurement of one evaluation; evidence gates first so their results are at hand for the others."""
    return (
        draft_tokens_in_window(names, scope, window),
        requests_in_window(names, scope, window),
        acceptance_rate(names, scope, window),
        mean_acceptance_length(names, scope, window),
        acceptance_by_position(names, scope, window),
        tpot_quantile(Signal.TPOT_P50, 0.5, names, scope, window),
        tpot_quantile(Signal.TPOT_P99, 0.99, names, scope, window),
        tpot_mean(names, scope, window),
        quantile(Signal.TTFT_P50, 0.5, names.time_to_first_token, scope, window),
        quantile(Signal.TTFT_P99, 0.99, names.time_to_first_token, scope, window),
        quantile(Signal.E2E_P50, 0.5, names.e2e_latency, scope, window),
        quantile(Signal.E2E_P99, 0.99, names.e2e_latency, scope, window),
        running_requests(names, scope, window),
        batch_size(names, scope, window),
        batch_size_peak(names, scope, window),
        waiting_requests(names, scope, window),
        request_rate(names, scope, window),
        generation_token_rate(names, scope, window),
        preemption_rate(names, scope, window),
        kv_cache_usage(names, scope, window),
        output_short_fraction(names, scope, window, short_output_tokens, max_model_len),
        output_tokens_p50(names, scope, window),
        mean_prompt_tokens(names, scope, window),
        ttft_within_deadline(names, scope, window, ttft_deadline_s),
    )
