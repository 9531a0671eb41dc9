"""Run the specpilot chart's operator pod as a local process: its own command, environment and service account.

kwok marks the chart's operator pod Running without running anything. This runner recognises that pod by the chart's
selector labels (app.kubernetes.io/name=specpilot, app.kubernetes.io/instance=<release>) and starts what the image
would: the image's entrypoint (`python -m specpilot`, see the Dockerfile) with the container's `args` and `env`,
authenticated the way the kubelet authenticates a pod: a service-account token from the TokenRequest API, bound to
this pod object (it stops working when the pod is deleted), for the pod's `serviceAccountName`. So the operator runs
with exactly the chart's RBAC and the chart's flags; `helm upgrade` that changes the pod template replaces the pod
(strategy Recreate) and the runner restarts the process with the new command; `helm uninstall` stops it.

Local adaptations, each listed in `notes`: the listening flags (--metrics-port, --health-port) get free loopback
ports and --bind-address=127.0.0.1 is added (servers listen on loopback only); the token and the API server's CA reach
the process as a kubeconfig (the Python client's in-cluster loader reads fixed paths under /var/run/secrets).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config

from e2e.operator_process import host_preload
from e2e.waiting import free_port, log_tail, stop_process

log = logging.getLogger("operator-pod")
ENTRYPOINT = [sys.executable, "-m", "specpilot"]  # the image's ENTRYPOINT ["python", "-m", "specpilot"]
LISTEN_FLAGS = ("--metrics-port", "--health-port")
TOKEN_SECONDS = 3600  # what the kubelet requests for a projected token


@dataclass
class OperatorProcess:
    """The local stand-in of one operator pod."""

    pod: str
    uid: str
    argv: list[str]
    metrics_port: int
    health_port: int
    log_path: Path
    process: subprocess.Popen[bytes]
    kubeconfig: Path  # the pod's credentials: its bound service-account token
    notes: list[str] = field(default_factory=list)
    mounts: dict[str, str] = field(default_factory=dict)  # the pod's mount paths -> local folders

    def live(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def stop(self) -> None:
        stop_process(self.process)

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)


def adapt_operator_args(args: list[str]) -> tuple[list[str], int, int, list[str]]:
    """The container's args with listening ports moved to free loopback ports; (args, metrics, health, notes)."""
    out: list[str] = []
    ports = {flag: free_port() for flag in LISTEN_FLAGS}
    notes = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in LISTEN_FLAGS:
            original = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            skip = not eq
            out.append(f"{flag}={ports[flag]}")
            notes.append(f"{flag} {original} -> {ports[flag]} (free loopback port)")
        elif flag == "--bind-address":
            skip = not eq
        else:
            out.append(arg)
    for flag in LISTEN_FLAGS:
        if f"{flag}={ports[flag]}" not in out:
            out.append(f"{flag}={ports[flag]}")
    out.append("--bind-address=127.0.0.1")
    notes.append("--bind-address=127.0.0.1 (servers listen on loopback only)")
    return out, ports["--metrics-port"], ports["--health-port"], notes


def rewrite_mount_paths(text: str, mounts: dict[str, str]) -> str:
    """Point absolute paths under a pod's mount paths at the local folders standing in for them.

    One pass, longest mount path first, so a local folder (itself under /tmp) is never rewritten again by the
    chart's /tmp mount.
    """
    if not mounts:
        return text
    paths = sorted((m.rstrip("/") for m in mounts), key=len, reverse=True)
    local = {m.rstrip("/"): v.rstrip("/") for m, v in mounts.items()}
    pattern = re.compile("|".join(re.escape(p) + r"(?=/|$|\s|\")" for p in paths))
    return pattern.sub(lambda found: local[found.group(0)], text)


DOWNWARD_FIELDS = {"metadata.name": "name", "metadata.namespace": "namespace", "metadata.uid": "uid"}


def downward_env(pod: Any, container: Any) -> dict[str, str]:
    """Environment variables the kubelet fills from the pod's own fields (`valueFrom.fieldRef`), e.g. POD_NAME."""
    out: dict[str, str] = {}
    for var in container.env or []:
        ref = var.value_from.field_ref if var.value_from is not None else None
        if ref is None:
            continue
        if ref.field_path not in DOWNWARD_FIELDS:
            raise ValueError(
                f"pod {pod.metadata.name}: env {var.name}: fieldRef {ref.field_path} is not supported here"
            )
        out[var.name] = str(getattr(pod.metadata, DOWNWARD_FIELDS[ref.field_path]))
    return out


def pod_token(core: Any, pod: Any) -> str:
    """A TokenRequest for the pod's service account, bound to the pod object, as the kubelet's projected volume."""
    body = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=TOKEN_SECONDS,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
            ),
        )
    )
    account = pod.spec.service_account_name or "default"
    answer: Any = core.create_namespaced_service_account_token(account, pod.metadata.namespace, body)
    return str(answer.status.token)


