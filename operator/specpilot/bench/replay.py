"""Trace scenarios: a recorded trace replayed through the simulator like a built-in scenario.

The trace fixes the arrivals and every request's prompt and output length; the scenario adds what a trace does not
record: the set-up (preset, method, K), the temperature mix (the share of requests at T = 1.0, the rest split between
T = 0 and T = 0.7, as in the synthetic scenarios) and a drafter quality multiplier. Load is either the trace's own
rate, times a factor (`time_scale`), or "the busiest minute at this share of the preset's no-speculation capacity at
the trace's own lengths" (`load`): arrival times are divided by the factor that puts the peak minute there, so the
shape of the hour is kept and only its speed changes.

The shipped trace is the Azure LLM inference trace 2023, conversation service (traces/README.md: source, license
and attribution, CC-BY 4.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specpilot.bench.capacity import capacity_qps
from specpilot.bench.scenarios import VLLM_VERSION, Replay, Scenario
from specpilot.bench.trace import Trace, read_trace
from specpilot.sim.presets import preset_named

AZURE_CONV = Path(__file__).parent / "traces" / "azure-llm-inference-2023-conv.csv.gz"
AZURE_CONV_NAME = "azure-llm-inference-2023-conv"

# A replay lasts until its last arrival plus this quiet time, so the requests still in flight finish and count.
DRAIN_S = 60.0

# (TPOT ms, TTFT s) per preset: the SLOs of the synthetic scenarios on the same set-ups.
SLOS = {"llama8b-h100": (15.0, 2.0), "llama70b-4xh100": (45.0, 3.0)}
DEFAULT_SLO = (30.0, 2.0)

# Requests per second each preset completes without speculation, engine full, at the Azure conversation trace's
# lengths (bench/capacity.py over its (prompt, output) pairs, max_num_seqs 256, max_model_len 16384); a unit test
# fails when a refit moves a figure by more than 1%. Other traces measure theirs when they are loaded.
AZURE_CONV_CAPACITY_QPS = {"llama8b-h100": 18.552, "llama70b-4xh100": 11.304}

# The standard suite's trace scenarios: (name suffix, preset, method, K) x load (None: the trace's own rate).
STANDARD_SETUPS = (("8b-eagle3", "llama8b-h100", "eagle3", 3), ("70b-draft", "llama70b-4xh100", "draft_model", 4))
STANDARD_LOADS: tuple[float | None, ...] = (None, 0.6, 0.9, 1.2)


def model_len_for(trace: Trace) -> int:
    """max_model_len of a replay: 8192, or the power of two that fits the longest request (prompt + output)."""
    longest = max(r.prompt_tokens + r.output_tokens for r in trace.requests)
    size = 8192
    while size < longest:
        size *= 2
    return size


def trace_capacity_qps(trace: Trace, preset: str, max_num_seqs: int = 256) -> float:
    """The preset's no-speculation capacity at this trace's lengths (requests per second; a closed-loop run)."""
    pairs = [(r.prompt_tokens, r.output_tokens) for r in trace.requests]
    return capacity_qps(
        preset_named(preset), pairs, version=VLLM_VERSION, max_num_seqs=max_num_seqs, max_model_len=model_len_for(trace)
    )


def replay_scenario(
    trace: Trace,
    name: str,
    preset: str,
    method: str,
    k: int,
    *,
    load: float | None = None,
    capacity: float | None = None,
    time_scale: float = 1.0,
    hot_share: float = 0.2,
    acceptance_scale: float = 1.0,
) -> Scenario:
    """A trace as a scenario. `load`: the peak minute at this share of `capacity` (measured when not given);
    otherwise arrival times x `time_scale`."""
    drafters = preset_named(preset).drafters
    if method not in drafters:
        raise ValueError(f"preset {preset} has no {method!r} drafter; it has {', '.join(sorted(drafters))}")
    how = f"time x{time_scale:g}" if time_scale != 1 else "its own rate"
    if load is not None:
        peak_qps = load * (capacity if capacity is not None else trace_capacity_qps(trace, preset))
        time_scale = trace.time_scale_for_peak(peak_qps)
        how = f"peak minute at {load:.0%} of no-SD capacity ({peak_qps:.1f} QPS, time x{time_scale:.3g})"
    scaled = trace.time_scaled(time_scale)
    tpot, ttft = SLOS.get(preset, DEFAULT_SLO)
    requests = tuple((r.at, r.prompt_tokens, r.output_tokens) for r in scaled.requests)
    return Scenario(
        name,
        f"trace {trace.source} at {how}: {preset} {method} K={k}, {hot_share:.0%} of requests at T=1.0"
        + (f", drafter x{acceptance_scale:g}" if acceptance_scale != 1 else ""),
        preset,
        method,
        k,
        scaled.span_s + DRAIN_S,
        ((0.0, 0.0),),  # unused: the replay sets the arrivals
        ((0.0, hot_share),),
        alpha_multiplier=((0.0, acceptance_scale),),
        max_model_len=model_len_for(trace),
        tpot_slo_ms=tpot,
        ttft_slo_s=ttft,
        dynamic=False,
        replay=Replay(trace.source, requests),
    )  # fmt: skip


def standard_trace_scenarios(setups: Sequence[tuple[str, str, str, int]] = STANDARD_SETUPS) -> tuple[Scenario, ...]:
    """The Azure conversation trace at its own rate and at 60/90/120% of capacity, for each standard set-up."""
    trace = read_trace(AZURE_CONV)
    out: list[Scenario] = []
    for suffix, preset, method, k in setups:
        for load in STANDARD_LOADS:
            name = f"azure-conv-{suffix}-" + ("own-rate" if load is None else f"{round(load * 100)}pct")
            out.append(replay_scenario(trace, name, preset, method, k, load=load,
                                       capacity=AZURE_CONV_CAPACITY_QPS[preset]))  # fmt: skip
    return tuple(out)
