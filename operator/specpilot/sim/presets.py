"""Calibrated hardware/model set-ups for the simulator (pure; docs/design/simulator.md).

Every number is an input of the cost model (docs/design/cost-model.md): a step verifies N tokens and reads KV cached
tokens, costing a smooth roofline a·(1 + (N/N_r)^p)^(1/p) + c_kv·KV, rounded up to the next captured CUDA-graph size
(the staircase) and a fixed eager penalty beyond the capture limit (the cliff), plus the drafter and the scheduler
(T_sched + s_1 per request scheduled in the step).
Assumptions are marked as such; the calibration report (`specpilot bench --calibration`) shows how far each preset
lands from the published measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum


class DrafterKind(StrEnum):
    AUTOREGRESSIVE = "autoregressive"  # EAGLE/EAGLE-3/MTP heads: one small forward per draft position
    DRAFT_MODEL = "draft_model"  # a smaller model: K forwards at cost ratio c of the target's
    LOOKUP = "lookup"  # n-gram / suffix: CPU matching, ~0.6% of a verify


class AcceptanceKind(StrEnum):
    POSITIONAL = "positional"  # a_j = alpha_i * rho^(j-1), alpha_i ~ Beta per request (EAGLE-like, draft model)
    BURSTY = "bursty"  # two-state match/no-match chain per request (n-gram)


@dataclass(frozen=True)
class DrafterPreset:
    """Cost and acceptance of one speculation method on one preset."""

    kind: DrafterKind
    draft_ms: float = 0.0  # d_0 per draft position (autoregressive)
    draft_ms_per_request: float = 0.0  # d_1
    draft_kv_ns: float = 0.0  # d_kv per cached token read by the drafter
    cost_ratio: float = 0.0  # c, draft model forward / target forward
    lookup_fraction: float = 0.006  # lookup drafter cost as a fraction of the verify
    kv_factor: float = 0.0  # extra KV bytes per token for the drafter's own cache (draft model ~1.77x on 8B)
    acceptance: AcceptanceKind = AcceptanceKind.POSITIONAL
    alpha: float = 0.62  # mean per-request alpha at T = 0
    kappa: float = 20.0  # Beta concentration of per-request alpha
    rho: float = 1.0  # positional decay
    temperature_slope: float = 0.15  # s of alpha(T) = alpha0·(1 - s·min(T,1)) - s2·max(0, T-1)
    match_probability: float = 0.27  # n-gram: P(match) in the free-text state
    first_accept: float = 0.34  # n-gram: q1, first draft accepted after a match
    alpha_hot: float = 0.83  # n-gram: continuation acceptance in the copy state


@dataclass(frozen=True)
class Preset:
    """One target model on one GPU set-up."""

    name: str
    description: str
    verify_base_ms: float  # a
    ridge_tokens: float  # N_r
    ridge_sharpness: float  # p
    kv_ns_per_token: float  # c_kv
    sched_ms: float  # T_sched: per step
    capture_limit: int  # vLLM's max_cudagraph_capture_size ceiling on this platform
    eager_penalty_ms: float  # delta_eager beyond the capture limit (assumption)
    spec_fixed_fraction: float  # SD configured at all: +2% per step (PR #5000)
    kv_capacity_tokens: int  # KV cache tokens at gpu-memory-utilization 0.92 without a drafter
    restart_s: float  # drain + load + graph capture (assumption)
    drafters: dict[str, DrafterPreset] = field(default_factory=dict)
    default_max_num_seqs: int = 256
    sched_ms_per_request: float = 0.0  # s_1: engine work per request scheduled in a step (scheduling, inputs, sampling)
    # The set-up the numbers were measured on, so the operator can tell which profile fits a deployment
    # (costprofile.py). `target_model` is a catalog id (parameters come from the catalog, not from here); None marks
    # a preset that no real deployment matches (cpu-tiny), which the operator never picks.
    target_model: str | None = None
    tensor_parallel_size: int = 1
    gpu: str = ""  # GPU product as in the nvidia.com/gpu.product label's family, e.g. "H100"
    gpu_memory_gib: float = 80.0

    def verify_ms(self, tokens: int, kv_tokens: int) -> float:
        """Roofline of one forward over `tokens` new tokens reading `kv_tokens` cached tokens (no staircase)."""
        bend = math.pow(1 + math.pow(tokens / self.ridge_tokens, self.ridge_sharpness), 1 / self.ridge_sharpness)
        return self.verify_base_ms * bend + self.kv_ns_per_token * 1e-6 * kv_tokens

    def drafter(self, method: str) -> DrafterPreset:
        """The drafter of a method; eagle/eagle3/mtp share the autoregressive head entry when one is missing."""
        if method in self.drafters:
            return self.drafters[method]
        for alias in ("eagle3", "eagle", "mtp"):
            if method in ("eagle", "eagle3", "mtp") and alias in self.drafters:
                return self.drafters[alias]
        if method in ("suffix",) and "ngram" in self.drafters:
            return self.drafters["ngram"]
        known = ", ".join(sorted(self.drafters))
        raise ValueError(f"preset {self.name} has no drafter for method {method!r} (known: {known})")

    def with_alpha(self, method: str, alpha: float) -> Preset:
        """The same preset with another mean acceptance for one method (calibration per dataset)."""
        return replace(self, drafters={**self.drafters, method: replace(self.drafter(method), alpha=alpha)})


def capture_sizes(limit: int) -> tuple[int, ...]:
    """vLLM V1's default CUDA-graph sizes: [1, 2, 4] + range(8, 256, 8) + range(256, limit + 1, 16)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, limit + 1, 16)]
    return tuple(s for s in sizes if s <= limit)


