"""Install specpilot as users do: `helm install` of the chart, the operator running as the chart's pod.

e2e.operator_pod runs the pod's own command with a service-account token bound to that pod (TokenRequest), so the
operator has exactly the chart's RBAC. A SpeculativeDeployment applied afterwards becomes Ready; `helm upgrade` with
changed values replaces the pod and the new process runs the new flags; `helm uninstall` removes everything but the
CRD (as Helm does), and the pod's token stops working with the pod.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.install import helm, install_operator, uninstall, upgrade_install
from e2e.operator_pod import OperatorProcess, rewrite_mount_paths
from e2e.operator_process import host_preload
from e2e.waiting import wait_for

pytestmark = pytest.mark.cluster
CONDITIONS = '{range .status.conditions[*]}{.type}={.status} ({.reason}){"\\n"}{end}'
CLUSTER_SCOPED = "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding"


def _tiny(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 8192},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
        },
    }


def _ready(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj: dict[str, Any] = cluster.kubectl_json("-n", namespace, "get", "specdeploy", name)
    ready = [c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Ready"]
    return obj if ready and ready[0]["status"] == "True" else None


def _reconciles(metrics_text: str) -> float:
    """Successful reconciles the operator process counted (its own /metrics)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("specpilot_reconciles_total{") and 'result="ok"' in line
    )


def _token_authenticates(cluster: KubeCluster, kubeconfig: Path, namespace: str) -> bool:
    """Whether the API server still accepts the token: allowed, or Forbidden (authenticated, but RBAC is gone).

    After the ServiceAccount and pod are deleted the token stays valid for a few seconds (the API server caches
    successful token reviews and reads ServiceAccounts from an informer), so callers poll for Unauthorized."""
    done = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "-n", namespace, "get", "specdeploy"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 0 or "Forbidden" in done.stderr:
        return True
    if "Unauthorized" in done.stderr:
        return False
    raise AssertionError(f"unexpected kubectl failure: {done.stderr}")


def _evidence(
    cluster: KubeCluster, release: str, operator_ns: str, namespace: str, process: OperatorProcess, user: str
) -> str:
    """What `pytest -s -k helm_install` prints: the release, the operator pod, who the process is, and the CR it
    reconciled (docs/chart-install-kubectl-get.txt is one such print)."""
    return "\n".join(
        [
            f"$ helm list -n {operator_ns}",
            helm(cluster.bin_dir, cluster.kubeconfig, "list", "-n", operator_ns).rstrip(),
            f"$ kubectl -n {operator_ns} get deployment,pod -l app.kubernetes.io/instance={release}",
            cluster.kubectl(
                "-n", operator_ns, "get", "deployment,pod", "-l", f"app.kubernetes.io/instance={release}"
            ).stdout.rstrip(),
            f"# the pod's process (local stand-in, e2e/operator_pod.py) authenticates as {user}",
            f"# with a TokenRequest token bound to pod {process.pod}; it runs: {' '.join(process.argv[1:])}",
            f"$ kubectl -n {namespace} get speculativedeployments -o wide",
            cluster.kubectl("-n", namespace, "get", "speculativedeployments", "-o", "wide").stdout.rstrip(),
            f"$ kubectl -n {namespace} get speculativedeployment chat -o jsonpath='{CONDITIONS}'",
            cluster.kubectl(
                "-n", namespace, "get", "speculativedeployment", "chat", "-o", f"jsonpath={CONDITIONS}"
            ).stdout.rstrip(),
        ]
    )


