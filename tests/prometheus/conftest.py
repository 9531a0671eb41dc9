"""Fixtures of the Prometheus tier: the real binary (e2e/prometheus/fixture.py) and the fake vLLM pods."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.report_data import load_recording
from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from tests.prometheus.fake_vllm import FakeVllm, Loopback, serve

NAMESPACE, DEPLOYMENT = "ml", "chat"  # the scope labels of every fake pod


# A scrape's samples carry its start time but become visible only when it is committed, so queries at "now" can see
# one scrape more in one query than in the previous one. The tests query an instant whose scrapes are all in.
COMMITTED = timedelta(seconds=2)


def committed_instant() -> datetime:
    return datetime.now(UTC) - COMMITTED


def make_spec(version: str = "0.33.0", **acceptance: float) -> SpeculativeDeploymentSpec:
    return parse_spec(
        {
            "engine": {"image": f"vllm/vllm-openai:v{version}", "version": version},
            "target": {"model": "tiny"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "autotune": {
                "mode": "Auto",
                "prometheus": {"url": "http://unused:9090"},
                "window": "6s",
                "scrapeInterval": "1s",
                "interval": "1s",
                "minSamples": {"draftTokens": 100, "requests": 10},
                "batchThreshold": {"tune": False},
                "agreeingEvaluations": 1,
                "stabilization": "0s",
                # the fake pods' first tokens all come within 20 ms (TTFT_OBSERVATIONS): the share query's bucket
                "latency": {"ttftDeadline": "20ms"},
                **({"acceptance": acceptance} if acceptance else {}),
            },
        }
    )


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


@pytest.fixture(scope="module")
def prometheus(prometheus_factory: StartPrometheus, loopback: Loopback) -> PrometheusServer:
    """The real Prometheus scraping every fake pod as deployment ml/chat, config hash cfg-<pod>."""
    jobs = [
        {
            "job_name": f"vllm-{name}",
            "metrics_path": f"/{name}/metrics",
            "static_configs": [
                {
                    "targets": [loopback.address],
                    "labels": {
                        "namespace": NAMESPACE,
                        "specpilot_dev_deployment": DEPLOYMENT,
                        "specpilot_dev_config_hash": f"cfg-{name}",
                        "pod": f"{name}-0",
                    },
                }
            ],
        }
        for name in loopback.pods
    ]
    return prometheus_factory(jobs)


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
        # Recording rules over the replayed range, as Prometheus would have evaluated them live. The replay is only
        # usable once the recorded acceptance series answer: one backfill that left them empty is tried once more,
        # and a second says so here rather than as every panel over them finding no data.
        for attempt in (1, 2):
            notes = _backfill_rules(server, promtool_binary, times, work / f"rules-blocks-{attempt}")
            if _recorded_acceptance(server, times):
                break
        else:
            pytest.fail(f"the recording rules backfilled over the replay answer no acceptance series: {notes}")
        yield Replay(server, times["switch"], times["start"], times["end"])
    finally:
        server.stop()


def _backfill_rules(server: PrometheusServer, promtool: Path, times: dict[str, float], out: Path) -> str:
    """Evaluate the chart's recording rules over the replayed range against `server`, then restart it on the
    resulting blocks; promtool's last words, for a failure message."""
    done = subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "rules", f"--start={int(times['start'])}",
         f"--end={int(times['end']) + 60}", f"--url={server.url}", f"--output-dir={out}",
         "--eval-interval=15s", str(RULES)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    server.stop()
    for block in out.iterdir():
        shutil.move(str(block), str(server.workdir / "data" / block.name))
    server.start()
    return (done.stderr or done.stdout)[-500:]


def _recorded_acceptance(server: PrometheusServer, times: dict[str, float]) -> bool:
    """Does the recorded acceptance series (the rule the dashboard's acceptance panels read) hold data?"""
    answer = httpx.get(
        f"{server.url}/api/v1/query_range",
        params={"query": "namespace_deployment:vllm_spec_decode_acceptance_rate:ratio_rate5m",
                "start": times["start"], "end": times["end"] + 60, "step": "15s"},
        timeout=30,
    ).json()  # fmt: skip
    return answer.get("status") == "success" and bool(answer.get("data", {}).get("result"))
