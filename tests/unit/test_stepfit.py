"""The online step-cost fit recovers the simulator's true T(B, k) from windows, and falls back while data are thin."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

import tests.unit.test_policy as tp
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.model.stepcost import LLAMA8B_H100, StepCostModel, with_context_length
from specpilot.autotune.model.stepfit import MIN_SAMPLES, StepSample, add_sample, fit_step_cost, sample_from_window
from specpilot.autotune.policy.decision import evaluate_alone
from specpilot.autotune.policy.state import PolicyState
from specpilot.autotune.signals.measurements import MeasurementClass
from specpilot.autotune.signals.promql import Signal
from specpilot.sim.engine import Engine, EngineConfig, SpecConfig
from specpilot.sim.presets import LLAMA8B_H100 as SIM_8B
from specpilot.sim.presets import Preset, preset_named
from specpilot.vllm.versions import v

CONTEXT = 1000  # mean context of running requests: the profile's L-bar
# A profile wrong by a lot: target step x1.6, drafter x0.4, 3 ms overhead (what an uncalibrated GPU guess looks like).
TRUE = LLAMA8B_H100
WRONG = replace(TRUE, verify_base_ms=TRUE.verify_base_ms * 1.6, kv_read_ns_per_token=TRUE.kv_read_ns_per_token * 1.6,
                sched_ms_per_request=TRUE.sched_ms_per_request * 1.6, draft_ms=TRUE.draft_ms * 0.4,
                draft_kv_ns_per_token=TRUE.draft_kv_ns_per_token * 0.4, sched_ms=3.0)  # fmt: skip


def sim_step_ms(batch: int, k: int, *, speculating: bool, context: int = CONTEXT, truth: Preset = SIM_8B) -> float:
    """The simulator's true step time (staircase over CUDA-graph sizes, drafter, overhead) for B decodes at K."""
    spec = SpecConfig("eagle3", 3) if speculating else None
    engine = Engine(EngineConfig(truth, v("0.32.0"), "fit", 512, speculation=spec), seed=1)
    return engine.step_ms(batch * (k + 1), batch * context, batch, k)


def windows(batches: list[int]) -> list[StepSample]:
    out: list[StepSample] = []
    for i, batch in enumerate(batches):
        noise = 1 + 0.03 * ((-1) ** i)  # +-3%: the window-to-window scatter of a mean TPOT
        out.append(StepSample(batch, 3, True, round(sim_step_ms(batch, 3, speculating=True) * noise, 3)))
        out.append(StepSample(batch, 0, False, round(sim_step_ms(batch, 0, speculating=False) * noise, 3)))
    return out


def worst_error(model: StepCostModel, batches: list[int]) -> float:
    errors = []
    for batch in batches:
        for k, on in ((3, True), (0, False)):
            errors.append(abs(model.step_ms(batch, k, configured=on) / sim_step_ms(batch, k, speculating=on) - 1))
    return max(errors)


def test_the_fit_recovers_the_simulators_curve_from_a_wrong_profile() -> None:
    fit = fit_step_cost(windows([2, 6, 12, 24, 48, 96, 160]), WRONG)
    assert fit.model is not None, fit.note
    held_out = [4, 32, 64, 128, 200]
    assert worst_error(WRONG, held_out) > 0.25, "the wrong profile really is wrong"
    assert worst_error(fit.model, held_out) < 0.06, fit.note
    assert fit.verify_scale == pytest.approx(1 / 1.6, rel=0.1)
    assert fit.rms_error is not None
    assert fit.rms_error < 0.06
    shown = fit.to_dict()
    assert shown["used"] is True
    assert shown["note"].startswith("fitted from this deployment: verify x0.6")


A100 = preset_named("llama8b-a100-like")  # its roofline ridge is 0.52 x the H100's (FLOP/s over bandwidth)
BATCHES = [4, 12, 24, 48, 96, 160, 220]


def class_windows(truth: Preset, ks: tuple[int, ...], batches: Sequence[int] = BATCHES) -> list[StepSample]:
    """Windows of a deployment on `truth` that ran each K of `ks` at every batch of `batches`, +-3% scatter."""
    return [
        StepSample(b, k, k > 0, round(sim_step_ms(b, k, speculating=k > 0, truth=truth) * (1 + 0.03 * (-1) ** i), 3))
        for i, b in enumerate(batches)
        for k in ks
    ]


