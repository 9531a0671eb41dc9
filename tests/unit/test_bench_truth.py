"""The benchmark is not a mirror: the simulator runs a true hardware profile, the controller only what a cluster tells.

The controller's CR states the set-up a user states (target, TP, GPU memory, the GPU product label); its cost profile
and restart cost come from that spec as the operator derives them, never from the simulator's preset; the 70B
scenarios' CRs are ones the operator deploys (MemoryFit). Pure: no simulation beyond a few evaluations.
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime, timedelta

import pytest

from specpilot.autotune.evaluate import effective_window
from specpilot.autotune.model.costprofile import calibrated_presets, fit_settings_for
from specpilot.autotune.model.rollcost import restart_cost_for
from specpilot.autotune.model.stepcost import PROFILES
from specpilot.autotune.policy.decision import measured_restart_s, with_measured_restart
from specpilot.autotune.policy.state import Action, ActuationRecord, PolicyInputs, PolicyState, TrialSpan
from specpilot.bench.main import on_gpu_class, on_true_profile, with_true_profile
from specpilot.bench.replay import standard_trace_scenarios
from specpilot.bench.runner import closed_loop_spec
from specpilot.bench.scenarios import SCENARIOS, Replay, Scenario, scenario_named
from specpilot.bench.specpilot_policy import SpecpilotController, to_datetime
from specpilot.planning.plan import plan_memory
from specpilot.sim.presets import (
    GPU_CLASS_COPIES,
    LLAMA8B_H100,
    LLAMA70B_4XH100,
    TRUE_PROFILES,
    perturbed,
    preset_named,
)
from specpilot.vllm.intent import intent_from_spec


def with_previous(scenarios: tuple[Scenario, ...]) -> list[Scenario]:
    return [s for scenario in scenarios for s in (scenario, scenario.previous) if s is not None]


@pytest.mark.parametrize("scenario", with_previous(SCENARIOS), ids=lambda s: s.name)
def test_every_scenarios_cr_is_one_the_operator_deploys(scenario: Scenario) -> None:
    spec = closed_loop_spec(scenario)
    assert plan_memory(spec).fits, f"{scenario.name}: MemoryFit would be False"
    preset = preset_named(scenario.preset)
    assert spec.parallelism.tensor_parallel_size == preset.tensor_parallel_size
    assert spec.resources.gpu_memory_gi_b == preset.gpu_memory_gib


@pytest.mark.parametrize(
    ("variant", "ridge", "verify", "drafter"),
    [("perturbed-ridge-low", 0.6, 1.5, 2.0), ("perturbed-ridge-high", 1.4, 1.5, 2.0)],
)
def test_a_perturbed_profile_scales_the_true_hardware_only(
    variant: str, ridge: float, verify: float, drafter: float
) -> None:
    for base in (LLAMA8B_H100, LLAMA70B_4XH100):
        true = perturbed(base, variant)
        assert true.ridge_tokens == pytest.approx(base.ridge_tokens * ridge)
        assert true.verify_base_ms == pytest.approx(base.verify_base_ms * verify)
        assert true.drafter("draft_model").cost_ratio == pytest.approx(base.drafter("draft_model").cost_ratio * drafter)
        assert true.restart_s > base.restart_s
        setup = ("target_model", "tensor_parallel_size", "gpu", "gpu_memory_gib")
        assert [getattr(true, f) for f in setup] == [getattr(base, f) for f in setup], "the CR stays the base's"


def test_true_profiles_are_never_an_operator_profile() -> None:
    calibrated = {p.name for p in calibrated_presets()}
    assert not set(TRUE_PROFILES) & (calibrated | set(PROFILES))


@pytest.mark.parametrize("variant", ["perturbed-ridge-low", "perturbed-ridge-high"])
def test_the_controller_of_a_perturbed_run_is_handed_the_calibrated_runs_cr(variant: str) -> None:
    for scenario in SCENARIOS:
        true = with_true_profile(scenario, variant)
        assert true.preset != scenario.preset or scenario.preset not in ("llama8b-h100", "llama70b-4xh100")
        assert closed_loop_spec(true) == closed_loop_spec(scenario), scenario.name


@pytest.mark.parametrize(
    ("scenario", "variant", "ratio"),
    [("steady-low", "perturbed-ridge-low", 7.432 / 13.178), ("diurnal", "perturbed-ridge-high", 8.272 / 10.492),
     ("l4-like", "perturbed-ridge-low", 1.0)],
)  # fmt: skip
def test_a_perturbed_run_keeps_the_scenarios_share_of_capacity(scenario: str, variant: str, ratio: float) -> None:
    """A truth slower than the CR says carries the same share of its own capacity (the table's measured capacities),
    not the calibrated preset's QPS, which would put every configuration past capacity; an unseen class keeps its
    own scenario's rates."""
    written = scenario_named(scenario)
    true = with_true_profile(written, variant)
    assert [t for t, _ in true.qps] == [t for t, _ in written.qps]
    assert [q for _, q in true.qps] == pytest.approx([q * ratio for _, q in written.qps])


@pytest.mark.parametrize("variant", ["perturbed-ridge-low", "perturbed-ridge-high", "a100-like", "l4-like"])
def test_absolute_rates_stay_as_written_on_any_truth(variant: str) -> None:
    """low-traffic's 0.1 QPS is the point of the scenario (windows too thin for a latency figure), not a share."""
    written = scenario_named("low-traffic")
    (true,) = on_true_profile([written], variant, named=True)
    assert true.preset != written.preset
    assert true.qps == written.qps


@pytest.mark.parametrize(
    ("gpu_class", "preset", "gpu_label", "ratio", "slower"),
    [("a100-like", "llama8b-a100-like", "NVIDIA-A100-SXM4-80GB", 6.423 / 13.178, 3.35 / 2.04),
     ("l4-like", "llama8b-l4-like", "NVIDIA-L4", 0.554 / 13.178, 3.35 / 0.30),
     ("mi300x-like", "llama8b-mi300x-like", None, 18.35 / 13.178, 1.0)],
)  # fmt: skip
def test_a_gpu_class_run_is_sized_to_that_hardware_and_its_cr_names_it(
    gpu_class: str, preset: str, gpu_label: str | None, ratio: float, slower: float
) -> None:
    """The same share of the class's own capacity, objectives loosened by its slower step (never tightened), and a
    CR that states the class's GPU, for which the operator has no calibrated profile."""
    written = scenario_named("spike")
    true = on_gpu_class(written, gpu_class)
    assert true is not None
    assert true.preset == preset
    assert [q for _, q in true.qps] == pytest.approx([q * ratio for _, q in written.qps], rel=1e-3)
    assert true.tpot_slo_ms == pytest.approx(written.tpot_slo_ms * slower, rel=1e-3)
    assert true.ttft_slo_s == pytest.approx(written.ttft_slo_s * slower, rel=1e-3)
    spec = closed_loop_spec(true)
    assert plan_memory(spec).fits
    assert spec.resources.node_selector.get("nvidia.com/gpu.product") == gpu_label
    assert spec.resources.gpu_memory_gi_b == preset_named(preset).gpu_memory_gib
    assert fit_settings_for(spec).calibrated is False


@pytest.mark.parametrize("gpu_class", list(GPU_CLASS_COPIES))
def test_a_gpu_class_run_restates_a_replay_at_the_same_share(gpu_class: str) -> None:
    written = next(s for s in standard_trace_scenarios() if s.name == "azure-conv-8b-eagle3-60pct")
    true = on_gpu_class(written, gpu_class)
    assert true is not None
    assert true.replay is not None
    assert written.replay is not None
    ratio = {"a100-like": 6.423, "l4-like": 0.554, "mi300x-like": 18.35}[gpu_class] / 13.178
    rate = len(true.replay.requests) / true.replay.last_arrival_s
    written_rate = len(written.replay.requests) / written.replay.last_arrival_s
    assert rate == pytest.approx(written_rate * ratio, rel=0.02)
    assert true.duration_s - true.replay.last_arrival_s == pytest.approx(
        written.duration_s - written.replay.last_arrival_s
    )


@pytest.mark.parametrize(
    ("factor", "kept", "times"),
    [(1.0, 4, [0.0, 1.0, 2.0, 3.0]), (0.5, 2, [1.0, 3.0]), (0.25, 1, [3.0]), (2.0, 4, [0.0, 0.5, 1.0, 1.5])],
)  # fmt: skip
def test_a_replay_at_another_rate(factor: float, kept: int, times: list[float]) -> None:
    replay = Replay("t", tuple((float(i), 10 + i, 20 + i) for i in range(4))).at_rate(factor)
    assert len(replay.requests) == kept
    assert [t for t, _, _ in replay.requests] == times


@pytest.mark.parametrize("gpu_class", list(GPU_CLASS_COPIES))
def test_every_scenario_of_a_gpu_class_run_is_one_the_operator_deploys(gpu_class: str) -> None:
    written = [*SCENARIOS, *standard_trace_scenarios()]
    run = [s for s in (on_gpu_class(w, gpu_class) for w in written) if s is not None]
    assert len(run) >= 12
    for scenario in run:
        assert plan_memory(closed_loop_spec(scenario)).fits, f"{gpu_class} {scenario.name}: MemoryFit would be False"


@pytest.mark.parametrize("gpu_class", list(GPU_CLASS_COPIES))
def test_a_gpu_class_run_leaves_out_what_it_has_no_copy_of(gpu_class: str) -> None:
    """diurnal is a 70B, l4-like already another GPU, target-change ran an 8B before its 70B: none has a copy."""
    chosen = [scenario_named(n) for n in ("steady-low", "diurnal", "l4-like", "target-change")]
    assert [s.name for s in on_true_profile(chosen, gpu_class, named=False)] == ["steady-low"]
    with pytest.raises(ValueError, match=r"--scenario: diurnal runs llama70b-4xh100; --true-profile .* has a copy of"):
        on_true_profile(chosen, gpu_class, named=True)


@pytest.mark.parametrize(
    ("scenario", "calibrated", "gpu_label"),
    [("steady-low", True, "NVIDIA-H100-80GB-HBM3"), ("diurnal", True, "NVIDIA-H100-80GB-HBM3"),
     ("l4-like", False, "NVIDIA-L4")],
)  # fmt: skip
def test_the_controller_gets_the_operators_fit_settings(scenario: str, calibrated: bool, gpu_label: str) -> None:
    spec = closed_loop_spec(scenario_named(scenario))
    assert spec.resources.node_selector["nvidia.com/gpu.product"] == gpu_label
    settings = fit_settings_for(spec)
    assert settings.calibrated is calibrated
    assert "preset" not in {f.name for f in fields(SpecpilotController)}, "the controller never sees the simulator"


SPEC = closed_loop_spec(scenario_named("steady-low"))
DONE = to_datetime(1000.0)


def acted(seconds_before: float) -> PolicyState:
    at = DONE - timedelta(seconds=seconds_before)
    return PolicyState(actuations=(ActuationRecord(at, Action.DISABLE, {}, {}, ""),), restart_measured_s=90.0)


def trial_started(seconds_before: float, analysed_s: float) -> TrialSpan:
    return TrialSpan(DONE - timedelta(seconds=seconds_before), analysed_s)


@pytest.mark.parametrize(
    ("state", "config_since", "trial", "measured"),
    [
        (PolicyState(), DONE, None, None),  # no actuation: nothing measured, the profile's assumption prices restarts
        (acted(135.0), DONE, None, 135.0),  # the rollout completed 135 s after autotune's actuation
        (acted(135.0), None, None, 90.0),  # no completion known: the previous figure
        (acted(-10.0), DONE, None, 90.0),  # completed before the actuation: an older rollout
        (acted(7200.0), DONE, None, 90.0),  # hours later: another rollout (a user's edit), past the rollout budget
        # one pod first: the 45 s its trial pod was analysed, not restarting, are not part of the restart
        (acted(135.0), DONE, trial_started(135.0, 45.0), 90.0),
        (acted(135.0), DONE, trial_started(900.0, 45.0), 135.0),  # an older trial's analysis is not this rollout's
    ],
)
def test_the_restart_cost_is_measured_from_the_deployments_own_rollouts(
    state: PolicyState, config_since: datetime | None, trial: TrialSpan | None, measured: float | None
) -> None:
    assert measured_restart_s(state, config_since, SPEC, trial) == measured


def test_a_measured_restart_is_priced_as_whole_waves_with_their_drain() -> None:
    spec = closed_loop_spec(scenario_named("steady-low"), replicas=2)
    plain = PolicyInputs(spec, intent_from_spec(spec), {}, effective_window(spec.autotune), fit=fit_settings_for(spec))
    assert not with_measured_restart(plain, PolicyState()).fit.restart_measured, "the profile's assumption"
    measured = with_measured_restart(plain, acted(135.0)).fit
    assert measured.restart_measured, "what the rollout took, drain included: not drained again (rollqueue.Phases)"
    assert measured.restart_cost_s == restart_cost_for(spec, 90.0)


def test_a_scenario_after_a_change_scales_what_ran_before() -> None:
    change = scenario_named("target-change")
    assert change.previous is not None
    quick = change.scaled(0.1)
    assert quick.previous is not None
    assert quick.previous.duration_s == pytest.approx(change.previous.duration_s * 0.1)
    assert replace(quick, previous=None).duration_s == pytest.approx(change.duration_s * 0.1)
