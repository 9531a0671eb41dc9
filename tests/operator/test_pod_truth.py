"""Pods that tell the truth: on the local cluster, a pod the pod runner runs is Ready only while its real vLLM server
answers /health, and a server that exits shows as a restarting, crash-looping container, as a kubelet reports it.

Plain Deployments (no operator needed): what matters is the path pod -> runner -> real vLLM -> pod status ->
Deployment availability. A third check switches the draft a pod's command names (PodRunner.remap_draft) and restarts
the server: the measured acceptance follows, with the same pod spec.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from e2e.cluster.fixture import KubeCluster
from e2e.podrunner import MANAGED_SELECTOR, STATUS_OWNER, PodRunner
from e2e.stack import SWITCHABLE_DRAFT, TARGET_MODEL, VLLM_VERSION, graded_draft, model_map
from e2e.vllm.load import SpecCounters, parse_spec_counters, run_load
from e2e.vllm.venvs import VllmVenv
from e2e.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]


def deployment(name: str, command: list[str]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "specpilot", "specpilot.dev/deployment": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "vllm", "image": f"vllm/vllm-openai:v{VLLM_VERSION}", "command": command}]
                },
            },
        },
    }


@pytest.fixture
def core(kube_cluster: KubeCluster) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(kube_cluster.kubeconfig)))  # type: ignore[no-untyped-call]


@pytest.fixture
def runner(
    kube_cluster: KubeCluster, kube_namespace: str, vllm_venv: VllmVenv, tiny_models: dict[str, Path], tmp_path: Path
) -> Iterator[PodRunner]:
    pod_runner = PodRunner(
        kube_cluster.kubeconfig,
        kube_namespace,
        python=vllm_venv.python,
        model_map=model_map(tiny_models),
        default_model=tiny_models["tiny-llama"],
        default_draft=tiny_models["tiny-llama-draft-same"],
        targets_file=tmp_path / "targets.json",
        log_dir=tmp_path / "pods",
        period=0.5,
        restart_backoff_s=5.0,
    )
    with pod_runner:
        yield pod_runner


class Observer:
    """What the API server says about one Deployment's pod, polled; keeps every observation."""

    def __init__(self, core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, name: str) -> None:
        self.core, self.apps, self.namespace, self.name = core, apps, namespace, name
        self.seen: list[dict[str, Any]] = []

    def observe(self) -> dict[str, Any]:
        # The Deployment first: its available count follows the pod's Ready condition, so a pod listed after it is
        # at least as far along (listed before, it could read not Ready beside an available Deployment).
        dep: Any = self.apps.read_namespaced_deployment_status(self.name, self.namespace)
        pods: Any = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{MANAGED_SELECTOR},specpilot.dev/deployment={self.name}"
        )
        pod = next((p for p in pods.items if p.metadata.deletion_timestamp is None), None)
        seen: dict[str, Any] = {"available": dep.status.available_replicas or 0, "pod": None}
        if pod is not None and pod.status is not None:
            conditions = {c.type: c.status for c in pod.status.conditions or []}
            cs = (pod.status.container_statuses or [None])[0]
            seen["pod"] = {
                "name": pod.metadata.name,
                "owner": (pod.metadata.annotations or {}).get(STATUS_OWNER),
                "phase": pod.status.phase,
                "ready": conditions.get("Ready"),
                "restarts": cs.restart_count if cs else None,
                "running": bool(cs and cs.state and cs.state.running),
                "waiting": cs.state.waiting.reason if cs and cs.state and cs.state.waiting else None,
                "last_exit": (
                    cs.last_state.terminated.exit_code if cs and cs.last_state and cs.last_state.terminated else None
                ),
            }
        self.seen.append(seen)
        return seen

    def until(self, what: str, pred: Any, timeout: float) -> dict[str, Any]:
        return wait_for(what, lambda: (s := self.observe()) and pred(s) and s, timeout, 0.5)  # type: ignore[no-any-return]


def apply(kube_cluster: KubeCluster, namespace: str, doc: dict[str, Any]) -> None:
    kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(doc))


def spec_counters(url: str) -> SpecCounters:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        return parse_spec_counters(resp.read().decode())


