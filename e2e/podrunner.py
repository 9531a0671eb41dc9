"""Make pods on kwok's fake GPU nodes real: run each vLLM pod's own command line as a local vLLM CPU server.

kwok marks pods Running without running anything. This runner watches the operator's pods (label
app.kubernetes.io/managed-by=specpilot) in one namespace, starts a real `vllm serve` for every running pod from the
pod's *own* container command (model names mapped to the tiny local models, CPU workarounds added by
e2e.vllm.serve.adapt_serve_argv), stops it when the pod goes away, and keeps a Prometheus file_sd target list
whose labels are what a PodMonitor would give the series (namespace, pod, specpilot_dev_deployment,
specpilot_dev_config_hash). So the operator's rendered command line is what actually serves, and Prometheus scrapes
real vLLM metrics per pod and per config hash.

The runner also owns the status of the pods it runs, as a kubelet would (``own_status=True``, the default): it labels
its namespace ``specpilot.test/status-owner=podrunner``; the cluster's admission policy then marks every new pod there
(annotation of the same name) and kwok, seeing the mark, only makes such a pod Running with containers not Ready
(e2e/cluster/kwok-podrunner-stage.yaml). The runner then reports its real server: Ready only while ``/health``
answers, a process that exits as a terminated container that is restarted with a kubelet's back-off (first restart
at once, then ``restart_backoff_s`` doubling up to ``max_restart_backoff_s``; ``CrashLoopBackOff`` while waiting),
``restartCount`` and ``lastState.terminated`` (exit code) as a kubelet keeps them. So a Deployment's availability is
the real one, and a command line vLLM refuses never becomes available.

Tests can also switch the local folder a model name maps to while the runner runs (``remap_draft``): servers started
afterwards (new pods, restarts) use the new folder; ``restart_server`` and ``delete_pods`` make that happen now.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.vllm.serve import VllmServer, adapt_serve_argv
from e2e.vllm.simulated import SimulatedVllmServer, SimulatorOptions, served_name, simulator_argv
from e2e.waiting import free_port

log = logging.getLogger("podrunner")
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=specpilot"
STATUS_OWNER = "specpilot.test/status-owner"
"""Namespace label (set by the runner) and pod annotation (set by the cluster's admission policy) that hand a pod's
status to the pod runner instead of kwok (e2e/cluster/pod-status-owner.yaml)."""
STATUS_OWNER_VALUE = "podrunner"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RunningPod:
    name: str
    uid: str
    labels: dict[str, str]
    server: VllmServer
    ready: bool = False
    failed: str | None = None
    notes: list[str] = field(default_factory=list)
    # What a kubelet reports about the pod's (first) container; written to pods/status when `owned`.
    owned: bool = False
    command: list[str] = field(default_factory=list)
    container: str = ""
    image: str = ""
    restart_count: int = 0
    started: bool = False
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    ready_since: str = field(default_factory=_now)
    starts: int = 0
    restart_requested: bool = False
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_report: dict[str, Any] | None = None


class PodRunner:
    """Reconcile local vLLM processes with the pods the API server says are running (poll every `period`)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        *,
        python: Path,
        model_map: Mapping[str, str | Path],
        default_model: Path,
        default_draft: Path,
        targets_file: Path,
        log_dir: Path,
        period: float = 1.0,
        startup_timeout: float = 300.0,
        own_status: bool = True,
        restart_backoff_s: float = 10.0,
        max_restart_backoff_s: float = 300.0,
        simulator: SimulatorOptions | None = None,
    ) -> None:
        self.namespace = namespace
        self.simulator = simulator  # set: pods run `specpilot simulate` with their command line instead of vLLM
        self.python = python
        self.model_map = dict(model_map)
        self.default_model = default_model
        self.default_draft = default_draft
        self.targets_file = targets_file
        self.log_dir = log_dir
        self.period = period
        self.startup_timeout = startup_timeout
        self.pods: dict[str, RunningPod] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))  # type: ignore[no-untyped-call]
        self._lock = threading.RLock()  # RLock: _launch runs under it and reads the model map
        self._targets_lock = threading.Lock()
        self.own_status = own_status
        self.restart_backoff_s = restart_backoff_s
        self.max_restart_backoff_s = max_restart_backoff_s
        if own_status:
            self.claim_namespace()
        self.write_targets()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PodRunner:
        self._thread = threading.Thread(target=self._loop, name="podrunner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            stopping = list(self.pods.values())
            self.pods.clear()  # first, so a server still starting knows it was stopped on purpose
            for pod in stopping:
                self._stop_pod(pod)
        self.write_targets()

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ reconcile

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:  # the runner must outlive API hiccups; the next pass retries
                log.exception("pod runner pass failed")
            self._stop.wait(self.period)

    def sync_once(self) -> None:
        listing: Any = self._api.list_namespaced_pod(self.namespace, label_selector=MANAGED_SELECTOR)
        wanted: dict[str, Any] = {}
        pod: Any
        for pod in listing.items:
            if pod.metadata.deletion_timestamp is None and pod.status is not None and pod.status.phase == "Running":
                wanted[pod.metadata.name] = pod
        with self._lock:
            for name in [n for n in self.pods if n not in wanted]:
                log.info("pod %s gone: stopping its vLLM server", name)
                self._stop_pod(self.pods.pop(name))
            for name, pod in wanted.items():
                if name not in self.pods:
                    self.pods[name] = self._launch(pod)
        self.write_targets()

    def _launch(self, pod: Any) -> RunningPod:
        container = pod.spec.containers[0]
        annotations = pod.metadata.annotations or {}
        name, command, port = pod.metadata.name, list(container.command or []), free_port()
        failed: str | None = None
        try:
            server, notes = self._new_server(name, command, port)
        except ValueError as err:  # a command line the runner cannot map to local models: the container cannot start
            server, notes, failed = VllmServer([], python=self.python, port=port), [], str(err)
        running = RunningPod(
            name,
            pod.metadata.uid,
            dict(pod.metadata.labels or {}),
            server,
            notes=notes,
            owned=self.own_status and annotations.get(STATUS_OWNER) == STATUS_OWNER_VALUE,
            command=command,
            container=container.name,
            image=container.image or "",
        )
        if self.own_status and not running.owned:
            log.warning(
                "pod %s has no %s annotation: kwok reports it Ready, whatever its server does", name, STATUS_OWNER
            )
        if failed is not None:
            running.failed = f"cannot run the pod's command: {failed}"
            running.state = {"waiting": {"reason": "CreateContainerConfigError", "message": failed}}
            log.error("pod %s: %s", name, running.failed)
            self._report(running)
            return running
        server.start()
        threading.Thread(target=self._supervise, args=(running,), name=f"pod-{name}", daemon=True).start()
        log.info("pod %s: started vLLM on 127.0.0.1:%d", name, port)
        return running

    def _new_server(self, pod_name: str, command: list[str], port: int) -> tuple[VllmServer, list[str]]:
        """A (not yet started) server for a pod's command with the model map as it is now, and the adapter's notes."""
        log_path = self.log_dir / f"{pod_name}.log"
        if log_path.exists():  # like `kubectl logs --previous`: the last container's log is kept
            log_path.replace(self.log_dir / f"{pod_name}.previous.log")
        if self.simulator is not None:
            simulated = SimulatedVllmServer(
                simulator_argv(command, port=port, options=self.simulator),
                port=port,
                served_model_name=served_name(command),
                log_path=log_path,
            )
            return simulated, [f"simulated ({self.simulator.preset})"]
        with self._lock:
            mapping = dict(self.model_map)
        adapted = adapt_serve_argv(
            command, mapping, port=port, default_model=self.default_model, default_draft=self.default_draft
        )
        server = VllmServer(
            adapted.args, python=self.python, port=port, served_model_name=adapted.served_model_name, log_path=log_path
        )
        return server, list(adapted.notes)

    def _stop_pod(self, pod: RunningPod) -> None:
        pod.stopping.set()  # first: the pod's supervisor starts no new server from now on
        with pod.lock:
            pod.server.stop()
            pod.server.cleanup()

    # ------------------------------------------------------------------ one pod, as a kubelet runs it

    def _supervise(self, pod: RunningPod) -> None:
        """Run the pod's container like a kubelet: readiness from /health, exits reported, restarts with back-off."""
        backoff = 0.0  # a kubelet restarts a crashed container at once the first time, then backs off
        while not pod.stopping.is_set():
            exit_code, reason, was_ready = self._watch_server(pod)
            if pod.stopping.is_set():
                return
            requested, pod.restart_requested = pod.restart_requested, False
            terminated = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                    "startedAt": pod.state.get("running", {}).get("startedAt", _now()),
                    "finishedAt": _now(),
                }
            }
            if pod.ready:
                pod.ready_since = _now()
            pod.ready = pod.started = False
            pod.state = terminated
            if was_ready:
                backoff = 0.0  # simplification of the kubelet's rule (reset after a long enough good run)
            if not requested:
                pod.failed = f"vLLM exited with code {exit_code}; log {pod.server.log_path}:\n{pod.server.log_tail(15)}"
                log.error("pod %s: vLLM exited with code %s", pod.name, exit_code)
            self._report(pod)
            self.write_targets()
            if not requested and backoff > 0:
                pod.last_state = terminated
                pod.state = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff:.0f}s restarting failed container={pod.container} "
                        f"pod={pod.name}_{self.namespace}({pod.uid})",
                    }
                }
                self._report(pod)
                if pod.stopping.wait(backoff):
                    return
            if not requested:
                backoff = min(max(backoff * 2, self.restart_backoff_s), self.max_restart_backoff_s)
            try:
                server, pod.notes = self._new_server(pod.name, pod.command, pod.server.port)
            except ValueError as err:  # only if the model map changed under it
                pod.failed = f"cannot run the pod's command: {err}"
                pod.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
                self._report(pod)
                return
            with pod.lock:
                if pod.stopping.is_set():
                    server.cleanup()
                    return
                pod.server.cleanup()
                pod.server = server
                server.start()
            pod.restart_count += 1
            pod.last_state = terminated
            log.info("pod %s: vLLM restarted (restart %d)", pod.name, pod.restart_count)

    def _watch_server(self, pod: RunningPod) -> tuple[int, str | None, bool]:
        """Report the running server until its process ends: (exit code, reason if not a plain exit, was it ready)."""
        server = pod.server
        started = time.monotonic()
        pod.state = {"running": {"startedAt": _now()}}
        pod.ready = pod.started = False
        self._report(pod)
        reason: str | None = None
        while not pod.stopping.is_set():
            proc = server.proc
            if proc is None or proc.poll() is not None:
                break
            if pod.restart_requested:
                reason = "Restarted"
                break
            if not pod.started and time.monotonic() - started > self.startup_timeout:
                log.error("pod %s: vLLM not healthy after %.0f s: stopping it", pod.name, self.startup_timeout)
                reason = "StartupProbeFailed"
                break
            healthy = self._healthy(server)
            if healthy != pod.ready:
                pod.ready, pod.ready_since = healthy, _now()
                if healthy:
                    pod.started, pod.failed = True, None
                    log.info("pod %s: vLLM ready after %.0f s", pod.name, time.monotonic() - started)
                self._report(pod)
                self.write_targets()
            pod.stopping.wait(self.period)
        was_ready = pod.started
        with pod.lock:
            rc = server.stop()  # also reaps what the process left in its group, and closes the log
        rc = 0 if rc is None else rc
        return (128 - rc if rc < 0 else rc), reason, was_ready  # killed by signal N: 128 + N, as a runtime reports

    @staticmethod
    def _healthy(server: VllmServer) -> bool:
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2.0) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _report(self, pod: RunningPod) -> None:
        """Write the pod's status as a kubelet would (phase stays Running; Ready follows the container)."""
        if not pod.owned:
            return
        reason = (
            {}
            if pod.ready
            else {
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{pod.container}]",
            }
        )
        conditions = [
            {"type": kind, "status": "True" if pod.ready else "False", "lastTransitionTime": pod.ready_since, **reason}
            for kind in ("ContainersReady", "Ready")
        ]
        container_status: dict[str, Any] = {
            "name": pod.container,
            "image": pod.image,
            "imageID": "",
            "ready": pod.ready,
            "started": pod.started,
            "restartCount": pod.restart_count,
            "state": pod.state,
            "lastState": pod.last_state,
        }
        proc = pod.server.proc
        if "running" in pod.state and proc is not None:
            container_status["containerID"] = f"podrunner://{proc.pid}"
        body = {"status": {"phase": "Running", "conditions": conditions, "containerStatuses": [container_status]}}
        if body == pod.last_report:
            return
        try:
            self._api.patch_namespaced_pod_status(
                pod.name, self.namespace, body, _content_type="application/strategic-merge-patch+json"
            )
            pod.last_report = body
        except ApiException as err:
            if err.status != 404:  # a pod deleted meanwhile has no status to report
                log.warning("pod %s: status write failed: %s", pod.name, err.reason)

    # ------------------------------------------------------------------ what tests change

    def claim_namespace(self) -> None:
        """Label the namespace so that pods created in it from now on have their status reported by this runner."""
        self._api.patch_namespace(
            self.namespace,
            {"metadata": {"labels": {STATUS_OWNER: STATUS_OWNER_VALUE}}},
            _content_type="application/merge-patch+json",
        )

    def remap_draft(self, name: str, folder: str | Path) -> str | Path | None:
        """Map model name `name` (as a pod's command names a draft, or any model) to local folder `folder`.

        Servers started from now on use it: new pods, restarts after a crash, `restart_server`, `delete_pods`.
        Running servers keep what they loaded. Returns the previous folder (None if the name was unmapped).
        """
        if not (Path(folder) / "config.json").is_file():
            raise ValueError(f"remap_draft({name!r}): {folder} is not a model folder (no config.json)")
        with self._lock:
            previous = self.model_map.get(name)
            self.model_map[name] = folder
        log.info("model %s now maps to %s (was %s)", name, folder, previous)
        return previous

    def restart_server(self, pod_name: str) -> None:
        """Restart one pod's server now, with the model map as it is now (a container restart: restartCount + 1).

        The pod stays; it is not Ready until the new server's /health answers.
        """
        with self._lock:
            pod = self.pods.get(pod_name)
        if pod is None:
            raise KeyError(f"no running pod {pod_name!r} in {self.namespace} (running: {sorted(self.pods)})")
        pod.restart_requested = True

    def delete_pods(self, deployment: str | None = None) -> list[str]:
        """Delete the runner's pods (of one specpilot Deployment, or all): their controller creates new ones, whose
        servers start with the model map as it is now. Returns the names deleted."""
        selector = MANAGED_SELECTOR + (f",specpilot.dev/deployment={deployment}" if deployment else "")
        listing: Any = self._api.list_namespaced_pod(self.namespace, label_selector=selector)
        names = [p.metadata.name for p in listing.items if p.metadata.deletion_timestamp is None]
        for name in names:
            with contextlib.suppress(ApiException):
                self._api.delete_namespaced_pod(name, self.namespace)
        return names

    # ------------------------------------------------------------------ what others read

    def write_targets(self) -> None:
        """Prometheus file_sd: one target per ready server, labelled like a PodMonitor would label it.

        Threads call this (a server turning ready, the sync loop, stop): one writer at a time, from reading the pods
        to the rename, so no rename finds its temporary file moved by another and no older list lands last.
        """
        with self._targets_lock:
            with self._lock:
                groups = [
                    {
                        "targets": [f"127.0.0.1:{pod.server.port}"],
                        "labels": {
                            "namespace": self.namespace,
                            "pod": pod.name,
                            "specpilot_dev_deployment": pod.labels.get("specpilot.dev/deployment", ""),
                            "specpilot_dev_config_hash": pod.labels.get("specpilot.dev/config-hash", ""),
                        },
                    }
                    for pod in self.pods.values()
                    if pod.ready
                ]
            tmp = self.targets_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups, indent=1))
            tmp.replace(self.targets_file)  # atomic: Prometheus never reads half a file

    def endpoints(self, deployment: str | None = None) -> dict[str, str]:
        """Base URLs of ready servers by pod name (the test's and demo's stand-in for the Service)."""
        with self._lock:
            return {
                pod.name: pod.server.url
                for pod in self.pods.values()
                if pod.ready and (deployment is None or pod.labels.get("specpilot.dev/deployment") == deployment)
            }

    def failures(self) -> dict[str, str]:
        with self._lock:
            return {pod.name: pod.failed for pod in self.pods.values() if pod.failed}


def file_sd_scrape_config(targets_file: Path, interval: str = "1s", job_name: str = "vllm-pods") -> dict[str, Any]:
    """The scrape job that reads the runner's targets (for e2e.prometheus.fixture.PrometheusServer); a second
    runner's job needs its own `job_name` (Prometheus refuses duplicates)."""
    return {
        "job_name": job_name,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
    }
