"""Per-position acceptance under a running batch-size schedule: the reach correction, and the policy acting on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec
from specpilot.autotune.model.stepcost import LLAMA8B_H100, k_for_batch, model_for_method
from specpilot.autotune.policy.budget import record_actuation
from specpilot.autotune.policy.decision import decide
from specpilot.autotune.policy.state import Action, PolicyState
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Signal
from specpilot.autotune.signals.reach import MIN_REACH, correct_positions, drafts_reaching
from specpilot.vllm.intent import SpeculationIntent
from tests.unit.test_policy import inputs, m, make_spec, observed

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("levels", "mean_k", "reach"),
    [
        ([3], 3.0, (1.0, 1.0, 1.0)),  # a static K: every draft reached every position
        ([3, 0], 3.0, (1.0, 1.0, 1.0)),  # K then 0: steps at K = 0 draft nothing
        ([2, 1], 2.0, (1.0, 1.0)),  # the whole window below the boundary
        ([2, 1], 1.0, (1.0, 0.0)),  # the whole window above it: position 2 never drafted
        ([2, 1], 1.3, (1.0, 0.3)),  # 30% of the drafts at K = 2
        ([2, 1, 0], 1.5, (1.0, 0.5)),
        ([4, 2], 3.0, (1.0, 1.0, 0.5, 0.5)),  # positions 1-2 in every draft, 3-4 in half of them
        ([2, 1], 2.2, (1.0, 1.0)),  # noise above the top level is clamped
        ([2, 1], 0.9, (1.0, 0.0)),  # and below the bottom one
        # several levels: the drafts ran at the two levels around the mean K (the window crossed the boundary there)
        ([5, 3, 1], 2.0, (1.0, 0.5, 0.5, 0.0, 0.0)),
        ([5, 3, 1], 4.0, (1.0, 1.0, 1.0, 0.5, 0.5)),
        # diurnal-within-capacity, seed 2: the whole window in the K = 2 range of a four-level table
        ([4, 3, 2, 1], 2.01, (1.0, 1.0, 0.01, 0.0)),
        ([4, 3, 2, 1], 2.0, (1.0, 1.0, 0.0, 0.0)),
        ([4, 3, 2, 1], 5.0, (1.0, 1.0, 1.0, 1.0)),
        ([0], 0.0, ()),
    ],
)
def test_share_of_drafts_reaching_each_position(levels: list[int], mean_k: float, reach: tuple[float, ...]) -> None:
    assert drafts_reaching(levels, mean_k) == pytest.approx(reach)


TRUE = (0.70, 0.50)  # unconditional survival of positions 1 and 2 (the simulator's 8B draft model)


def read_under_schedule(share_k2: float) -> tuple[dict[int, float], float]:
    """What vLLM's counters give for TRUE when `share_k2` of the drafts ran at K = 2, the rest at K = 1."""
    by_position = {0: TRUE[0], 1: TRUE[1] * share_k2}
    return by_position, sum(by_position.values()) / (1 + share_k2)


@pytest.mark.parametrize("share_k2", [1.0, 0.7, 0.3, 0.12])
def test_correction_recovers_the_true_survival(share_k2: float) -> None:
    by_position, acceptance = read_under_schedule(share_k2)
    corrected = correct_positions(by_position, levels=[2, 1], acceptance_rate=acceptance)
    assert corrected.by_position == pytest.approx({0: TRUE[0], 1: TRUE[1]})
    assert corrected.unmeasured == ()
    assert (corrected.note == "") == (share_k2 == 1.0)


@pytest.mark.parametrize("share_k2", [0.0, 0.05, MIN_REACH * 0.9])
def test_a_position_the_load_never_reached_is_not_measured(share_k2: float) -> None:
    by_position, acceptance = read_under_schedule(share_k2)
    corrected = correct_positions(by_position, levels=[2, 1], acceptance_rate=acceptance)
    assert corrected.unmeasured == (1,)
    assert "position 2 drafted by < 10% of the drafts" in corrected.note


@pytest.mark.parametrize(
    ("by_position", "levels", "acceptance"),
    [
        ({0: 0.7, 1: 0.5}, [2], 0.6),  # no schedule levels to correct for
        ({0: 0.0, 1: 0.0}, [2, 1], 0.0),  # nothing accepted: 0 whatever the reach
        ({0: 0.7, 1: 0.2}, [2, 1], None),  # no acceptance rate: the mean K is unknown
    ],
)
def test_nothing_to_correct(by_position: dict[int, float], levels: list[int], acceptance: float | None) -> None:
    corrected = correct_positions(by_position, levels=levels, acceptance_rate=acceptance)
    assert corrected.by_position == by_position
    assert corrected.unmeasured == ()


# ------------------------------------------------------------------------------------------------ the policy


def k2_spec(method: str = "eagle3") -> SpeculativeDeploymentSpec:
    spec = make_spec(
        agreeingEvaluations=1,
        stabilization="0s",
        batchThreshold={"tune": True, "min": 8, "max": 256},
        budget={"minInterval": "10s", "maxPerHour": 4, "maxPerDay": 8},
    )
    speculation = spec.speculation.model_copy(update={"num_speculative_tokens": 2})
    if method != "eagle3":
        speculation = speculation.model_copy(update={"method": type(speculation.method)(method)})
    return spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"max_num_seqs": 256}), "speculation": speculation}
    )


