"""The acceptance method by intent -> the speculative-config keys of one vLLM version (docs/design/vllm-versions.md).

The framework's lever for a quantized target whose acceptance sits near break-even is a different acceptance
method. vLLM offered it three different ways, and none at all in between, so the API states the intent
(spec.speculation.acceptance: Exact, Block or Relaxed, plus the draft sampling) and this module compiles it:

- 0.6.0-0.8.2: Relaxed = legacy flags `--spec-decoding-acceptance-method typical_acceptance_sampler` and
  `--typical-acceptance-sampler-posterior-threshold/-alpha` (0.8.2 gets the legacy dialect, dialects.py).
- 0.8.3-0.9.2: Relaxed = `acceptance_method: typical_acceptance_sampler`, `posterior_threshold/alpha` in the
  config, read only by the V0 engine (refused where the method runs on V1).
- 0.10.0-0.21.x: nothing but vLLM's standard rejection sampling.
- 0.22.0+: draft sampling = `draft_sample_method: greedy|probabilistic`.
- 0.26.0+: Block = `rejection_sample_method: block`.
- 0.33.0+: Relaxed = `rejection_sample_method: fly` (FLy, lossy).

Exact is vLLM's default on every version and renders nothing, so a spec without the field keeps its config hash.
0.18-0.21 had `rejection_sample_method: strict|probabilistic`, whose "probabilistic" became `draft_sample_method`
in 0.22 (where `strict` is rejected); specpilot renders draft sampling from 0.22 only rather than guess the older
meaning. Anything a version cannot express is refused with the version and what it offers instead.
"""

from __future__ import annotations

from typing import Any

from specpilot.api.v1alpha1 import (
    AcceptanceMethod,
    AcceptanceMethodSpec,
    DraftSampling,
    SpeculationMethod,
    SpeculativeDeploymentSpec,
)
from specpilot.vllm.versions import OLDEST_SUPPORTED, V0_ENGINE_REMOVED, Engine, VllmVersion, v

DRAFT_SAMPLE_METHOD = v("0.22.0")  # draft_sample_method: greedy | probabilistic
BLOCK_VERIFICATION = v("0.26.0")  # rejection_sample_method: block
FLY_VERIFICATION = v("0.33.0")  # rejection_sample_method: fly (lossy)
TYPICAL_ACCEPTANCE_LAST = v("0.9.2")  # acceptance_method / posterior_* last present (V0 only from 0.8.0)

# SpeculativeConfig key -> legacy flag, for versions before --speculative-config JSON.
LEGACY_FLAGS = (
    ("acceptance_method", "--spec-decoding-acceptance-method"),
    ("posterior_threshold", "--typical-acceptance-sampler-posterior-threshold"),
    ("posterior_alpha", "--typical-acceptance-sampler-posterior-alpha"),
)
FIELD = "spec.speculation.acceptance"


