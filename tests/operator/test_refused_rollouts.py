"""Rollouts that real vLLM refuses, on the local cluster where pods tell the truth (the pod runner reports readiness
from the server's /health and a crashed server as a restarting container).

- A CR whose rendered command line vLLM refuses (an unknown flag in engine.extraArgs) never becomes Ready, and after
  its rollout deadline says RolloutFailed (Ready=False, Degraded=True, one Warning event).
- In Auto mode, an autotune rollout that vLLM refuses (the probe re-enables speculation, but the draft can no longer
  be loaded) is reverted to the last good config after its deadline: Degraded=RolloutFailed, automation halted
  (Paused=True), the plain pod serving again, and nothing more is tried until a human resumes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.podrunner import PodRunner
from e2e.prometheus.fixture import PrometheusServer
from e2e.stack import tiny_speculative_deployment
from e2e.waiting import wait_for
from tests.operator.test_closed_loop import Load, decision_line, wait_for_or_explain
from tests.operator.test_operator_cluster import apply, condition, events, get

pytestmark = [pytest.mark.cluster, pytest.mark.vllm, pytest.mark.prometheus]

DRAFT = "specpilot-demo/chat-draft"


def test_a_command_line_vllm_refuses_never_becomes_ready(
    kube_cluster: KubeCluster, kube_namespace: str, stack: tuple[PodRunner, PrometheusServer]
) -> None:
    runner, prometheus = stack
    doc = tiny_speculative_deployment("refused-flag", draft=DRAFT, mode="Recommend", prometheus_url=prometheus.url)
    doc["spec"]["engine"]["extraArgs"] = ["--no-such-vllm-flag"]
    doc["spec"]["autotune"]["rolloutDeadline"] = "1m"
    apply(kube_cluster, kube_namespace, doc)
    seen_not_ready: list[str] = []

    def failed() -> dict[str, Any] | None:
        obj = get(kube_cluster, kube_namespace, "specdeploy", "refused-flag")
        ready = condition(obj, "Ready")
        seen_not_ready.append(str(ready.get("status")))
        return obj if ready.get("reason") == "RolloutFailed" else None

    obj = wait_for("RolloutFailed after the rollout deadline", failed, 240, 2)
    assert "True" not in seen_not_ready, "never Ready on the way"
    assert condition(obj, "Ready")["status"] == "False"
    assert (condition(obj, "Degraded")["status"], condition(obj, "Degraded")["reason"]) == ("True", "RolloutFailed")
    deployment = get(kube_cluster, kube_namespace, "deployment", "refused-flag")
    assert deployment is not None
    assert (deployment.get("status") or {}).get("availableReplicas", 0) == 0
    pods = kube_cluster.kubectl_json("-n", kube_namespace, "get", "pods", "-l", "specpilot.dev/deployment=refused-flag")
    restarts = [cs.get("restartCount", 0) for p in pods["items"] for cs in p["status"].get("containerStatuses", [])]
    assert restarts, pods
    assert max(restarts) >= 1, "the refused server restarts like a crash-looping container"
    warnings = [e for e in events(kube_cluster, kube_namespace, "refused-flag") if e["reason"] == "RolloutFailed"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["type"] == "Warning"
    assert runner.endpoints("refused-flag") == {}


def _unloadable_copy(draft: Path, into: Path) -> Path:
    """A model folder vLLM refuses at startup: the draft's config and tokenizer, but no weights."""
    into.mkdir()
    for item in draft.iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".bin", ".safetensors.index.json")):
            shutil.copy(item, into / item.name)
    return into


