"""An object that is being deleted, or is gone, gets no children again (issue 35: lifecycle).

Real API server (with its garbage collector), the operator as `specpilot run` with the chart's RBAC.
"""

from __future__ import annotations

import json
import signal
from typing import Any, cast

import kopf
import pytest
from kubernetes.config import kube_config

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator
from e2e.waiting import wait_for
from specpilot.shell import wiring
from specpilot.shell.memory import ObjectMemory
from specpilot.shell.reconciling import write_status
from tests.operator.conftest import StartOperator
from tests.operator.test_operator_cluster import apply, get, speculative_deployment

pytestmark = pytest.mark.cluster

HOLD = "test.specpilot.dev/hold"  # a finalizer of the test's own: keeps the object Terminating while we look
CHILDREN = ("deployment", "service", "pdb")


def reconciles(operator: RunningOperator, trigger: str) -> float:
    """Reconciles of this trigger the operator counted, whatever their result (proof that it handled the events)."""
    return sum(
        v
        for k, v in operator.metrics().items()
        if k.startswith("specpilot_reconciles_total{") and f'trigger="{trigger}"' in k
    )


def no_children(cluster: KubeCluster, namespace: str, name: str) -> bool:
    return all(get(cluster, namespace, kind, name) is None for kind in CHILDREN)


def test_foreground_deletion_never_brings_children_back(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    """`kubectl delete --cascade=foreground` (Argo CD's default): the garbage collector deletes the children first
    while the object waits with a deletionTimestamp. The operator sees the children's DELETED events and the object's
    own update, and must not re-create what the collector just removed."""
    operator = start_operator()
    doc = speculative_deployment("going")
    doc["metadata"]["finalizers"] = [HOLD]
    apply(kube_cluster, kube_namespace, doc)
    wait_for("children", lambda: all(get(kube_cluster, kube_namespace, k, "going") for k in CHILDREN), 60)
    child_events, applies = reconciles(operator, "child"), operator.writes("Deployment")

    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "going", "--cascade=foreground", "--wait=false")
    wait_for("children deleted by the collector", lambda: no_children(kube_cluster, kube_namespace, "going"), 60)
    wait_for("the operator handled the children's events", lambda: reconciles(operator, "child") > child_events, 30)
    timer = reconciles(operator, "timer")
    wait_for("three periodic passes", lambda: reconciles(operator, "timer") >= timer + 3, 60, 0.5)

    obj = get(kube_cluster, kube_namespace, "specdeploy", "going")
    assert obj is not None, "held by the test's finalizer"
    assert obj["metadata"].get("deletionTimestamp")
    assert no_children(kube_cluster, kube_namespace, "going"), "a child came back"
    assert operator.writes("Deployment") == applies, "the operator applied a Deployment for an object being deleted"
    release = json.dumps({"metadata": {"finalizers": None}})
    kube_cluster.kubectl("-n", kube_namespace, "patch", "specdeploy", "going", "--type=merge", "-p", release)
    wait_for("object gone", lambda: get(kube_cluster, kube_namespace, "specdeploy", "going") is None, 60)


def test_a_status_write_for_a_gone_object_is_not_a_success(
    kube_cluster: KubeCluster, kube_namespace: str, crd_installed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile applies children only after its status write succeeded; the API server's 404 (the object was
    deleted after the event that queued the reconcile, e.g. a child's DELETED event handled before the owner's) is
    no success. In-process, against the real API server, with the body of an object that existed moments ago."""
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kube_cluster.kubeconfig))
    monkeypatch.setattr(wiring, "_kube", None)  # the operator's API client, made for this cluster
    for name in ("here", "gone"):
        apply(kube_cluster, kube_namespace, speculative_deployment(name))
    bodies = {name: get(kube_cluster, kube_namespace, "specdeploy", name) for name in ("here", "gone")}
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "gone", "--timeout=30s")
    status: dict[str, Any] = {"observed": {"evaluatedAt": "2026-11-29T05:00:00Z"}}
    outcome = {}
    for name, body in bodies.items():
        memory = ObjectMemory()
        assert body is not None
        version = str(body["metadata"]["resourceVersion"])
        outcome[name] = (write_status(kopf.Body(cast(kopf.RawBody, body)), memory, {}, status, version), memory.written)
    assert outcome["here"][0] is True
    assert outcome["here"][1] is not None, "the write is remembered"
    assert outcome["gone"] == (False, None), "a 404 is not a write"


def test_background_deletion_racing_the_childrens_deleted_events_creates_nothing(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    """The object is deleted (background: it goes at once, the collector deletes its children after) while the
    operator is paused, so that on resuming it receives the object's DELETED event and its children's together, in
    any order: a child's event reconciles an owner that is gone, which must apply nothing."""
    operator = start_operator()
    for name in ("going", "staying"):
        apply(kube_cluster, kube_namespace, speculative_deployment(name))
    wait_for("children", lambda: all(get(kube_cluster, kube_namespace, k, "going") for k in CHILDREN), 60)
    wait_for("children", lambda: all(get(kube_cluster, kube_namespace, k, "staying") for k in CHILDREN), 60)
    writes = {kind: operator.writes(kind) for kind in ("Deployment", "Service", "PodDisruptionBudget")}
    operator.process.send_signal(signal.SIGSTOP)
    try:
        kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "going", "--timeout=30s")
        wait_for("children deleted by the collector", lambda: no_children(kube_cluster, kube_namespace, "going"), 60)
        # the other object loses its Service behind the operator's back: proof that child events are handled
        kube_cluster.kubectl("-n", kube_namespace, "delete", "service", "staying")
    finally:
        operator.process.send_signal(signal.SIGCONT)
    wait_for("the other object's Service repaired", lambda: get(kube_cluster, kube_namespace, "service", "staying"), 60)
    timer = reconciles(operator, "timer")
    wait_for("three periodic passes", lambda: reconciles(operator, "timer") >= timer + 3, 60, 0.5)
    assert no_children(kube_cluster, kube_namespace, "going"), "a child of the deleted object came back"
    after = {kind: operator.writes(kind) for kind in writes}
    assert after == {**writes, "Service": writes["Service"] + 1}, "only the other object's Service was applied"
