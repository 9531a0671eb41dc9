"""Candidate drafters tried one pod at a time: the choice (pure, table-driven) and the path through the real seams.

The choice: the first Untried candidate, or a Lost / Inconclusive one past its retry wait; a Won one is not tried
again; a verdict needs a margin beyond the tolerance. Through tests/seams.py: a 3-replica Auto deployment with two
candidates runs the first on the trial pod (its drafter on the `-canary` Deployment, the main one untouched); it wins
and is promoted to every pod; the second is tried against it and loses. In Recommend the winner is recommended
(status.recommendation.drafter) and its pod removed; Off and one replica without surge run no trial pod.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from specpilot.api import rollout, v1alpha1
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import CandidateStatus, CandidateVerdict, TrialOutcome
from specpilot.autotune.policy import drafters
from specpilot.autotune.policy import trial as trials
from specpilot.autotune.policy.traffic import traffic_shift
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Signal
from tests.seams import ROUND_TRIP_SPEC, T0, Cluster, m, window_measurements

HEALTHY = window_measurements(speculating=True, acceptance=0.7)  # incumbents: mean TPOT 11 ms at batch 2
CANDIDATES = [
    {"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 2, "promptLookupMax": 4},
    {"name": "big", "method": "draft_model", "draft": {"model": "meta-llama/Llama-3.2-3B-Instruct"},
     "numSpeculativeTokens": 5},
]  # fmt: skip


def record(verdict: CandidateVerdict, retry_after: int | None = None, name: str = "c") -> CandidateStatus:
    retry = None if retry_after is None else format_time(T0 + timedelta(minutes=retry_after))
    return CandidateStatus(name=name, method="ngram", drafter="ngram", verdict=verdict, retry_after=retry)


U, L, INC, W = CandidateVerdict.UNTRIED, CandidateVerdict.LOST, CandidateVerdict.INCONCLUSIVE, CandidateVerdict.WON


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([], None),
        ([record(U), record(U)], 0),
        ([record(W), record(U)], 1),  # a winner is not tried again
        ([record(L, retry_after=10), record(U)], 1),  # a loser within its wait is skipped
        ([record(L, retry_after=10), record(INC, retry_after=5)], None),
        ([record(L, retry_after=-1), record(U)], 0),  # the wait is over: tried again, in the spec's order
        ([record(W), record(INC, retry_after=0)], 1),
        ([record(CandidateVerdict.TRIALLING), record(W)], None),
    ],
)
def test_next_candidate(records: list[CandidateStatus], expected: int | None) -> None:
    assert drafters.next_candidate(records, T0) == expected


def ended_trial(outcome: TrialOutcome | None, speedup: float | None) -> v1alpha1.TrialStatus:
    intent = {"enabled": True, "numSpeculativeTokens": 4}
    return v1alpha1.TrialStatus.model_validate(
        {"intent": intent, "configHash": "a", "incumbentIntent": intent, "incumbentConfigHash": "b",
         "phase": "RolledBack", "startedAt": format_time(T0), "outcome": outcome, "speedup": speedup}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("outcome", "speedup", "expected"),
    [
        (TrialOutcome.SUCCESSFUL, 1.375, W),
        (TrialOutcome.SUCCESSFUL, 1.05, INC),  # not slower, but not faster beyond the 10% tolerance either
        (TrialOutcome.FAILED, 0.5, L),
        (TrialOutcome.INCONCLUSIVE, None, INC),
        (None, None, L),  # the trial pod never became ready
    ],
)
def test_verdict_needs_a_margin(outcome: TrialOutcome | None, speedup: float | None, expected: Any) -> None:
    assert drafters.verdict_of(ended_trial(outcome, speedup), tolerance=0.10) is expected


def cluster_with(replicas: int = 3, mode: str = "Auto", **rollout: Any) -> Cluster:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["replicas"] = replicas
    raw["autotune"]["mode"] = mode
    raw["speculation"]["candidates"] = copy.deepcopy(CANDIDATES)
    if rollout:
        raw["rollout"] = rollout
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)  # past the settling time of the first config
    return cluster


def trial_pod(tpot_mean_s: float) -> dict[str, Measurement]:
    pod = window_measurements(speculating=True, acceptance=0.5)
    pod[str(Signal.TPOT_MEAN)] = m(Signal.TPOT_MEAN, tpot_mean_s)
    return pod


def command(deployment: dict[str, Any] | None) -> str:
    assert deployment is not None
    return " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["command"])


def run_trial(
    cluster: Cluster, tpot_mean_s: float, minutes: int = 8, incumbent: dict[str, Measurement] | None = None
) -> None:
    """Let the trial pod become ready, then evaluate once a minute until its trial ends."""
    cluster.settle()
    for _ in range(minutes):
        cluster.advance(1)
        cluster.evaluate(incumbent or HEALTHY, trial_pod(tpot_mean_s))
        if cluster.status["trial"]["phase"] != "Running":
            return
    raise AssertionError(f"the trial did not end: {cluster.status['trial']}")


def test_each_candidate_runs_on_one_pod_and_gets_a_verdict() -> None:
    cluster = cluster_with()
    main_before = command(cluster.deployment)
    cluster.evaluate(HEALTHY)
    trial = cluster.status["trial"]
    assert (trial["phase"], trial["candidateName"], trial["action"]) == ("Running", "ngram", "TryCandidate")
    assert cluster.status["candidates"][0]["verdict"] == "Trialling"
    assert cluster.status["candidates"][0]["trials"] == 1
    assert cluster.status["candidates"][1]["verdict"] == "Untried"
    assert '"method":"ngram"' in command(cluster.canary).replace(" ", "")
    assert command(cluster.deployment) == main_before  # the incumbents keep the declared drafter
    assert cluster.deployment is not None
    assert cluster.deployment["spec"]["replicas"] == 2
    assert cluster.status["autotune"]["actuations"][-1]["action"] == "TryCandidate"  # charged to the budget
    assert any(e.reason == "TrialStarted" and "ngram" in e.message for e in cluster.events)

    run_trial(cluster, 0.008)  # 11 ms / 8 ms: faster beyond the tolerance
    won = cluster.status["candidates"][0]
    assert won["verdict"] == "Won", won
    assert won["speedup"] == 1.375
    assert won["candidate"]["requests"] == 400
    assert won["evidenceTime"]
    assert {"CandidateWon", "TrialPromoted"} <= {e.reason for e in cluster.events}
    # promoted: every pod runs the winner's drafter with its K, and status.effective says so
    assert cluster.status["trial"]["phase"] == "Promoted"
    assert cluster.canary is None
    assert '"method":"ngram"' in command(cluster.deployment).replace(" ", "")
    assert cluster.deployment is not None
    assert cluster.deployment["spec"]["replicas"] == 3
    effective = cluster.status["effective"]
    assert (effective["drafter"], effective["method"], effective["numSpeculativeTokens"]) == ("ngram", "ngram", 3)
    assert cluster.status["autotune"]["drafter"] == "ngram"
    promoted_main = command(cluster.deployment)
    cluster.settle()

    # the next candidate waits for the promotion's rollout, then runs against the promoted drafter; it measures slower
    # and loses: the winner stays on every pod
    assert evaluations_until_a_trial(cluster, HEALTHY, limit=12) is not None
    assert cluster.status["trial"]["candidateName"] == "big"
    assert "Llama-3.2-3B" in command(cluster.canary)
    assert command(cluster.deployment) == promoted_main
    run_trial(cluster, 0.020)
    lost = cluster.status["candidates"][1]
    assert lost["verdict"] == "Lost", lost
    assert "retryAfter" not in lost, "a loser waits for the traffic to change, not for a time"
    assert lost["traffic"] == {"configHash": cluster.status["trial"]["incumbentConfigHash"], "acceptanceRate": 0.7}
    assert "CandidateLost" in [e.reason for e in cluster.events]
    assert cluster.status["trial"]["phase"] == "RolledBack"
    assert command(cluster.deployment) == promoted_main
    assert cluster.status["effective"]["drafter"] == "ngram"

    # nothing is left to try on the same traffic, however long: no new trial pod
    for _ in range(20):
        cluster.advance(1)
        outcome = cluster.evaluate(HEALTHY)
        assert outcome.decision, "an evaluation ran"
        assert cluster.status["trial"]["phase"] == "RolledBack"
    assert cluster.canary is None


def test_a_promotion_whose_rollout_fails_returns_to_the_declared_drafter() -> None:
    cluster = cluster_with()
    main_before = command(cluster.deployment)
    cluster.evaluate(HEALTHY)
    run_trial(cluster, 0.008)
    assert cluster.status["trial"]["phase"] == "Promoted"
    assert '"method":"ngram"' in command(cluster.deployment).replace(" ", "")
    cluster.deadline_exceeded = True  # the n-gram pods never become available
    cluster.advance(1)
    cluster.settle()
    cluster.deadline_exceeded = False
    cluster.advance(1)
    cluster.evaluate(HEALTHY)
    assert "missed its deadline" in cluster.status["autotuneHalt"]["reason"]
    assert command(cluster.deployment) == main_before, "the declared drafter and its config, exactly"
    assert cluster.status["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"


def lost_on_traffic(**measured: float) -> Cluster:
    """A deployment whose first candidate lost on HEALTHY traffic plus `measured` (signal name -> value)."""
    cluster = cluster_with()
    cluster.evaluate(with_signals(HEALTHY, **measured))
    run_trial(cluster, 0.020, incumbent=with_signals(HEALTHY, **measured))
    assert cluster.status["candidates"][0]["verdict"] == "Lost"
    cluster.spec["speculation"]["candidates"] = cluster.spec["speculation"]["candidates"][:1]  # only the loser
    return cluster


def with_signals(base: dict[str, Measurement], **values: float) -> dict[str, Measurement]:
    return {**base, **{str(Signal(k)): m(Signal(k), v) for k, v in values.items()}}


def evaluations_until_a_trial(cluster: Cluster, measurements: dict[str, Measurement], limit: int = 20) -> int | None:
    for i in range(limit):
        cluster.advance(1)
        outcome = cluster.evaluate(measurements)
        assert outcome.decision, "an evaluation ran"
        if cluster.status["trial"]["phase"] == "Running":
            return i
    return None


@pytest.mark.parametrize(
    ("before", "after", "reopened"),
    [
        ({}, {}, False),  # the same traffic: the loser stays a loser
        ({}, {"acceptance_rate": 0.62}, False),  # drift within ACCEPTANCE_SHIFT
        ({}, {"acceptance_rate": 0.45}, True),  # acceptance fell by 0.25 under the same incumbent config
        ({"output_tokens_p50": 200}, {"output_tokens_p50": 260}, False),
        ({"output_tokens_p50": 200}, {"output_tokens_p50": 60}, True),  # much shorter answers
        ({"mean_prompt_tokens": 500}, {"mean_prompt_tokens": 2400}, True),  # much longer prompts
    ],
)
def test_a_loser_is_tried_again_only_when_the_traffic_shifts(
    before: dict[str, float], after: dict[str, float], reopened: bool
) -> None:
    cluster = lost_on_traffic(**before)
    started = evaluations_until_a_trial(cluster, with_signals(HEALTHY, **{**before, **after}))
    assert (started is not None) is reopened, cluster.status["candidates"][0]
    if reopened:
        assert cluster.status["candidates"][0]["trials"] == 2
        started_event = [e for e in cluster.events if e.reason == "TrialStarted"][-1]
        assert "re-opened: the traffic shifted since its verdict" in started_event.message


@pytest.mark.parametrize(
    ("trial_ms", "incumbents_ms", "verdict", "evaluations"),
    [
        # 11 ms / 8 ms during the trial and before it: decisive (beyond twice the tolerance), promoted at once
        (8.0, 11.0, "Won", 1),
        (9.5, 11.0, "Won", 4),  # 11 ms / 9.5 ms: beyond the tolerance, within twice it: at the end of the span
        # the incumbents slowed to 16 ms by the trial pod's restart: 1.5x faster than them, but only 1.05x faster
        # than the 11 ms they ran at before the trial, which is the gain that counts: neither decisive nor a win
        (10.5, 16.0, "Inconclusive", 4),
    ],
)
def test_a_candidate_must_beat_the_incumbents_as_they_ran_before_its_trial_too(
    trial_ms: float, incumbents_ms: float, verdict: str, evaluations: int
) -> None:
    """A fresh trial pod beside incumbents that carried its traffic while it restarted flatters itself: its gain is
    the smaller of the two speedups (trial.measured_gain), and only that gain, when decisive, ends the trial early."""
    cluster = cluster_with()
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["incumbentTpotBeforeMs"] == 11.0
    cluster.settle()
    seen = []
    for _ in range(8):
        cluster.advance(1)
        cluster.evaluate(with_signals(HEALTHY, tpot_mean=incumbents_ms / 1000), trial_pod(trial_ms / 1000))
        seen.append(cluster.status["trial"]["phase"])
        if seen[-1] != "Running":
            break
    assert seen[:-1] == ["Running"] * (evaluations - 1), seen
    assert len(seen) == evaluations, seen
    record = cluster.status["candidates"][0]
    assert record["verdict"] == verdict, record
    assert ("decisive before" in cluster.status["trial"]["reason"]) is (evaluations == 1)
    assert ("11.00 ms on the incumbents before the trial" in cluster.status["trial"]["reason"]) is (
        incumbents_ms != 11.0
    )


def test_a_candidate_within_the_noise_is_inconclusive_and_not_promoted() -> None:
    cluster = cluster_with()
    main_before = command(cluster.deployment)
    cluster.evaluate(HEALTHY)
    run_trial(cluster, 0.0105)  # 11 ms / 10.5 ms = 1.048: not slower, not faster beyond the 10% tolerance
    record = cluster.status["candidates"][0]
    assert record["verdict"] == "Inconclusive", record
    assert record["retryAfter"]
    assert cluster.status["trial"]["phase"] == "RolledBack"
    assert command(cluster.deployment) == main_before
    assert cluster.status["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert "drafter" not in cluster.status["autotune"]


@pytest.mark.parametrize(
    ("replicas", "mode", "rollout", "reason"),
    [
        (3, "Off", {}, drafters.NEEDS_MODE),
        (1, "Auto", {}, drafters.NEEDS_SPARE_POD),
        (1, "Recommend", {}, drafters.NEEDS_SPARE_POD),  # one replica without surge: recommend-only, nothing measured
    ],
)
def test_no_trial_pod_where_trials_cannot_run(replicas: int, mode: str, rollout: dict[str, Any], reason: str) -> None:
    cluster = cluster_with(replicas, mode, **rollout)
    for _ in range(3):
        cluster.advance(1)
        cluster.evaluate(HEALTHY)
    assert cluster.canary is None
    assert "trial" not in cluster.status
    assert [c["verdict"] for c in cluster.status["candidates"]] == ["Untried", "Untried"]
    assert {c["reason"] for c in cluster.status["candidates"]} == {reason}
    assert "speedup" not in cluster.status["candidates"][0]  # no figures invented
    assert "drafter" not in (cluster.status.get("recommendation") or {})  # nothing recommended without evidence


@pytest.mark.parametrize(
    ("mode", "replicas", "surge", "autotune_trial", "candidate_trial", "reason"),
    [
        ("Auto", 3, 0, True, True, None),
        ("Auto", 1, 1, True, True, None),
        ("Auto", 1, 0, False, False, drafters.NEEDS_SPARE_POD),
        ("Recommend", 3, 0, False, True, None),  # autotune only recommends; a drafter's trial is a measurement
        ("Recommend", 1, 1, False, True, None),
        ("Recommend", 1, 0, False, False, drafters.NEEDS_SPARE_POD),
        ("Off", 3, 0, False, False, drafters.NEEDS_MODE),
    ],
)
def test_which_trials_may_run(
    mode: str, replicas: int, surge: int, autotune_trial: bool, candidate_trial: bool, reason: str | None
) -> None:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw |= {"replicas": replicas, "rollout": {"maxSurge": surge, "maxUnavailable": 0 if surge else 1}}
    raw["autotune"]["mode"] = mode
    raw["speculation"]["candidates"] = copy.deepcopy(CANDIDATES)
    spec = v1alpha1.parse_spec(raw)
    assert rollout.can_trial(spec) is autotune_trial
    assert trials.can_trial_candidates(spec) is candidate_trial
    assert drafters.untried_reason(spec) == reason


def test_in_recommend_the_winner_is_recommended_not_promoted() -> None:
    cluster = cluster_with(3, "Recommend")
    main_before = command(cluster.deployment)
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["candidateName"] == "ngram"
    assert '"method":"ngram"' in command(cluster.canary).replace(" ", "")
    run_trial(cluster, 0.008)  # 11 ms / 8 ms: faster beyond the tolerance
    won = cluster.status["candidates"][0]
    assert won["verdict"] == "Won", won
    assert cluster.status["trial"]["phase"] == "Recommended"
    assert cluster.canary is None, "the trial pod is removed"
    assert command(cluster.deployment) == main_before, "every pod keeps the declared drafter"
    assert cluster.status["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert "drafter" not in cluster.status["autotune"]
    recommendation = cluster.status["recommendation"]["drafter"]
    assert (recommendation["name"], recommendation["method"], recommendation["speedup"]) == ("ngram", "ngram", 1.375)
    reasons = [e.reason for e in cluster.events]
    assert {"TrialRecommended", "CandidateWon"} <= set(reasons)
    assert "TrialPromoted" not in reasons
    condition = next(c for c in cluster.status["conditions"] if c["type"] == "Trial")
    assert (condition["status"], condition["reason"]) == ("False", "TrialRecommended")

    # the next candidate is measured against the declared drafter, loses, and the recommendation stays the winner
    assert evaluations_until_a_trial(cluster, HEALTHY, limit=12) is not None
    assert cluster.status["trial"]["candidateName"] == "big"
    run_trial(cluster, 0.020)
    assert cluster.status["candidates"][1]["verdict"] == "Lost"
    assert cluster.status["recommendation"]["drafter"]["name"] == "ngram"
    assert command(cluster.deployment) == main_before


def test_trials_count_against_the_actuation_budget() -> None:
    cluster = cluster_with()
    cluster.spec["autotune"]["budget"] = {"minInterval": "1m", "maxPerHour": 1, "maxPerDay": 1}
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["candidateName"] == "ngram"
    run_trial(cluster, 0.020)  # lost
    reasons = []
    for _ in range(5):
        cluster.advance(1)
        cluster.evaluate(HEALTHY)
        reasons.append(cluster.status["candidates"][1].get("reason", ""))
    assert cluster.status["trial"]["candidateName"] == "ngram", "no second trial within the budget"
    assert reasons[-1].startswith("waiting for the actuation budget: 1 actuations in the last 1h"), reasons


def test_one_replica_with_surge_runs_the_trial_as_the_extra_pod() -> None:
    cluster = cluster_with(1, "Auto", maxSurge=1, maxUnavailable=0)
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["candidateName"] == "ngram"
    assert cluster.deployment is not None
    assert cluster.deployment["spec"]["replicas"] == 1
    assert cluster.canary is not None
    assert cluster.canary["spec"]["replicas"] == 1


def test_a_removed_candidate_abandons_its_trial() -> None:
    cluster = cluster_with()
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["candidateName"] == "ngram"
    cluster.spec["speculation"]["candidates"] = cluster.spec["speculation"]["candidates"][1:]
    cluster.advance(1)
    cluster.evaluate(HEALTHY)
    assert cluster.status["trial"]["phase"] == "Abandoned"
    assert [c["name"] for c in cluster.status["candidates"]] == ["big"]
    cluster.spec["speculation"]["candidates"] = []
    cluster.advance(1)
    cluster.evaluate(HEALTHY)
    assert not cluster.status.get("candidates")


def traffic(
    config: str = "a", acceptance: float | None = 0.7, output: float | None = 200, prompt: float | None = 500
) -> Any:
    return v1alpha1.MeasuredTraffic(
        config_hash=config, acceptance_rate=acceptance, output_tokens_p50=output, mean_prompt_tokens=prompt
    )


@pytest.mark.parametrize(
    ("then", "now", "shift"),
    [
        (traffic(), traffic(), None),
        (traffic(), traffic(acceptance=0.5), "acceptance 0.70 -> 0.50"),
        (traffic(), traffic(acceptance=0.6), None),  # within 0.15
        (traffic(), traffic(config="b", acceptance=0.2), None),  # another drafter runs: its acceptance says nothing
        (traffic(), traffic(config="b", output=90), "median output 200 -> 90 tokens"),  # lengths do not depend on it
        (traffic(), traffic(output=400), "median output 200 -> 400 tokens"),
        (traffic(), traffic(prompt=260), None),
        (traffic(), traffic(prompt=250), "mean prompt 500 -> 250 tokens"),
        (traffic(acceptance=None, output=None), traffic(acceptance=0.1, output=10), None),  # nothing to compare with
        (None, traffic(), None),  # a verdict from before traffic was kept
        (traffic(), None, None),  # nothing measured now: no shift assumed
    ],
)
def test_traffic_shift(then: Any, now: Any, shift: str | None) -> None:
    assert traffic_shift(then, now) == shift
