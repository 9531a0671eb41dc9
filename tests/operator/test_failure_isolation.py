"""One object's failure stays that object's: the rest of the fleet keeps its schedule (issue 35).

Real API server, real Prometheus binary (no vLLM pods: every measurement NoData), the operator as `specpilot run`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.prometheus.fixture import StartPrometheus
from e2e.waiting import wait_for
from specpilot.api.v1alpha1 import ANNOTATION_REEVALUATE as REEVALUATE
from tests.operator.conftest import StartOperator
from tests.operator.test_fleet import fleet_member, metric_sum
from tests.operator.test_operator_cluster import apply, condition, events, get

pytestmark = pytest.mark.cluster


def evaluated_at(cluster: KubeCluster, namespace: str, name: str) -> str | None:
    obj = get(cluster, namespace, "specdeploy", name) or {}
    value = ((obj.get("status") or {}).get("observed") or {}).get("evaluatedAt")
    return str(value) if value else None


def handled(cluster: KubeCluster, namespace: str, name: str) -> str | None:
    obj = get(cluster, namespace, "specdeploy", name) or {}
    value = (obj.get("status") or {}).get("lastHandledReevaluate")
    return str(value) if value else None


def handled_is(cluster: KubeCluster, namespace: str, name: str, token: str) -> bool:
    return handled(cluster, namespace, name) == token


def patch_status(cluster: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Write status as an admin (or a broken tool) could: a merge patch of the status subresource."""
    patch = json.dumps({"status": status})
    cluster.kubectl("-n", namespace, "patch", "specdeploy", name, "--subresource=status", "--type=merge", "-p", patch)


def test_a_malformed_status_marks_its_object_and_the_fleet_keeps_evaluating(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator, prometheus_factory: StartPrometheus
) -> None:
    prometheus = prometheus_factory([])
    operator = start_operator()
    for name in ("good", "bad"):
        apply(kube_cluster, kube_namespace, fleet_member(name, prometheus.url))
    for name in ("good", "bad"):
        wait_for(f"{name} evaluated", functools.partial(evaluated_at, kube_cluster, kube_namespace, name), 180)

    patch_status(kube_cluster, kube_namespace, "bad", {"observed": {"evaluatedAt": "yesterday"}})
    # The other object is still evaluated while the bad one is due every round: each new reevaluate token is
    # answered (status.lastHandledReevaluate).
    answers_reevaluate_tokens(kube_cluster, kube_namespace, "good")
    wait_for(
        "the bad object marked",
        lambda: (
            condition(get(kube_cluster, kube_namespace, "specdeploy", "bad"), "MetricsAvailable").get("reason")
            == "EvaluationFailed"
        ),
        60,
    )
    marked = condition(get(kube_cluster, kube_namespace, "specdeploy", "bad"), "MetricsAvailable")
    assert "status.observed.evaluatedAt" in marked["message"], marked
    assert "yesterday" in marked["message"], marked
    reasons = {e["reason"]: e["message"] for e in events(kube_cluster, kube_namespace, "bad")}
    assert "status.observed.evaluatedAt" in reasons.get("EvaluationFailed", ""), reasons
    assert metric_sum(operator, 'specpilot_object_failures_total{stage="due check"}') >= 1

    assert evaluated_at(kube_cluster, kube_namespace, "bad") == "yesterday", "the bad one was not evaluated"
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "--all", "--timeout=120s", check=False)


def answers_reevaluate_tokens(kube_cluster: KubeCluster, namespace: str, name: str) -> None:
    """Two reevaluate tokens in a row, each answered (status.lastHandledReevaluate): the object is still evaluated."""
    for token in ("after-1", "after-2"):
        kube_cluster.kubectl("-n", namespace, "annotate", "--overwrite", "specdeploy", name, f"{REEVALUATE}={token}")
        wait_for(
            f"{name} evaluated for {token}",
            functools.partial(handled_is, kube_cluster, namespace, name, token),
            60,
        )


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A Prometheus URL whose server accepts connections and never answers (a hung or hostile server)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()


def test_a_silent_prometheus_costs_only_its_own_objects(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator, prometheus_factory: StartPrometheus
) -> None:
    """The silent server's object comes first in every round; the other connection's object is still evaluated in
    each round, and the silent one is marked when the round's deadline passes."""
    prometheus = prometheus_factory([])
    operator = start_operator(env={"SPECPILOT_ROUND_DEADLINE_SECONDS": "3"})
    with silent_server() as silent_url:
        slow = fleet_member("slow", silent_url)
        slow["spec"]["autotune"]["prometheus"]["timeout"] = "60s"  # per query, ~20 queries: the deadline must cut it
        apply(kube_cluster, kube_namespace, slow)
        wait_for("the slow object measured", lambda: metric_sum(operator, "specpilot_reconciles_total{") > 0, 60)
        apply(kube_cluster, kube_namespace, fleet_member("good", prometheus.url))
        wait_for("good evaluated", functools.partial(evaluated_at, kube_cluster, kube_namespace, "good"), 120)
        answers_reevaluate_tokens(kube_cluster, kube_namespace, "good")
        marked = condition(get(kube_cluster, kube_namespace, "specdeploy", "slow"), "MetricsAvailable")
        assert marked.get("reason") == "EvaluationFailed", marked
        assert "Prometheus did not answer" in marked["message"], marked  # within the deadline, or since a round before
        assert metric_sum(operator, 'specpilot_object_failures_total{stage="measurement"}') >= 1
        kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "--all", "--timeout=120s", check=False)
