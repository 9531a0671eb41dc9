"""Progressive actuation through the real seams (tests/seams.py): conclude -> reconcile -> stored status -> next.

A 3-replica Auto deployment whose drafter collapses: the autotuner decides to switch speculation off. That change goes
to one pod first (the `-canary` Deployment, one replica, the main one scaled to two and still speculating), is
compared with the incumbents after the analysis window, then promoted to every pod, or rolled back when the trial pod
measures slower. A one-replica deployment and Recommend mode keep today's path.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specpilot.api import timestamps, v1alpha1
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Signal
from specpilot.reconcile import manifests
from tests.seams import ROUND_TRIP_SPEC, Cluster, evaluate_until_actuated, m, window_measurements

COLLAPSED = window_measurements(speculating=True, acceptance=0.2)  # incumbents: mean TPOT 11 ms at batch 2


def trial_pod(tpot_mean_s: float) -> dict[str, Measurement]:
    """The trial pod (speculation off) over the same window: plain, at the same batch, `tpot_mean_s` per token."""
    plain = window_measurements(speculating=False, acceptance=None)
    plain[str(Signal.TPOT_MEAN)] = m(Signal.TPOT_MEAN, tpot_mean_s)
    return plain


def three_replicas(**autotune: Any) -> Cluster:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["replicas"] = 3
    raw["autotune"].update(autotune)
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)  # past the settling time of the first config
    return cluster


def speculating(deployment: dict[str, Any] | None) -> bool:
    assert deployment is not None
    return "--speculative-config" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]


def replicas(deployment: dict[str, Any] | None) -> int:
    assert deployment is not None
    return int(deployment["spec"]["replicas"])


def reasons(cluster: Cluster) -> list[str]:
    return [e.reason for e in cluster.events]


def start_trial(cluster: Cluster) -> dict[str, Any]:
    """Evaluate until the disable is decided; it must start a trial on one pod and leave the others as they were."""
    on_hash = cluster.status["effective"]["configHash"]
    evaluate_until_actuated(cluster, COLLAPSED)
    trial = cluster.status["trial"]
    assert trial["phase"] == "Running"
    assert trial["incumbentConfigHash"] == on_hash
    assert trial["intent"]["enabled"] is False
    assert "TrialStarted" in reasons(cluster)
    assert "SpeculationDisabled" not in reasons(cluster)
    assert speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 2
    assert not speculating(cluster.canary)
    assert replicas(cluster.canary) == 1
    assert cluster.canary is not None
    assert (
        cluster.canary["spec"]["template"]["metadata"]["annotations"]["specpilot.dev/config-hash"]
        == trial["configHash"]
    )
    assert cluster.status["effective"]["configHash"] == on_hash
    assert cluster.status["autotune"]["actuations"][-1]["action"] == "DisableSpeculation"  # charged to the budget
    cluster.settle()  # the reconcile on the trial Deployment's update records its pod ready (status.effective.canary)
    return dict(trial)


def analyse(cluster: Cluster, trial_tpot: float, minutes: int = 10) -> list[str]:
    """Evaluate once a minute, the trial pod measuring `trial_tpot`, until the trial ends; returns the phases seen."""
    phases = []
    for _ in range(minutes):
        cluster.advance(1)
        cluster.evaluate(COLLAPSED, trial_pod(trial_tpot))
        phases.append(cluster.status["trial"]["phase"])
        if phases[-1] != "Running":
            break
    return phases


def test_one_pod_first_then_promoted_to_every_pod() -> None:
    cluster = three_replicas()
    start_trial(cluster)
    phases = analyse(cluster, 0.010)
    # 10% faster: within twice the tolerance (10%), so not decisive; ready at the first evaluation, analysed 2m30s
    # later (window + 2 scrapes): promoted at the fourth
    assert phases == ["Running", "Running", "Running", "Promoted"], phases
    trial = cluster.status["trial"]
    assert trial["outcome"] == "Successful"
    assert trial["speedup"] == 1.1
    assert "decisive" not in trial["reason"]
    assert trial["candidate"]["p50TpotMs"] == 10.0
    assert trial["incumbent"]["requests"] == 400
    assert not speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 3
    assert cluster.canary is None  # the trial pod is gone
    assert cluster.status["effective"]["configHash"] == trial["configHash"]
    assert {"TrialPromoted", "SpeculationDisabled"} <= set(reasons(cluster))
    trial_condition = next(c for c in cluster.status["conditions"] if c["type"] == "Trial")
    assert (trial_condition["status"], trial_condition["reason"]) == ("False", "TrialPromoted")
    # the next decision waits for the promotion's rollout, then for its settling, like any rollout
    cluster.advance(1)
    assert cluster.evaluate(COLLAPSED).decision["gate"] == "rollout in progress"


@pytest.mark.parametrize(
    ("trial_tpot", "phases", "outcome"),
    [
        (0.008, ["Promoted"], "Successful"),  # 27% faster (speedup 1.375 > 1.2)
        (0.020, ["RolledBack"], "Failed"),  # 82% slower
        (0.0125, ["Running", "Running", "Running", "RolledBack"], "Failed"),  # 14% slower: beyond 10%, within 20%
        (0.0095, ["Running", "Running", "Running", "Promoted"], "Successful"),  # speedup 1.158: within 20%
    ],
)
def test_a_decisive_analysis_concludes_before_its_span(trial_tpot: float, phases: list[str], outcome: str) -> None:
    """Beyond twice regressionTolerance either way the trial ends at the first evaluation that measures it; within
    that, it waits for the whole analysis span even where the span's own bar is already crossed."""
    cluster = three_replicas()
    start_trial(cluster)
    assert analyse(cluster, trial_tpot) == phases
    trial = cluster.status["trial"]
    assert trial["outcome"] == outcome
    assert ("decisive before" in trial["reason"]) == (len(phases) == 1), trial["reason"]


