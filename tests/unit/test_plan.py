"""The memory planner: the seed framework's figures, precision and KV arithmetic, verdicts, and random specs.

The seed framework's tables (issue 2) count weights as parameters x bytes in GB (10**9 bytes) with
nominal sizes: "70B INT8 + 8B BF16 on 2xH100 ≈ 86 GB" is 70e9 x 1 B + 8e9 x 2 B; "BF16 + BF16 ≈ 156 GB, leaving
≈ 4 GB" is 70e9 x 2 B + 8e9 x 2 B out of 2 x 80 GB. The tests below reproduce those exactly from nominal inline
numbers, then state how far the catalog's exact models move them and why.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specpilot.api.v1alpha1 import (
    METHODS_NEEDING_DRAFT,
    METHODS_NEEDING_K,
    QUANTIZATIONS_NEEDING_WEIGHT_BITS,
    Dtype,
    MemoryStatus,
    Quantization,
    SpeculationMethod,
    parse_spec,
)
from specpilot.planning.catalog import CATALOG, UnknownArchitecture, lookup
from specpilot.planning.plan import (
    GB,
    GIB,
    MemoryPlan,
    Severity,
    activation_reserve,
    format_table,
    kv_dtype_bytes,
    plan_memory,
    profile_batched_tokens,
    weight_precision,
)

H100_80GB_IN_GIB = 80 * GB / GIB  # the seed's "80 GB" card expressed in the CR's unit (74.5 GiB)
LLAMA_70B_EMBEDDINGS = 2 * 128256 * 8192  # input embedding + LM head, kept 16-bit by vLLM under quantization


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def spec_dict(**patch: Any) -> dict[str, Any]:
    """70B target, 8B draft model, 2 GPUs of 80 GiB, TP 2: the seed framework's layout."""
    base: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
        "target": {"model": "meta-llama/Llama-3.1-70B-Instruct", "quantization": "fp8"},
        "speculation": {
            "method": "draft_model",
            "numSpeculativeTokens": 5,
            "draft": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        },
        "parallelism": {"tensorParallelSize": 2},
        "resources": {"gpusPerReplica": 2, "gpuMemoryGiB": 80},
    }
    return _merge(base, patch)


def plan_of(**patch: Any) -> MemoryPlan:
    return plan_memory(parse_spec(spec_dict(**patch)))


def codes(plan: MemoryPlan) -> set[tuple[str, Severity, str]]:
    return {(f.code, f.severity, f.field) for f in plan.findings}


NOMINAL_70B = {
    "family": "llama3",
    "parametersBillions": 70,
    "numLayers": 80,
    "numKvHeads": 8,
    "headDim": 128,
    "hiddenSize": 8192,
    "vocabSize": 128256,
}
NOMINAL_8B = {**NOMINAL_70B, "parametersBillions": 8, "numLayers": 32, "hiddenSize": 4096}
INT8 = {"quantization": "compressed-tensors", "weightBits": 8}
BF16 = {"quantization": "none"}


def _nominal_seed(target_precision: dict[str, Any]) -> MemoryPlan:
    return plan_of(
        target={"architecture": NOMINAL_70B, **target_precision},
        speculation={"draft": {"architecture": NOMINAL_8B}},
        resources={"gpuMemoryGiB": H100_80GB_IN_GIB},
    )


# ------------------------------------------------------------------------------------------- seed figures


def test_seed_bf16_bf16_is_156_gb_leaving_4_gb() -> None:
    """Seed: 70B BF16 + 8B BF16 = 140 GB + 16 GB = 156 GB of 2 x 80 GB, leaving 4 GB (before utilization)."""
    plan = _nominal_seed(BF16)
    assert plan.weight_bytes == 156 * GB
    assert plan.total_vram_bytes == 160 * GB
    assert plan.headroom_before_reserve_bytes == 4 * GB
    assert not plan.fits  # 4 GB cannot hold utilization headroom, activations and a KV cache
    assert ("DoesNotFit", Severity.ERROR, "spec.resources.gpusPerReplica") in codes(plan)


