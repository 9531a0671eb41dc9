"""The `specpilot` command line: validate, render, plan and crd, run in-process on real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specpilot.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama-70b-draft-8b-2xh100.yaml"

BAD = """
apiVersion: specpilot.dev/v1alpha1
kind: SpeculativeDeployment
metadata: {name: bad}
spec:
  engine: {image: vllm/vllm-openai:v0.33.0, version: "0.33.0", maxModelLen: 0}
  target: {model: meta-llama/Llama-3.1-8B-Instruct}
  speculation: {method: draft_model, numSpeculativeTokens: 4}
"""

TOO_BIG = """
apiVersion: specpilot.dev/v1alpha1
kind: SpeculativeDeployment
metadata: {name: too-big}
spec:
  engine: {image: vllm/vllm-openai:v0.33.0, version: "0.33.0"}
  target: {model: meta-llama/Llama-3.1-70B-Instruct}
  speculation: {method: ngram, numSpeculativeTokens: 3}
  resources: {gpusPerReplica: 1, gpuMemoryGiB: 80}
"""


def test_validate_accepts_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, sorted((ROOT / "examples").glob("*.yaml")))]) == 0
    assert capsys.readouterr().out.count(": valid") >= 6


@pytest.mark.parametrize(
    ("text", "expected_lines"),
    [
        (BAD, ["spec.engine.maxModelLen: Input should be greater than or equal to 16"]),
        (BAD.replace("maxModelLen: 0", "maxModelLen: 4096"), ["spec.speculation.draft is required"]),
        (TOO_BIG, ["spec.resources.gpusPerReplica: weights 131.4 GiB", "DoesNotFit"]),
    ],
)
def test_validate_reports_one_line_per_problem_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected_lines: list[str]
) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    for fragment in expected_lines:
        assert any(fragment in line for line in out), out


def test_render_prints_children_with_the_rendered_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Deployment", "Service", "PodDisruptionBudget", "PodMonitor"]
    command = docs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]
    assert "--speculative-config" in command


def test_render_for_an_older_vllm_uses_its_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE), "--vllm-version", "0.8.1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    command = docs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--speculative-model" in command
    assert "--speculative-config" not in command


TWO_REPLICAS = """
apiVersion: specpilot.dev/v1alpha1
kind: SpeculativeDeployment
metadata: {name: chat}
spec:
  replicas: 2
  engine: {image: vllm/vllm-openai:v0.33.0, version: "0.33.0"}
  target: {model: meta-llama/Llama-3.1-8B-Instruct}
  speculation: {method: ngram, numSpeculativeTokens: 3}
"""


def test_render_of_two_replicas_drains_within_the_grace_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(TWO_REPLICAS)
    assert main(["render", str(path)]) == 0
    deployment, *_ = yaml.safe_load_all(capsys.readouterr().out)
    pod = deployment["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    drain = int(command[command.index("--shutdown-timeout") + 1])
    pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert drain > 0
    assert pre_stop > 0
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_validate_warns_that_a_version_without_drain_aborts_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(TWO_REPLICAS.replace('"0.33.0"', '"0.17.1"'))
    assert main(["validate", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "--shutdown-timeout" in line]
    assert len(warnings) == 1
    assert "warning: spec.engine.version:" in warnings[0]
    assert "aborts" in warnings[0]
    path.write_text(
        TWO_REPLICAS.replace('"0.33.0"', '"0.17.1"').replace(
            "replicas: 2", "replicas: 2\n  rollout: {drainSeconds: 30}"
        )
    )
    assert main(["validate", str(path)]) == 1
    assert "spec.rollout.drainSeconds: vLLM 0.17.1 cannot drain" in capsys.readouterr().out


def test_plan_json_has_the_memory_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["llama-70b-draft"]
    assert plan["fits"] is True


def test_plan_exits_nonzero_when_it_does_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cr.yaml"
    path.write_text(TOO_BIG)
    assert main(["plan", str(path)]) == 1
    assert "fits" in capsys.readouterr().out
