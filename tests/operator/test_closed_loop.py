"""The autotuner end to end, with every part real.

The operator (chart RBAC) renders vLLM pods on kwok's fake GPU nodes; the pod runner starts a real vLLM CPU server from
each pod's own command line; real Prometheus scrapes those servers; load goes to them. Then:
- an identical draft (acceptance 1.0) in Recommend mode → Keep, acceptance in status.observed;
- a small random draft (acceptance 0) in Auto mode → DisableSpeculation with the evidence in status, the Deployment
  rolled exactly once and one SpeculationDisabled event;
- Prometheus stopped → MetricsAvailable=False and no action.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import RunningOperator
from e2e.podrunner import PodRunner
from e2e.prometheus.fixture import PrometheusServer
from e2e.stack import BAD_DRAFT, GOOD_DRAFT, TARGET_MODEL, tiny_speculative_deployment
from e2e.vllm.load import run_load
from e2e.waiting import wait_for
from tests.operator.conftest import StartOperator
from tests.operator.test_operator_cluster import apply, condition, events, get
from tests.operator.test_ownership_and_refusals import wait_for_ticks

pytestmark = [pytest.mark.cluster, pytest.mark.vllm, pytest.mark.prometheus]


class Load:
    """Greedy completions to every ready server of a deployment, in the background, bounded in time."""

    def __init__(self, runner: PodRunner, deployment: str, seconds: float) -> None:
        self.runner, self.deployment = runner, deployment
        self.stop_at = time.monotonic() + seconds
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while time.monotonic() < self.stop_at:
            urls = list(self.runner.endpoints(self.deployment).values())
            if not urls:
                time.sleep(1)
                continue
            for url in urls:
                try:
                    result = run_load(
                        url, model=TARGET_MODEL, n=4, concurrency=2, temperature=0.0, max_tokens=48, time_limit_s=30
                    )
                    self.sent += result.ok
                except Exception:  # a server going away mid-rollout is expected; keep loading the others
                    time.sleep(0.5)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_at = 0
        self.thread.join(timeout=60)


def wait_for_or_explain(diagnose: Any, what: str, probe: Any, timeout: float, interval: float) -> Any:
    """wait_for, but a timeout says what the loop saw (load sent, servers, the decisions) on the error's first line.

    CI keeps only the head and tail of a failure, so the explanation must not come after a line break.
    """
    try:
        return wait_for(what, probe, timeout, interval)
    except TimeoutError as err:
        raise TimeoutError(f"{diagnose()} <- {str(err).splitlines()[0][:200]}") from None


def decision_line(obj: dict[str, Any] | None) -> str:
    """One deployment's last decision in a line: proposal, gate, reason, rollout condition, actuations."""
    status = (obj or {}).get("status") or {}
    rec = status.get("recommendation") or {}
    progressing = condition(obj, "Progressing")
    return (
        f"[{rec.get('at')} {rec.get('proposal')}->{rec.get('action')} gate={rec.get('gate')!r} "
        f"reason={str(rec.get('reason'))[:160]!r} Progressing={progressing.get('status')}/{progressing.get('reason')} "
        f"actuations={len(status.get('actuations') or [])}]"
    )


def operator_notes(running: RunningOperator, limit: int = 1500) -> str:
    """The operator's log lines that say what it did with a decision, in one line (CI keeps only a failure's first
    line): actuations, the failpoint, and every warning or error."""
    wanted = (", actuated", "failpoint", " WARNING ", " ERROR ", " CRITICAL ", "Traceback")
    lines = [line for line in running.log_tail(2000).splitlines() if any(w in line for w in wanted)]
    return " | ".join(line[:300] for line in lines)[-limit:]


def recommendation(obj: dict[str, Any] | None) -> dict[str, Any]:
    return dict(((obj or {}).get("status") or {}).get("recommendation") or {})