def test_slower_trial_rolls_back_and_is_not_retried_at_once() -> None:
    cluster = three_replicas()
    start_trial(cluster)
    phases = analyse(cluster, 0.020)
    assert phases[-1] == "RolledBack", phases
    trial = cluster.status["trial"]
    assert trial["outcome"] == "Failed"
    assert "slower" in trial["reason"]
    assert speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 3
    assert cluster.canary is None
    assert cluster.status["effective"]["configHash"] == trial["incumbentConfigHash"]
    assert cluster.status["autotune"]["selected"]["enabled"] is True
    assert "TrialRolledBack" in reasons(cluster)
    assert "SpeculationDisabled" not in reasons(cluster)
    # the same disable is agreed again, but held until retryAfter
    gates = []
    for _ in range(5):
        cluster.advance(1)
        outcome = cluster.evaluate(COLLAPSED)
        assert not outcome.actuated
        gates.append(outcome.decision["gate"])
    assert any(g.startswith("trial rolled back; not tried again before") for g in gates), gates


def test_a_rolled_back_config_is_tried_again_before_its_retry_time_once_the_traffic_shifts() -> None:
    """The rollback's verdict holds for the traffic it was measured on: the trial records the incumbents' traffic as
    it ended, and acceptance moving beyond the ordinary drift (0.20 -> 0.02) re-opens the same disable at once."""
    cluster = three_replicas()
    on_hash = start_trial(cluster)["incumbentConfigHash"]
    assert analyse(cluster, 0.020)[-1] == "RolledBack"
    trial = cluster.status["trial"]
    assert trial["traffic"] == {"configHash": on_hash, "acceptanceRate": 0.2}
    retry_after = timestamps.parse_time(trial["retryAfter"])
    gates: list[str] = []
    while not gates or not gates[-1].startswith("trial rolled back; not tried again before"):
        assert len(gates) < 5, gates  # the same disable is agreed again on the same traffic, and held
        cluster.advance(1)
        held = cluster.evaluate(COLLAPSED)
        assert not held.actuated
        gates.append(held.decision["gate"])
    started_again = evaluate_until_actuated(cluster, window_measurements(speculating=True, acceptance=0.02))
    assert started_again < retry_after
    assert cluster.status["trial"]["phase"] == "Running"
    assert cluster.status["trial"]["intent"]["enabled"] is False
    assert not speculating(cluster.canary)
    started = [e.message for e in cluster.events if e.reason == "TrialStarted"][-1]
    assert started.endswith(
        f"(tried again before its retryAfter {trial['retryAfter']}: the traffic shifted since its rollback, "
        "acceptance 0.20 -> 0.02)"
    ), started


