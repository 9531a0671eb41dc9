"""`specpilot simulate --profile FILE`: a base preset with numbers replaced, and the fit that writes such a file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from e2e.bench.fidelity_fit import (
    Point,
    StepFit,
    fit_alpha,
    fit_cost_ratio,
    fit_steps,
    predicted_spec_step_ms,
    profile_doc,
)
from specpilot.cli.main import main as cli_main
from specpilot.sim.acceptance import expected_tokens
from specpilot.sim.presets import CPU_TINY, preset_from_profile


def test_a_profile_replaces_the_numbers_it_names_and_keeps_the_rest() -> None:
    doc = {"base": "cpu-tiny", "verify_base_ms": 4.5, "capture_limit": 0,
           "drafters": {"draft_model": {"cost_ratio": 0.9, "alpha": 0.4}}}  # fmt: skip
    preset = preset_from_profile(doc, "p.json")
    assert (preset.verify_base_ms, preset.capture_limit, preset.ridge_tokens) == (4.5, 0, CPU_TINY.ridge_tokens)
    drafter = preset.drafter("draft_model")
    assert (drafter.cost_ratio, drafter.alpha, drafter.kappa) == (0.9, 0.4, CPU_TINY.drafter("draft_model").kappa)
    assert preset.drafter("eagle3") == CPU_TINY.drafter("eagle3")
    assert preset.name == "cpu-tiny-fitted"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "p.json: a profile is a JSON object, got list"),
        ({"verify_base_ms": 1.0}, "p.json: base: expected one of cpu-tiny, llama70b-4xh100, llama8b-h100, got None"),
        ({"base": "cpu-tiny", "verify_ms": 1.0}, "p.json: unknown field 'verify_ms'; allowed: base, drafters, name,"),
        ({"base": "cpu-tiny", "verify_base_ms": "fast"}, "p.json: verify_base_ms: expected a number, got 'fast'"),
        ({"base": "cpu-tiny", "verify_base_ms": True}, "p.json: verify_base_ms: expected a number, got True"),
        ({"base": "cpu-tiny", "sched_ms": -1}, "p.json: sched_ms: expected a finite number >= 0, got -1"),
        ({"base": "cpu-tiny", "capture_limit": 1.5}, "p.json: capture_limit: expected a whole number, got 1.5"),
        ({"base": "cpu-tiny", "ridge_tokens": 0}, "p.json: ridge_tokens: must be > 0"),
        ({"base": "cpu-tiny", "drafters": {"medusa": {}}}, "p.json: drafters.medusa: preset cpu-tiny has no drafter"),
        ({"base": "cpu-tiny", "drafters": {"ngram": {"speed": 1}}}, "p.json: drafters.ngram: unknown field 'speed'"),
        ({"base": "cpu-tiny", "drafters": {"ngram": {"alpha": 1.2}}},
         "p.json: drafters.ngram.alpha: an acceptance is < 1, got 1.2"),
        ({"base": "cpu-tiny", "name": 3}, "p.json: name: expected a string, got 3"),
    ],
)  # fmt: skip
def test_a_bad_profile_names_the_file_and_the_field(doc: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        preset_from_profile(doc, "p.json")


def test_the_command_line_refuses_a_profile_that_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    assert cli_main(["simulate", "--profile", str(bad), "serve", "tiny"]) == 2
    assert capsys.readouterr().err.startswith(f"error: --profile {bad}: not JSON: ")
    assert cli_main(["simulate", "--profile", str(tmp_path / "missing.json"), "serve", "tiny"]) == 2
    assert "missing.json: No such file or directory" in capsys.readouterr().err


def test_the_fit_recovers_a_known_step_cost() -> None:
    """Points made by a known cost (a 3 ms, N_r 400, s_1 0.5 ms, draft c 0.8) give those numbers back."""
    true = StepFit(3.0, 400.0, 0.5)
    decodes = [Point(b, true.step_ms(b, b)) for b in (1, 4, 12)]
    prefills = [Point(p, true.step_ms(p, 1)) for p in (32, 448)]
    got = fit_steps(decodes, prefills)
    assert got.verify_base_ms == pytest.approx(3.0)
    assert got.ridge_tokens == pytest.approx(400.0)
    assert got.per_request_ms == pytest.approx(0.5)
    spec = [Point(b, predicted_spec_step_ms(true, 3, 0.8, 0.02, b), 2.4) for b in (1, 4, 12)]
    assert fit_cost_ratio(got, 3, spec, 0.02) == pytest.approx(0.8)


@pytest.mark.parametrize("alpha", [0.2, 0.465, 0.9])
def test_the_fitted_alpha_reproduces_the_mean_acceptance_length(alpha: float) -> None:
    drafter = CPU_TINY.drafter("draft_model")
    length = expected_tokens(replace(drafter, alpha=alpha, rho=1.0), 3)
    assert fit_alpha(3, length) == pytest.approx(alpha, abs=1e-3)


def test_the_fitted_profile_is_one_the_simulator_reads() -> None:
    doc = profile_doc(StepFit(3.0, 400.0, 0.5), cost_ratio=0.8, alpha=0.6, kv_tokens=32768, draft_kv_factor=1.0)
    preset = preset_from_profile(json.loads(json.dumps(doc)), "fitted")
    assert (preset.verify_base_ms, preset.ridge_tokens, preset.ridge_sharpness) == (3.0, 400.0, 1.0)
    assert preset.verify_ms(400, 0) == pytest.approx(6.0)  # linear roofline: a·(1 + N/N_r)