@pytest.mark.parametrize(
    ("case", "truth", "ks", "fit_ridge", "used", "ridge", "in_note"),
    [
        # the H100 shape rescaled cannot follow the A100's earlier bend: refused, as before, without the ridge
        ("A100, K3 and plain, ridge not fitted", A100, (3, 0), False, False, 1.0, "fit out of range"),
        # from K = 3 windows alone the ridge trades off against the drafter term: x0.5 to x0.7 fit alike
        ("A100, K3 only", A100, (3,), True, False, 1.0, "ridge not identified: x0.5 to x0.7 fit within 10%"),
        # windows of plain beside them pin it at the truth's x0.52
        ("A100, K3 and plain", A100, (3, 0), True, True, 0.5, "ridge x0.5; RMS error"),
        # on the profile's own GPU its own ridge fits first, and nothing else is tried
        ("H100, K3 and plain", SIM_8B, (3, 0), True, True, 1.0, "fitted from this deployment: verify x"),
    ],
)  # fmt: skip
def test_the_ridge_of_another_gpu_is_fitted_only_where_the_windows_identify_it(
    case: str, truth: Preset, ks: tuple[int, ...], fit_ridge: bool, used: bool, ridge: float, in_note: str
) -> None:
    """A prior of another GPU whose own ridge is refused: the fit tries RIDGE_SCALES, and uses the best only where
    every ridge about as good lies near it (RIDGE_SPREAD); otherwise nothing is priced, and the note says why."""
    fit = fit_step_cost(class_windows(truth, ks), LLAMA8B_H100, fit_ridge=fit_ridge)
    assert (fit.model is not None) is used, fit.note
    assert fit.ridge_scale == ridge, fit.note
    assert in_note in fit.note, fit.note
    assert fit.to_dict()["ridgeScale"] == ridge
    if fit.model is not None:
        for batch in (8, 60, 150):
            for k in (0, 1, 3):
                true_ms = sim_step_ms(batch, k, speculating=k > 0, truth=truth)
                assert fit.model.step_ms(batch, k, configured=k > 0) == pytest.approx(true_ms, rel=0.06), (batch, k)


@pytest.mark.parametrize(
    ("case", "truth", "batches", "fit_ridge", "rivals"),
    [
        # K3 windows at batches 40-190 of an A100: the H100's own ridge fits within 15%, and so do x0.5 to x0.85
        # with the drafter term anywhere from x0.3 to x2: the split of the step is not known
        ("A100, K3 only, moderate to large batches", A100, (40, 60, 90, 120, 150, 190), True, (0.5, 0.6, 0.7, 0.85)),
        # the same windows, the profile calibrated on this GPU (no ridge is fitted): no rivals
        ("A100, K3 only, ridge not fitted", A100, (40, 60, 90, 120, 150, 190), False, ()),
        # the H100's own windows, K3 and plain: its own ridge, and no other fits as well
        ("H100, K3 and plain", SIM_8B, (4, 12, 24, 48, 96, 160), True, ()),
    ],
)  # fmt: skip
def test_ridges_that_fit_as_well_as_the_used_one_are_its_rivals(
    case: str, truth: Preset, batches: tuple[int, ...], fit_ridge: bool, rivals: tuple[float, ...]
) -> None:
    """The prior's own ridge fits within MAX_ERROR: it is used, and where other ridges fit the windows about as well
    (EQUALLY_GOOD) and spread beyond RIDGE_SPREAD, they are kept as its rivals, with models, and shown."""
    ks = (3,) if truth is A100 else (3, 0)
    fit = fit_step_cost(class_windows(truth, ks, batches), LLAMA8B_H100, fit_ridge=fit_ridge)
    assert fit.model is not None, fit.note
    assert fit.ridge_scale == 1.0
    assert tuple(r.ridge_scale for r in fit.rivals) == rivals, fit.note
    assert all(r.model is not None for r in fit.rivals)
    assert fit.to_dict()["rivalRidgeScales"] == list(rivals)
    assert ("a change needs every one of them" in fit.note) is bool(rivals), fit.note


