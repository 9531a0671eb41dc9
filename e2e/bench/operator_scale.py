"""Benchmark: many SpeculativeDeployments against the local API server (a script that prints figures, not a test).

Creates --count CRs in a fresh namespace with the real operator running, then reports:
- create → Deployment latency (p50/p99), measured from the client's create call to the Deployment's ADDED watch event;
- API writes per reconcile: write requests the API server counted for our resources (CRs incl. status, Deployments,
  Services, PDBs; from kube-apiserver's own apiserver_request_total) plus the Events the operator posted;
- writes per idle CR per hour, over --idle-seconds once every CR is settled;
- the operator's RSS after creation and after the idle window.
Usage: python -m e2e.bench.operator_scale --count 200 [--rate 10] [--idle-seconds 120] [--tick-seconds 10]
(--rate paces the creations, CRs per second; without it all are created as fast as the client can: a burst, where the
latency mostly measures the queue behind the other creations on this machine.)
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from e2e.operator_process import launch_operator
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


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxNumSeqs": 64},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--tick-seconds", type=float, default=10)
    parser.add_argument("--rate", type=float, default=0.0, help="CRs created per second (0: as fast as possible)")
    args = parser.parse_args()

    kubeconfig, bin_dir, _ = cluster_up()
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig)]
    subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")], check=True)
    add_gpu_nodes(kubectl, (args.count + 7) // 8)
    namespace = f"bench-{secrets.token_hex(3)}"
    subprocess.run([*kubectl, "create", "namespace", namespace], check=True, capture_output=True)
    config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    custom = client.CustomObjectsApi(api)

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
    operator = launch_operator(kubeconfig, [namespace], log, tick_seconds=args.tick_seconds)
    try:
        writes_start = apiserver_writes(kubectl)
        created: dict[str, float] = {}
        t0 = time.monotonic()
        for i in range(args.count):
            if args.rate > 0:
                time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
            name = f"sd-{i:04d}"
            created[name] = time.monotonic()
            custom.create_namespaced_custom_object(
                "specpilot.dev", "v1alpha1", namespace, "speculativedeployments", manifest(name)
            )
        deadline = time.monotonic() + 600
        while len([n for n in created if n in seen]) < args.count and time.monotonic() < deadline:
            time.sleep(0.2)
        create_seconds = time.monotonic() - t0
        latencies = [seen[n] - created[n] for n in created if n in seen]

        def all_settled() -> bool:
            listing: Any = custom.list_namespaced_custom_object(
                "specpilot.dev", "v1alpha1", namespace, "speculativedeployments"
            )
            ready = 0
            items: list[dict[str, Any]] = listing["items"]
            for item in items:
                conds = {c["type"]: c for c in item.get("status", {}).get("conditions", [])}
                if conds.get("Progressing", {}).get("reason") == "RolloutCompleted":
                    ready += 1
            return bool(ready == args.count)

        deadline = time.monotonic() + 900
        while not all_settled() and time.monotonic() < deadline:
            time.sleep(2)
        settle_seconds = time.monotonic() - t0
        writes_created = apiserver_writes(kubectl) - writes_start
        events_posted = sum(
            v
            for k, v in operator.metrics().items()
            if k.startswith("specpilot_events_total{") and 'result="posted"' in k
        )
        reconciles = sum(v for k, v in operator.metrics().items() if k.startswith("specpilot_reconciles_total{"))
        rss_after_create = rss_mib(operator.process.pid)

        idle_start_counts = apiserver_write_counts(kubectl)
        idle_events_start = events_posted
        time.sleep(args.idle_seconds)
        idle_breakdown = delta(apiserver_write_counts(kubectl), idle_start_counts)
        idle_writes = sum(idle_breakdown.values())
        idle_events = (
            sum(
                v
                for k, v in operator.metrics().items()
                if k.startswith("specpilot_events_total{") and 'result="posted"' in k
            )
            - idle_events_start
        )
        rss_after_idle = rss_mib(operator.process.pid)
    finally:
        stop.set()
        # delete while the operator runs: kopf's timers hold a finalizer that only a running operator removes
        subprocess.run(
            [*kubectl, "-n", namespace, "delete", "speculativedeployments", "--all", "--timeout=300s"],
            check=False,
            capture_output=True,
        )
        operator.stop()
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--wait=false"], check=False, capture_output=True)

    per_hour = (idle_writes + idle_events) / args.count * 3600 / args.idle_seconds
    report = {
        "crs": args.count,
        "create_rate_per_s": args.rate or "burst",
        "deployments_seen": len(latencies),
        "create_to_deployment_p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "create_to_deployment_p99_s": round(percentile(latencies, 0.99), 3) if latencies else None,
        "create_phase_s": round(create_seconds, 1),
        "all_rollouts_completed_s": round(settle_seconds, 1),
        "api_writes_during_create_and_rollout": writes_created + events_posted,
        "api_writes_per_cr": round((writes_created + events_posted) / args.count, 2),
        "reconciles_run": reconciles,
        "idle_window_s": args.idle_seconds,
        "idle_api_writes": idle_writes + idle_events,
        "idle_api_writes_by_resource": idle_breakdown,
        "writes_per_idle_cr_per_hour": round(per_hour, 3),
        "operator_rss_mib_after_create": round(rss_after_create, 1),
        "operator_rss_mib_after_idle": round(rss_after_idle, 1),
        "tick_seconds": args.tick_seconds,
        "operator_log": str(log),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
