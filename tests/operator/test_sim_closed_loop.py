"""The batch-size schedule acting on something: the operator against simulated 8B/H100 pods on the local cluster.

The pod runner starts `specpilot simulate --preset llama8b-h100` from each pod's own command line (slowed down 10x, so a
few real requests per second are a batch of ~200 in simulated time; fixed seed), real Prometheus scrapes it, and the
operator's autotuner decides from those series. Load rising past the fitted crossover (K = 2 at low batch, K = 1 above
it) makes the operator install a batch-size schedule once, within budget, and the Deployment's command carries it. When
the load falls, the schedule moves K back by itself inside the engine: the pod's own counters show ~2 draft tokens per
draft again, and the operator keeps the installed schedule for a stated reason (a diurnal load wants one schedule
installed once, no restart per load change). The windows of the installed schedule must not read position 2's
acceptance low (vLLM divides it by every draft, K = 1 drafts included; autotune/signals/reach.py): a second, spurious
schedule must never be installed.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
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
from tests.operator.test_operator_cluster import apply, condition, get

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def sim_stack(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    start_operator: StartOperator,
    prometheus_factory: StartPrometheus,
    tmp_path: Path,
) -> Iterator[tuple[PodRunner, PrometheusServer]]:
    with simulated_pods_and_prometheus(kube_cluster, kube_namespace, prometheus_factory, tmp_path, seed=9) as both:
        start_operator()
        yield both


def simulated_deployment(prometheus_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "sim8b"},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0", "maxModelLen": 4096,
                       "maxNumSeqs": 256},
            "target": {"model": MODEL},
            "speculation": {"method": "draft_model", "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
                            "numSpeculativeTokens": 2},
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
            "autotune": {
                "mode": "Auto",
                "prometheus": {"url": prometheus_url, "timeout": "3s"},
                "interval": "5s",
                "window": "20s",
                "scrapeInterval": "1s",
                "minSamples": {"draftTokens": 100, "requests": 5},
                # one evaluation suffices: a fitted schedule's boundaries move a little with every window's
                # measured acceptance, and agreement compares exact schedules, so 2 agreeing ones rarely come
                "agreeingEvaluations": 1,
                "stabilization": "0s",
                # the drafter is healthy (r = 0.70/0.49/0.34); aggregate acceptance ~0.5 must not switch it off
                "acceptance": {"disableBelow": 0.3, "enableAbove": 0.4},
                "batchThreshold": {"tune": True, "min": 8, "max": 256},
                "budget": {"minInterval": "10s", "maxPerHour": 4, "maxPerDay": 8},
            },
        },
    }  # fmt: skip


class ClosedLoopLoad:
    """`concurrency` greedy completions always in flight to the deployment's ready server (settable while running)."""

    def __init__(self, runner: PodRunner, concurrency: int) -> None:
        self.runner = runner
        self.concurrency = concurrency
        self.sent = 0
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(210)]

    def _worker(self, index: int) -> None:
        body = json.dumps({"model": MODEL, "prompt": "x" * 400, "max_tokens": 64, "temperature": 0.0}).encode()
        while not self._stop.is_set():
            urls = list(self.runner.endpoints("sim8b").values())
            if index >= self.concurrency or not urls:
                time.sleep(0.5)
                continue
            request = urllib.request.Request(f"{urls[0]}/v1/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    resp.read()
                self.sent += 1
            except OSError:  # the pod is being replaced: try the next one
                self.errors += 1
                time.sleep(0.5)

    def __enter__(self) -> ClosedLoopLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=130)


def prometheus_value(prometheus: PrometheusServer, promql: str) -> float | None:
    """One instant query against the real Prometheus; None when the result is empty."""
    url = f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        result = json.load(resp)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def deployment_schedule(kube_cluster: KubeCluster, namespace: str) -> list[list[int]] | None:
    """The batch-size schedule in the Deployment's rendered command (the pods run exactly this), None without one."""
    deployment = get(kube_cluster, namespace, "deployment", "sim8b")
    assert deployment is not None
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    config = json.loads(command[command.index("--speculative-config") + 1])
    schedule = config.get("num_speculative_tokens_per_batch_size")
    return None if schedule is None else [list(r) for r in schedule]


DRAFTED_PER_DRAFT = (
    "sum(rate(vllm:spec_decode_num_draft_tokens_total[15s])) / sum(rate(vllm:spec_decode_num_drafts_total[15s]))"
)


