"""`make demo`, the batch-threshold story: a simulated Llama-3.3-70B on 4xH100 under a load ramp.

No CI machine runs a 70B model, so the pod runner starts `specpilot simulate --preset llama70b-4xh100` from the pod's
own command line instead of vLLM (e2e/vllm/simulated.py: the same /metrics series vLLM 0.32.0 exports, the behaviour
from the calibrated cost model, slowed down so a few real requests per second are a batch of ~200 in simulated
time). Real Prometheus scrapes it; the operator decides from those series exactly as for real vLLM, pricing steps
with the `llama70b-4xh100` cost profile it picks from the spec (70.6B parameters from the catalog, TP 4, 80 GiB GPUs;
costprofile.py). The story: at low load the fit finds the configured K = 4 already the best at small batches and
keeps it (no rollout); load ramping past the crossover (~180 running) makes the fit install a batch-size schedule
that lowers K at large batches (one rollout; the SCHEDULE column changes; the Threshold column, the first batch size
with K = 0, stays empty: this drafter pays at every batch size up to maxNumSeqs), and the engine then drafts ~1 token
per draft; load falling raises K again inside the engine (back to 4 at small batches) with no restart, and the
operator keeps the schedule.

`python -m e2e.demo_sim` runs this part alone (its own cluster if none is up, Prometheus, the operator from the chart);
`e2e/demo.py` runs it after the real-vLLM on/off story with the same operator.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.podrunner import PodRunner, file_sd_scrape_config
from e2e.stack import ROOT, apply, get_json, kubectl
from e2e.vllm.simulated import SimulatorOptions

SIM_NAMESPACE = "specpilot-demo-sim"
NAME = "llama70b-ramp"
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
PRESET = "llama70b-4xh100"
PHASE_S = 300  # per phase: pod up, schedule installed after the ramp
COLUMNS = (
    "NAME:.metadata.name,SPECULATION:.status.effective.speculation,K:.status.effective.numSpeculativeTokens,"
    "THRESHOLD:.status.effective.disableAboveBatchSize,SCHEDULE:.status.effective.batchSchedule,"
    "BATCH:.status.observed.runningRequests,DECISION:.status.recommendation.action"
)


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def simulated_70b(prometheus_url: str) -> dict[str, Any]:
    """Llama-3.3-70B on 4xH100 with an 8B draft model at K = 4, batch threshold tuning on, a fast demo cadence."""
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0", "maxModelLen": 4096,
                       "maxNumSeqs": 256},
            "parallelism": {"tensorParallelSize": 4},
            "target": {"model": MODEL},
            "speculation": {"method": "draft_model", "draft": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
                            "numSpeculativeTokens": 4},
            "resources": {"gpusPerReplica": 4, "gpuMemoryGiB": 80},
            "autotune": {
                "mode": "Auto",
                "prometheus": {"url": prometheus_url, "timeout": "3s"},
                "interval": "5s",
                "window": "20s",
                "scrapeInterval": "1s",
                "minSamples": {"draftTokens": 100, "requests": 5},
                "agreeingEvaluations": 1,
                "stabilization": "0s",
                "batchThreshold": {"tune": True, "min": 8, "max": 256},
                "budget": {"minInterval": "10s", "maxPerHour": 4, "maxPerDay": 8},
            },
        },
    }  # fmt: skip


class Ramp:
    """`concurrency` greedy completions always in flight to the deployment's ready server (settable while running)."""

    def __init__(self, runner: PodRunner, concurrency: int, limit: int = 210) -> None:
        self.runner = runner
        self.concurrency = concurrency
        self.sent = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(limit)]

    def _worker(self, index: int) -> None:
        body = json.dumps({"model": MODEL, "prompt": "x" * 400, "max_tokens": 64, "temperature": 0.0}).encode()
        while not self._stop.is_set():
            urls = list(self.runner.endpoints(NAME).values())
            if index >= self.concurrency or not urls:
                self._stop.wait(0.5)
                continue
            request = urllib.request.Request(f"{urls[0]}/v1/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    resp.read()
                self.sent += 1
            except OSError:  # the pod is being replaced
                self._stop.wait(0.5)

    def start(self) -> Ramp:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()


def drafted_per_draft(prometheus_url: str) -> str:
    """Draft tokens per draft over the last 15 s, from the real Prometheus: the K the engine is running."""
    query = (
        "sum(rate(vllm:spec_decode_num_draft_tokens_total[15s])) / sum(rate(vllm:spec_decode_num_drafts_total[15s]))"
    )
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            result = json.load(resp)["data"]["result"]
    except OSError as err:
        return f"unknown ({err})"
    return f"{float(result[0]['value'][1]):.2f}" if result else "none yet"


def profile_choice(recommendation: dict[str, Any]) -> str:
    """The operator's note on which step-cost profile priced this fit (status.recommendation's evidence)."""
    settings = ((recommendation.get("evidence") or {}).get("threshold") or {}).get("settings") or {}
    return str((settings.get("modelChoice") or {}).get("note", "not in this decision's evidence"))


def make_runner(kubeconfig: Path, work: Path) -> PodRunner:
    """A pod runner for SIM_NAMESPACE whose pods run the simulator (fixed seed, 10x slowed)."""
    return PodRunner(
        kubeconfig,
        SIM_NAMESPACE,
        python=Path(sys.executable),
        model_map={},
        default_model=work,
        default_draft=work,
        targets_file=work / "sim-targets.json",
        log_dir=work / "sim-pods",
        simulator=SimulatorOptions(preset=PRESET, time_scale=0.1, startup_seconds=1.0, seed=70),
    )


def scrape_config(work: Path) -> dict[str, Any]:
    return file_sd_scrape_config(work / "sim-targets.json", job_name="simulated-pods")


def threshold_story(bin_dir: Path, kubeconfig: Path, prometheus_url: str, runner: PodRunner) -> bool:
    """Apply the 70B deployment, ramp its load up and down, print the table; True when one schedule was installed."""

    def table() -> dict[str, Any]:
        print(kubectl(bin_dir, kubeconfig, "-n", SIM_NAMESPACE, "get", "specdeploy", NAME), end="")
        print(kubectl(bin_dir, kubeconfig, "-n", SIM_NAMESPACE, "get", "specdeploy", NAME, "-o",
                      f"custom-columns={COLUMNS}"), end="", flush=True)  # fmt: skip
        obj: dict[str, Any] = get_json(bin_dir, kubeconfig, SIM_NAMESPACE, "specdeploy", NAME)
        rec = (obj.get("status") or {}).get("recommendation") or {}
        print(f"  decision {rec.get('action')}: {str(rec.get('reason', ''))[:220]}", flush=True)
        return obj

    def watch(until: Callable[[dict[str, Any]], bool], what: str, seconds: float = PHASE_S) -> bool:
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            time.sleep(10)
            if until(table()):
                return True
        print(f"not within {seconds:.0f}s: {what}")
        return False

    def actuations(obj: dict[str, Any]) -> int:
        return len((obj.get("status") or {}).get("actuations") or [])

    def recommendation(obj: dict[str, Any]) -> dict[str, Any]:
        return dict((obj.get("status") or {}).get("recommendation") or {})

    def generation() -> int:
        return int(get_json(bin_dir, kubeconfig, SIM_NAMESPACE, "deployment", NAME)["metadata"]["generation"])

    say(f"A simulated {MODEL} on 4xH100 ({PRESET}): 8B draft model K=4, batch threshold tuning on")
    apply(bin_dir, kubeconfig, SIM_NAMESPACE, simulated_70b(prometheus_url))
    stop_at = time.monotonic() + PHASE_S
    while not runner.endpoints(NAME) and time.monotonic() < stop_at and not runner.failures():
        time.sleep(1)
    if not runner.endpoints(NAME):
        print(f"simulated pod not ready: {runner.failures()}")
        return False
    ramp = Ramp(runner, concurrency=4).start()
    try:
        generations = [generation()]
        say("Low load (4 requests in flight): the fit finds the configured K=4 best at small batches, no rollout")
        if not watch(lambda o: "threshold unchanged" in str(recommendation(o).get("reason", "")), "a fit", 120):
            return False
        print(f"  cost profile: {profile_choice(recommendation(table()))}")
        generations.append(generation())
        say("Load ramps past the crossover (200 in flight): the fit installs a schedule lowering K at large batches")
        ramp.concurrency = 200
        watch(lambda o: actuations(o) >= 1, "a schedule installed under the ramp")
        stop_at = time.monotonic() + 40
        while time.monotonic() < stop_at:
            time.sleep(10)
            table()
            print(f"  draft tokens per draft in the engine (Prometheus): {drafted_per_draft(prometheus_url)}")
        generations.append(generation())
        say("Load falls back (4 in flight): K rises again inside the engine; the operator keeps the schedule")
        ramp.concurrency = 4
        fell_at = str(recommendation(table()).get("at"))
        watch(
            lambda o: (
                str(recommendation(o).get("at")) > fell_at
                and float(((o.get("status") or {}).get("observed") or {}).get("runningRequests") or 1e9) < 16
            ),
            "an evaluation of a low-load window",
            120,
        )
        time.sleep(15)  # the 15 s rate window of the next line holds low-load steps only
        final = table()
        print(f"  draft tokens per draft in the engine (Prometheus): {drafted_per_draft(prometheus_url)}")
        generations.append(generation())
    finally:
        ramp.stop()
    after = get_json(bin_dir, kubeconfig, SIM_NAMESPACE, "deployment", NAME)
    command = after["spec"]["template"]["spec"]["containers"][0]["command"]
    print(f"{NAME} Deployment generation: start {generations[0]}, after the low-load fit {generations[1]}, after the "
          f"ramp {generations[2]}, after the fall {generations[3]} (one rollout, under the ramp)")  # fmt: skip
    print("  command now: " + " ".join(command))
    for entry in (final.get("status") or {}).get("actuations") or []:
        print(f"  {entry['at']} {entry['action']}: {entry['reason']}")
    return (
        actuations(final) == 1
        and generations[0] == generations[1]
        and generations[2] == generations[3] == (generations[0] + 1)
    )


def main() -> int:
    """This part alone: the cluster (reused if up), Prometheus, the operator from the chart, the story."""
    from e2e.install import install_operator
    from e2e.prometheus.fixture import PrometheusServer, find_prometheus
    from e2e.stack import cluster_up

    work = Path(tempfile.mkdtemp(prefix="specpilot-demo-sim-"))
    kubeconfig, bin_dir, started_cluster = cluster_up()
    kubectl(bin_dir, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    subprocess.run([str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "create", "namespace", SIM_NAMESPACE],
                   capture_output=True, check=False)  # fmt: skip
    runner = make_runner(kubeconfig, work)
    prometheus = PrometheusServer(find_prometheus(), work / "prometheus", [scrape_config(work)]).start()
    operator = install_operator(
        bin_dir,
        kubeconfig,
        watch_namespaces=[SIM_NAMESPACE],
        log_dir=work / "operator",
        values={"tickSeconds": 2},
        release="specpilot-demo-sim",
        namespace="specpilot-demo-sim-system",
    )
    runner.start()
    try:
        return 0 if threshold_story(bin_dir, kubeconfig, prometheus.url, runner) else 1
    finally:
        runner.stop()
        operator.stop()
        prometheus.stop()
        if started_cluster:
            subprocess.run([str(ROOT / "e2e/cluster/down.sh")], check=False, capture_output=True)


if __name__ == "__main__":
    raise SystemExit(main())