def measured_acceptance(url: str) -> float:
    before = spec_counters(url)
    result = run_load(url, model=TARGET_MODEL, n=6, concurrency=2, temperature=0.0, max_tokens=32, time_limit_s=60)
    assert result.ok == 6, result
    delta = spec_counters(url) - before
    assert delta.draft_tokens > 0, delta
    assert delta.acceptance is not None
    return delta.acceptance


def test_refused_command_line_crash_loops_and_is_never_available(
    kube_cluster: KubeCluster, kube_namespace: str, runner: PodRunner, core: client.CoreV1Api
) -> None:
    apply(kube_cluster, kube_namespace, deployment("refused", ["vllm", "serve", TARGET_MODEL, "--no-such-flag"]))
    obs = Observer(core, client.AppsV1Api(core.api_client), kube_namespace, "refused")
    crash_looping = obs.until(
        "the refused server restarted and in CrashLoopBackOff",
        lambda s: s["pod"] and s["pod"]["restarts"] >= 1 and s["pod"]["waiting"] == "CrashLoopBackOff",
        240,
    )
    assert crash_looping["pod"]["owner"] == "podrunner"
    assert crash_looping["pod"]["phase"] == "Running"  # restartPolicy Always: the pod runs, its container does not
    assert crash_looping["pod"]["last_exit"] not in (None, 0), crash_looping
    # vLLM itself refused the command line (its own message in the runner's record of the exit)
    assert "unrecognized arguments: --no-such-flag" in runner.failures()[crash_looping["pod"]["name"]]
    with_pod = [s for s in obs.seen if s["pod"]]
    assert with_pod, "the pod was observed"
    assert all(s["pod"]["ready"] != "True" for s in with_pod), [s for s in with_pod if s["pod"]["ready"] == "True"]
    assert all(s["available"] == 0 for s in obs.seen)
    assert runner.endpoints("refused") == {}


def test_ready_only_after_health_and_draft_switch_changes_acceptance(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    runner: PodRunner,
    core: client.CoreV1Api,
    tiny_models: dict[str, Path],
) -> None:
    spec = {"method": "draft_model", "model": SWITCHABLE_DRAFT, "num_speculative_tokens": 3}
    command = ["vllm", "serve", TARGET_MODEL, "--speculative-config", json.dumps(spec), "--max-num-seqs", "4"]
    apply(kube_cluster, kube_namespace, deployment("served", command))
    obs = Observer(core, client.AppsV1Api(core.api_client), kube_namespace, "served")
    loading = obs.until("the server running, not yet Ready", lambda s: s["pod"] and s["pod"]["running"], 120)
    assert loading["pod"]["ready"] == "False", loading
    assert loading["available"] == 0, loading
    ready = obs.until("the pod Ready and the Deployment available", lambda s: s["available"] == 1, 420)
    pod = ready["pod"]["name"]
    url = runner.endpoints("served")[pod]
    with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
        assert resp.status == 200
    first_ready = next(i for i, s in enumerate(obs.seen) if s["pod"] and s["pod"]["ready"] == "True")
    assert any(s["pod"] and s["pod"]["ready"] == "False" for s in obs.seen[:first_ready]), "observed not-Ready first"
    good = measured_acceptance(url)

    # same pod spec, another draft behind the same name: restart the container, acceptance follows
    runner.remap_draft(SWITCHABLE_DRAFT, graded_draft(tiny_models, "poor"))
    runner.restart_server(pod)
    restarted = obs.until("the restarted container not Ready", lambda s: s["pod"]["restarts"] == 1, 60)
    assert restarted["pod"]["ready"] == "False", restarted
    assert restarted["available"] == 0, restarted
    obs.until("Ready again", lambda s: s["available"] == 1 and s["pod"]["ready"] == "True", 420)
    assert obs.seen[-1]["pod"]["name"] == pod
    t0 = time.monotonic()
    poor = measured_acceptance(runner.endpoints("served")[pod])
    print(f"acceptance through the same draft name: good {good:.3f} -> poor {poor:.3f} ({time.monotonic() - t0:.0f}s)")
    assert good >= 0.7, good
    assert poor <= 0.35, poor
