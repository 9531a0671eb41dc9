"""Children recognised by owner UID, writes the API server refuses, and drift of small children (real API server).

- `chat` (with a canary replica, whose Deployment would be `chat-canary`) next to a CR named `chat-canary`: neither
  touches the other's objects, `chat` says OwnershipConflict once, and then nobody writes anything, tick after tick.
- A Deployment the API server refuses (a real ValidatingAdmissionPolicy denies it): ApplyFailed in status with the
  server's message, one Warning event, a write-error metric, no retry of the same object; after the cause is gone
  and the spec changes, the next apply goes through and the object becomes Ready.
- A Service edited behind the operator's back (selector changed, applied-hash untouched) is repaired by the timer.

Every "nothing was written" first proves that timer ticks ran (the operator's reconcile counter moved).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator
from e2e.waiting import wait_for
from tests.operator.conftest import StartOperator
from tests.operator.test_operator_cluster import apply, condition, events, get, speculative_deployment

pytestmark = pytest.mark.cluster


def timer_ticks(operator: RunningOperator) -> float:
    """Periodic passes that completed: reconciled ("ok") or found nothing changed ("unchanged")."""
    return sum(
        v
        for k, v in operator.metrics().items()
        if k.startswith("specpilot_reconciles_total{")
        and 'trigger="timer"' in k
        and ('result="ok"' in k or 'result="unchanged"' in k)
    )


def write_counts(operator: RunningOperator) -> dict[str, float]:
    return {k: v for k, v in operator.metrics().items() if k.startswith("specpilot_api_writes_total{")}


def wait_for_ticks(operator: RunningOperator, count: int) -> None:
    start = timer_ticks(operator)
    wait_for(f"{count} more timer ticks", lambda: timer_ticks(operator) >= start + count, 60, 0.5)


def test_chat_and_chat_canary_coexist_without_touching_each_other(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("chat-canary"))
    # The Deployment, not the Ready condition: status is written before the children are applied.
    theirs = wait_for(
        "chat-canary's Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "chat-canary")
    )
    apply(
        kube_cluster,
        kube_namespace,
        speculative_deployment("chat", autotune={"mode": "Recommend", "canary": {"enabled": True}}),
    )
    chat = wait_for(
        "chat reports the conflict",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "chat"))
            and condition(o, "Degraded").get("reason") == "OwnershipConflict"
            and o
        ),
        60,
    )
    degraded = condition(chat, "Degraded")
    assert "Deployment/chat-canary is controlled by SpeculativeDeployment/chat-canary" in degraded["message"]
    chat = wait_for(
        "chat's own replicas serve",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "chat"))
            and condition(o, "Ready")["status"] == "True"
            and o
        ),
        60,
    )
    assert condition(chat, "Degraded")["reason"] == "OwnershipConflict", "still reported while serving"

    # From here on: several timer ticks for both objects, and no write from either.
    wait_for_ticks(operator, 4)
    writes = operator.writes()
    by_kind = write_counts(operator)
    versions = {
        (kind, name): str((get(kube_cluster, kube_namespace, kind, name) or {})["metadata"]["resourceVersion"])
        for kind, name in (
            ("deployment", "chat"),
            ("deployment", "chat-canary"),
            ("specdeploy", "chat"),
            ("specdeploy", "chat-canary"),
        )
    }
    wait_for_ticks(operator, 8)
    assert operator.writes() == writes, f"{by_kind} -> {write_counts(operator)}"
    for (kind, name), version in versions.items():
        now = get(kube_cluster, kube_namespace, kind, name)
        assert now is not None
        assert str(now["metadata"]["resourceVersion"]) == version, f"{kind}/{name} was written"
    still_theirs = get(kube_cluster, kube_namespace, "deployment", "chat-canary")
    assert still_theirs is not None
    assert still_theirs["metadata"]["ownerReferences"] == theirs["metadata"]["ownerReferences"]
    assert still_theirs["spec"]["template"] == theirs["spec"]["template"]
    conflicts = [e for e in events(kube_cluster, kube_namespace, "chat") if e["reason"] == "OwnershipConflict"]
    assert len(conflicts) == 1, conflicts
    assert conflicts[0]["type"] == "Warning"

    # chat without a canary: chat-canary's Deployment is not chat's to delete
    apply(kube_cluster, kube_namespace, speculative_deployment("chat", autotune={"mode": "Recommend"}))
    wait_for(
        "chat settles without the conflict",
        lambda: condition(get(kube_cluster, kube_namespace, "specdeploy", "chat"), "Degraded").get("status") == "False",
        60,
    )
    wait_for_ticks(operator, 4)
    assert get(kube_cluster, kube_namespace, "deployment", "chat-canary") is not None


def deny_policy(namespace: str) -> list[dict[str, Any]]:
    """A real admission policy that refuses Deployments labelled for the SpeculativeDeployment `refused`."""
    name = f"deny-refused-{namespace}"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["deployments"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels) || !('specpilot.dev/deployment' in "
                        "object.metadata.labels) || object.metadata.labels['specpilot.dev/deployment'] != 'refused'",
                        "message": "deployments of 'refused' are not allowed in this namespace (test policy)",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        },
    ]


def test_a_refused_apply_is_reported_once_and_not_retried_until_the_spec_changes(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    policy = deny_policy(kube_namespace)
    for doc in policy:
        kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    try:
        probe = speculative_deployment("refused")
        # the policy takes a moment to be enforced: wait until a dry run of a matching Deployment is denied
        wait_for(
            "admission policy enforced",
            lambda: "not allowed" in deny_probe(kube_cluster, kube_namespace),
            30,
            1,
        )
        operator = start_operator()
        apply(kube_cluster, kube_namespace, probe)
        refused = wait_for(
            "ApplyFailed in status",
            lambda: (
                (o := get(kube_cluster, kube_namespace, "specdeploy", "refused"))
                and condition(o, "Ready").get("reason") == "ApplyFailed"
                and o
            ),
            60,
        )
        ready, degraded = condition(refused, "Ready"), condition(refused, "Degraded")
        assert ready["status"] == "False"
        assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
        assert "not allowed in this namespace (test policy)" in degraded["message"]
        assert get(kube_cluster, kube_namespace, "deployment", "refused") is None
        errors = {k: v for k, v in operator.metrics().items() if k.startswith("specpilot_api_write_errors_total{")}
        assert any('kind="Deployment"' in k and v >= 1 for k, v in errors.items()), errors

        # no hot loop: ticks run, the same Deployment is not sent again
        deployment_writes = operator.writes("Deployment")
        wait_for_ticks(operator, 6)
        assert operator.writes("Deployment") == deployment_writes
        warnings = [e for e in events(kube_cluster, kube_namespace, "refused") if e["reason"] == "ApplyFailed"]
        assert len(warnings) == 1, warnings
        assert warnings[0]["type"] == "Warning"
    finally:
        for doc in reversed(policy):
            kube_cluster.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")
    wait_for("admission policy gone", lambda: "not allowed" not in deny_probe(kube_cluster, kube_namespace), 30, 1)

    # The cause is gone and the spec changes: a new object is sent at once, and it goes through.
    apply(kube_cluster, kube_namespace, speculative_deployment("refused", replicas=1))
    wait_for(
        "Ready after the spec change",
        lambda: condition(get(kube_cluster, kube_namespace, "specdeploy", "refused"), "Ready").get("status") == "True",
        90,
    )
    healed = get(kube_cluster, kube_namespace, "specdeploy", "refused")
    assert condition(healed, "Degraded")["status"] == "False"
    assert get(kube_cluster, kube_namespace, "deployment", "refused") is not None


def deny_probe(kube_cluster: KubeCluster, namespace: str) -> str:
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe", "labels": {"specpilot.dev/deployment": "refused"}},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }
    proc = kube_cluster.kubectl(
        "-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(doc), check=False
    )
    return proc.stderr + proc.stdout


def test_an_edited_service_is_repaired_without_a_spec_edit(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    service = wait_for("Service", lambda: get(kube_cluster, kube_namespace, "service", "llama"))
    selector = service["spec"]["selector"]
    kube_cluster.kubectl(
        "-n", kube_namespace, "patch", "service", "llama", "--type=merge", "-p",
        json.dumps({"spec": {"selector": {"specpilot.dev/deployment": "someone-else"}}}),
    )  # fmt: skip
    repaired = wait_for(
        "selector repaired",
        lambda: (
            (s := get(kube_cluster, kube_namespace, "service", "llama")) and s["spec"]["selector"] == selector and s
        ),
        60,
    )
    assert repaired["metadata"]["ownerReferences"] == service["metadata"]["ownerReferences"]
    writes = operator.writes("Service")
    wait_for_ticks(operator, 4)
    assert operator.writes("Service") == writes, "repaired once, then left alone"
