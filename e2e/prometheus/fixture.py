"""Run the real Prometheus binary for tests: loopback only, a throwaway TSDB, bounded start and stop.

The binary comes from Debian's `prometheus` package, extracted, never installed (its postinst would start a daemon
on every interface). Lookup order: $SPECPILOT_PROMETHEUS_BIN; the toolchain layout
`${SPECPILOT_CACHE:-$HOME/.cache/specpilot}/prometheus-<deb version>/bin/prometheus` written by
e2e/toolchain/get-prometheus.sh; `prometheus` on PATH; else fetch it the same way the toolchain script does.

Use from a conftest: `from e2e.prometheus.fixture import prometheus_factory`; each test calls
`prometheus_factory(scrape_configs)` and gets a started `PrometheusServer`; all are stopped at session end.
Set SPECPILOT_SKIP_PROMETHEUS=1 to skip the tier explicitly; without it a missing binary is a failure, so an
empty run can never pass for a green one.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.waiting import free_port, log_tail, stop_process

PROMETHEUS_DEB_VERSION = os.environ.get("PROMETHEUS_DEB_VERSION", "2.42.0+ds-5+deb12u1")
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parents[2]


class PrometheusUnavailable(RuntimeError):
    """No Prometheus binary could be found or fetched."""


def cache_dir() -> Path:
    explicit = os.environ.get("SPECPILOT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specpilot"


def _toolchain_dir() -> Path:
    return cache_dir() / f"prometheus-{PROMETHEUS_DEB_VERSION.replace('+', '_')}"


def find_prometheus(*, fetch: bool = True) -> Path:
    """Locate (or fetch once) the Prometheus binary."""
    explicit = os.environ.get("SPECPILOT_PROMETHEUS_BIN")
    if explicit:
        path = Path(explicit)
        if not os.access(path, os.X_OK):
            raise PrometheusUnavailable(f"SPECPILOT_PROMETHEUS_BIN={explicit} is not an executable file")
        return path
    candidate = _toolchain_dir() / "bin" / "prometheus"
    if os.access(candidate, os.X_OK):
        return candidate
    on_path = shutil.which("prometheus")
    if on_path:
        return Path(on_path)
    if not fetch:
        raise PrometheusUnavailable(f"no prometheus binary at {candidate} or on PATH")
    return _fetch()


def _fetch() -> Path:
    """Same recipe as e2e/toolchain/get-prometheus.sh: `apt-get download` + `dpkg-deb -x`, bin/ under the cache."""
    script = REPO / "e2e" / "toolchain" / "get-prometheus.sh"
    if script.exists():
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600, check=False)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines and os.access(Path(lines[-1]) / "prometheus", os.X_OK):
            return Path(lines[-1]) / "prometheus"
        raise PrometheusUnavailable(f"{script} failed: {done.stderr.strip()[-500:]}")
    target = _toolchain_dir() / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # apt's _apt sandbox user must be able to write here
        download = ["apt-get", "download", f"prometheus={PROMETHEUS_DEB_VERSION}"]
        got = subprocess.run(download, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
        if got.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300, check=False)
            got = subprocess.run(download, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)
        debs = list(Path(tmp).glob("prometheus_*.deb"))
        if got.returncode != 0 or not debs:
            raise PrometheusUnavailable(
                f"apt-get download prometheus={PROMETHEUS_DEB_VERSION} failed: {got.stderr[-500:]}"
            )
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(Path(tmp) / "x")], check=True, timeout=300)
        staging = target.with_name("bin.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for tool in ("prometheus", "promtool"):
            shutil.copy2(Path(tmp) / "x" / "usr" / "bin" / tool, staging / tool)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target / "prometheus"


class PrometheusServer:
    """One Prometheus process on 127.0.0.1 with its own config and TSDB directory."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        scrape_configs: list[dict[str, Any]],
        *,
        scrape_interval: str = "1s",
        web_config: dict[str, Any] | None = None,
        ca_file: Path | None = None,
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.scrape_configs = scrape_configs
        self.scrape_interval = scrape_interval
        self.web_config = web_config
        self.ca_file = ca_file
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        scheme = "https" if self.web_config and "tls_server_config" in self.web_config else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,  # must not exceed the interval (default 10s would)
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": self.scrape_configs,
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        argv = [
            str(self.binary),
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]
        if self.web_config is not None:
            (self.workdir / "web.yml").write_text(yaml.safe_dump(self.web_config))
            argv.append(f"--web.config.file={self.workdir / 'web.yml'}")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout_s:.0f}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log, lines)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.process is not None:
            stop_process(self.process, timeout_s)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


StartPrometheus = Callable[..., PrometheusServer]


def find_promtool() -> Path:
    """promtool from the same Debian package as the Prometheus binary (get-prometheus.sh extracts both)."""
    explicit = os.environ.get("SPECPILOT_PROMTOOL_BIN")
    candidate = Path(explicit) if explicit else find_prometheus().with_name("promtool")
    if not os.access(candidate, os.X_OK):
        raise PrometheusUnavailable(f"no promtool next to the Prometheus binary ({candidate}); rerun get-prometheus.sh")
    return candidate


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    if os.environ.get("SPECPILOT_SKIP_PROMETHEUS") == "1":
        pytest.skip("SPECPILOT_SKIP_PROMETHEUS=1")
    return find_prometheus()


@pytest.fixture(scope="session")
def promtool_binary(prometheus_binary: Path) -> Path:
    return find_promtool()


@pytest.fixture(scope="session")
def prometheus_factory(prometheus_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartPrometheus]:
    """Start Prometheus instances with given scrape configs; every one is stopped when the session ends."""
    started: list[PrometheusServer] = []

    def start(scrape_configs: list[dict[str, Any]], **kwargs: Any) -> PrometheusServer:
        server = PrometheusServer(prometheus_binary, tmp_path_factory.mktemp("prometheus"), scrape_configs, **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
