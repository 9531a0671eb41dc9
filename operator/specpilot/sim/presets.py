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
from dataclasses import dataclass, field, fields, replace
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
        # A larger draft model (Llama-3.1-8B-Instruct) for the drafter-choice scenarios. Assumptions, not a fit: c is
        # the 1B draft's measured per-forward cost (0.125 x 12 ms = 1.5 ms, overhead-bound) plus the 8B's weights read
        # at TP 4 (16 GB / 4 GPUs at 3.35 TB/s = 1.2 ms), i.e. 2.7 ms / 12 ms; its KV is 128 KiB per token against the
        # 70B's 320 KiB; alpha 0.86 assumes a larger draft of the same family accepts more than the 1B's 0.80.
        "draft_model_8b": DrafterPreset(
            DrafterKind.DRAFT_MODEL, cost_ratio=0.225, kv_factor=0.4, alpha=0.86, kappa=30, temperature_slope=0.2
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


# ------------------------------------------------------------------------------------------------ true profiles
#
# Hardware the decision benchmark simulates but the operator was never calibrated on: the controller is handed
# only what a real cluster tells it (the CR, the GPU product label, its own measurements), so its profile is a prior
# and the simulator's truth differs from it. Test conditions, not calibrations (docs/design/simulator.md).

# A perturbed copy keeps the set-up (target, TP, GPU) of its base, so the CR and the operator's prior are the base's.
PERTURBATIONS: dict[str, tuple[float, float, float]] = {  # name: (roofline ridge, verify cost, drafter cost) factors
    "perturbed-ridge-low": (0.6, 1.5, 2.0),
    "perturbed-ridge-high": (1.4, 1.5, 2.0),
}
PERTURBED_RESTART = 1.5  # a restart also takes longer than the prior assumes: the controller must measure its own


def perturbed(base: Preset, variant: str) -> Preset:
    """`base` with its roofline ridge, verify forward (base cost and KV read) and drafter cost scaled."""
    ridge, verify, drafter = PERTURBATIONS[variant]

    def slower(d: DrafterPreset) -> DrafterPreset:
        return replace(d, draft_ms=d.draft_ms * drafter, draft_ms_per_request=d.draft_ms_per_request * drafter,
                       draft_kv_ns=d.draft_kv_ns * drafter, cost_ratio=d.cost_ratio * drafter,
                       lookup_fraction=d.lookup_fraction * drafter)  # fmt: skip

    return replace(
        base,
        name=f"{base.name}-{variant}",
        description=f"{base.description}; true profile: ridge x{ridge:g}, verify x{verify:g}, drafter x{drafter:g}",
        verify_base_ms=base.verify_base_ms * verify,
        kv_ns_per_token=base.kv_ns_per_token * verify,
        ridge_tokens=base.ridge_tokens * ridge,
        restart_s=base.restart_s * PERTURBED_RESTART,
        drafters={m: slower(d) for m, d in base.drafters.items()},
    )


def gpu_class(
    base: Preset, name: str, gpu: str, *, bandwidth_tbs: float, tflops: float, memory_gib: float, kv_tokens: int,
    restart_s: float, sched_ms: float | None = None,
) -> Preset:  # fmt: skip
    """`base`'s model on another GPU class, scaled from the H100 by the datasheet's HBM bandwidth and dense BF16
    FLOP/s: memory-bound terms (weights, KV and drafter reads) by the bandwidth ratio, the ridge by the ratio of
    FLOP/s to bandwidth (the roofline's F/BW). An estimate of the shape, not a calibration."""
    slower = 3.35 / bandwidth_tbs  # H100 SXM: 3.35 TB/s, 989 TFLOP/s dense BF16
    ridge = (tflops / 989.0) / (bandwidth_tbs / 3.35)

    def scaled(d: DrafterPreset) -> DrafterPreset:
        return replace(d, draft_ms=d.draft_ms * slower, draft_kv_ns=d.draft_kv_ns * slower)

    return replace(
        base,
        name=name,
        description=f"{base.description.split(' on ')[0]} on one {gpu}-like GPU (scaled from the H100)",
        verify_base_ms=base.verify_base_ms * slower,
        kv_ns_per_token=base.kv_ns_per_token * slower,
        ridge_tokens=base.ridge_tokens * ridge,
        eager_penalty_ms=base.eager_penalty_ms * slower,
        sched_ms=base.sched_ms if sched_ms is None else sched_ms,
        kv_capacity_tokens=kv_tokens,
        restart_s=restart_s,
        gpu=gpu,
        gpu_memory_gib=memory_gib,
        drafters={m: scaled(d) for m, d in base.drafters.items()},
    )


# KV tokens: (memory x 0.92 - 15 GiB of 8B weights - activations) / 128 KiB per token.
UNSEEN_GPUS = (
    gpu_class(LLAMA8B_H100, "llama8b-a100-like", "A100", bandwidth_tbs=2.04, tflops=312, memory_gib=80,
              kv_tokens=440_000, restart_s=100.0),
    gpu_class(LLAMA8B_H100, "llama8b-l4-like", "L4", bandwidth_tbs=0.30, tflops=121, memory_gib=24,
              kv_tokens=36_000, restart_s=120.0),
    gpu_class(LLAMA8B_H100, "llama8b-mi300x-like", "MI300X", bandwidth_tbs=5.3, tflops=1307, memory_gib=192,
              kv_tokens=1_250_000, restart_s=150.0, sched_ms=1.5),
)  # fmt: skip

# `specpilot bench --true-profile CLASS`: the calibrated presets each unseen GPU class has a copy of. Unlike a
# perturbed copy, a class copy is other hardware, so its CR states that GPU (product label and memory).
GPU_CLASS_COPIES: dict[str, dict[str, str]] = {
    "a100-like": {LLAMA8B_H100.name: "llama8b-a100-like"},
    "l4-like": {LLAMA8B_H100.name: "llama8b-l4-like"},
    "mi300x-like": {LLAMA8B_H100.name: "llama8b-mi300x-like"},
}

TRUE_PROFILES: dict[str, Preset] = {
    **{p.name: p for p in UNSEEN_GPUS},
    **{f"{b.name}-{v}": perturbed(b, v) for b in (LLAMA8B_H100, LLAMA70B_4XH100) for v in PERTURBATIONS},
}


def preset_named(name: str) -> Preset:
    """A calibrated preset, or a true profile of the benchmark."""
    found = PRESETS.get(name) or TRUE_PROFILES.get(name)
    if found is None:
        known = ", ".join(sorted({*PRESETS, *TRUE_PROFILES}))
        raise ValueError(f"unknown preset {name!r}; known: {known}")
    return found


# ------------------------------------------------------------------------------------------------ fitted profiles
#
# A profile document is a base preset with some of its numbers replaced, e.g. the cost and acceptance fitted to one
# real server's own measurements: {"base": "cpu-tiny", "verify_base_ms": 9.1, "ridge_tokens": 310.0,
# "drafters": {"draft_model": {"cost_ratio": 0.4, "alpha": 0.47}}}. Only numbers can be replaced; the set-up fields
# (target model, GPU) stay the base's.

_PROFILE_TEXT = ("name", "description")
_PROFILE_NUMBERS = tuple(
    f.name for f in fields(Preset) if f.type in ("float", "int") and f.name not in ("tensor_parallel_size",)
)
_DRAFTER_NUMBERS = tuple(f.name for f in fields(DrafterPreset) if f.type in ("float", "int"))
_WHOLE = {f.name for f in (*fields(Preset), *fields(DrafterPreset)) if f.type == "int"}


def preset_from_profile(doc: object, source: str) -> Preset:
    """The preset a profile document describes; a ValueError naming `source` and the field for anything else."""
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: a profile is a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - {"base", "drafters", *_PROFILE_TEXT, *_PROFILE_NUMBERS})
    if unknown:
        raise ValueError(f"{source}: unknown field {unknown[0]!r}; allowed: base, drafters, "
                         f"{', '.join((*_PROFILE_TEXT, *_PROFILE_NUMBERS))}")  # fmt: skip
    base_name = doc.get("base")
    if not isinstance(base_name, str) or base_name not in PRESETS:
        raise ValueError(f"{source}: base: expected one of {', '.join(sorted(PRESETS))}, got {base_name!r}")
    base = PRESETS[base_name]
    changes: dict[str, object] = {k: _profile_number(source, k, doc[k]) for k in _PROFILE_NUMBERS if k in doc}
    for key in _PROFILE_TEXT:
        if key in doc and not isinstance(doc[key], str):
            raise ValueError(f"{source}: {key}: expected a string, got {doc[key]!r}")
        changes[key] = doc.get(key, f"{base.name}-fitted" if key == "name" else f"{base.description} (fitted)")
    changes["drafters"] = _profile_drafters(source, base, doc.get("drafters", {}))
    return replace(base, **changes)  # type: ignore[arg-type]


