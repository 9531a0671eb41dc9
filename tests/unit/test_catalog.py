"""The model catalog: parameter counts from config numbers, lookup, inline numbers, config.json files."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot.api.v1alpha1 import ModelArchitecture
from specpilot.planning import catalog
from specpilot.planning.catalog import CATALOG, Kind, UnknownArchitecture, lookup, resolve_architecture, to_hf_config

PUBLISHED = [e for e in CATALOG if e.published_parameters_b is not None]


def test_catalog_covers_the_issue_list() -> None:
    ids = {e.hf_id for e in CATALOG}
    assert len(CATALOG) >= 12
    for required in (
        "meta-llama/Llama-3.2-1B-Instruct",
        "meta-llama/Llama-3.2-3B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "meta-llama/Llama-3.1-405B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-72B-Instruct",
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-32B",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "Qwen/Qwen3-30B-A3B",
        "deepseek-ai/DeepSeek-V3",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
    ):
        assert required in ids
    assert {e.kind for e in CATALOG} == {Kind.DENSE, Kind.MOE, Kind.EAGLE3_HEAD}


def test_ids_and_aliases_resolve_to_their_own_entry() -> None:
    for entry in CATALOG:
        for key in (entry.hf_id, *entry.aliases):
            assert lookup(key) is entry, key


@pytest.mark.parametrize("entry", PUBLISHED, ids=lambda e: e.hf_id)
def test_parameters_from_config_match_published_total(entry: catalog.CatalogEntry) -> None:
    assert entry.published_parameters_b is not None
    computed = catalog.count_parameters(entry) / 1e9
    assert computed == pytest.approx(entry.published_parameters_b, rel=0.02)


@pytest.mark.parametrize("entry", [e for e in CATALOG if e.published_active_parameters_b], ids=lambda e: e.hf_id)
def test_moe_active_parameters_match_published(entry: catalog.CatalogEntry) -> None:
    assert entry.published_active_parameters_b is not None
    active = catalog.count_active_parameters(entry) / 1e9
    assert active == pytest.approx(entry.published_active_parameters_b, rel=0.03)
    assert active < catalog.count_parameters(entry) / 1e9


@pytest.mark.parametrize(
    ("hf_id", "non_embedding_b"),
    [("Qwen/Qwen3-0.6B", 0.44), ("Qwen/Qwen3-8B", 6.95), ("Qwen/Qwen3-32B", 31.2)],
)
def test_qwen3_non_embedding_parameters_match_model_cards(hf_id: str, non_embedding_b: float) -> None:
    entry = lookup(hf_id)
    assert entry is not None
    computed = (catalog.count_parameters(entry) - catalog.embedding_parameters(entry)) / 1e9
    assert computed == pytest.approx(non_embedding_b, rel=0.01)


def test_deepseek_mtp_module_matches_the_checkpoint_difference() -> None:
    """The 685B checkpoint = 671B main model + a 14B MTP module that also stores embedding and head."""
    entry = lookup("deepseek-ai/DeepSeek-V3")
    assert entry is not None
    mtp_with_embeddings = catalog.mtp_parameters(entry) + catalog.embedding_parameters(entry)
    assert mtp_with_embeddings / 1e9 == pytest.approx(685 - 671, rel=0.05)


@pytest.mark.parametrize(
    ("head", "target"),
    [
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "meta-llama/Llama-3.1-8B-Instruct"),
        ("yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "meta-llama/Llama-3.3-70B-Instruct"),
    ],
)
def test_eagle3_heads_are_small_next_to_their_target(head: str, target: str) -> None:
    """SpecDecode-Bench: EAGLE heads add < 10% memory; one layer, and the target's hidden size."""
    head_entry, target_entry = lookup(head), lookup(target)
    assert head_entry is not None
    assert target_entry is not None
    assert head_entry.eagle3 is not None
    assert catalog.count_parameters(head_entry) < 0.1 * catalog.count_parameters(target_entry)
    assert head_entry.num_hidden_layers == 1
    assert head_entry.eagle3.target_hidden_size == target_entry.hidden_size
    assert target in head_entry.eagle3.trained_for


@pytest.mark.parametrize(
    ("hf_id", "kv_bytes_per_token_bf16"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 131072),  # 2 x 32 layers x 8 heads x 128 x 2 B = 128 KiB
        ("meta-llama/Llama-3.1-70B-Instruct", 327680),  # 320 KiB
        ("Qwen/Qwen2.5-0.5B-Instruct", 12288),
        ("deepseek-ai/DeepSeek-V3", 70272),  # MLA: 61 layers x (512 + 64) x 2 B
    ],
)
def test_kv_elements_per_layer(hf_id: str, kv_bytes_per_token_bf16: int) -> None:
    entry = lookup(hf_id)
    assert entry is not None
    assert entry.num_hidden_layers * entry.kv_elements_per_token_per_layer * 2 == kv_bytes_per_token_bf16


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("META-LLAMA/llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
        ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct"),
        ("/models/Llama-3.1-8B-Instruct/", "meta-llama/Llama-3.1-8B-Instruct"),
        ("RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8", "meta-llama/Llama-3.1-70B-Instruct"),
        ("RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8", "meta-llama/Llama-3.3-70B-Instruct"),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "Qwen/Qwen2.5-72B-Instruct"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-7B-Instruct"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"),
        ("yuhuili/eagle3-llama3.1-instruct-8b", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
        ("acme/my-private-model", None),
        ("meta-llama/Llama-3.1-8B-Instruct-Extended", None),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", None),  # 262k context: a different config, not an alias
    ],
)
def test_lookup(model_id: str, expected: str | None) -> None:
    entry = lookup(model_id)
    assert (entry.hf_id if entry else None) == expected


