"""The drafter choice in the benchmark: candidate drafters as simulator configs, the pods converging to what the
reconcile renders, and the operator's own candidate trials in closed loop on the draft-choice scenarios (virtual
clock; the quick version of `specpilot bench --scenario draft-choice --replicas 2`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specpilot.api.v1alpha1 import AutotuneObjective
from specpilot.autotune.policy import drafters
from specpilot.bench import oracles
from specpilot.bench.fleet import Fleet, PodState
from specpilot.bench.runner import (
    _drafter_switches,
    _static_job,
    closed_loop_document,
    closed_loop_spec,
    for_replicas,
    rollout_layout,
    run_specpilot,
    run_static,
)
from specpilot.bench.scenarios import arrivals, scenario_named
from specpilot.bench.specpilot_policy import OperatorController, simulated_drafter
from specpilot.cli.main import validate_document
from specpilot.sim.acceptance import expected_tokens
from specpilot.sim.presets import LLAMA8B_H100, LLAMA70B_4XH100

# The trial of the first candidate starts at the first evaluation (60 s), its pod is ready after the 70B's restart
# (300 s), the analysis needs one 5-minute window and two scrapes after that and is extended once when the incumbent
# pod's load was not comparable (it served alone while the trial pod loaded): it ends by 1200 s.
TRIAL_ENDS_BY_S = 1200.0


def test_each_drafter_has_its_own_acceptance_and_cost() -> None:
    """The larger draft model accepts more per position and costs more per forward than the 1B draft; n-gram is a
    lookup with its own bursty acceptance."""
    small, large, ngram = (LLAMA70B_4XH100.drafter(m) for m in ("draft_model", "draft_model_8b", "ngram"))
    assert expected_tokens(large, 4) > expected_tokens(small, 4)
    assert large.cost_ratio > small.cost_ratio
    assert ngram.kind.value == "lookup"


@pytest.mark.parametrize(
    ("name", "declared", "candidate"),
    [("draft-choice", "ngram", "draft_model"), ("draft-choice-already-best", "draft_model", "draft_model_8b")],
)
def test_the_bench_cr_declares_one_drafter_and_lists_the_other(name: str, declared: str, candidate: str) -> None:
    """The CR the bench hands the controller is one `specpilot validate` accepts (candidates, memory plan), and
    declares the interactive objective the scenario is judged by."""
    scenario = scenario_named(name)
    spec = closed_loop_spec(scenario, replicas=2)
    assert spec.autotune.objective is AutotuneObjective.LATENCY
    assert simulated_drafter(spec.speculation) == declared
    assert [simulated_drafter(c) for c in spec.speculation.candidates] == [candidate]
    problems, _ = validate_document(closed_loop_document(scenario, replicas=2))
    assert problems == []


def test_the_faster_drafter_on_this_traffic_is_the_candidate() -> None:
    """Ground truth for the scenario, from static runs on one pod: the 1B draft model serves chat traffic with a
    lower mean TPOT than n-gram, and than the 8B draft model."""
    scenario = replace(scenario_named("draft-choice"), duration_s=150.0)
    items = arrivals(scenario, 1)

    def mean_tpot(drafter: str) -> float:
        run = run_static(replace(scenario, method=drafter), oracles.static(4), 1, items)
        tpots = [o.tpot for o in run.outcomes if o.tpot is not None]
        return sum(tpots) / len(tpots)

    small = mean_tpot("draft_model")
    assert small < mean_tpot("ngram") / 1.1
    assert small < mean_tpot("draft_model_8b")


def test_the_fleet_converges_to_what_the_reconcile_renders() -> None:
    """A trial puts one pod on the candidate drafter; a promotion rolls the others to it; a rollback returns the trial
    pod to the running config (8B, 90 s restarts, light load)."""
    base = scenario_named("drafter-degraded")
    scenario = for_replicas(replace(base, duration_s=900.0, qps=((0.0, 1.0),), alpha_multiplier=((0.0, 1.0),)), 2)
    items = arrivals(scenario, 1)
    fleet = Fleet(scenario, LLAMA8B_H100, oracles.static(3), 1, rollout_layout(scenario, 2))
    declared, candidate = ("eagle3", oracles.static(3)), ("draft_model", oracles.static(3))
    fleet.converge(declared, candidate, 10.0)
    fleet.run_until(150.0, items)
    assert sorted(fleet.runs(p)[0] for p in fleet.pods if p.state is PodState.SERVING) == ["draft_model", "eagle3"]
    assert fleet.trial_config == candidate
    assert fleet.history_of(candidate).series, "the trial pod's scrapes are its own series"
    fleet.converge(candidate, None, 150.0)  # promoted
    fleet.run_until(600.0, items)
    assert fleet.config == candidate
    assert {fleet.runs(p) for p in fleet.pods} == {candidate}
    fleet.converge(candidate, declared, 600.0)  # a trial of the other way round, rolled back
    fleet.run_until(750.0, items)
    assert fleet.trial_config == declared
    fleet.converge(candidate, None, 750.0)
    fleet.run_until(900.0, items)
    assert fleet.trial_config is None
    assert fleet.config == candidate
    assert not [o for o in fleet.outcomes if o.failed]


@pytest.mark.parametrize(
    ("name", "ends_on", "verdicts"),
    [
        ("draft-choice", "draft_model", {"Won"}),  # the candidate is faster: promoted to every pod
        ("draft-choice-already-best", "draft_model", {"Lost", "Inconclusive"}),  # tried, not kept: nothing changes
    ],
)
def test_the_operator_tries_the_candidate_and_keeps_the_faster(name: str, ends_on: str, verdicts: set[str]) -> None:
    """The operator's own evaluation (OperatorController) in closed loop at two replicas, over the scenario's first
    TRIAL_ENDS_BY_S seconds with its analysis window unchanged: the candidate's trial ran on one pod and ended with a
    verdict, and the deployment runs the faster drafter, with no request lost."""
    scenario = for_replicas(replace(scenario_named(name), duration_s=TRIAL_ENDS_BY_S), 2)
    fleet, controller = run_specpilot(scenario, 1, arrivals(scenario, 1), layout=rollout_layout(scenario, 2))
    assert isinstance(fleet, Fleet)
    assert isinstance(controller, OperatorController)
    records = controller.status["candidates"]
    assert [r["trials"] for r in records] == [1], "the trial ran"
    assert records[0]["verdict"] in verdicts
    assert any("TrialStarted" in e for e in controller.events)
    assert fleet.config[0] == ends_on
    assert fleet.config[1] == oracles.static(4)
    promoted = [e for e in controller.events if "TrialPromoted" in e]
    assert bool(promoted) == (records[0]["verdict"] == "Won")
    # one trial; what every pod serves changed only where the candidate won
    assert (fleet.trials, fleet.changes) == (1, 1 if promoted else 0)
    assert not [o for o in fleet.outcomes if o.failed]


def test_the_oracle_from_the_declared_config_may_switch_to_a_candidate_drafter_at_the_earliest_refit() -> None:
    """oracle-from-declared starts with the declared drafter; for each candidate drafter one of its candidates rolls
    to that drafter's best static config at the earliest refit (180 s), or is best-static-reachable where that
    config is the best of all."""
    base = scenario_named("drafter-degraded")
    scenario = for_replicas(replace(base, duration_s=480.0, qps=((0.0, 1.0),), candidates=("draft_model",)), 2)
    lay = rollout_layout(scenario, 2)
    items = arrivals(scenario, 1)
    declared = _static_job((scenario, oracles.static(3), 1, lay))
    other = replace(scenario, method="draft_model")
    statics = {"K3": declared}
    for k in (1, 2):
        run = _static_job((other, oracles.static(k), 1, lay))
        statics[f"draft_model K{k}"] = replace(run, policy=f"draft_model K{k}", config=f"draft_model K{k}")
    by_name = {"K3": oracles.static(3), "draft_model K1": oracles.static(1), "draft_model K2": oracles.static(2)}
    drafter_of = {"K3": "eagle3", "draft_model K1": "draft_model", "draft_model K2": "draft_model"}
    kind = "best static of draft_model from the earliest refit"
    switched = _drafter_switches(scenario, 1, items, statics, by_name, drafter_of, "K3", declared, lay)[kind]
    target = switched.config.removeprefix("K3 until 180s, then ")
    assert target in ("draft_model K1", "draft_model K2")
    assert switched.timeline == [(0.0, "K3"), (180.0, target)]
    assert switched.actuations == 1
    assert switched.replicas == 2
    reused = _drafter_switches(scenario, 1, items, statics, by_name, drafter_of, target, declared, lay)[kind]
    assert reused is declared, "the candidate drafter's best is the best of all: best-static-reachable itself"


def test_one_replica_cannot_spare_a_pod_for_a_trial() -> None:
    """At one replica the bench CR is recommend-only for candidates: the operator says why it does not try them."""
    document = closed_loop_document(scenario_named("draft-choice"))
    spec = OperatorController.of(document).spec
    assert drafters.untried_reason(spec) == drafters.NEEDS_SPARE_POD


@pytest.mark.parametrize(
    ("name", "duration_s"),
    [("draft-choice", 2400.0), ("draft-choice-already-best", 2400.0), ("steady-low", 360.0)],
)
def test_quick_compresses_a_drafter_choice_no_shorter_than_its_trial(name: str, duration_s: float) -> None:
    """`--quick` (x0.1) keeps a drafter-choice scenario long enough for one trial and its promotion (shortest_s);
    other scenarios are compressed ten times."""
    assert scenario_named(name).scaled(0.1).duration_s == pytest.approx(duration_s)
