"""The running operator uses Prometheus credentials only through an administrator's connections.

`specpilot run --prometheus-connections FILE` (what the chart passes) with two connections to a recording HTTP
server on 127.0.0.1 that answers like Prometheus: the CR in the namespace the first connection allows gets its token
sent; the CR naming a connection reserved for another namespace gets a PrometheusConnectionRefused event and sends
nothing. The operator runs with the chart's RBAC, which grants no access to Secrets at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import launch_operator
from tests.operator.conftest import OPERATOR_NAMESPACE, ROOT, chart_rbac, service_account_kubeconfig
from tests.unit.test_connections import Recorder

pytestmark = pytest.mark.cluster


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    rec.thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def resource(name: str, connection: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 4096},
            "target": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "autotune": {"mode": "Recommend", "interval": "2s", "prometheus": {"connection": connection}},
        },
    }


def create_with_this_trees_crd(kube_cluster: KubeCluster, namespace: str, obj: dict[str, Any]) -> None:
    """The CRD is cluster-wide and concurrent sessions on other branches apply theirs: re-apply ours on a refusal."""
    for _ in range(5):
        proc = kube_cluster.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(obj), check=False)
        if proc.returncode == 0:
            return
        assert 'unknown field "spec.autotune.prometheus.connection"' in proc.stderr, proc.stderr
        kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        kube_cluster.wait_established("speculativedeployments.specpilot.dev")
        time.sleep(1)
    raise AssertionError("another session keeps replacing the CRD")


def test_operator_sends_credentials_only_through_allowed_connections(
    kube_cluster: KubeCluster, crd_installed: None, kube_namespace: str, tmp_path: Path, recorder: Recorder
) -> None:
    credentials = tmp_path / "prometheus-reader"
    credentials.mkdir()
    (credentials / "token").write_text("operator-token\n")
    common = {"url": recorder.url, "credentialsDir": str(credentials), "allowPlainHTTP": True}
    connections = {
        "connections": {
            "allowed": {**common, "namespaces": [kube_namespace]},
            "elsewhere": {**common, "namespaces": ["some-other-namespace"]},
        }
    }
    path = tmp_path / "connections.json"
    path.write_text(json.dumps(connections))
    namespace_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(namespace_doc))
    rbac = chart_rbac(kube_cluster, kube_namespace)
    assert not [r for doc in rbac for r in doc.get("rules", []) if "secrets" in r["resources"]]
    for doc in rbac:
        kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(doc))
    kubeconfig = service_account_kubeconfig(kube_cluster, tmp_path / "operator.kubeconfig")
    running = launch_operator(
        kubeconfig, [kube_namespace], tmp_path / "operator.log", extra_args=["--prometheus-connections", str(path)]
    )
    try:
        for name, connection in (("uses-allowed", "allowed"), ("uses-elsewhere", "elsewhere")):
            create_with_this_trees_crd(kube_cluster, kube_namespace, resource(name, connection))
        deadline = time.monotonic() + 90
        refused: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not (recorder.headers and refused):
            events = kube_cluster.kubectl_json("-n", kube_namespace, "get", "events")["items"]
            refused = [e for e in events if e.get("reason") == "PrometheusConnectionRefused"]
            time.sleep(1)
        assert recorder.headers, f"the allowed connection was never used:\n{running.log_tail()}"
        assert {h.get("Authorization") for h in recorder.headers} == {"Bearer operator-token"}
        assert refused, f"no PrometheusConnectionRefused event:\n{running.log_tail()}"
        assert {e["involvedObject"]["name"] for e in refused} == {"uses-elsewhere"}
        assert f"connection 'elsewhere' is not available in namespace {kube_namespace}" in refused[0]["message"]
        assert "operator-token" not in running.log_tail()
    finally:
        running.stop()
