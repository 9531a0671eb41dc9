"""dflash, dspark and ngram_gpu as specpilot renders them, through the real vLLM 0.33 parser and create_engine_config().

The drafters' config.json files are hand-written in the shape of published checkpoints (no catalog entry exists):
a DFlash block drafter (`DFlashDraftModel`) and a Qwen3 DSpark drafter (`Qwen3DSparkModel`), both registered
architectures of vLLM 0.33. DSpark runs only on Model Runner V2, which the CPU platform does not pick by itself
(VLLM_USE_V2_MODEL_RUNNER=1 here; vLLM's default on a GPU with Triton). On Model Runner V1 vLLM drops the per-batch-size
schedule for ngram_gpu with a warning, so specpilot claims no schedule when spec.engine.env forces V1 (unit-tested).
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.api import v1alpha1
from specpilot.planning import catalog
from specpilot.vllm.dialects import render_command

pytestmark = pytest.mark.vllm

QWEN3_8B, QWEN3_06B = "Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"
DFLASH, DSPARK = "z-lab/Qwen3-8B-DFlash-b16", "example/Qwen3-8B-DSpark"
V2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
ARCH = {"family": "qwen3", "parametersBillions": 1.0, "numLayers": 5, "numKvHeads": 8, "headDim": 128,
        "hiddenSize": 4096, "vocabSize": 151936}  # fmt: skip


def hf(model: str) -> dict[str, Any]:
    entry = catalog.lookup(model)
    assert entry is not None, model
    return catalog.to_hf_config(entry)


def drafter_configs() -> dict[str, dict[str, Any]]:
    small = hf(QWEN3_06B)
    return {
        DFLASH: {**small, "architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "hidden_size": 4096,
                 "block_size": 16, "dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 151669}},
        DSPARK: {**small, "architectures": ["Qwen3DSparkModel"]},
    }  # fmt: skip


def spec(method: str, **speculation: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"method": method, **speculation}
    return {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 4096, "maxNumSeqs": 64},
        "target": {"model": QWEN3_8B},
        "speculation": body,
    }


CASES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "ngram_gpu": (spec("ngram_gpu", numSpeculativeTokens=4, promptLookupMin=2, promptLookupMax=4), {}),
    "ngram_gpu/schedule": (spec("ngram_gpu", numSpeculativeTokens=4, disableAboveBatchSize=16), V2),
    "dflash": (spec("dflash", numSpeculativeTokens=15, draft={"model": DFLASH, "architecture": ARCH}), {}),
    "dspark": (spec("dspark", numSpeculativeTokens=7, draft={"model": DSPARK, "architecture": ARCH}), V2),
    "dflash/adaptive": (
        spec(
            "dflash", numSpeculativeTokens=15, draft={"model": DFLASH, "architecture": ARCH}, adaptiveVerification=True
        ),
        V2,
    ),
    "dspark/adaptive": (
        spec(
            "dspark", numSpeculativeTokens=7, draft={"model": DSPARK, "architecture": ARCH}, adaptiveVerification=True
        ),
        V2,
    ),
}


@pytest.fixture(scope="module")
def results(vllm_validator_venv: VllmVenv) -> dict[str, dict[str, Any]]:
    drafts = drafter_configs()
    cases = []
    for name, (raw, env) in CASES.items():
        parsed = v1alpha1.parse_spec(raw)
        configs = {QWEN3_8B: hf(QWEN3_8B)}
        if parsed.speculation.draft is not None:
            configs[parsed.speculation.draft.model] = drafts[parsed.speculation.draft.model]
        cases.append({"id": name, "argv": list(render_command(parsed).argv), "configs": configs, "env": env})
    return {r["id"]: r for r in validate_argv_cases(cases, python=vllm_validator_venv.python)}


@pytest.mark.parametrize(
    ("name", "method", "k"),
    [("ngram_gpu", "ngram_gpu", 4), ("ngram_gpu/schedule", "ngram_gpu", 4), ("dflash", "dflash", 15),
     ("dspark", "dspark", 7)],
)  # fmt: skip
def test_rendered_methods_pass_vllm_0_33(results: dict[str, dict[str, Any]], name: str, method: str, k: int) -> None:
    result = results[name]
    assert result["ok"], f"{name}: {result['stage']}: {result['error']}"
    speculative = result["engine"]["speculative"]
    assert (speculative["method"], speculative["num_speculative_tokens"]) == (method, k)
    if name == "ngram_gpu":
        assert (speculative["prompt_lookup_min"], speculative["prompt_lookup_max"]) == (2, 4)
    if name == "ngram_gpu/schedule":
        assert speculative["num_speculative_tokens_per_batch_size"] == [[1, 15, 4], [16, 64, 0]]


@pytest.mark.parametrize("name", ["dflash/adaptive", "dspark/adaptive"])
def test_adaptive_verification_reaches_the_engine_checks_for_block_drafters(
    results: dict[str, dict[str, Any]], name: str
) -> None:
    result = results[name]
    assert not result["ok"]
    assert "validation error for VllmConfig" in str(result["error"])
    assert "Adaptive verification requires full CUDA graphs" in str(result["error"]), "the CPU platform's limit"
