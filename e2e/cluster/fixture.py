"""pytest plugin: a real local Kubernetes control plane for tests marked ``cluster``.

Load it with ``pytest_plugins = ["e2e.cluster.fixture"]`` (or ``-p e2e.cluster.fixture``).
The session fixture ``kube_cluster`` starts the cluster with ``e2e/cluster/up.sh``
(building the toolchain first if needed) or reuses one that is already running,
and yields a :class:`KubeCluster`. ``kube_namespace`` gives each test a fresh
namespace.

Environment:

- ``SPECPILOT_SKIP_CLUSTER=1`` skips every ``cluster`` test with a reason. This is
  the only way to skip them: without it, failing to start the cluster is an error.
- ``SPECPILOT_KEEP_CLUSTER=1`` leaves a cluster this session started running at
  the end.

Pods in a namespace labelled ``specpilot.test/status-owner=podrunner`` (the pod runner labels its namespace) are
not made Ready by kwok: their status is the pod runner's (see ``e2e/cluster/pod-status-owner.yaml``). Every other pod
is Running and Ready at once.

Teardown: a cluster started by hand (``up.sh``) is never stopped by the fixture.
One started by a fixture is stopped by the last pytest session using it (each
session registers its PID under ``<state>/sessions``), so a session that
reused it is not cut off when the one that started it ends.
- ``SPECPILOT_CLUSTER_UP_TIMEOUT`` bounds ``up.sh`` in seconds (default 5400,
  enough for a cold build of the toolchain on 2 cores).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

CLUSTER_DIR = Path(__file__).resolve().parent
UP = CLUSTER_DIR / "up.sh"
DOWN = CLUSTER_DIR / "down.sh"
SKIP_ENV = "SPECPILOT_SKIP_CLUSTER"
KEEP_ENV = "SPECPILOT_KEEP_CLUSTER"
UP_TIMEOUT_ENV = "SPECPILOT_CLUSTER_UP_TIMEOUT"
NAMESPACE_LABEL = "specpilot.test/e2e"

_EXPORT_LINE = re.compile(r"^export KUBECONFIG=(?P<kubeconfig>\S+) PATH=(?P<bin>\S+):\$PATH$")


class KubectlError(AssertionError):
    """A kubectl command failed; carries the command and its output."""


@dataclass(frozen=True)
class KubeCluster:
    """A running local cluster: where its kubeconfig and binaries are."""

    kubeconfig: Path
    bin_dir: Path
    env: Mapping[str, str]
    """Environment for subprocesses: ``KUBECONFIG`` set, ``bin_dir`` first on ``PATH``."""

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster and return the completed process.

        With ``check`` (the default) a non-zero exit raises :class:`KubectlError`
        showing the command and its stderr, so test failures explain themselves.
        """
        cmd = [str(self.bin_dir / "kubectl"), *args]
        proc = subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            env=dict(self.env),
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubectlError(
                f"{shlex.join(['kubectl', *args])} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def kubectl_json(self, *args: str, timeout: float = 120) -> Any:
        """Run ``kubectl <args> -o json`` and return the parsed output."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Until every named CRD (`plural.group`) has condition Established=True.

        Not `kubectl wait --for=condition=Established`: on a CRD created a moment ago the API server has not yet
        written status.conditions, and kubectl wait then fails at once ("status.conditions accessor error: <nil>")
        instead of waiting (seen on a fresh cluster, i.e. a clean clone's first `make test`).
        """
        deadline = time.monotonic() + timeout
        pending = list(crds)
        while pending:
            found = self.kubectl("get", "crd", *pending, "-o", "json", check=False)
            answer = json.loads(found.stdout) if found.returncode == 0 else {}
            items = answer.get("items", []) if answer.get("kind") == "List" else [answer] if answer else []
            established = {
                i["metadata"]["name"]
                for i in items
                for c in (i.get("status") or {}).get("conditions") or []
                if c.get("type") == "Established" and c.get("status") == "True"
            }
            pending = [c for c in pending if c not in established]
            if pending and time.monotonic() > deadline:
                raise KubectlError(f"CRDs not Established after {timeout:.0f}s: {pending}\n{found.stderr}")
            if pending:
                time.sleep(0.3)


def _parse_export_line(stdout: str) -> tuple[Path, Path]:
    """Return (kubeconfig, bin dir) from the last line of ``up.sh``'s output."""
    lines = stdout.strip().splitlines()
    match = _EXPORT_LINE.match(lines[-1]) if lines else None
    if match is None:
        raise RuntimeError(f"unexpected output from {UP}: {stdout!r}")
    return Path(match["kubeconfig"]), Path(match["bin"])


def _make_cluster(stdout: str) -> KubeCluster:
    kubeconfig, bin_dir = _parse_export_line(stdout)
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    # kubectl's discovery cache, keyed by host:port, would otherwise pile up in
    # ~/.kube/cache with every fresh cluster's random port.
    env["KUBECACHEDIR"] = str(kubeconfig.parent / "kube-cache")
    return KubeCluster(kubeconfig=kubeconfig, bin_dir=bin_dir, env=MappingProxyType(env))


def _cluster_already_up() -> str | None:
    """Return ``up.sh --check``'s output if a healthy cluster is running."""
    proc = subprocess.run([str(UP), "--check"], capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _start_cluster() -> str:
    """Run ``up.sh`` (its progress goes to our stderr) and return its stdout."""
    timeout = float(os.environ.get(UP_TIMEOUT_ENV, "5400"))
    proc = subprocess.run([str(UP)], stdout=subprocess.PIPE, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{UP} failed with exit code {proc.returncode}; its log tail is in the captured "
            f"stderr above. Set {SKIP_ENV}=1 to skip cluster tests deliberately."
        )
    return proc.stdout


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``cluster`` marker."""
    config.addinivalue_line(
        "markers",
        f"cluster: needs the local Kubernetes control plane (e2e/cluster); skipped only with {SKIP_ENV}=1",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``cluster`` tests when, and only when, the user opted out."""
    if os.environ.get(SKIP_ENV) != "1":
        return
    skip = pytest.mark.skip(reason=f"{SKIP_ENV}=1: cluster tests deliberately skipped")
    for item in items:
        if item.get_closest_marker("cluster") is not None:
            item.add_marker(skip)


def _workdir() -> Path:
    """Return the cluster's state folder (``up.sh --workdir``)."""
    out = subprocess.run([str(UP), "--workdir"], capture_output=True, text=True, timeout=30, check=True).stdout
    return Path(out.strip())


@contextlib.contextmanager
def _sessions_lock(workdir: Path) -> Iterator[None]:
    """Serialise session registration and the stop-or-leave decision."""
    workdir.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{workdir}.sessions.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def cluster_session() -> Iterator[KubeCluster]:
    """The local cluster for one user (a pytest session, `make demo`): started unless one is up, registered under
    ``<state>/sessions`` while in use, and stopped at the end by the last user of a cluster a user started (never one
    started by hand with ``up.sh``)."""
    workdir = _workdir()
    owned_marker = workdir / "fixture-owned"
    session = workdir / "sessions" / str(os.getpid())
    with _sessions_lock(workdir):
        started = _cluster_already_up() is None
        # Also when it is up: up.sh then only brings kwok's stages and the pod-status admission policy up to date
        # with this checkout (a cluster started from another checkout may predate them).
        stdout = _start_cluster()
        if started:
            owned_marker.touch()
        cluster = _make_cluster(stdout)
        session.parent.mkdir(exist_ok=True)
        session.touch()
    try:
        yield cluster
    finally:
        with _sessions_lock(workdir):
            session.unlink(missing_ok=True)
            if os.environ.get(KEEP_ENV) == "1":
                owned_marker.unlink(missing_ok=True)  # from now on it counts as started by hand
            elif owned_marker.exists() and not any(
                _alive(int(p.name)) for p in session.parent.iterdir() if p.name.isdigit()
            ):
                subprocess.run([str(DOWN)], timeout=120, check=False)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """Start the local cluster once per session (or reuse a running one)."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: cluster tests deliberately skipped")
    with cluster_session() as cluster:
        yield cluster


def _namespace_name(node_name: str) -> str:
    """Derive a valid, unique namespace name (RFC 1123 label) from a test's name."""
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")
    base = base.removeprefix("test-")[:50].strip("-")
    return f"t-{base}-{secrets.token_hex(3)}"


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """Create a fresh namespace for one test; delete it afterwards without waiting."""
    name = _namespace_name(request.node.name)
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}},
    }
    kube_cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    # Pods are rejected until kube-controller-manager has created the namespace's
    # default ServiceAccount; wait for it so tests can create bare pods at once.
    deadline = time.monotonic() + 30
    while kube_cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name}: no default ServiceAccount after 30 s")
        time.sleep(0.2)
    try:
        yield name
    finally:
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def monitoring_crds(kube_cluster: KubeCluster) -> None:
    """prometheus-operator's ServiceMonitor, PodMonitor, PrometheusRule CRDs (e2e/toolchain/get-monitoring-crds.sh)."""
    script = Path(__file__).resolve().parents[1] / "toolchain" / "get-monitoring-crds.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = done.stdout.strip().splitlines()[-1]
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", folder)
    kube_cluster.wait_established(
        *(f"{kind}.monitoring.coreos.com" for kind in ("servicemonitors", "podmonitors", "prometheusrules"))
    )
