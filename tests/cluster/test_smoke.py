"""Smoke tests proving the local control plane behaves like a real cluster.

Each test exercises one piece the operator depends on and that only a real API
server (plus controller-manager, scheduler and kwok) gets right: CRD CEL rules,
server-side apply, scheduling of extended resources, garbage collection, RBAC,
namespace finalisation, version stamping and helm rendering.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from e2e.cluster.fixture import KubeCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SMOKE_CHART = Path(__file__).resolve().parent / "testdata" / "smoke-chart"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
CRD_NAME = "widgets.smoke.specpilot.test"
CEL_MESSAGE = "minReplicas must not exceed maxReplicas"


def pinned_k8s_version() -> str:
    """Return the Kubernetes version the toolchain builds (K8S_VERSION or its pin)."""
    text = (REPO / "e2e" / "toolchain" / "versions.sh").read_text()
    match = re.search(r"K8S_VERSION=\$\{K8S_VERSION:-([0-9.]+)\}", text)
    assert match is not None, "K8S_VERSION pin not found in versions.sh"
    return os.environ.get("K8S_VERSION", match[1])


def apply(cluster: KubeCluster, namespace: str | None, *objects: dict[str, Any], server_side: bool = False) -> None:
    """Apply objects given as dicts."""
    args = ["apply", "-f", "-"]
    if namespace is not None:
        args += ["-n", namespace]
    if server_side:
        args += ["--server-side"]
    cluster.kubectl(*args, stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def wait_until_gone(cluster: KubeCluster, namespace: str, *refs: str, timeout: float = 60) -> None:
    """Wait until every ``kind/name`` in refs is NotFound."""
    deadline = time.monotonic() + timeout
    while True:
        proc = cluster.kubectl("-n", namespace, "get", *refs, "--ignore-not-found", "-o", "name", check=False)
        if proc.returncode == 0 and not proc.stdout.strip():
            return
        assert time.monotonic() < deadline, f"still present after {timeout}s: {proc.stdout}{proc.stderr}"
        time.sleep(0.5)


def gpu_deployment(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    """Build a Deployment whose pods each request ``gpus`` nvidia.com/gpu on H100 nodes."""
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": GPU_PRODUCT},
                    "containers": [
                        {
                            "name": "server",
                            "image": "registry.invalid/vllm:test",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture
def widget_crd(kube_cluster: KubeCluster) -> Iterator[str]:
    """Install a namespaced CRD whose spec carries a CEL rule; remove it afterwards."""
    spec_schema = {
        "type": "object",
        "required": ["minReplicas", "maxReplicas"],
        "properties": {
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer", "minimum": 0},
        },
        "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.maxReplicas", "message": CEL_MESSAGE}],
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "smoke.specpilot.test",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema},
                        }
                    },
                }
            ],
        },
    }
    apply(kube_cluster, None, crd)
    kube_cluster.wait_established(CRD_NAME)
    try:
        yield CRD_NAME
    finally:
        kube_cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false", check=False)


def widget(name: str, min_replicas: int, max_replicas: int) -> dict[str, Any]:
    """Build a Widget custom resource."""
    return {
        "apiVersion": "smoke.specpilot.test/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"minReplicas": min_replicas, "maxReplicas": max_replicas},
    }


def test_apiserver_reports_pinned_version(kube_cluster: KubeCluster) -> None:
    versions = kube_cluster.kubectl_json("version")
    expected = f"v{pinned_k8s_version()}"
    assert versions["serverVersion"]["gitVersion"] == expected
    assert versions["clientVersion"]["gitVersion"] == expected
    assert versions["serverVersion"]["minor"] == expected.split(".")[1]


def test_crd_cel_rule_rejects_bad_object_with_its_message(
    kube_cluster: KubeCluster, kube_namespace: str, widget_crd: str
) -> None:
    bad = kube_cluster.kubectl(
        "-n", kube_namespace, "create", "-f", "-", stdin=json.dumps(widget("bad", 3, 1)), check=False
    )
    assert bad.returncode != 0
    assert CEL_MESSAGE in bad.stderr
    assert "Invalid value" in bad.stderr

    apply(kube_cluster, kube_namespace, widget("good", 1, 3))
    stored = kube_cluster.kubectl_json("-n", kube_namespace, "get", "widget", "good")
    assert stored["spec"] == {"minReplicas": 1, "maxReplicas": 3}


def test_server_side_apply_reports_conflicting_field_manager(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"key": "first"}}
    kube_cluster.kubectl(
        "-n", kube_namespace, "apply", "--server-side", "--field-manager=first", "-f", "-", stdin=json.dumps(configmap)
    )
    configmap["data"] = {"key": "second"}
    conflict = kube_cluster.kubectl(
        "-n",
        kube_namespace,
        "apply",
        "--server-side",
        "--field-manager=second",
        "-f",
        "-",
        stdin=json.dumps(configmap),
        check=False,
    )
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower()
    assert 'conflict with "first": .data.key' in conflict.stderr

    stored = kube_cluster.kubectl_json("-n", kube_namespace, "get", "configmap", "ssa", "--show-managed-fields")
    assert stored["data"] == {"key": "first"}
    assert {entry["manager"] for entry in stored["metadata"]["managedFields"]} == {"first"}


def test_deployment_requesting_gpus_gets_ready_pods_on_kwok_gpu_nodes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    apply(kube_cluster, kube_namespace, gpu_deployment("gpu-server", replicas=3, gpus=4))
    kube_cluster.kubectl("-n", kube_namespace, "rollout", "status", "deployment/gpu-server", "--timeout=120s")

    pods = kube_cluster.kubectl_json("-n", kube_namespace, "get", "pods", "-l", "app.kubernetes.io/name=gpu-server")
    assert len(pods["items"]) == 3
    for pod in pods["items"]:
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert pod["status"]["phase"] == "Running"
        assert conditions["Ready"] == "True"
        assert pod["spec"]["nodeName"].startswith("kwok-gpu-")
        node = kube_cluster.kubectl_json("get", "node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == GPU_PRODUCT


def test_scheduler_leaves_pod_pending_when_no_node_has_enough_gpus(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-big"},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.invalid/x:1", "resources": {"limits": {"nvidia.com/gpu": "9"}}}
            ]
        },
    }
    apply(kube_cluster, kube_namespace, pod)
    kube_cluster.kubectl(
        "-n",
        kube_namespace,
        "wait",
        "pod/too-big",
        "--for=jsonpath={.status.conditions[?(@.type=='PodScheduled')].reason}=Unschedulable",
        "--timeout=60s",
    )
    status = kube_cluster.kubectl_json("-n", kube_namespace, "get", "pod", "too-big")["status"]
    assert status["phase"] == "Pending"
    message = next(c["message"] for c in status["conditions"] if c["type"] == "PodScheduled")
    assert "Insufficient nvidia.com/gpu" in message


def test_garbage_collector_deletes_dependents_of_deleted_owner(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    apply(kube_cluster, kube_namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    uid = kube_cluster.kubectl_json("-n", kube_namespace, "get", "configmap", "owner")["metadata"]["uid"]
    owner_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    apply(
        kube_cluster,
        kube_namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child", "ownerReferences": [owner_ref]}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "child", "ownerReferences": [owner_ref]},
            "stringData": {"k": "v"},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"}},
    )

    kube_cluster.kubectl("-n", kube_namespace, "delete", "configmap", "owner")
    wait_until_gone(kube_cluster, kube_namespace, "configmap/child", "secret/child")
    kube_cluster.kubectl("-n", kube_namespace, "get", "configmap", "bystander")


def test_garbage_collector_removes_replicasets_and_pods_of_deleted_deployment(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    apply(kube_cluster, kube_namespace, gpu_deployment("doomed", replicas=2, gpus=1))
    kube_cluster.kubectl("-n", kube_namespace, "rollout", "status", "deployment/doomed", "--timeout=120s")
    replicasets = kube_cluster.kubectl_json("-n", kube_namespace, "get", "replicasets")["items"]
    assert [rs["metadata"]["ownerReferences"][0]["name"] for rs in replicasets] == ["doomed"]

    kube_cluster.kubectl("-n", kube_namespace, "delete", "deployment", "doomed", "--cascade=foreground", "--wait=false")
    # The Deployment, its ReplicaSet and its pods all carry the template's labels.
    left: list[str] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        left = kube_cluster.kubectl(
            "-n",
            kube_namespace,
            "get",
            "deployments,replicasets,pods",
            "-l",
            "app.kubernetes.io/name=doomed",
            "-o",
            "name",
        ).stdout.split()
        if not left:
            return
        time.sleep(0.5)
    pytest.fail(f"not garbage-collected after 90s: {left}")


def test_rbac_denies_service_account_without_permissions(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    kube_cluster.kubectl("-n", kube_namespace, "create", "serviceaccount", "nobody")
    token = kube_cluster.kubectl("-n", kube_namespace, "create", "token", "nobody", "--duration=10m").stdout.strip()
    admin = kube_cluster.kubectl_json("config", "view", "--raw")
    server = admin["clusters"][0]["cluster"]
    token_kubeconfig = tmp_path / "nobody.kubeconfig"
    token_kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": server}],
                "users": [{"name": "nobody", "user": {"token": token}}],
                "contexts": [{"name": "nobody", "context": {"cluster": "e2e", "user": "nobody"}}],
                "current-context": "nobody",
            }
        )
    )
    as_nobody = ("--kubeconfig", str(token_kubeconfig), "-n", kube_namespace)

    whoami = kube_cluster.kubectl_json(*as_nobody, "auth", "whoami")
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{kube_namespace}:nobody"
    denied = kube_cluster.kubectl(*as_nobody, "get", "pods", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert f'"system:serviceaccount:{kube_namespace}:nobody" cannot list resource "pods"' in denied.stderr

    # Granting the permission makes the same request pass: the denial was RBAC's.
    kube_cluster.kubectl("-n", kube_namespace, "create", "role", "pod-reader", "--verb=list", "--resource=pods")
    kube_cluster.kubectl(
        "-n",
        kube_namespace,
        "create",
        "rolebinding",
        "nobody-reads-pods",
        "--role=pod-reader",
        f"--serviceaccount={kube_namespace}:nobody",
    )
    deadline = time.monotonic() + 30
    while kube_cluster.kubectl(*as_nobody, "get", "pods", check=False).returncode != 0:
        assert time.monotonic() < deadline, "RoleBinding never took effect"
        time.sleep(0.5)


def test_token_controller_fills_service_account_token_secret(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    kube_cluster.kubectl("-n", kube_namespace, "create", "serviceaccount", "robot")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}},
    }
    apply(kube_cluster, kube_namespace, secret)
    kube_cluster.kubectl(
        "-n", kube_namespace, "wait", "secret/robot-token", "--for=jsonpath={.data.token}", "--timeout=60s"
    )
    data = kube_cluster.kubectl_json("-n", kube_namespace, "get", "secret", "robot-token")["data"]
    assert {"token", "ca.crt", "namespace"} <= data.keys()


def helm(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the built helm against the cluster."""
    return subprocess.run(
        [str(cluster.bin_dir / "helm"), *args],
        capture_output=True,
        text=True,
        env=dict(cluster.env),
        timeout=120,
        check=False,
    )