@pytest.mark.parametrize(("calibrated", "used", "ridge"), [(False, True, 0.5), (True, False, 1.0)])
def test_the_policy_fits_the_ridge_only_of_another_gpus_profile(calibrated: bool, used: bool, ridge: float) -> None:
    """An A100's windows of K = 3 and of plain: with the H100 profile only a prior (no calibrated profile for the
    GPU) the policy fits its ridge and prices with that fit; a calibrated profile's ridge is its GPU's and stays, so
    its rescaled fit of these windows is refused and the calibrated profile prices."""
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 256})
    state = PolicyState(
        load={8: 7200.0}, load_updated=tp.T0 - tp.MINUTE, step_samples=tuple(class_windows(A100, (3, 0)))
    )
    fit = FitSettings(model=LLAMA8B_H100, calibrated=calibrated)
    decision = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=180), fit=fit), state, tp.T0)
    shown = decision.evidence["stepFit"]
    assert shown["used"] is used, shown
    assert shown["ridgeScale"] == ridge, shown


def test_the_policy_shows_the_rivals_of_the_fit_it_prices_with() -> None:
    """K = 3 windows of an A100 at batches 40-190 under the H100 profile as a prior: the policy prices with the
    prior's own ridge, fitted, and its evidence names the ridges that fit as well (what a change must agree with)."""
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 256})
    samples = tuple(class_windows(A100, (3,), (40, 60, 90, 120, 150, 190)))
    state = PolicyState(load={64: 7200.0}, load_updated=tp.T0 - tp.MINUTE, step_samples=samples)
    fit = FitSettings(model=LLAMA8B_H100, calibrated=False)
    decision = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=120), fit=fit), state, tp.T0)
    shown = decision.evidence["stepFit"]
    assert shown["used"] is True, shown
    assert shown["rivalRidgeScales"] == [0.5, 0.6, 0.7, 0.85], shown


def test_thin_data_are_not_fitted_and_the_fit_says_why() -> None:
    thin = windows([8, 9])  # 4 windows, one load bucket
    fit = fit_step_cost(thin, WRONG)
    assert fit.model is None
    assert fit.note == f"4 windows over 1 load buckets (a fit needs {MIN_SAMPLES} over 3)"


def test_a_fit_that_misses_its_own_points_is_not_used() -> None:
    chaotic = [
        StepSample(b, 0, False, ms) for b, ms in ((2, 5.0), (5, 40.0), (12, 6.0), (30, 60.0), (70, 7.0), (150, 9.0))
    ]
    fit = fit_step_cost(chaotic, LLAMA8B_H100)
    assert fit.model is None
    assert fit.note.startswith("fit too poor (verify x"), fit.note


def test_a_window_gives_a_point_from_tpot_and_acceptance_length() -> None:
    on = tp.observed(batch=20, tpot_s=0.010)
    on[Signal.MEAN_ACCEPTANCE_LENGTH] = tp.m(Signal.MEAN_ACCEPTANCE_LENGTH, 2.5)
    sample = sample_from_window(on, speculating=True, k_at=lambda b: 3)
    assert sample == StepSample(20, 3, True, 25.0)
    off = sample_from_window(tp.observed(on=False, batch=20, tpot_s=0.012), speculating=False, k_at=lambda b: 3)
    assert off == StepSample(20, 0, False, 12.0)
    on[Signal.MEAN_ACCEPTANCE_LENGTH] = tp.m(Signal.MEAN_ACCEPTANCE_LENGTH, None, MeasurementClass.NO_DATA)
    assert sample_from_window(on, speculating=True, k_at=lambda b: 3) is None
    assert len(add_sample(tuple(windows(list(range(1, 40)))), off)) == 48
    assert StepSample.from_dict(off.to_dict()) == off


# Windows of a deployment whose prompts grow (the long-context scenario): (batch, mean context) per window.
GROWING = [(2, 1000), (6, 2000), (12, 3000), (24, 4000), (48, 6000), (96, 8000), (160, 8000)]


