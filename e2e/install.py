"""Install specpilot the way users do: `helm upgrade --install` of charts/specpilot, the operator running as the
chart's pod (e2e.operator_pod runs that pod's own command locally with its service-account token).

Used by the chart tests (tests/operator/test_chart_install.py) and `make demo`. CRDs come with the chart (Helm's
crds/ folder: installed first, never upgraded or deleted, as Helm does).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.operator_pod import OperatorPodRunner, OperatorProcess

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "specpilot"
RELEASE = "specpilot"
OPERATOR_NAMESPACE = "specpilot-system"


def helm(bin_dir: Path, kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
    """Run the toolchain's helm against the cluster; a failure raises with helm's own message."""
    done = subprocess.run(
        [str(bin_dir / "helm"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def values_args(values: Mapping[str, Any]) -> list[str]:
    """Values as one JSON document on stdin (`-f -`): lists and nested maps without --set escaping."""
    return ["-f", "-"] if values else []


def upgrade_install(
    bin_dir: Path,
    kubeconfig: Path,
    values: Mapping[str, Any],
    *,
    release: str = RELEASE,
    namespace: str = OPERATOR_NAMESPACE,
    wait: bool = True,
) -> str:
    """`helm upgrade --install` (create the namespace; wait for the Deployment to be available)."""
    args = ["upgrade", "--install", release, str(CHART), "-n", namespace, "--create-namespace"]
    if wait:
        args += ["--wait", "--timeout", "120s"]
    return helm(bin_dir, kubeconfig, *args, *values_args(values), stdin=json.dumps(dict(values)))


def uninstall(bin_dir: Path, kubeconfig: Path, *, release: str = RELEASE, namespace: str = OPERATOR_NAMESPACE) -> str:
    return helm(bin_dir, kubeconfig, "uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")


@dataclass
class InstalledOperator:
    """A Helm release whose operator pod runs locally; `process` is the current pod's process."""

    bin_dir: Path
    kubeconfig: Path
    release: str
    namespace: str
    runner: OperatorPodRunner

    @property
    def process(self) -> OperatorProcess:
        current = self.runner.current
        if current is None:
            raise RuntimeError(f"no running operator pod for release {self.release}")
        return current

    @property
    def metrics_port(self) -> int:
        return self.process.metrics_port

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def wait_live(self, timeout: float = 90, previous_uid: str | None = None) -> OperatorProcess:
        """Until a pod (other than `previous_uid`) has a live local operator: liveness answers on /healthz."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.runner.current
            if current is not None and current.uid != previous_uid:
                if current.process.poll() is not None:
                    raise RuntimeError(f"operator pod {current.pod} exited:\n{current.log_tail()}")
                if current.live():
                    return current
            time.sleep(0.5)
        tail = self.runner.current.log_tail() if self.runner.current else "(no operator pod seen)"
        raise TimeoutError(f"operator of release {self.release} not live after {timeout:.0f}s:\n{tail}")

    def upgrade(self, values: Mapping[str, Any]) -> OperatorProcess:
        """`helm upgrade` with new values; returns the process of the replacement pod once it is live."""
        before = self.process.uid
        upgrade_install(self.bin_dir, self.kubeconfig, values, release=self.release, namespace=self.namespace)
        return self.wait_live(previous_uid=before)

    def stop(self) -> None:
        """`helm uninstall`, then stop the runner (which stops the process once the pod is gone)."""
        try:
            uninstall(self.bin_dir, self.kubeconfig, release=self.release, namespace=self.namespace)
        finally:
            self.runner.stop()


def install_operator(
    bin_dir: Path,
    kubeconfig: Path,
    *,
    watch_namespaces: Sequence[str],
    log_dir: Path,
    values: Mapping[str, Any] | None = None,
    release: str = RELEASE,
    namespace: str = OPERATOR_NAMESPACE,
) -> InstalledOperator:
    """Install the chart, run its operator pod locally, and wait until the operator is live."""
    merged = {"watchNamespaces": list(watch_namespaces), **(values or {})}
    upgrade_install(bin_dir, kubeconfig, merged, release=release, namespace=namespace)
    runner = OperatorPodRunner(kubeconfig, namespace, release, log_dir=log_dir).start()
    installed = InstalledOperator(bin_dir, kubeconfig, release, namespace, runner)
    try:
        installed.wait_live()
    except Exception:
        installed.stop()
        raise
    return installed
