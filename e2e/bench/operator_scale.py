"""Benchmark: many SpeculativeDeployments against the local API server (a script that prints figures, not a test).

Creates --count CRs (or each of --counts in turn) in a fresh namespace with the real operator running, every CR in
autotune mode Recommend against one real Prometheus (no vLLM pods behind it: every measurement NoData, as for idle
deployments; the query load is the same), then reports:
- create → Deployment latency (p50/p99), measured from the client's create call to the Deployment's ADDED watch event,
  beside the operator's own reconcile time (its queueing is the rest);
- API writes per CR: write requests the API server counted for our resources (CRs incl. status, Deployments,
  Services, PDBs; from kube-apiserver's own apiserver_request_total, which other users of a shared cluster inflate)
  plus the Events the operator posted, and the writes the operator itself counted;
- writes per idle CR per hour over --idle-seconds once every CR is settled (the operator's count, and how many CRs'
  resourceVersions moved: that catches writes by anyone, kopf included);
- Prometheus queries per evaluation round and per CR-hour (Prometheus' own prometheus_http_requests_total);
- the operator's RSS and CPU (share of one core) while creating and while idle;
- a restart with every CR in place: writes (the operator's count, and CRs or Deployments whose resourceVersion moved).
Usage: python -m e2e.bench.operator_scale --counts 200,500,1000 [--rate 10] [--idle-seconds 150] [--interval 60s]
(--rate paces the creations, CRs per second; without it all are created as fast as the client can: a burst, where the
latency mostly measures the queue behind the other creations on this machine.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config, watch

from e2e.operator_process import RunningOperator, launch_operator
from e2e.prometheus.fixture import PrometheusServer, find_prometheus
from e2e.stack import cluster_up

ROOT = Path(__file__).resolve().parents[2]
WRITE_VERBS = ("POST", "PATCH", "PUT", "DELETE")
OUR_RESOURCES = {
    ("speculativedeployments", ""),
    ("speculativedeployments", "status"),
    ("deployments", ""),
    ("services", ""),
    ("poddisruptionbudgets", ""),
}
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def apiserver_write_counts(kubectl: list[str]) -> dict[str, float]:
    """Write requests kube-apiserver served for the resources the operator writes, by resource/subresource/verb."""
    text = subprocess.run([*kubectl, "get", "--raw", "/metrics"], capture_output=True, text=True, check=True).stdout
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        resource, subresource = labels.get("resource"), labels.get("subresource", "")
        if labels.get("verb") in WRITE_VERBS and (resource, subresource) in OUR_RESOURCES:
            key = f"{resource}{'/' + subresource if subresource else ''} {labels['verb']}"
            counts[key] = counts.get(key, 0.0) + float(m["value"])
    return counts


def apiserver_writes(kubectl: list[str]) -> float:
    return sum(apiserver_write_counts(kubectl).values())


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def add_gpu_nodes(kubectl: list[str], count: int) -> None:
    """The default cluster has 32 fake GPUs; a benchmark of N one-GPU replicas needs N/8 nodes of 8 to schedule."""
    for i in range(count):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"kwok-bench-gpu-{i}",
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": f"kwok-bench-gpu-{i}", "type": "kwok"},
            },
            "status": {
                "allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
                "capacity": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"},
            },
        }
        subprocess.run(
            [*kubectl, "apply", "-f", "-"], input=json.dumps(node), text=True, capture_output=True, check=True
        )


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a process now (VmRSS) or at its highest so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def manifest(name: str, prometheus_url: str, interval: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxNumSeqs": 64},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            # A 1m window: a new config's metrics are trusted 1m + 2 scrapes after its rollout (the settling gate),
            # so the idle window (after --settle-seconds) starts once every CR has left it and holds steady.
            "autotune": {
                "mode": "Recommend",
                "prometheus": {"url": prometheus_url},
                "interval": interval,
                "window": "1m",
            },
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prometheus_queries(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line
    )


def metric(operator: RunningOperator, prefix: str, contains: str = "") -> float:
    return sum(v for k, v in operator.metrics().items() if k.startswith(prefix) and contains in k)


def heap_mib(operator: RunningOperator) -> dict[str, float]:
    """The operator's specpilot_heap_bytes gauges (jemalloc's counters after its latest purge), MiB by state."""
    return {
        state: round(metric(operator, "specpilot_heap_bytes{", f'state="{state}"') / 2**20, 1)
        for state in ("allocated", "active", "resident")
        if any(f'state="{state}"' in k for k in operator.metrics() if k.startswith("specpilot_heap_bytes{"))
    }


def versions(kubectl: list[str], namespace: str, kind: str) -> dict[str, str]:
    """name -> resourceVersion of every object of `kind` in the namespace (one LIST)."""
    out = subprocess.run(
        [*kubectl, "-n", namespace, "get", kind, "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in json.loads(out)["items"]}


def moved(before: dict[str, str], after: dict[str, str]) -> int:
    return sum(1 for name, version in before.items() if after.get(name) != version)


def run_one(args: argparse.Namespace, count: int, rate: float) -> dict[str, Any]:
    kubeconfig, bin_dir, _ = cluster_up()
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")], check=True)
    add_gpu_nodes(kubectl, (count + 7) // 8)
    namespace = f"bench-{secrets.token_hex(3)}"
    subprocess.run([*kubectl, "create", "namespace", namespace], check=True, capture_output=True)
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    custom = client.CustomObjectsApi(api)
    work = Path(tempfile.mkdtemp(prefix="specpilot-bench-prom-"))
    prometheus = PrometheusServer(find_prometheus(), work, []).start()

    seen: dict[str, float] = {}
    stop = threading.Event()

    def watch_deployments() -> None:
        w: Any = watch.Watch()  # type: ignore[no-untyped-call]
        for event in w.stream(client.AppsV1Api(api).list_namespaced_deployment, namespace, timeout_seconds=3600):
            name = event["object"].metadata.name
            seen.setdefault(name, time.monotonic())
            if stop.is_set():
                w.stop()

    watcher = threading.Thread(target=watch_deployments, daemon=True)
    watcher.start()
    log = Path(f"/tmp/specpilot-bench-{namespace}.log")
    operator_env = dict(kv.split("=", 1) for kv in args.operator_env)
    operator = launch_operator(kubeconfig, [namespace], log, tick_seconds=args.tick_seconds, env=operator_env)
    restarted: RunningOperator | None = None
    try:
        writes_start = apiserver_writes(kubectl)
        cpu_start = cpu_seconds(operator.process.pid)
        api_seconds_start = metric(operator, "specpilot_api_request_duration_seconds_sum")
        api_requests_start = metric(operator, "specpilot_api_request_duration_seconds_count")
        created: dict[str, float] = {}
        client_writes: list[float] = []  # how long the API server took to answer this client's own creates
        t0 = time.monotonic()
        for i in range(count):
            if rate > 0:
                time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            name = f"sd-{i:04d}"
            created[name] = time.monotonic()
            custom.create_namespaced_custom_object(
                "specpilot.dev", "v1alpha1", namespace, "speculativedeployments",
                manifest(name, prometheus.url, args.interval),
            )  # fmt: skip
            client_writes.append(time.monotonic() - created[name])
        deadline = time.monotonic() + 900
        while len([n for n in created if n in seen]) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        create_seconds = time.monotonic() - t0
        latencies = [seen[n] - created[n] for n in created if n in seen]
        # Until the last Deployment appeared: the operator's time waiting on the API server vs its own CPU.
        api_seconds = metric(operator, "specpilot_api_request_duration_seconds_sum") - api_seconds_start
        api_requests = metric(operator, "specpilot_api_request_duration_seconds_count") - api_requests_start
        cpu_until_deployments = cpu_seconds(operator.process.pid) - cpu_start
        create_reconcile = metric(operator, "specpilot_reconcile_duration_seconds_sum", 'trigger="create"')
        create_waited = metric(operator, "specpilot_workqueue_wait_seconds_sum", 'trigger="create"')
        create_waits = metric(operator, "specpilot_workqueue_wait_seconds_count", 'trigger="create"')
        create_reconciles = metric(operator, "specpilot_reconcile_duration_seconds_count", 'trigger="create"')

        def settled() -> int:
            listing: Any = custom.list_namespaced_custom_object(
                "specpilot.dev", "v1alpha1", namespace, "speculativedeployments"
            )
            items: list[dict[str, Any]] = listing["items"]
            ready = 0
            for item in items:
                status = item.get("status", {})
                conds = {c["type"]: c for c in status.get("conditions", [])}
                if conds.get("Progressing", {}).get("reason") == "RolloutCompleted" and status.get("recommendation"):
                    ready += 1
            return ready

        deadline = time.monotonic() + 1200
        while settled() < count and time.monotonic() < deadline:
            time.sleep(5)
        settle_seconds = time.monotonic() - t0
        cpu_create = cpu_seconds(operator.process.pid) - cpu_start
        # one more interval for the spread evaluations that record their first numbers
        time.sleep(args.settle_seconds)
        writes_created = apiserver_writes(kubectl) - writes_start
        events_posted = metric(operator, "specpilot_events_total{", 'result="posted"')
        operator_writes_created = operator.writes()
        rss_after_create = rss_mib(operator.process.pid)

        # idle window
        idle_start_counts = apiserver_write_counts(kubectl)
        crs_before, deployments_before = (
            versions(kubectl, namespace, "specdeploy"),
            versions(kubectl, namespace, "deploy"),
        )
        operator_writes_before = operator.writes()
        queries_before = prometheus_queries(prometheus.url)
        operator_queries_before = metric(operator, "specpilot_prometheus_queries_total")
        rounds_before = metric(operator, "specpilot_round_deployments_count")
        evaluations_before = metric(operator, "specpilot_round_deployments_sum")
        skipped_before = metric(operator, "specpilot_reconciles_total{", "unchanged")
        cpu_idle_start, idle_t0 = cpu_seconds(operator.process.pid), time.monotonic()
        time.sleep(args.idle_seconds)
        idle_s = time.monotonic() - idle_t0
        cpu_idle = cpu_seconds(operator.process.pid) - cpu_idle_start
        idle_breakdown = delta(apiserver_write_counts(kubectl), idle_start_counts)
        idle_operator_writes = operator.writes() - operator_writes_before
        idle_crs_moved = moved(crs_before, versions(kubectl, namespace, "specdeploy"))
        queries = prometheus_queries(prometheus.url) - queries_before
        operator_queries = metric(operator, "specpilot_prometheus_queries_total") - operator_queries_before
        rounds = metric(operator, "specpilot_round_deployments_count") - rounds_before
        evaluations = metric(operator, "specpilot_round_deployments_sum") - evaluations_before
        skipped = metric(operator, "specpilot_reconciles_total{", "unchanged") - skipped_before
        rss_after_idle = rss_mib(operator.process.pid)
        heap_after_idle = heap_mib(operator)
        rss_peak = rss_mib(operator.process.pid, "VmHWM")

        # restart with every CR in place
        operator.stop()
        restarted = launch_operator(
            kubeconfig, [namespace], log.with_suffix(".restart.log"), tick_seconds=args.tick_seconds, env=operator_env
        )
        restart_t0 = time.monotonic()
        deadline = restart_t0 + 600
        while (
            metric(restarted, "specpilot_reconciles_total{", 'trigger="resume"') < count and time.monotonic() < deadline
        ):
            time.sleep(1)
        resumed_s = time.monotonic() - restart_t0
        time.sleep(2 * args.tick_seconds + 5)
        restart_writes = restarted.writes()
        restart_crs_moved = moved(crs_before, versions(kubectl, namespace, "specdeploy"))
        restart_deployments_moved = moved(deployments_before, versions(kubectl, namespace, "deploy"))
        rss_after_restart = rss_mib(restarted.process.pid)
        heap_after_restart = heap_mib(restarted)
        rss_peak_restart = rss_mib(restarted.process.pid, "VmHWM")
    finally:
        stop.set()
        # delete while the operator runs (it would delete without one too: no finalizer), so the namespace empties
        subprocess.run(
            [*kubectl, "-n", namespace, "delete", "speculativedeployments", "--all", "--timeout=600s"],
            check=False,
            capture_output=True,
        )
        operator.stop()
        if restarted is not None:
            restarted.stop()
        prometheus.stop()
        shutil.rmtree(work, ignore_errors=True)
        # wait until the namespace is gone: the garbage collection of its Deployments, ReplicaSets and pods would
        # otherwise load the API server and etcd during the next row (measured: a 200 burst right after a 1,000 run
        # saw the API server answer in 0.32 s instead of 0.13 s)
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--timeout=600s"], check=False, capture_output=True)

    hours = idle_s / 3600
    return {
        "crs": count,
        "create_rate_per_s": rate or "burst",
        "deployments_seen": len(latencies),
        "create_to_deployment_p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "create_to_deployment_p99_s": round(percentile(latencies, 0.99), 3) if latencies else None,
        "operator_create_reconcile_mean_s": round(create_reconcile / create_reconciles, 3)
        if create_reconciles
        else None,
        # how long a new CR waited in the work queue for a free handler thread (all of them waiting on the API server)
        "operator_create_queue_wait_mean_s": round(create_waited / create_waits, 3) if create_waits else None,
        # Separating the API server's share from the operator's: the client's own create calls (the API server's
        # latency for one write under this load), and, until the last Deployment appeared, the operator's requests
        # (count per CR, mean latency, total seconds per CR spent waiting on them) and its own CPU per CR.
        "client_create_p50_s": round(statistics.median(client_writes), 3),
        "client_create_p99_s": round(percentile(client_writes, 0.99), 3),
        "operator_requests_per_cr_until_deployments": round(api_requests / count, 2),
        "operator_request_mean_s": round(api_seconds / api_requests, 3) if api_requests else None,
        "operator_api_wait_s_per_cr": round(api_seconds / count, 3),
        # what the API server got through for the operator while the Deployments were being created
        "operator_requests_per_s_until_deployments": round(api_requests / create_seconds, 1),
        "operator_cpu_s_per_cr": round(cpu_until_deployments / count, 3),
        "create_phase_s": round(create_seconds, 1),
        "all_settled_s": round(settle_seconds, 1),
        "api_writes_per_cr": round((writes_created + events_posted) / count, 2),
        "operator_writes_per_cr": round(operator_writes_created / count, 2),
        "idle_window_s": round(idle_s),
        "idle_api_writes_by_resource (shared cluster)": idle_breakdown,
        "idle_operator_writes": idle_operator_writes,
        "idle_crs_written": idle_crs_moved,
        "writes_per_idle_cr_per_hour": round(idle_operator_writes / count / hours, 3),
        "idle_evaluations": evaluations,
        "idle_rounds_with_evaluations": rounds,
        "idle_skipped_periodic_passes": skipped,
        "prometheus_queries_idle": queries,
        "operator_counted_queries_idle": operator_queries,
        "queries_per_round": round(operator_queries / rounds, 2) if rounds else None,
        "queries_per_evaluation": round(operator_queries / evaluations, 3) if evaluations else None,
        "queries_per_cr_hour": round(queries / count / hours, 2),
        "operator_rss_mib_after_create": round(rss_after_create, 1),
        "operator_rss_mib_after_idle": round(rss_after_idle, 1),
        "operator_rss_mib_after_restart": round(rss_after_restart, 1),
        "operator_rss_mib_peak": round(rss_peak, 1),
        # jemalloc's account at the same moments (specpilot_heap_bytes): live objects' bytes vs the pages held for them
        "operator_heap_allocated_mib_after_idle": heap_after_idle.get("allocated"),
        "operator_heap_active_mib_after_idle": heap_after_idle.get("active"),
        "operator_heap_allocated_mib_after_restart": heap_after_restart.get("allocated"),
        "operator_heap_active_mib_after_restart": heap_after_restart.get("active"),
        "operator_rss_mib_peak_restart": round(rss_peak_restart, 1),
        "operator_cpu_create_core_share": round(cpu_create / settle_seconds, 3),
        "operator_cpu_idle_core_share": round(cpu_idle / idle_s, 3),
        "restart_resume_s": round(resumed_s, 1),
        "restart_operator_writes": restart_writes,
        "restart_crs_written": restart_crs_moved,
        "restart_deployments_written": restart_deployments_moved,
        "tick_seconds": args.tick_seconds,
        "evaluation_interval": args.interval,
        "operator_log": str(log),
    }


COLUMNS = [
    ("CRs", "crs"),
    ("create", "create_rate_per_s"),
    ("p50 s", "create_to_deployment_p50_s"),
    ("p99 s", "create_to_deployment_p99_s"),
    ("queue wait s", "operator_create_queue_wait_mean_s"),
    ("reconcile s", "operator_create_reconcile_mean_s"),
    ("client create p50 s", "client_create_p50_s"),
    ("op requests/CR", "operator_requests_per_cr_until_deployments"),
    ("op request s", "operator_request_mean_s"),
    ("op CPU s/CR", "operator_cpu_s_per_cr"),
    ("API writes/CR", "api_writes_per_cr"),
    ("op writes/CR", "operator_writes_per_cr"),
    ("idle writes/CR-h", "writes_per_idle_cr_per_hour"),
    ("idle CRs written", "idle_crs_written"),
    ("queries/round", "queries_per_round"),
    ("queries/CR-h", "queries_per_cr_hour"),
    ("RSS MiB", "operator_rss_mib_after_idle"),
    ("RSS restart MiB", "operator_rss_mib_after_restart"),
    ("peak RSS MiB", "operator_rss_mib_peak"),
    ("heap live MiB", "operator_heap_allocated_mib_after_idle"),
    ("heap active MiB", "operator_heap_active_mib_after_idle"),
    ("CPU create", "operator_cpu_create_core_share"),
    ("CPU idle", "operator_cpu_idle_core_share"),
    ("restart writes", "restart_operator_writes"),
    ("restart CRs written", "restart_crs_written"),
]


def table(rows: list[dict[str, Any]]) -> str:
    cells = [[h for h, _ in COLUMNS], *[[str(r.get(k)) for _, k in COLUMNS] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--counts", help="comma-separated counts, one run each (overrides --count)")
    parser.add_argument("--idle-seconds", type=float, default=150)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=160,
        help="wait after every rollout completed and every CR was evaluated, before idling (settling gate + interval)",
    )
    parser.add_argument("--tick-seconds", type=float, default=10)
    parser.add_argument("--interval", default="60s", help="spec.autotune.interval of every CR")
    parser.add_argument("--rate", type=float, default=0.0, help="CRs created per second (0: as fast as possible)")
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for the operator process (repeatable), to compare settings in one run",
    )
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")] if args.counts else [args.count]
    rows = []
    for count in counts:
        row = run_one(args, count, args.rate)
        print(json.dumps(row, indent=2), flush=True)
        rows.append(row)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
