"""Start the real operator (`python -m specpilot run`) as a subprocess, for tests, the benchmark and the demo."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from e2e.waiting import free_port, log_tail, stop_process

CHART_DEPLOYMENT = Path(__file__).resolve().parents[1] / "charts" / "specpilot" / "templates" / "deployment.yaml"
ALLOCATOR_VARIABLES = ("PYTHONMALLOC", "LD_PRELOAD", "MALLOC_CONF", "MALLOC_ARENA_MAX")
GET_JEMALLOC = Path(__file__).resolve().parent / "toolchain" / "get-jemalloc.sh"


def chart_allocator() -> dict[str, str]:
    """The allocator settings the chart gives the operator's container, read from the chart itself, so memory
    figures measured on an operator started here are the ones production gets."""
    text = CHART_DEPLOYMENT.read_text()
    found = {
        m["name"]: m["value"]
        for m in re.finditer(r'- name: (?P<name>\w+)\n\s+value: "?(?P<value>[^"\n]+)"?', text)
        if m["name"] in ALLOCATOR_VARIABLES
    }
    missing = [name for name in ALLOCATOR_VARIABLES if name not in found]
    if missing:
        raise RuntimeError(f"{CHART_DEPLOYMENT}: no env entry for {', '.join(missing)}")
    return found


@functools.cache
def jemalloc_library() -> Path:
    """This machine's copy of the jemalloc the image installs (Debian's libjemalloc2, extracted by the toolchain;
    fetched now if missing). Looked up once per process: every operator a test starts needs it."""
    done = subprocess.run(["bash", str(GET_JEMALLOC)], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise RuntimeError(f"{GET_JEMALLOC} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return Path(lines[-1])


def host_preload(image_path: str) -> str:
    """This machine's copy of a library the image preloads (LD_PRELOAD names the image's path)."""
    if Path(image_path).name != "libjemalloc.so.2":
        raise RuntimeError(f"LD_PRELOAD={image_path}: only the image's jemalloc has a copy on this machine")
    return str(jemalloc_library())


def host_allocator() -> dict[str, str]:
    """The chart's allocator settings for an operator started on this machine: the same variables, with the
    preloaded library the image's path names replaced by this machine's copy of the same library."""
    settings = chart_allocator()
    return {**settings, "LD_PRELOAD": host_preload(settings["LD_PRELOAD"])}


@dataclass
class RunningOperator:
    process: subprocess.Popen[bytes]
    metrics_port: int
    health_port: int
    log_path: Path
    kubeconfig: Path
    namespace: str
    args: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """The operator's own /metrics as {series: value} (labels included in the key)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30).text
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values

    def writes(self, kind: str | None = None) -> float:
        """API write requests the operator sent (children and events; kopf's own CR patches are not counted)."""
        return sum(
            v
            for k, v in self.metrics().items()
            if k.startswith("specpilot_api_writes_total{") and (kind is None or f'kind="{kind}"' in k)
        )

    def stop(self) -> None:
        stop_process(self.process)

    def log_tail(self, lines: int = 80) -> str:
        return log_tail(self.log_path, lines)


def launch_operator(
    kubeconfig: Path,
    namespaces: Sequence[str],
    log_path: Path,
    *,
    tick_seconds: float = 2.0,
    ready_timeout: float = 60.0,
    env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> RunningOperator:
    """Start the operator on loopback ports and wait (bounded) for its liveness endpoint."""
    metrics_port, health_port = free_port(), free_port()
    args = [sys.executable, "-m", "specpilot", "run", "--bind-address", "127.0.0.1"]
    args += [
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(health_port),
        "--tick-seconds",
        str(tick_seconds),
    ]
    for namespace in namespaces:
        args += ["--namespace", namespace]
    args += list(extra_args)
    environment = {**os.environ, **host_allocator(), **(env or {}), "KUBECONFIG": str(kubeconfig)}
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=environment)
    running = RunningOperator(process, metrics_port, health_port, log_path, kubeconfig, ",".join(namespaces), args)
    deadline = time.monotonic() + ready_timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"operator exited {process.returncode}:\n{running.log_tail()}")
        try:
            if httpx.get(f"http://127.0.0.1:{health_port}/healthz", timeout=2).status_code == 200:
                return running
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            running.stop()
            raise TimeoutError(f"operator not live after {ready_timeout:.0f} s:\n{running.log_tail()}")
        time.sleep(0.3)
