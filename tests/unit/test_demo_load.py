"""The demo's traffic (e2e/demo_load.py): the shipped trace scaled down to the tiny model, in bounded slices."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from e2e import demo_load
from specpilot.bench.trace import TraceRequest, read_trace


def test_the_shipped_trace_scaled_down_fits_the_tiny_model() -> None:
    requests = demo_load.scaled_requests()
    assert 17_000 < len(requests) <= 19_366  # the few longer than 512 tokens after scaling are left out
    assert all(r.prompt_tokens + r.output_tokens <= demo_load.MAX_MODEL_LEN for r in requests)
    assert all(r.output_tokens >= 2 for r in requests)
    outputs = sorted(r.output_tokens for r in requests)
    assert 12 <= outputs[len(outputs) // 2] <= 20  # the trace's P50 of 129 output tokens, / 8


def test_slices_are_consecutive_and_wrap_around(tmp_path: Path) -> None:
    span = demo_load.SLICE_S / demo_load.TIME_SCALE
    requests = [TraceRequest(t, 10, 5) for t in (0.0, 1.0, span + 2.0, 2 * span + 3.0)]
    files = list(itertools.islice(demo_load.slices(requests, tmp_path), 4))
    rows = [[json.loads(line) for line in f.read_text().splitlines()] for f in files]
    assert [[r["timestamp"] for r in part] for part in rows] == [[0, 1000], [2000], [3000], [0, 1000]]
    # each slice is a trace `specpilot loadgen` reads (Mooncake-style JSONL)
    assert read_trace(files[0]).requests == (TraceRequest(0.0, 10, 5), TraceRequest(1.0, 10, 5))
