"""spec.speculation.candidates: each alternative drafter is checked like the declared one and refused by its path.

Pure checks, table-driven: the drafter rules (CEL twins) on candidates, the memory plan, tokenizer family and version
support run with the candidate in place of the declared drafter; `specpilot validate` and the reconcile refuse what
cannot run, naming spec.speculation.candidates[i]. The API server's side of the rules is checked against the real
API server through tests/unit/test_input_hygiene.py's tables (tests/operator/test_api_server_agreement.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.api import crd, v1alpha1
from specpilot.cli.main import main, validate_document
from specpilot.planning.candidates import candidate_findings
from specpilot.planning.plan import Severity
from specpilot.reconcile import conditions as cond
from specpilot.vllm.dialects import render_command
from tests.seams import reconcile_chosen
from tests.unit.test_reconcile import BASE_SPEC, condition, inputs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama-8b-draft-candidates.yaml"

# The reconcile tests' spec (8B target, 1B draft model, two replicas) at 32 sequences.
BASE: dict[str, Any] = {**BASE_SPEC, "engine": {**BASE_SPEC["engine"], "maxNumSeqs": 32}}

NGRAM = {"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3}
EAGLE3 = {"name": "head", "method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}
DRAFT_3B = {
    "name": "draft-3b",
    "method": "draft_model",
    "draft": {"model": "meta-llama/Llama-3.2-3B-Instruct"},
    "numSpeculativeTokens": 3,
}
# A 70B draft next to an 8B target on one 80 GiB GPU: the weights alone exceed the GPU.
HUGE_DRAFT = {"name": "huge", "method": "draft_model", "draft": {"model": "meta-llama/Llama-3.1-70B-Instruct"}}
QWEN_DRAFT = {"name": "qwen", "method": "draft_model", "draft": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}


def with_candidates(*candidates: dict[str, Any], **speculation: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec["speculation"].update(speculation)
    spec["speculation"]["candidates"] = [
        dict(c, numSpeculativeTokens=c.get("numSpeculativeTokens", 4)) for c in candidates
    ]
    return spec


def rule_problems(spec: dict[str, Any]) -> list[str]:
    try:
        v1alpha1.parse_spec(spec)
    except v1alpha1.InvalidSpec as err:
        return err.problems
    return []


def errors(spec: dict[str, Any]) -> list[str]:
    return [f.line() for f in candidate_findings(v1alpha1.parse_spec(spec)) if f.severity is Severity.ERROR]


@pytest.mark.parametrize(
    ("candidates", "speculation", "expected"),
    [
        ([{"name": "a", "method": "eagle3"}], {}, "spec.speculation.candidates[0].draft is required when"),
        (
            [NGRAM, {"name": "b", "method": "ngram", "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"}}],
            {},
            "spec.speculation.candidates[1].draft must be omitted when spec.speculation.candidates[1].method is",
        ),
        (
            [{"name": "a", "method": "ngram", "promptLookupMin": 5, "promptLookupMax": 2}],
            {},
            "spec.speculation.candidates[0].promptLookupMin must be less than or equal to",
        ),
        (
            [dict(EAGLE3, promptLookupMax=3)],
            {},
            "spec.speculation.candidates[0].promptLookupMin and promptLookupMax are only allowed",
        ),
        (
            [dict(DRAFT_3B, draft={"model": "meta-llama/Llama-3.2-3B-Instruct", "tensorParallelSize": 2})],
            {},
            "spec.speculation.candidates[0].draft.tensorParallelSize must be 1 or equal to",
        ),
        (
            [dict(DRAFT_3B, draft={"model": "meta-llama/Llama-3.2-3B-Instruct", "quantization": "modelopt"})],
            {},
            "spec.speculation.candidates[0].draft.weightBits is required when",
        ),
        (
            [EAGLE3, NGRAM],
            {"adaptiveVerification": True},
            "spec.speculation.candidates[1].method must be draft_model, eagle, eagle3, mtp, dflash, dspark while",
        ),
        ([NGRAM, dict(DRAFT_3B, name="ngram")], {}, "spec.speculation.candidates[1].name: 'ngram' already names"),
    ],
)
def test_the_drafter_rules_refuse_a_candidate_by_its_index(
    candidates: list[dict[str, Any]], speculation: dict[str, Any], expected: str
) -> None:
    found = rule_problems(with_candidates(*candidates, **speculation))
    assert any(line.startswith(expected) for line in found), found


def test_the_rules_without_candidates_are_the_declared_drafters_and_without_the_fault_nothing_is_refused() -> None:
    assert rule_problems(with_candidates(EAGLE3, NGRAM, DRAFT_3B)) == []
    assert rule_problems(with_candidates(EAGLE3, adaptiveVerification=True)) == []
    assert rule_problems(with_candidates(*[dict(NGRAM, name=f"n{i}") for i in range(5)])) == [
        "spec.speculation.candidates: List should have at most 4 items after validation, not 5"
    ]


def test_every_candidate_rule_has_a_cel_twin_on_the_candidates_of_the_crd() -> None:
    schema = crd.spec_schema()
    candidates = schema["properties"]["speculation"]["properties"]["candidates"]
    on_items = [r["rule"] for r in candidates["items"].get("x-kubernetes-validations", [])]
    at_root = [r["rule"] for r in schema["x-kubernetes-validations"] if "self.speculation.candidates.all(" in r["rule"]]
    assert sorted(on_items + at_root) == sorted(r.cel for r in v1alpha1.CANDIDATE_CROSS_FIELD_RULES)
    assert len(on_items + at_root) == len(v1alpha1.CANDIDATE_RULES)
    assert (candidates["x-kubernetes-list-type"], candidates["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert candidates["maxItems"] == v1alpha1.MAX_CANDIDATES


@pytest.mark.parametrize(
    ("candidate", "version", "expected"),
    [
        (
            HUGE_DRAFT,
            "0.33.0",
            "spec.speculation.candidates[0].draft.model: with this candidate, spec.resources.gpusPerReplica: weights",
        ),
        (QWEN_DRAFT, "0.33.0", "spec.speculation.candidates[0].draft.model: draft Qwen/Qwen2.5-0.5B-Instruct uses"),
        (QWEN_DRAFT, "0.33.0", "spec.speculation.candidates[0].draft.model: draft vocab_size 151936 differs"),
        # vLLM 0.15.0 has no ngram_gpu method (0.18.0+); the declared draft_model runs there.
        (
            {"name": "gpu-ngram", "method": "ngram_gpu"},
            "0.15.0",
            "spec.speculation.candidates[0].method: method ngram_gpu",
        ),
        (
            {"name": "dspark", "method": "dspark", "draft": {"model": "example/dspark"}},
            "0.24.0",
            "spec.speculation.candidates[0].method: method dspark",
        ),
    ],
)
def test_a_candidate_that_cannot_run_is_refused_naming_its_field(
    candidate: dict[str, Any], version: str, expected: str
) -> None:
    spec = with_candidates(candidate, NGRAM)
    spec["engine"] = {**BASE["engine"], "version": version, "image": f"vllm/vllm-openai:v{version}"}
    assert rule_problems(spec) == []
    found = errors(spec)
    assert any(line.startswith(expected) for line in found), found
    assert not any("candidates[1]" in line for line in found), "the good candidate is not blamed"


@pytest.mark.parametrize("candidate", [NGRAM, EAGLE3, DRAFT_3B, {"name": "suffix", "method": "suffix"}])
def test_a_candidate_that_fits_and_matches_is_not_refused(candidate: dict[str, Any]) -> None:
    assert errors(with_candidates(candidate)) == []


def test_what_the_declared_drafter_has_too_is_not_repeated_for_each_candidate() -> None:
    """maxNumSeqs 256 does not fit as many 8k sequences with any drafter: said once, for the declared one."""
    spec = with_candidates(NGRAM, DRAFT_3B)
    spec["engine"]["maxNumSeqs"] = 256
    parsed = v1alpha1.parse_spec(spec)
    lines = [f.line() for f in candidate_findings(parsed)]
    assert not any("KvLimitsConcurrency" in line for line in lines), lines
    problems, warnings = validate_document(cr(spec))
    assert problems == []
    assert sum("KvLimitsConcurrency" in line for line in warnings) == 1, warnings


def test_a_dialect_note_of_the_declared_config_is_not_repeated_but_an_error_of_a_candidate_is_kept() -> None:
    """vLLM 0.20.0 renders no batch-size threshold for any method (a note); its draft_model runs, ngram_gpu does
    not exist yet on 0.15.0: an error of the candidate even where the declared drafter has the same one."""
    spec = with_candidates(NGRAM, DRAFT_3B, disableAboveBatchSize=16)
    spec["engine"] = {**BASE["engine"], "version": "0.20.0", "image": "vllm/vllm-openai:v0.20.0"}
    problems, warnings = validate_document(cr(spec))
    assert problems == []
    assert [w for w in warnings if "threshold not rendered" in w] == [
        "spec.speculation: threshold not rendered: disable_by_batch_size is rejected since 0.17.0 and the "
        "per-batch-size schedule arrives in 0.24.0"
    ]
    gpu_ngram = {"name": "gpu-ngram", "method": "ngram_gpu", "numSpeculativeTokens": 3}
    spec = copy.deepcopy(BASE)
    spec["speculation"] = {"method": "ngram_gpu", "numSpeculativeTokens": 3, "candidates": [gpu_ngram]}
    spec["engine"] = {**BASE["engine"], "version": "0.15.0", "image": "vllm/vllm-openai:v0.15.0"}
    problems, _ = validate_document(cr(spec))
    assert [p.split(":")[0] for p in problems] == ["spec.speculation.method", "spec.speculation.candidates[0].method"]


def test_a_candidate_runs_as_the_declared_spec_with_its_drafter() -> None:
    spec = v1alpha1.parse_spec(with_candidates(NGRAM, disableAboveBatchSize=16))
    running = v1alpha1.spec_running(spec, spec.speculation.candidates[0])
    assert running.speculation.method is v1alpha1.SpeculationMethod.NGRAM
    assert (running.speculation.draft, running.speculation.num_speculative_tokens) == (None, 3)
    assert running.speculation.disable_above_batch_size == 16
    assert running.speculation.candidates == []
    assert (running.engine, running.target, running.resources) == (spec.engine, spec.target, spec.resources)
    config = render_command(running).speculative_config
    assert config is not None
    assert config["method"] == "ngram"
    assert spec.speculation.drafter() == "meta-llama/Llama-3.2-1B-Instruct"
    assert running.speculation.drafter() == "ngram"


def cr(spec: dict[str, Any], name: str = "cands") -> dict[str, Any]:
    return {"apiVersion": v1alpha1.API_VERSION, "kind": v1alpha1.KIND, "metadata": {"name": name}, "spec": spec}


def test_specpilot_validate_accepts_candidates_and_refuses_one_that_cannot_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out.strip().endswith("llama-8b-draft-candidates: valid")

    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["speculation"]["candidates"].insert(0, dict(HUGE_DRAFT, numSpeculativeTokens=4))
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    refusals = [line for line in out.splitlines() if "warning:" not in line]
    assert len(refusals) == 1, out
    assert refusals[0].startswith(f"{path}: llama-8b-draft-candidates: spec.speculation.candidates[0].draft.model: ")
    assert "[Error DoesNotFit]" in refusals[0]

    doc["metadata"]["annotations"] = {v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT: "true"}
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 0, "the overcommit annotation covers a candidate like the declared drafter"


def test_the_operator_refuses_a_candidate_that_cannot_run_with_a_condition() -> None:
    good = reconcile_chosen(inputs(with_candidates(NGRAM, EAGLE3)))
    assert "Deployment" in [c["kind"] for c in good.apply]
    assert good.status_patch is not None
    assert good.status_patch["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"

    bad = reconcile_chosen(inputs(with_candidates(NGRAM, QWEN_DRAFT)))
    assert bad.apply == []
    assert bad.status_patch is not None
    ready = condition(bad.status_patch, cond.READY)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"].startswith("spec.speculation.candidates[1].draft.model: draft Qwen/Qwen2.5-0.5B"), ready
    assert condition(bad.status_patch, cond.MEMORY_FIT)["status"] == "True", "the declared drafter fits"

    huge = with_candidates(HUGE_DRAFT)
    refused = reconcile_chosen(inputs(huge))
    assert refused.apply == []
    overcommit = reconcile_chosen(inputs(huge, annotations={v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT: "true"}))
    assert "Deployment" in [c["kind"] for c in overcommit.apply]


def test_status_candidates_are_typed_and_keyed_by_name_and_kubectl_shows_the_drafter() -> None:
    status = crd.status_schema()
    candidates = status["properties"]["candidates"]
    assert (candidates["x-kubernetes-list-type"], candidates["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    item = candidates["items"]
    assert item["properties"]["verdict"]["enum"] == ["Untried", "Trialling", "Won", "Lost", "Inconclusive"]
    for side in ("candidate", "incumbent"):
        figures = item["properties"][side]["properties"]
        assert {figures[f]["type"] for f in ("outputTokensPerSecond", "acceptanceRate", "p99TpotMs")} == {"number"}
    assert item["properties"]["evidenceTime"]["type"] == "string"
    columns = {c["name"]: c["jsonPath"] for c in crd.PRINTER_COLUMNS}
    assert columns["Drafter"] == ".status.effective.drafter"
    parsed = v1alpha1.SpeculativeDeploymentStatus.model_validate(
        {"candidates": [{"name": "ngram", "method": "ngram", "drafter": "ngram", "verdict": "Lost", "speedup": 0.8}]}
    )
    assert parsed.candidates[0].verdict is v1alpha1.CandidateVerdict.LOST


def test_specpilot_plan_shows_each_candidates_memory_and_fails_when_one_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(EXAMPLE), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["llama-8b-draft-candidates"]
    candidates = plan["candidates"]
    assert list(candidates) == ["eagle3-head", "ngram", "draft-3b"]
    assert candidates["ngram"]["draft"] is None
    # the KV cache shrinks with the draft's weights and its own KV: none for n-gram, most for the 3B draft
    assert candidates["ngram"]["kvTokens"] > plan["kvTokens"] > candidates["draft-3b"]["kvTokens"]

    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["speculation"]["candidates"].append(dict(HUGE_DRAFT, numSpeculativeTokens=4))
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "== llama-8b-draft-candidates: candidate huge" in out
    assert main(["plan", str(EXAMPLE)]) == 0


def test_a_candidate_draft_specpilot_does_not_know_is_named_by_its_own_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = cr(with_candidates(NGRAM, {"name": "mystery", "method": "draft_model", "draft": {"model": "example/3b"}}))
    problems, warnings = validate_document(doc)
    assert problems == []
    [unknown] = [w for w in warnings if "ArchitectureUnknown" in w]
    assert unknown.startswith("spec.speculation.candidates[1].draft.architecture: model 'example/3b' is not in"), (
        unknown
    )
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path)]) == 1
    assert "cands: spec.speculation.candidates[1].draft.architecture: model 'example/3b'" in capsys.readouterr().err
