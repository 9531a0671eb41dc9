"""The K = 0 tax: a batch-size schedule with K = 0 above B is not "speculation off" (pure; adaptive-vllm.md §2.1).

At K = 0 a dynamic-SD engine still runs one drafter forward per step to keep the drafter's KV in sync (+4-11% decode
time, vLLM #53420) and keeps the drafter's weights and KV pool resident (#49986); only a restart without
`--speculative-config` gives all of it back. So when the load sits above the schedule's crossover most of the time,
the schedule pays a tax in every step there, and switching speculation off (one restart) can be worth more than the
gain the schedule still makes at low load. This module does that arithmetic over the observed load mix:

    rel(B)   = tokens/s at batch B under the schedule / tokens/s at B without speculation - 1
               (K > 0: E_K · T_off(B) / T(B, K) - 1;  K = 0: T_off(B) / T_K0(B) - 1 < 0, the tax)
    T_K0(B)  = (T_verify(B, 0) + one drafter forward at B + T_sched) · (1 + fixed overhead of a speculative config)
    tax_s    = share of time at K = 0 x mean tax there x horizon      (capacity-seconds lost by staying configured)
    gain_s   = share of time at K > 0 x mean gain there x horizon     (capacity-seconds won by speculating)
    off wins when tax_s - gain_s > restart cost (the capacity-seconds one restart removes)

The drafter's memory is reported, not priced: the KV it holds matters only when the engine is KV-bound, which the
fit does not model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.schedule import AcceptanceProfile, StepCostModel, k_for_batch
from specpilot.vllm.intent import SpeculationIntent


@dataclass(frozen=True)
class OffComparison:
    """Schedule-with-K=0-ranges vs speculation off over the observed load; `off_wins` recommends turning it off."""

    off_wins: bool
    reason: str
    evidence: dict[str, Any]


def k0_step_ms(model: StepCostModel, batch: int) -> float:
    """One step at K = 0 under a schedule: the target's step plus one drafter forward, with the configured overhead."""
    one_forward = model.draft_cost_ms(batch, 1)
    return (model.verify_ms(batch, 0) + one_forward + model.sched_ms) * (1 + model.spec_fixed_fraction)


def relative_rate(profile: AcceptanceProfile, model: StepCostModel, batch: int, k: int) -> float:
    """Tokens/s at this batch under the schedule's K, over tokens/s without any speculative config, minus 1."""
    plain = model.step_ms(batch, 0, configured=False)
    if k <= 0:
        return plain / k0_step_ms(model, batch) - 1
    return profile.expected_tokens(k) * plain / model.step_ms(batch, k) - 1


def compare_with_off(
    profile: AcceptanceProfile,
    model: StepCostModel,
    intent: SpeculationIntent,
    *,
    max_k: int,
    load: Mapping[int, float],
    restart_cost_s: float,
    horizon_s: float,
    drafter_memory: str | None = None,
) -> OffComparison:
    """Price the schedule's K = 0 ranges and compare the whole schedule with speculation off (see module doc).

    `load` maps representative batch sizes to time weights (the decayed load histogram).
    """
    total = sum(load.values())
    above_w = below_w = tax_sum = gain_sum = 0.0
    rows: list[dict[str, Any]] = []
    for batch, weight in sorted(load.items()):
        if weight <= 0:
            continue
        k = k_for_batch(intent, batch, max_k)
        rel = relative_rate(profile, model, batch, k)
        rows.append({"batch": batch, "share": round(weight / total, 4), "k": k, "relativeRate": round(rel, 4)})
        if k <= 0:
            above_w += weight
            tax_sum += -rel * weight
        else:
            below_w += weight
            gain_sum += rel * weight
    if total <= 0 or not rows:
        return OffComparison(False, "no load observed: nothing to compare", {"rows": rows})
    share_above, share_below = above_w / total, below_w / total
    tax = tax_sum / above_w if above_w else 0.0
    gain = gain_sum / below_w if below_w else 0.0
    tax_s = share_above * tax * horizon_s
    gain_s = share_below * gain * horizon_s
    net_s = tax_s - gain_s
    off_wins = share_above > 0 and net_s > restart_cost_s
    evidence: dict[str, Any] = {
        "formula": "off wins when shareAtK0 x taxAtK0 x horizon - shareAtK>0 x gainAtK>0 x horizon > restartCost",
        "shareAtK0": round(share_above, 4),
        "taxAtK0": round(tax, 4),
        "shareAtKPositive": round(share_below, 4),
        "gainAtKPositive": round(gain, 4),
        "horizonSeconds": horizon_s,
        "taxSeconds": round(tax_s, 1),
        "gainSeconds": round(gain_s, 1),
        "netSeconds": round(net_s, 1),
        "restartCostSeconds": restart_cost_s,
        "offWins": off_wins,
        "byBatch": rows,
    }
    if drafter_memory:
        evidence["drafterMemory"] = drafter_memory
    arithmetic = (
        f"{share_above:.0%} of the time at K=0 pays a {tax:.1%} tax (a drafter forward every step and the "
        f"speculative config's overhead) = {tax_s:.0f}s over {horizon_s / 60:.0f}m, against a {gain:+.1%} gain "
        f"{share_below:.0%} of the time = {gain_s:.0f}s; net {net_s:+.0f}s vs one restart {restart_cost_s:.0f}s"
    )
    if off_wins:
        reason = f"speculation off beats the schedule with K=0 above the crossover: {arithmetic}"
    elif share_above <= 0 or math.isclose(share_above, 0.0):
        reason = "the load never reaches the schedule's K=0 ranges: no K=0 tax"
    else:
        reason = f"the schedule stays: {arithmetic}"
    return OffComparison(off_wins, reason, evidence)
