"""The K = 0 tax: a schedule with K = 0 above B against speculation off, with the arithmetic in evidence."""

from __future__ import annotations

import pytest

import tests.unit.test_policy as tp
from specpilot.api.v1alpha1 import parse_spec
from specpilot.autotune.model.k0tax import (
    DrafterMemory,
    compare_with_off,
    drafter_kv_gain,
    k0_step_ms,
    kv_bound,
    relative_rate,
)
from specpilot.autotune.model.stepcost import LLAMA8B_H100, LLAMA70B_4XH100, AcceptanceProfile, StepCostModel
from specpilot.autotune.policy.decision import evaluate_alone
from specpilot.autotune.policy.state import Action, OffReason, PolicyState
from specpilot.planning.plan import plan_memory
from specpilot.vllm.intent import SpeculationIntent

PROFILE = AcceptanceProfile((0.7, 0.49, 0.343), "geometric 0.7")
SCHEDULE = SpeculationIntent(True, 3, 64, ((1, 63, 3), (64, 512, 0)))


@pytest.mark.parametrize("model", [LLAMA8B_H100, LLAMA70B_4XH100])
@pytest.mark.parametrize("batch", [1, 16, 64, 256])
def test_a_k0_step_costs_more_than_a_plain_step_by_a_drafter_forward(model: StepCostModel, batch: int) -> None:
    plain = model.step_ms(batch, 0, configured=False)
    taxed = k0_step_ms(model, batch)
    assert taxed == pytest.approx((plain + model.draft_cost_ms(batch, 1)) * (1 + model.spec_fixed_fraction))
    assert 0.03 < taxed / plain - 1 < 0.20, "vLLM #53420 measured +4-11% decode time at K = 0"


def test_the_8b_tax_at_batch_256_is_in_the_published_range() -> None:
    tax = -relative_rate(PROFILE, LLAMA8B_H100, 256, 0)
    assert tax == pytest.approx(0.070, abs=0.002)  # 24.57 ms plain vs 26.41 ms with the drafter forward


@pytest.mark.parametrize(
    ("load", "restart_s", "off_wins"),
    [
        ({256: 1.0}, 90.0, True),  # always above the crossover: the tax (~7%) x 1h >> one restart
        ({8: 1.0}, 90.0, False),  # never at K = 0: no tax
        ({256: 0.5, 8: 0.5}, 90.0, False),  # the gain at low load pays for the tax at high load
        ({256: 0.97, 8: 0.03}, 90.0, True),
        ({256: 0.97, 8: 0.03}, 3000.0, False),  # a 70B-class restart outweighs the tax over the horizon
    ],
)
def test_schedule_against_off(load: dict[int, float], restart_s: float, off_wins: bool) -> None:
    result = compare_with_off(
        PROFILE, LLAMA8B_H100, SCHEDULE, max_k=3, load=load, restart_cost_s=restart_s, horizon_s=3600.0
    )
    assert result.off_wins is off_wins
    e = result.evidence
    assert e["netSeconds"] == pytest.approx(e["taxSeconds"] - e["gainSeconds"], abs=0.2)
    assert e["taxSeconds"] == pytest.approx(e["shareAtK0"] * e["taxAtK0"] * 3600, rel=1e-3, abs=0.2)
    assert (e["netSeconds"] > restart_s) is off_wins or e["shareAtK0"] == 0
    if off_wins:
        assert result.reason.startswith("speculation off beats the schedule with K=0 above the crossover: ")
        assert f"vs one restart {restart_s:.0f}s" in result.reason


def test_the_policy_switches_off_when_the_load_lives_above_a_bounded_threshold() -> None:
    """batchThreshold.max 64 forces K = 0 from 64 on; the engines run at ~180 all day: off beats the schedule."""
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 64})
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 512})})
    state = PolicyState(load={8: 7200.0}, load_updated=tp.T0 - tp.MINUTE)
    decision = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=181, alpha=0.7)), state, tp.T0)
    assert decision.action is Action.DISABLE
    assert decision.off_kind is OffReason.LOAD, "back on when the load falls under the crossover"
    assert decision.reason.startswith("speculation off beats the schedule with K=0 above the crossover: 100% of")
    tax = decision.evidence["threshold"]["k0Tax"]
    assert tax["offWins"]
    assert tax["shareAtK0"] == 1.0
    assert tax["byBatch"] == [{"batch": 181, "share": 1.0, "k": 0, "relativeRate": tax["byBatch"][0]["relativeRate"]}]


