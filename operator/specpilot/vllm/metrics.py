"""The Prometheus series vLLM exposes, per version (docs/design/vllm-versions.md).

Names changed several times (V0 gauges vs V1 counters; time_per_output_token -> inter_token_latency; the per-request
TPOT histogram arrived in 0.11). Query builders take a MetricNames so no PromQL hard-codes a name that a given
version does not export; a missing series is None, and the caller reports that measurement as unavailable.

The engine matters as much as the version: from 0.8.0 to 0.9.2 a speculating pod may run the V0 engine (vLLM falls back
to it for draft_model, and in 0.8.x for every method unless VLLM_USE_V1=1), and V0 exports a ratio gauge, no per-draft
counters and no `engine` label, and counts accepted tokens differently (V0 counts any verified token, V1 the accepted
prefix: do not compare their rates). dialects.render_command reports which engine runs; pass it here.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot.vllm.versions import V0_ENGINE_REMOVED, V1_ENGINE_DEFAULT, V1_ENGINE_OPT_IN, Engine, VllmVersion, v

# vllm:time_to_first_token_seconds bucket bounds (vllm/v1/metrics/loggers.py; the simulator exposes the same): the
# share of first tokens within a TTFT deadline is counted exactly at one of these (promql.ttft_within_deadline)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip


@dataclass(frozen=True)
class MetricNames:
    accepted_tokens: str  # counter
    draft_tokens: str  # counter
    drafts: str | None  # counter: verification steps with >= 1 draft token (V1 0.8.5+)
    accepted_per_position: str | None  # counter with label `position` (V1 0.8.5+)
    acceptance_rate_gauge: str | None  # V0 only: ratio gauge over vLLM's own logging window
    per_token_latency: str | None  # histogram: per-request decode time / (tokens - 1); the TPOT to decide on
    inter_token_latency: str  # histogram: one observation per engine step (per step, not per token, under SD)
    time_to_first_token: str  # histogram
    e2e_latency: str  # histogram
    running_requests: str  # gauge
    waiting_requests: str  # gauge
    kv_cache_usage: str  # gauge 0..1
    generation_tokens: str  # counter
    request_success: str  # counter, label finished_reason
    preemptions: str  # counter
    mean_acceptance_length_includes_bonus: bool  # 0.9.0+: 1 + accepted/drafts
    engine_label: bool  # V1 series carry `engine`
    request_generation_tokens: str = "vllm:request_generation_tokens"  # histogram: tokens per finished request
    request_prompt_tokens: str = "vllm:request_prompt_tokens"  # histogram: prompt tokens per finished request


def default_engine(version: VllmVersion) -> Engine:
    """The engine a pod without speculation runs when VLLM_USE_V1 is not set."""
    return Engine.V1 if version >= V1_ENGINE_DEFAULT else Engine.V0


def metric_names_for(version: VllmVersion, engine: Engine | None = None) -> MetricNames:
    """Return the series names a pod of this vLLM version exports on this engine (default: the version's default)."""
    engine = engine or default_engine(version)
    if engine is Engine.V0 and version >= V0_ENGINE_REMOVED:
        raise ValueError(f"vLLM {version} has no V0 engine (removed in {V0_ENGINE_REMOVED})")
    if engine is Engine.V1 and version < V1_ENGINE_OPT_IN:
        raise ValueError(f"vLLM {version} has no V1 engine (opt-in from {V1_ENGINE_OPT_IN})")
    v1 = engine is Engine.V1
    return MetricNames(
        accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        drafts="vllm:spec_decode_num_drafts_total" if v1 and version >= v("0.8.5") else None,
        accepted_per_position=(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total" if v1 and version >= v("0.8.5") else None
        ),
        acceptance_rate_gauge=None if v1 else "vllm:spec_decode_draft_acceptance_rate",
        per_token_latency="vllm:request_time_per_output_token_seconds" if version >= v("0.11.0") else None,
        inter_token_latency=(
            "vllm:inter_token_latency_seconds" if version >= v("0.10.2") else "vllm:time_per_output_token_seconds"
        ),
        time_to_first_token="vllm:time_to_first_token_seconds",
        e2e_latency="vllm:e2e_request_latency_seconds",
        running_requests="vllm:num_requests_running",
        waiting_requests="vllm:num_requests_waiting",
        kv_cache_usage="vllm:kv_cache_usage_perc" if v1 and version >= v("0.9.2") else "vllm:gpu_cache_usage_perc",
        generation_tokens="vllm:generation_tokens_total",
        request_success="vllm:request_success_total",
        preemptions="vllm:num_preemptions_total",
        mean_acceptance_length_includes_bonus=v1 and version >= v("0.9.0"),
        engine_label=v1 and version >= v("0.8.3"),
    )
