"""The K = 0 tax: a batch-size schedule with K = 0 above B is not "speculation off" (pure; docs/design/cost-model.md).

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

The drafter's memory is priced where it binds: its weights and its own KV cache shrink the KV pool (plan.py), so a
KV-bound engine (preempting, or queueing while the cache is full) runs fewer requests at once than it would without
the drafter. There the K = 0 tax grows by the throughput those extra requests would add:

    mem(B)   = rate_plain(B x (1 + kvGain)) / rate_plain(B) - 1,   rate_plain(B) = B / T_off(B), B capped at maxNumSeqs
    tax(B)   = (1 + step tax(B)) x (1 + mem(B)) - 1                (K = 0 ranges, only while KV-bound)

kvGain = KV tokens without the drafter / KV tokens with it - 1 (`DrafterMemory`, from the memory plan). An engine
that is not KV-bound gets nothing from the freed memory, and the memory is only reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.autotune.model.evidence import finite
from specpilot.autotune.model.stepcost import AcceptanceProfile, StepCostModel, k0_step_ms, k_for_batch
from specpilot.planning.plan import MemoryPlan
from specpilot.vllm.intent import SpeculationIntent

__all__ = [
    "DrafterMemory",
    "OffComparison",
    "compare_with_off",
    "drafter_kv_gain",
    "k0_step_ms",  # defined with the schedule fit, which prices K = 0 ranges with it
    "kv_bound",
    "relative_rate",
]

KV_BOUND_USAGE = 0.9  # KV-cache usage at which a queue or preemptions mean the cache, not max_num_seqs, is the limit


@dataclass(frozen=True)
class DrafterMemory:
    """What the drafter's memory costs: KV capacity speculation-off would add, and whether the engine is KV-bound."""

    kv_gain: float  # KV tokens without the drafter / with it - 1
    kv_bound: bool
    detail: str
    max_num_seqs: int

    def to_dict(self) -> dict[str, Any]:
        return {"kvGainWithoutDrafter": round(self.kv_gain, 4), "kvBound": self.kv_bound, "detail": self.detail}


def drafter_kv_gain(plan: MemoryPlan) -> float | None:
    """KV tokens the replica would have without the drafter (its weights freed, its KV bytes per token gone), over
    the tokens it has with it, minus 1; None without a drafter or a KV budget."""
    draft = plan.draft
    if draft is None or plan.kv_tokens <= 0 or plan.kv_budget_bytes_per_rank <= 0:
        return None
    freed = math.ceil(draft.weight_bytes / max(1, draft.tensor_parallel_size))
    without = (plan.kv_budget_bytes_per_rank + freed) // max(1, plan.target.kv_bytes_per_token_per_rank)
    return without / plan.kv_tokens - 1


def kv_bound(kv_usage: float | None, waiting: float | None, preemptions_per_s: float | None) -> tuple[bool, str]:
    """Is the KV cache what limits the batch? Preemptions, or requests waiting while the cache is nearly full."""
    if preemptions_per_s is not None and preemptions_per_s > 0:
        return True, f"{preemptions_per_s:.2f} preemptions/s"
    if kv_usage is not None and kv_usage >= KV_BOUND_USAGE and waiting is not None and waiting >= 1:
        return True, f"KV cache {kv_usage:.0%} full with {waiting:.0f} requests waiting"
    shown = "?" if kv_usage is None else f"{kv_usage:.0%}"
    return False, f"not KV-bound (KV cache {shown}, no preemptions)"


def memory_rate(model: StepCostModel, batch: int, memory: DrafterMemory) -> float:
    """mem(B): relative tokens/s plain would add by running more requests in the KV the drafter holds (see doc)."""
    if not memory.kv_bound or memory.kv_gain <= 0:
        return 0.0
    wider = min(memory.max_num_seqs, max(batch, round(batch * (1 + memory.kv_gain))))
    if wider <= batch:
        return 0.0
    now = batch / model.step_ms(batch, 0, configured=False)
    more = wider / model.step_ms(wider, 0, configured=False)
    return more / now - 1


