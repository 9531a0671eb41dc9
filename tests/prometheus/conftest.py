"""Fixtures of the Prometheus tier: the real binary (e2e/prometheus/fixture.py) and the fake vLLM pods."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.prometheus.fixture import PrometheusServer
from e2e.report_data import load_recording
from tests.prometheus.fake_vllm import FakeVllm, Loopback, serve


@pytest.fixture(scope="session")
def loopback() -> Iterator[Loopback]:
    """Four pods: speculating, plain, two engines (data parallel), and one restarting every 4 scrapes."""
    state, server, thread = serve(
        {
            "spec": FakeVllm(),
            "plain": FakeVllm(speculative=False),
            "dp": FakeVllm(engines=("0", "1")),
            "reset": FakeVllm(reset_every=4),
        }
    )
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


# --- issue 11: a real vLLM CPU run replayed into a real Prometheus, with the recording rules backfilled ---
REPLAY = Path(__file__).resolve().parents[1] / "testdata" / "vllm-cpu-run.jsonl.gz"
RULES = Path(__file__).resolve().parents[2] / "charts" / "specpilot" / "rules" / "specpilot.rules.yaml"


@dataclass(frozen=True)
class Replay:
    """Prometheus holding the recorded run (e2e/report_data.py); times are wall-clock seconds after the shift."""

    server: PrometheusServer
    switch: float
    start: float
    end: float


@pytest.fixture(scope="session")
def replayed_prometheus(
    prometheus_binary: Path, promtool_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replay]:
    work = tmp_path_factory.mktemp("replay")
    times = load_recording(REPLAY, promtool_binary, work / "data", ago=120)
    server = PrometheusServer(prometheus_binary, work, []).start()
    try:
        # Recording rules over the replayed range, as Prometheus would have evaluated them live.
        rules_out = work / "rules-blocks"
        done = subprocess.run(
            [str(promtool_binary), "tsdb", "create-blocks-from", "rules", f"--start={int(times['start'])}",
             f"--end={int(times['end']) + 60}", f"--url={server.url}", f"--output-dir={rules_out}",
             "--eval-interval=15s", str(RULES)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        server.stop()
        for block in rules_out.iterdir():
            shutil.move(str(block), str(work / "data" / block.name))
        server.start()
        yield Replay(server, times["switch"], times["start"], times["end"])
    finally:
        server.stop()
