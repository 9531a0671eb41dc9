"""A real vLLM CPU run as Prometheus data: recorded once, replayed into a real Prometheus by tests in seconds.

`python -m e2e.report_data record OUT.jsonl.gz` starts real Prometheus scraping one real vLLM CPU server every second,
labelled as the operator's PodMonitor labels a pod (namespace, pod, specpilot_dev_deployment,
specpilot_dev_config_hash). Phase 1 serves with speculation (the identical tiny draft, K=3) under a load that
alternates greedy requests (acceptance ~1) and sampled ones (temperature 0.8, acceptance ~0.1), so acceptance is a
real distribution; then the "operator" switches speculation off (the server restarts with a new config hash, as a
rollout would) and phase 2 serves the same load plain. The raw samples of the vLLM series the report, the dashboard
and the rules read are exported with times relative to the switch.

`load_recording()` turns the file into OpenMetrics with the times shifted so the run ends `ago` seconds before
now, backfills it with `promtool tsdb create-blocks-from openmetrics` into a Prometheus data folder, and returns the
wall-clock time of the switch. Real numbers, shifted in time; nothing is synthesised.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

NAMESPACE = "ml"
DEPLOYMENT = "chat"
SPECULATING_HASH = "5f3a9c1e"
PLAIN_HASH = "9d04b7e2"
# The series a report, the dashboard, the rules and the autotuner read (plus histogram _count/_sum).
KEPT = (
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:request_time_per_output_token_seconds_(bucket|count|sum)",
    "vllm:time_to_first_token_seconds_(bucket|count|sum)",
    "vllm:e2e_request_latency_seconds_(bucket|count|sum)",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
)


def _targets(port: int, config_hash: str) -> list[dict[str, Any]]:
    return [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {
                "namespace": NAMESPACE,
                "pod": f"{DEPLOYMENT}-{config_hash}-0",
                "specpilot_dev_deployment": DEPLOYMENT,
                "specpilot_dev_config_hash": config_hash,
            },
        }
    ]


def _load_phase(url: str, seconds: float, log: list[str]) -> None:
    """Alternate 20 s of greedy and 20 s of sampled requests, two in flight, until `seconds` pass."""
    from e2e.vllm.load import run_load

    end = time.monotonic() + seconds
    batch = 0
    while time.monotonic() < end:
        temperature = 0.0 if int((seconds - (end - time.monotonic())) // 20) % 2 == 0 else 0.8
        result = run_load(url, n=6, concurrency=2, temperature=temperature, max_tokens=48, seed_base=batch * 6)
        log.append(f"t={temperature} {result.to_json()}")
        batch += 1


def record(out: Path, *, phase_s: float = 120.0) -> None:
    """Run both phases against real vLLM + Prometheus and write the raw samples (see the module docstring)."""
    from e2e.prometheus.fixture import PrometheusServer, find_prometheus
    from e2e.vllm.serve import running_vllm_server
    from e2e.vllm.venvs import SERVER, ensure_tiny_models, get_venv

    venv = get_venv(SERVER)
    models = ensure_tiny_models(venv.python)
    work = Path(f"/tmp/specpilot-recording-{int(time.time())}")
    work.mkdir(parents=True)
    targets = work / "targets.json"
    targets.write_text("[]")
    scrape = {
        "job_name": "vllm",
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
    }
    log: list[str] = []
    spec = json.dumps({"method": "draft_model", "model": "tiny-llama-draft-same", "num_speculative_tokens": 3})
    with PrometheusServer(find_prometheus(), work / "prom", [scrape]) as prom:
        prom.start()
        with running_vllm_server(["--speculative-config", spec], python=venv.python, models=models) as srv:
            targets.write_text(json.dumps(_targets(srv.port, SPECULATING_HASH)))
            time.sleep(3)
            started = time.time()
            _load_phase(srv.url, phase_s, log)
            time.sleep(3)
        switch = time.time()
        with running_vllm_server([], python=venv.python, models=models) as srv:
            targets.write_text(json.dumps(_targets(srv.port, PLAIN_HASH)))
            time.sleep(3)
            _load_phase(srv.url, phase_s, log)
            time.sleep(3)
        ended = time.time()
        selector = '{job="vllm",__name__=~"' + "|".join(KEPT) + '"}'
        query = urllib.parse.urlencode({"query": f"{selector}[{int(ended - started) + 30}s]", "time": ended})
        with urllib.request.urlopen(f"{prom.url}/api/v1/query?{query}", timeout=60) as response:
            result = json.load(response)["data"]["result"]
    with gzip.open(out, "wt") as fh:
        fh.write(json.dumps({"switch": 0.0, "recordedAt": switch, "load": log}) + "\n")
        for series in sorted(result, key=lambda s: json.dumps(s["metric"], sort_keys=True)):
            labels = {k: v for k, v in series["metric"].items() if k not in ("job", "instance")}
            points = [[round(float(t) - switch, 3), v] for t, v in series["values"]]
            fh.write(json.dumps({"labels": labels, "points": points}, sort_keys=True) + "\n")
    print(f"recorded {len(result)} series, switch after {switch - started:.0f} s, to {out}")


def _read(recording: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header line and the series of a recording (a few MB: read at once)."""
    with gzip.open(recording, "rt") as fh:
        lines = fh.read().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _openmetrics(recording: Path, offset: float, namespace: str = NAMESPACE) -> tuple[str, float, float]:
    """OpenMetrics text with every time moved by `offset` (and the series moved to `namespace`); also the first and
    last sample time."""
    _, rows = _read(recording)
    by_name: dict[str, list[str]] = {}
    first, last = float("inf"), float("-inf")
    for row in rows:
        labels = {**row["labels"], "namespace": namespace}
        name = labels.pop("__name__")
        rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for t, v in row["points"]:
            at = float(t) + offset
            first, last = min(first, at), max(last, at)
            by_name.setdefault(name, []).append(f"{name}{{{rendered}}} {v} {at:.3f}")
    lines = [line for name in sorted(by_name) for line in by_name[name]]  # one family's samples contiguous
    return "\n".join([*lines, "# EOF", ""]), first, last