def test_trial_pod_loading_is_not_analysed() -> None:
    cluster = three_replicas()
    start_trial(cluster)
    cluster.canary_ready = False
    cluster.reconcile()
    for _ in range(6):  # twice the analysis span
        cluster.advance(1)
        cluster.evaluate(COLLAPSED, trial_pod(0.020))
    assert cluster.status["trial"]["phase"] == "Running"
    assert "readyAt" not in cluster.status["trial"]
    cluster.canary_ready = True
    assert analyse(cluster, 0.008)[-1] == "Promoted"


def test_one_replica_changes_all_at_once() -> None:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)
    evaluate_until_actuated(cluster, COLLAPSED)
    assert "trial" not in cluster.status
    assert cluster.canary is None
    assert not speculating(cluster.deployment)
    assert "SpeculationDisabled" in reasons(cluster)


def test_recommend_mode_never_creates_a_trial_pod() -> None:
    cluster = three_replicas(mode="Recommend")
    for _ in range(10):
        cluster.advance(1)
        cluster.evaluate(COLLAPSED)
    assert cluster.status["recommendation"]["action"] == "DisableSpeculation"  # it would change something
    assert "trial" not in cluster.status
    assert cluster.canary is None
    assert speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 3


def test_a_spec_edit_during_the_trial_abandons_it() -> None:
    cluster = three_replicas()
    start_trial(cluster)
    cluster.spec["speculation"]["numSpeculativeTokens"] = 3  # the user's edit wins at once
    cluster.reconcile()
    assert cluster.canary is None
    assert replicas(cluster.deployment) == 3
    cluster.advance(1)
    cluster.evaluate(COLLAPSED, trial_pod(0.008))
    assert cluster.status["trial"]["phase"] == "Abandoned"
    assert "TrialAbandoned" in reasons(cluster)


def test_with_surge_the_trial_pod_is_the_extra_one() -> None:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["rollout"] = {"maxSurge": 1, "maxUnavailable": 0}
    cluster = Cluster(raw)  # one replica, but a spare pod's worth of GPUs
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)
    evaluate_until_actuated(cluster, COLLAPSED)
    assert cluster.status["trial"]["phase"] == "Running"
    assert speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 1  # the only incumbent keeps serving
    assert not speculating(cluster.canary)
    assert replicas(cluster.canary) == 1
    cluster.settle()
    assert analyse(cluster, 0.008)[-1] == "Promoted"
    assert replicas(cluster.deployment) == 1
    assert not speculating(cluster.deployment)


def test_the_trial_borrows_the_canary_slot_and_gives_it_back() -> None:
    cluster = three_replicas(canary={"enabled": True})
    assert cluster.canary is not None
    assert not speculating(cluster.canary)  # the other mode: plain beside speculating pods
    other_mode = cluster.status["effective"]["canary"]["configHash"]
    plain = trial_pod(0.011)  # the plain canary is no faster: no canary-driven change
    for _ in range(60):
        cluster.advance(1)
        if cluster.evaluate(COLLAPSED, plain).actuated:
            break
    trial = cluster.status["trial"]
    assert trial["phase"] == "Running"
    assert replicas(cluster.deployment) == 2  # the canary's replica is the trial's: still one pod of three
    # the disable's config is the plain canary's own command line: the slot's pod already runs the trial
    assert trial["configHash"] == other_mode
    assert cluster.status["effective"]["canary"]["configHash"] == trial["configHash"]
    cluster.settle()
    assert analyse(cluster, 0.008)[-1] == "Promoted"
    # speculation is off everywhere now, so the canary returns in the other mode: speculating
    assert not speculating(cluster.deployment)
    assert replicas(cluster.deployment) == 2
    assert speculating(cluster.canary)
    assert cluster.status["effective"]["canary"]["configHash"] != other_mode


