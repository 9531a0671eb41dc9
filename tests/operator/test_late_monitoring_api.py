"""A PodMonitor is created once prometheus-operator's CRD is installed, also after the operator started (issue 35).

Real API server, the operator as `specpilot run`, prometheus-operator's own PodMonitor CRD (as the toolchain fetches
it for the chart tests).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.waiting import wait_for
from tests.operator.conftest import StartOperator
from tests.operator.test_operator_cluster import apply, events, get, speculative_deployment

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
POD_MONITORS = "podmonitors.monitoring.coreos.com"


def pod_monitor_crd() -> Path:
    script = ROOT / "e2e" / "toolchain" / "get-monitoring-crds.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1]) / "monitoring.coreos.com_podmonitors.yaml"


def test_a_pod_monitor_is_created_when_its_crd_arrives_after_the_operator(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    crd = pod_monitor_crd()
    kube_cluster.kubectl("delete", "crd", POD_MONITORS, "--ignore-not-found", "--timeout=60s")
    wait_for(
        "the API server no longer serves PodMonitors",
        lambda: "podmonitors" not in kube_cluster.kubectl("api-resources", "--cached=false", check=False).stdout,
        60,
        1,
    )
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("watched", monitoring={"podMonitor": True}))
    wait_for(
        "the operator saw no PodMonitor API",
        lambda: "MonitoringApiMissing" in {e["reason"] for e in events(kube_cluster, kube_namespace, "watched")},
        60,
    )
    assert get(kube_cluster, kube_namespace, "deployment", "watched") is not None, "the rest was created"

    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kube_cluster.wait_established(POD_MONITORS)
    monitor = wait_for("the PodMonitor", lambda: get(kube_cluster, kube_namespace, "podmonitor", "watched"), 150, 1)
    owner = monitor["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("SpeculativeDeployment", "watched")
    assert operator.writes("PodMonitor") >= 1