@dataclass(frozen=True)
class OffComparison:
    """Schedule-with-K=0-ranges vs speculation off over the observed load; `off_wins` recommends turning it off."""

    off_wins: bool
    reason: str
    evidence: dict[str, Any]  # for people; the figures code reads are the fields below
    tax: float = 0.0  # the relative tax paid at the K = 0 batches (taxAtK0)
    net_s: float | None = None  # tax minus gain over the horizon, seconds (netSeconds); None without load


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
    drafter_memory: DrafterMemory | None = None,
) -> OffComparison:
    """Price the schedule's K = 0 ranges and compare the whole schedule with speculation off (see module doc).

    `load` maps representative batch sizes to time weights (the decayed load histogram).
    """
    total = sum(load.values())
    priced = _by_batch(profile, model, intent, max_k, load, total, drafter_memory)
    rows = [p.row for p in priced]
    if total <= 0 or not rows:
        return OffComparison(False, "no load observed: nothing to compare", {"rows": rows})
    at_k0 = [p for p in priced if p.k <= 0]
    at_k = [p for p in priced if p.k > 0]
    above_w, below_w = sum(p.weight for p in at_k0), sum(p.weight for p in at_k)
    share_above, share_below = above_w / total, below_w / total
    tax = sum(-p.rel * p.weight for p in at_k0) / above_w if above_w else 0.0
    gain = sum(p.rel * p.weight for p in at_k) / below_w if below_w else 0.0
    sums = _Sums(share_above, tax, share_below, gain, horizon_s)
    off_wins = share_above > 0 and sums.net_s > restart_cost_s
    evidence: dict[str, Any] = {
        "formula": "off wins when shareAtK0 x taxAtK0 x horizon - shareAtK>0 x gainAtK>0 x horizon > restartCost",
        "shareAtK0": round(share_above, 4),
        "taxAtK0": round(tax, 4),
        "shareAtKPositive": round(share_below, 4),
        "gainAtKPositive": round(gain, 4),
        "horizonSeconds": horizon_s,
        "taxSeconds": round(sums.tax_s, 1),
        "gainSeconds": round(sums.gain_s, 1),
        "netSeconds": round(sums.net_s, 1),
        "restartCostSeconds": finite(restart_cost_s, 1),
        "offWins": off_wins,
        "byBatch": rows,
    }
    if drafter_memory is not None:
        evidence["drafterMemory"] = drafter_memory.to_dict()
    arithmetic = sums.text(restart_cost_s, drafter_memory)
    if off_wins:
        reason = f"speculation off beats the schedule with K=0 above the crossover: {arithmetic}"
    elif share_above <= 0 or math.isclose(share_above, 0.0):
        reason = "the load never reaches the schedule's K=0 ranges: no K=0 tax"
    else:
        reason = f"the schedule stays: {arithmetic}"
    return OffComparison(off_wins, reason, evidence, tax=tax, net_s=sums.net_s)


@dataclass(frozen=True)
class _AtBatch:
    """One representative batch size of the load: its time weight, the schedule's K there, the speed relative to
    off, and the row the evidence shows."""

    weight: float
    k: int
    rel: float
    row: dict[str, Any]


def _by_batch(
    profile: AcceptanceProfile,
    model: StepCostModel,
    intent: SpeculationIntent,
    max_k: int,
    load: Mapping[int, float],
    total: float,
    drafter_memory: DrafterMemory | None,
) -> list[_AtBatch]:
    """The schedule against off at every batch size the load holds (`total`: its weights' sum); at K = 0 the
    drafter's memory is priced too (memory_rate), where the KV cache bounds the batch."""
    out: list[_AtBatch] = []
    for batch, weight in sorted(load.items()):
        if weight <= 0:
            continue
        k = k_for_batch(intent, batch, max_k)
        rel = relative_rate(profile, model, batch, k)
        row: dict[str, Any] = {"batch": batch, "share": round(weight / total, 4), "k": k}
        if k <= 0 and drafter_memory is not None:
            mem = memory_rate(model, batch, drafter_memory)
            if mem > 0:
                row["memoryRate"] = round(-mem, 4)
                rel = (1 + rel) / (1 + mem) - 1
        row["relativeRate"] = round(rel, 4)
        out.append(_AtBatch(weight, k, rel, row))
    return out


@dataclass(frozen=True)
class _Sums:
    """The comparison over the horizon: the share of the time at K = 0 and the tax it pays there, against the share
    at K > 0 and the gain there."""

    share_above: float
    tax: float
    share_below: float
    gain: float
    horizon_s: float

    @property
    def tax_s(self) -> float:
        return self.share_above * self.tax * self.horizon_s

    @property
    def gain_s(self) -> float:
        return self.share_below * self.gain * self.horizon_s

    @property
    def net_s(self) -> float:
        return self.tax_s - self.gain_s

    def text(self, restart_cost_s: float, drafter_memory: DrafterMemory | None) -> str:
        """The sums in words, against one restart of `restart_cost_s`."""
        memory_text = (
            f", and the requests the drafter's memory keeps out of the KV cache: +{drafter_memory.kv_gain:.0%} KV "
            f"without it, {drafter_memory.detail}"
            if drafter_memory is not None and drafter_memory.kv_bound and drafter_memory.kv_gain > 0
            else ""
        )
        restart_text = (
            "that could not drain the queue it builds at this load"
            if math.isinf(restart_cost_s)
            else f"{restart_cost_s:.0f}s"
        )
        return (
            f"{self.share_above:.0%} of the time at K=0 pays a {self.tax:.1%} tax (a drafter forward every step and "
            f"the speculative config's overhead{memory_text}) = {self.tax_s:.0f}s over {self.horizon_s / 60:.0f}m, "
            f"against a {self.gain:+.1%} gain {self.share_below:.0%} of the time = {self.gain_s:.0f}s; net "
            f"{self.net_s:+.0f}s vs one restart {restart_text}"
        )