def test_seed_int8_bf16_is_86_gb_plus_the_16_bit_embeddings() -> None:
    """Seed: 70 GB + 16 GB = 86 GB. The planner adds 1 B per embedding/LM-head weight (2.1 GB), kept 16-bit."""
    plan = _nominal_seed(INT8)
    assert plan.weight_bytes == 86 * GB + LLAMA_70B_EMBEDDINGS
    assert plan.weight_bytes == pytest.approx(86 * GB, rel=0.03)
    assert plan.fits


def test_seed_figures_with_the_cataloged_models() -> None:
    """Catalog Llama-3.1-70B (70.55B) + Llama-3.1-8B (8.03B): INT8 + BF16 = 88.7 GB (seed 86 GB: +0.6 GB exact
    parameter counts, +2.1 GB 16-bit embeddings); BF16 + BF16 = 157.2 GB (seed 156 GB), leaving 2.8 GB of
    2 x 80 GB (seed ≈ 4 GB)."""
    int8 = plan_of(target=INT8, resources={"gpuMemoryGiB": H100_80GB_IN_GIB})
    bf16 = plan_of(target=BF16, resources={"gpuMemoryGiB": H100_80GB_IN_GIB})
    assert int8.weight_bytes == pytest.approx(86 * GB, rel=0.04)
    assert bf16.weight_bytes == pytest.approx(156 * GB, rel=0.01)
    assert bf16.headroom_before_reserve_bytes == pytest.approx(4 * GB, abs=1.5 * GB)
    assert int8.fits
    assert not bf16.fits


def test_seed_layout_on_80_gib_cards() -> None:
    """The CR counts GiB: 2 x 80 GiB = 171.8 GB. INT8 + BF16 fits with tens of GiB of KV; BF16 + BF16 does not."""
    int8, bf16 = plan_of(target=INT8), plan_of(target=BF16)
    assert int8.weight_bytes / GIB == pytest.approx(82.6, abs=0.1)
    assert bf16.weight_bytes / GIB == pytest.approx(146.4, abs=0.1)
    assert bf16.headroom_before_reserve_bytes / GIB == pytest.approx(13.6, abs=0.1)
    assert int8.fits
    assert int8.kv_cache_bytes > 50 * GIB
    assert not bf16.fits
    assert ("TargetShareHigh", Severity.WARNING, "spec.target.quantization") in codes(bf16)


def test_status_matches_the_memory_status_model() -> None:
    plan = plan_of()
    status = MemoryStatus.model_validate(plan.to_status())
    assert status.fits is plan.fits
    assert status.target_weights_gi_b == round(plan.target.weight_bytes / GIB, 2)
    assert status.kv_tokens == plan.kv_tokens
    assert status.draft_share_of_vram == pytest.approx(plan.draft_weight_bytes / (160 * GIB), abs=1e-4)


# -------------------------------------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("quantization", "bits", "dtype", "bytes_per_weight", "assumed"),
    [
        (Quantization.NONE, None, Dtype.AUTO, 2, False),
        (Quantization.NONE, None, Dtype.FLOAT16, 2, False),
        (Quantization.NONE, None, Dtype.FLOAT32, 4, False),
        (Quantization.FP8, None, Dtype.AUTO, 1, False),
        (Quantization.AWQ, None, Dtype.AUTO, 0.5, False),
        (Quantization.GPTQ_MARLIN, None, Dtype.AUTO, 0.5, False),
        (Quantization.GPTQ, 8, Dtype.AUTO, 1, False),
        (Quantization.COMPRESSED_TENSORS, 8, Dtype.AUTO, 1, False),
        (Quantization.COMPRESSED_TENSORS, 4, Dtype.AUTO, 0.5, False),
        (Quantization.MODELOPT, 16, Dtype.AUTO, 2, False),
        (Quantization.MODELOPT_FP4, None, Dtype.AUTO, 0.5, False),
        (Quantization.MXFP4, None, Dtype.AUTO, 0.5, False),
        (Quantization.BITSANDBYTES, None, Dtype.AUTO, 0.5, False),
        (Quantization.BITSANDBYTES, 8, Dtype.AUTO, 1, False),
        (Quantization.GGUF, None, Dtype.AUTO, 0.5, True),
        (Quantization.GGUF, 8, Dtype.AUTO, 1, False),
    ],
)
def test_weight_precision(
    quantization: Quantization, bits: int | None, dtype: Dtype, bytes_per_weight: float, assumed: bool
) -> None:
    precision = weight_precision(quantization, bits, dtype)
    assert precision.bytes_per_weight == bytes_per_weight
    assert (precision.assumed is not None) is assumed


