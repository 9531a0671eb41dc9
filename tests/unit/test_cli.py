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
        (
            BAD.replace("maxModelLen: 0", "maxModelLen: 4096")
            .replace('version: "0.33.0"', 'version: "0.32.0"')
            .replace("method: draft_model", "method: ngram"),
            ["bad: spec.engine.image: the tag 'v0.33.0' names vLLM 0.33.0 but spec.engine.version is 0.32.0"],
        ),
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


SMALL = """
apiVersion: specpilot.dev/v1alpha1
kind: SpeculativeDeployment
metadata: {name: chat%s}
spec:
  engine: {image: vllm/vllm-openai:v0.33.0, version: "0.33.0", maxModelLen: 4096}
  target: {model: meta-llama/Llama-3.1-8B-Instruct}
  speculation: {method: ngram, numSpeculativeTokens: 3}
"""
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chat}\n"


@pytest.mark.parametrize(
    ("first", "second", "between", "refusal"),
    [
        ("", "", CONFIG_MAP, "metadata.name: document 3 names the same object (chat) as document 1"),
        (
            ", namespace: ml",
            ", namespace: ml",
            "",
            "metadata.name: document 2 names the same object (chat in namespace ml) as document 1",
        ),
        ("", ", namespace: ml", "", None),  # another namespace: another object
        (", namespace: a", ", namespace: b", CONFIG_MAP, None),
    ],
)
def test_validate_refuses_two_documents_naming_one_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: str, second: str, between: str, refusal: str | None
) -> None:
    path = tmp_path / "crs.yaml"
    path.write_text("---\n".join(part for part in (SMALL % first, between, SMALL % second) if part))
    assert main(["validate", str(path)]) == (1 if refusal else 0)
    out = [line for line in capsys.readouterr().out.splitlines() if ": warning: " not in line]
    if refusal is None:
        assert out == [f"{path}: chat: valid"] * 2
    else:
        assert out == [f"{path}: chat: valid", f"{path}: chat: {refusal}; applying both keeps only the last"]


def test_validate_names_the_other_file_of_a_duplicate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(SMALL % "")
    (tmp_path / "b.yaml").write_text(CONFIG_MAP + "---\n" + SMALL % "")
    assert main(["validate", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 1
    out = capsys.readouterr().out
    assert (
        f"{tmp_path / 'b.yaml'}: chat: metadata.name: document 2 names the same object (chat) as document 1 of "
        f"{tmp_path / 'a.yaml'}; applying both keeps only the last" in out
    )


@pytest.mark.parametrize(
    "command",
    [["validate"], ["render"], ["plan"], ["plan", "-o", "json"], ["report", "--prometheus", "http://127.0.0.1:9"]],
)
def test_names_and_paths_with_control_characters_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A name or file name carrying a terminal escape sequence (or a bidirectional override) never reaches the
    terminal as one: every line that names them shows the characters escaped."""
    path = tmp_path / "cr\x1b]0;owned\x07.yaml"
    path.write_text((SMALL % "").replace("name: chat", 'name: "chat\\e[2J\\u202e"'))
    main([command[0], str(path), *command[1:]])
    out, err = capsys.readouterr()
    for stream in (out, err):
        assert not any(c in stream for c in "\x1b\x07\u202e"), stream
    shown = {
        "validate": ["cr\\x1b]0;owned\\x07.yaml: chat\\x1b[2J\\u202e: metadata.name"],
        "render": ["cr\\x1b]0;owned\\x07.yaml: chat\\x1b[2J\\u202e: metadata.name"],
        "plan": ["== chat\\x1b[2J\\u202e"] if len(command) == 1 else ['"chat\\u001b[2J\\u202e"'],
        "report": ["error: Prometheus http://127.0.0.1:9"],  # the name goes no further than the queries
    }[command[0]]
    for line in shown:
        assert line in out + err, out + err


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
    on_0171 = TWO_REPLICAS.replace('"0.33.0"', '"0.17.1"').replace("v0.33.0", "v0.17.1")  # image tag agrees
    path.write_text(on_0171)
    assert main(["validate", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "--shutdown-timeout" in line]
    assert len(warnings) == 1
    assert "warning: spec.engine.version:" in warnings[0]
    assert "aborts" in warnings[0]
    path.write_text(on_0171.replace("replicas: 2", "replicas: 2\n  rollout: {drainSeconds: 30}"))
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