def test_the_policy_keeps_the_schedule_when_low_load_pays_for_the_tax() -> None:
    spec = tp.make_spec(agreeingEvaluations=1, stabilization="0s", batchThreshold={"tune": True, "min": 4, "max": 64})
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"max_num_seqs": 512})})
    state = PolicyState(load={8: 3600.0, 4: 3600.0}, load_updated=tp.T0 - tp.MINUTE)
    decision = evaluate_alone(tp.inputs(spec, tp.tuned_observation(batch=181, alpha=0.7)), state, tp.T0)
    assert decision.action is not Action.DISABLE
    assert decision.evidence["threshold"]["k0Tax"]["reason"].startswith("the schedule stays: 50% of the time at K=0")


# ------------------------------------------------------------------------------------------------ the drafter's memory


@pytest.mark.parametrize(
    ("usage", "waiting", "preemptions", "bound"),
    [
        (0.95, 12.0, 0.0, True),  # the cache is full and requests queue: KV limits the batch
        (0.50, 0.0, 0.3, True),  # preemptions: KV ran out
        (0.95, 0.0, 0.0, False),  # full but nobody waits: max_num_seqs or the load limits the batch
        (0.60, 40.0, 0.0, False),  # a queue with room in the cache: max_num_seqs binds, not KV
        (None, None, None, False),
    ],
)
def test_kv_bound(usage: float | None, waiting: float | None, preemptions: float | None, bound: bool) -> None:
    assert kv_bound(usage, waiting, preemptions)[0] is bound


def test_drafter_kv_gain_from_the_memory_plan() -> None:
    """A 1B draft model on an 8B target holds far more KV than an EAGLE-3 head (one decoder layer)."""
    eagle = tp.make_spec()
    raw = eagle.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["speculation"] = {"method": "draft_model", "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
                          "numSpeculativeTokens": 3}  # fmt: skip
    draft = parse_spec(raw)
    head, model = drafter_kv_gain(plan_memory(eagle)), drafter_kv_gain(plan_memory(draft))
    assert head is not None
    assert model is not None
    assert 0 < head < 0.1
    assert 0.2 < model < 1.0
    print(f"KV without the drafter: EAGLE-3 head +{head:.1%}, 1B draft model +{model:.1%}")


@pytest.mark.parametrize(("bound", "off_wins"), [(True, True), (False, False)])
def test_the_drafters_memory_tips_the_comparison_only_when_kv_bound(bound: bool, off_wins: bool) -> None:
    """10% of the time at batch 8 (K = 3 gains +92%), 90% at 181 (K = 0): the step tax alone (7.5%) leaves the schedule
    in place; a KV-bound engine that would run 40% more requests without a draft model's cache (tax 15%) goes off."""
    memory = DrafterMemory(0.4, bound, "test", 512)
    result = compare_with_off(
        PROFILE, LLAMA8B_H100, SCHEDULE, max_k=3, load={8: 0.1, 181: 0.9}, restart_cost_s=90.0, horizon_s=3600.0,
        drafter_memory=memory,
    )  # fmt: skip
    assert result.off_wins is off_wins, result.reason
    row = result.evidence["byBatch"][1]
    assert ("memoryRate" in row) is bound
    assert result.evidence["drafterMemory"]["kvBound"] is bound
    if bound:
        assert row["relativeRate"] == pytest.approx(-0.151, abs=0.002)
        assert "keeps out of the KV cache: +40% KV without it" in result.reason
    step_only = compare_with_off(
        PROFILE, LLAMA8B_H100, SCHEDULE, max_k=3, load={8: 0.1, 181: 0.9}, restart_cost_s=90.0, horizon_s=3600.0
    )
    assert not step_only.off_wins
    print(result.reason)
