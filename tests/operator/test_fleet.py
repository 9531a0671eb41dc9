"""A small fleet on the real API server and the real Prometheus binary (the `make test` size of `make bench`).

Six SpeculativeDeployments in Recommend mode share one Prometheus URL, with an evaluation interval no longer than
the operator's tick, so every round finds all six due:
- each round sends one query per metric for all six (Prometheus' own request counter agrees with the operator's),
  not one per metric per deployment;
- once settled, evaluations and periodic passes keep running (their counters move) and nothing is written: no
  resourceVersion of the resources or their children changes, and the operator counts no write;
- a restarted operator, with the six existing, resumes, evaluates and writes nothing either.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator
from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.waiting import wait_for
from specpilot.api.v1alpha1 import parse_spec
from specpilot.autotune.evaluate import effective_window
from specpilot.autotune.signals.promql import Scope, build_queries
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion
from tests.operator.conftest import StartOperator
from tests.operator.test_operator_cluster import apply, condition, get
from tests.operator.test_ownership_and_refusals import timer_ticks, wait_for_ticks

pytestmark = pytest.mark.cluster

FLEET = [f"fleet-{i}" for i in range(6)]


def fleet_member(name: str, prometheus_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxNumSeqs": 64},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
            "autotune": {
                "mode": "Recommend",
                "prometheus": {"url": prometheus_url},
                "interval": "1s",
                "window": "4s",
                "scrapeInterval": "1s",
            },
        },
    }


def metric_sum(operator: RunningOperator, prefix: str) -> float:
    return sum(v for k, v in operator.metrics().items() if k.startswith(prefix))


def prometheus_queries(prometheus: PrometheusServer) -> float:
    """Prometheus' own count of instant queries it answered (the query-counting side of the comparison)."""
    text = httpx.get(f"{prometheus.url}/metrics", timeout=5).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line
    )


def versions(cluster: KubeCluster, namespace: str) -> dict[str, str]:
    """resourceVersion of every fleet member and its Deployment and Service: any write by anyone changes one."""
    out: dict[str, str] = {}
    for name in FLEET:
        for kind in ("specdeploy", "deployment", "service"):
            obj = get(cluster, namespace, kind, name)
            assert obj is not None, f"{kind}/{name}"
            out[f"{kind}/{name}"] = str(obj["metadata"]["resourceVersion"])
    return out


def evaluated_everywhere(cluster: KubeCluster, namespace: str) -> bool:
    for name in FLEET:
        obj = get(cluster, namespace, "specdeploy", name) or {}
        if not (obj.get("status") or {}).get("recommendation") or condition(obj, "Ready").get("status") != "True":
            return False
    return True


def wait_for_evaluations(operator: RunningOperator, count: int) -> None:
    start = metric_sum(operator, "specpilot_decisions_total{")
    wait_for(
        f"{count} more evaluations",
        lambda: metric_sum(operator, "specpilot_decisions_total{") >= start + count,
        120,
        0.5,
    )


def test_a_fleet_costs_one_query_per_metric_per_round_and_no_idle_writes(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    start_operator: StartOperator,
    prometheus_factory: StartPrometheus,
) -> None:
    prometheus = prometheus_factory([])  # no vLLM pods: every measurement NoData, as for idle deployments
    operator = start_operator()
    for name in FLEET:
        apply(kube_cluster, kube_namespace, fleet_member(name, prometheus.url))
    wait_for("every member Ready and evaluated", lambda: evaluated_everywhere(kube_cluster, kube_namespace), 180)
    spec = parse_spec(fleet_member("x", prometheus.url)["spec"])
    names = metric_names_for(VllmVersion.parse(spec.engine.version))
    per_round = sum(1 for q in build_queries(names, Scope("a", "b", "c"), effective_window(spec.autotune)) if q.promql)

    # Grouping: rounds, deployments evaluated and queries sent, from the operator and from Prometheus itself.
    rounds_before = metric_sum(operator, "specpilot_round_deployments_count")
    evaluated_before = metric_sum(operator, "specpilot_round_deployments_sum")
    queries_before = metric_sum(operator, "specpilot_prometheus_queries_total")
    served_before = prometheus_queries(prometheus)
    wait_for_evaluations(operator, 3 * len(FLEET))
    rounds = metric_sum(operator, "specpilot_round_deployments_count") - rounds_before
    evaluated = metric_sum(operator, "specpilot_round_deployments_sum") - evaluated_before
    queries = metric_sum(operator, "specpilot_prometheus_queries_total") - queries_before
    served = prometheus_queries(prometheus) - served_before
    assert evaluated >= 3 * len(FLEET)
    assert evaluated / rounds > 1, "rounds evaluate several deployments together"
    assert queries == rounds * per_round, f"one query per metric per round ({per_round}), whatever the fleet size"
    assert served >= queries, "Prometheus answered (at least) what the operator counted"
    assert served <= queries + 2 * per_round, "and no per-deployment queries besides"

    # Idle: evaluations and periodic passes run, nothing is written.
    before = versions(kube_cluster, kube_namespace)
    writes = operator.writes()
    ticks = timer_ticks(operator)
    wait_for_evaluations(operator, 3 * len(FLEET))
    wait_for_ticks(operator, 2 * len(FLEET))
    assert timer_ticks(operator) > ticks
    skipped = sum(
        v for k, v in operator.metrics().items() if k.startswith("specpilot_reconciles_total{") and "unchanged" in k
    )
    assert skipped > 0, {k: v for k, v in operator.metrics().items() if "reconciles_total" in k}
    assert versions(kube_cluster, kube_namespace) == before, "an idle fleet is not written"
    assert operator.writes() == writes

    # Restart with the fleet in place: resume, evaluate, write nothing.
    operator.stop()
    restarted = start_operator()
    wait_for_evaluations(restarted, 2 * len(FLEET))
    wait_for_ticks(restarted, 2 * len(FLEET))
    assert versions(kube_cluster, kube_namespace) == before, "a restart writes nothing"
    assert restarted.writes() == 0
    # delete while an operator runs (nothing needs it, there is no finalizer; it keeps teardown like production's)
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "--all", "--timeout=120s", check=False)
