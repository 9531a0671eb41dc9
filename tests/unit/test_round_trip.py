"""Speculation off and back on, through reconcile, stored status, running intent and decision (tests/seams.py).

The off intent here is what production stores: status.effective and status.autotune after the operator's merge
patch and the API server's pruning, not an idealised copy.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.policy.decision import running_intent
from specpilot.vllm.dialects import render_command
from specpilot.vllm.intent import SpeculationIntent
from tests.seams import ROUND_TRIP_SPEC, RoundTrip, round_trip


@pytest.fixture(scope="module")
def trip() -> RoundTrip:
    return round_trip()


def speculative_config(argv: list[str]) -> dict[str, object]:
    return dict(json.loads(argv[argv.index("--speculative-config") + 1]))


def test_reenable_renders_exactly_the_config_that_was_turned_off(trip: RoundTrip) -> None:
    assert "--speculative-config" not in trip.argv_off
    config = speculative_config(trip.argv_reenabled)
    assert config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 15, 4], [16, 64, 0]]
    assert trip.argv_reenabled == trip.argv_on


def test_each_actuation_rolls_the_deployment_once(trip: RoundTrip) -> None:
    # create, disable, probe enable, second disable
    assert trip.cluster.rollouts == 4
    actions = [a["action"] for a in trip.cluster.status["actuations"]]
    assert actions == ["DisableSpeculation", "EnableSpeculation", "DisableSpeculation"]


def test_off_keeps_k_and_threshold_in_the_stored_record(trip: RoundTrip) -> None:
    first_disable = trip.cluster.status["autotune"]["actuations"][0]
    assert first_disable["to"] == {"enabled": False, "numSpeculativeTokens": 4, "disableAboveBatchSize": 16}


def test_probe_and_second_collapse_are_reversals_and_the_dwell_doubles(trip: RoundTrip) -> None:
    records = trip.cluster.status["autotune"]["actuations"]
    assert [(r["probe"], r["reversal"]) for r in records] == [(False, False), (True, True), (False, True)]
    assert trip.enabled_at - trip.disabled_at >= timedelta(minutes=10)  # probeInterval
    assert trip.second_disable_at is not None
    # minInterval 5m x reversalBackoff 2 ^ (1 reversal before + this one) = 20m after the probe
    assert trip.second_disable_at - trip.enabled_at == timedelta(minutes=20)
    assert any("x2 per reversal" in gate for gate in trip.held_gates), trip.held_gates


def test_effective_intent_is_in_the_crd_schema(trip: RoundTrip) -> None:
    # store() prunes like the API server: a field missing from the schema would be gone here
    assert trip.cluster.status["effective"]["intent"]["numSpeculativeTokens"] == 4


SPEC = v1alpha1.parse_spec(ROUND_TRIP_SPEC)


@pytest.mark.parametrize(
    ("effective", "expected"),
    [
        # the lossless record wins over the display fields
        (
            {"speculation": False, "intent": {"enabled": False, "numSpeculativeTokens": 2}, "configHash": "x"},
            SpeculationIntent(False, 2, 16),
        ),
        (
            {
                "speculation": True,
                "intent": {"enabled": True, "numSpeculativeTokens": 3, "batchSchedule": [[1, 64, 3]]},
            },
            SpeculationIntent(True, 3, None, ((1, 64, 3),)),
        ),
        # a status from before the record: K and threshold dropped while off come back from the spec
        ({"speculation": False, "configHash": "x"}, SpeculationIntent(False, 4, 16)),
        ({"speculation": True, "numSpeculativeTokens": 4, "configHash": "x"}, SpeculationIntent(True, 4, 16)),
    ],
)
def test_running_intent_from_stored_status(effective: dict[str, object], expected: SpeculationIntent) -> None:
    assert running_intent({"effective": effective}, SPEC) == expected


def test_legacy_off_status_reenables_with_k() -> None:
    """An operator upgraded while speculation was off: the first re-enable still renders K."""
    intent = running_intent({"effective": {"speculation": False, "configHash": "x"}}, SPEC)
    assert intent is not None
    argv = list(render_command(SPEC, intent.with_speculation()).argv)
    assert speculative_config(argv)["num_speculative_tokens"] == 4


def test_round_trip_events_name_each_transition(trip: RoundTrip) -> None:
    # one tick may carry the same reason twice (the autotuner's message and the condition's); post_events sends one
    per_tick = {(e.reason, e.message.split(";")[0]) for e in trip.cluster.events if e.reason.startswith("Speculation")}
    assert {r for r, _ in per_tick} == {"SpeculationDisabled", "SpeculationEnabled"}
    enabled = [msg for r, msg in per_tick if r == "SpeculationEnabled"]
    assert any(msg.startswith("probe:") for msg in enabled), enabled


def test_an_autotune_rollout_that_misses_its_deadline_is_reverted_and_automation_halts() -> None:
    """Disable actuated, but the plain pods never become available: the next evaluation selects the recorded
    previous intent (speculation on, same K and schedule), halts automation, and the reconcile renders it."""
    from tests.seams import Cluster, evaluate_until_actuated, window_measurements

    cluster = Cluster(dict(ROUND_TRIP_SPEC))
    cluster.reconcile()
    cluster.settle()
    argv_on = cluster.argv()
    cluster.advance(4)
    evaluate_until_actuated(cluster, window_measurements(speculating=True, acceptance=0.2))
    assert "--speculative-config" not in cluster.argv()
    cluster.deadline_exceeded = True
    cluster.advance(1)
    cluster.settle()  # the reconcile sees ProgressDeadlineExceeded on the new config
    degraded = next(c for c in cluster.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "RolloutFailed")
    cluster.deadline_exceeded = False
    cluster.advance(1)
    outcome = cluster.evaluate(window_measurements(speculating=False, acceptance=None))
    assert not outcome.actuated
    assert cluster.argv() == argv_on, "reverted to exactly the config that ran before"
    assert "missed its deadline" in cluster.status["autotuneHalt"]["reason"]
    paused = next(c for c in cluster.status["conditions"] if c["type"] == "Paused")
    assert (paused["status"], paused["reason"]) == ("True", "AutomationPaused")
    assert [e.type for e in cluster.events if e.reason == "RolloutFailed"][:1] == ["Warning"]
    # held while halted: low acceptance on the reverted config changes nothing until a human resumes
    cluster.settle()
    for _ in range(5):
        cluster.advance(1)
        assert not cluster.evaluate(window_measurements(speculating=True, acceptance=0.2)).actuated


def test_a_reenable_kubernetes_never_times_out_is_timed_out_by_the_operator() -> None:
    """The probe returns to the config that ran first, so the Deployment reuses its old ReplicaSet and Kubernetes
    never reports ProgressDeadlineExceeded; the operator's own clock (status.effective.rolloutStarted) fails the
    rollout after its budget (one pod: its 1m grace period, then the 5m rolloutDeadline to load), the autotuner
    reverts to off and halts, with one RolloutFailed warning each."""
    from tests.seams import Cluster, evaluate_until_actuated, window_measurements

    spec = {
        **ROUND_TRIP_SPEC,
        "autotune": {**ROUND_TRIP_SPEC["autotune"], "rolloutDeadline": "5m"},
        "rollout": {"drainSeconds": 20},  # grace period 10 s preStop + 20 s + 30 s = 1m
    }
    cluster = Cluster(json.loads(json.dumps(spec)))
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)
    evaluate_until_actuated(cluster, window_measurements(speculating=True, acceptance=0.2))
    cluster.settle()
    argv_off = cluster.argv()
    plain = window_measurements(speculating=False, acceptance=None)
    probe_at = evaluate_until_actuated(cluster, plain)
    cluster.unavailable_silently = True  # the re-enabled pods crash-loop
    assert "--speculative-config" in cluster.argv()
    started = cluster.status["effective"]["rolloutStarted"]
    for _ in range(5):  # inside the budget: still rolling out, nothing decided
        cluster.advance(1)
        cluster.evaluate(plain)
        assert cluster.status["effective"]["rolloutStarted"] == started
        degraded = next(c for c in cluster.status["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False"
    cluster.advance(2)  # past the budget since the probe's rollout began
    assert cluster.now - probe_at > timedelta(minutes=6)
    cluster.reconcile()
    degraded = next(c for c in cluster.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "RolloutFailed")
    cluster.unavailable_silently = False  # the reverted (plain) pods serve
    cluster.advance(1)
    assert not cluster.evaluate(plain).actuated
    assert cluster.argv() == argv_off, "reverted to the plain config that ran before the probe"
    paused = next(c for c in cluster.status["conditions"] if c["type"] == "Paused")
    assert (paused["status"], paused["reason"]) == ("True", "AutomationPaused")
    for _ in range(3):
        cluster.advance(1)
        cluster.settle()
        assert not cluster.evaluate(plain).actuated
    ready = next(c for c in cluster.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Available")
    active = next(c for c in cluster.status["conditions"] if c["type"] == "SpeculationActive")
    assert "missed its deadline; reverted" in active["message"], "says why it runs, not the probe's old reason"
    paused_events = [e.message for e in cluster.events if e.reason == "AutomationPaused"]
    assert paused_events[0].startswith("halted: the EnableSpeculation rollout"), paused_events  # not "annotation"
    failed = [(e.type, e.message[:60]) for e in cluster.events if e.reason == "RolloutFailed"]
    assert [kind for kind, _ in failed] == ["Warning", "Warning"], failed  # the deadline, then the revert