# Calibrated to SpecDecode-Bench (arXiv 2601.11580) and vLLM PR #32374; EAGLE-3 alpha from the SpecDecode-Bench traces;
# draft-model c ≈ 37.5% of an 8B target's forward (SpecDecode-Bench).
LLAMA8B_H100 = Preset(
    name="llama8b-h100",
    description="Llama-3.1-8B-Instruct on 1xH100 (BF16): EAGLE-3 head, 1B draft model, n-gram",
    verify_base_ms=5.886,
    # N_r, c_kv and s_1 fitted jointly to SpecDecode-Bench (speedups at batch 1-128) and PR #32374's step-time profile
    # (batch 1-256). The earlier N_r 320, c_kv 39.26 ns (HBM-bound KV read, 128 KiB at
    # 3.35 TB/s) and no per-request term left that profile's batch-256 steps 19-39% short: N_r 220 is the compute
    # slope of ~27 µs per token beyond the ridge, 48 ns is the KV read at ~80% of HBM bandwidth, and 8 µs per request
    # the engine's per-request work, which is what makes batch 256 cost more than tokens and KV alone explain.
    ridge_tokens=220,
    ridge_sharpness=2.0,
    kv_ns_per_token=48.0,
    sched_ms=1.207,
    sched_ms_per_request=0.008,
    capture_limit=512,
    eager_penalty_ms=3.0,
    spec_fixed_fraction=0.02,
    kv_capacity_tokens=440_000,  # (80 GB·0.92 - 16 GB weights - ~4 GB activations) / 128 KiB per token
    restart_s=90.0,
    target_model="meta-llama/Llama-3.1-8B-Instruct",
    tensor_parallel_size=1,
    gpu="H100",
    gpu_memory_gib=80.0,
    drafters={
        "eagle3": DrafterPreset(DrafterKind.AUTOREGRESSIVE, draft_ms=0.712, draft_kv_ns=2.38, alpha=0.62, kappa=20),
        "eagle": DrafterPreset(
            DrafterKind.AUTOREGRESSIVE, draft_ms=0.712, draft_kv_ns=2.38, alpha=0.60, kappa=20, rho=0.85
        ),
        "draft_model": DrafterPreset(
            DrafterKind.DRAFT_MODEL, cost_ratio=0.375, kv_factor=0.77, alpha=0.70, kappa=30, temperature_slope=0.2
        ),
        "ngram": DrafterPreset(DrafterKind.LOOKUP, acceptance=AcceptanceKind.BURSTY, temperature_slope=0.1),
    },
)

# Fitted to SpecDecode-Bench's 70B curves: draft model c = 0.125, alpha 0.80; EAGLE alpha 0.66; n-gram as on ShareGPT.
LLAMA70B_4XH100 = Preset(
    name="llama70b-4xh100",
    description="Llama-3-70B-Instruct on 4xH100 (TP 4): 8B/1B draft model, EAGLE head, n-gram",
    verify_base_ms=12.0,
    ridge_tokens=220,
    ridge_sharpness=1.5,
    kv_ns_per_token=24.0,
    sched_ms=1.5,
    capture_limit=512,
    eager_penalty_ms=6.0,
    spec_fixed_fraction=0.02,
    kv_capacity_tokens=480_000,  # (4·80 GB·0.92 - 140 GB weights) / 320 KiB per token
    restart_s=300.0,
    target_model="meta-llama/Llama-3.1-70B-Instruct",  # Llama-3-70B's architecture; the catalog lists 3.1 and 3.3
    tensor_parallel_size=4,
    gpu="H100",
    gpu_memory_gib=80.0,
    drafters={
        "draft_model": DrafterPreset(
            DrafterKind.DRAFT_MODEL, cost_ratio=0.125, kv_factor=0.4, alpha=0.80, kappa=30, temperature_slope=0.2
        ),
        "eagle": DrafterPreset(DrafterKind.AUTOREGRESSIVE, draft_ms=0.9, alpha=0.66, kappa=20),
        "eagle3": DrafterPreset(DrafterKind.AUTOREGRESSIVE, draft_ms=0.9, alpha=0.70, kappa=20),
        "ngram": DrafterPreset(DrafterKind.LOOKUP, acceptance=AcceptanceKind.BURSTY, temperature_slope=0.1),
    },
)

# A CPU-sized set-up for the local cluster and demos: slow steps so a laptop can watch batches form.
CPU_TINY = Preset(
    name="cpu-tiny",
    description="tiny model on a CPU (demo/cluster tests): 20 ms steps, crossover at a few tens of requests",
    verify_base_ms=20.0,
    ridge_tokens=40,
    ridge_sharpness=1.5,
    kv_ns_per_token=50.0,
    sched_ms=1.0,
    capture_limit=512,
    eager_penalty_ms=0.0,
    spec_fixed_fraction=0.02,
    kv_capacity_tokens=16_384,
    restart_s=20.0,
    default_max_num_seqs=64,
    drafters={
        "draft_model": DrafterPreset(DrafterKind.DRAFT_MODEL, cost_ratio=0.15, kv_factor=0.5, alpha=0.75, kappa=30),
        "eagle3": DrafterPreset(DrafterKind.AUTOREGRESSIVE, draft_ms=2.0, alpha=0.65, kappa=20),
        "ngram": DrafterPreset(DrafterKind.LOOKUP, acceptance=AcceptanceKind.BURSTY),
    },
)

PRESETS: dict[str, Preset] = {p.name: p for p in (LLAMA8B_H100, LLAMA70B_4XH100, CPU_TINY)}


def preset_named(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
