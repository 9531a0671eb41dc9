"""Which calibrated step-cost profile prices a deployment's steps, from what its spec says (pure).

The threshold fit (schedule.py) predicts step times T(B, k) from a profile of a calibrated set-up (sim/presets.py;
docs/design/cost-model.md). A 70B model on 4 GPUs runs steps about twice as long as an 8B model on one at batch ~180, so
pricing every deployment with the 8B profile made the consistency check refuse every fit of a 70B under load ("off
by more than x2"). The spec already names what decides step time: the target model (its parameter count from the
catalog or inline numbers; active parameters for mixture-of-experts models), the tensor-parallel size, the GPU (memory
per GPU, and the nvidia.com/gpu.product node selector when given) and the weight quantization. A set-up that matches a
calibrated one uses it; any other gets the nearest one (by model size and TP on a log scale) as the prior of its own
online fit (stepfit.py) and says so: its shape is another GPU's, so no decision prices with it until the deployment's
own windows fit it (FitSettings.calibrated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specpilot.api.v1alpha1 import Quantization, SpeculativeDeploymentSpec
from specpilot.autotune.model.rollcost import (
    drain_for,
    restart_cost_for,
    rollout_shape,
    tpot_target_ms,
    ttft_deadline_s,
)
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.model.stepcost import LLAMA8B_H100, PROFILES, StepCostModel
from specpilot.planning.catalog import UnknownArchitecture, count_active_parameters, lookup, resolve_architecture
from specpilot.sim.presets import PRESETS, Preset

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
SAME_SIZE = 1.2  # parameter counts within this factor count as the calibrated size (8.0B vs 8.03B, 70B vs 70.6B)
SAME_GPU_MEMORY = 1.05  # GiB per GPU within this factor count as the calibrated GPU's memory


@dataclass(frozen=True)
class Setup:
    """What decides step time, as the spec states it."""

    parameters: float | None  # active parameters of the target; None when neither cataloged nor inline
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_gib: float
    gpu_product: str | None  # the nvidia.com/gpu.product node selector, when the spec pins one
    quantization: Quantization
    source: str  # where the parameter count came from

    def describe(self) -> str:
        size = "unknown size" if self.parameters is None else f"{self.parameters / 1e9:.1f}B parameters"
        gpu = f"{self.gpu_memory_gib:g} GiB GPUs" + (f" ({self.gpu_product})" if self.gpu_product else "")
        pp = f", PP {self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else ""
        quant = "" if self.quantization is Quantization.NONE else f", {self.quantization.value} weights"
        return f"{size} ({self.source}), TP {self.tensor_parallel_size}{pp}, {gpu}{quant}"


@dataclass(frozen=True)
class CostProfileChoice:
    """The profile, whether the deployment matches its calibrated set-up, and why (shown in the evidence)."""

    model: StepCostModel
    preset: str
    calibrated: bool  # True: this set-up is the one the profile was calibrated on
    note: str
    restart_s: float  # the preset's restart time (drain + load + graph capture; an assumption)

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.preset, "match": "calibrated" if self.calibrated else "nearest", "note": self.note}


def setup_of(spec: SpeculativeDeploymentSpec) -> Setup:
    """The step-time-relevant facts of a spec; an unknown model has no parameter count rather than an error."""
    try:
        arch = resolve_architecture(spec.target.model, spec.target.architecture)
        parameters: float | None = float(arch.active_parameters)
        source = arch.source
    except UnknownArchitecture:
        parameters, source = None, "not cataloged, no spec.target.architecture"
    return Setup(
        parameters=parameters,
        tensor_parallel_size=spec.parallelism.tensor_parallel_size,
        pipeline_parallel_size=spec.parallelism.pipeline_parallel_size,
        gpu_memory_gib=spec.resources.gpu_memory_gi_b,
        gpu_product=spec.resources.node_selector.get(GPU_PRODUCT_LABEL),
        quantization=spec.target.quantization,
        source=source,
    )


def _preset_parameters(preset: Preset) -> float:
    assert preset.target_model is not None
    entry = lookup(preset.target_model)
    if entry is None:  # a preset naming a model the catalog lacks is a programming error, caught by the unit tests
        raise ValueError(f"preset {preset.name}: target model {preset.target_model!r} is not in the catalog")
    return float(count_active_parameters(entry))


def calibrated_presets() -> tuple[Preset, ...]:
    """Presets measured on a real set-up (cpu-tiny, a demo preset, matches no deployment)."""
    return tuple(p for p in PRESETS.values() if p.target_model is not None and p.name in PROFILES)


def _mismatches(setup: Setup, preset: Preset) -> list[str]:
    """How this set-up differs from the one the preset was calibrated on; empty when it is that set-up."""
    out: list[str] = []
    size = _preset_parameters(preset)
    if setup.parameters is None:
        out.append("target size unknown")
    elif max(setup.parameters, size) / min(setup.parameters, size) > SAME_SIZE:
        out.append(f"{setup.parameters / 1e9:.1f}B vs {size / 1e9:.1f}B parameters")
    if setup.tensor_parallel_size != preset.tensor_parallel_size:
        out.append(f"TP {setup.tensor_parallel_size} vs {preset.tensor_parallel_size}")
    if setup.pipeline_parallel_size != 1:
        out.append(f"PP {setup.pipeline_parallel_size} vs 1")
    memory_ratio = max(setup.gpu_memory_gib, preset.gpu_memory_gib) / min(setup.gpu_memory_gib, preset.gpu_memory_gib)
    if memory_ratio > SAME_GPU_MEMORY:
        out.append(f"{setup.gpu_memory_gib:g} vs {preset.gpu_memory_gib:g} GiB per GPU")
    if setup.gpu_product is not None and preset.gpu.lower() not in setup.gpu_product.lower():
        out.append(f"GPU {setup.gpu_product} vs {preset.gpu}")
    if setup.quantization is not Quantization.NONE:
        out.append(f"{setup.quantization.value} weights vs BF16")
    return out


def _distance(setup: Setup, preset: Preset) -> float:
    """Log distance in model size and TP: step time follows weights read per GPU and the all-reduce width."""
    size = abs(math.log(setup.parameters / _preset_parameters(preset))) if setup.parameters is not None else 0.0
    return size + abs(math.log(setup.tensor_parallel_size / preset.tensor_parallel_size))


def choose_cost_profile(spec: SpeculativeDeploymentSpec) -> CostProfileChoice:
    """The calibrated profile of this spec's set-up, else the nearest one, else (size unknown) llama8b-h100."""
    setup = setup_of(spec)
    candidates = calibrated_presets()
    if setup.parameters is None:
        chosen = next(p for p in candidates if p.name == LLAMA8B_H100.name)
    else:
        chosen = min(candidates, key=lambda p: (_distance(setup, p), p.name))
    differences = _mismatches(setup, chosen)
    if not differences:
        note = f"{chosen.name}: calibrated on this set-up ({setup.describe()})"
    else:
        note = (
            f"{chosen.name} is the nearest calibrated profile ({chosen.description}), not this set-up: "
            f"{'; '.join(differences)}; a prior only: decisions price steps with this deployment's own fit"
        )
    return CostProfileChoice(PROFILES[chosen.name], chosen.name, not differences, note, chosen.restart_s)


def fit_settings_for(spec: SpeculativeDeploymentSpec) -> FitSettings:
    """FitSettings whose step model and restart are this spec's profile's (a 70B restart takes ~300 s, an 8B one
    ~90 s), the restart priced on the spec's rollout path (rollcost), the choice recorded for the decision's
    evidence."""
    choice = choose_cost_profile(spec)
    return FitSettings(
        model=choice.model,
        restart_cost_s=restart_cost_for(spec, choice.restart_s),
        rollout=rollout_shape(spec),
        tpot_target_ms=tpot_target_ms(spec.autotune.latency),
        ttft_deadline_s=ttft_deadline_s(spec.autotune.latency),
        drain_s=drain_for(spec),
        model_choice=choice.to_dict(),
        calibrated=choice.calibrated,
    )