def test_load_past_the_crossover_installs_a_schedule_once_and_the_engine_moves_k_back(
    kube_cluster: KubeCluster, kube_namespace: str, sim_stack: tuple[PodRunner, PrometheusServer]
) -> None:
    runner, prometheus = sim_stack
    apply(kube_cluster, kube_namespace, simulated_deployment(prometheus.url))
    wait_for("the simulated pod ready", lambda: runner.endpoints("sim8b") or runner.failures(), 300, 1)
    assert not runner.failures(), runner.failures()
    assert deployment_schedule(kube_cluster, kube_namespace) is None

    def status() -> dict[str, Any]:
        return dict((get(kube_cluster, kube_namespace, "specdeploy", "sim8b") or {}).get("status") or {})

    with ClosedLoopLoad(runner, concurrency=4) as load:

        def diagnose() -> str:
            obj = get(kube_cluster, kube_namespace, "specdeploy", "sim8b")
            return f"load sent {load.sent} ({load.errors} errors); {decision_line(obj)}"

        # low load: the fit runs on measured numbers and keeps the running config (static K = 2)
        low = wait_for_or_explain(
            diagnose,
            "a Keep at low load with the fitted schedule's prediction in evidence",
            lambda: (
                (s := status()).get("recommendation", {}).get("evidence", {}).get("threshold")
                and s["recommendation"]["action"] == "Keep"
                and s
            ),
            240,
            2,
        )
        assert not low.get("actuations")
        # load past the crossover (fitted at batch ~55-67): one ChangeBatchThreshold, within budget, the schedule in
        # the Deployment's command. Of 200 in flight a handful wait for admission at any moment (~7 beside ~187
        # running): scheduler churn, not a backlog, so backlog.py does not hold the restart.
        load.concurrency = 200
        high = wait_for_or_explain(diagnose, "a schedule installed", lambda: (s := status()).get("actuations") and s,
                                   300, 2)  # fmt: skip
        actuation = high["actuations"][-1]
        assert actuation["action"] == "ChangeBatchThreshold", actuation
        assert "install needs" in actuation["reason"], actuation["reason"]
        schedule = actuation["to"]["batchSchedule"]
        assert schedule[0][2] == 2
        assert schedule[-1][2] == 1  # K falls with the batch
        assert deployment_schedule(kube_cluster, kube_namespace) == schedule
        wait_for_or_explain(
            diagnose,
            "the new pod serving the schedule at high load (~1 draft token per draft)",
            lambda: (
                any("num_speculative_tokens_per_batch_size" in " ".join(p.server.args)
                    for p in list(runner.pods.values()) if p.ready)
                and (v := prometheus_value(prometheus, DRAFTED_PER_DRAFT)) is not None
                and v < 1.2
            ),
            120,
            1,
        )  # fmt: skip
        # load falls: the engine's table moves K back to 2 by itself; the operator keeps the schedule it installed
        load.concurrency = 4
        wait_for_or_explain(
            diagnose,
            "K back to 2 in the engine (~2 draft tokens per draft)",
            lambda: (v := prometheus_value(prometheus, DRAFTED_PER_DRAFT)) is not None and v > 1.95,
            60,
            1,
        )
        fell_at = status()["recommendation"]["at"]
        # a window wholly at the low load: 4 in flight run a batch of at most 4. A window that still holds a second of
        # the 200 reads a mean batch of ~13 and a token-weighted TPOT of the high load (13.6 ms beside the model's
        # 6.3 ms at batch 13), and the fit rightly refuses a model off by x2: CI caught the old bound (< 16) so
        # straddling the fall once; that refusal is not the keep this test is about
        kept = wait_for_or_explain(
            diagnose,
            "an evaluation of a whole low-load window keeping the installed schedule",
            lambda: (
                (s := status())["recommendation"]["at"] > fell_at
                and (s["recommendation"].get("evidence", {}).get("measurements", {}).get("batch_size", {})
                     .get("value", 1e9) < 4.5)
                and s
            ),
            90,
            1,
        )  # fmt: skip
        later = status()
    moves = [(a["at"], a["from"].get("batchSchedule"), a["to"].get("batchSchedule"), a["reason"][:200])
             for a in later["actuations"]]  # fmt: skip
    assert len(moves) == 1, moves
    # kept by the policy's own judgement (no gate: not the budget, not agreement), for a reason it states
    rec = kept["recommendation"]
    assert rec["action"] == "Keep", rec
    assert rec["gate"] == "", rec
    # a clear keep, not a coin flip at the install bar: the refit is the installed schedule or predicts well under 3%
    fit = rec["evidence"]["threshold"]
    assert "already installed" in fit["reason"] or fit.get("predictedGain", 1.0) < 0.015, fit["reason"]
    throttled = condition(get(kube_cluster, kube_namespace, "specdeploy", "sim8b"), "Throttled")
    assert throttled.get("reason") == "WithinBudget", throttled  # the install spent budget, never hit its limit
    assert deployment_schedule(kube_cluster, kube_namespace) == schedule
