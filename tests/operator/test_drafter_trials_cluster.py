"""Candidate drafters on the local cluster: the real operator tries a candidate on one pod and promotes the winner.

The set-up of test_progressive_cluster.py: a 3-replica Auto SpeculativeDeployment of simulated 8B/H100 engines
started by the pod runner from each pod's own command line, real Prometheus scraping every pod by config hash, and
round-robin load at temperature 2, where the declared 1B draft model accepts ~0.36 and costs more than it saves. The
acceptance floor is set low so that autotune keeps the declared drafter on, leaving the choice to the candidate
trial. The n-gram candidate (almost free to draft) runs on one pod first, measures faster than the incumbents beyond
the tolerance, and is promoted: every pod runs n-gram, status.effective.drafter and the DRAFTER column say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.podrunner import PodRunner
from e2e.prometheus.fixture import PrometheusServer
from e2e.waiting import wait_for
from specpilot.cli.main import main as specpilot
from tests.operator.test_closed_loop import decision_line, wait_for_or_explain
from tests.operator.test_operator_cluster import events, get
from tests.operator.test_progressive_cluster import (
    NAME,
    RoundRobinLoad,
    applied_with_three_pods,
    sim_pods,
    three_replicas,
)

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
__all__ = ["sim_pods"]  # the fixture, shared with test_progressive_cluster.py


def with_ngram_candidate(prometheus_url: str) -> dict[str, Any]:
    cr = three_replicas(prometheus_url)
    cr["spec"]["speculation"]["candidates"] = [
        {"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 2, "promptLookupMax": 4}
    ]
    cr["spec"]["autotune"]["acceptance"] = {"disableBelow": 0.05, "enableAbove": 0.1}
    return cr


def command(deployment: dict[str, Any] | None) -> str:
    assert deployment is not None
    return " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["command"]).replace(" ", "")


@pytest.mark.timeout(900)
def test_a_faster_candidate_drafter_is_tried_on_one_pod_and_promoted(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    sim_pods: tuple[PodRunner, PrometheusServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runner, prometheus = sim_pods
    watched = applied_with_three_pods(kube_cluster, kube_namespace, runner, with_ngram_candidate(prometheus.url))
    cr, status, deployment, trial = watched.cr, watched.status, watched.deployment, watched.trial

    def ready() -> str:
        found = [c for c in status().get("conditions") or [] if c.get("type") == "Ready"]
        return f"{found[0].get('status')}/{found[0].get('reason')}: {found[0].get('message')}" if found else "-"

    with RoundRobinLoad(runner, 12) as load:

        def diagnose() -> str:
            return (
                f"load sent {load.sent} ({load.errors} errors); trial {trial().get('phase')} ready at "
                f"{trial().get('readyAt')}, analysis at {trial().get('analysisAt')}; "
                f"slot {(status().get('effective') or {}).get('canary')}; ready {ready()}; "
                f"candidates {status().get('candidates')}; {decision_line(cr())}"
            )

        started = wait_for_or_explain(
            diagnose, "the candidate's trial started", lambda: trial().get("phase") == "Running" and trial(), 240, 1
        )
        assert started["candidateName"] == "ngram", started
        assert status()["candidates"][0]["verdict"] == "Trialling"
        main, canary = deployment(), deployment("-canary")
        assert '"method":"ngram"' in command(canary), "one pod runs the candidate's drafter"
        assert "Llama-3.2-1B" in command(main), "the incumbents keep the declared drafter"
        assert main is not None
        assert main["spec"]["replicas"] == 2
        ended = wait_for_or_explain(diagnose, "the candidate's trial ended", lambda: trial().get("phase") != "Running"
                                    and trial(), 180, 1)  # fmt: skip
        assert ended["phase"] == "Promoted", ended
        record = status()["candidates"][0]
        assert record["verdict"] == "Won", record
        assert record["speedup"] > 1.05, record
        print(f"\ncandidate won: {record['reason']}")
        wait_for_or_explain(
            diagnose,
            "every pod on the n-gram drafter, the trial pod gone",
            lambda: (
                (d := deployment()) is not None
                and '"method":"ngram"' in command(d)
                and d["spec"]["replicas"] == 3
                and deployment("-canary") is None
            ),
            60,
            1,
        )
    assert status()["effective"]["drafter"] == "ngram"
    reasons = [e["reason"] for e in events(kube_cluster, kube_namespace, NAME)]
    assert {"TrialStarted", "CandidateWon", "TrialPromoted"} <= set(reasons), reasons
    table = kube_cluster.kubectl("-n", kube_namespace, "get", "specdeploy", NAME, "-o", "wide").stdout
    print(table)
    assert "ngram" in table
    # `specpilot report` on the live object compares the candidates from the status the operator wrote
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    capsys.readouterr()
    out = tmp_path / "report"
    args = [NAME, "-n", kube_namespace, "--prometheus", prometheus.url, "--since", "15m", "-o", str(out)]
    assert specpilot(["report", *args]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| ngram |"))
    assert "| Won |" in row
    assert f"| {record['speedup']:.2f}x |" in row
    assert row in (out / "report.md").read_text()


@pytest.mark.timeout(900)
def test_in_recommend_the_faster_candidate_is_recommended_and_its_pod_removed(
    kube_cluster: KubeCluster, kube_namespace: str, sim_pods: tuple[PodRunner, PrometheusServer]
) -> None:
    runner, prometheus = sim_pods
    doc = with_ngram_candidate(prometheus.url)
    doc["spec"]["autotune"]["mode"] = "Recommend"
    watched = applied_with_three_pods(kube_cluster, kube_namespace, runner, doc)
    status, trial = watched.status, watched.trial

    with RoundRobinLoad(runner, 12) as load:

        def diagnose() -> str:
            sent = f"load sent {load.sent} ({load.errors} errors)"
            return f"{sent}; trial {trial()}; candidates {status().get('candidates')}"

        started = wait_for_or_explain(
            diagnose, "the candidate's trial started", lambda: trial().get("phase") and trial(), 240, 1
        )
        assert (started["phase"], started["candidateName"]) == ("Running", "ngram"), started
        assert '"method":"ngram"' in command(get(kube_cluster, kube_namespace, "deployment", f"{NAME}-canary"))
        ended = wait_for_or_explain(diagnose, "the candidate's trial ended", lambda: trial().get("phase") != "Running"
                                    and trial(), 180, 1)  # fmt: skip
        assert ended["phase"] == "Recommended", ended  # the API server stored the new phase
        wait_for("the trial pod removed", lambda: get(kube_cluster, kube_namespace, "deployment", f"{NAME}-canary")
                 is None, 60, 1)  # fmt: skip
    final = status()
    assert final["candidates"][0]["verdict"] == "Won", final["candidates"]
    assert final["candidates"][0]["traffic"]["configHash"] == ended["incumbentConfigHash"]
    assert final["recommendation"]["drafter"]["name"] == "ngram", final["recommendation"]
    main = get(kube_cluster, kube_namespace, "deployment", NAME)
    assert main is not None
    assert "Llama-3.2-1B" in command(main), "every pod keeps the declared drafter"
    assert main["spec"]["replicas"] == 3
    assert final["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"
    reasons = [e["reason"] for e in events(kube_cluster, kube_namespace, NAME)]
    assert {"TrialStarted", "CandidateWon", "TrialRecommended"} <= set(reasons), reasons
    assert "TrialPromoted" not in reasons
