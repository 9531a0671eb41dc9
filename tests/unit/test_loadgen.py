"""`specpilot loadgen`: a trace replayed against the simulator's OpenAI-compatible server (a real process)."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.vllm.load import metric_sum
from e2e.vllm.serve import VllmServer
from e2e.vllm.simulated import SimulatedVllmServer, SimulatorOptions, simulator_argv
from e2e.waiting import free_port
from specpilot.bench.loadgen import Result, planned, summary
from specpilot.bench.replay import AZURE_CONV
from specpilot.bench.trace import TraceRequest
from specpilot.cli.main import main as cli_main


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The simulator at 20x speed, 4096 tokens of context, 16 sequences at a time."""
    command = ["vllm", "serve", "m", "--max-model-len", "4096", "--max-num-seqs", "16"]
    port = free_port()
    argv = simulator_argv(command, port=port, options=SimulatorOptions(time_scale=20.0, startup_seconds=0.0))
    log = tmp_path_factory.mktemp("sim") / "log"
    with SimulatedVllmServer(argv, port=port, served_model_name="m", log_path=log) as srv:
        srv.wait_ready(timeout=60)
        yield srv


def _successes(srv: VllmServer) -> float:
    value = metric_sum(srv.metrics(), "vllm:request_success_total", engine="0")
    assert value is not None
    return value


def _slice(tmp_path: Path, rows: int) -> Path:
    """The first `rows` requests of the shipped Azure trace, those that fit 4096 tokens of context."""
    lines = gzip.decompress(AZURE_CONV.read_bytes()).decode().splitlines()
    fitting = [x for x in lines[1:] if int(x.split(",")[1]) + int(x.split(",")[2]) <= 4096][:rows]
    path = tmp_path / "slice.csv"
    path.write_text("\n".join([lines[0], *fitting]) + "\n")
    return path


def test_a_trace_slice_is_delivered_completely(
    server: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every request of the slice completes, at its forced length: the success counter rises by exactly that many."""
    before = _successes(server)
    code = cli_main(["loadgen", "--trace", str(_slice(tmp_path, 40)), "--url", server.url, "--time-scale", "0.02",
                     "--concurrency", "8", "-o", "json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (out["sent"], out["completed"], out["failed"], out["short_outputs"]) == (40, 40, 0, 0)
    assert _successes(server) - before == 40
    assert 0 < out["p50_ttft_ms"] <= out["p99_ttft_ms"] < out["p99_e2e_ms"]
    assert out["p50_tpot_ms"] > 0
    assert out["model"] == "m"  # from /v1/models


def test_failures_are_counted_by_kind(server: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A request the server refuses (longer than its context) is an error with the server's message; the rest
    completes, and the exit status says that something failed."""
    trace = tmp_path / "mixed.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 20}\n'
                     '{"timestamp": 10, "input_length": 5000, "output_length": 20}\n')  # fmt: skip
    before = _successes(server)
    code = cli_main(["loadgen", "--trace", str(trace), "--url", server.url, "--model", "m", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert (out["sent"], out["completed"], out["failed"]) == (2, 1, 1)
    assert out["errors"]["HTTP 400"]["count"] == 1
    assert "maximum context length" in out["errors"]["HTTP 400"]["first"]
    assert _successes(server) - before == 1


def test_nothing_listening_is_a_connection_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n')
    url = f"http://127.0.0.1:{free_port()}"
    assert cli_main(["loadgen", "--trace", str(trace), "--url", url, "--model", "m", "-o", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["errors"]["connection"]["count"] == 1
    assert cli_main(["loadgen", "--trace", str(trace), "--url", url]) == 2  # no --model, no /v1/models
    assert capsys.readouterr().err.startswith(f"error: {url}/v1/models: ConnectError")


def _read_request(conn: socket.socket) -> None:
    """The whole request (headers, then Content-Length bytes of body), so closing after the answer is a clean close."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
    while len(body) < length:
        body += conn.recv(65536)


@pytest.fixture
def cutting_server() -> Iterator[str]:
    """A server that streams two token events of a completion, then closes the connection without [DONE] (as a
    vLLM that aborts its requests on SIGTERM does); one request per connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    event = json.dumps({"choices": [{"index": 0, "text": "x"}]})

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                _read_request(conn)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                conn.sendall(head + f"data: {event}\n\ndata: {event}\n\n".encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_a_stream_cut_before_done_is_a_failure_not_a_completion(
    cutting_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tokens of twenty, then the connection closes: a failed request, never one completed at the forced length."""
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 20}\n')
    code = cli_main(["loadgen", "--trace", str(trace), "--url", cutting_server, "--model", "m", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert (out["sent"], out["completed"], out["failed"]) == (1, 0, 1)
    assert out["errors"]["stream cut"]["count"] == 1, out["errors"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "ftp://x"], "error: --url: 'ftp://x' is not an http:// or https:// URL\n"),
        (["--url", "http://127.0.0.1:9"], "error: bad.csv:1:1: unknown trace header 'a,b'"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert cli_main(["loadgen", "--trace", str(bad), "--model", "m", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_plan_scales_caps_and_limits() -> None:
    trace = [TraceRequest(float(t), 10, 5) for t in range(10)]
    assert [r.at for r in planned(trace, 0.5, None, None)] == [t / 2 for t in range(10)]
    assert [r.at for r in planned(trace, 0.5, 2.0, None)] == [0.0, 0.5, 1.0, 1.5]
    assert len(planned(trace, 1.0, None, 3)) == 3


def test_summary_percentiles_and_errors() -> None:
    ok = [Result(i, 0.0, True, ttft_s=i / 1000, tpot_s=0.01, e2e_s=1.0, tokens=5, expected_tokens=5)
          for i in range(1, 101)]  # fmt: skip
    short = Result(101, 0.0, True, 0.5, 0.01, 1.0, tokens=3, expected_tokens=5)
    failed = [Result(102, 0.0, False, error="HTTP 400: too long"), Result(103, 0.0, False, error="HTTP 400: again")]
    s = summary([*ok, short, *failed], 1.0)
    assert (s["sent"], s["completed"], s["failed"], s["short_outputs"]) == (103, 101, 2, 1)
    assert (s["p50_ttft_ms"], s["p99_ttft_ms"], s["p99_tpot_ms"]) == (51.0, 100.0, 10.0)
    assert s["errors"] == {"HTTP 400": {"count": 2, "first": "HTTP 400: too long"}}