def test_an_autotune_rollout_vllm_refuses_is_reverted_and_automation_halts(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    stack: tuple[PodRunner, PrometheusServer],
    graded_drafts: dict[str, Path],
    tiny_models: dict[str, Path],
    tmp_path: Path,
) -> None:
    runner, prometheus = stack
    name = "refused-probe"
    # a random draft: ~1.0 tokens per step, which no hardware makes faster, so the disable needs no cost model
    runner.remap_draft(DRAFT, tiny_models["tiny-llama-draft"])
    doc = tiny_speculative_deployment(name, draft=DRAFT, mode="Auto", prometheus_url=prometheus.url)
    doc["spec"]["autotune"]["probeInterval"] = "30s"
    # long enough for a plain vLLM CPU server to load on a busy 2-core machine (60-120 s), so only the refused
    # rollout misses it
    doc["spec"]["autotune"]["rolloutDeadline"] = "3m"
    doc["spec"]["autotune"]["budget"] = {"minInterval": "10s", "maxPerHour": 10, "maxPerDay": 20}
    apply(kube_cluster, kube_namespace, doc)
    wait_for("vLLM server ready", lambda: len(runner.endpoints(name)) == 1 or runner.failures(), 300, 2)
    assert not runner.failures(), runner.failures()

    def cr() -> dict[str, Any]:
        found = get(kube_cluster, kube_namespace, "specdeploy", name)
        assert found is not None
        return found

    def deployment() -> dict[str, Any]:
        found = get(kube_cluster, kube_namespace, "deployment", name)
        assert found is not None
        return found

    def command() -> list[str]:
        return list(deployment()["spec"]["template"]["spec"]["containers"][0]["command"])

    def actuations() -> list[dict[str, Any]]:
        return list((cr().get("status") or {}).get("actuations") or [])

    with Load(runner, name, 1500) as load:

        def diagnose() -> str:
            return f"load sent {load.sent}; servers {runner.endpoints()}; {decision_line(cr())}"

        # the random draft's acceptance turns speculation off (a plain pod vLLM serves)
        wait_for_or_explain(diagnose, "speculation disabled", lambda: len(actuations()) >= 1, 420, 2)
        assert actuations()[0]["action"] == "DisableSpeculation"
        wait_for("the plain pod Ready", lambda: "--speculative-config" not in command() and runner.endpoints(name), 300)
        command_off = command()
        # the draft can no longer be loaded: the probe's re-enable rollout crash-loops
        runner.remap_draft(DRAFT, _unloadable_copy(graded_drafts["poor"], tmp_path / "unloadable-draft"))
        wait_for_or_explain(diagnose, "the probe re-enabled speculation", lambda: len(actuations()) >= 2, 300, 2)
        probe = actuations()[1]
        assert (probe["action"], probe["probe"]) == ("EnableSpeculation", True), probe
        spec_config = json.loads(command()[command().index("--speculative-config") + 1])
        assert spec_config["num_speculative_tokens"] == 3, "re-enabled with K"
        halted = wait_for_or_explain(
            diagnose,
            "the refused rollout reverted and automation halted",
            lambda: (o := cr()) and condition(o, "Paused").get("status") == "True" and command() == command_off and o,
            420,
            2,
        )
    assert "missed its deadline" in halted["status"]["autotuneHalt"]["reason"]
    assert condition(halted, "Paused")["reason"] == "AutomationPaused"
    pods = kube_cluster.kubectl_json("-n", kube_namespace, "get", "pods", "-l", f"specpilot.dev/deployment={name}")
    restarts = [cs.get("restartCount", 0) for p in pods["items"] for cs in p["status"].get("containerStatuses", [])]
    print(f"restarts seen on the refused pod: {restarts}")
    # The reverted plain config is served again; nothing more is tried while halted.
    wait_for("the reverted plain pod Ready", lambda: runner.endpoints(name), 300, 2)
    settled = wait_for(
        "Ready again on the reverted config", lambda: condition(o := cr(), "Ready").get("status") == "True" and o, 120
    )
    assert len(actuations()) == 2, actuations()
    warnings = [e for e in events(kube_cluster, kube_namespace, name) if e["reason"] == "RolloutFailed"]
    for e in warnings:
        print(f"RolloutFailed {e['type']} x{e.get('count') or 1} at {e.get('eventTime') or e.get('lastTimestamp')}:")
        print(f"  {e['message']}")
    assert {e["type"] for e in warnings} == {"Warning"}, warnings
    reverts = [e for e in warnings if "missed its deadline" in e["message"]]
    assert len(reverts) == 1, warnings  # one revert, told once
    assert any("did not become available before the progress deadline" in e["message"] for e in warnings), warnings
    print(kube_cluster.kubectl("-n", kube_namespace, "get", "specdeploy", name, "-o", "wide").stdout)
    print(f"conditions: {[(c['type'], c['status'], c['reason']) for c in settled['status']['conditions']]}")
    print(
        kube_cluster.kubectl(
            "-n", kube_namespace, "get", "events", "--field-selector", f"involvedObject.name={name}",
            "--sort-by=.lastTimestamp",
        ).stdout
    )  # fmt: skip