def test_helm_install_runs_the_operator_pod_and_reconciles(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    suffix = secrets.token_hex(3)
    release, operator_ns = f"specpilot-{suffix}", f"t-chart-{suffix}"
    installed = install_operator(
        kube_cluster.bin_dir,
        kube_cluster.kubeconfig,
        watch_namespaces=[kube_namespace],
        log_dir=tmp_path / "operator",
        release=release,
        namespace=operator_ns,
        values={"tickSeconds": 2},
    )
    try:
        first = installed.process
        pod = kube_cluster.kubectl_json("-n", operator_ns, "get", "pod", first.pod)
        container = pod["spec"]["containers"][0]
        assert "command" not in container  # the image's entrypoint runs the container's args
        own = ("--metrics-port", "--health-port", "--bind-address")
        # the pod's args, with paths under its volume mounts pointing at the local stand-ins (as mounted)
        assert [a for a in first.argv[3:] if not a.startswith(own)] == [
            rewrite_mount_paths(a, first.mounts) for a in container["args"] if not a.startswith(own)
        ]
        connections = next(a for a in first.argv if a.startswith("--prometheus-connections="))
        assert Path(connections.split("=", 1)[1]).is_file(), "the chart's ConfigMap is mounted as a file"
        assert f"--namespace={kube_namespace}" in first.argv
        assert "--tick-seconds=2" in first.argv
        # ... and the container's env (TMPDIR=/tmp, the chart's emptyDir at /tmp) reached the process, mounted.
        environ = dict(
            entry.split("=", 1)
            for entry in Path(f"/proc/{first.process.pid}/environ").read_text().split("\0")
            if "=" in entry
        )
        for variable in container["env"]:
            if variable["name"] == "LD_PRELOAD":  # the image's jemalloc: this machine's copy of the same library
                expected = host_preload(variable["value"])
            elif "value" in variable:
                expected = rewrite_mount_paths(variable["value"], first.mounts)
            else:  # the downward API (POD_NAME for leader election): the pod's own field, as the kubelet fills it
                expected = pod
                for part in variable["valueFrom"]["fieldRef"]["fieldPath"].split("."):
                    expected = expected[part]
            assert environ[variable["name"]] == expected, variable
        assert environ["TMPDIR"] == first.mounts["/tmp"]
        # ... and the allocator the chart asks for is the one the process runs on
        maps = Path(f"/proc/{first.process.pid}/maps").read_text()
        assert "libjemalloc.so.2" in maps, "the chart's LD_PRELOAD loads jemalloc into the operator"
        # The process authenticates as the chart's ServiceAccount, with a token bound to this pod.
        whoami = subprocess.run(
            [
                str(kube_cluster.bin_dir / "kubectl"),
                "--kubeconfig",
                str(first.kubeconfig),
                "auth",
                "whoami",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        info = json.loads(whoami.stdout)["status"]["userInfo"]
        assert info["username"] == f"system:serviceaccount:{operator_ns}:{release}"
        assert info["extra"]["authentication.kubernetes.io/pod-name"] == [first.pod]

        kube_cluster.kubectl("-n", kube_namespace, "apply", "-f", "-", stdin=json.dumps(_tiny("chat")))
        cr = wait_for(
            "the CR Ready, reconciled by the chart's pod", lambda: _ready(kube_cluster, kube_namespace, "chat"), 120
        )
        assert cr["status"]["observedGeneration"] == cr["metadata"]["generation"]
        evidence = _evidence(kube_cluster, release, operator_ns, kube_namespace, first, info["username"])
        print(f"\n--- chart install evidence ---\n{evidence}\n--- end ---")

        # helm upgrade with changed values: the pod is replaced (Recreate) and the new process runs the new flags.
        second = installed.upgrade({"watchNamespaces": [kube_namespace], "tickSeconds": 3, "logLevel": "debug"})
        assert second.uid != first.uid
        assert first.process.poll() is not None, "the old pod's process must stop with its pod"
        assert "--log-level=debug" in second.argv
        assert "--tick-seconds=3" in second.argv
        kube_cluster.kubectl("-n", kube_namespace, "annotate", "specdeploy", "chat", "specpilot.dev/reevaluate=1")
        wait_for("the new process to reconcile the CR", lambda: _reconciles(second.metrics()) > 0, 60)
    finally:
        installed.stop()
        kube_cluster.kubectl("delete", "namespace", operator_ns, "--wait=false", "--ignore-not-found", check=False)
    # helm uninstall: the release's objects are gone, the process stopped, the CRD stays; the pod's token is dead.
    assert first.process.poll() is not None
    assert second.process.poll() is not None
    leftovers = kube_cluster.kubectl(
        "get",
        f"all,serviceaccount,role,rolebinding,configmap,secret,{CLUSTER_SCOPED}",
        "-A",
        "-l",
        f"app.kubernetes.io/instance={release}",
        "-o",
        "name",
    ).stdout
    assert leftovers.strip() == ""
    assert kube_cluster.kubectl("get", "crd", "speculativedeployments.specpilot.dev", check=False).returncode == 0
    wait_for(
        "the deleted pod's token to be rejected (Unauthorized)",
        lambda: not _token_authenticates(kube_cluster, first.kubeconfig, kube_namespace),
        60,
        interval=2,
    )


def test_cluster_wide_install_leaves_no_cluster_scoped_objects(kube_cluster: KubeCluster) -> None:
    """All-namespaces mode renders a ClusterRole and binding, the image policy a ValidatingAdmissionPolicy and its
    binding (all cluster-scoped); uninstall removes them (no operator is run here: a cluster-wide operator would
    reconcile other tests' resources on the shared cluster; the policy only audits, so it refuses nobody's CR)."""
    suffix = secrets.token_hex(3)
    release, operator_ns = f"specpilot-{suffix}", f"t-chart-{suffix}"
    selector = f"app.kubernetes.io/instance={release}"
    values = {"imagePolicy": {"enabled": True, "validationActions": ["Audit"]}}
    upgrade_install(
        kube_cluster.bin_dir, kube_cluster.kubeconfig, values, release=release, namespace=operator_ns, wait=False
    )
    try:
        created = kube_cluster.kubectl("get", CLUSTER_SCOPED, "-l", selector, "-o", "name").stdout
        assert sorted(created.split()) == [
            f"clusterrole.rbac.authorization.k8s.io/{release}",
            f"clusterrolebinding.rbac.authorization.k8s.io/{release}",
            f"validatingadmissionpolicy.admissionregistration.k8s.io/{release}-images",
            f"validatingadmissionpolicybinding.admissionregistration.k8s.io/{release}-images",
        ]
    finally:
        uninstall(kube_cluster.bin_dir, kube_cluster.kubeconfig, release=release, namespace=operator_ns)
        kube_cluster.kubectl("delete", "namespace", operator_ns, "--wait=false", "--ignore-not-found", check=False)
    assert kube_cluster.kubectl("get", CLUSTER_SCOPED, "-l", selector, "-o", "name").stdout == ""
    assert kube_cluster.kubectl("get", "crd", "speculativedeployments.specpilot.dev", check=False).returncode == 0