@pytest.mark.parametrize(
    ("recorded", "verify_scale", "worst"),
    [
        (True, 1.00, 0.01),  # each window priced at its own context: the simulator's curve, exactly
        (False, 0.90, 0.17),  # every window priced at today's context: the growth is read as a faster target
    ],
)
def test_windows_are_priced_at_the_context_they_ran_with(recorded: bool, verify_scale: float, worst: float) -> None:
    samples: list[StepSample] = []
    for i, (batch, context) in enumerate(GROWING):
        noise = 1 + 0.03 * ((-1) ** i)
        for k, on in ((3, True), (0, False)):
            ms = round(sim_step_ms(batch, k, speculating=on, context=context) * noise, 3)
            samples.append(StepSample(batch, k, on, ms, context if recorded else None))
    fit = fit_step_cost(samples, with_context_length(LLAMA8B_H100, 8000))
    assert fit.model is not None, fit.note
    assert fit.verify_scale == pytest.approx(verify_scale, abs=0.01)
    truth = {b: sim_step_ms(b, 3, speculating=True, context=8000) for b in (4, 64, 128)}
    errors = [abs(fit.model.step_ms(b, 3) / ms - 1) for b, ms in truth.items()]
    assert max(errors) == pytest.approx(worst, abs=0.01)


@pytest.mark.parametrize(
    ("prompt", "output_rate", "running", "context", "prefill"),
    [
        # 2 requests/s generating 1200 tokens/s: 600 per response, half of it on top of the prompt; 16 prompt
        # tokens/ms over a 25 ms step (TPOT 10 ms x 2.5 tokens per step)
        (8000.0, 1200.0, None, 8300.0, 400.0),
        (8000.0, 1200.0, 40.0, 8300.0, 200.0),  # 40 running at 20 per engine: two engines share the prompts
        (8000.0, None, None, 8000.0, 400.0),  # no output length: the prompt alone
        (None, 1200.0, None, None, None),  # no prompt length: neither measured, the profile's stays
    ],
)
def test_a_window_records_the_prompt_lengths_it_ran_with(
    prompt: float | None, output_rate: float | None, running: float | None, context: float | None, prefill: float | None
) -> None:
    window = tp.observed(batch=20, tpot_s=0.010)
    window[Signal.MEAN_ACCEPTANCE_LENGTH] = tp.m(Signal.MEAN_ACCEPTANCE_LENGTH, 2.5)
    window[Signal.REQUEST_RATE] = tp.m(Signal.REQUEST_RATE, 2.0)
    for signal, value in (
        (Signal.MEAN_PROMPT_TOKENS, prompt),
        (Signal.GENERATION_TOKEN_RATE, output_rate),
        (Signal.RUNNING_REQUESTS, running),
    ):
        if value is not None:
            window[signal] = tp.m(signal, value)
    sample = sample_from_window(window, speculating=True, k_at=lambda b: 3)
    assert sample == StepSample(20, 3, True, 25.0, context, prefill)
    assert StepSample.from_dict(sample.to_dict()) == sample
    assert ("contextTokens" in sample.to_dict()) is (context is not None), "status written before stays readable"


def test_the_policy_fits_from_its_own_windows_and_reports_the_fit() -> None:
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 256})
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256})})
    thin = PolicyState(load={8: 7200.0}, load_updated=tp.T0 - tp.MINUTE)
    before = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=180)), thin, tp.T0)
    assert before.evidence["stepFit"]["used"] is False
    assert before.evidence["threshold"]["model"]["name"] == "llama8b-h100"
    rich = replace(thin, step_samples=tuple(windows([2, 6, 12, 24, 48, 96, 160])))
    after = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=180)), rich, tp.T0)
    assert after.evidence["stepFit"]["used"] is True
    assert after.evidence["threshold"]["model"]["name"] == "llama8b-h100 (fitted online)"
    restored = PolicyState.from_dict(rich.to_dict())
    assert restored.step_samples == rich.step_samples


def test_settled_windows_feed_the_samples_once_per_window() -> None:
    spec = tp.make_spec()
    on = tp.observed(batch=20, tpot_s=0.010)
    on[Signal.MEAN_ACCEPTANCE_LENGTH] = tp.m(Signal.MEAN_ACCEPTANCE_LENGTH, 2.5)
    result = tp.run(spec, [on] * 7)  # one per minute, window 5m: minutes 0 and 5
    assert [s.step_ms for s in result.state.step_samples] == [25.0, 25.0]
