"""N replicas in the benchmark: the balancer, rolling restarts with drain and surge, the progressive path, the
merged scrapes the controller reads, and a tiny benchmark at two replicas (virtual clock, seconds)."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from specpilot.autotune.evaluate import measure
from specpilot.autotune.model.costprofile import fit_settings_for
from specpilot.autotune.model.rollcost import restart_cost_seconds
from specpilot.autotune.signals.promql import Scope, Signal
from specpilot.bench import oracles, report
from specpilot.bench.fleet import Fleet, Pod, PodState, pick
from specpilot.bench.layout import Balancer, Layout
from specpilot.bench.main import replicas
from specpilot.bench.queries import ScrapeHistory, SimQueryClient
from specpilot.bench.runner import (
    ONE_REPLICA,
    Replica,
    closed_loop_spec,
    deploy,
    for_replicas,
    rollout_layout,
    rows_of,
    run_restarted,
    run_scenario,
    run_specpilot,
    specpilot_alone,
)
from specpilot.bench.scenarios import Arrival, Scenario, arrivals, scenario_named
from specpilot.bench.specpilot_policy import OperatorController, to_datetime, to_seconds
from specpilot.sim.presets import LLAMA8B_H100
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

RESTART_AT = 150.0


def small(qps: float = 2.0, alpha: float = 1.0, duration_s: float = 600.0) -> Scenario:
    """An 8B scenario (90 s restarts) at a steady `qps` and a constant drafter multiplier `alpha`."""
    base = scenario_named("drafter-degraded")
    return replace(base, name="small", duration_s=duration_s, qps=((0.0, qps),), alpha_multiplier=((0.0, alpha),),
                   window_s=120.0)  # fmt: skip


def layout(n: int = 2, balancer: Balancer = Balancer.ROUND_ROBIN, surge: int = 0, drain_s: float = 300.0) -> Layout:
    return Layout(n, balancer, surge, 0 if surge else 1, drain_s)


def pods_with(outstanding: list[int]) -> list[Pod]:
    """Serving pods with these many requests sent to them and not yet seen by their engines."""
    scenario = small()
    pods = []
    for uid, count in enumerate(outstanding):
        replica = Replica(scenario, LLAMA8B_H100, oracles.static(3), 1)
        items = [Arrival(f"r{uid}-{i}", 0.0, 10, 10, 10, 0.0, 1.0) for i in range(count)]
        pods.append(Pod(uid, replica, PodState.SERVING, items))
    return pods


@pytest.mark.parametrize(
    ("balancer", "outstanding", "turn", "chosen"),
    [
        (Balancer.ROUND_ROBIN, [0, 0, 0], 0, 0),
        (Balancer.ROUND_ROBIN, [0, 0, 0], 4, 1),
        (Balancer.ROUND_ROBIN, [9, 0, 0], 3, 0),  # round robin ignores the load
        (Balancer.LEAST_OUTSTANDING, [3, 1, 2], 0, 1),
        (Balancer.LEAST_OUTSTANDING, [3, 1, 2], 2, 1),
        (Balancer.LEAST_OUTSTANDING, [1, 1, 1], 2, 2),  # ties rotate with the turn
        (Balancer.LEAST_OUTSTANDING, [0, 5, 0], 1, 2),
    ],
)
def test_the_balancer_picks_the_pod(balancer: Balancer, outstanding: list[int], turn: int, chosen: int) -> None:
    pods = pods_with(outstanding)
    assert [p.outstanding for p in pods] == outstanding
    assert pick(balancer, pods, turn).uid == chosen


@pytest.mark.parametrize(
    ("replicas_", "surge", "unavailable", "cost"),
    [
        (1, 0, 1, 90.0),  # one replica without surge: an outage
        (2, 0, 1, 90.0),  # two waves of half the serving
        (4, 0, 1, 90.0),
        (4, 0, 2, 90.0),
        (3, 0, 2, 120.0),  # waves of 2 and 1 pods: 2 x 90 x 2/3
        (2, 1, 0, 0.0),  # surge: never below N serving
        (1, 1, 0, 0.0),
        (2, 1, 1, 45.0),  # one pod down while the surge pod loads: one wave of half the serving
    ],
)
def test_a_restart_is_priced_by_its_rollout_path(replicas_: int, surge: int, unavailable: int, cost: float) -> None:
    assert restart_cost_seconds(90.0, replicas_, surge, unavailable) == pytest.approx(cost)


def restarted(scenario: Scenario, lay: Layout) -> Replica | Fleet:
    items = arrivals(scenario, 1)
    return run_restarted(scenario, oracles.static(3), [RESTART_AT], 1, items, lay)


@pytest.mark.parametrize("balancer", list(Balancer))
@pytest.mark.parametrize(("n", "surge"), [(2, 0), (3, 0), (2, 1), (1, 1)])
def test_a_rolling_restart_with_drain_loses_no_request(balancer: Balancer, n: int, surge: int) -> None:
    scenario = for_replicas(small(), n)
    fleet = restarted(scenario, layout(n, balancer, surge))
    assert isinstance(fleet, Fleet)
    # the restart happened: every pod was replaced, one wave after another, and the rollout finished
    assert len(fleet.retired) == n
    assert len(fleet.pods) == n
    assert fleet.actuations == 1
    assert (fleet.changes, fleet.trials) == (0, 0), "a restart into the same config changes nothing"
    assert not fleet.rolling
    assert fleet.config_since >= RESTART_AT + n * LLAMA8B_H100.restart_s  # one pod loads at a time
    in_flight = [o for o in fleet.outcomes if o.arrival < RESTART_AT and o.e2e and o.arrival + o.e2e > RESTART_AT]
    assert in_flight, "requests were in flight when the rollout began"
    assert sum(1 for o in fleet.outcomes if o.failed) == 0
    assert all(len(p.items) > 0 for p in fleet.pods), "the new pods served"


def test_one_replica_without_surge_is_an_outage() -> None:
    """The same restart on one pod: deploy gives the outage path, which aborts and loses requests."""
    scenario = small()
    assert isinstance(deploy(scenario, LLAMA8B_H100, oracles.static(3), 1, ONE_REPLICA), Replica)
    outage = restarted(scenario, ONE_REPLICA)
    assert sum(1 for o in outage.outcomes if o.failed) > 0


def test_a_request_longer_than_the_drain_is_failed() -> None:
    """With a 2 s drain the requests still running when their pod's drain ends are aborted, with their tokens; the
    same rollout with the default 300 s drain loses none."""
    scenario = for_replicas(small(), 2)
    drained = restarted(scenario, layout(2, drain_s=2.0))
    assert isinstance(drained, Fleet)
    failed = [o for o in drained.outcomes if o.failed]
    assert failed
    assert all(o.tokens > 0 for o in failed), "they had started: in flight, not lost arrivals"
    assert all(o.arrival < drained.config_since for o in failed), "aborted during the rollout"
    assert not [o for o in restarted(scenario, layout(2)).outcomes if o.failed]


@pytest.mark.parametrize(("surge", "fewest_serving"), [(0, 1), (1, 2)])
def test_surge_keeps_capacity(surge: int, fewest_serving: int) -> None:
    """Stepping through a 2-replica rollout second by second: with surge the new pod loads before an old one
    drains, so two pods serve throughout; without it one does while the other drains and loads."""
    scenario = for_replicas(small(), 2)
    items = arrivals(scenario, 1)
    fleet = deploy(scenario, LLAMA8B_H100, oracles.static(3), 1, layout(2, surge=surge))
    assert isinstance(fleet, Fleet)
    fleet.run_until(RESTART_AT, items)
    fleet.restart(oracles.static(1), RESTART_AT)
    serving, pods, t = [], [], RESTART_AT
    while fleet.rolling:
        t += 1.0
        fleet.run_until(t, items)
        serving.append(sum(1 for p in fleet.pods if p.state is PodState.SERVING))
        pods.append(len(fleet.pods))
    assert len(serving) > 2 * LLAMA8B_H100.restart_s * 0.9, "the rollout took two pods' restarts"
    assert min(serving) == fewest_serving
    assert max(pods) == 2 + surge
    assert fleet.intent == oracles.static(1)
    assert all(p.replica.intent == oracles.static(1) for p in fleet.pods)


def test_arrivals_never_reach_a_pod_out_of_the_endpoints() -> None:
    """Every request a pod got arrived while it served: none while it loaded, none after its drain began."""
    scenario = for_replicas(small(), 2)
    fleet = restarted(scenario, layout(2))
    assert isinstance(fleet, Fleet)
    for pod in fleet.retired:
        drain_began = pod.drain_deadline - fleet.layout.drain_s
        assert pod.items
        assert all(a.at <= drain_began for a in pod.items)
    for pod in fleet.pods:
        assert all(a.at >= pod.ready_at for a in pod.items)


def canary_fleet(running: SpeculationIntent, changed: SpeculationIntent) -> Fleet:
    """Two pods at a steady load on a drafter that accepts little (speculation slows the steps), one changed."""
    scenario = for_replicas(small(qps=4.0, alpha=0.3), 2)
    items = arrivals(scenario, 1)
    fleet = deploy(scenario, LLAMA8B_H100, running, 1, layout(2))
    assert isinstance(fleet, Fleet)
    fleet.run_until(60.0, items)
    fleet.canary(changed, 60.0)
    fleet.run_until(560.0, items)
    assert fleet.trial_config == (fleet.method, changed)
    assert sum(p.state is PodState.SERVING and p.replica.intent == changed for p in fleet.pods) == 1
    return fleet


@pytest.mark.parametrize(
    ("running", "changed", "promote"),
    [(oracles.off(), oracles.static(3), False), (oracles.static(3), oracles.off(), True)],
)
def test_a_canary_pod_is_promoted_to_every_pod_or_rolled_back(
    running: SpeculationIntent, changed: SpeculationIntent, promote: bool
) -> None:
    """The progressive path's mechanics (the operator decides which: run_operator): after promotion every pod runs
    the canary's config, after a rollback the running one, each pod replaced with drain."""
    fleet = canary_fleet(running, changed)
    (fleet.promote if promote else fleet.rollback)(560.0)
    items = arrivals(fleet.scenario, 1)
    fleet.run_until(1200.0, items)
    expected = changed if promote else running
    assert not fleet.rolling
    assert fleet.intent == expected
    assert all(p.replica.intent == expected for p in fleet.pods)
    assert fleet.actuations == (1 if promote else 2)
    # one trial either way; only a promotion changes what every pod serves
    assert (fleet.changes, fleet.trials) == ((1, 1) if promote else (0, 1))
    assert fleet.trial_config is None