def window(spec: SpeculativeDeploymentSpec, batch: float, current: SpeculationIntent, share_k2: float) -> Any:
    """One window's measurements as vLLM reports them: TPOT from the policy's own cost model, biased positions."""
    model = model_for_method(LLAMA8B_H100, spec.speculation.method.value)
    k = k_for_batch(current, round(batch), 2)
    tpot_s = model.step_ms(round(batch), k) / (1 + sum(TRUE[:k])) / 1000
    by_position, acceptance = read_under_schedule(share_k2)
    labels = tuple((str(j), r) for j, r in by_position.items())
    position: Measurement = m(Signal.ACCEPTANCE_BY_POSITION, None, by_label=labels, samples=41_000)
    return observed(acceptance=acceptance, batch=batch, tpot_s=tpot_s, acceptance_by_position=position)


# (batch per engine, share of drafts at K = 2 in the window; None: what the running config gives at that batch)
RISE_HOLD_FALL: list[tuple[float, float | None]] = [
    (180, None),  # static K = 2 at high load: the schedule is installed
    *[(180, None)] * 5,  # the schedule runs K = 1 there: position 2 is not drafted at all
    (90, 0.3),  # the load falling: windows that mix both Ks
    (40, 0.7),
    *[(4, None)] * 3,  # low load: K = 2 again in the engine
    *[(180, None)] * 2,  # and up again
]


def test_the_schedules_own_windows_never_trigger_a_second_install() -> None:
    """Install once when the load rises; keep through high load, the fall and the next rise.

    Without the correction the same windows proposed [[1,256,1]] at +2.0-2.7% vs the 3% bar (a coin flip; the
    cluster's load mix pushed it to +3.5% and +10.5%)."""
    spec = k2_spec()
    current = SpeculationIntent(True, 2)
    # a history of high load only: K = 1 over K = 2 at batch 180 is +3.4% (+2.6% with a quarter of it at batch 2-3,
    # under the 3% bar since the cost-model refit to vLLM PR #32374's profile)
    state = PolicyState(load={8: 1800.0}, load_updated=T0 - MINUTE)
    actions: list[tuple[int, Action]] = []
    reasons: list[str] = []
    for i, (batch, share) in enumerate(RISE_HOLD_FALL):
        now = T0 + i * MINUTE
        share_k2 = share if share is not None else (1.0 if k_for_batch(current, round(batch), 2) == 2 else 0.0)
        decision, state = decide(inputs(spec, window(spec, batch, current, share_k2), current), state, now)
        reasons.append(decision.reason)
        if decision.actuate:
            actions.append((i, decision.action))
            state = record_actuation(state, decision, current, now, spec.autotune.budget)
            current = decision.target
    assert actions == [(0, Action.CHANGE_THRESHOLD)], reasons
    assert current.batch_schedule is not None
    assert [k for _, _, k in current.batch_schedule] == [2, 1]
    assert all("no refit: 1.00 draft tokens per draft" in r for r in reasons[1:6]), reasons[1:6]
    assert all("already installed" in r for r in reasons[6:11]), reasons[6:11]


def test_a_mixed_window_is_priced_with_the_true_profile() -> None:
    spec = k2_spec()
    installed = SpeculationIntent(True, 2, batch_schedule=((1, 170, 2), (171, 256, 1)), disable_above_batch_size=None)
    state = PolicyState(load={2: 600.0, 8: 1800.0}, load_updated=T0 - MINUTE)
    decision, _ = decide(inputs(spec, window(spec, 90, installed, 0.3), installed), state, T0)
    fit = decision.evidence["threshold"]
    assert fit["acceptance"]["survival"] == pytest.approx(list(TRUE))
    assert "positions reached by [100%, 30%] of the drafts" in fit["acceptance"]["source"]


def test_lookup_drafters_are_left_as_measured() -> None:
    """n-gram proposes fewer than K tokens by itself: its mean K says nothing about the schedule."""
    spec = k2_spec("ngram")
    installed = SpeculationIntent(True, 2, batch_schedule=((1, 170, 2), (171, 256, 1)), disable_above_batch_size=None)
    state = PolicyState(load={2: 600.0, 8: 1800.0}, load_updated=T0 - MINUTE)
    decision, _ = decide(inputs(spec, window(spec, 90, installed, 0.3), installed), state, T0)
    fit = decision.evidence["threshold"]
    assert fit["acceptance"]["survival"] == pytest.approx([TRUE[0], TRUE[1] * 0.3])


def test_a_window_inside_one_range_of_a_four_level_table_measures_only_what_that_range_drafts() -> None:
    """Benchmark, diurnal-within-capacity seed 2: [[1,11,4],[12,36,3],[37,92,2],[93,256,1]] at batch ~56, every draft
    at K = 2 (one in a hundred at K = 3). Read against a K = 4 top level, positions 2-4 looked reached by 34% of the
    drafts: position 2 became 0.71 and positions 3-4 measured near 0, and the fit proposed K = 2 everywhere."""
    survival = (0.70, 0.50, 0.37, 0.27)
    by_position = {0: survival[0], 1: survival[1], 2: survival[2] * 0.01, 3: 0.0}
    acceptance = sum(by_position.values()) / 2.01
    corrected = correct_positions(by_position, levels=[4, 3, 2, 1], acceptance_rate=acceptance)
    assert corrected.reach == pytest.approx((1.0, 1.0, 0.01, 0.0))
    assert corrected.unmeasured == (2, 3)
    assert corrected.by_position[0] == pytest.approx(0.70)
    assert corrected.by_position[1] == pytest.approx(0.50)
    assert "positions 3, 4 drafted by < 10% of the drafts" in corrected.note
