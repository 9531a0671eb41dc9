"""Which calibrated step-cost profile the operator prices a deployment with, from its spec (costprofile.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.model.costprofile import calibrated_presets, choose_cost_profile, fit_settings_for
from specpilot.autotune.model.rollcost import drain_for
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.model.stepcost import LLAMA8B_H100, LLAMA70B_4XH100, PROFILES, step_cost_model
from specpilot.sim import presets

H100_LABEL = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
A100_LABEL = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
INLINE_70B = {"family": "llama3", "parametersBillions": 70.6, "numLayers": 80, "numKvHeads": 8, "headDim": 128,
              "hiddenSize": 8192, "vocabSize": 128256}  # fmt: skip


def spec(
    model: str,
    tp: int = 1,
    *,
    memory: float = 80,
    node_selector: dict[str, str] | None = None,
    quantization: str = "none",
    architecture: dict[str, Any] | None = None,
    pp: int = 1,
) -> v1alpha1.SpeculativeDeploymentSpec:
    target: dict[str, Any] = {"model": model, "quantization": quantization}
    if architecture is not None:
        target["architecture"] = architecture
    return v1alpha1.parse_spec(
        {
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
            "target": target,
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "parallelism": {"tensorParallelSize": tp, "pipelineParallelSize": pp},
            "resources": {"gpusPerReplica": tp * pp, "gpuMemoryGiB": memory, "nodeSelector": node_selector or {}},
        }
    )


# (case, spec, profile, calibrated, words the note must contain)
CASES = [
    ("8B on one H100", spec("meta-llama/Llama-3.1-8B-Instruct"), "llama8b-h100", True, ["calibrated on this set-up"]),
    ("8B by repository name", spec("/models/Meta-Llama-3.1-8B-Instruct"), "llama8b-h100", True, ["8.0B parameters"]),
    ("8B, H100 pinned", spec("meta-llama/Llama-3.1-8B-Instruct", node_selector=H100_LABEL), "llama8b-h100", True,
     ["NVIDIA-H100-80GB-HBM3"]),
    ("70B (3.3) on 4xH100", spec("meta-llama/Llama-3.3-70B-Instruct", 4), "llama70b-4xh100", True,
     ["calibrated on this set-up", "TP 4"]),
    ("70B inline numbers", spec("my/private-70b", 4, architecture=INLINE_70B), "llama70b-4xh100", True,
     ["inline: spec.target.architecture"]),
    ("70B on 8 GPUs", spec("meta-llama/Llama-3.1-70B-Instruct", 8), "llama70b-4xh100", False, ["TP 8 vs 4"]),
    ("72B Qwen on TP 4", spec("Qwen/Qwen2.5-72B-Instruct", 4), "llama70b-4xh100", True, ["72.7B"]),
    ("70B FP8", spec("meta-llama/Llama-3.3-70B-Instruct", 4, quantization="fp8"), "llama70b-4xh100", False,
     ["fp8 weights vs BF16"]),
    ("405B on 8 GPUs", spec("meta-llama/Llama-3.1-405B-Instruct", 8), "llama70b-4xh100", False,
     ["405.9B vs 70.6B", "TP 8 vs 4"]),
    ("1B on one GPU", spec("meta-llama/Llama-3.2-1B-Instruct"), "llama8b-h100", False, ["1.2B vs 8.0B"]),
    ("7B Qwen on one GPU", spec("Qwen/Qwen2.5-7B-Instruct"), "llama8b-h100", True, ["7.6B"]),
    ("8B on TP 2", spec("meta-llama/Llama-3.1-8B-Instruct", 2), "llama8b-h100", False, ["TP 2 vs 1"]),
    ("8B on an H200", spec("meta-llama/Llama-3.1-8B-Instruct", memory=141), "llama8b-h100", False,
     ["141 vs 80 GiB"]),
    ("8B on an A100", spec("meta-llama/Llama-3.1-8B-Instruct", node_selector=A100_LABEL), "llama8b-h100", False,
     ["GPU NVIDIA-A100-SXM4-80GB vs H100"]),
    ("8B with pipeline parallel", spec("meta-llama/Llama-3.1-8B-Instruct", pp=2), "llama8b-h100", False,
     ["PP 2 vs 1"]),
    ("Mixtral: active parameters decide", spec("mistralai/Mixtral-8x7B-Instruct-v0.1", 2), "llama8b-h100", False,
     ["12.9B vs 8.0B", "TP 2 vs 1"]),
    ("unknown model", spec("someorg/not-a-cataloged-model"), "llama8b-h100", False, ["target size unknown"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "s", "profile", "calibrated", "words"), CASES, ids=[c[0] for c in CASES])
def test_choose_cost_profile(
    case: str, s: v1alpha1.SpeculativeDeploymentSpec, profile: str, calibrated: bool, words: list[str]
) -> None:
    choice = choose_cost_profile(s)
    assert (choice.preset, choice.calibrated) == (profile, calibrated), choice.note
    assert choice.model == PROFILES[profile]
    for word in words:
        assert word in choice.note, choice.note
    if not calibrated:
        assert "nearest calibrated profile" in choice.note


def test_fit_settings_carry_the_choice_into_the_evidence() -> None:
    settings = fit_settings_for(spec("meta-llama/Llama-3.3-70B-Instruct", 4)).to_dict()
    assert settings["model"] == "llama70b-4xh100"
    assert settings["restartCostSeconds"] == presets.LLAMA70B_4XH100.restart_s == 300
    assert fit_settings_for(spec("meta-llama/Llama-3.1-8B-Instruct")).restart_cost_s == FitSettings().restart_cost_s
    assert settings["modelChoice"]["match"] == "calibrated"
    assert FitSettings().to_dict()["modelChoice"] == {
        "profile": "llama8b-h100",
        "match": "default",
        "note": "no spec chose a profile",
    }


def test_operator_profiles_are_the_simulator_presets() -> None:
    """One source of truth: the operator's step model holds exactly the preset's numbers (sim/presets.py)."""
    assert {p.name for p in calibrated_presets()} == {"llama8b-h100", "llama70b-4xh100"}
    for model, preset in ((LLAMA8B_H100, presets.LLAMA8B_H100), (LLAMA70B_4XH100, presets.LLAMA70B_4XH100)):
        assert model == step_cost_model(preset)
        assert (model.verify_base_ms, model.ridge_tokens, model.ridge_sharpness, model.kv_read_ns_per_token) == (
            preset.verify_base_ms,
            preset.ridge_tokens,
            preset.ridge_sharpness,
            preset.kv_ns_per_token,
        )
        assert model.draft_model_cost_ratio == preset.drafter("draft_model").cost_ratio
        assert model.draft_ms == preset.drafter("eagle3").draft_ms
    # the calibrated inputs (docs/design/simulator.md), so a preset edit that drifts from them shows up here too
    assert (LLAMA8B_H100.verify_base_ms, LLAMA8B_H100.draft_model_cost_ratio) == (5.886, 0.375)
    assert (LLAMA70B_4XH100.verify_base_ms, LLAMA70B_4XH100.ridge_tokens, LLAMA70B_4XH100.draft_model_cost_ratio) == (
        12.0,
        220,
        0.125,
    )
    assert "cpu-tiny" not in PROFILES


@pytest.mark.parametrize(
    ("target", "draft", "tp", "profile", "restart"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", 1, "llama8b-h100", 90),
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", 4, "llama70b-4xh100", 300),
    ],
)
def test_the_operator_prices_the_fit_with_the_specs_profile(
    target: str, draft: str, tp: int, profile: str, restart: float
) -> None:
    """Through the operator's seams (autotune.conclude, the stored status): the threshold fit's evidence names the
    profile chosen from the spec, not the 8B default, and prices the restart with it."""
    from tests.seams import ROUND_TRIP_SPEC, Cluster, window_measurements

    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["target"]["model"] = target
    raw["speculation"]["draft"]["model"] = draft
    raw["parallelism"] = {"tensorParallelSize": tp}
    raw["resources"]["gpusPerReplica"] = tp
    raw["autotune"]["batchThreshold"] = {"tune": True, "min": 8, "max": 64}
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)
    outcome = cluster.evaluate(window_measurements(speculating=True, acceptance=0.8, batch=4.0))
    settings = outcome.fields["recommendation"]["evidence"]["threshold"]["settings"]
    assert settings["model"] == profile
    assert settings["modelChoice"]["profile"] == profile
    assert settings["modelChoice"]["match"] == "calibrated"
    assert settings["restartCostSeconds"] == restart


@pytest.mark.parametrize(
    ("case", "replicas", "rollout", "version", "drain"),
    [
        ("one replica without surge: an outage", 1, {}, "0.33.0", 0.0),
        ("one replica with a surge pod", 1, {"maxSurge": 1}, "0.33.0", 300.0),
        ("three replicas, the default drain", 3, {}, "0.33.0", 300.0),
        ("three replicas, a declared drain", 3, {"drainSeconds": 120}, "0.33.0", 120.0),
        ("a version without --shutdown-timeout aborts", 3, {}, "0.17.0", 0.0),
    ],
)
def test_the_fit_knows_how_long_a_rollouts_pods_drain(
    case: str, replicas: int, rollout: dict[str, int], version: str, drain: float
) -> None:
    doc = spec("meta-llama/Llama-3.1-8B-Instruct").model_dump(by_alias=True, exclude_none=True)
    doc.update(replicas=replicas, rollout=rollout)
    doc["engine"].update(image=f"vllm/vllm-openai:v{version}", version=version)
    s = v1alpha1.parse_spec(doc)
    assert drain_for(s) == fit_settings_for(s).drain_s == drain
