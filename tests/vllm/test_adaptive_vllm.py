"""Adaptive verification as rendered, through the real vLLM 0.33 parser and create_engine_config() (validator venv).

What the CPU platform can show: the rendered `enable_adaptive_verification` passes argparse and SpeculativeConfig
for every method specpilot allows and reaches VllmConfig's adaptive-verification checks, which then stop at
"requires full CUDA graphs" because the CPU platform captures none (the same command line without the flag is
accepted, so the flag, not the rest of the line, triggers that check). vLLM's own refusals of what specpilot refuses
up front are shown too: LoRA, and Model Runner V1. The pipeline-parallel check comes after the CUDA-graph check in
vLLM 0.33 (`VllmConfig._validate_adaptive_verification`), so it cannot be reached on CPU; the API refuses it by CEL.
Model Runner V2 is selected with VLLM_USE_V2_MODEL_RUNNER=1 here because the CPU platform would otherwise fall back to
V1; on a GPU with Triton, V2 is vLLM's default for these methods.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.api import v1alpha1
from specpilot.planning import catalog
from specpilot.vllm.dialects import render_command

pytestmark = pytest.mark.vllm

V2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
FULL_GRAPHS = "Adaptive verification requires full CUDA graphs"
LLAMA_8B, LLAMA_1B = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"
EAGLE3_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"


def raw_spec(target: str, speculation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 4096, "maxNumSeqs": 64},
        "target": {"model": target},
        "resources": {"gpusPerReplica": 8, "gpuMemoryGiB": 141},
        "speculation": {**speculation, "adaptiveVerification": True},
        **extra,
    }


SPECS: dict[str, dict[str, Any]] = {
    "eagle3": raw_spec(LLAMA_8B, {"method": "eagle3", "draft": {"model": EAGLE3_HEAD}, "numSpeculativeTokens": 3}),
    "draft_model": raw_spec(
        LLAMA_8B, {"method": "draft_model", "draft": {"model": LLAMA_1B}, "numSpeculativeTokens": 4}
    ),
    "mtp": raw_spec(
        DEEPSEEK,
        {"method": "mtp", "numSpeculativeTokens": 1},
        parallelism={"tensorParallelSize": 8},
    )
    | {"target": {"model": DEEPSEEK, "quantization": "fp8"}},
}


def case(name: str, raw: dict[str, Any], *, extra_argv: tuple[str, ...] = (), env: dict[str, str] = V2) -> Any:
    spec = v1alpha1.parse_spec(raw)
    argv = [*render_command(spec).argv, *extra_argv]
    models = [spec.target.model] + ([spec.speculation.draft.model] if spec.speculation.draft else [])
    configs = {}
    for model in models:
        entry = catalog.lookup(model)
        assert entry is not None, model
        configs[model] = catalog.to_hf_config(entry)
    return {"id": name, "argv": argv, "configs": configs, "env": env}


def without_adaptive(raw: dict[str, Any]) -> dict[str, Any]:
    return raw | {"speculation": {**raw["speculation"], "adaptiveVerification": False}}


@pytest.fixture(scope="module")
def results(vllm_validator_venv: VllmVenv) -> dict[str, dict[str, Any]]:
    cases = [case(name, raw) for name, raw in SPECS.items()]
    cases += [case(f"{name}/without", without_adaptive(raw)) for name, raw in SPECS.items()]
    cases.append(case("eagle3/lora", SPECS["eagle3"], extra_argv=("--enable-lora",)))
    cases.append(case("eagle3/runner-v1", SPECS["eagle3"], env={"VLLM_USE_V2_MODEL_RUNNER": "0"}))
    return {r["id"]: r for r in validate_argv_cases(cases, python=vllm_validator_venv.python)}


@pytest.mark.parametrize("method", sorted(SPECS))
def test_the_rendered_flag_passes_the_speculative_config_and_reaches_the_engine_checks(
    results: dict[str, dict[str, Any]], method: str
) -> None:
    plain = results[f"{method}/without"]
    assert plain["ok"], f"{method} without adaptive verification: {plain['stage']}: {plain['error']}"
    rendered = results[method]
    assert rendered["vllm"] == "0.33.0"
    assert not rendered["ok"]
    assert rendered["stage"] == "engine_config"
    error = str(rendered["error"])
    assert "validation error for VllmConfig" in error, "SpeculativeConfig itself accepted the key and the method"
    assert FULL_GRAPHS in error, "the CPU platform has no CUDA graphs: the last check adaptive verification meets"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("eagle3/lora", "Adaptive verification is not currently compatible with LoRA"),
        ("eagle3/runner-v1", "Model Runner V1 does not support: adaptive draft verification"),
    ],
)
def test_vllm_refuses_what_specpilot_refuses_up_front(
    results: dict[str, dict[str, Any]], name: str, words: str
) -> None:
    result = results[name]
    assert not result["ok"]
    assert words in str(result["error"])