@pytest.mark.parametrize(
    ("kv_cache_dtype", "dtype", "expected"),
    [
        ("auto", Dtype.AUTO, 2),
        ("auto", Dtype.FLOAT32, 4),
        ("bfloat16", Dtype.AUTO, 2),
        ("fp8", Dtype.AUTO, 1),
        ("FP8_E5M2", Dtype.AUTO, 1),
        ("nvfp4", Dtype.AUTO, 0.5),
        ("int3_magic", Dtype.AUTO, None),
    ],
)
def test_kv_dtype_bytes(kv_cache_dtype: str, dtype: Dtype, expected: float | None) -> None:
    assert kv_dtype_bytes(kv_cache_dtype, dtype) == expected


def test_quantized_target_keeps_embeddings_16_bit() -> None:
    entry = lookup("meta-llama/Llama-3.1-70B-Instruct")
    assert entry is not None
    plan = plan_of()
    params, embeddings = plan.target.parameters, plan.target.embedding_parameters
    assert embeddings == LLAMA_70B_EMBEDDINGS
    assert plan.target.weight_bytes == (params - embeddings) * 1 + embeddings * 2


@pytest.mark.parametrize(
    ("kv_cache_dtype", "target_kv", "draft_kv"),
    [("auto", 327680, 131072), ("fp8", 163840, 65536)],  # 2 x layers x 8 KV heads x 128 x bytes
)
def test_kv_bytes_per_token_for_target_and_draft(kv_cache_dtype: str, target_kv: int, draft_kv: int) -> None:
    plan = plan_of(engine={"kvCacheDtype": kv_cache_dtype})
    assert plan.draft is not None
    assert (plan.target.kv_bytes_per_token, plan.draft.kv_bytes_per_token) == (target_kv, draft_kv)
    assert plan.kv_tokens == plan.kv_budget_bytes_per_rank // ((target_kv + draft_kv) // 2)  # TP 2 halves heads
    assert plan.concurrent_sequences == plan.kv_tokens // 8192


def test_fp8_kv_cache_doubles_kv_tokens() -> None:
    auto, fp8 = plan_of(), plan_of(engine={"kvCacheDtype": "fp8"})
    assert fp8.kv_tokens == pytest.approx(2 * auto.kv_tokens, abs=2)


def test_draft_model_kv_share_matches_specdecode_bench() -> None:
    """SpecDecode-Bench: a Qwen3-0.6B draft adds 1.77x per-token KV memory on Qwen3-8B."""
    plan = plan_of(
        target={"model": "Qwen/Qwen3-8B", "quantization": "none"},
        speculation={"draft": {"model": "Qwen/Qwen3-0.6B"}},
        parallelism={"tensorParallelSize": 1},
        resources={"gpusPerReplica": 1},
    )
    assert plan.kv_bytes_per_token / plan.target.kv_bytes_per_token == pytest.approx(1.77, abs=0.01)


