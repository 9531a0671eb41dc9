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
from dataclasses import dataclass
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
EVALUATION_FAILED = "EvaluationFailed"


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


@dataclass(frozen=True)
class Malformed:
    """A status as a hand edit, a broken tool or another operator build could leave it (the CRD's schema lets it
    through), and what the operator must do with it: tell the owner with an event of `reason` naming `names`, or
    (`heals`) replace it with a well-formed one at the next reconcile or evaluation, telling the owner only if an
    evaluation met it first (then with an event naming `names`)."""

    name: str
    status: dict[str, Any]
    path: tuple[str, ...]  # where in status the malformed value is
    reason: str
    names: str
    heals: bool


MALFORMED = (
    Malformed("evaluatedat", {"observed": {"evaluatedAt": "yesterday"}}, ("observed", "evaluatedAt"), EVALUATION_FAILED,
              "status.observed.evaluatedAt", heals=False),
    Malformed("intent-schedule-pair", {"effective": {"intent": {"enabled": True, "batchSchedule": [[1, 64]]}}},
              ("effective", "intent", "batchSchedule"), EVALUATION_FAILED, "batchSchedule entry [1, 64]", heals=True),
    Malformed("effective-schedule-pair", {"effective": {"intent": None, "batchSchedule": [[1, 64]]}},
              ("effective", "batchSchedule"), EVALUATION_FAILED, "batchSchedule entry [1, 64]", heals=True),
    Malformed("rollout-started", {"effective": {"rolloutStarted": "yesterday", "rolloutCompleted": None}},
              ("effective", "rolloutStarted"), EVALUATION_FAILED, "rolloutStarted", heals=True),
    Malformed("autotune-selected-pair", {"autotune": {"version": 1, "selected": {"enabled": True,
                                                                                 "batchSchedule": [[1, 64]]}}},
              ("autotune", "selected"), "MalformedAutotuneStatus", "status.autotune is malformed", heals=True),
    Malformed("autotune-streak", {"autotune": {"version": 1, "streak": {"key": "k", "action": "Explode",
                                                                         "count": "many", "since": "never"}}},
              ("autotune", "streak"), "MalformedAutotuneStatus", "status.autotune is malformed", heals=True),
    Malformed("autotune-acceptance-seen", {"autotune": {"version": 1, "acceptanceSeen": {"intent": {"enabled": True},
                                                                                          "rate": "high"}}},
              ("autotune", "acceptanceSeen"), "MalformedAutotuneStatus", "status.autotune is malformed", heals=True),
)  # fmt: skip


def at(document: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def well_formed(cluster: KubeCluster, namespace: str, name: str, bad: Malformed) -> bool:
    """The malformed value is no longer in the stored status."""
    status = (get(cluster, namespace, "specdeploy", name) or {}).get("status") or {}
    return bool(at(status, bad.path) != at(bad.status, bad.path))


def is_told(cluster: KubeCluster, namespace: str, bad: Malformed) -> bool:
    return bad.reason in reasons_of(cluster, namespace, bad.name)


def test_a_malformed_status_marks_or_heals_its_object_and_the_fleet_keeps_evaluating(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    start_operator: StartOperator,
    prometheus_factory: StartPrometheus,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One object per malformed status, stored through the status subresource as the operator stores status, next
    to a good one; each bad one is told about or healed, and every object that can be is still evaluated."""
    prometheus = prometheus_factory([])
    operator = start_operator()
    names = ["good", *(bad.name for bad in MALFORMED)]
    for name in names:
        apply(kube_cluster, kube_namespace, fleet_member(name, prometheus.url))
    for name in names:
        wait_for(f"{name} evaluated", functools.partial(evaluated_at, kube_cluster, kube_namespace, name), 180)

    for bad in MALFORMED:
        patch_status(kube_cluster, kube_namespace, bad.name, bad.status)
    answers_reevaluate_tokens(kube_cluster, kube_namespace, "good")
    for bad in MALFORMED:
        if bad.heals:
            wait_for(
                f"{bad.name} healed", functools.partial(well_formed, kube_cluster, kube_namespace, bad.name, bad), 60
            )
            answers_reevaluate_tokens(kube_cluster, kube_namespace, bad.name)  # and evaluated again
        else:
            wait_for(f"{bad.name} told", functools.partial(is_told, kube_cluster, kube_namespace, bad), 60)
        told = reasons_of(kube_cluster, kube_namespace, bad.name)
        with capsys.disabled():
            print(f"\n[malformed status] {bad.name}: {json.dumps(bad.status)} -> "
                  + ("healed and evaluated again" if bad.heals else "not evaluated")
                  + (f"; told: {told[bad.reason][:160]}" if bad.reason in told else "; healed before any evaluation"),
                  end="")  # fmt: skip
        assert bad.heals or bad.reason in told, told
        assert bad.reason not in told or bad.names in told[bad.reason], told
    marked = condition(get(kube_cluster, kube_namespace, "specdeploy", "evaluatedat"), "MetricsAvailable")
    assert marked.get("reason") == EVALUATION_FAILED, marked
    assert "status.observed.evaluatedAt" in marked["message"], marked
    assert evaluated_at(kube_cluster, kube_namespace, "evaluatedat") == "yesterday", "it was not evaluated"
    assert metric_sum(operator, 'specpilot_object_failures_total{stage="due check"}') >= 1
    answers_reevaluate_tokens(kube_cluster, kube_namespace, "good", "finally")  # still, after all of them
    assert operator.process.poll() is None
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "--all", "--timeout=120s", check=False)


def reasons_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in events(cluster, namespace, name)}


def answers_reevaluate_tokens(kube_cluster: KubeCluster, namespace: str, name: str, prefix: str = "after") -> None:
    """Two reevaluate tokens in a row, each answered (status.lastHandledReevaluate): the object is still evaluated."""
    for token in (f"{prefix}-1", f"{prefix}-2"):
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