def test_autotune_keeps_good_draft_and_disables_bad_draft_once(
    kube_cluster: KubeCluster, kube_namespace: str, stack: tuple[PodRunner, PrometheusServer]
) -> None:
    runner, prometheus = stack
    apply(
        kube_cluster,
        kube_namespace,
        tiny_speculative_deployment("good", draft=GOOD_DRAFT, mode="Recommend", prometheus_url=prometheus.url),
    )
    apply(
        kube_cluster,
        kube_namespace,
        tiny_speculative_deployment("bad", draft=BAD_DRAFT, mode="Auto", prometheus_url=prometheus.url),
    )
    wait_for("both vLLM servers ready", lambda: len(runner.endpoints()) == 2 or runner.failures(), 300, 2)
    assert not runner.failures(), runner.failures()
    bad_before = get(kube_cluster, kube_namespace, "deployment", "bad")
    assert bad_before is not None
    with Load(runner, "good", 800) as good_load, Load(runner, "bad", 800) as bad_load:

        def diagnose() -> str:
            decisions = {n: decision_line(get(kube_cluster, kube_namespace, "specdeploy", n)) for n in ("good", "bad")}
            return (
                f"load sent good={good_load.sent} bad={bad_load.sent}; servers {sorted(runner.endpoints())}; "
                f"failures {runner.failures()}; decisions {decisions}"
            )

        good = wait_for_or_explain(
            diagnose,
            "the good draft's acceptance in status",
            lambda: (
                (o := get(kube_cluster, kube_namespace, "specdeploy", "good"))
                and ((o.get("status") or {}).get("observed") or {}).get("acceptanceRate") is not None
                and o
            ),
            420,
            2,
        )
        bad = wait_for_or_explain(
            diagnose,
            "the bad draft disabled",
            lambda: (
                (o := get(kube_cluster, kube_namespace, "specdeploy", "bad"))
                and (o.get("status") or {}).get("actuations")
                and o
            ),
            420,
            2,
        )
    observed = good["status"]["observed"]
    assert observed["acceptanceRate"] > 0.9, observed
    assert recommendation(good)["action"] == "Keep", recommendation(good)
    assert good["status"]["effective"]["speculation"] is True

    actuation = bad["status"]["actuations"][-1]
    assert actuation["action"] == "DisableSpeculation"
    assert "acceptance" in actuation["reason"]
    evidence = actuation["evidence"]
    assert evidence, "the actuation records its evidence"
    assert bad["status"]["effective"]["speculation"] is False
    assert bad["status"]["effective"]["source"] == "autotune"
    assert condition(bad, "SpeculationActive")["status"] == "False"

    # one rollout: the Deployment's pod template changed once, and exactly one event says why
    after = wait_for(
        "rolled bad deployment",
        lambda: (
            (d := get(kube_cluster, kube_namespace, "deployment", "bad"))
            and d["metadata"]["generation"] > bad_before["metadata"]["generation"]
            and d
        ),
        60,
    )
    assert after["metadata"]["generation"] == bad_before["metadata"]["generation"] + 1
    command = after["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--speculative-config" not in command
    time.sleep(20)  # several more evaluations: nothing else may happen
    final = get(kube_cluster, kube_namespace, "deployment", "bad")
    assert final is not None
    assert final["metadata"]["generation"] == after["metadata"]["generation"]
    disabled = [e for e in events(kube_cluster, kube_namespace, "bad") if e["reason"] == "SpeculationDisabled"]
    assert len(disabled) == 1, disabled
    assert disabled[0]["type"] == "Warning"
    assert "acceptance" in disabled[0]["message"]


def test_canary_replica_is_measured_on_the_same_traffic(
    kube_cluster: KubeCluster, kube_namespace: str, stack: tuple[PodRunner, PrometheusServer]
) -> None:
    """Two replicas, one of them a plain canary: the load reaches both, and the policy compares real numbers."""
    runner, prometheus = stack
    doc = tiny_speculative_deployment("canaried", draft=GOOD_DRAFT, mode="Recommend", prometheus_url=prometheus.url)
    doc["spec"]["replicas"] = 2
    doc["spec"]["autotune"]["canary"] = {"enabled": True}
    apply(kube_cluster, kube_namespace, doc)
    wait_for("both vLLM servers ready", lambda: len(runner.endpoints("canaried")) == 2 or runner.failures(), 300, 2)
    assert not runner.failures(), runner.failures()
    with Load(runner, "canaried", 600) as load:

        def canary_evidence() -> tuple[dict[str, Any] | None, dict[str, Any]]:
            obj = get(kube_cluster, kube_namespace, "specdeploy", "canaried")
            return obj, dict(recommendation(obj).get("evidence", {}).get("canary") or {})

        def diagnose() -> str:
            return (
                f"load sent {load.sent}; servers {sorted(runner.endpoints())}; canary evidence {canary_evidence()[1]}"
            )

        def compared_on_numbers() -> dict[str, Any] | None:
            obj, canary = canary_evidence()
            decided = canary.get("outcome") in ("SpeculationHelps", "SpeculationHurts")
            return obj if decided or "within" in str(canary.get("reason")) else None

        obj = wait_for_or_explain(
            diagnose, "a canary comparison from numbers on both sides", compared_on_numbers, 420, 2
        )
    status = obj["status"]
    canary_hash = status["effective"]["canary"]["configHash"]
    assert status["effective"]["canary"]["speculation"] is False
    assert status["effective"]["speculation"] is True
    # both groups served the same greedy traffic: the canary's own series (by its config hash) have requests
    canary_measurements = status["recommendation"]["canaryMeasurements"]
    assert canary_measurements["requests_in_window"]["class"] == "Valid"
    assert canary_measurements["requests_in_window"]["value"] > 0
    assert f'specpilot_dev_config_hash="{canary_hash}"' in canary_measurements["requests_in_window"]["query"]
    assert status["recommendation"]["measurements"]["acceptance_rate"]["value"] > 0.9
    evidence = status["recommendation"]["evidence"]["canary"]
    assert set(evidence) >= {"outcome", "reason", "speculative", "plain"}, evidence


def test_prometheus_down_sets_metrics_unavailable_and_holds(
    kube_cluster: KubeCluster, kube_namespace: str, stack: tuple[PodRunner, PrometheusServer]
) -> None:
    _runner, prometheus = stack
    apply(
        kube_cluster,
        kube_namespace,
        tiny_speculative_deployment("held", draft=BAD_DRAFT, mode="Auto", prometheus_url=prometheus.url),
    )
    wait_for(
        "first evaluation", lambda: recommendation(get(kube_cluster, kube_namespace, "specdeploy", "held")), 120, 2
    )
    before = get(kube_cluster, kube_namespace, "deployment", "held")
    assert before is not None
    prometheus.stop()
    held = wait_for(
        "MetricsAvailable=False",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "held"))
            and condition(o, "MetricsAvailable").get("status") == "False"
            and o
        ),
        120,
        2,
    )
    assert condition(held, "MetricsAvailable")["reason"] == "MetricsUnavailable"
    assert not (held["status"].get("actuations"))
    assert not [e for e in events(kube_cluster, kube_namespace, "held") if e["reason"] == "SpeculationDisabled"]
    assert held["status"]["effective"]["speculation"] is True
    after = get(kube_cluster, kube_namespace, "deployment", "held")
    assert after is not None
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert [e["type"] for e in events(kube_cluster, kube_namespace, "held") if e["reason"] == "MetricsUnavailable"] == [
        "Warning"
    ]


