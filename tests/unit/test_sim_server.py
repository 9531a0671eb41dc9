"""The simulator's HTTP shell, started the way the pod runner starts it (a real process on 127.0.0.1, ~2 s)."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.vllm.load import metric_sum
from e2e.vllm.simulated import SimulatedVllmServer, SimulatorOptions, served_name, simulator_argv
from e2e.waiting import free_port, wait_for
from specpilot.api import v1alpha1
from specpilot.sim.args import SimArgsError, parse_serve_args
from specpilot.sim.main import imitated_version
from specpilot.vllm.dialects import render_command


@pytest.mark.parametrize(
    ("raw", "version", "note"),
    [
        ("0.32.0", "0.32.0", None),
        ("v0.8.5.post1", "0.8.5.post1", None),
        ("0.6.0", "0.6.0", None),
        ("9.9.9", "9.9.9", "vLLM 9.9.9 is newer than the newest version specpilot knows; its /metrics are imitated as "
                           "0.33.0's"),
    ],
)  # fmt: skip
def test_the_imitated_version_says_when_it_is_a_guess(raw: str, version: str, note: str | None) -> None:
    parsed, said = imitated_version(raw)
    assert str(parsed) == version
    assert said == note


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("0.5.4",
         "--vllm-version 0.5.4: older than 0.6.0, the oldest version specpilot knows (known: 0.6.0 to 0.33.0)"),
        ("latest", "--vllm-version: 'latest' is not a vLLM version; expected MAJOR.MINOR.PATCH such as 0.33.0"),
    ],
)  # fmt: skip
def test_a_version_without_known_series_is_refused_by_name(raw: str, message: str) -> None:
    with pytest.raises(SimArgsError) as err:
        imitated_version(raw)
    assert str(err.value) == message


EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def _post(url: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return bytes(resp.read())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_command_line_parses(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if not isinstance(doc, dict) or doc.get("kind") != v1alpha1.KIND:
            continue
        spec = v1alpha1.parse_resource(doc).spec
        rendered = render_command(spec)
        args = parse_serve_args(list(rendered.argv))
        assert args.max_num_seqs == spec.engine.max_num_seqs
        if spec.speculation.enabled:
            assert args.speculation is not None
            assert args.speculation.method == spec.speculation.method.value
            assert args.speculation.schedule == rendered.batch_schedule
        else:
            assert args.speculation is None


def test_pod_command_runs_as_a_simulated_server(tmp_path: Path) -> None:
    pod_command = [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama", "--port", "8000",
        "--max-model-len", "4096", "--max-num-seqs", "64",
        "--speculative-config", '{"method":"eagle3","model":"x","num_speculative_tokens":3}',
    ]  # fmt: skip
    port = free_port()
    argv = simulator_argv(pod_command, port=port, options=SimulatorOptions(time_scale=20.0, startup_seconds=0.0))
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", str(port)]
    assert "8000" not in argv
    with SimulatedVllmServer(
        argv, port=port, served_model_name=served_name(pod_command), log_path=tmp_path / "l"
    ) as srv:
        srv.wait_ready(timeout=60)
        full = json.loads(_post(f"{srv.url}/v1/completions", {"model": "llama", "prompt": "x" * 400, "max_tokens": 40}))
        stream = _post(
            f"{srv.url}/v1/chat/completions",
            {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 30, "stream": True},
        ).decode()
        metrics = srv.metrics()
    assert full["usage"] == {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}
    assert full["choices"][0]["finish_reason"] == "length"
    events = [line.removeprefix("data: ") for line in stream.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert len(text.split()) == 30
    assert len(chunks) < 31  # speculation: several tokens per step
    assert 'vllm:generation_tokens_total{engine="0",model_name="llama"} 70.0' in metrics
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="llama"} 2.0' in metrics
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in metrics


def _gauge(metrics: str, name: str) -> float:
    """The engine-0 value of a gauge or counter in /metrics text."""
    value = metric_sum(metrics, name, engine="0")
    assert value is not None, f"{name} not in /metrics"
    return value


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "full"])
def test_a_client_that_hangs_up_has_its_request_aborted(tmp_path: Path, stream: bool) -> None:
    """vLLM aborts a request whose connection closed (with_cancellation); the simulator must too, or a queue past
    capacity would keep serving clients that left. 4,000 tokens at time scale 1 take ~30 s to generate: the request
    is seen running and generating, the client hangs up, and the batch empties within seconds while the token
    counter stops."""
    pod_command = ["vllm", "serve", "m", "--max-model-len", "8192", "--max-num-seqs", "8"]
    port = free_port()
    argv = simulator_argv(pod_command, port=port, options=SimulatorOptions(time_scale=1.0, startup_seconds=0.0))
    body = {"model": "m", "prompt": "x" * 40, "max_tokens": 4000, "stream": stream}
    with SimulatedVllmServer(argv, port=port, served_model_name="m", log_path=tmp_path / "l") as srv:
        srv.wait_ready(timeout=60)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        if stream:
            response = connection.getresponse()
            assert response.status == 200
            assert response.read(6) == b"data: "  # the first chunk came
        wait_for("the request running", lambda: _gauge(srv.metrics(), "vllm:num_requests_running") == 1, 10, 0.05)
        wait_for("tokens generated", lambda: _gauge(srv.metrics(), "vllm:generation_tokens_total") > 0, 10, 0.05)
        if connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
        wait_for("the batch empty", lambda: _gauge(srv.metrics(), "vllm:num_requests_running") == 0, 5, 0.05)
        generated = _gauge(srv.metrics(), "vllm:generation_tokens_total")
        time.sleep(0.5)
        metrics = srv.metrics()
    assert 0 < generated < 4000
    assert _gauge(metrics, "vllm:generation_tokens_total") == generated  # nothing runs for the client that left
    assert _gauge(metrics, "vllm:num_requests_waiting") == 0
    assert _gauge(metrics, "vllm:kv_cache_usage_perc") == 0  # its KV blocks are free again
    # vLLM 0.32 records no finished-request statistics for a client abort
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0' in metrics