def _profile_drafters(source: str, base: Preset, raw: object) -> dict[str, DrafterPreset]:
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: drafters: expected an object of method -> fields, got {raw!r}")
    drafters = dict(base.drafters)
    for method, given in raw.items():
        where = f"drafters.{method}"
        try:
            drafter = base.drafter(method)
        except ValueError as err:
            raise ValueError(f"{source}: {where}: {err}") from None
        if not isinstance(given, dict):
            raise ValueError(f"{source}: {where}: expected an object of fields, got {given!r}")
        unknown = sorted(set(given) - set(_DRAFTER_NUMBERS))
        if unknown:
            raise ValueError(f"{source}: {where}: unknown field {unknown[0]!r}; allowed: {', '.join(_DRAFTER_NUMBERS)}")
        numbers = {k: _profile_number(source, f"{where}.{k}", v) for k, v in given.items()}
        drafters[method] = replace(drafter, **numbers)  # type: ignore[arg-type]
    return drafters


def _profile_number(source: str, field_name: str, value: object) -> float | int:
    key = field_name.rsplit(".", 1)[-1]
    whole = key in _WHOLE
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
        raise ValueError(f"{source}: {field_name}: expected {'a whole number' if whole else 'a number'}, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{source}: {field_name}: expected a finite number >= 0, got {value!r}")
    if key in ("ridge_tokens", "ridge_sharpness", "kv_capacity_tokens") and value == 0:
        raise ValueError(f"{source}: {field_name}: must be > 0")
    if key in ("alpha",) and value >= 1:
        raise ValueError(f"{source}: {field_name}: an acceptance is < 1, got {value!r}")
    return value