@pytest.mark.parametrize(
    ("replicas", "surge", "canary", "trial", "main"),
    [
        (3, 0, False, True, 2),  # the trial pod is one of the three
        (3, 1, False, True, 3),  # surge: the trial pod is the extra one
        (1, 1, False, True, 1),
        (3, 1, True, True, 2),  # the canary already gave up a replica: the trial takes its place
        (3, 0, True, False, 2),  # the other-mode canary as before
        (3, 0, False, False, 3),
    ],
)
def test_main_replicas_beside_a_trial(replicas: int, surge: int, canary: bool, trial: bool, main: int) -> None:
    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["replicas"] = replicas
    raw["rollout"] = {"maxSurge": surge, "maxUnavailable": 0 if surge else 1}
    raw["autotune"]["canary"] = {"enabled": canary}
    spec = v1alpha1.parse_spec(raw)
    assert manifests.main_replicas(spec, with_canary=canary or trial, trial=trial) == main


def unexplained(tpot_mean_s: float = 0.040) -> dict[str, Measurement]:
    """Incumbents at acceptance 0.3, requests waiting, and a mean TPOT the H100 profile prices at a quarter of it: no
    usable cost model, and no plain figure yet to compare with."""
    window = window_measurements(speculating=True, acceptance=0.3)
    window[str(Signal.TPOT_MEAN)] = m(Signal.TPOT_MEAN, tpot_mean_s)
    window[str(Signal.WAITING_REQUESTS)] = m(Signal.WAITING_REQUESTS, 4.0)  # a queue: the engine at its limit
    return window


@pytest.mark.parametrize(
    ("stabilization", "agreed_after_minutes", "shortened_to"),
    [
        # the trial takes the 90s restart and the analysis span (the 2m window and two 15s scrapes): 4 minutes
        ("20m", 4, "4m"),
        ("4m", 4, None),  # a span no longer than the trial is kept as declared
        ("2m", 2, None),
    ],
)
def test_an_experiment_waits_as_long_as_its_trial_takes_not_the_whole_stabilization(
    stabilization: str, agreed_after_minutes: int, shortened_to: str | None
) -> None:
    """The experiment's one-pod trial is the check the stabilization span would be; it waits only as long as the
    trial takes, so that a doubt lasting that long is measured by the trial and one passing sooner is not."""
    cluster = three_replicas(stabilization=stabilization)
    agreed_at = None
    for minute in range(1, 12):
        cluster.advance(1)
        decision = cluster.evaluate(unexplained()).decision
        assert decision is not None
        assert decision["reason"].startswith("experiment: "), decision
        if not decision["gate"].startswith("waiting for agreement"):
            agreed_at = minute - 1  # the streak starts at the first evaluation
            break
    assert agreed_at == agreed_after_minutes, cluster.outcomes[-1][1].decision
    agreement = decision["evidence"]["agreement"]
    assert agreement.get("stabilizationShortenedTo") == shortened_to, agreement
    assert ("its one-pod trial takes" in agreement.get("why", "")) is (shortened_to is not None)


SPAN = ["Running", "Running", "Running"]  # ready at the first evaluation, analysed 2m30s later


