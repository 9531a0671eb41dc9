"""High availability: operator replicas elect one leader with a Lease; killing it hands over, without double actuation.

Real API server (chart RBAC, the chart's Lease permissions included), real Prometheus, real operator processes with
short lease timings (3 s lease, 2 s renew deadline, 0.5 s retry). The vLLM side is the Prometheus tier's fake
exposition (tests/prometheus/fake_vllm.py, vLLM 0.32's series, exact known rates) with a draft accepting 5 % of its
tokens: what is under test is which operator acts, not what vLLM measures, and a fixed exposition makes the
policy's decision (DisableSpeculation) quick and certain.

1. Replica A leads (the Lease names it, specpilot_leader 1); replica B waits (specpilot_leader 0) while A renews the
   Lease for longer than its duration, and writes nothing while A creates the children.
2. A persists an autotune actuation in status and dies right there, before touching the Deployment (the failpoint
   exits as a kill would: no cleanup, the Lease is not released). B takes over within the lease duration plus a
   retry, rolls the persisted choice out once, then evaluates again and again without a second actuation: the
   persisted state (status.effective, status.autotune) decides, not the new leader's memory.
3. Replica C joins as a candidate; B is killed with SIGKILL; C takes over and reconciles a change made after the kill.
The measured hand-over times are printed.

And a leader that cannot keep the Lease stops acting: when its renewals are refused (its Lease permission revoked)
it exits at the renew deadline, before the lease duration after its last renewal (when another may take over);
when another replica's name is in the Lease it exits at its next renewal. A leader stopped cleanly (SIGTERM)
releases the Lease, so a candidate takes over at its next try instead of waiting the lease duration out.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator
from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from e2e.stack import BAD_DRAFT, tiny_speculative_deployment
from e2e.waiting import wait_for
from specpilot.adapters.lease import LOST_LEADERSHIP_EXIT
from tests.operator.conftest import OPERATOR_NAMESPACE, StartOperator, chart_rbac
from tests.operator.test_operator_cluster import apply, get
from tests.prometheus.fake_vllm import FakeVllm, serve

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]

LEASE = "specpilot-leader"  # the chart's lease name for release "specpilot" (its RBAC names it)
LEASE_SECONDS, RENEW_DEADLINE, RETRY = 3, 2.0, 0.5
NAME = "ha"


def lease(cluster: KubeCluster) -> dict[str, Any]:
    found = get(cluster, OPERATOR_NAMESPACE, "lease", LEASE)
    return dict((found or {}).get("spec") or {})


def leader_gauge(operator: RunningOperator) -> float:
    return operator.metrics()["specpilot_leader"]


def metric_sum(operator: RunningOperator, prefix: str) -> float:
    return sum(v for k, v in operator.metrics().items() if k.startswith(prefix))


def candidate(start: StartOperator, identity: str, env: dict[str, str] | None = None) -> RunningOperator:
    flags = [
        "--leader-elect",
        f"--leader-election-namespace={OPERATOR_NAMESPACE}",
        f"--leader-election-lease={LEASE}",
        f"--lease-duration={LEASE_SECONDS}",
        f"--renew-deadline={RENEW_DEADLINE}",
        f"--retry-period={RETRY}",
    ]
    return start(env={"POD_NAME": identity, **(env or {})}, extra_args=flags)


def takes_over(cluster: KubeCluster, operator: RunningOperator, identity: str, since: float, timeout: float) -> float:
    """Seconds from `since` until the Lease names `identity` and that replica says it leads."""

    def leads() -> bool:
        return lease(cluster).get("holderIdentity") == identity and leader_gauge(operator) == 1

    wait_for(f"{identity} to take over", leads, timeout, 0.1)
    return time.monotonic() - since


def wait_for_exit(operator: RunningOperator, what: str, timeout: float) -> float:
    """Monotonic time at which the process was first seen gone (polled every 0.1 s)."""
    wait_for(what, lambda: operator.process.poll() is not None, timeout, 0.1)
    return time.monotonic()


@pytest.fixture
def fake_metrics(tmp_path: Path, prometheus_factory: StartPrometheus) -> Iterator[tuple[PrometheusServer, Path, int]]:
    """Real Prometheus scraping one fake vLLM pod (acceptance 1/300: 1.01 tokens per step, which no hardware makes
    faster than plain, so the disable needs no cost model; no requests queued: a queue would rightly hold
    the restart, see backlog.py) once the test writes its labels to the targets file (as a PodMonitor would label
    the pod's series)."""
    state, server, thread = serve({NAME: FakeVllm(per_position=(1, 0, 0), waiting=0)})
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    job = {"job_name": "fake-vllm", "scrape_interval": "1s", "scrape_timeout": "1s",
           "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}  # fmt: skip
    yield prometheus_factory([job]), targets, state.port
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_killing_the_leader_hands_over_without_double_actuation(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    start_operator: StartOperator,
    fake_metrics: tuple[PrometheusServer, Path, int],
) -> None:
    prometheus, targets, port = fake_metrics
    kube_cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "lease", LEASE, "--ignore-not-found", check=False)

    # 1. One leader, one candidate that stays out.
    a = candidate(start_operator, "replica-a", env={"SPECPILOT_FAILPOINT": "exit-after-actuation-status"})
    takes_over(kube_cluster, a, "replica-a", time.monotonic(), 30)
    b = candidate(start_operator, "replica-b")
    renewed = lease(kube_cluster)["renewTime"]
    waited = time.monotonic()
    wait_for(
        "A renewing for more than a lease duration while B runs",
        lambda: time.monotonic() - waited > LEASE_SECONDS + 1 and lease(kube_cluster)["renewTime"] != renewed,
        30,
        0.5,
    )
    assert lease(kube_cluster)["holderIdentity"] == "replica-a"
    assert (leader_gauge(a), leader_gauge(b)) == (1, 0)
    assert b.process.poll() is None
    assert "candidate replica-b for lease" in b.log_tail()

    doc = tiny_speculative_deployment(
        NAME, draft=BAD_DRAFT, mode="Auto", prometheus_url=prometheus.url, interval="1s", window="4s", agreeing=2,
        stabilization="2s",
    )  # fmt: skip
    doc["spec"]["autotune"]["budget"] = {"minInterval": "1s", "maxPerHour": 10, "maxPerDay": 20}
    apply(kube_cluster, kube_namespace, doc)

    def rolled_out() -> dict[str, Any] | None:
        obj = get(kube_cluster, kube_namespace, "specdeploy", NAME) or {}
        effective = (obj.get("status") or {}).get("effective") or {}
        return obj if effective.get("configHash") and effective.get("rolloutCompleted") else None

    obj = wait_for("the Deployment rolled out by A", rolled_out, 90, 0.5)
    before = get(kube_cluster, kube_namespace, "deployment", NAME)
    assert before is not None
    assert before["metadata"]["generation"] == 1, "reconciled once"
    assert b.writes() == 0, "the candidate writes nothing"
    assert metric_sum(b, "specpilot_reconciles_total{") == 0, "the candidate reconciles nothing"

    # 2. The fake pod's series appear under the running config; A decides, persists, and dies before applying.
    labels = {
        "__metrics_path__": f"/{NAME}/metrics",
        "namespace": kube_namespace,
        "pod": f"{NAME}-0",
        "specpilot_dev_deployment": NAME,
        "specpilot_dev_config_hash": obj["status"]["effective"]["configHash"],
    }
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": labels}]))
    died = wait_for_exit(a, "A to die right after persisting an actuation", 120)
    assert a.process.returncode == 86, a.log_tail()
    persisted = get(kube_cluster, kube_namespace, "specdeploy", NAME)
    assert persisted is not None
    assert [x["action"] for x in persisted["status"]["actuations"]] == ["DisableSpeculation"]
    untouched = get(kube_cluster, kube_namespace, "deployment", NAME)
    assert untouched is not None
    assert untouched["metadata"]["generation"] == 1, "A applied nothing before dying"
    first_handover = takes_over(kube_cluster, b, "replica-b", died, LEASE_SECONDS + 10)

    rolled = wait_for(
        "B rolling out the persisted choice",
        lambda: (d := get(kube_cluster, kube_namespace, "deployment", NAME)) and d["metadata"]["generation"] > 1 and d,
        30,
        0.5,
    )
    assert "--speculative-config" not in rolled["spec"]["template"]["spec"]["containers"][0]["command"]
    decisions = metric_sum(b, "specpilot_decisions_total{")
    wait_for(
        "B evaluating several times", lambda: metric_sum(b, "specpilot_decisions_total{") >= decisions + 4, 60, 0.5
    )
    status = (get(kube_cluster, kube_namespace, "specdeploy", NAME) or {})["status"]
    assert len(status["actuations"]) == 1, status["actuations"]
    assert len(status["autotune"]["actuations"]) == 1, "the budget was charged once"
    assert metric_sum(b, "specpilot_actuations_total{") == 0, "B actuated nothing itself"
    final = get(kube_cluster, kube_namespace, "deployment", NAME)
    assert final is not None
    assert final["metadata"]["generation"] == 2, "exactly one rollout"

    # 3. A new candidate; SIGKILL the leader; the candidate takes over and reconciles a change made after the kill.
    c = candidate(start_operator, "replica-c")
    assert leader_gauge(c) == 0
    assert lease(kube_cluster)["holderIdentity"] == "replica-b"
    killed = time.monotonic()
    os.kill(b.process.pid, signal.SIGKILL)
    b.process.wait(timeout=10)
    kube_cluster.kubectl("-n", kube_namespace, "patch", "specdeploy", NAME, "--type=merge", "-p",
                         json.dumps({"spec": {"replicas": 2}}))  # fmt: skip
    second_handover = takes_over(kube_cluster, c, "replica-c", killed, LEASE_SECONDS + 10)
    wait_for(
        "C reconciling the change made after the kill",
        lambda: ((get(kube_cluster, kube_namespace, "deployment", NAME) or {}).get("spec") or {}).get("replicas") == 2,
        30,
        0.2,
    )
    reconciled = time.monotonic() - killed
    transitions = lease(kube_cluster)["leaseTransitions"]
    print(
        f"\nhand-over (lease {LEASE_SECONDS} s, renew deadline {RENEW_DEADLINE:g} s, retry {RETRY:g} s): "
        f"A died at its failpoint -> B leads in {first_handover:.1f} s; B SIGKILLed -> C leads in "
        f"{second_handover:.1f} s, change made after the kill reconciled {reconciled:.1f} s after it; "
        f"lease transitions {transitions}"
    )
    # delete while an operator runs (nothing needs it, there is no finalizer; it keeps teardown like production's)
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "--all", "--timeout=60s", check=False)