def test_the_fleet_history_answers_the_operators_queries_across_pods() -> None:
    """The controller's queries over two pods: rates and running requests add up, the batch size is the pods'
    mean and its peak the largest, as the operator's PromQL aggregates them (promql.py)."""
    scenario = for_replicas(small(qps=4.0), 2)
    fleet = deploy(scenario, LLAMA8B_H100, oracles.static(3), 1, layout(2))
    assert isinstance(fleet, Fleet)
    fleet.run_until(600.0, arrivals(scenario, 1))
    spec = closed_loop_spec(scenario, replicas=2)
    scope = Scope("bench", "bench", oracles.label(oracles.static(3)))  # the running configuration's series
    names = metric_names_for(VllmVersion.parse("0.32.0"))

    def measured(history: ScrapeHistory) -> dict[Signal, float]:
        client = SimQueryClient(names, scope, history, to_seconds, 50, scenario.max_model_len, None)
        m = measure(spec, scope, client, to_datetime(600.0))
        return {s: m[s].value or 0.0 for s in (Signal.REQUEST_RATE, Signal.RUNNING_REQUESTS, Signal.BATCH_SIZE,
                                               Signal.BATCH_SIZE_PEAK, Signal.ACCEPTANCE_RATE)}  # fmt: skip

    whole = measured(fleet.history)
    each = [measured(p.replica.history) for p in fleet.pods]
    assert whole[Signal.REQUEST_RATE] == pytest.approx(sum(e[Signal.REQUEST_RATE] for e in each))
    assert whole[Signal.RUNNING_REQUESTS] == pytest.approx(sum(e[Signal.RUNNING_REQUESTS] for e in each))
    assert whole[Signal.BATCH_SIZE] == pytest.approx(sum(e[Signal.BATCH_SIZE] for e in each) / 2)
    assert whole[Signal.BATCH_SIZE_PEAK] == max(e[Signal.BATCH_SIZE_PEAK] for e in each)
    assert min(e[Signal.ACCEPTANCE_RATE] for e in each) <= whole[Signal.ACCEPTANCE_RATE]
    assert whole[Signal.ACCEPTANCE_RATE] <= max(e[Signal.ACCEPTANCE_RATE] for e in each)
    assert whole[Signal.BATCH_SIZE] > 1