def test_helm_template_applies_with_server_dry_run(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    rendered = helm(kube_cluster, "template", "smoke", str(SMOKE_CHART), "--namespace", kube_namespace, "--validate")
    assert rendered.returncode == 0, rendered.stderr

    applied = kube_cluster.kubectl("-n", kube_namespace, "apply", "--dry-run=server", "-f", "-", stdin=rendered.stdout)
    lines = applied.stdout.strip().splitlines()
    assert len(lines) == 5
    assert all(line.endswith("(server dry run)") for line in lines), applied.stdout
    assert "deployment.apps/smoke-server created (server dry run)" in lines
    # A dry run persists nothing.
    assert not kube_cluster.kubectl("-n", kube_namespace, "get", "all,sa,role", "-o", "name").stdout.count("smoke")


def test_helm_kube_version_check_sees_stamped_server_version(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    chart = tmp_path / "smoke-chart"
    shutil.copytree(SMOKE_CHART, chart)
    chart_yaml = chart / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace('kubeVersion: ">=1.30.0-0"', 'kubeVersion: "<1.30.0-0"'))

    rendered = helm(kube_cluster, "template", "smoke", str(chart), "--validate")
    assert rendered.returncode != 0
    assert f"incompatible with Kubernetes v{pinned_k8s_version()}" in rendered.stderr


def test_namespace_deletion_completes_with_running_pods(kube_cluster: KubeCluster) -> None:
    namespace = f"t-ns-deletion-{os.getpid()}"
    kube_cluster.kubectl("create", "namespace", namespace)
    try:
        deadline = time.monotonic() + 30
        while kube_cluster.kubectl("-n", namespace, "get", "sa", "default", check=False).returncode:
            assert time.monotonic() < deadline, "no default ServiceAccount"
            time.sleep(0.2)
        apply(kube_cluster, namespace, gpu_deployment("short-lived", replicas=2, gpus=1))
        kube_cluster.kubectl("-n", namespace, "rollout", "status", "deployment/short-lived", "--timeout=120s")
        # Finishes only if kwok's pod-delete stage removes the terminating pods
        # and the namespace controller (in kube-controller-manager) finalises it.
        kube_cluster.kubectl("delete", "namespace", namespace, "--timeout=120s")
        assert kube_cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0
    finally:
        kube_cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)


def test_python_client_sees_fake_gpu_nodes(kube_cluster: KubeCluster) -> None:
    # kubernetes.config is not annotated (the generated client is).
    api_client = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))  # type: ignore[no-untyped-call]
    with api_client:
        nodes = client.CoreV1Api(api_client).list_node(label_selector="nvidia.com/gpu.present=true").items
    assert len(nodes) >= 4
    for node in nodes:
        assert node.status is not None
        assert node.status.allocatable is not None
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"]