def load_recording(
    recording: Path, promtool: Path, data_dir: Path, *, ago: float = 120.0, namespace: str = NAMESPACE
) -> dict[str, float]:
    """Backfill the recording into `data_dir` so its last sample is `ago` s old; return switch/start/end times.
    `namespace` relabels the series, for a test whose live SpeculativeDeployment lives in a fresh namespace."""
    _, rows = _read(recording)
    last_relative = max(float(row["points"][-1][0]) for row in rows)
    switch = time.time() - ago - last_relative
    text, first, last = _openmetrics(recording, switch, namespace)
    data_dir.mkdir(parents=True, exist_ok=True)
    source = data_dir.parent / "recording.om"
    source.write_text(text)
    done = subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {done.stderr[-2000:]}")
    return {"switch": switch, "start": first, "end": last}


RECORDING = Path(__file__).resolve().parents[1] / "tests" / "testdata" / "vllm-cpu-run.jsonl.gz"


def example_cr(switch: float) -> dict[str, Any]:
    """The SpeculativeDeployment of the recorded run, with the switch to plain serving as its one actuation."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(switch))
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0", "maxModelLen": 512},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {
                "method": "draft_model",
                "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
                "numSpeculativeTokens": 3,
            },
            "autotune": {"mode": "Off", "scrapeInterval": "1s"},
        },
        "status": {"actuations": [{"at": at, "action": "DisableSpeculation", "reason": "switched off for a baseline"}]},
    }


def example(out: Path, *, recording: Path = RECORDING, step: str = "15s") -> int:
    """`specpilot report` on the recorded run, replayed into real Prometheus: what docs/report-example/ shows."""
    import tempfile

    import yaml

    from e2e.prometheus.fixture import PrometheusServer, find_prometheus, find_promtool
    from specpilot.cli.main import main as specpilot

    work = Path(tempfile.mkdtemp(prefix="specpilot-report-example-"))
    times = load_recording(recording, find_promtool(), work / "data", ago=120)
    cr = work / "chat.yaml"
    cr.write_text(yaml.safe_dump(example_cr(times["switch"])))
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(times["end"] + 30))
    with PrometheusServer(find_prometheus(), work, []) as prometheus:
        prometheus.start()
        args = [str(cr), "--prometheus", prometheus.url, "--since", "15m", "--until", until, "--step", step]
        return specpilot(["report", *args, "-o", str(out)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.report_data", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record a real vLLM CPU run (about 5 minutes)")
    rec.add_argument("out", type=Path)
    rec.add_argument("--phase-seconds", type=float, default=120.0)
    ex = sub.add_parser("example", help="`specpilot report` on the recorded run replayed into real Prometheus")
    ex.add_argument("out", type=Path, help="folder for report.md and the PNGs")
    ex.add_argument("--recording", type=Path, default=RECORDING)
    args = parser.parse_args(argv)
    if args.cmd == "example":
        return example(args.out, recording=args.recording)
    record(args.out, phase_s=args.phase_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
