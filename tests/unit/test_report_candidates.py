"""`specpilot report`'s comparison of candidate drafters, from status.candidates exactly as the operator stores it.

The records are made by the operator's own code: drafters.reconcile_records, trialling, one trial advanced to its
analysis by trial.advance from typed figures, drafters.concluded and drafters.to_status (what the evaluation writes
to status.candidates). The rendered table must carry each side's figures, the speedup and the verdict.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from specpilot.api import rollout, v1alpha1
from specpilot.autotune.policy import drafters
from specpilot.autotune.policy import trial as trials
from specpilot.report.candidates import candidate_records, render_candidates
from specpilot.vllm.intent import SpeculationIntent
from tests.seams import ROUND_TRIP_SPEC, T0
from tests.unit.test_drafter_trials import CANDIDATES

CURRENT = SpeculationIntent(enabled=True, num_speculative_tokens=4)


def spec() -> v1alpha1.SpeculativeDeploymentSpec:
    raw: dict[str, Any] = {**ROUND_TRIP_SPEC, "replicas": 3}
    raw["speculation"] = {**raw["speculation"], "candidates": CANDIDATES}
    raw["autotune"] = {**raw["autotune"], "mode": "Auto"}
    return v1alpha1.parse_spec(raw)


def figures(tpot_ms: float, acceptance: float) -> trials.GroupFigures:
    return trials.GroupFigures(
        tpot_mean_s=tpot_ms / 1000, batch=4.0, requests=120.0, token_rate=360.0, acceptance=acceptance,
        tpot_p50_s=tpot_ms / 1000, tpot_p99_s=2 * tpot_ms / 1000,
    )  # fmt: skip


def stored_status(candidate_tpot_ms: tuple[float, float]) -> dict[str, Any]:
    """status as the evaluation writes it after each candidate's trial, in turn, against incumbents at 10 ms."""
    s = spec()
    records = drafters.reconcile_records(s, [])
    for index, tpot in enumerate(candidate_tpot_ms):
        candidate = s.speculation.candidates[index]
        record = trials.start(
            intent=drafters.trial_intent(CURRENT, candidate), config_hash=f"c{index}", incumbent=CURRENT,
            incumbent_hash="inc", action="TryCandidate", now=T0, candidate_name=candidate.name,
        )  # fmt: skip
        seen = trials.TrialObservation(figures(tpot, 0.8), figures(10.0, 0.6), incumbent_pods=2)
        step = trials.advance(record, spec=s, ready=True, observation=seen, now=T0)
        later = T0 + rollout.analysis_span(s) + timedelta(seconds=1)
        step = trials.advance(step.trial, spec=s, ready=True, observation=seen, now=later)
        tolerance = s.autotune.latency.regression_tolerance
        records[index] = drafters.concluded(drafters.trialling(records[index], T0), step.trial, tolerance)
    return {"candidates": drafters.to_status(records)}


def test_the_table_compares_each_candidates_figures_and_verdict() -> None:
    lines = render_candidates(candidate_records(stored_status((8.0, 14.0))))
    rows = [line for line in lines if line.startswith("| ngram") or line.startswith("| big")]
    assert len(rows) == 2
    ngram, big = ([cell.strip() for cell in row.strip("|").split("|")] for row in rows)
    assert ngram[:6] == ["ngram", "ngram", "3", "Won", "1", "1.25x"]
    assert ngram[7] == "80.0% / 60.0%"  # acceptance: candidate pod / incumbent pods
    assert ngram[8] == "8.00 / 10.00"  # P50 TPOT ms
    assert ngram[11] == "120 / 120"  # requests in the window, each side
    assert big[:6] == ["big", "draft_model: meta-llama/Llama-3.2-3B-Instruct", "5", "Lost", "1", "0.71x"]
    notes = [line for line in lines if line.startswith("- `big`")]
    assert len(notes) == 1
    assert "slower beyond 10%" in notes[0]
    assert "Not tried again until the traffic shifts" in notes[0]


@pytest.mark.parametrize(
    ("status", "rows"),
    [
        (None, 0),
        ({}, 0),
        ({"candidates": "not a list"}, 0),
        ({"candidates": [{"name": "x"}]}, 0),  # unreadable: dropped, as the operator drops it
        ({"candidates": [{"name": "u", "method": "ngram", "drafter": "ngram", "verdict": "Untried"}]}, 1),
    ],
)
def test_what_is_not_a_record_is_left_out(status: Any, rows: int) -> None:
    lines = render_candidates(candidate_records(status))
    assert sum(1 for line in lines if line.startswith("| ") and not line.startswith("| candidate")) == rows


def test_stored_text_cannot_break_the_table() -> None:
    status = {"candidates": [{"name": "a|b", "method": "ngram", "drafter": "ngram", "verdict": "Lost",
                              "reason": "slow\n| injected | row |"}]}  # fmt: skip
    lines = render_candidates(candidate_records(status))
    assert all("\n" not in line for line in lines)
    row = next(line for line in lines if line.startswith("| a"))
    assert row.startswith("| a\\|b |")
    note = next(line for line in lines if line.startswith("- `a"))
    assert note.startswith("- `a\\|b` Lost: slow \\| injected \\| row \\|")