@pytest.mark.parametrize(("text", "says"), [("0", "between 1 and 16"), ("17", "between 1 and 16"), ("two", "number")])
def test_a_bad_replica_count_says_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        replicas(text)


def test_a_layout_that_could_never_replace_a_pod_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot both be 0"):
        Layout(2, Balancer.ROUND_ROBIN, 0, 0)


def test_tiny_benchmark_at_two_replicas() -> None:
    """Every policy at two replicas: each row says so, the specpilot closed loop loses no request to actuation, and
    the text table prints both columns."""
    tiny = replace(small(qps=1.0, duration_s=480.0), name="tiny", window_s=240.0,
                   alpha_multiplier=((0.0, 1.0), (239.0, 1.0), (240.0, 0.45)))  # fmt: skip
    lay = rollout_layout(tiny, 2)
    assert (lay.replicas, lay.max_surge, lay.max_unavailable, lay.drain_s) == (2, 0, 1, 300.0)
    runs, meta = run_scenario(tiny, seed=1, layout=lay)
    rows = {r["policy"]: r for r in rows_of(runs, for_replicas(tiny, 2), 1)}
    assert all(r["replicas"] == 2 for r in rows.values())
    assert rows["specpilot"]["failed"] == 0
    assert meta["replicas"] == 2
    assert meta["balancer"] == "round-robin"
    assert rows["oracle"]["goodput"] >= max(meta["static_goodput"].values())
    assert rows["always-on"]["goodput"] <= rows["oracle-from-declared"]["goodput"] <= rows["oracle"]["goodput"]
    text = report.table(list(rows.values()))
    assert "failed" in text.splitlines()[0]
    assert "replicas" in text.splitlines()[0]
    (alone,) = specpilot_alone([(tiny, 1, lay)])  # `bench --specpilot-only`: the same run, to the request
    (mine,) = [r for r in runs if r.policy == "specpilot"]
    assert alone.outcomes == mine.outcomes
    assert (alone.actuations, alone.changes, alone.trials, alone.notes) == (
        mine.actuations,
        mine.changes,
        mine.trials,
        mine.notes,
    )


