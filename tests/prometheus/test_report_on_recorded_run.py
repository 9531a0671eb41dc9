"""`specpilot report` against real Prometheus holding a real vLLM CPU run (tests/testdata/vllm-cpu-run.jsonl.gz,
recorded by e2e/report_data.py: speculation with the identical tiny draft, then the same load plain)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from e2e.cluster.fixture import KubeCluster
from e2e.prometheus.fixture import PrometheusServer
from e2e.report_data import (
    DEPLOYMENT,
    NAMESPACE,
    PLAIN_HASH,
    RECORDING,
    SPECULATING_HASH,
    example_cr,
    load_recording,
)
from specpilot.cli.main import main
from tests.prometheus.conftest import Replay

pytestmark = pytest.mark.prometheus
ROOT = Path(__file__).resolve().parents[2]
STEP = 15


def _cr(tmp_path: Path, replay: Replay) -> Path:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(example_cr(replay.switch)))  # the same CR as `python -m e2e.report_data example`
    return path


def _prometheus_quantile(replay: Replay, histogram: str, config_hash: str, q: float, until: int, span: int) -> float:
    """Prometheus' own answer over the same non-overlapping windows (a subquery of per-window increases)."""
    sel = (
        f'{{namespace="{NAMESPACE}",specpilot_dev_deployment="{DEPLOYMENT}",specpilot_dev_config_hash="{config_hash}"}}'
    )
    windows = f"sum_over_time(increase({histogram}_bucket{sel}[{STEP}s])[{span}s:{STEP}s])"
    query = f"histogram_quantile({q}, sum by (le) ({windows}))"
    answer = httpx.get(f"{replay.server.url}/api/v1/query", params={"query": query, "time": until}, timeout=10).json()
    return float(answer["data"]["result"][0]["value"][1])


def test_report_on_a_real_vllm_run(
    replayed_prometheus: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = replayed_prometheus
    out = tmp_path / "report"
    until = datetime.fromtimestamp(replay.end + 30, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = [str(_cr(tmp_path, replay)), "--prometheus", replay.server.url, "--since", "15m", "--until", until]
    assert main(["report", *args, "--step", f"{STEP}s", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    markdown = (out / "report.md").read_text()
    assert f"`{SPECULATING_HASH}` speculating" in markdown
    assert f"`{PLAIN_HASH}` plain" in markdown
    # Acceptance is a real distribution: greedy windows accept everything, sampled ones little.
    row = next(line for line in markdown.splitlines() if line.startswith("| ") and line.count("%") >= 4)
    p10, p50, p90 = (float(cell.strip().rstrip("%")) / 100 for cell in row.split("|")[1:4])
    assert 0 <= p10 < p50 < p90 <= 1
    assert p90 > 0.9  # greedy requests with an identical draft: every draft token accepted
    # Both modes have latency rows and the verdict is one of the comparing ones, stated in the summary.
    assert "| TPOT | speculating |" in markdown
    assert "| TPOT | plain |" in markdown
    assert any(kind in markdown for kind in ("is helping", "is hurting", "No clear difference"))
    assert printed.splitlines()[0] in markdown
    assert "DisableSpeculation: switched off for a baseline" in markdown
    for png in ("acceptance.png", "latency.png", "load.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(data) > 10_000
    # The report's per-mode quantile equals Prometheus' histogram_quantile over the same windows.
    end_s = int(datetime.fromisoformat(until).timestamp()) // STEP * STEP
    expected = _prometheus_quantile(replay, "vllm:request_time_per_output_token_seconds", PLAIN_HASH, 0.5, end_s, 900)
    tpot_row = next(line for line in markdown.splitlines() if line.startswith("| TPOT | plain |"))
    reported_ms = float(tpot_row.split("|")[3].strip().removesuffix(" ms"))
    assert math.isclose(reported_ms, expected * 1000, abs_tol=0.06), (reported_ms, expected * 1000)


@pytest.mark.cluster
def test_report_of_a_live_object_reads_it_from_the_api_server(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    prometheus_binary: Path,
    promtool_binary: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`specpilot report NAME -n NAMESPACE`: the object (and its status' actuations) comes from the real API server;
    the recorded run is replayed with its series moved to this test's namespace."""
    times = load_recording(RECORDING, promtool_binary, tmp_path / "prometheus" / "data", namespace=kube_namespace)
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kube_cluster.wait_established("speculativedeployments.specpilot.dev")
    cr = example_cr(times["switch"])
    status = cr.pop("status")
    cr["metadata"]["namespace"] = kube_namespace
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(cr))
    kube_cluster.kubectl(
        "-n", kube_namespace, "patch", "specdeploy", DEPLOYMENT, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    until = datetime.fromtimestamp(times["end"] + 30, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = tmp_path / "report"
    with PrometheusServer(prometheus_binary, tmp_path / "prometheus", []) as prometheus:
        prometheus.start()
        common = ["--prometheus", prometheus.url, "--since", "15m", "--until", until, "--step", f"{STEP}s"]
        assert main(["report", DEPLOYMENT, "-n", kube_namespace, *common, "-o", str(out)]) == 0
        markdown = (out / "report.md").read_text()
        assert markdown.startswith(f"# specpilot report: {kube_namespace}/{DEPLOYMENT}\n")
        assert f"`{SPECULATING_HASH}` speculating" in markdown
        assert f"`{PLAIN_HASH}` plain" in markdown
        assert "DisableSpeculation: switched off for a baseline" in markdown  # read from the live status
        capsys.readouterr()
        # A name the API server does not know: one clear line, no traceback.
        assert main(["report", "missing", "-n", kube_namespace, *common, "-o", str(tmp_path / "x")]) == 1
        err = capsys.readouterr().err
        assert err == f"error: SpeculativeDeployment {kube_namespace}/missing: the API server answered 404 Not Found\n"
