"""Every acceptance-method rendering goes through the real vLLM parser and create_engine_config() (issue 14).

The intent (spec.speculation.acceptance) is rendered for each speculation method on the two versions whose real
packages the vLLM tier has: 0.33.0 (Block, Relaxed as FLy, draft sampling) and 0.32.0 (Block and draft sampling;
no lossy method). vLLM must accept each command line and its engine config must carry the rendered values, so a
rendering is proven to reach the engine, not only to parse. The boundaries are real too: 0.32.0 rejects `fly`, and
0.33.0 rejects the typical-acceptance keys specpilot renders for 0.9.2 (their last version).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.api import v1alpha1
from specpilot.vllm.dialects import UnsupportedCombination, render_command
from tests.vllm.test_rendered_commands import EAGLE3, TARGETS_AND_DRAFTS, assert_all_accepted, base, config_for

pytestmark = pytest.mark.vllm

INTENTS: list[dict[str, Any]] = [
    {"method": "Exact"},
    {"method": "Block"},
    {"method": "Relaxed"},
    {"draftSampling": "Probabilistic"},
    {"draftSampling": "Greedy"},
    {"method": "Block", "draftSampling": "Probabilistic"},
    {"method": "Relaxed", "draftSampling": "Probabilistic"},
]


def speculations() -> list[tuple[str, dict[str, Any], str]]:
    """(name, speculation, target) for each method with a draft or none."""
    target, draft = TARGETS_AND_DRAFTS[0]
    return [
        ("draft_model", {"method": "draft_model", "draft": {"model": draft}, "numSpeculativeTokens": 4}, target),
        ("ngram", {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 4}, target),
        ("eagle3", {"method": "eagle3", "draft": {"model": EAGLE3[1]}, "numSpeculativeTokens": 3}, EAGLE3[0]),
    ]


def cases_for(version: str) -> tuple[list[dict[str, Any]], list[str], dict[str, dict[str, Any]]]:
    """Validator cases for every renderable (method, intent); the refused names; the rendered config per case."""
    cases: list[dict[str, Any]] = []
    refused: list[str] = []
    rendered: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for name, speculation, target in speculations():
        for intent in INTENTS:
            case_id = f"{version}/{name}/{json.dumps(intent, sort_keys=True)}"
            raw = base(version, target) | {"speculation": speculation | {"acceptance": intent}}
            spec = v1alpha1.parse_spec(raw)
            try:
                command = render_command(spec)
            except UnsupportedCombination as err:
                problems.append(err.problem)
                refused.append(case_id)
                continue
            models = [spec.target.model] + ([spec.speculation.draft.model] if spec.speculation.draft else [])
            cases.append({"id": case_id, "argv": list(command.argv), "configs": {m: config_for(m) for m in models}})
            rendered[case_id] = command.speculative_config or {}
    unnamed = [p for p in problems if f"vLLM {version}" not in p]
    assert not unnamed, unnamed  # every refusal names the version
    return cases, refused, rendered


def assert_reached_engine(results: list[dict[str, Any]], rendered: dict[str, dict[str, Any]]) -> None:
    for result in results:
        engine_spec = (result.get("engine") or {}).get("speculative") or {}
        config = rendered[result["id"]]
        for key, default in (("rejection_sample_method", "standard"), ("draft_sample_method", "greedy")):
            assert engine_spec.get(key) == config.get(key, default), (result["id"], key, engine_spec)


def boundary_case(version: str, intent: dict[str, Any]) -> dict[str, Any]:
    """A draft_model command line rendered for `version`, to be checked by the other side's vLLM."""
    target, draft = TARGETS_AND_DRAFTS[0]
    speculation = {"method": "draft_model", "draft": {"model": draft}, "numSpeculativeTokens": 4}
    raw = base(version, target) | {"speculation": speculation | {"acceptance": intent}}
    argv = list(render_command(v1alpha1.parse_spec(raw)).argv)
    return {"id": f"boundary:{version}", "argv": argv, "configs": {m: config_for(m) for m in (target, draft)}}


def test_acceptance_methods_pass_vllm_0_33(vllm_validator_venv: VllmVenv) -> None:
    cases, refused, rendered = cases_for("0.33.0")
    # 0.33 renders every intent for every method: nothing may be refused there
    assert not refused, refused
    assert len(cases) == len(INTENTS) * len(speculations())
    # the boundary: what specpilot renders for 0.9.2 (typical acceptance, its last version) 0.33 refuses
    typical = boundary_case("0.9.2", {"method": "Relaxed", "posteriorThreshold": 0.2, "posteriorAlpha": 0.4})
    assert "typical_acceptance_sampler" in typical["argv"][-1]
    assert '"posterior_alpha":0.4' in typical["argv"][-1]
    results = validate_argv_cases([*cases, typical], python=vllm_validator_venv.python)
    old = results.pop()
    assert not old["ok"], old
    assert "acceptance_method" in str(old["error"])
    assert_all_accepted(results)
    assert_reached_engine(results, rendered)
    assert {r["engine"]["speculative"]["rejection_sample_method"] for r in results} == {"standard", "block", "fly"}


def test_acceptance_methods_pass_vllm_0_32(vllm_venv: VllmVenv) -> None:
    cases, refused, rendered = cases_for("0.32.0")
    # 0.26-0.32: Block and draft sampling render; Relaxed (FLy arrives in 0.33) is refused for every method
    assert refused
    assert all("Relaxed" in name for name in refused), refused
    # the boundary: 0.33's Relaxed (fly) is refused by 0.32
    fly = boundary_case("0.33.0", {"method": "Relaxed"})
    results = validate_argv_cases([*cases, fly], python=vllm_venv.python)
    new = results.pop()
    assert not new["ok"], new
    assert "rejection_sample_method" in str(new["error"])
    assert_all_accepted(results)
    assert_reached_engine(results, rendered)