def test_specpilot_changes_one_pod_first_then_the_rest_and_loses_nothing() -> None:
    """drafter-degraded at two replicas (x0.1 in time, 1,000 s): specpilot's change goes to one pod, the analysis
    after one query window promotes it (the changed pod is faster), the other pod follows, and no request is aborted
    or lost (clients that gave up waiting while one pod served both pods' load are not the rollout's doing)."""
    scenario = for_replicas(replace(scenario_named("drafter-degraded").scaled(0.1), duration_s=1000.0), 2)
    lay = rollout_layout(scenario, 2)
    fleet, controller = run_specpilot(scenario, 1, arrivals(scenario, 1), None, lay)
    assert isinstance(fleet, Fleet)
    assert isinstance(controller, OperatorController), "the operator's own evaluation and trials"
    actuated = [d for d in controller.decisions if d["actuate"]]
    assert len(actuated) == 1
    assert (fleet.actuations, fleet.changes, fleet.trials) == (1, 1, 1)
    trial_events = [e for e in controller.events if "Trial" in e]
    assert [e.split(" ", 2)[1] for e in trial_events] == ["TrialStarted:", "TrialPromoted:"], trial_events
    assert len(fleet.retired) == 2, "the first pod, then the other"
    assert fleet.intent != controller.initial_intent()
    assert controller.status["trial"]["phase"] == "Promoted"
    assert all(p.replica.intent == fleet.intent for p in fleet.pods)
    assert sum(1 for o in fleet.outcomes if o.failed and not o.timed_out) == 0


def test_a_rollout_reversed_midway_replaces_only_what_the_first_one_changed() -> None:
    """As the Deployment controller does: a change back to the running configuration while the first pod's
    replacement still loads deletes that pod and starts one of the old configuration; the untouched pod stays."""
    scenario = for_replicas(small(), 2)
    items = arrivals(scenario, 1)
    fleet = deploy(scenario, LLAMA8B_H100, oracles.static(3), 1, layout(2))
    assert isinstance(fleet, Fleet)
    untouched = fleet.pods[1]
    fleet.run_until(RESTART_AT, items)
    fleet.restart(oracles.static(1), RESTART_AT)
    fleet.run_until(RESTART_AT + 60, items)
    assert [p.replica.intent for p in fleet.pods if p.state is PodState.STARTING] == [oracles.static(1)]
    fleet.restart(oracles.static(3), RESTART_AT + 60)
    fleet.run_until(scenario.duration_s, items)
    assert not fleet.rolling
    assert untouched in fleet.pods
    assert all(p.replica.intent == oracles.static(3) for p in fleet.pods)
    assert (fleet.actuations, fleet.changes, fleet.trials) == (2, 2, 0)
    assert sum(1 for o in fleet.outcomes if o.failed) == 0


@pytest.mark.parametrize(("replicas_", "surge", "cost"), [(1, 0, 90.0), (2, 0, 90.0), (2, 1, 0.0), (1, 1, 0.0)])
def test_the_fit_prices_a_restart_by_its_specs_rollout_path(replicas_: int, surge: int, cost: float) -> None:
    spec = closed_loop_spec(small(), replicas=replicas_, max_surge=surge)
    assert (spec.replicas, spec.rollout.max_surge) == (replicas_, surge)
    assert fit_settings_for(spec).restart_cost_s == cost  # what the controller's (and the operator's) fit uses
