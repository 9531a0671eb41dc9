"""spec.autotune.objective: the tie at goodput it breaks, and the same choice wherever one K is clearly better."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import tests.unit.test_policy as tp
from specpilot.api.v1alpha1 import AutotuneObjective, AutotuneSpec
from specpilot.autotune.model.objective import choose_k
from specpilot.autotune.model.schedule import fit_schedule
from specpilot.autotune.model.stepcost import LLAMA8B_H100, model_for_method, profile_geometric, with_emission
from specpilot.autotune.policy.state import Action, PolicyState
from specpilot.bench.main import with_objective
from specpilot.bench.runner import closed_loop_spec
from specpilot.bench.scenarios import scenario_named

THROUGHPUT, LATENCY = AutotuneObjective.THROUGHPUT, AutotuneObjective.LATENCY


@pytest.mark.parametrize(
    ("rates", "throughput_k", "latency_k"),
    [
        # K2 within 1% of K3: a tie at goodput; Throughput takes the smaller K, Latency the lower mean TPOT
        ((0.50, 0.90, 0.995, 1.00), 2, 3),
        ((0.50, 0.992, 1.00, 0.996), 1, 2),
        # one K clearly better: both take it
        ((0.50, 0.90, 0.95, 1.00), 3, 3),
        ((0.50, 1.00, 0.97, 0.90), 1, 1),
        ((1.00, 0.80, 0.70, 0.60), 0, 0),
        # an exact tie: the smaller K under both
        ((0.50, 1.00, 1.00, 0.90), 1, 1),
    ],
)
def test_the_objective_breaks_only_a_tie_at_goodput(
    rates: tuple[float, ...], throughput_k: int, latency_k: int
) -> None:
    assert choose_k(rates, THROUGHPUT, 0.01) == throughput_k
    assert choose_k(rates, LATENCY, 0.01) == latency_k
    assert choose_k(rates, THROUGHPUT, 0.0) == choose_k(rates, LATENCY, 0.0)  # no tie band: no difference


def test_no_rates_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least K = 0"):
        choose_k((), THROUGHPUT, 0.01)


@pytest.mark.parametrize(
    ("acceptance", "throughput", "latency"),
    [
        # 8B EAGLE-3: where K3 and K2 are within 1%, Latency keeps K3 to a larger batch
        (0.4, ((1, 33, 3), (34, 170, 2), (171, 256, 1)), ((1, 42, 3), (43, 170, 2), (171, 256, 1))),
        (0.55, ((1, 97, 3), (98, 170, 2), (171, 256, 1)), ((1, 125, 3), (126, 170, 2), (171, 256, 1))),
        # a good drafter: K3 wins clearly up to 128 and K2 above, the same schedule under both
        (0.7, ((1, 128, 3), (129, 256, 2)), ((1, 128, 3), (129, 256, 2))),
    ],
)
def test_the_schedule_fit_under_each_objective(
    acceptance: float, throughput: tuple[tuple[int, int, int], ...], latency: tuple[tuple[int, int, int], ...]
) -> None:
    profile = profile_geometric(acceptance, 3)
    model = with_emission(model_for_method(LLAMA8B_H100, "eagle3"), profile)
    fits = {
        objective: fit_schedule(profile, model, max_k=3, max_num_seqs=256, bounds=(4, 256), objective=objective)
        for objective in AutotuneObjective
    }
    assert fits[THROUGHPUT].schedule == throughput
    assert fits[LATENCY].schedule == latency


def test_the_spec_field_reaches_the_fit_through_the_decision() -> None:
    """The same window under each objective: two different refits, each filed with the objective it was fitted for."""
    schedules = {}
    for objective in AutotuneObjective:
        spec = tp.make_spec(
            agreeingEvaluations=1,
            stabilization="0s",
            batchThreshold={"tune": True, "min": 4, "max": 256},
            objective=objective.value,
        )
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
        state = PolicyState(load={8: 7200.0}, load_updated=tp.T0 - tp.MINUTE)
        decision = tp.run(spec, [tp.tuned_observation(batch=180, alpha=0.55)], state=state).decisions[0]
        assert decision.action is Action.CHANGE_THRESHOLD, decision.reason
        assert decision.evidence["threshold"]["objective"] == objective.value
        schedules[objective] = decision.target.batch_schedule
    assert schedules[THROUGHPUT] != schedules[LATENCY]


def test_the_default_is_throughput_and_a_wrong_value_names_the_allowed_ones() -> None:
    assert AutotuneSpec().objective is THROUGHPUT
    with pytest.raises(ValidationError) as err:
        AutotuneSpec.model_validate({"objective": "latency-first"})
    assert "objective" in str(err.value)
    assert "'Throughput' or 'Latency'" in str(err.value)


def test_bench_objective_reaches_specpilots_cr_only() -> None:
    """`specpilot bench --objective Latency` writes spec.autotune.objective into the closed loop's CR (the scenario
    before it too); the default CR leaves the field at its default."""
    scenario = scenario_named("target-change")
    assert scenario.previous is not None
    assert closed_loop_spec(scenario).autotune.objective is THROUGHPUT
    latency = with_objective(scenario, LATENCY)
    assert closed_loop_spec(latency).autotune.objective is LATENCY
    assert latency.previous is not None
    assert closed_loop_spec(latency.previous).autotune.objective is LATENCY
