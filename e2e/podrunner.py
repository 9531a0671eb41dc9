"""Make pods on kwok's fake GPU nodes real: run each vLLM pod's own command line as a local vLLM CPU server.

kwok marks pods Running without running anything. This runner watches the operator's pods (label
app.kubernetes.io/managed-by=specpilot) in one namespace, starts a real `vllm serve` for every running pod from the
pod's *own* container command (model names mapped to the tiny local models, CPU workarounds added by
e2e.vllm.serve.adapt_serve_argv), stops it when the pod goes away, and keeps a Prometheus file_sd target list
whose labels are what a PodMonitor would give the series (namespace, pod, specpilot_dev_deployment,
specpilot_dev_config_hash). So the operator's rendered command line is what actually serves, and Prometheus scrapes
real vLLM metrics per pod and per config hash.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from e2e.vllm.serve import VllmServer, VllmServerError, adapt_serve_argv
from e2e.vllm.simulated import SimulatedVllmServer, SimulatorOptions, served_name, simulator_argv
from e2e.waiting import free_port

log = logging.getLogger("podrunner")
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=specpilot"


@dataclass
class RunningPod:
    name: str
    uid: str
    labels: dict[str, str]
    server: VllmServer
    ready: bool = False
    failed: str | None = None
    notes: list[str] = field(default_factory=list)


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
        simulator: SimulatorOptions | None = None,
    ) -> None:
        self.namespace = namespace
        self.python = python
        self.model_map = dict(model_map)
        self.default_model = default_model
        self.default_draft = default_draft
        self.targets_file = targets_file
        self.log_dir = log_dir
        self.period = period
        self.startup_timeout = startup_timeout
        self.simulator = simulator  # set: pods run `specpilot simulate` with their command line instead of vLLM
        self.pods: dict[str, RunningPod] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()
        self._targets_lock = threading.Lock()
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
                pod.server.stop()
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
                self.pods.pop(name).server.stop()
            for name, pod in wanted.items():
                if name not in self.pods:
                    self.pods[name] = self._launch(pod)
        self.write_targets()

    def _launch(self, pod: Any) -> RunningPod:
        command = list(pod.spec.containers[0].command or [])
        port = free_port()
        if self.simulator is not None:
            return self._start(pod, SimulatedVllmServer(
                simulator_argv(command, port=port, options=self.simulator), port=port,
                served_model_name=served_name(command), log_path=self.log_dir / f"{pod.metadata.name}.log",
            ), [f"simulated ({self.simulator.preset})"])  # fmt: skip
        adapted = adapt_serve_argv(
            command, self.model_map, port=port, default_model=self.default_model, default_draft=self.default_draft
        )
        server = VllmServer(
            adapted.args,
            python=self.python,
            port=port,
            served_model_name=adapted.served_model_name,
            log_path=self.log_dir / f"{pod.metadata.name}.log",
        )
        return self._start(pod, server, list(adapted.notes))

    def _start(self, pod: Any, server: VllmServer, notes: list[str]) -> RunningPod:
        running = RunningPod(pod.metadata.name, pod.metadata.uid, dict(pod.metadata.labels or {}), server)
        running.notes = notes
        server.start()
        threading.Thread(target=self._await_ready, args=(running,), daemon=True).start()
        kind = "the simulator" if isinstance(server, SimulatedVllmServer) else "vLLM"
        log.info("pod %s: started %s on 127.0.0.1:%d", running.name, kind, server.port)
        return running

    def _await_ready(self, pod: RunningPod) -> None:
        try:
            pod.server.wait_ready(timeout=self.startup_timeout)
            pod.ready = True
            log.info("pod %s: vLLM ready after %.0f s", pod.name, pod.server.startup_s or 0)
        except VllmServerError as err:
            pod.failed = str(err)
            log.error("pod %s: vLLM failed: %s", pod.name, err)
        except (AttributeError, RuntimeError):
            if self.pods.get(pod.name) is pod:
                raise
            return  # the pod went away (and its server was stopped) while the server was still starting
        self.write_targets()

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


def file_sd_scrape_config(targets_file: Path, interval: str = "1s") -> dict[str, Any]:
    """The scrape job that reads the runner's targets (for e2e.prometheus.fixture.PrometheusServer)."""
    return {
        "job_name": "vllm-pods",
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
    }