def test_a_leader_that_cannot_keep_the_lease_stops_before_anyone_may_take_over(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    kube_cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "lease", LEASE, "--ignore-not-found", check=False)
    a = candidate(start_operator, "replica-a")
    takes_over(kube_cluster, a, "replica-a", time.monotonic(), 30)
    binding = next(d for d in chart_rbac(kube_cluster, kube_namespace) if d["metadata"]["name"].endswith("-election")
                   and d["kind"] == "RoleBinding")  # fmt: skip
    kube_cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "rolebinding", binding["metadata"]["name"])
    revoked = time.monotonic()
    try:
        stopped = wait_for_exit(a, "A to stop when it cannot renew", 30)
    finally:
        kube_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(binding))
    assert a.process.returncode == LOST_LEADERSHIP_EXIT, a.log_tail()
    assert "not renewed within the renew deadline" in a.log_tail()
    # The invariant that keeps two leaders apart: A stopped before a candidate could count the lease as expired.
    last_renewal = datetime.fromisoformat(lease(kube_cluster)["renewTime"].replace("Z", "+00:00"))
    exit_line = next(line for line in a.log_tail().splitlines() if "lost leadership" in line)
    exited = datetime.strptime(exit_line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)
    assert (exited - last_renewal).total_seconds() < LEASE_SECONDS, (exit_line, last_renewal)

    # A clean stop (SIGTERM, as at a pod's deletion) releases the Lease: the candidate need not wait it out.
    a2 = candidate(start_operator, "replica-a2")
    takes_over(kube_cluster, a2, "replica-a2", time.monotonic(), LEASE_SECONDS + 10)
    a3 = candidate(start_operator, "replica-a3")
    terminated = time.monotonic()
    a2.process.terminate()
    released_handover = takes_over(kube_cluster, a3, "replica-a3", terminated, LEASE_SECONDS + 10)
    assert a2.process.wait(timeout=30) == 0, a2.log_tail()
    assert "released lease" in a2.log_tail()

    # Someone else's name in the Lease (say, after a partition healed): the leader stops at its next renewal.
    kube_cluster.kubectl("-n", OPERATOR_NAMESPACE, "patch", "lease", LEASE, "--type=merge", "-p",
                         json.dumps({"spec": {"holderIdentity": "intruder"}}))  # fmt: skip
    overwritten = time.monotonic()
    gone = wait_for_exit(a3, "A3 to stop when the Lease names another", 10)
    assert a3.process.returncode == LOST_LEADERSHIP_EXIT, a3.log_tail()
    assert "the lease is held by 'intruder'" in a3.log_tail()
    print(
        f"\nlease loss: renewals refused -> leader exited {stopped - revoked:.1f} s later (renew deadline "
        f"{RENEW_DEADLINE:g} s); SIGTERM -> Lease released, candidate leads {released_handover:.1f} s later; Lease "
        f"overwritten -> leader exited {gone - overwritten:.1f} s later"
    )
