"""The vLLM dialects: exact argv per version boundary, rejections naming the field, and properties over random specs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.api.v1alpha1 import (
    METHODS_NEEDING_DRAFT,
    METHODS_NEEDING_K,
    NGRAM_METHODS,
    QUANTIZATIONS_NEEDING_WEIGHT_BITS,
    Dtype,
    Quantization,
    SpeculationMethod,
    SpeculativeDeploymentSpec,
    parse_spec,
)
from specpilot.vllm.dialects import (
    RenderedCommand,
    ThresholdSupport,
    UnsupportedCombination,
    describe_threshold,
    drain_note,
    methods_available,
    render_command,
)
from specpilot.vllm.intent import SpeculationIntent, intent_from_spec
from specpilot.vllm.versions import Engine, v

BOUNDARIES: tuple[str, ...] = ("0.7.3", "0.8.1", "0.8.2", "0.8.3", "0.9.2", "0.10.0", "0.16.0", "0.17.0", "0.18.0")
BOUNDARIES += ("0.23.0", "0.24.0", "0.32.0", "0.33.0")
# Versions whose parser has no --shutdown-timeout; from 0.18.0 every spec below drains for 300 s (the default: 8192
# tokens at 50 ms is more than the 300 s cap).
WITHOUT_DRAIN = frozenset(BOUNDARIES[:8])
DRAIN = ("--shutdown-timeout", "300")


def drain(version: str) -> tuple[str, ...]:
    return () if version in WITHOUT_DRAIN else DRAIN


def with_version(raw: dict[str, Any], version: str) -> dict[str, Any]:
    return {**raw, "engine": {**raw["engine"], "version": version}}


def render(raw: dict[str, Any], version: str, intent: SpeculationIntent | None = None) -> RenderedCommand:
    return render_command(parse_spec(with_version(raw, version)), intent)


# --------------------------------------------------------------------------- 70B target + 8B draft, TP 2, fp8

DRAFT_70B: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai", "version": "0.33.0", "maxNumSeqs": 128, "servedModelName": "llama-70b"},
    "target": {"model": "meta-llama/Llama-3.3-70B-Instruct", "quantization": "fp8"},
    "parallelism": {"tensorParallelSize": 2},
    "resources": {"gpusPerReplica": 2},
    "speculation": {
        "method": "draft_model",
        "numSpeculativeTokens": 4,
        "disableAboveBatchSize": 32,
        "draft": {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "fp8", "tensorParallelSize": 1},
    },
}
DRAFT_70B_BASE = (
    "vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct",
    "--served-model-name", "llama-70b",
    "--port", "8000",
    "--tensor-parallel-size", "2",
    "--pipeline-parallel-size", "1",
    "--dtype", "auto",
    "--max-model-len", "8192",
    "--gpu-memory-utilization", "0.92",
    "--max-num-seqs", "128",
    "--quantization", "fp8",
)  # fmt: skip
DRAFT_70B_LEGACY = (
    "--speculative-model", "meta-llama/Llama-3.1-8B-Instruct",
    "--num-speculative-tokens", "4",
    "--speculative-draft-tensor-parallel-size", "1",
    "--speculative-model-quantization", "fp8",
    "--speculative-disable-by-batch-size", "32",
)  # fmt: skip
DRAFT_70B_V0_JSON = (
    "--speculative-config",
    '{"disable_by_batch_size":32,"draft_tensor_parallel_size":1,"method":"draft_model",'
    '"model":"meta-llama/Llama-3.1-8B-Instruct","num_speculative_tokens":4,"quantization":"fp8"}',
)
DRAFT_70B_PLAIN_JSON = (
    "--speculative-config",
    '{"draft_tensor_parallel_size":1,"method":"draft_model","model":"meta-llama/Llama-3.1-8B-Instruct",'
    '"num_speculative_tokens":4,"quantization":"fp8"}',
)
DRAFT_70B_SCHEDULE_JSON = (
    "--speculative-config",
    '{"draft_tensor_parallel_size":1,"method":"draft_model","model":"meta-llama/Llama-3.1-8B-Instruct",'
    '"num_speculative_tokens":4,"num_speculative_tokens_per_batch_size":[[1,31,4],[32,128,0]],"quantization":"fp8"}',
)

# ------------------------------------------------------------------ n-gram with a threshold and prefix caching off

NGRAM: dict[str, Any] = {
    "engine": {
        "image": "vllm/vllm-openai",
        "version": "0.33.0",
        "dtype": "bfloat16",
        "maxNumSeqs": 64,
        "gpuMemoryUtilization": 0.9,
        "enablePrefixCaching": False,
        "extraArgs": ["--seed", "7"],
    },
    "target": {"model": "Qwen/Qwen2.5-7B-Instruct"},
    "speculation": {"method": "ngram", "numSpeculativeTokens": 5, "promptLookupMax": 4, "disableAboveBatchSize": 16},
}
NGRAM_BASE = (
    "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
    "--served-model-name", "Qwen/Qwen2.5-7B-Instruct",
    "--port", "8000",
    "--tensor-parallel-size", "1",
    "--pipeline-parallel-size", "1",
    "--dtype", "bfloat16",
    "--max-model-len", "8192",
    "--gpu-memory-utilization", "0.9",
    "--max-num-seqs", "64",
    "--no-enable-prefix-caching",
)  # fmt: skip
NGRAM_LEGACY = (
    "--speculative-model", "[ngram]",
    "--num-speculative-tokens", "5",
    "--ngram-prompt-lookup-max", "4",
    "--ngram-prompt-lookup-min", "4",
    "--speculative-disable-by-batch-size", "16",
)  # fmt: skip
NGRAM_V0_JSON = (
    "--speculative-config",
    '{"disable_by_batch_size":16,"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4,"prompt_lookup_min":4}',
)
NGRAM_PLAIN_JSON = (
    "--speculative-config",
    '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4,"prompt_lookup_min":4}',
)
NGRAM_SCHEDULE_JSON = (
    "--speculative-config",
    '{"method":"ngram","num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,15,5],[16,64,0]],'
    '"prompt_lookup_max":4,"prompt_lookup_min":4}',
)
SEED = ("--seed", "7")

# --------------------------------------------------------------------------------------------------- EAGLE-3

EAGLE3: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai", "version": "0.33.0"},
    "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {
        "method": "eagle3",
        "numSpeculativeTokens": 3,
        "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
    },
}
EAGLE3_BASE = (
    "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
    "--served-model-name", "meta-llama/Llama-3.1-8B-Instruct",
    "--port", "8000",
    "--tensor-parallel-size", "1",
    "--pipeline-parallel-size", "1",
    "--dtype", "auto",
    "--max-model-len", "8192",
    "--gpu-memory-utilization", "0.92",
    "--max-num-seqs", "256",
)  # fmt: skip
EAGLE3_JSON = (
    "--speculative-config",
    '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}',
)
EAGLE3_ARGV = EAGLE3_BASE + DRAIN + EAGLE3_JSON

# ------------------------------------------------------------------------------------------------------- MTP

MTP: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai", "version": "0.33.0", "maxModelLen": 32768, "kvCacheDtype": "fp8"},
    "target": {"model": "deepseek-ai/DeepSeek-V3", "revision": "main"},
    "parallelism": {"tensorParallelSize": 8},
    "resources": {"gpusPerReplica": 8},
    "speculation": {"method": "mtp", "numSpeculativeTokens": 1, "disableAboveBatchSize": 64},
}
MTP_BASE = (
    "vllm", "serve", "deepseek-ai/DeepSeek-V3",
    "--served-model-name", "deepseek-ai/DeepSeek-V3",
    "--port", "8000",
    "--tensor-parallel-size", "8",
    "--pipeline-parallel-size", "1",
    "--dtype", "auto",
    "--max-model-len", "32768",
    "--gpu-memory-utilization", "0.92",
    "--max-num-seqs", "256",
    "--kv-cache-dtype", "fp8",
    "--revision", "main",
)  # fmt: skip
MTP_PLAIN_JSON = ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')
MTP_SCHEDULE_JSON = (
    "--speculative-config",
    '{"method":"mtp","num_speculative_tokens":1,"num_speculative_tokens_per_batch_size":[[1,63,1],[64,256,0]]}',
)

# -------------------------------------------------------------------------------------------- speculation off

DISABLED: dict[str, Any] = {**NGRAM, "speculation": {**NGRAM["speculation"], "enabled": False}}

DS, BS, NR, UN = (
    ThresholdSupport.DISABLE_BY_BATCH_SIZE,
    ThresholdSupport.BATCH_SCHEDULE,
    ThresholdSupport.NOT_REQUESTED,
    ThresholdSupport.UNSUPPORTED,
)

RENDERED = [
    # (spec, version, exact argv, threshold support, engine)
    *[("draft", ver, DRAFT_70B_BASE + DRAFT_70B_LEGACY, DS, Engine.V0) for ver in ("0.7.3", "0.8.1", "0.8.2")],
    *[("draft", ver, DRAFT_70B_BASE + DRAFT_70B_V0_JSON, DS, Engine.V0) for ver in ("0.8.3", "0.9.2")],
    *[
        ("draft", ver, DRAFT_70B_BASE + drain(ver) + DRAFT_70B_PLAIN_JSON, UN, Engine.V1)
        for ver in ("0.16.0", "0.17.0", "0.18.0", "0.23.0")
    ],
    *[
        ("draft", ver, DRAFT_70B_BASE + DRAIN + DRAFT_70B_SCHEDULE_JSON, BS, Engine.V1)
        for ver in ("0.24.0", "0.32.0", "0.33.0")
    ],
    *[("ngram", ver, NGRAM_BASE + NGRAM_LEGACY + SEED, DS, Engine.V0) for ver in ("0.7.3", "0.8.1", "0.8.2")],
    ("ngram", "0.8.3", NGRAM_BASE + NGRAM_V0_JSON + SEED, DS, Engine.V0),
    *[
        ("ngram", ver, NGRAM_BASE + drain(ver) + NGRAM_PLAIN_JSON + SEED, UN, Engine.V1)
        for ver in ("0.9.2", "0.10.0", "0.16.0", "0.17.0", "0.18.0", "0.23.0")
    ],
    *[
        ("ngram", ver, NGRAM_BASE + DRAIN + NGRAM_SCHEDULE_JSON + SEED, BS, Engine.V1)
        for ver in ("0.24.0", "0.32.0", "0.33.0")
    ],
    *[
        ("eagle3", ver, EAGLE3_BASE + drain(ver) + EAGLE3_JSON, NR, Engine.V1)
        for ver in ("0.9.2", "0.10.0", "0.16.0", "0.17.0", "0.18.0", "0.23.0", "0.24.0", "0.32.0", "0.33.0")
    ],
    *[
        ("mtp", ver, MTP_BASE + drain(ver) + MTP_PLAIN_JSON, UN, Engine.V1)
        for ver in ("0.16.0", "0.17.0", "0.18.0", "0.23.0")
    ],
    *[("mtp", ver, MTP_BASE + DRAIN + MTP_SCHEDULE_JSON, BS, Engine.V1) for ver in ("0.24.0", "0.32.0", "0.33.0")],
    ("disabled", "0.7.3", NGRAM_BASE + SEED, NR, Engine.V0),
    *[("disabled", ver, NGRAM_BASE + drain(ver) + SEED, NR, Engine.V1) for ver in BOUNDARIES[1:]],
]
REJECTED = [
    # (spec, version, field, words the message must contain)
    ("draft", "0.10.0", "spec.speculation.method", "0.15.0"),
    *[("eagle3", ver, "spec.speculation.method", ">= 0.8.5") for ver in ("0.7.3", "0.8.1", "0.8.2", "0.8.3")],
    *[("mtp", ver, "spec.speculation.method", ">= 0.11.0") for ver in BOUNDARIES[:6]],
]
SPECS = {"draft": DRAFT_70B, "ngram": NGRAM, "eagle3": EAGLE3, "mtp": MTP, "disabled": DISABLED}


def test_every_boundary_and_spec_is_covered() -> None:
    covered = {(name, ver) for name, ver, *_ in RENDERED} | {(name, ver) for name, ver, *_ in REJECTED}
    assert covered == {(name, ver) for name in SPECS for ver in BOUNDARIES}


@pytest.mark.parametrize(("name", "version", "argv", "support", "engine"), RENDERED)
def test_exact_argv_per_version(
    name: str, version: str, argv: tuple[str, ...], support: ThresholdSupport, engine: Engine
) -> None:
    command = render(SPECS[name], version)
    assert command.argv == argv
    assert command.threshold_support is support
    assert command.engine is engine


@pytest.mark.parametrize(("name", "version", "field", "words"), REJECTED)
def test_unsupported_methods_are_rejected_naming_the_field(name: str, version: str, field: str, words: str) -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render(SPECS[name], version)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert words in str(caught.value)


def test_rejection_lists_the_methods_the_version_has() -> None:
    with pytest.raises(UnsupportedCombination, match=r"vLLM 0\.10\.0 supports eagle, eagle3, ngram$"):
        render(DRAFT_70B, "0.10.0")
    assert set(methods_available(v("0.33.0"))) == set(SpeculationMethod)
    assert SpeculationMethod.DRAFT_MODEL in methods_available(v("0.15.0"))


# ------------------------------------------------------------------------------------------ version details


def test_speculation_before_0_6_3_needs_the_v2_block_manager() -> None:
    assert "--use-v2-block-manager" in render(DRAFT_70B, "0.6.2").argv
    assert "--use-v2-block-manager" not in render(DRAFT_70B, "0.6.3").argv
    assert "--use-v2-block-manager" not in render(DISABLED, "0.6.2").argv


@pytest.mark.parametrize(
    ("version", "setting", "flag"),
    [
        ("0.6.5", False, None),  # only the store_true flag exists, and caching is off by default
        ("0.6.6", False, "--no-enable-prefix-caching"),
        ("0.33.0", False, "--no-enable-prefix-caching"),
        ("0.6.0", True, "--enable-prefix-caching"),
        ("0.33.0", True, "--enable-prefix-caching"),
        ("0.33.0", None, None),
    ],
)
def test_prefix_caching_flag(version: str, setting: bool | None, flag: str | None) -> None:
    raw = {**NGRAM, "engine": {**NGRAM["engine"], "enablePrefixCaching": setting}}
    rendered = {arg for arg in render(raw, version).argv if "prefix-caching" in arg}
    assert rendered == ({flag} if flag else set())


def test_versions_outside_the_known_range() -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render(NGRAM, "0.5.4")
    assert caught.value.field == "spec.engine.version"
    newer = render(NGRAM, "0.40.1")
    assert newer.threshold_support is ThresholdSupport.BATCH_SCHEDULE
    assert any("newer than the newest version specpilot knows" in note for note in newer.notes)


def test_0_8_2_renders_legacy_flags_and_says_why() -> None:
    command = render(DRAFT_70B, "0.8.2")
    assert "--speculative-config" not in command.argv
    assert any("legacy flags" in note for note in command.notes)


def test_eagle_before_0_8_5_warns_that_the_method_is_inferred() -> None:
    raw = {**EAGLE3, "speculation": {**EAGLE3["speculation"], "method": "eagle"}}
    assert any("'eagle-'" in note for note in render(raw, "0.8.3").notes)
    assert not any("'eagle-'" in note for note in render(raw, "0.9.2").notes)


def test_draft_revision_goes_into_the_config_but_has_no_legacy_flag() -> None:
    raw = {**EAGLE3, "speculation": {**EAGLE3["speculation"], "method": "draft_model"}}
    raw["speculation"]["draft"] = {"model": "meta-llama/Llama-3.2-1B-Instruct", "revision": "abc123"}
    config = render(raw, "0.8.3").speculative_config
    assert config is not None
    assert config["revision"] == "abc123"
    with pytest.raises(UnsupportedCombination) as caught:
        render(raw, "0.8.2")
    assert caught.value.field == "spec.speculation.draft.revision"


def test_ngram_window_is_always_explicit() -> None:
    raw = {**NGRAM, "speculation": {"method": "ngram", "numSpeculativeTokens": 3}}
    assert render(raw, "0.7.3").argv[-6:-2] == ("--ngram-prompt-lookup-max", "5", "--ngram-prompt-lookup-min", "5")
    raw["speculation"]["promptLookupMin"] = 2
    config = render(raw, "0.33.0").speculative_config
    assert config is not None
    assert (config["prompt_lookup_min"], config["prompt_lookup_max"]) == (2, 2)


def test_port_argument_overrides_the_service_port() -> None:
    argv = render_command(parse_spec(EAGLE3), port=9000).argv
    assert argv[argv.index("--port") + 1] == "9000"


# ------------------------------------------------------------------------------------------- V0 / V1 choice


def with_env(raw: dict[str, Any], value: str) -> dict[str, Any]:
    return {
        **raw,
        "engine": {**raw["engine"], "env": [{"name": "OTHER", "value": "x"}, {"name": "VLLM_USE_V1", "value": value}]},
    }


@pytest.mark.parametrize(
    ("name", "version", "use_v1", "engine", "support"),
    [
        ("ngram", "0.9.2", "0", Engine.V0, DS),  # V0 forced: the threshold works again
        ("ngram", "0.8.3", "1", Engine.V1, UN),  # V1 opted into: the threshold is ignored
        ("ngram", "0.8.1", "1", Engine.V1, UN),
        ("draft", "0.9.2", "0", Engine.V0, DS),
        ("ngram", "0.16.0", "0", Engine.V1, UN),  # no V0 left: the variable no longer matters
        ("disabled", "0.9.2", "0", Engine.V0, NR),
    ],
)
def test_vllm_use_v1_decides_the_engine(
    name: str, version: str, use_v1: str, engine: Engine, support: ThresholdSupport
) -> None:
    command = render(with_env(SPECS[name], use_v1), version)
    assert (command.engine, command.threshold_support) == (engine, support)


@pytest.mark.parametrize(
    ("name", "version", "use_v1", "words"),
    [
        ("draft", "0.9.2", "1", "V1 engine runs only eagle, eagle3, ngram"),
        ("draft", "0.8.2", "1", "V1 engine runs only ngram"),
        ("eagle3", "0.9.2", "0", "remove VLLM_USE_V1=0"),
        ("ngram", "0.7.3", "1", "only on the V0 engine"),
        ("ngram", "0.9.2", "yes", "must be 0 or 1"),
    ],
)
def test_impossible_engine_choices_name_the_env_entry(name: str, version: str, use_v1: str, words: str) -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render(with_env(SPECS[name], use_v1), version)
    assert caught.value.field.startswith("spec.engine.env[1]")
    assert words in str(caught.value)


def test_eagle3_on_0_8_5_needs_the_v1_opt_in() -> None:
    with pytest.raises(UnsupportedCombination, match="set VLLM_USE_V1=1") as caught:
        render(EAGLE3, "0.8.5")
    assert caught.value.field == "spec.engine.env"
    assert render(with_env(EAGLE3, "1"), "0.8.5").engine is Engine.V1


def test_pipeline_parallel_speculation_is_refused_on_v0_only() -> None:
    raw = {**DRAFT_70B, "parallelism": {"tensorParallelSize": 2, "pipelineParallelSize": 2}}
    raw["resources"] = {"gpusPerReplica": 4}
    with pytest.raises(UnsupportedCombination) as caught:
        render(raw, "0.9.2")
    assert caught.value.field == "spec.parallelism.pipelineParallelSize"
    assert render(raw, "0.33.0").argv[10] == "2"


def test_metric_names_follow_the_engine_that_runs() -> None:
    v0 = render(DRAFT_70B, "0.9.2").metric_names
    assert v0.acceptance_rate_gauge == "vllm:spec_decode_draft_acceptance_rate"
    assert (v0.drafts, v0.engine_label) == (None, False)
    v1 = render(EAGLE3, "0.9.2").metric_names
    assert v1.drafts == "vllm:spec_decode_num_drafts_total"
    assert v1.acceptance_rate_gauge is None


# -------------------------------------------------------------------------------------------------- threshold


def test_autotune_schedule_renders_from_0_24_and_is_refused_before() -> None:
    intent = SpeculationIntent(True, 4, batch_schedule=((1, 8, 4), (9, 16, 2), (17, 128, 0)))
    command = render(DRAFT_70B, "0.24.0", intent)
    assert command.batch_schedule == intent.batch_schedule
    assert command.speculative_config is not None
    assert command.speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 16, 2], [17, 128, 0]]
    with pytest.raises(UnsupportedCombination) as caught:
        render(DRAFT_70B, "0.23.0", intent)
    assert caught.value.field == "spec.engine.version"


def test_schedule_with_a_threshold_falls_back_to_the_threshold_before_0_24() -> None:
    intent = SpeculationIntent(True, 4, disable_above_batch_size=24, batch_schedule=((1, 8, 4), (9, 128, 0)))
    assert render(DRAFT_70B, "0.33.0", intent).batch_schedule == intent.batch_schedule
    v0 = render(DRAFT_70B, "0.9.2", intent)
    assert (v0.threshold_support, v0.disable_above_batch_size) == (ThresholdSupport.DISABLE_BY_BATCH_SIZE, 24)
    assert render(DRAFT_70B, "0.23.0", intent).threshold_support is ThresholdSupport.UNSUPPORTED


@pytest.mark.parametrize(
    "schedule", [((2, 8, 4),), ((1, 8, 4), (8, 16, 0)), ((1, 8, 4), (12, 9, 0)), ((1, 8, -1),), ()]
)
def test_malformed_schedules_are_caller_bugs(schedule: tuple[tuple[int, int, int], ...]) -> None:
    with pytest.raises(ValueError, match="batch schedule") as caught:
        render(DRAFT_70B, "0.33.0", SpeculationIntent(True, 4, batch_schedule=schedule))
    assert not isinstance(caught.value, UnsupportedCombination)


def test_autotuned_threshold_above_max_num_seqs_names_the_field() -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render(DRAFT_70B, "0.33.0", SpeculationIntent(True, 4, disable_above_batch_size=129))
    assert caught.value.field == "spec.speculation.disableAboveBatchSize"


def test_schedule_needs_k_where_the_draft_config_would_supply_it() -> None:
    raw = {**EAGLE3, "speculation": {**EAGLE3["speculation"], "disableAboveBatchSize": 8}}
    del raw["speculation"]["numSpeculativeTokens"]
    assert render(raw, "0.23.0").threshold_support is ThresholdSupport.UNSUPPORTED
    with pytest.raises(UnsupportedCombination) as caught:
        render(raw, "0.24.0")
    assert caught.value.field == "spec.speculation.numSpeculativeTokens"
    # Checked even while speculation is off: autotune may switch it on later.
    raw["speculation"]["enabled"] = False
    with pytest.raises(UnsupportedCombination):
        render(raw, "0.24.0")


# Every spelling vLLM's parser reads as data parallel 2 (tests/vllm/test_extra_args_hygiene.py shows it with vLLM's
# own parser); the last occurrence wins.
DATA_PARALLEL_2 = [
    ["--data-parallel-size", "2"],
    ["--data-parallel-size=2"],
    ["--data_parallel_size", "2"],
    ["--data_parallel_size=2"],
    ["-dp", "2"],
    ["-dp=2"],
    ["--seed", "7", "--data_parallel_size", "2", "--enforce-eager"],
    ["--data-parallel-size", "1", "--data_parallel_size=2"],
]
# Not data parallel > 1: another flag with the same prefix, a size of 1 given last, no value.
DATA_PARALLEL_1 = [
    ["--data-parallel-size-local", "2"],
    ["-dpl", "2"],
    ["--data-parallel-size", "2", "-dp", "1"],
    ["--data-parallel-size"],
    ["--seed", "2"],
]


@pytest.mark.parametrize("extra", DATA_PARALLEL_1, ids=" ".join)
def test_no_data_parallel_keeps_the_schedule(extra: list[str]) -> None:
    command = render({**NGRAM, "engine": {**NGRAM["engine"], "extraArgs": extra}}, "0.33.0")
    assert command.threshold_support is render(NGRAM, "0.33.0").threshold_support, describe_threshold(command)
    assert command.threshold_support is not ThresholdSupport.UNSUPPORTED


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({**NGRAM, "speculation": {"method": "suffix", "disableAboveBatchSize": 16}}, "suffix"),
        ({**NGRAM, "engine": {**NGRAM["engine"], "extraArgs": ["--data-parallel-size", "2"]}}, "data parallel 2"),
        ({**NGRAM, "engine": {**NGRAM["engine"], "extraArgs": ["-dp=4"]}}, "data parallel 4"),
        *(
            ({**NGRAM, "engine": {**NGRAM["engine"], "extraArgs": extra}}, "data parallel 2")
            for extra in DATA_PARALLEL_2
        ),
    ],
)
def test_schedule_is_not_claimed_where_vllm_switches_it_off(raw: dict[str, Any], reason: str) -> None:
    command = render(raw, "0.33.0")
    assert command.threshold_support is ThresholdSupport.UNSUPPORTED
    assert command.speculative_config is not None
    assert "num_speculative_tokens_per_batch_size" not in command.speculative_config
    assert reason in describe_threshold(command)


def test_suffix_says_it_needs_arctic_inference() -> None:
    command = render({**NGRAM, "speculation": {"method": "suffix"}}, "0.33.0")
    assert command.speculative_config == {"method": "suffix"}
    assert any("arctic-inference" in note for note in command.notes)


@pytest.mark.parametrize(
    ("name", "version", "words"),
    [
        ("draft", "0.9.2", "disable_by_batch_size=32: the V0 engine of vLLM 0.9.2"),
        ("draft", "0.33.0", "num_speculative_tokens_per_batch_size=[[1,31,4],[32,128,0]]"),
        (
            "ngram",
            "0.9.2",
            "runs on the V1 engine, which ignores disable_by_batch_size; VLLM_USE_V1=0 would run it on V0",
        ),
        ("ngram", "0.16.0", "no-op since 0.10.0"),
        ("ngram", "0.17.0", "rejected since 0.17.0"),
        ("eagle3", "0.33.0", "no batch-size threshold requested"),
        ("disabled", "0.33.0", "speculation is off"),
    ],
)
def test_describe_threshold(name: str, version: str, words: str) -> None:
    assert words in describe_threshold(render(SPECS[name], version))


# ------------------------------------------------------------------------------------------ spec-level checks


@pytest.mark.parametrize(
    ("patch", "version", "field"),
    [
        ({"target": {"model": "m", "quantization": "gguf"}}, "0.24.0", "spec.target.quantization"),
        ({"target": {"model": "m", "quantization": "bitsandbytes"}}, "0.28.0", "spec.target.quantization"),
    ],
)
def test_removed_quantizations(patch: dict[str, Any], version: str, field: str) -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render({**EAGLE3, **patch}, version)
    assert caught.value.field == field
    assert "removed in vLLM" in str(caught.value)
    earlier = f"0.{int(version.split('.')[1]) - 1}.0"
    assert "--quantization" in render({**EAGLE3, **patch}, earlier).argv


def test_removed_draft_quantization_names_the_draft_field() -> None:
    raw = {**DRAFT_70B, "speculation": {**DRAFT_70B["speculation"]}}
    raw["speculation"]["draft"] = {**raw["speculation"]["draft"], "quantization": "bitsandbytes"}
    with pytest.raises(UnsupportedCombination) as caught:
        render(raw, "0.28.0")
    assert caught.value.field == "spec.speculation.draft.quantization"


def test_draft_tp_outside_1_or_target_tp_is_refused_even_if_validation_was_skipped() -> None:
    spec = parse_spec(DRAFT_70B)
    assert spec.speculation.draft is not None
    draft = spec.speculation.draft.model_copy(update={"tensor_parallel_size": 3})
    bad = spec.model_copy(update={"speculation": spec.speculation.model_copy(update={"draft": draft})})
    with pytest.raises(UnsupportedCombination) as caught:
        render_command(bad)
    assert caught.value.field == "spec.speculation.draft.tensorParallelSize"


@pytest.mark.parametrize(
    ("extra", "index", "owner"),
    [
        (["--disable-log-stats"], 0, "Prometheus"),
        (["--port=9000"], 0, "spec.service.port"),
        (["--seed", "1", "-tp", "4"], 2, "spec.parallelism.tensorParallelSize"),
        (["--speculative-config.method", "ngram"], 0, "spec.speculation"),
        (["--spec-tokens", "3"], 0, "spec.speculation"),
        (["--enforce-eager", "--max-num-seqs", "8"], 1, "spec.engine.maxNumSeqs"),
    ],
)
def test_extra_args_may_not_override_what_specpilot_renders(extra: list[str], index: int, owner: str) -> None:
    raw = {**EAGLE3, "engine": {**EAGLE3["engine"], "extraArgs": extra}}
    with pytest.raises(UnsupportedCombination) as caught:
        render(raw, "0.33.0")
    assert caught.value.field == f"spec.engine.extraArgs[{index}]"
    assert owner in str(caught.value)


# -------------------------------------------------------------------------------------------- config hash


def test_config_hash_is_ten_hex_and_tracks_the_argv() -> None:
    spec = parse_spec(DRAFT_70B)
    on = render_command(spec)
    off = render_command(spec, intent_from_spec(spec).without_speculation())
    assert re.fullmatch(r"[0-9a-f]{10}", on.config_hash)
    assert on.config_hash != off.config_hash
    assert render_command(spec).config_hash == on.config_hash
    # Settings that are not on the command line (replicas, autotune policy) must not roll the pods.
    resized = parse_spec({**DRAFT_70B, "replicas": 5, "autotune": {"interval": "2m"}})
    assert render_command(resized).config_hash == on.config_hash


def test_config_hash_covers_the_image() -> None:
    spec = parse_spec(DRAFT_70B)
    other_image = parse_spec({**DRAFT_70B, "engine": {**DRAFT_70B["engine"], "image": "vllm/vllm-openai:v0.33.1"}})
    assert render_command(other_image).argv == render_command(spec).argv
    assert render_command(other_image).config_hash != render_command(spec).config_hash


# ------------------------------------------------------------------------------------------------- drain


def _drain_spec(version: str, **rollout: Any) -> dict[str, Any]:
    raw = with_version(EAGLE3, version)
    return {**raw, "rollout": rollout} if rollout else raw


def _flag(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize(
    ("version", "rollout", "engine", "shutdown_timeout"),
    [
        ("0.17.1", {}, {}, None),  # the last version without the flag: nothing rendered, noted instead
        ("0.18.0", {}, {}, "300"),  # default: 8192 tokens x 50 ms = 410 s, capped at 300
        ("0.33.0", {}, {"maxModelLen": 2048}, "103"),  # 2048 x 50 ms = 102.4 s, rounded up
        ("0.33.0", {}, {"maxModelLen": 16}, "1"),  # never below one second
        ("0.33.0", {"drainSeconds": 45}, {}, "45"),
        ("0.33.0", {"drainSeconds": 0}, {}, None),  # 0 is vLLM's abort mode: the flag's default, not rendered
        ("0.17.1", {"drainSeconds": 0}, {}, None),
    ],
)
def test_shutdown_timeout_per_version_and_spec(
    version: str, rollout: dict[str, Any], engine: dict[str, Any], shutdown_timeout: str | None
) -> None:
    raw = _drain_spec(version, **rollout)
    raw["engine"] = {**raw["engine"], **engine}
    command = render_command(parse_spec(raw))
    assert _flag(command.argv, "--shutdown-timeout") == shutdown_timeout
    assert command.drain_seconds == int(shutdown_timeout or 0)


def test_default_drain_follows_the_tpot_objective() -> None:
    raw = _drain_spec("0.33.0")
    raw["engine"] = {**raw["engine"], "maxModelLen": 4096}
    raw["autotune"] = {"latency": {"metric": "tpot", "p99Target": "20ms"}}
    assert _flag(render_command(parse_spec(raw)).argv, "--shutdown-timeout") == "82"  # 4096 x 20 ms = 81.9 s
    raw["autotune"] = {"latency": {"metric": "ttft", "p99Target": "20ms"}}  # not a TPOT: the default 50 ms
    assert _flag(render_command(parse_spec(raw)).argv, "--shutdown-timeout") == "205"


def test_a_drain_asked_of_a_version_without_it_is_refused() -> None:
    with pytest.raises(UnsupportedCombination) as caught:
        render_command(parse_spec(_drain_spec("0.17.1", drainSeconds=30)))
    assert caught.value.field == "spec.rollout.drainSeconds"
    assert "0.18.0" in caught.value.problem
    assert "aborts" in caught.value.problem


def test_validate_notes_that_a_version_without_drain_aborts_requests() -> None:
    old = render_command(parse_spec(_drain_spec("0.17.1")))
    note = drain_note(old)
    assert note is not None
    assert "0.18.0" in note
    assert "aborts" in note
    assert drain_note(render_command(parse_spec(_drain_spec("0.18.0")))) is None


@pytest.mark.parametrize("extra", [["--shutdown-timeout", "5"], ["--shutdown_timeout=5"], ["--shutdown-t=5"]])
def test_extra_args_may_not_set_the_drain(extra: list[str]) -> None:
    raw = _drain_spec("0.33.0")
    raw["engine"] = {**raw["engine"], "extraArgs": extra}
    with pytest.raises(UnsupportedCombination, match=r"spec\.rollout\.drainSeconds"):
        render_command(parse_spec(raw))


# ---------------------------------------------------------------------------------------- random valid specs

MORE_VERSIONS: tuple[str, ...] = (
    "0.5.4",
    "0.6.0",
    "0.6.2",
    "0.6.6",
    "0.8.0",
    "0.8.4",
    "0.8.5",
    "0.9.0",
    "0.11.0",
    "0.11.1",
    "0.14.1",
)
MORE_VERSIONS += ("0.15.0", "0.27.0", "0.28.0", "0.40.1", "0.8.5.post1", "0.32.0+cpu")
VERSION_TEXT = st.one_of(
    st.sampled_from(BOUNDARIES + MORE_VERSIONS),
    st.sampled_from(["0.6.3", "0.7.0", "0.7.3", "0.8.0", "0.8.3", "0.9.0", "0.9.1", "0.9.2"]),  # V0 still there
    st.builds("{}.{}.{}".format, st.integers(0, 1), st.integers(0, 40), st.integers(0, 3)),
)
# model ids, paths and revisions: never starting with "-" (the API refuses what vLLM would read as a flag)
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./", min_size=1, max_size=40).filter(
    lambda n: not n.startswith("-")
)
QUANTIZATIONS = st.sampled_from(list(Quantization))
SAFE_EXTRA_ARGS = ["--seed", "7", "--enforce-eager", "--trust-remote-code", "-dp", "2", "--data-parallel-size=1"]
OWNED_EXTRA_ARGS = ["--port", "--disable-log-stats", "-q", "--speculative-config.method", "--enable-prefix-caching"]
EXTRA_ARGS = st.one_of(
    *[st.lists(st.sampled_from(SAFE_EXTRA_ARGS), max_size=3)] * 3,
    st.lists(st.sampled_from(SAFE_EXTRA_ARGS + OWNED_EXTRA_ARGS), min_size=1, max_size=3),
)
ENV: st.SearchStrategy[list[dict[str, Any]]] = st.one_of(
    st.just([]),
    st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["VLLM_USE_V1", "HF_HOME"]), "value": st.sampled_from(["0", "1", "x"])}
        ),
        max_size=2,
    ),
    st.just([{"name": "VLLM_USE_V1", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
)


def quantized(draw: st.DrawFn, quantization: Quantization) -> dict[str, Any]:
    fields: dict[str, Any] = {"quantization": quantization.value}
    if quantization in QUANTIZATIONS_NEEDING_WEIGHT_BITS:
        fields["weightBits"] = draw(st.sampled_from([4, 8, 16]))
    return fields


@st.composite
def valid_spec_dicts(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from(list(SpeculationMethod)))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 1, 2]))
    max_num_seqs = draw(st.integers(2, 2048))
    speculation: dict[str, Any] = {"method": method.value, "enabled": draw(st.sampled_from([True, True, False]))}
    if method in METHODS_NEEDING_DRAFT:
        draft = {"model": draw(NAMES), **quantized(draw, draw(QUANTIZATIONS))}
        if (draft_tp := draw(st.sampled_from([None, 1, tp]))) is not None:
            draft["tensorParallelSize"] = draft_tp
        if draw(st.booleans()):
            draft["revision"] = draw(NAMES)
        speculation["draft"] = draft
    if method in METHODS_NEEDING_K or draw(st.booleans()):
        speculation["numSpeculativeTokens"] = draw(st.integers(1, 32))
    if draw(st.booleans()):
        speculation["disableAboveBatchSize"] = draw(st.integers(2, max_num_seqs))
    if method in NGRAM_METHODS:
        low, high = sorted(draw(st.tuples(st.integers(1, 64), st.integers(1, 64))))
        if draw(st.booleans()):
            speculation["promptLookupMin"] = low
        if draw(st.booleans()):
            speculation["promptLookupMax"] = high
    engine: dict[str, Any] = {
        "image": "vllm/vllm-openai",
        "version": draw(VERSION_TEXT),
        "maxNumSeqs": max_num_seqs,
        "maxModelLen": draw(st.integers(16, 1_000_000)),
        "gpuMemoryUtilization": draw(st.floats(0.05, 1.0)),
        "dtype": draw(st.sampled_from(list(Dtype))).value,
        "kvCacheDtype": draw(st.sampled_from(["auto", "fp8", "fp8_e5m2", "bfloat16"])),
        "enablePrefixCaching": draw(st.sampled_from([None, True, False])),
        "extraArgs": draw(EXTRA_ARGS),
        "env": draw(ENV),
    }
    if draw(st.booleans()):
        engine["servedModelName"] = draw(NAMES)
    target = {"model": draw(NAMES), **quantized(draw, draw(QUANTIZATIONS))}
    if draw(st.booleans()):
        target["revision"] = draw(NAMES)
    return {
        "replicas": draw(st.integers(0, 4)),
        "engine": engine,
        "target": target,
        "speculation": speculation,
        "parallelism": {"tensorParallelSize": tp, "pipelineParallelSize": pp},
        "resources": {"gpusPerReplica": tp * pp * draw(st.sampled_from([1, 2]))},
        "service": {"port": draw(st.integers(1, 65535))},
    }


def check_rendered(spec: SpeculativeDeploymentSpec, command: RenderedCommand) -> None:
    argv = command.argv
    assert argv[:3] == ("vllm", "serve", spec.target.model)
    assert "--disable-log-stats" not in argv
    assert re.fullmatch(r"[0-9a-f]{10}", command.config_hash)
    command.metric_names  # noqa: B018 - must name the series of the engine it reports, without raising
    describe_threshold(command)
    speculative_flags = [arg for arg in argv if arg.startswith(("--speculative", "--num-speculative", "--ngram"))]
    if not spec.speculation.enabled:
        assert command.speculative_config is None
        assert command.threshold_support is ThresholdSupport.NOT_REQUESTED
        assert speculative_flags == []
        return
    assert command.speculative_config is not None
    assert command.speculative_config["method"] == spec.speculation.method.value
    if command.version >= v("0.8.3"):
        assert speculative_flags == ["--speculative-config"]
        assert json.loads(argv[argv.index("--speculative-config") + 1]) == command.speculative_config
    else:
        assert "--speculative-config" not in argv
    match command.threshold_support:
        case ThresholdSupport.DISABLE_BY_BATCH_SIZE:
            assert command.engine is Engine.V0
            assert command.speculative_config["disable_by_batch_size"] == spec.speculation.disable_above_batch_size
        case ThresholdSupport.BATCH_SCHEDULE:
            assert command.version >= v("0.24.0")
            assert command.batch_schedule is not None
            assert command.batch_schedule[-1] == (
                spec.speculation.disable_above_batch_size,
                spec.engine.max_num_seqs,
                0,
            )
        case ThresholdSupport.UNSUPPORTED:
            assert command.threshold_reason
            assert "disable_by_batch_size" not in command.speculative_config
            assert "num_speculative_tokens_per_batch_size" not in command.speculative_config
        case ThresholdSupport.NOT_REQUESTED:
            assert spec.speculation.disable_above_batch_size is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_spec_dicts())
def test_random_valid_specs_render_or_name_the_field(raw: dict[str, Any]) -> None:
    spec = parse_spec(raw)
    outcome = render_or_refusal(spec)
    if isinstance(outcome, UnsupportedCombination):
        assert outcome.field.startswith("spec.")
        assert str(outcome).startswith(f"{outcome.field}: ")
        assert outcome.problem
    else:
        check_rendered(spec, outcome)
        assert render_command(spec) == outcome


def render_or_refusal(spec: SpeculativeDeploymentSpec) -> RenderedCommand | UnsupportedCombination:
    try:
        return render_command(spec)
    except UnsupportedCombination as err:
        return err


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    valid_spec_dicts(),
    st.sampled_from(
        [
            ("replicas", 7),
            ("autotune", {"interval": "5m"}),
            ("monitoring", {"podMonitor": True}),
            ("service", {"port": 8080}),
            ("engine.maxNumSeqs", 4096),
            ("engine.servedModelName", "renamed"),
            ("speculation.enabled", False),
            ("speculation.numSpeculativeTokens", 7),
            ("engine.extraArgs", ["--seed", "11"]),
        ]
    ),
)
def test_config_hash_changes_iff_argv_changes(raw: dict[str, Any], change: tuple[str, Any]) -> None:
    path, value = change
    changed = json.loads(json.dumps(raw))
    *parents, leaf = path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    node[leaf] = value
    before, after = render_or_refusal(parse_spec(raw)), render_or_refusal(parse_spec(changed))
    if isinstance(before, RenderedCommand) and isinstance(after, RenderedCommand):
        assert (before.argv == after.argv) == (before.config_hash == after.config_hash)
