"""Rollouts that real vLLM refuses, on the local cluster where pods tell the truth (the pod runner reports readiness
from the server's /health and a crashed server as a restarting container).

- A CR whose rendered command line vLLM refuses (an unknown flag in engine.extraArgs) never becomes Ready, and after
  its rollout deadline says RolloutFailed (Ready=False, Degraded=True, one Warning event).
- In Auto mode, an autotune rollout that vLLM refuses (the probe turns speculation on with a draft vLLM cannot load)
  reverts to the last good config (speculation off), sets Degraded, halts automation (Paused=True, AutomationPaused)
  and the reverted pod serves again.
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


def broken_copy(good: Path, where: Path) -> Path:
    """A draft folder vLLM cannot load: the good draft's weights under a config that claims other shapes."""
    target = where / "broken-draft"
    shutil.copytree(good, target)
    config = json.loads((target / "config.json").read_text())
    config["hidden_size"] = int(config["hidden_size"]) * 2
    config["intermediate_size"] = int(config["intermediate_size"]) * 2
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_an_autotune_rollout_vllm_refuses_is_reverted_and_automation_halts(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    stack: tuple[PodRunner, PrometheusServer],
    graded_drafts: dict[str, Path],
    tmp_path: Path,
) -> None:
    runner, prometheus = stack
    runner.remap_draft(DRAFT, graded_drafts["poor"])
    doc = tiny_speculative_deployment("revert", draft=DRAFT, mode="Auto", prometheus_url=prometheus.url)
    doc["spec"]["autotune"]["probeInterval"] = "30s"
    # long enough for a good config to start on 2 busy cores (else the disable itself is reverted), short enough
    # for the refused probe to fail within the test
    doc["spec"]["autotune"]["rolloutDeadline"] = "150s"
    doc["spec"]["autotune"]["budget"] = {"minInterval": "20s", "maxPerHour": 10, "maxPerDay": 20}
    apply(kube_cluster, kube_namespace, doc)
    wait_for("vLLM server ready", lambda: len(runner.endpoints("revert")) == 1 or runner.failures(), 300, 2)

    def cr() -> dict[str, Any] | None:
        return get(kube_cluster, kube_namespace, "specdeploy", "revert")

    with Load(runner, "revert", 900) as load:

        def diagnose() -> str:
            return f"load sent {load.sent}; servers {runner.endpoints()}; {decision_line(cr())}"

        wait_for_or_explain(
            diagnose,
            "speculation disabled for the poor draft",
            lambda: (o := cr()) and o.get("status", {}).get("actuations") and o,
            420,
            2,
        )
        # the next probe will load a draft vLLM cannot load
        runner.remap_draft(DRAFT, broken_copy(graded_drafts["good"], tmp_path))
        halted = wait_for_or_explain(
            diagnose,
            "the refused probe reverted and automation halted",
            lambda: (
                (o := cr())
                and condition(o, "Paused").get("status") == "True"
                and (o.get("status") or {}).get("autotuneHalt")
                and o
            ),
            480,
            2,
        )
        actions = [a["action"] for a in halted["status"]["actuations"]]
        assert actions == ["DisableSpeculation", "EnableSpeculation"], (actions, halted["status"]["autotuneHalt"])
        assert condition(halted, "Paused")["reason"] == "AutomationPaused"
        assert "missed its deadline" in halted["status"]["autotuneHalt"]["reason"]
        served = wait_for_or_explain(
            diagnose,
            "the reverted config (speculation off) serving again",
            lambda: (
                (o := cr())
                and o["status"]["effective"]["speculation"] is False
                and condition(o, "Ready").get("status") == "True"
                and o
            ),
            300,
            2,
        )
    deployment = get(kube_cluster, kube_namespace, "deployment", "revert")
    assert deployment is not None
    assert "--speculative-config" not in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert served["status"]["effective"]["source"] == "autotune"
    reasons = [e["reason"] for e in events(kube_cluster, kube_namespace, "revert")]
    assert "RolloutFailed" in reasons, reasons
    assert [e["type"] for e in events(kube_cluster, kube_namespace, "revert") if e["reason"] == "RolloutFailed"] == [
        "Warning"
    ]