def pod_kubeconfig(admin_kubeconfig: Path, token: str, namespace: str, path: Path) -> Path:
    """What in-cluster config amounts to: the API server, its CA, the pod's token and namespace."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": cluster["name"], "user": "pod", "namespace": namespace}}],
        "current-context": "pod",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


class OperatorPodRunner:
    """Keep one local operator process per Running operator pod of a Helm release (poll every `period`)."""

    def __init__(
        self, admin_kubeconfig: Path, namespace: str, release: str, *, log_dir: Path, period: float = 1.0
    ) -> None:
        self.admin_kubeconfig = admin_kubeconfig
        self.namespace = namespace
        self.selector = f"app.kubernetes.io/name=specpilot,app.kubernetes.io/instance={release}"
        self.log_dir = log_dir
        self.period = period
        self.current: OperatorProcess | None = None
        self.started: list[OperatorProcess] = []
        self._core = client.CoreV1Api(config.new_client_from_config(str(admin_kubeconfig)))  # type: ignore[no-untyped-call]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._secrets = Path(tempfile.mkdtemp(prefix="specpilot-operator-pod-"))

    def start(self) -> OperatorPodRunner:
        self._thread = threading.Thread(target=self._loop, name="operator-pod-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            if self.current is not None:
                self.current.stop()
                self.current = None

    def __enter__(self) -> OperatorPodRunner:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:  # API hiccups: the next pass retries
                log.exception("operator pod runner pass failed")
            self._stop.wait(self.period)

    def sync_once(self) -> None:
        pods: Any = self._core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        running = [
            p
            for p in pods.items
            if p.metadata.deletion_timestamp is None and p.status is not None and p.status.phase == "Running"
        ]
        with self._lock:
            if self.current is not None and (
                not any(p.metadata.uid == self.current.uid for p in running) or self.current.process.poll() is not None
            ):
                log.info("operator pod %s gone or exited: stopping its process", self.current.pod)
                self.current.stop()
                self.current = None
            if self.current is None and running:
                self.current = self._launch(running[0])
                self.started.append(self.current)

    def _mount_volumes(self, pod: Any, container: Any) -> dict[str, str]:
        """What the kubelet mounts, as local folders: ConfigMaps and Secrets projected into files, emptyDirs empty.

        Returns mount path -> local folder. Paths inside projected files (the chart's connections.json names the
        Secret mounts of each connection) are rewritten the same way, so the process finds what the pod would.
        """
        volumes = {v.name: v for v in pod.spec.volumes or []}
        mounts: dict[str, str] = {}
        files: list[tuple[Path, str]] = []
        for mount in container.volume_mounts or []:
            volume = volumes.get(mount.name)
            local = Path(tempfile.mkdtemp(prefix=f"specpilot-operator-{mount.name}-", dir=self._secrets))
            mounts[str(mount.mount_path)] = str(local)
            if volume is None:
                continue
            if volume.config_map is not None:
                found: Any = self._core.read_namespaced_config_map(volume.config_map.name, pod.metadata.namespace)
                files += [(local / key, value) for key, value in (found.data or {}).items()]
            elif volume.secret is not None:
                secret: Any = self._core.read_namespaced_secret(volume.secret.secret_name, pod.metadata.namespace)
                files += [(local / k, base64.b64decode(v).decode()) for k, v in (secret.data or {}).items()]
        for path, content in files:
            path.write_text(rewrite_mount_paths(content, mounts))
        return mounts

    def _launch(self, pod: Any) -> OperatorProcess:
        container = pod.spec.containers[0]
        args, metrics_port, health_port, notes = adapt_operator_args(list(container.args or []))
        if container.command:
            raise ValueError(f"pod {pod.metadata.name}: a command override is not the image's entrypoint")
        token = pod_token(self._core, pod)
        kubeconfig = pod_kubeconfig(
            self.admin_kubeconfig, token, pod.metadata.namespace, self._secrets / f"{pod.metadata.uid}.kubeconfig"
        )
        mounts = self._mount_volumes(pod, container)
        args = [rewrite_mount_paths(a, mounts) for a in args]
        env = {e.name: rewrite_mount_paths(e.value, mounts) for e in container.env or [] if e.value is not None}
        env.update(downward_env(pod, container))
        if "LD_PRELOAD" in env:  # the image's allocator (Dockerfile): this machine's copy of the same library
            env["LD_PRELOAD"] = host_preload(env["LD_PRELOAD"])
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "PYTHONUNBUFFERED": "1",
            **env,
            "KUBECONFIG": str(kubeconfig),
        }
        log_path = self.log_dir / f"{pod.metadata.name}.log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [*ENTRYPOINT, *args]
        with log_path.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environment)
        log.info("operator pod %s: started %s", pod.metadata.name, " ".join(argv))
        return OperatorProcess(
            pod.metadata.name,
            pod.metadata.uid,
            argv,
            metrics_port,
            health_port,
            log_path,
            process,
            kubeconfig,
            notes,
            mounts,
        )
