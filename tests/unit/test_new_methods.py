"""Methods dflash, dspark and ngram_gpu: draft rules, the versions that have them, rendering and memory accounting.

The real vLLM 0.33 parser and create_engine_config() check the rendered argv in tests/vllm/test_new_methods_vllm.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.api.v1alpha1 import InvalidSpec, parse_spec
from specpilot.autotune.model.stepcost import DRAFTER_BY_METHOD, Drafter
from specpilot.planning.plan import plan_memory
from specpilot.vllm.dialects import ThresholdSupport, UnsupportedCombination, methods_available, render_command
from specpilot.vllm.versions import v

QWEN3_8B = "Qwen/Qwen3-8B"
DFLASH_DRAFT = "z-lab/Qwen3-8B-DFlash-b16"
# Shape of a 5-layer Qwen3-8B-wide block drafter (no catalog entry: given inline, as a user would).
DFLASH_ARCH = {
    "family": "qwen3",
    "parametersBillions": 1.0,
    "numLayers": 5,
    "numKvHeads": 8,
    "headDim": 128,
    "hiddenSize": 4096,
    "vocabSize": 151936,
}


def raw(method: str, version: str = "0.33.0", **speculation: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"method": method, **speculation}
    if method in ("dflash", "dspark"):
        body.setdefault("draft", {"model": DFLASH_DRAFT, "architecture": DFLASH_ARCH})
    return {
        "engine": {"image": "vllm/vllm-openai", "version": version, "maxModelLen": 4096, "maxNumSeqs": 64},
        "target": {"model": QWEN3_8B},
        "speculation": body,
    }


def config(spec: dict[str, Any]) -> dict[str, Any]:
    argv = render_command(parse_spec(spec)).argv
    loaded: dict[str, Any] = json.loads(argv[argv.index("--speculative-config") + 1])
    return loaded


def test_rendered_configs_on_0_33() -> None:
    assert config(raw("ngram_gpu", numSpeculativeTokens=4)) == {
        "method": "ngram_gpu",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 5,
        "prompt_lookup_min": 5,
    }
    assert (
        config(raw("ngram_gpu", numSpeculativeTokens=4, promptLookupMin=2, promptLookupMax=3))["prompt_lookup_min"] == 2
    )
    assert config(raw("dflash", numSpeculativeTokens=15)) == {
        "method": "dflash",
        "model": DFLASH_DRAFT,
        "num_speculative_tokens": 15,
    }
    assert config(raw("dspark")) == {"method": "dspark", "model": DFLASH_DRAFT}  # K from the draft's block_size


@pytest.mark.parametrize(
    ("method", "version", "words"),
    [
        ("ngram_gpu", "0.17.0", "method ngram_gpu needs vLLM >= 0.18.0"),
        ("dflash", "0.31.0", "method dflash needs vLLM >= 0.32.0"),
        ("dspark", "0.24.0", "method dspark needs vLLM >= 0.32.0"),
    ],
)
def test_older_versions_are_refused_naming_the_version(method: str, version: str, words: str) -> None:
    spec = parse_spec(raw(method, version, numSpeculativeTokens=4))
    with pytest.raises(UnsupportedCombination) as err:
        render_command(spec)
    assert err.value.field == "spec.speculation.method"
    assert words in str(err.value)
    assert f"vLLM {version} supports" in str(err.value)


def test_methods_available_by_version() -> None:
    assert {"ngram_gpu", "dflash", "dspark"} <= set(methods_available(v("0.33.0")))
    assert {"ngram_gpu", "dflash", "dspark"} <= set(methods_available(v("0.32.0")))
    assert "ngram_gpu" in methods_available(v("0.18.0"))
    assert not {"dflash", "dspark"} & set(methods_available(v("0.31.0")))


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (raw("dflash", draft=None), "spec.speculation.draft is required when spec.speculation.method is"),
        (raw("ngram_gpu", numSpeculativeTokens=3, draft={"model": "x"}), "draft must be omitted"),
        (raw("ngram_gpu"), "numSpeculativeTokens is required when spec.speculation.method is draft_model, ngram, "),
        (raw("dspark", promptLookupMin=2), "promptLookupMin and promptLookupMax are only allowed"),
    ],
)
def test_draft_rules(spec: dict[str, Any], words: str) -> None:
    if spec["speculation"].get("draft", "absent") is None:
        del spec["speculation"]["draft"]
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec)
    assert any(words in line for line in err.value.problems), err.value.problems


def test_memory_counts_the_block_drafter_like_a_draft_at_the_target_tp() -> None:
    plan = plan_memory(parse_spec(raw("dflash", numSpeculativeTokens=15)))
    assert plan.draft is not None
    assert plan.draft.role == "draft"
    assert plan.draft.weight_bytes > 1.9e9  # 1B parameters in bf16
    assert plan.draft.tensor_parallel_size == 1
    assert plan.draft.kv_bytes_per_token == 5 * 2 * 8 * 128 * 2  # 5 layers x (K, V) x heads x dim x 2 B
    assert plan_memory(parse_spec(raw("ngram_gpu", numSpeculativeTokens=3))).draft is None


def test_step_cost_drafter_by_method() -> None:
    assert DRAFTER_BY_METHOD["dflash"] is Drafter.PARALLEL
    assert DRAFTER_BY_METHOD["dspark"] is Drafter.PARALLEL
    assert DRAFTER_BY_METHOD["ngram_gpu"] is Drafter.LOOKUP


def test_adaptive_verification_with_block_drafters_but_not_ngram_gpu() -> None:
    assert config(raw("dspark", adaptiveVerification=True))["enable_adaptive_verification"] is True
    assert config(raw("dflash", numSpeculativeTokens=15, adaptiveVerification=True))["enable_adaptive_verification"]
    with pytest.raises(InvalidSpec):
        parse_spec(raw("ngram_gpu", numSpeculativeTokens=3, adaptiveVerification=True))


def test_ngram_gpu_schedule_is_not_claimed_on_model_runner_v1() -> None:
    default = render_command(parse_spec(raw("ngram_gpu", numSpeculativeTokens=4, disableAboveBatchSize=16)))
    assert default.threshold_support is ThresholdSupport.BATCH_SCHEDULE
    forced = raw("ngram_gpu", numSpeculativeTokens=4, disableAboveBatchSize=16)
    forced["engine"]["env"] = [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}]
    command = render_command(parse_spec(forced))
    assert command.threshold_support is ThresholdSupport.UNSUPPORTED
    assert "method ngram_gpu on Model Runner V1" in (command.threshold_reason or "")
