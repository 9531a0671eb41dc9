"""Progressive actuation on the local cluster: one pod first, analysed on the same traffic, promoted or rolled back.

The real operator runs a 3-replica Auto SpeculativeDeployment whose pods are simulated 8B/H100 engines started by the
pod runner from each pod's own command line (e2e/vllm/simulated.py); real Prometheus scrapes every pod, labelled with
its config hash. The load goes round robin to every ready pod (the Service's share, trial pod included) at
temperature 2, where the simulated draft model accepts ~0.36: speculation costs more than it saves.

1. The autotuner decides to switch speculation off. One pod changes first: the main Deployment keeps speculating on
   two pods and `<name>-canary` runs the plain config on one. After the analysis window the plain pod measures
   faster, so the trial is promoted: the main Deployment rolls to the plain config on all three pods and the trial
   pod goes.
2. After probeInterval, the probe tries speculation on again, on one pod. At the same traffic the speculating pod
   measures slower, so the trial is rolled back: the main Deployment never left the plain config.

The second test runs the same engines on the A100 node, a GPU no cost profile describes, saturated (max_num_seqs 4),
with a disableBelow above the drafter's acceptance: neither a cost model nor a measured comparison can decide, so
each disable is an experiment (status.trial.experiment), kept only when plain measures faster, and the probe finds
the way back once the traffic changes.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.podrunner import PodRunner
from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.waiting import wait_for
from tests.operator.conftest import StartOperator, simulated_pods_and_prometheus
from tests.operator.test_closed_loop import decision_line, wait_for_or_explain
from tests.operator.test_operator_cluster import apply, events, get

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]

NAME = "trial8b"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def sim_pods(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    start_operator: StartOperator,
    prometheus_factory: StartPrometheus,
    tmp_path: Path,
) -> Iterator[tuple[PodRunner, PrometheusServer]]:
    with simulated_pods_and_prometheus(kube_cluster, kube_namespace, prometheus_factory, tmp_path, seed=3) as both:
        start_operator()
        yield both


def three_replicas(prometheus_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 3,
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0", "maxModelLen": 4096,
                       "maxNumSeqs": 64},
            "target": {"model": MODEL},
            "speculation": {"method": "draft_model", "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
                            "numSpeculativeTokens": 4},
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
            "rollout": {"drainSeconds": 5},
            "autotune": {
                "mode": "Auto",
                "prometheus": {"url": prometheus_url, "timeout": "3s"},
                "interval": "5s",
                "window": "20s",
                "scrapeInterval": "1s",
                "minSamples": {"draftTokens": 100, "requests": 5},
                "agreeingEvaluations": 1,
                "stabilization": "0s",
                "probeInterval": "60s",
                "acceptance": {"disableBelow": 0.45, "enableAbove": 0.55},
                "latency": {"regressionTolerance": 0.05},
                "batchThreshold": {"tune": False},
                "budget": {"minInterval": "10s", "maxPerHour": 10, "maxPerDay": 20},
            },
        },
    }  # fmt: skip


class RoundRobinLoad:
    """`concurrency` completions always in flight, each sent to the next ready pod of the deployment `name`: every
    pod, the trial pod included, gets the same share of the same traffic, as behind the Service. `temperature` may
    change while it runs; each request takes the value current when it is sent."""

    def __init__(self, runner: PodRunner, concurrency: int, *, name: str = NAME, temperature: float = 2.0) -> None:
        self.runner = runner
        self.name = name
        self.temperature = temperature
        self.sent = 0
        self.errors = 0
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(concurrency)]

    def _worker(self) -> None:
        while not self._stop.is_set():
            urls = sorted(self.runner.endpoints(self.name).values())
            if not urls:
                time.sleep(0.5)
                continue
            url = urls[next(self._turn) % len(urls)]
            body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 64, "temperature": self.temperature}
            request = urllib.request.Request(
                f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    resp.read()
                self.sent += 1
            except OSError:  # a pod is being replaced: the next request goes to another
                self.errors += 1
                time.sleep(0.5)

    def __enter__(self) -> RoundRobinLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=130)


class Watched:
    """What the tests read of one SpeculativeDeployment on the cluster: the CR, its Deployments, its trial record."""

    def __init__(self, cluster: KubeCluster, namespace: str, name: str) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name

    def cr(self) -> dict[str, Any]:
        return get(self.cluster, self.namespace, "specdeploy", self.name) or {}

    def deployment(self, suffix: str = "") -> dict[str, Any] | None:
        return get(self.cluster, self.namespace, "deployment", self.name + suffix)

    def status(self) -> dict[str, Any]:
        return dict(self.cr().get("status") or {})

    def trial(self) -> dict[str, Any]:
        return dict(self.status().get("trial") or {})


def applied_with_three_pods(cluster: KubeCluster, namespace: str, runner: PodRunner, doc: dict[str, Any]) -> Watched:
    """Apply the CR and wait until its three simulated pods serve."""
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    wait_for("three simulated pods ready", lambda: len(runner.endpoints(name)) == 3 or runner.failures(), 300, 1)
    assert not runner.failures(), runner.failures()
    return Watched(cluster, namespace, name)


def speculates(deployment: dict[str, Any] | None) -> bool:
    assert deployment is not None
    return "--speculative-config" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]


@pytest.mark.timeout(900)
def test_one_pod_first_promoted_when_faster_rolled_back_when_slower(
    kube_cluster: KubeCluster, kube_namespace: str, sim_pods: tuple[PodRunner, PrometheusServer]
) -> None:
    runner, prometheus = sim_pods
    watched = applied_with_three_pods(kube_cluster, kube_namespace, runner, three_replicas(prometheus.url))
    cr, deployment, trial = watched.cr, watched.deployment, watched.trial

    speculating_hash = cr()["status"]["effective"]["configHash"]
    with RoundRobinLoad(runner, 12) as load:

        def diagnose() -> str:
            return f"load sent {load.sent} ({load.errors} errors); trial {trial().get('phase')}; {decision_line(cr())}"

        # 1. the disable goes to one pod first
        started = wait_for_or_explain(
            diagnose, "a trial started", lambda: trial().get("phase") == "Running" and trial(), 240, 1
        )
        assert started["intent"]["enabled"] is False
        assert started["incumbentConfigHash"] == speculating_hash
        main, canary = deployment(), deployment("-canary")
        assert main is not None
        assert canary is not None
        assert speculates(main), "two pods keep the incumbent config"
        assert main["spec"]["replicas"] == 2
        assert not speculates(canary), "one pod runs the trial config"
        assert canary["spec"]["replicas"] == 1
        promoted = wait_for_or_explain(diagnose, "the trial promoted", lambda: trial().get("phase") != "Running"
                                       and trial(), 180, 1)  # fmt: skip
        assert promoted["phase"] == "Promoted", promoted
        assert promoted["outcome"] == "Successful", promoted
        assert promoted["speedup"] > 1, promoted
        print(f"\npromoted: {promoted['reason']}")
        wait_for_or_explain(
            diagnose,
            "every pod on the plain config, the trial pod gone",
            lambda: (
                (d := deployment()) is not None
                and not speculates(d)
                and d["spec"]["replicas"] == 3
                and deployment("-canary") is None
            ),
            60,
            1,
        )
        plain_hash = promoted["configHash"]

        # 2. the probe tries speculation on again, on one pod; it is slower on this traffic: rolled back
        wait_for_or_explain(diagnose, "the probe's trial started", lambda: trial().get("configHash") != plain_hash
                            and trial().get("phase") == "Running", 240, 1)  # fmt: skip
        assert not speculates(deployment()), "the incumbents stay plain during the trial"
        rolled = wait_for_or_explain(diagnose, "the probe's trial ended", lambda: trial().get("phase") != "Running"
                                     and trial(), 180, 1)  # fmt: skip
    assert rolled["phase"] == "RolledBack", rolled
    assert rolled["outcome"] == "Failed", rolled
    assert rolled["speedup"] < 1, rolled
    print(f"rolled back: {rolled['reason']}")
    wait_for("the trial pod gone", lambda: deployment("-canary") is None, 60, 1)
    final = deployment()
    assert final is not None
    assert not speculates(final)
    assert final["spec"]["replicas"] == 3
    assert cr()["status"]["effective"]["configHash"] == plain_hash
    reasons = [e["reason"] for e in events(kube_cluster, kube_namespace, NAME)]
    assert {"TrialStarted", "TrialPromoted", "TrialRolledBack"} <= set(reasons), reasons
    print(kube_cluster.kubectl("-n", kube_namespace, "get", "specdeploy", NAME, "-o", "wide").stdout)


EXPERIMENT = "experiment8b"


def runs(deployment: dict[str, Any] | None, *, speculating: bool, replicas: int) -> bool:
    """Whether the Deployment exists with this many replicas, speculating or not."""
    if deployment is None:
        return False
    return speculates(deployment) is speculating and deployment["spec"]["replicas"] == replicas


def unprofiled_saturated(prometheus_url: str) -> dict[str, Any]:
    """The 3-replica CR on the A100 node, a GPU no cost profile was calibrated on (so no cost model is usable before
    the deployment's own windows fit one), with max_num_seqs 4 so that the load keeps requests waiting, and a
    disableBelow above this drafter's acceptance at temperature 0 (~0.44). The TTFT deadline is the SLO the backlog
    gate prices a restart with: the queue is longer than can start within it, so a restart that does not shorten
    the queue drops only the work its drain cannot finish."""
    doc = three_replicas(prometheus_url)
    doc["metadata"]["name"] = EXPERIMENT
    doc["spec"]["engine"]["maxNumSeqs"] = 4
    doc["spec"]["resources"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    doc["spec"]["autotune"]["acceptance"] = {"disableBelow": 0.5, "enableAbove": 0.6}
    doc["spec"]["autotune"]["latency"]["ttftDeadline"] = "1s"
    return doc


@pytest.mark.timeout(1200)
def test_experiment_on_an_unprofiled_gpu_keeps_only_a_measured_gain_and_the_probe_finds_the_way_back(
    kube_cluster: KubeCluster, kube_namespace: str, sim_pods: tuple[PodRunner, PrometheusServer]
) -> None:
    """Acceptance below disableBelow on a saturated engine, with neither a usable cost model nor a measured speed
    comparison: the only action is an experiment, plain on one pod beside the speculating ones.

    1. Temperature 0: the draft model (K 4) is ~13% faster than plain here despite its acceptance under disableBelow.
       The experiment's plain pod measures slower, so it rolls back and every pod keeps speculating.
    2. Temperature 2: speculation is ~1.5x slower. After probeInterval the experiment runs again and is promoted.
    3. Temperature 0 again: the probe puts speculation back on one pod; it is not slower, so it is promoted: the way
       back after a promoted experiment.
    """
    runner, prometheus = sim_pods
    watched = applied_with_three_pods(kube_cluster, kube_namespace, runner, unprofiled_saturated(prometheus.url))
    cr, deployment, trial = watched.cr, watched.deployment, watched.trial

    nodes = {p["spec"].get("nodeName") for p in kube_cluster.kubectl_json("-n", kube_namespace, "get", "pods")["items"]}
    assert nodes == {"kwok-gpu-4"}, nodes
    speculating_hash = cr()["status"]["effective"]["configHash"]
    with RoundRobinLoad(runner, 24, name=EXPERIMENT, temperature=0.0) as load:

        def diagnose() -> str:
            return f"load sent {load.sent} ({load.errors} errors); trial {trial().get('phase')}; {decision_line(cr())}"

        def next_trial(what: str, previous: str | None) -> Any:
            return wait_for_or_explain(diagnose, what, lambda: trial().get("phase") == "Running"
                                       and trial().get("startedAt") != previous and trial(), 240, 1)  # fmt: skip

        def ended(what: str) -> Any:
            return wait_for_or_explain(diagnose, what, lambda: trial().get("phase") != "Running" and trial(), 180, 1)

        # 1. an experiment, rolled back: plain is slower than this drafter at temperature 0
        first = next_trial("the first experiment started", None)
        assert first["experiment"] is True, first
        assert first["intent"]["enabled"] is False, first
        assert first["incumbentTpotBeforeMs"] > 0, first
        assert first["trafficBefore"]["configHash"] == speculating_hash, first  # what that figure was measured on
        posted = wait_for("the TrialStarted event", lambda: [e["message"] for e in events(
            kube_cluster, kube_namespace, EXPERIMENT) if e["reason"] == "TrialStarted"], 30, 1)  # fmt: skip
        assert posted[0].startswith("one pod first: experiment:"), posted
        assert runs(deployment(), speculating=True, replicas=2), "two pods keep the incumbent config"
        assert runs(deployment("-canary"), speculating=False, replicas=1), "one pod runs plain"
        rolled = ended("the first experiment ended")
        assert rolled["phase"] == "RolledBack", rolled
        assert rolled["speedup"] < 1, rolled
        # the traffic it ended on, stored through the API server's schema: a shift from it re-opens the experiment
        assert rolled["traffic"]["configHash"] == speculating_hash, rolled
        assert 0 < rolled["traffic"]["acceptanceRate"] < 1, rolled
        print(f"\nexperiment rolled back: {rolled['reason']}")
        wait_for("the trial pod gone", lambda: deployment("-canary") is None, 60, 1)
        assert runs(deployment(), speculating=True, replicas=3)
        assert cr()["status"]["effective"]["configHash"] == speculating_hash

        # 2. the experiment again after probeInterval, at temperature 2: plain is faster, promoted
        load.temperature = 2.0
        second = next_trial("the second experiment started", first["startedAt"])
        assert second["experiment"] is True, second
        promoted = ended("the second experiment ended")
        assert promoted["phase"] == "Promoted", promoted
        assert promoted["speedup"] > 1.05, promoted
        print(f"experiment promoted: {promoted['reason']}")
        plain_hash = promoted["configHash"]
        wait_for_or_explain(diagnose, "every pod plain, the trial pod gone", lambda: deployment("-canary")
                            is None and runs(deployment(), speculating=False, replicas=3), 120, 1)  # fmt: skip

        # 3. the way back: at temperature 0 the probe puts speculation on one pod, measures it no slower, promotes it
        load.temperature = 0.0
        probe = next_trial("the probe's trial started", second["startedAt"])
        assert probe["intent"]["enabled"] is True, probe
        assert not probe.get("experiment"), probe
        back = ended("the probe's trial ended")
        assert back["phase"] == "Promoted", back
        print(f"probe promoted: {back['reason']}")
        wait_for_or_explain(diagnose, "every pod speculating", lambda: runs(deployment(), speculating=True,
                            replicas=3), 120, 1)  # fmt: skip
    assert cr()["status"]["effective"]["configHash"] != plain_hash
    reasons = [e["reason"] for e in events(kube_cluster, kube_namespace, EXPERIMENT)]
    assert reasons.count("TrialStarted") >= 3, reasons
    assert {"TrialPromoted", "TrialRolledBack"} <= set(reasons), reasons
