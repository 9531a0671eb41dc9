"""spec.speculation.adaptiveVerification: where the API and the renderer allow it, and what they refuse, naming why.

The real vLLM 0.33 parser and create_engine_config() check the rendered argv in tests/vllm/test_adaptive_vllm.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from specpilot.api.v1alpha1 import InvalidSpec, parse_spec
from specpilot.vllm.dialects import UnsupportedCombination, render_command
from specpilot.vllm.intent import intent_from_spec
from tests.unit.test_vllm_dialects import EAGLE3 as PLAIN_EAGLE3

# the dialect tests' EAGLE-3 deployment, with adaptive verification on
EAGLE3: dict[str, Any] = {
    **PLAIN_EAGLE3,
    "speculation": {**PLAIN_EAGLE3["speculation"], "adaptiveVerification": True},
}


def spec(**patch: Any) -> dict[str, Any]:
    raw = copy.deepcopy(EAGLE3)
    for path, value in patch.items():
        node = raw
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def speculative_config(raw: dict[str, Any]) -> dict[str, Any]:
    argv = render_command(parse_spec(raw)).argv
    loaded: dict[str, Any] = json.loads(argv[argv.index("--speculative-config") + 1])
    return loaded


def test_rendered_into_the_speculative_config_on_0_33() -> None:
    config = speculative_config(spec())
    assert config == {
        "enable_adaptive_verification": True,
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
    }
    assert "enable_adaptive_verification" not in speculative_config(spec(**{"speculation.adaptiveVerification": False}))


def test_it_survives_speculation_off_and_a_schedule() -> None:
    parsed = parse_spec(spec(**{"speculation.disableAboveBatchSize": 32}))
    off = render_command(parsed, intent_from_spec(parsed).without_speculation())
    assert "--speculative-config" not in off.argv
    on = speculative_config(spec(**{"speculation.disableAboveBatchSize": 32}))
    assert on["enable_adaptive_verification"] is True
    assert on["num_speculative_tokens_per_batch_size"] == [[1, 31, 3], [32, 256, 0]]


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        (
            {"speculation": {"method": "ngram", "numSpeculativeTokens": 3, "adaptiveVerification": True}},
            "spec.speculation.adaptiveVerification needs method draft_model, eagle, eagle3, mtp",
        ),
        (
            {"speculation": {"method": "suffix", "adaptiveVerification": True}},
            "suffix does not run on Model Runner V2",
        ),
        (
            {"parallelism": {"pipelineParallelSize": 2}, "resources": {"gpusPerReplica": 2}},
            "needs spec.parallelism.pipelineParallelSize 1",
        ),
    ],
)
def test_the_api_refuses_methods_and_pipeline_parallelism(patch: dict[str, Any], words: str) -> None:
    raw = {**copy.deepcopy(EAGLE3), **patch}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(raw)
    assert any(words in line for line in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"engine.version": "0.32.0"}, "spec.speculation.adaptiveVerification", "needs vLLM >= 0.33.0"),
        ({"engine.extraArgs": ["--enforce-eager"]}, "spec.engine.extraArgs[0]", "requires full CUDA graphs"),
        ({"engine.extraArgs": ["--max-num-batched-tokens", "8192", "--enforce_eager"]}, "spec.engine.extraArgs[2]",
         "--enforce-eager turns CUDA graphs off"),
        ({"engine.extraArgs": ["--enable-lora"]}, "spec.engine.extraArgs[0]", "not currently compatible with LoRA"),
        ({"engine.extraArgs": ["-cc", '{"cudagraph_mode": "PIECEWISE"}']}, "spec.engine.extraArgs[0]",
         "cudagraph_mode PIECEWISE"),
        ({"engine.extraArgs": ["--compilation-config={\"cudagraph_mode\":\"NONE\"}"]}, "spec.engine.extraArgs[0]",
         "cudagraph_mode NONE"),
        ({"engine.extraArgs": ["--compilation-config.cudagraph_mode", "piecewise"]}, "spec.engine.extraArgs[0]",
         "cudagraph_mode PIECEWISE"),
        ({"engine.env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}]}, "spec.engine.env[0].value",
         "Model Runner V1, which does not support adaptive draft verification"),
    ],
)  # fmt: skip
def test_the_renderer_refuses_what_vllm_would_refuse_at_startup(patch: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(UnsupportedCombination) as err:
        render_command(parse_spec(spec(**patch)))
    assert err.value.field == field
    assert words in str(err.value)


@pytest.mark.parametrize(
    "extra",
    [
        ["-cc", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'],
        ["--compilation-config.cudagraph_mode", "FULL_DECODE_ONLY"],
        ["--max-num-batched-tokens", "8192"],
    ],
)
def test_full_cuda_graph_settings_and_other_flags_pass(extra: list[str]) -> None:
    command = render_command(parse_spec(spec(**{"engine.extraArgs": extra})))
    assert command.argv[-len(extra) :] == tuple(extra)


def test_the_same_settings_are_fine_without_adaptive_verification() -> None:
    raw = spec(**{"engine.extraArgs": ["--enforce-eager"], "speculation.adaptiveVerification": False})
    assert "--enforce-eager" in render_command(parse_spec(raw)).argv