def test_operator_killed_after_persisting_an_actuation_resumes_with_exactly_one_rollout(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    pods_and_prometheus: tuple[PodRunner, PrometheusServer],
    start_operator: StartOperator,
) -> None:
    """Persist intent before side effects: the operator dies right after writing an actuation to status (before any
    child changed); the restarted operator rolls the Deployment once, from the persisted choice, and the budget
    holds exactly one actuation."""
    runner, prometheus = pods_and_prometheus
    crashing = start_operator(env={"SPECPILOT_FAILPOINT": "exit-after-actuation-status"})
    apply(
        kube_cluster,
        kube_namespace,
        tiny_speculative_deployment("crash", draft=BAD_DRAFT, mode="Auto", prometheus_url=prometheus.url),
    )
    wait_for("vLLM server ready", lambda: len(runner.endpoints("crash")) == 1 or runner.failures(), 300, 2)
    assert not runner.failures(), runner.failures()
    before = get(kube_cluster, kube_namespace, "deployment", "crash")
    assert before is not None
    with Load(runner, "crash", 800) as load:
        wait_for_or_explain(
            lambda: (
                f"load sent {load.sent}; {decision_line(get(kube_cluster, kube_namespace, 'specdeploy', 'crash'))}; "
                f"operator log: {operator_notes(crashing)}"
            ),
            "the operator to die at the failpoint",
            lambda: crashing.process.poll() is not None,
            420,
            2,
        )
        assert crashing.process.returncode == 86, crashing.log_tail()
        persisted = get(kube_cluster, kube_namespace, "specdeploy", "crash")
        assert persisted is not None
        assert [a["action"] for a in persisted["status"]["actuations"]] == ["DisableSpeculation"]
        assert persisted["status"]["effective"]["speculation"] is False
        untouched = get(kube_cluster, kube_namespace, "deployment", "crash")
        assert untouched is not None
        assert untouched["metadata"]["generation"] == before["metadata"]["generation"], "applied before the crash"

        restarted = start_operator()
        rolled = wait_for(
            "the persisted choice rolled out",
            lambda: (
                (d := get(kube_cluster, kube_namespace, "deployment", "crash"))
                and d["metadata"]["generation"] > before["metadata"]["generation"]
                and d
            ),
            60,
        )
        command = rolled["spec"]["template"]["spec"]["containers"][0]["command"]
        assert "--speculative-config" not in command
        wait_for_ticks(restarted, 5)  # several evaluations after the restart: nothing more may happen
    final = get(kube_cluster, kube_namespace, "deployment", "crash")
    assert final is not None
    assert final["metadata"]["generation"] == before["metadata"]["generation"] + 1, "exactly one rollout"
    status = (get(kube_cluster, kube_namespace, "specdeploy", "crash") or {})["status"]
    assert len(status["actuations"]) == 1
    assert len(status["autotune"]["actuations"]) == 1, "the budget was charged once"