class AcceptanceUnsupported(ValueError):
    """This version/engine cannot express the requested acceptance intent; `field` is the spec path to change."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def methods_available(version: VllmVersion, engine: Engine) -> tuple[AcceptanceMethod, ...]:
    """Acceptance intents this version renders on the engine that speculates."""
    out = [AcceptanceMethod.EXACT]
    if version >= BLOCK_VERIFICATION:
        out.append(AcceptanceMethod.BLOCK)
    if _relaxed_form(version, engine) is not None:
        out.append(AcceptanceMethod.RELAXED)
    return tuple(out)


def relaxed_rendering(version: VllmVersion, engine: Engine) -> str | None:
    """What Relaxed becomes on this version/engine, for recommendations; None where nothing relaxes acceptance."""
    form = _relaxed_form(version, engine)
    if form == "typical":
        return "typical_acceptance_sampler"
    if form == "fly":
        return "rejection_sample_method fly"
    return None


def _relaxed_form(version: VllmVersion, engine: Engine) -> str | None:
    if version >= FLY_VERIFICATION:
        return "fly"
    if OLDEST_SUPPORTED <= version <= TYPICAL_ACCEPTANCE_LAST and engine is Engine.V0:
        return "typical"
    return None


def _alternatives(version: VllmVersion, engine: Engine) -> str:
    return ", ".join(m.value for m in methods_available(version, engine))


def acceptance_config(
    acceptance: AcceptanceMethodSpec | None, version: VllmVersion, engine: Engine, method: SpeculationMethod
) -> dict[str, Any]:
    """The SpeculativeConfig keys for this intent (empty for Exact); raise AcceptanceUnsupported where impossible."""
    if acceptance is None:
        return {}
    config: dict[str, Any] = {}
    if acceptance.method is AcceptanceMethod.BLOCK:
        if version < BLOCK_VERIFICATION:
            raise AcceptanceUnsupported(
                f"{FIELD}.method",
                f"vLLM {version} has no block verification (rejection_sample_method block arrives in "
                f"{BLOCK_VERIFICATION}); vLLM {version} offers {_alternatives(version, engine)}",
            )
        config["rejection_sample_method"] = "block"
    elif acceptance.method is AcceptanceMethod.RELAXED:
        config.update(_relaxed(acceptance, version, engine, method))
    if acceptance.draft_sampling is not None:
        if version < DRAFT_SAMPLE_METHOD:
            raise AcceptanceUnsupported(
                f"{FIELD}.draftSampling",
                f"vLLM {version} has no draft_sample_method (it arrives in {DRAFT_SAMPLE_METHOD}); remove "
                "draftSampling to keep this version's own draft sampling",
            )
        config["draft_sample_method"] = (
            "probabilistic" if acceptance.draft_sampling is DraftSampling.PROBABILISTIC else "greedy"
        )
    return config


def _relaxed(
    acceptance: AcceptanceMethodSpec, version: VllmVersion, engine: Engine, method: SpeculationMethod
) -> dict[str, Any]:
    form = _relaxed_form(version, engine)
    posterior = {
        key: value
        for key, value in (
            ("posterior_threshold", acceptance.posterior_threshold),
            ("posterior_alpha", acceptance.posterior_alpha),
        )
        if value is not None
    }
    if form == "typical":
        return {"acceptance_method": "typical_acceptance_sampler", **posterior}
    if form == "fly":
        if posterior:
            raise AcceptanceUnsupported(
                f"{FIELD}.posteriorThreshold" if "posterior_threshold" in posterior else f"{FIELD}.posteriorAlpha",
                f"vLLM {version} relaxes acceptance with FLy (rejection_sample_method fly), which has no posterior "
                "threshold or alpha (those belong to typical acceptance, vLLM 0.6.0-0.9.2 on V0); remove them",
            )
        return {"rejection_sample_method": "fly"}
    if version <= TYPICAL_ACCEPTANCE_LAST:
        why = (
            f"vLLM {version} runs method {method} on its V1 engine, and only the V0 engine reads acceptance_method "
            "(typical acceptance); set VLLM_USE_V1=0 in spec.engine.env where the method runs on V0"
        )
    else:
        why = (
            f"vLLM {version} has no lossy acceptance method (typical acceptance left with the V0 engine in "
            f"{V0_ENGINE_REMOVED}; FLy arrives in {FLY_VERIFICATION})"
        )
    raise AcceptanceUnsupported(f"{FIELD}.method", f"{why}; vLLM {version} offers {_alternatives(version, engine)}")


def describe(spec: SpeculativeDeploymentSpec, version: VllmVersion, engine: Engine) -> str:
    """One line for notes and status: the intent and what it became on this version."""
    acceptance = spec.speculation.acceptance
    if acceptance is None:
        return f"acceptance Exact: vLLM {version}'s default rejection sampling"
    keys = acceptance_config(acceptance, version, engine, spec.speculation.method)
    rendered = ", ".join(f"{k}={val}" for k, val in sorted(keys.items())) or "vLLM's default rejection sampling"
    return f"acceptance {acceptance.method.value}: {rendered}"
