"""Choose K per batch size from measured acceptance and a step-cost model (pure; docs/design/cost-model.md).

What is measured and what is assumed:

- Measured (Prometheus, this window): the per-position survival r_j (vLLM's per-position accepted counter over the
  drafts counter), so tokens per verification step E_k = 1 + r_1 + ... + r_k for every k up to the configured K;
  the batch sizes the engines run at (running requests per engine, accumulated into a load histogram); the mean
  per-token latency (TPOT) with speculation on; and, from the baseline record, the non-speculative TPOT at the same
  load.
- Assumed (inputs, `StepCostModel`): the step time T(B, k) of the target + drafter, the smooth roofline
  T_verify(N, KV) = a·(1 + (N/N_r)^p)^(1/p) + c_kv·KV with N = B·(k+1) tokens and KV = B·L̄,
  plus the drafter term and the scheduler overhead. L̄ is measured when Prometheus has it
  (`with_context_length`: mean prompt plus half the mean output of the window's finished requests), else
  MEAN_CONTEXT_TOKENS is assumed; N also counts the prompt tokens chunked into each step, when measured
  (`with_prefill`). The numbers are a calibrated simulator preset's
  (`step_cost_model`), chosen per deployment by costprofile.py (`llama8b-h100` when nothing chooses); with
  both TPOTs at hand the drafter cost is rescaled so the model's step-time ratio T(B,k)/T(B,off) matches the measured
  one, and a model whose predicted TPOT is off by more than `model_tolerance` blocks any change.

K is chosen per batch size to maximise tokens per unit time, E_k / T(B, k) (B is fixed within one step, so this
also maximises throughput); K = 0 where no K > 0 wins. A schedule is installed only if the predicted gain over the
observed load repays the restart (every change restarts vLLM: its speculative config is fixed at start).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from specpilot.api.v1alpha1 import AutotuneObjective
from specpilot.autotune.model.evidence import finite
from specpilot.autotune.model.k0tax import DrafterMemory, OffComparison, compare_with_off
from specpilot.autotune.model.objective import choose_k
from specpilot.autotune.model.rollcost import RolloutShape, share_within
from specpilot.autotune.model.rollqueue import Phases, late_arrival_seconds
from specpilot.autotune.model.stepcost import (
    LLAMA8B_H100,
    AcceptanceProfile,
    Rate,
    StepCostModel,
    best_k,
    k_for_batch,
    model_for_method,
    schedule_tokens_per_ms,
    speedup,
    tokens_per_ms,
    with_emission,
)
from specpilot.vllm.dialects import ThresholdSupport as RenderedSupport
from specpilot.vllm.intent import BatchSchedule, SpeculationIntent
from specpilot.vllm.versions import VllmVersion

# ------------------------------------------------------------------------------------------------ K per batch


@dataclass(frozen=True)
class Fit:
    schedule: BatchSchedule
    threshold: int | None  # first batch size with K = 0 (None: speculation never switched off below maxNumSeqs)


def fit_schedule(
    profile: AcceptanceProfile,
    model: StepCostModel,
    *,
    max_k: int,
    max_num_seqs: int,
    bounds: tuple[int, int],
    prefer_within: float = 0.01,
    objective: AutotuneObjective = AutotuneObjective.THROUGHPUT,
) -> Fit:
    """K per batch size for vLLM >= 0.24 `num_speculative_tokens_per_batch_size`.

    K never rises with batch size (the cost of a verify token only grows with the batch), so a running minimum
    removes ties that would otherwise split ranges. The threshold (first K = 0) is kept inside the user's
    batchThreshold bounds: below `min` the smallest K (1) is used instead of 0, above `max` K drops to 0 at `max`.
    K = 0 is priced with the K = 0 tax (one drafter forward per step, `k0_step_ms`): a dynamic-SD engine pays it in
    every step of a K = 0 range, so K = 0 wins only where it beats K >= 1 with the tax included. `objective`
    (spec.autotune.objective) breaks ties within `prefer_within` (objective.choose_k).
    """
    low, high = bounds
    ks: list[int] = []
    ceiling = min(max_k, profile.max_k)
    for batch in range(1, max_num_seqs + 1):
        k = min(best_k(profile, model, batch, ceiling, prefer_within, schedule_tokens_per_ms, objective), ceiling)
        ks.append(k)
        ceiling = k
    threshold = next((b for b, k in enumerate(ks, start=1) if k == 0), None)
    if threshold is not None and threshold < low:
        for b in range(threshold, min(low, max_num_seqs + 1)):
            ks[b - 1] = 1
        threshold = low if low <= max_num_seqs else None
    if (threshold is None or threshold > high) and high < max_num_seqs:
        # batchThreshold.max bounds every fit, also one that found no crossover: K drops to 0 at `max`.
        for b in range(high, max_num_seqs + 1):
            ks[b - 1] = 0
        threshold = high
    return Fit(_ranges(ks), threshold)


def fit_static_k(
    profile: AcceptanceProfile,
    model: StepCostModel,
    load: Mapping[int, float],
    max_k: int,
    prefer_within: float = 0.01,
    objective: AutotuneObjective = AutotuneObjective.THROUGHPUT,
) -> int:
    """One K >= 1 for every batch size, for engines without a per-batch-size schedule: the K with the most tokens/s
    over the observed load (predicted_gain against K = 1), ties within `prefer_within` broken by the objective
    (objective.choose_k). Speculation off is the on/off decision's, not this fit's."""
    if max_k < 1:
        raise ValueError("fit_static_k needs max_k >= 1")

    def relative(k: int) -> float:
        return 1.0 + predicted_gain(profile, model, load, lambda _b: 1, lambda _b: k)

    return choose_k([0.0, *(relative(k) for k in range(1, max_k + 1))], objective, prefer_within)


def _ranges(ks: list[int]) -> BatchSchedule:
    ranges: list[tuple[int, int, int]] = []
    for batch, k in enumerate(ks, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], batch, k)
        else:
            ranges.append((batch, batch, k))
    return tuple(ranges)


def fit_threshold(
    profile: AcceptanceProfile, model: StepCostModel, *, k: int, max_num_seqs: int, bounds: tuple[int, int]
) -> int | None:
    """V0 `disable_by_batch_size`: the first running-batch size where speculating at K is slower per token than not.

    V0 skips the proposer for the whole step when running >= threshold; the steps it skips still pay the fixed
    cost of speculation being configured, hence `configured=True` on both sides. vLLM requires a value >= 2.
    """
    low, high = max(2, bounds[0]), bounds[1]
    for batch in range(1, max_num_seqs + 1):
        if tokens_per_ms(profile, model, batch, k) <= tokens_per_ms(profile, model, batch, 0):
            return min(max(batch, low), high)
    # No crossover below maxNumSeqs: batchThreshold.max still bounds the threshold autotune may set.
    return high if high < max_num_seqs else None


# ------------------------------------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class Calibration:
    model: StepCostModel
    factor: float | None  # drafter-cost multiplier applied (None: not calibrated)
    note: str


def calibrate_drafter(
    model: StepCostModel,
    profile: AcceptanceProfile,
    *,
    batch: int,
    k: int,
    tpot_on_ms: float,
    tpot_off_ms: float,
    limits: tuple[float, float] = (0.25, 4.0),
) -> Calibration:
    """Rescale the drafter cost so T(B,k)/T_off(B) equals the measured E_k·TPOT_on/TPOT_off at the same load.

    TPOT is step time over tokens per step, so the measured step-time ratio is E_k·TPOT_on/TPOT_off; the model is
    linear in the drafter multiplier m, which is solved for and clamped to `limits` (outside them the model shape,
    not the drafter, is wrong; the note says so).
    """
    draft = model.draft_cost_ms(batch, k)
    if k <= 0 or draft <= 0 or tpot_off_ms <= 0:
        return Calibration(model, None, "drafter cost not calibrated (no drafter term at this K)")
    measured_ratio = profile.expected_tokens(k) * tpot_on_ms / tpot_off_ms
    fixed = 1 + model.spec_fixed_fraction
    rest = model.verify_ms(batch, k) + model.overhead_ms(batch)
    factor = (measured_ratio * model.step_ms(batch, 0, configured=False) / fixed - rest) / draft
    clamped = min(max(factor, limits[0]), limits[1])
    scaled = replace(
        model,
        draft_ms=model.draft_ms * clamped,
        draft_ms_per_request=model.draft_ms_per_request * clamped,
        draft_kv_ns_per_token=model.draft_kv_ns_per_token * clamped,
        draft_model_cost_ratio=model.draft_model_cost_ratio * clamped,
        lookup_fraction=model.lookup_fraction * clamped,
    )
    note = (
        f"drafter cost x{clamped:.2f} so the step-time ratio matches the measured {measured_ratio:.2f} at batch {batch}"
    )
    if clamped != factor:
        note += f" (wanted x{factor:.2f}, clamped to {limits}: the cost model's shape may not fit this hardware)"
    return Calibration(scaled, clamped, note)


def model_consistency(
    model: StepCostModel, profile: AcceptanceProfile, *, batch: int, k: int, tpot_ms: float, tolerance: float
) -> tuple[bool, str]:
    """Check the model predicts the measured TPOT within a factor `tolerance`; an uncalibrated profile must not act."""
    predicted = model.step_ms(batch, k) / profile.expected_tokens(k)
    ratio = tpot_ms / predicted
    ok = 1 / tolerance <= ratio <= tolerance
    verdict = "consistent" if ok else f"off by more than x{tolerance:g}: calibrate the cost model"
    return (
        ok,
        f"model {model.name} predicts TPOT {predicted:.2f} ms at batch {batch}, K={k}; "
        f"measured {tpot_ms:.2f} ms ({verdict})",
    )


# ------------------------------------------------------------------------------------------------ gain vs restart


def predicted_gain(
    profile: AcceptanceProfile,
    model: StepCostModel,
    load: Mapping[int, float],
    k_now: Callable[[int], int],
    k_new: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> float:
    """Relative tokens/s gained over the observed load: Σ_B w_B · (rate_new(B)/rate_now(B) - 1), Σ w_B = 1.

    `rate`: `schedule_tokens_per_ms` where both configs are batch-size schedules (K = 0 pays the drafter tax).
    """
    total = sum(load.values())
    if total <= 0:
        return 0.0
    gain = 0.0
    for batch, weight in load.items():
        now = rate(profile, model, batch, k_now(batch))
        new = rate(profile, model, batch, k_new(batch))
        gain += weight / total * (new / now - 1)
    return gain


def gain_at_same_load(
    profile: AcceptanceProfile,
    model: StepCostModel,
    batch_now: int,
    max_num_seqs: int,
    k_now: Callable[[int], int],
    k_new: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> tuple[float, int]:
    """Per-request speed gained at the same offered load, and the batch the new config settles at.

    Below capacity, throughput is set by the arrivals, not the config: a faster step finishes each request sooner, so
    fewer run at once (Little's law: running = tokens/s served x time per token) and each step gets faster again. The
    load the running config serves now is batch_now x rate_now(batch_now) tokens per ms; the new config settles one
    above the largest batch that cannot serve it (b x rate_new(b) < load), and each request then runs at rate_new
    there. Throughput is not monotone in the batch (past the CUDA-graph capture limit a step pays the eager
    penalty, so batch 128 at K = 3 can out-serve batch 150), and a running engine sits at the upper crossing, where
    its own batch is: the search comes down from max_num_seqs, so the running config's own settled batch is the one
    it runs at. When even max_num_seqs cannot serve the load, the new config is saturated there.

    Near saturation throughput barely grows with the batch, so a small throughput gain moves the batch a lot (+4.7%
    at batch 180 settles at 113 and reads +60% per request): queueing's own sensitivity, and the model's error with
    it. It only prices how long an agreed shed waits (fast toward safe); whether a change is worth
    a restart at all stays with the throughput gain over the load record and the fit's minimum gain.

    This, not the gain at the same batch (`predicted_gain` at batch_now), is what waiting to install the change
    forgoes in latency: near capacity the two part far, since the batch the refit settles at is smaller and its
    per-request speed-up larger (docs/design/decisions.md).
    """
    now = rate(profile, model, batch_now, k_now(batch_now))
    settled = settled_batch(profile, model, batch_now * now, max_num_seqs, k_new, rate)
    return rate(profile, model, settled, k_new(settled)) / now - 1, settled


def settled_batch(
    profile: AcceptanceProfile,
    model: StepCostModel,
    served: float,
    max_num_seqs: int,
    k_at: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> int:
    """The batch a config settles at serving `served` tokens per ms: one above the largest batch that cannot serve
    it, searched down from max_num_seqs (gain_at_same_load says why); max_num_seqs when nothing can."""
    for b in range(max_num_seqs, 0, -1):
        if b * rate(profile, model, b, k_at(b)) < served:
            return min(b + 1, max_num_seqs)
    return 1


def capacity_over_load(
    profile: AcceptanceProfile,
    model: StepCostModel,
    batch_now: int,
    max_num_seqs: int,
    k_at: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> float:
    """How many times what the running config serves now it can serve at most: its largest throughput at any batch
    up to max_num_seqs (throughput is not monotone in the batch: settled_batch) over its throughput at the batch now.
    1.0 or less: it runs at capacity."""
    served = batch_now * rate(profile, model, batch_now, k_at(batch_now))
    return math.inf if served <= 0 else capacity(profile, model, max_num_seqs, k_at, rate) / served


def capacity(
    profile: AcceptanceProfile,
    model: StepCostModel,
    max_num_seqs: int,
    k_at: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> float:
    """The most tokens per ms a config serves: its throughput at the best batch up to max_num_seqs."""
    return max(b * rate(profile, model, b, k_at(b)) for b in range(1, max_num_seqs + 1))


@dataclass(frozen=True)
class LoadNow:
    """The running config's load as measured now: its batch, mean TPOT (ms; None where not measured), how long the
    longest request in flight still runs (s: the measured P99 end-to-end latency; 0 where not measured), the
    median and P99 of its requests' TPOT (ms; None where not measured) and the highest request rate over the last
    rollout's length relative to the rate now (forecast.recent_peak_ratio: the load a rollout starting now may meet,
    at least 1)."""

    batch: int
    tpot_ms: float | None
    inflight_s: float = 0.0
    tpot_spread_ms: tuple[float, float] | None = None
    peak_ratio: float = 1.0

    def meeting(self, tpot_target_ms: float | None) -> float:
        """The share of requests that meet the TPOT objective now (rollcost.share_within); all where either the
        objective or the spread is unknown."""
        if tpot_target_ms is None or self.tpot_spread_ms is None:
            return 1.0
        return share_within(tpot_target_ms, *self.tpot_spread_ms)


@dataclass(frozen=True)
class RestartAtLoad:
    """Whether a rollout wave at the load now costs serving (rollcost): `free` while the pods it leaves serving carry
    every arrival, the running config's capacity over its load at least what a wave needs, and, where the CR
    declares a TPOT objective, keep their predicted mean TPOT (`wave_tpot_ms`) within it; both at the load the
    rollout may meet, `peak_ratio` times the load now (LoadNow.peak_ratio)."""

    capacity_over_load: float
    needed: float
    peak_ratio: float = 1.0
    wave_tpot_ms: float | None = None
    tpot_target_ms: float | None = None
    served: float = 0.0  # tokens per ms the running config serves now
    inflight_s: float = 0.0  # how long the longest request in flight still runs (LoadNow.inflight_s)
    # the share of the running config's requests that meet the TPOT objective (LoadNow.meeting): only those count
    # as lost when a rollout makes them late, the rest miss the objective anyway
    meeting: float = 1.0
    # seconds of arrivals the rollout makes miss the TTFT deadline (priced_for); None where not priced so
    late_s: float | None = None

    def prices_late(self, settings: FitSettings) -> bool:
        """Is this wave priced at the arrivals it makes miss the TTFT deadline (priced_for)? Not where it is carried,
        no deadline is declared, or the running config already serves at capacity (a queue there is the backlog
        gate's: policy/backlog.py)."""
        return (
            not self.carried
            and settings.ttft_deadline_s is not None
            and self.capacity_over_load > 1.0
            and self.served > 0
        )

    def priced_for(self, settings: FitSettings, capacity_after: float) -> RestartAtLoad:
        """This wave priced for a rollout to a config that serves up to `capacity_after` tokens per ms: the arrivals
        it makes miss the TTFT deadline (rollqueue.late_arrival_seconds), where it is priced so (prices_late)."""
        deadline, shape = settings.ttft_deadline_s, settings.rollout
        if deadline is None or shape is None or not self.prices_late(settings):
            return self
        phases = Phases(
            shape.waves(), shape.pod_restart_s(settings.restart_cost_s), settings.drain_s, self.inflight_s,
            shape.analysis_s, restart_drained=settings.restart_measured,
        )  # fmt: skip
        late = late_arrival_seconds(
            phases, before=self.capacity_over_load, after=capacity_after / self.served, deadline_s=deadline
        )
        return replace(self, late_s=late if math.isinf(late) else late * self.meeting)

    def cost_s(self, nominal_s: float) -> float:
        """What the rollout costs in seconds of serving: nothing while free, else the nominal capacity it removes or
        the arrivals it makes late, whichever is more."""
        if self.free:
            return 0.0
        return nominal_s if self.late_s is None else max(nominal_s, self.late_s)

    @property
    def carried(self) -> bool:
        return self.capacity_over_load >= self.needed * self.peak_ratio

    @property
    def within_target(self) -> bool:
        return self.tpot_target_ms is None or self.wave_tpot_ms is None or self.wave_tpot_ms <= self.tpot_target_ms

    @property
    def free(self) -> bool:
        return self.carried and self.within_target

    def to_dict(self, nominal_s: float) -> dict[str, Any]:
        cost = self.cost_s(nominal_s)
        out: dict[str, Any] = {
            "capacityOverLoad": round(self.capacity_over_load, 3),
            "headroomNeeded": round(self.needed, 3),
            "restartCostSeconds": finite(cost, 1),
        }
        if self.peak_ratio > 1.0:
            out["recentPeakRatio"] = round(self.peak_ratio, 3)
        if self.late_s is not None:
            out["lateSeconds"] = finite(self.late_s, 1)
            out["queueDrains"] = not math.isinf(self.late_s)
            out["inflightSeconds"] = round(self.inflight_s, 1)
            out["meetingTpotTarget"] = round(self.meeting, 3)
        if self.tpot_target_ms is not None and self.wave_tpot_ms is not None:
            out["waveTpotMs"] = round(self.wave_tpot_ms, 2)
            out["tpotTargetMs"] = round(self.tpot_target_ms, 2)
        return out


def restart_at_load(
    settings: FitSettings,
    profile: AcceptanceProfile,
    model: StepCostModel,
    load: LoadNow,
    max_num_seqs: int,
    k_at: Callable[[int], int],
    rate: Rate,
) -> RestartAtLoad | None:
    """The restart priced at the load now; None where a wave leaves no pod serving beside it (the nominal cost).

    Carrying the load is judged at the running config's largest throughput, where every request the pods left hold
    runs slower for the wave: no loss to a Throughput objective, a loss to a Latency one, which keeps the nominal cost
    (plan_threshold asks only for a Throughput objective). With a TPOT objective the slowdown is priced too: the pods
    left settle at the batch that serves their share of the arrivals (settled_batch), and the measured mean TPOT
    grows by the model's per-sequence rate at the batch now over the rate there. Both are judged at the load the
    rollout may meet (LoadNow.peak_ratio): a load that rose within a rollout's length just now may rise again
    while the wave is out."""
    if settings.headroom_needed is None or settings.restart_cost_s <= 0:
        return None
    headroom = capacity_over_load(profile, model, load.batch, max_num_seqs, k_at, rate)
    rate_now = rate(profile, model, load.batch, k_at(load.batch))
    served = load.batch * rate_now
    # a draining pod's longest request ends alone, at a nearly empty pod's per-sequence rate
    inflight_s = load.inflight_s * rate_now / rate(profile, model, 1, k_at(1))
    at_load = RestartAtLoad(
        headroom, settings.headroom_needed, max(1.0, load.peak_ratio), served=served, inflight_s=inflight_s,
        meeting=load.meeting(settings.tpot_target_ms),
    )  # fmt: skip
    if settings.tpot_target_ms is None or load.tpot_ms is None:
        return at_load
    wave_served = served * at_load.peak_ratio * settings.headroom_needed
    wave = settled_batch(profile, model, wave_served, max_num_seqs, k_at, rate)
    slowdown = rate_now / rate(profile, model, wave, k_at(wave))
    return replace(at_load, wave_tpot_ms=load.tpot_ms * slowdown, tpot_target_ms=settings.tpot_target_ms)


@dataclass(frozen=True)
class Projection:
    """Where the running config would run while the offered load moves by a forecast's ratios, per equal slice of
    time: the batch it settles at and what it serves there relative to now (the arrivals below capacity, the
    capacity past it)."""

    batches: tuple[int, ...]
    serving: tuple[float, ...]  # tokens/s of each slice over tokens/s now

    def load(self) -> dict[int, float]:
        """As a load record: slices of time per batch."""
        return _summed((b, 1.0) for b in self.batches)

    def serving_load(self) -> dict[int, float]:
        """Per batch, the serving of its slices relative to now."""
        return _summed(zip(self.batches, self.serving, strict=True))


def _summed(pairs: Iterable[tuple[int, float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for batch, weight in pairs:
        out[batch] = out.get(batch, 0.0) + weight
    return out


def project_load(
    profile: AcceptanceProfile,
    model: StepCostModel,
    batch_now: int,
    max_num_seqs: int,
    ratios: Sequence[float],
    k_at: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> Projection:
    """The batches the running config would run at while the offered load moves by `ratios` (projected request rate
    over the rate now, equal slices of time; forecast.py): throughput scales with the arrivals below capacity
    (Little's law again), and past it the batch is max_num_seqs, serving what max_num_seqs serves."""
    served = batch_now * rate(profile, model, batch_now, k_at(batch_now))
    batches: list[int] = []
    serving: list[float] = []
    for ratio in ratios:
        b = settled_batch(profile, model, served * ratio, max_num_seqs, k_at, rate)
        batches.append(b)
        serving.append(min(served * ratio, b * rate(profile, model, b, k_at(b))) / served if served > 0 else 0.0)
    return Projection(tuple(batches), tuple(serving))


def gain_ahead_in_serving_now(
    profile: AcceptanceProfile,
    model: StepCostModel,
    projection: Projection,
    k_now: Callable[[int], int],
    k_new: Callable[[int], int],
    rate: Rate = tokens_per_ms,
) -> float:
    """The refit's gain over a projected rise, in tokens/s of the serving now: what its payback is priced against.

    A restart happens now and removes the serving now (restart_cost_s seconds of it); the gain comes later, at the
    batches the rise leads to, where each second of the engine serves more. `predicted_gain` over those batches is
    a share of the serving *then*, so a payback of restart_cost_s / that share prices the restart at the load ahead,
    up to several times what it drops now: on a rise the forecast would install only once the load, and the
    restart's price with it, had grown (docs/design/decisions.md). Each slice here counts its gain times its
    serving relative to now, over the slices:

        serving gain = (1/n) Σ_i thr_i / thr_now x (rate_new(B_i) / rate_now(B_i) - 1)

    which is `predicted_gain` weighted by serving, times the mean serving.
    """
    weights = projection.serving_load()
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    return predicted_gain(profile, model, weights, k_now, k_new, rate) * total / len(projection.batches)


def payback_seconds(gain: float, restart_cost_s: float) -> float:
    """Seconds of running the new config before its gain repays the capacity one restart removes."""
    return math.inf if gain <= 0 else restart_cost_s / gain


class ThresholdSupport(StrEnum):
    SCHEDULE = "schedule"  # num_speculative_tokens_per_batch_size (>= 0.24)
    THRESHOLD = "threshold"  # disable_by_batch_size (V0 engine, <= 0.9.2)
    NONE = "none"  # nothing the engine honours: only speculation on/off as a whole


def fit_support(rendered: RenderedSupport) -> ThresholdSupport:
    """What the fit may produce, from how the renderer would express a threshold for this spec (one source:
    dialects.threshold_support_for, which knows engine, method and extra args, not just the version)."""
    if rendered is RenderedSupport.BATCH_SCHEDULE:
        return ThresholdSupport.SCHEDULE
    if rendered is RenderedSupport.DISABLE_BY_BATCH_SIZE:
        return ThresholdSupport.THRESHOLD
    return ThresholdSupport.NONE


def representative_batch(bucket: int) -> int:
    """A batch size standing for a load bucket [2^(b-1), 2^b): its geometric middle (bucket 0, idle, stands as 1)."""
    if bucket <= 0:
        return 1
    return max(1, round(math.sqrt(2 ** (bucket - 1) * 2**bucket)))


def schedule_text(schedule: BatchSchedule | None) -> str:
    if not schedule:
        return "none"
    return "[" + ",".join(f"[{lo},{hi},{k}]" for lo, hi, k in schedule) + "]"


@dataclass(frozen=True)
class ThresholdPlan:
    """The outcome of fitting: a proposed intent (or None), and why."""

    support: ThresholdSupport
    proposed: SpeculationIntent | None
    gain: float
    payback_s: float
    worth_installing: bool
    reason: str
    evidence: dict[str, Any]  # for people; the figures code reads are the fields
    disable: bool = False  # the K = 0 tax: speculation off beats the best schedule over the observed load (k0tax.py)
    off: OffComparison | None = None  # the K = 0 comparison, where the fit ran it
    gain_now: float | None = None  # the refit's throughput gain at the batch now; None where no refit was priced
    gain_at_load: float | None = None  # its per-request speed-up at the load now (gain_at_same_load)
    vs_anchor: VersusAnchor | None = None  # against the refit its agreement streak began with
    # seconds of serving a rollout to speculation off costs at the load now (RestartAtLoad.cost_s); None where the
    # fit did not price the load now
    off_cost_s: float | None = None
    # a rollout at the load now costs no serving (RestartAtLoad.free): the pods left serving carry every arrival
    # within the TPOT objective, whatever config the rollout installs
    restart_free: bool = False


@dataclass(frozen=True)
class VersusAnchor:
    """A refit against the one its agreement streak began with (plan_threshold's `anchor`): the largest predicted
    difference at any batch size where their K differ, and where; `at_batch` None when their K agree everywhere."""

    anchor: str | int | None  # the anchor's schedule as text, or its V0 threshold
    largest_gain: float
    at_batch: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "largestGain": round(self.largest_gain, 4), "atBatch": self.at_batch}


@dataclass(frozen=True)
class FitSettings:
    """Knobs of the fit that are not in the CR: assumptions, exposed so they can be set and shown."""

    model: StepCostModel = LLAMA8B_H100  # the operator passes costprofile.fit_settings_for(spec)
    restart_cost_s: float = 90.0  # drain + load + graph capture, 8B (70B: ~300 s); assumed
    # restart_cost_s was measured from this deployment's own rollouts (decision.with_measured_restart): each wave's
    # whole span, its drain included, which the rollout's pricing then does not add again (rollqueue.Phases)
    restart_measured: bool = False
    horizon_s: float = 3600.0  # the gain must repay the restart within this time at the observed load
    min_gain: float = 0.03  # below this, model error dominates (SpecDecode-Bench residuals up to 0.08x)
    model_tolerance: float = 2.0
    prefer_within: float = 0.01
    # how a rollout replaces the pods while others serve (rollcost.rollout_shape); None where no wave leaves pods
    # serving beside it: a change then costs restart_cost_s at any load
    rollout: RolloutShape | None = None
    # the CR's TPOT objective (rollcost.tpot_target_ms): a wave is free only while the pods left serving meet it
    tpot_target_ms: float | None = None
    # the CR's TTFT deadline (rollcost.ttft_deadline_s): a wave the pods left cannot carry costs at least the
    # arrivals it makes miss it (RestartAtLoad.late_s)
    ttft_deadline_s: float | None = None
    # seconds a pod a rollout wave takes out finishes its requests in flight while other pods serve (vLLM's
    # --shutdown-timeout; rollcost.drain_for); 0 where a restart aborts them: one replica without surge, or a version
    # without the flag
    drain_s: float = 0.0
    # why this profile (costprofile.choose_cost_profile); None: the default, chosen by no spec
    model_choice: Mapping[str, Any] | None = None
    # the profile was calibrated on this set-up; False: the nearest one, a prior for the deployment's own fit only
    calibrated: bool = True

    @property
    def headroom_needed(self) -> float | None:
        """The capacity over load the pods left serving need while a rollout wave is out (RolloutShape.needed)."""
        return None if self.rollout is None else self.rollout.needed

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "modelChoice": dict(self.model_choice)
            if self.model_choice is not None
            else {"profile": self.model.name, "match": "default", "note": "no spec chose a profile"},
            "restartCostSeconds": self.restart_cost_s,
            "restartMeasured": self.restart_measured,
            "headroomNeeded": None if self.headroom_needed is None else round(self.headroom_needed, 3),
            "rollout": None if self.rollout is None else self.rollout.to_dict(),
            "tpotTargetMs": self.tpot_target_ms,
            "ttftDeadlineSeconds": self.ttft_deadline_s,
            "drainSeconds": self.drain_s,
            "horizonSeconds": self.horizon_s,
            "minGain": self.min_gain,
            "modelTolerance": self.model_tolerance,
            "calibrated": self.calibrated,
        }


def plan_threshold(
    *,
    version: VllmVersion,
    support: ThresholdSupport,
    current: SpeculationIntent,
    method: str,
    max_num_seqs: int,
    bounds: tuple[int, int],
    profile: AcceptanceProfile,
    load: Mapping[int, float],
    batch_now: float,
    tpot_on_ms: float | None,
    tpot_off_ms: float | None,
    settings: FitSettings,
    drafter_memory: DrafterMemory | None = None,
    forecast: Forecast | None = None,
    anchor: SpeculationIntent | None = None,
    objective: AutotuneObjective = AutotuneObjective.THROUGHPUT,
    declared_k: int | None = None,
    inflight_s: float = 0.0,
    tpot_spread_ms: tuple[float, float] | None = None,
    peak_ratio: float = 1.0,
) -> ThresholdPlan:
    """Fit the batch-size schedule (>= 0.24), V0 threshold (<= 0.9.2) or, where the engine has neither, one K, and
    judge whether installing it pays.

    `support` comes from the renderer (fit_support): a fit the engine would ignore is never proposed.
    `drafter_memory` (k0tax.DrafterMemory): the KV the drafter holds, priced in the K = 0 comparison when KV-bound.
    A refit is worth a restart when its gain over the load record repays the restart within the horizon.
    `forecast`: a sustained rise of the request rate (forecast.py): the refit is also worth it when, over the load
    the running config would see while the rise goes on, it repays the restart within that projection, the restart
    priced at the serving now (gain_ahead_in_serving_now).
    `anchor`: the refit an agreement streak began with (agreement.agree_by_effect); the proposal is priced against it
    at every batch size where their K differ (`vsAnchor`), so the streak can tell a boundary that moved where two K
    tie from a decision that changed.
    `objective`: spec.autotune.objective, which of the Ks that tie at goodput the schedule fit takes.
    `declared_k`: the CR's K. Where the engine has no batch-size schedule (`support` NONE) the fit proposes one K
    for every batch size instead (fit_static_k), up to the larger of the running and the declared K, positions
    past the measured ones extrapolated (AcceptanceProfile.extended).
    `inflight_s`: how long the longest request in flight still runs (the measured P99 end-to-end latency), which
    keeps a pod a rollout takes out draining before it restarts (rollqueue). `tpot_spread_ms`: the median and P99
    of the requests' TPOT, for the share that meets the TPOT objective (LoadNow.meeting). `peak_ratio`: the
    highest request rate over the last rollout's length relative to the rate now (LoadNow.peak_ratio).
    """
    max_k = current.num_speculative_tokens or profile.max_k
    evidence = _fit_evidence(support, profile, load, batch_now, settings, objective)
    batch = max(1, round(batch_now))
    usable = _usable_model(
        support, version, current, max_k, method, profile, bool(load), batch, (tpot_on_ms, tpot_off_ms), settings,
        evidence,
    )  # fmt: skip
    if isinstance(usable, str):
        return _no_change(support, settings, usable, evidence)
    model, tpot_on_ms = usable
    rate = schedule_tokens_per_ms if support is ThresholdSupport.SCHEDULE else tokens_per_ms
    at_load = None
    if objective is AutotuneObjective.THROUGHPUT:
        k_running = functools.partial(k_for_batch, current, max_k=max_k)
        now_load = LoadNow(batch, tpot_on_ms, inflight_s, tpot_spread_ms, peak_ratio)
        at_load = restart_at_load(settings, profile, model, now_load, max_num_seqs, k_running, rate)
    batches = _load_batches(load)  # the load record as representative batch sizes
    refit, shown = _propose(
        support, version, current, profile, model, batches, max_k, max_num_seqs, bounds, settings, objective,
        declared_k, rate, evidence,
    )  # fmt: skip
    off_cost_s = None
    free = at_load is not None and at_load.free
    if at_load is not None:
        at_load, off_cost_s = _priced_at_load(at_load, settings, refit, max_num_seqs)
        evidence["restartAtLoad"] = at_load.to_dict(settings.restart_cost_s)
        settings = replace(settings, restart_cost_s=at_load.cost_s(settings.restart_cost_s))
    off = None
    # a schedule's K = 0 ranges pay the drafter tax; one K for every batch size has none, and the comparison prices
    # it against off alone, which an acceptance-only disable must not contradict (proposals._fit_beats_off)
    if support is not ThresholdSupport.THRESHOLD:
        restart_s = settings.restart_cost_s if off_cost_s is None else off_cost_s
        off = _versus_off(refit, batches, restart_s, settings.horizon_s, drafter_memory, evidence)
        if off.off_wins:
            return ThresholdPlan(
                support, None, 0.0, math.inf, False, off.reason, evidence, disable=True, off=off,
                off_cost_s=off_cost_s, restart_free=free,
            )  # fmt: skip
    if refit.proposed == current:
        return replace(
            _no_change(support, settings, f"{shown} already installed", evidence, off),
            off_cost_s=off_cost_s, restart_free=free,
        )  # fmt: skip
    judged = _judge(refit, batches, batch, max_num_seqs, settings, at_load, forecast, anchor, evidence)
    return ThresholdPlan(
        support, refit.proposed if judged.worth else None, judged.gain, judged.payback_s, judged.worth,
        f"{shown} {judged.reason}", evidence, off=off, gain_now=judged.gain_now, gain_at_load=judged.gain_at_load,
        vs_anchor=judged.versus, off_cost_s=off_cost_s, restart_free=free,
    )  # fmt: skip


def _versus_off(
    refit: _Refit,
    batches: Mapping[int, float],
    restart_cost_s: float,
    horizon_s: float,
    drafter_memory: DrafterMemory | None,
    evidence: dict[str, Any],
) -> OffComparison:
    """The proposal against speculation off over the load record, its K = 0 ranges priced at the drafter's tax;
    recorded in `evidence` as k0Tax."""
    off = compare_with_off(
        refit.profile, refit.model, refit.proposed, max_k=refit.max_k, load=batches, restart_cost_s=restart_cost_s,
        horizon_s=horizon_s, drafter_memory=drafter_memory,
    )  # fmt: skip
    evidence["k0Tax"] = {"reason": off.reason, **off.evidence}
    return off


def _usable_model(
    support: ThresholdSupport,
    version: VllmVersion,
    current: SpeculationIntent,
    max_k: int,
    method: str,
    profile: AcceptanceProfile,
    has_load: bool,
    batch: int,
    tpot_ms: tuple[float | None, float | None],
    settings: FitSettings,
    evidence: dict[str, Any],
) -> tuple[StepCostModel, float] | str:
    """The step cost model calibrated to this deployment's measured TPOT (with speculation on, and off where
    measured) and the TPOT with it on, or why no refit can be priced: nothing to fit on this engine, no load record,
    no TPOT to check the model against, or a model that misses it beyond `model_tolerance`."""
    tpot_on_ms, tpot_off_ms = tpot_ms
    if support is ThresholdSupport.NONE and not current.enabled:
        return f"vLLM {version} has no batch-size schedule here and speculation is off: only on/off applies"
    if max_k <= 0 or not has_load:
        return "no batch-size evidence yet"
    k_current = k_for_batch(current, batch, max_k)
    model = _calibrated_model(
        model_for_method(settings.model, method), profile, k_current, batch, tpot_on_ms, tpot_off_ms, evidence
    )
    if tpot_on_ms is None:
        return "no per-token latency measured: cannot check the cost model against this deployment"
    ok, consistency = model_consistency(
        model, profile, batch=batch, k=max(k_current, 0), tpot_ms=tpot_on_ms,
        tolerance=settings.model_tolerance,
    )  # fmt: skip
    evidence["consistency"] = consistency
    return (model, tpot_on_ms) if ok else consistency


def _priced_at_load(
    at_load: RestartAtLoad, settings: FitSettings, refit: _Refit, max_num_seqs: int
) -> tuple[RestartAtLoad, float]:
    """The wave priced for a rollout to the refit, and what a rollout to speculation off costs (RestartAtLoad.cost_s):
    each drains the queue a wave builds at what it serves above the load. The capacities are searched only where the
    wave is priced so (RestartAtLoad.prices_late)."""
    if not at_load.prices_late(settings):
        return at_load, at_load.cost_s(settings.restart_cost_s)

    def most(k_at: Callable[[int], int]) -> float:
        return capacity(refit.profile, refit.model, max_num_seqs, k_at, refit.rate)

    to_off = at_load.priced_for(settings, most(lambda _batch: 0)).cost_s(settings.restart_cost_s)
    return at_load.priced_for(settings, most(refit.k_new)), to_off


def _fit_evidence(
    support: ThresholdSupport,
    profile: AcceptanceProfile,
    load: Mapping[int, float],
    batch_now: float,
    settings: FitSettings,
    objective: AutotuneObjective,
) -> dict[str, Any]:
    """What every plan shows people: the support, the acceptance, the load, the settings and the objective."""
    return {
        "support": support.value,
        "acceptance": {
            "survival": [round(r, 4) for r in profile.survival],
            "source": profile.source,
            "meanOutputTokens": None if profile.mean_output_tokens is None else round(profile.mean_output_tokens, 1),
            "tokensPerStep": [round(profile.expected_tokens(k), 3) for k in range(1, profile.max_k + 1)],
        },
        "load": {str(b): round(w, 1) for b, w in sorted(load.items())},
        "batchNow": round(batch_now, 2),
        "settings": settings.to_dict(),
        "objective": objective.value,
    }


def _no_change(
    support: ThresholdSupport,
    settings: FitSettings,
    reason: str,
    evidence: dict[str, Any],
    off: OffComparison | None = None,
) -> ThresholdPlan:
    """No refit proposed, and why."""
    payback = payback_seconds(0.0, settings.restart_cost_s)
    return ThresholdPlan(support, None, 0.0, payback, False, reason, evidence, off=off)


def _calibrated_model(
    model: StepCostModel,
    profile: AcceptanceProfile,
    k_current: int,
    batch: int,
    tpot_on_ms: float | None,
    tpot_off_ms: float | None,
    evidence: dict[str, Any],
) -> StepCostModel:
    """The step model with the profile's emission, its drafter cost rescaled to the measured TPOTs where both are at
    hand (calibrate_drafter)."""
    model = with_emission(model, profile)
    if tpot_on_ms is not None and tpot_off_ms is not None and k_current > 0:
        calibration = calibrate_drafter(
            model, profile, batch=batch, k=k_current, tpot_on_ms=tpot_on_ms, tpot_off_ms=tpot_off_ms
        )
        model = calibration.model
        evidence["calibration"] = calibration.note
    else:
        evidence["calibration"] = "drafter cost assumed from the profile (no non-speculative TPOT at this load yet)"
    evidence["model"] = model.to_dict()
    return model


@dataclass(frozen=True)
class _Refit:
    """The running config and the fit's proposal, priced on one model and profile."""

    profile: AcceptanceProfile
    model: StepCostModel
    current: SpeculationIntent
    proposed: SpeculationIntent
    max_k: int
    rate: Rate

    def k_now(self, batch: int) -> int:
        return k_for_batch(self.current, batch, self.max_k)

    def k_new(self, batch: int) -> int:
        return k_for_batch(self.proposed, batch, self.max_k)

    def rate_at(self, batch: int, k: int) -> float:
        return self.rate(self.profile, self.model, batch, k)

    def gain_over(self, batches: Mapping[int, float]) -> float:
        return predicted_gain(self.profile, self.model, batches, self.k_now, self.k_new, self.rate)


def _propose(
    support: ThresholdSupport,
    version: VllmVersion,
    current: SpeculationIntent,
    profile: AcceptanceProfile,
    model: StepCostModel,
    batches: Mapping[int, float],
    max_k: int,
    max_num_seqs: int,
    bounds: tuple[int, int],
    settings: FitSettings,
    objective: AutotuneObjective,
    declared_k: int | None,
    rate: Rate,
    evidence: dict[str, Any],
) -> tuple[_Refit, str]:
    """The fit the engine honours: a per-batch-size schedule, one K for every batch size, or a V0 threshold; and
    how it reads."""
    if support is ThresholdSupport.SCHEDULE:
        fit = fit_schedule(
            profile, model, max_k=max_k, max_num_seqs=max_num_seqs, bounds=bounds,
            prefer_within=settings.prefer_within, objective=objective,
        )  # fmt: skip
        proposed = replace(current, batch_schedule=fit.schedule, disable_above_batch_size=fit.threshold)
        shown = f"schedule {schedule_text(fit.schedule)}"
    elif support is ThresholdSupport.NONE:
        max_k = max(max_k, declared_k or 0)
        profile = profile.extended(max_k)
        evidence["acceptance"]["source"] = profile.source
        k = fit_static_k(profile, model, batches, max_k, settings.prefer_within, objective)
        proposed = replace(current, num_speculative_tokens=k, batch_schedule=None, disable_above_batch_size=None)
        shown = f"K = {k} at every batch size"
        evidence["note"] = f"vLLM {version} has no batch-size schedule here: one K for every batch, over the load"
    else:
        threshold = fit_threshold(profile, model, k=max_k, max_num_seqs=max_num_seqs, bounds=bounds)
        proposed = replace(current, batch_schedule=None, disable_above_batch_size=threshold)
        shown = f"disable_by_batch_size {threshold if threshold is not None else 'none'}"
        evidence["note"] = "disable_by_batch_size is honoured only when the engine runs V0"
    evidence["kByBatch"] = _k_table(profile, model, proposed, max_k, max_num_seqs)
    evidence["proposed"] = shown
    return _Refit(profile, model, current, proposed, max_k, rate), shown


@dataclass(frozen=True)
class _Judged:
    """Whether a refit is worth its restart, and the figures and words that say why."""

    worth: bool
    gain: float
    payback_s: float
    gain_now: float
    gain_at_load: float
    versus: VersusAnchor | None
    reason: str


def _judge(
    refit: _Refit,
    load: Mapping[int, float],
    batch: int,
    max_num_seqs: int,
    settings: FitSettings,
    at_load: RestartAtLoad | None,
    forecast: Forecast | None,
    anchor: SpeculationIntent | None,
    evidence: dict[str, Any],
) -> _Judged:
    """Is the refit worth a restart: by the load record, by a forecast rise, or, while the restart is free, by the
    load it may reach (largest_gain_ahead)."""
    gain = refit.gain_over(load)
    payback = payback_seconds(gain, settings.restart_cost_s)
    # the gain at the batch running now: what each minute of waiting forgoes in throughput (the backlog gate), while
    # `gain` over the observed load says whether the change is worth a restart at all
    gain_now = refit.gain_over({batch: 1.0})
    # and in per-request speed at the load served now, the batch shrinking with the faster step (gain_at_same_load):
    # what the stabilization of a shed prices its wait by (agreement.stabilization_for)
    gain_at_load, batch_at_load = gain_at_same_load(
        refit.profile, refit.model, min(batch, max_num_seqs), max_num_seqs, refit.k_now, refit.k_new, refit.rate
    )
    evidence.update(
        {
            "predictedGain": round(gain, 4),
            "predictedGainNow": round(gain_now, 4),
            "predictedGainAtLoad": round(gain_at_load, 4),
            "batchAtLoad": batch_at_load,
            "paybackSeconds": finite(payback),
        }
    )
    by_record = gain >= settings.min_gain and payback <= settings.horizon_s
    by_forecast, ahead = False, ""
    if forecast is not None and not by_record:
        by_forecast, ahead = _judge_ahead(refit, gain, batch, max_num_seqs, settings, forecast, evidence)
    versus = None
    if anchor is not None and anchor != refit.proposed:
        versus = _versus_anchor(anchor, max_num_seqs, refit.max_k, refit.k_new, refit.rate_at)
        evidence["vsAnchor"] = versus.to_dict()
    option = None
    free = at_load is not None and at_load.free
    if free and not (by_record or by_forecast) and loses_only_ties(gain, settings):
        option = largest_gain_ahead(range(batch, max_num_seqs + 1), refit.gain_over)
        evidence["gainAhead"] = round(option, 4)
    by_option = option is not None and option >= settings.min_gain
    reason = _install_reason(gain, payback, settings, at_load)
    if by_option:
        reason += (
            f"; it loses nothing at the load now and is {option:+.1%} at a larger batch this config may reach: "
            "installing while the restart is free"
        )
    worth = by_record or by_forecast or by_option
    return _Judged(worth, gain, payback, gain_now, gain_at_load, versus, reason + ahead)


def _peak_text(at_load: RestartAtLoad) -> str:
    if at_load.peak_ratio <= 1.0:
        return ""
    return f" at the recent peak, {at_load.peak_ratio:.2f}x the load now"


def _install_reason(gain: float, payback: float, settings: FitSettings, at_load: RestartAtLoad | None) -> str:
    repaid = "never" if math.isinf(payback) else f"{payback / 60:.0f}m"
    if at_load is not None and at_load.free:
        restart = (
            f"the restart costs no serving at this load (the pods left serving carry "
            f"{at_load.capacity_over_load:.2f}x it, a wave needs {at_load.needed:.2f}x{_peak_text(at_load)})"
        )
    elif at_load is not None and at_load.late_s is not None and at_load.late_s >= settings.restart_cost_s:
        late = "every arrival until the load falls" if math.isinf(at_load.late_s) else f"{at_load.late_s:.0f}s"
        restart = (
            f"a wave leaves pods serving {at_load.capacity_over_load / at_load.needed:.2f}x the load: the queue it "
            f"builds makes {late} of arrivals miss the TTFT deadline, repaid in {repaid}"
        )
    else:
        restart = f"restart {settings.restart_cost_s:.0f}s repaid in {repaid}"
    return (
        f"predicts {gain:+.1%} tokens/s over the observed load vs the running config "
        f"({restart}; install needs >= {settings.min_gain:.0%} and payback <= {settings.horizon_s / 60:.0f}m)"
    )


def _judge_ahead(
    refit: _Refit,
    gain: float,
    batch: int,
    max_num_seqs: int,
    settings: FitSettings,
    forecast: Forecast,
    evidence: dict[str, Any],
) -> tuple[bool, str]:
    """Does the refit repay its restart over the load a forecast rise leads to, the restart priced at the serving
    now (gain_ahead_in_serving_now)? And the words for the reason."""
    projection = project_load(
        refit.profile, refit.model, min(batch, max_num_seqs), max_num_seqs, forecast.ratios, refit.k_now, refit.rate
    )
    projected = projection.load()
    gain_ahead = refit.gain_over(projected)
    # the restart drops the serving now; the gain comes at the load ahead (gain_ahead_in_serving_now)
    serving_gain = gain_ahead_in_serving_now(
        refit.profile, refit.model, projection, refit.k_now, refit.k_new, refit.rate
    )
    payback_ahead = payback_seconds(serving_gain, settings.restart_cost_s)
    # the refit must not lose over the record either: a wrong forecast then costs one restart and nothing after
    installs = loses_only_ties(gain, settings) and gain_ahead >= settings.min_gain and payback_ahead <= forecast.ahead_s
    within_capacity = forecast.past_capacity_only and max(projected) < max_num_seqs
    evidence["forecast"] = {
        **forecast.evidence,
        "aheadSeconds": round(forecast.ahead_s),
        "batches": {str(b): w for b, w in sorted(projected.items())},
        "predictedGain": round(gain_ahead, 4),
        "gainInServingNow": round(serving_gain, 4),
        "paybackSeconds": finite(payback_ahead),
        "installs": installs and not within_capacity,
    }
    ahead = (
        f"; {forecast.why}: over the next {forecast.ahead_s / 60:.0f}m, at the batches it leads to "
        f"({min(projected)}-{max(projected)}), it is {gain_ahead:+.1%}"
    )
    if within_capacity:
        return False, ahead + " (within the running config's capacity: the load record will show it)"
    if installs:
        ahead += (
            f" ({serving_gain:+.1%} of the serving now, which the restart drops) and repays the restart in "
            f"{payback_ahead / 60:.0f}m: installing ahead of the load"
        )
    return installs, ahead


def _versus_anchor(
    anchor: SpeculationIntent,
    max_num_seqs: int,
    max_k: int,
    k_new: Callable[[int], int],
    rate_at: Callable[[int, int], float],
) -> VersusAnchor:
    """The proposal against the refit its agreement streak began with, at every batch size where their K differ:
    the largest predicted difference either way and where (agreement.agree_by_effect). Every batch size, not the
    load record: a schedule outlives the load it was fitted at, so two fits are the same decision only if the model
    cannot tell them apart at any batch the engine may run."""
    worst, at_batch = 0.0, None
    for b in range(1, max_num_seqs + 1):
        k_anchor = k_for_batch(anchor, b, max_k)
        if k_anchor == k_new(b):
            continue
        gain = rate_at(b, k_new(b)) / rate_at(b, k_anchor) - 1
        if at_batch is None or abs(gain) > abs(worst):
            worst, at_batch = gain, b
    shown = schedule_text(anchor.batch_schedule) if anchor.batch_schedule else anchor.disable_above_batch_size
    return VersusAnchor(shown, worst, at_batch)


@dataclass(frozen=True)
class Forecast:
    """A projected rise of the offered load (forecast.py): the request rate over the rate now, at equal slices of
    the next `ahead_s` seconds. `past_capacity_only`: it counts only where it takes the running config to
    max_num_seqs (arrivals outpacing completions: within capacity the batch settles where the record will show)."""

    ratios: tuple[float, ...]
    ahead_s: float
    why: str
    evidence: Mapping[str, Any]
    past_capacity_only: bool = False


def largest_gain_ahead(batches: Iterable[int], gain_at: Callable[[Mapping[int, float]], float]) -> float:
    """A refit's largest predicted gain at any one of `batches` (the batch now up to max_num_seqs).

    While a restart is free (`restart_at_load`), a refit that loses nothing over the load record is worth installing
    for the load it has not met yet: waiting for that load to arrive means paying for the restart then, at a load
    where the pods left serving can no longer carry it (docs/design/decisions.md). The one-pod trial still guards it:
    it is promoted only if not slower at the load now."""
    return max((gain_at({b: 1.0}) for b in batches), default=0.0)


def loses_only_ties(gain: float, settings: FitSettings) -> bool:
    """Does a refit lose nothing over the load record beyond the fit's own tie preference?

    The fit takes the smallest K within `prefer_within` of the best at each batch size (a larger K widens P99), so a
    refit can trail the running config by up to that share at a batch where the two K tie, and over a record that
    sits at such batches its gain reads a hair below 0. That is the fit's choice, not a loss; reading it as one made
    the forecast's refit flip to another proposal and back, and each flip restarted its agreement."""
    return gain >= -settings.prefer_within


def _load_batches(load: Mapping[int, float]) -> dict[int, float]:
    batches: dict[int, float] = {}
    for bucket, weight in load.items():
        b = representative_batch(bucket)
        batches[b] = batches.get(b, 0.0) + weight
    return batches


def _k_table(
    profile: AcceptanceProfile, model: StepCostModel, intent: SpeculationIntent, max_k: int, max_num_seqs: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    batch = 1
    while batch <= max_num_seqs:
        k = k_for_batch(intent, batch, max_k)
        rows.append({"batch": batch, "k": k, "speedup": round(speedup(profile, model, batch, k), 3)})
        batch *= 2
    return rows
