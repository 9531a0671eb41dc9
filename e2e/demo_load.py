"""The demo's traffic: the shipped Azure conversation trace, replayed by `specpilot loadgen` against each vLLM server.

The tiny CPU model serves 512 tokens of context, so the trace is scaled down before it is replayed: every prompt and
output length divided by LENGTH_SCALE (the trace's P50 of 1,020 prompt + 129 output tokens becomes 128 + 16), the few
requests still longer than the context left out. The arrivals keep their shape; `specpilot loadgen --time-scale`
compresses them. The demo runs the trace in consecutive slices of SLICE_S seconds (each a Mooncake-style JSONL file,
one `specpilot loadgen` run per ready server), so every slice is bounded in time and its TTFT/TPOT/E2E percentiles
are printed as it ends; a server that restarts mid-slice shows up as that slice's errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.bench.replay import AZURE_CONV
from specpilot.bench.trace import TraceRequest, read_trace

LENGTH_SCALE = 8
MAX_MODEL_LEN = 512  # e2e.stack.tiny_speculative_deployment's maxModelLen
TIME_SCALE = 1.0  # the trace's own rate (5.5 requests/s on average), bounded by CONCURRENCY in flight per server
SLICE_S = 20.0  # seconds of (scaled) trace per loadgen run
CONCURRENCY = 4  # requests in flight per server at most: the tiny engine runs maxNumSeqs 8
TIMEOUT_S = 60.0  # a request's whole response
LIMIT_S = SLICE_S * 3 + TIMEOUT_S  # one loadgen run at most: requests beyond CONCURRENCY wait for a slot


def scaled_requests(path: Path = AZURE_CONV) -> list[TraceRequest]:
    """The trace's requests with lengths / LENGTH_SCALE (outputs at least 2 tokens, for a TPOT), those that fit."""
    out = []
    for r in read_trace(path).requests:
        prompt = max(1, round(r.prompt_tokens / LENGTH_SCALE))
        output = max(2, round(r.output_tokens / LENGTH_SCALE))
        if prompt + output <= MAX_MODEL_LEN:
            out.append(TraceRequest(r.at, prompt, output))
    return out


def slices(requests: Sequence[TraceRequest], folder: Path) -> Iterator[Path]:
    """Consecutive SLICE_S-second slices of the trace (after TIME_SCALE) as Mooncake JSONL files, times from each
    slice's start; round again from the start at the end of the trace."""
    if not requests:
        raise ValueError("no requests to replay")
    folder.mkdir(parents=True, exist_ok=True)
    span = SLICE_S / TIME_SCALE
    start, number = 0.0, 0
    while True:
        if start > requests[-1].at:
            start = 0.0
        part = [r for r in requests if start <= r.at < start + span]
        number += 1
        path = folder / f"slice-{number}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"timestamp": round((r.at - start) * 1000), "input_length": r.prompt_tokens,
                            "output_length": r.output_tokens}) + "\n"
                for r in part
            )
        )  # fmt: skip
        yield path
        start += span


@dataclass(frozen=True)
class SliceRun:
    """One `specpilot loadgen` run: the server it drove and its JSON summary (or why there is none)."""

    name: str
    summary: dict[str, Any] | None
    error: str = ""

    def line(self) -> str:
        s = self.summary
        if s is None:
            return f"  loadgen -> {self.name}: no summary ({self.error})"
        text = (
            f"  loadgen -> {self.name}: {s['completed']}/{s['sent']} completed; ms p50/p99 "
            f"TTFT {s['p50_ttft_ms']}/{s['p99_ttft_ms']}, TPOT {s['p50_tpot_ms']}/{s['p99_tpot_ms']}, "
            f"E2E {s['p50_e2e_ms']}/{s['p99_e2e_ms']}"
        )
        errors = s.get("errors") or {}
        if errors:
            text += "; errors " + ", ".join(f"{kind} {e['count']}" for kind, e in errors.items())
        return text


def run_slice(name: str, url: str, model: str, trace: Path, stop: threading.Event) -> SliceRun:
    """`specpilot loadgen` over one slice against one server; stopped early when `stop` is set, and bounded by
    LIMIT_S in any case."""
    argv = [sys.executable, "-m", "specpilot", "loadgen", "--trace", str(trace), "--url", url, "--model", model,
            "--time-scale", f"{TIME_SCALE:g}", "--concurrency", str(CONCURRENCY), "--timeout", f"{TIMEOUT_S:g}",
            "-o", "json"]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        deadline = time.monotonic() + LIMIT_S
        while process.poll() is None and not stop.is_set() and time.monotonic() < deadline:
            stop.wait(0.5)
        if process.poll() is None:
            process.kill()
            process.communicate()
            return SliceRun(name, None, "stopped" if stop.is_set() else f"loadgen ran past {LIMIT_S:g} s")
        out, err = process.communicate()
    try:
        summary = json.loads(out)
    except ValueError:
        tail = (err or out).strip().splitlines()[-1:] or [f"exit {process.returncode}"]
        return SliceRun(name, None, tail[0][:200])
    return SliceRun(name, summary, "") if isinstance(summary, dict) else SliceRun(name, None, "not a JSON object")