def test_eagle3_head_keeps_a_one_layer_cache() -> None:
    plan = plan_of(
        target={"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "none"},
        speculation={
            "method": "eagle3",
            "numSpeculativeTokens": 3,
            "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        },
        parallelism={"tensorParallelSize": 1},
        resources={"gpusPerReplica": 1},
    )
    assert plan.draft is not None
    assert plan.draft.role == "head"
    assert plan.draft.kv_bytes_per_token == 2 * 1 * 8 * 128 * 2
    assert plan.draft_share_of_vram < 0.015  # ~0.85 GB next to 80 GiB
    assert plan.draft_to_target_ratio is None  # the 1:8-1:12 advice is for standalone draft models
    assert plan.fits


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_model_free_methods_have_no_draft_memory(method: str) -> None:
    speculation: dict[str, Any] = {"method": method, "draft": None}
    if method == "ngram":
        speculation["numSpeculativeTokens"] = 3
    base = spec_dict()
    base["speculation"] = {k: v for k, v in speculation.items() if v is not None}
    plan = plan_memory(parse_spec(base))
    assert plan.draft is None
    assert plan.draft_weight_bytes == 0
    assert plan.draft_share_of_vram == 0


def test_mtp_prices_the_targets_mtp_layers() -> None:
    plan = plan_of(
        engine={"maxModelLen": 32768},
        target={"model": "deepseek-ai/DeepSeek-V3", "quantization": "fp8"},
        speculation={"method": "mtp", "numSpeculativeTokens": 1, "draft": None},
        parallelism={"tensorParallelSize": 8},
        resources={"gpusPerReplica": 8, "gpuMemoryGiB": 140},
    )
    assert plan.draft is not None
    assert plan.draft.role == "mtp"
    assert plan.draft.weight_bytes / GB == pytest.approx(11.6, abs=0.1)  # FP8, embeddings shared with the target
    assert plan.draft.kv_bytes_per_token == 576 * 2  # one MLA layer
    assert plan.target.kv_bytes_per_token == 61 * 576 * 2
    assert plan.fits


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    """Llama 405B has 8 KV heads: at TP 16 each rank keeps one, so ranks hold twice the model's KV bytes."""
    plan = plan_of(
        target={"model": "meta-llama/Llama-3.1-405B-Instruct", "quantization": "fp8"},
        speculation={"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
        parallelism={"tensorParallelSize": 16},
        resources={"gpusPerReplica": 16},
    )
    assert plan.target.kv_bytes_per_token_per_rank * 16 == 2 * plan.target.kv_bytes_per_token
    assert ("KvHeadsReplicated", Severity.INFO, "spec.parallelism.tensorParallelSize") in codes(plan)


def test_activation_reserve_by_hand() -> None:
    """Llama-3.1-8B, 1 GPU of 80 GiB (8192 profiled tokens), 256 sequences, ngram K=3."""
    arch_plan = plan_of(
        target={"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "none"},
        speculation={"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
        parallelism={"tensorParallelSize": 1},
        resources={"gpusPerReplica": 1},
    )
    expected = round(1.5 * GIB) + 8192 * (4 * 4096 + 2 * 14336) * 2 + 256 * 4 * 128256 * 4
    assert arch_plan.reserve_bytes_per_rank == expected
    from specpilot.planning.catalog import from_entry

    entry = lookup("meta-llama/Llama-3.1-8B-Instruct")
    assert entry is not None
    reserve = activation_reserve([from_entry(entry)], tp=1, batched_tokens=8192, max_num_seqs=256, speculative_tokens=3)
    assert reserve == expected


# ---------------------------------------------------------------------------------------------- verdicts

LLAMA_8B_ONE_GPU: dict[str, Any] = {
    "target": {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "none"},
    "parallelism": {"tensorParallelSize": 1},
    "resources": {"gpusPerReplica": 1},
}
INLINE_DRAFT = {**NOMINAL_8B, "parametersBillions": 0.5, "numLayers": 8, "hiddenSize": 1024}


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"target": BF16},
            [
                ("DoesNotFit", Severity.ERROR, "spec.resources.gpusPerReplica"),
                ("TargetShareHigh", Severity.WARNING, "spec.target.quantization"),
            ],
        ),
        (
            {
                **LLAMA_8B_ONE_GPU,
                "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
                "engine": {"maxModelLen": 65536},
                "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 24},
            },
            [("DoesNotFit", Severity.ERROR, "spec.engine.maxModelLen")],
        ),
        (
            {
                **LLAMA_8B_ONE_GPU,
                "speculation": {"draft": {"model": "meta-llama/Llama-3.2-3B-Instruct"}},
                "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 24},
            },
            [
                ("DraftShareHigh", Severity.WARNING, "spec.speculation.draft.model"),
                ("DraftRatioOutOfRange", Severity.INFO, "spec.speculation.draft.model"),
            ],
        ),
        (
            {"speculation": {"draft": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}},
            [
                ("TokenizerMismatch", Severity.ERROR, "spec.speculation.draft.model"),
                ("VocabSizeMismatch", Severity.ERROR, "spec.speculation.draft.model"),
            ],
        ),
        (
            {"speculation": {"draft": {"model": "acme/draft", "architecture": {**INLINE_DRAFT, "family": "qwen3"}}}},
            [("TokenizerMismatch", Severity.ERROR, "spec.speculation.draft.architecture.family")],
        ),
        (
            {
                "target": {"model": "Qwen/Qwen2.5-7B-Instruct", "quantization": "none"},
                "speculation": {"draft": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}},
            },
            [("VocabSizeMismatch", Severity.ERROR, "spec.speculation.draft.model")],
        ),
        (
            {"speculation": {"draft": {"tensorParallelSize": 1}}},
            [("DraftTensorParallel", Severity.WARNING, "spec.speculation.draft.tensorParallelSize")],
        ),
        (
            {"target": {"model": "Qwen/Qwen2.5-7B-Instruct"}, "engine": {"maxModelLen": 65536}},
            [("MaxModelLenAboveModelLimit", Severity.ERROR, "spec.engine.maxModelLen")],
        ),
        (
            {
                "target": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "quantization": "none"},
                "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
                "parallelism": {"tensorParallelSize": 4},
                "resources": {"gpusPerReplica": 4},
            },
            [
                ("TensorParallelHeads", Severity.ERROR, "spec.parallelism.tensorParallelSize"),
                ("KvHeadsReplicated", Severity.INFO, "spec.parallelism.tensorParallelSize"),
            ],
        ),
        (
            {
                "target": {"model": "Qwen/Qwen2.5-7B-Instruct", "quantization": "none"},
                "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
                "parallelism": {"tensorParallelSize": 7},
                "resources": {"gpusPerReplica": 7},
            },
            [("TensorParallelKvHeads", Severity.ERROR, "spec.parallelism.tensorParallelSize")],
        ),
        (
            {"parallelism": {"tensorParallelSize": 1}, "speculation": {"draft": {"tensorParallelSize": 1}}},
            [("GpusIdle", Severity.WARNING, "spec.resources.gpusPerReplica")],
        ),
        (
            {**LLAMA_8B_ONE_GPU, "speculation": {"method": "mtp", "numSpeculativeTokens": 1, "draft": None}},
            [("MtpNotAvailable", Severity.ERROR, "spec.speculation.method")],
        ),
        (
            {
                "target": {"model": "acme/moe", "architecture": NOMINAL_70B},
                "speculation": {"method": "mtp", "numSpeculativeTokens": 1, "draft": None},
            },
            [("MtpWeightsUnknown", Severity.INFO, "spec.target.architecture")],
        ),
        (
            {"speculation": {"method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}},
            [("DraftHiddenSizeMismatch", Severity.ERROR, "spec.speculation.draft.model")],
        ),
        (
            {
                **LLAMA_8B_ONE_GPU,
                "target": {"model": "mistralai/Mistral-7B-Instruct-v0.3"},
                "speculation": {"method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
            },
            [
                ("TokenizerMismatch", Severity.ERROR, "spec.speculation.draft.model"),
                ("DraftHeadTrainedForOtherTarget", Severity.INFO, "spec.speculation.draft.model"),
            ],
        ),
        (
            {**LLAMA_8B_ONE_GPU, "speculation": {"draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}},
            [("DraftIsEagleHead", Severity.ERROR, "spec.speculation.method")],
        ),
        (
            {
                **LLAMA_8B_ONE_GPU,
                "speculation": {"method": "eagle", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
            },
            [("DraftHeadMethodMismatch", Severity.WARNING, "spec.speculation.method")],
        ),
        (
            {"speculation": {"method": "eagle3", "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"}}},
            [("DraftIsNotEagleHead", Severity.ERROR, "spec.speculation.draft.model")],
        ),
        (
            {"target": {"quantization": "gguf"}},
            [("WeightBitsAssumed", Severity.INFO, "spec.target.weightBits")],
        ),
        (
            {
                "speculation": {
                    "draft": {"model": "acme/draft", "architecture": {**INLINE_DRAFT, "maxPositionEmbeddings": 4096}}
                }
            },
            [("DraftContextShorter", Severity.WARNING, "spec.engine.maxModelLen")],
        ),
        (
            {
                **LLAMA_8B_ONE_GPU,
                "speculation": {"method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
            },
            [("DraftHeadContextShorter", Severity.INFO, "spec.engine.maxModelLen")],
        ),
        (
            {
                "target": {"model": "acme/tiny", "architecture": {**NOMINAL_8B, "numLayers": 2}},
                "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "draft": None},
                "parallelism": {"tensorParallelSize": 1, "pipelineParallelSize": 4},
                "resources": {"gpusPerReplica": 4},
            },
            [("PipelineExceedsLayers", Severity.ERROR, "spec.parallelism.pipelineParallelSize")],
        ),
        (
            {"target": INT8},
            [("KvLimitsConcurrency", Severity.INFO, "spec.engine.maxNumSeqs")],
        ),
    ],
)
def test_findings(patch: dict[str, Any], expected: list[tuple[str, Severity, str]]) -> None:
    raw = spec_dict(**patch)
    if raw["speculation"].get("draft", {}) is None:
        del raw["speculation"]["draft"]
    plan = plan_memory(parse_spec(raw))
    found = codes(plan)
    for item in expected:
        assert item in found, (item, [f.line() for f in plan.findings])


def test_a_sound_deployment_has_no_errors_or_warnings() -> None:
    plan = plan_of(
        **LLAMA_8B_ONE_GPU,
        speculation={
            "method": "eagle3",
            "numSpeculativeTokens": 3,
            "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        },
        engine={"maxModelLen": 2048},
    )
    assert plan.fits
    assert [f for f in plan.findings if f.severity is not Severity.INFO] == []


def test_draft_tp_1_is_fine_for_v0_draft_models() -> None:
    plan = plan_of(engine={"version": "0.9.2"}, speculation={"draft": {"tensorParallelSize": 1}})
    assert "DraftTensorParallel" not in {f.code for f in plan.findings}
    assert plan.draft is not None
    assert plan.draft.tensor_parallel_size == 1


def test_unknown_model_is_an_error_naming_the_field() -> None:
    with pytest.raises(UnknownArchitecture, match=r"^spec\.speculation\.draft\.architecture: "):
        plan_of(speculation={"draft": {"model": "acme/unlisted-draft"}})


def test_table_and_json_name_their_units() -> None:
    plan = plan_of(target=BF16)
    table = format_table(plan)
    assert "GiB" in table
    assert " GB" in table
    assert "Error   DoesNotFit: spec.resources.gpusPerReplica:" in table
    document = json.loads(json.dumps(plan.to_json()))
    assert document["units"] == {"GiB": 1073741824, "GB": 1000000000}
    assert document["weights"]["GB"] == pytest.approx(157.17, abs=0.01)
    assert document["status"]["fits"] is False


# ------------------------------------------------------------------------------------------ random specs

CATALOG_TARGETS = [e.hf_id for e in CATALOG if e.eagle3 is None]
CATALOG_HEADS = [e.hf_id for e in CATALOG if e.eagle3 is not None]
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]+$")


def architectures() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "family": st.sampled_from(["llama3", "qwen3", "mistral-v3"]),
            "parametersBillions": st.floats(min_value=1e-6, max_value=2000, allow_nan=False),
            "numLayers": st.integers(1, 200),
            "numKvHeads": st.integers(1, 128),
            "headDim": st.integers(1, 512),
            "hiddenSize": st.integers(1, 65536),
            "vocabSize": st.integers(1, 300_000),
            "maxPositionEmbeddings": st.integers(1, 2_000_000),
        },
        optional={"activeParametersBillions": st.floats(min_value=1e-6, max_value=2000, allow_nan=False)},
    )


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from(list(SpeculationMethod)))
    tp, pp = draw(st.sampled_from([1, 2, 3, 4, 8, 16])), draw(st.sampled_from([1, 1, 2, 4]))  # TP x PP <= 64
    gpus = min(64, tp * pp + draw(st.integers(0, 2)))

    def model(candidates: list[str], field_default: str) -> dict[str, Any]:
        if draw(st.booleans()):
            return {"model": draw(st.sampled_from(candidates))}
        return {"model": field_default, "architecture": draw(architectures())}

    def quantized(part: dict[str, Any]) -> dict[str, Any]:
        quantization = draw(st.sampled_from(list(Quantization)))
        part["quantization"] = quantization.value
        if quantization in QUANTIZATIONS_NEEDING_WEIGHT_BITS or draw(st.booleans()):
            part["weightBits"] = draw(st.sampled_from([4, 8, 16]))
        return part

    speculation: dict[str, Any] = {"method": method.value}
    if method in METHODS_NEEDING_DRAFT:
        candidates = CATALOG_HEADS if method is not SpeculationMethod.DRAFT_MODEL else CATALOG_TARGETS
        draft = quantized(model(candidates + CATALOG_TARGETS[:3], "acme/draft"))
        draft_tp = draw(st.sampled_from([None, 1, tp]))
        if draft_tp is not None:
            draft["tensorParallelSize"] = draft_tp
        speculation["draft"] = draft
    if method in METHODS_NEEDING_K or draw(st.booleans()):
        speculation["numSpeculativeTokens"] = draw(st.integers(1, 16))
    max_num_seqs = draw(st.integers(1, 2048))
    return {
        "engine": {
            "image": "vllm/vllm-openai",
            "version": draw(st.sampled_from(["0.8.1", "0.8.5", "0.9.2", "0.10.0", "0.15.0", "0.24.0", "0.33.0"])),
            "maxModelLen": draw(st.integers(16, 1_000_000)),
            "gpuMemoryUtilization": draw(st.floats(min_value=0.01, max_value=1.0)),
            "maxNumSeqs": max_num_seqs,
            "dtype": draw(st.sampled_from([d.value for d in Dtype])),
            "kvCacheDtype": draw(st.sampled_from(["auto", "fp8", "bfloat16", "fp8_e5m2", "nvfp4"])),
        },
        "target": quantized(model(CATALOG_TARGETS, "acme/target")),
        "speculation": speculation,
        "parallelism": {"tensorParallelSize": tp, "pipelineParallelSize": pp},
        "resources": {"gpusPerReplica": gpus, "gpuMemoryGiB": draw(st.floats(min_value=0.001, max_value=4096))},
    }


@settings(max_examples=300, deadline=None)
@given(valid_specs())
def test_random_valid_specs_never_crash_and_every_finding_names_a_spec_field(raw: dict[str, Any]) -> None:
    spec = parse_spec(raw)
    plan = plan_memory(spec)
    for finding in plan.findings:
        assert finding.field.startswith("spec."), finding
        assert CAMEL.match(finding.code), finding
        assert finding.message
    MemoryStatus.model_validate(plan.to_status())
    json.dumps(plan.to_json())
    assert format_table(plan)
    assert plan.kv_tokens >= 0
    assert plan.concurrent_sequences >= 0
    assert plan.fits == (plan.kv_budget_bytes_per_rank > 0 and plan.kv_tokens >= spec.engine.max_model_len)
    assert plan.fits or any(f.code == "DoesNotFit" for f in plan.findings)
    assert math.isfinite(plan.draft_share_of_vram)
    assert math.isfinite(plan.target_share_of_vram)


@settings(max_examples=150, deadline=None)
@given(valid_specs(), st.floats(min_value=1.0, max_value=8.0))
def test_more_gpu_memory_never_means_fewer_kv_tokens(raw: dict[str, Any], factor: float) -> None:
    """Within one of vLLM's device-size brackets (its batched-token default grows with GPU memory)."""
    memory = raw["resources"]["gpuMemoryGiB"]
    more = min(4096.0, memory * factor)
    assume(profile_batched_tokens(memory) == profile_batched_tokens(more))
    bigger = _merge(raw, {"resources": {"gpuMemoryGiB": more}})
    small, large = plan_memory(parse_spec(raw)), plan_memory(parse_spec(bigger))
    assert large.kv_tokens >= small.kv_tokens