def _inline(**overrides: Any) -> ModelArchitecture:
    numbers: dict[str, Any] = {
        "family": "llama3",
        "parametersBillions": 3.0,
        "numLayers": 20,
        "numKvHeads": 4,
        "headDim": 96,
        "hiddenSize": 3072,
        "vocabSize": 128256,
        "maxPositionEmbeddings": 65536,
    }
    numbers.update(overrides)
    return ModelArchitecture.model_validate(numbers)


def test_inline_numbers_win_over_the_catalog() -> None:
    arch = resolve_architecture("meta-llama/Llama-3.1-8B-Instruct", _inline(), field="spec.target")
    assert arch.source == "inline: spec.target.architecture"
    assert (arch.parameters, arch.num_layers, arch.num_kv_heads, arch.head_dim) == (3_000_000_000, 20, 4, 96)
    assert arch.max_position_embeddings == 65536
    assert arch.num_attention_heads is None  # not given inline: the heads check is skipped, not guessed


def test_inline_embeddings_are_capped_by_the_total() -> None:
    arch = resolve_architecture("tiny", _inline(parametersBillions=0.001), field="spec.target")
    assert arch.embedding_parameters == arch.parameters == 1_000_000


def test_catalog_numbers_when_no_inline() -> None:
    arch = resolve_architecture("meta-llama/Llama-3.1-70B-Instruct", None, field="spec.target")
    assert arch.source == "catalog: meta-llama/Llama-3.1-70B-Instruct"
    assert (arch.num_layers, arch.num_kv_heads, arch.head_dim, arch.num_attention_heads) == (80, 8, 128, 64)
    assert arch.parameters == pytest.approx(70.55e9, rel=1e-3)


@pytest.mark.parametrize(
    ("field", "expected_prefix"),
    [
        ("spec.target", "spec.target.architecture: "),
        ("spec.speculation.draft", "spec.speculation.draft.architecture: "),
    ],
)
def test_unknown_model_names_the_architecture_field(field: str, expected_prefix: str) -> None:
    with pytest.raises(UnknownArchitecture) as caught:
        resolve_architecture("acme/secret-13b", None, field=field)
    assert str(caught.value).startswith(expected_prefix)
    assert "acme/secret-13b" in str(caught.value)
    assert caught.value.field == expected_prefix.removesuffix(": ")


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: e.hf_id)
def test_hf_config_carries_the_catalog_numbers(entry: catalog.CatalogEntry) -> None:
    config = to_hf_config(entry)
    json.dumps(config)  # config.json must be plain JSON
    assert config["architectures"] == list(entry.architectures)
    assert config["model_type"] == entry.model_type
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size"):
        assert config[key] == getattr(entry, key), key
    assert config["max_position_embeddings"] == entry.max_position_embeddings
    assert config["tie_word_embeddings"] is entry.tie_word_embeddings
    if entry.mla is None:
        assert config["head_dim"] == entry.head_dim


@pytest.mark.parametrize(
    ("hf_id", "expected"),
    [
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", {"num_local_experts": 8, "num_experts_per_tok": 2}),
        (
            "Qwen/Qwen3-30B-A3B",
            {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1},
        ),
        (
            "deepseek-ai/DeepSeek-V3",
            {
                "n_routed_experts": 256,
                "n_shared_experts": 1,
                "first_k_dense_replace": 3,
                "kv_lora_rank": 512,
                "qk_rope_head_dim": 64,
                "num_nextn_predict_layers": 1,
            },
        ),
        (
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 32000},
        ),
        ("Qwen/Qwen2.5-7B-Instruct", {"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": False}),
        ("meta-llama/Llama-3.2-1B-Instruct", {"tie_word_embeddings": True, "rope_scaling": {"factor": 32.0}}),
    ],
)
def test_hf_config_uses_each_architectures_key_names(hf_id: str, expected: dict[str, Any]) -> None:
    entry = lookup(hf_id)
    assert entry is not None
    config = to_hf_config(entry)
    for key, value in expected.items():
        if isinstance(value, dict):
            assert value.items() <= config[key].items(), key
        else:
            assert config[key] == value, key


def test_hf_config_can_drop_the_checkpoint_quantization() -> None:
    entry = lookup("deepseek-ai/DeepSeek-V3")
    assert entry is not None
    assert to_hf_config(entry)["quantization_config"]["quant_method"] == "fp8"
    assert "quantization_config" not in to_hf_config(entry, include_quantization=False)
