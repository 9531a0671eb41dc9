"""Run the real operator (`specpilot run`) against the local API server, with the chart's RBAC.

The operator authenticates as the chart's ServiceAccount (a token from the TokenRequest API), so a test passes only
if the permissions the chart grants are enough — and no more is assumed than what an installed chart gives.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator, launch_operator
from e2e.podrunner import PodRunner, file_sd_scrape_config
from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.stack import model_map
from e2e.vllm.simulated import SimulatorOptions
from e2e.vllm.venvs import VllmVenv

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_NAMESPACE = "specpilot-system"
RELEASE = "specpilot"


@pytest.fixture(scope="session")
def crd_installed(kube_cluster: KubeCluster) -> None:
    """Install (or update) the generated CRD the way the README says: server-side apply of crds/."""
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kube_cluster.wait_established("speculativedeployments.specpilot.dev")


def chart_rbac(kube_cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and namespaced RBAC for one watched namespace, rendered by the real helm."""
    out = subprocess.run(
        [
            str(kube_cluster.bin_dir / "helm"),
            "template",
            RELEASE,
            str(ROOT / "charts" / "specpilot"),
            "--namespace",
            OPERATOR_NAMESPACE,
            "--set",
            f"watchNamespaces={{{namespace}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=dict(kube_cluster.env),
    ).stdout
    wanted = {"ServiceAccount", "Role", "RoleBinding"}
    return [d for d in yaml.safe_load_all(out) if d and d.get("kind") in wanted]


def service_account_kubeconfig(kube_cluster: KubeCluster, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount."""
    token = kube_cluster.kubectl("-n", OPERATOR_NAMESPACE, "create", "token", RELEASE, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "specpilot", "user": {"token": token}}],
        "contexts": [{"name": "specpilot", "context": {"cluster": cluster["name"], "user": "specpilot"}}],
        "current-context": "specpilot",
    }
    path.write_text(yaml.safe_dump(config))
    return path


StartOperator = Callable[..., RunningOperator]


@pytest.fixture
def start_operator(
    kube_cluster: KubeCluster, crd_installed: None, kube_namespace: str, tmp_path: Path
) -> Iterator[StartOperator]:
    """Start `specpilot run` for the test's namespace (extra environment and flags optional, e.g. a failpoint or
    leader election); call again to restart or to start another replica. Stopped at teardown."""
    namespace_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(namespace_doc))
    for doc in chart_rbac(kube_cluster, kube_namespace):
        kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(doc))
    kubeconfig = service_account_kubeconfig(kube_cluster, tmp_path / "operator.kubeconfig")
    started: list[RunningOperator] = []

    def start(env: dict[str, str] | None = None, extra_args: Sequence[str] = ()) -> RunningOperator:
        log = tmp_path / f"operator-{len(started)}.log"
        running = launch_operator(kubeconfig, [kube_namespace], log, env=env, extra_args=extra_args)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
    for running in started:
        if running.process.returncode not in (0, -15, None):
            print(f"operator log ({running.log_path}):\n{running.log_tail()}")


@pytest.fixture
def pods_and_prometheus(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    prometheus_factory: StartPrometheus,
    vllm_venv: VllmVenv,
    tiny_models: dict[str, Path],
    tmp_path: Path,
) -> Iterator[tuple[PodRunner, PrometheusServer]]:
    """The pod runner and Prometheus, without the operator (a test that starts it its own way)."""
    targets = tmp_path / "targets.json"
    runner = PodRunner(
        kube_cluster.kubeconfig,
        kube_namespace,
        python=vllm_venv.python,
        model_map=model_map(tiny_models),
        default_model=tiny_models["tiny-llama"],
        default_draft=tiny_models["tiny-llama-draft-same"],
        targets_file=targets,
        log_dir=tmp_path / "pods",
    )
    prometheus = prometheus_factory([file_sd_scrape_config(targets)])
    with runner:
        yield runner, prometheus


@contextlib.contextmanager
def simulated_pods_and_prometheus(
    kube_cluster: KubeCluster, namespace: str, prometheus_factory: StartPrometheus, tmp_path: Path, *, seed: int
) -> Iterator[tuple[PodRunner, PrometheusServer]]:
    """The pod runner with simulated 8B H100 pods (x0.1 time, seeded) and Prometheus scraping them."""
    targets = tmp_path / "targets.json"
    runner = PodRunner(
        kube_cluster.kubeconfig,
        namespace,
        python=Path(sys.executable),
        model_map={},
        default_model=tmp_path,
        default_draft=tmp_path,
        targets_file=targets,
        log_dir=tmp_path / "pods",
        simulator=SimulatorOptions(preset="llama8b-h100", time_scale=0.1, startup_seconds=1.0, seed=seed),
    )
    prometheus = prometheus_factory([file_sd_scrape_config(targets)])
    with runner:
        yield runner, prometheus


@pytest.fixture
def stack(
    pods_and_prometheus: tuple[PodRunner, PrometheusServer], start_operator: StartOperator
) -> tuple[PodRunner, PrometheusServer]:
    start_operator()
    return pods_and_prometheus