@pytest.mark.parametrize(
    ("trial_tpot", "incumbents_tpot", "phases", "outcome"),
    [
        # plain 25% faster than the incumbents during the trial and before it: decisive, switched off at once
        (0.030, 0.040, ["Promoted"], "Successful"),
        (0.034, 0.040, [*SPAN, "Promoted"], "Successful"),  # 15% faster: beyond the tolerance, after the whole span
        (0.038, 0.040, [*SPAN, "RolledBack"], "Successful"),  # 5% faster: not enough
        (0.060, 0.040, ["RolledBack"], "Failed"),  # plain 50% slower: speculation stays, decisively
        # the incumbents slowed by the trial's restart (60 ms against 40 ms before it): 37% faster than them, 5%
        # faster than they ran before the trial, which is the verdict that counts (so not decisive either)
        (0.038, 0.060, [*SPAN, "RolledBack"], "Successful"),
    ],
)
def test_an_experiment_measures_plain_on_one_pod_and_keeps_it_only_if_faster(
    trial_tpot: float, incumbents_tpot: float, phases: list[str], outcome: str
) -> None:
    """Low acceptance that neither a usable cost model nor a plain comparison can judge: the disable is an experiment,
    plain on one pod beside the speculating ones (status.trial.experiment), promoted only when measured faster
    beyond the tolerance than the incumbents both during the trial and as they ran before it (a fresh pod beside
    incumbents that carried its traffic flatters itself), before the end of its span only when both gains are
    decisive."""
    cluster = three_replicas()
    evaluate_until_actuated(cluster, unexplained())
    trial = cluster.status["trial"]
    assert (trial["phase"], trial["experiment"], trial["intent"]["enabled"]) == ("Running", True, False)
    assert trial["incumbentTpotBeforeMs"] == 40.0
    assert trial["trafficBefore"] == {"configHash": trial["incumbentConfigHash"], "acceptanceRate": 0.3}
    started = next(e for e in cluster.events if e.reason == "TrialStarted")
    assert started.message.startswith("one pod first: experiment: acceptance 0.30 < disableBelow 0.50"), started
    assert "at saturation (4 requests waiting on average)" in started.message
    assert speculating(cluster.deployment)
    assert not speculating(cluster.canary)
    cluster.settle()
    seen = []
    for _ in range(10):
        cluster.advance(1)
        cluster.evaluate(unexplained(incumbents_tpot), trial_pod(trial_tpot))
        seen.append(cluster.status["trial"]["phase"])
        if seen[-1] != "Running":
            break
    assert seen == phases, cluster.status["trial"]
    assert cluster.status["trial"]["outcome"] == outcome
    assert speculating(cluster.deployment) is (phases[-1] == "RolledBack")
    if trial_tpot == 0.038:
        assert "not faster beyond 10%" in cluster.status["trial"]["reason"]
        before = "40.00 ms on the incumbents before the trial (-5%)"
        assert (before in cluster.status["trial"]["reason"]) is (incumbents_tpot > 0.040)


def with_rate(window: dict[str, Measurement], requests_per_s: float) -> dict[str, Measurement]:
    return {**window, str(Signal.REQUEST_RATE): m(Signal.REQUEST_RATE, requests_per_s)}


@pytest.mark.parametrize(
    ("rate_after", "reason"),
    [
        (4.0, "load back under the crossover: 4.00 requests/s"),  # the burst passed: back on at once
        # a higher rate (clients that wait for each answer finish more with the faster config): the probe is not
        # gated on it, and comes after probeInterval
        (15.0, "probe: speculation off since"),
    ],
)
def test_an_experiment_at_saturation_is_undone_when_the_request_rate_falls_and_probed_as_usual(
    rate_after: float, reason: str
) -> None:
    """Plain measured faster at saturation says nothing of the traffic after it: the experiment records the request
    rate it was measured at (off kind saturation), and speculation comes back (one pod first) once the rate falls
    below it beyond the tolerance; at the same rate it stays off until its probe, which the rate does not gate."""
    cluster = three_replicas()
    saturated = with_rate(unexplained(), 10.0)
    evaluate_until_actuated(cluster, saturated)
    assert cluster.status["trial"]["experiment"] is True
    cluster.settle()
    for _ in range(10):
        cluster.advance(1)
        cluster.evaluate(saturated, trial_pod(0.030))
        if cluster.status["trial"]["phase"] != "Running":
            break
    assert cluster.status["trial"]["phase"] == "Promoted", cluster.status["trial"]
    off = cluster.status["autotune"]["off"]
    assert (off["kind"], off["requestRate"]) == ("saturation", 10.0), off
    cluster.settle()
    plain = trial_pod(0.030)
    reasons = []
    for _ in range(5):  # the same rate, within the tolerance: the disable holds
        cluster.advance(1)
        held = cluster.evaluate(with_rate(plain, 9.5))
        assert not held.actuated, held.decision
        reasons.append(held.decision["reason"])
    assert "next probe after" in reasons[-1], reasons  # decided, past the rollout's settling, and held
    assert not speculating(cluster.deployment)
    evaluate_until_actuated(cluster, with_rate(plain, rate_after))
    decision = cluster.outcomes[-1][1].decision
    assert decision["reason"].startswith(reason), decision
    assert cluster.status["trial"]["phase"] == "Running"
    assert cluster.status["trial"]["intent"]["enabled"] is True  # speculation back on one pod first
