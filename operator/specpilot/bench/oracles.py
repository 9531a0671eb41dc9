"""Configurations, goodput and the choice rules of the oracles (reference/performance.md §8; pure).

Theta, the deployable configurations a study compares: speculation off, a static K, and K with a batch-size table that
drops to K = 0 at a threshold T (vLLM >= 0.24 `num_speculative_tokens_per_batch_size`). Goodput is the output tokens
per second of requests that met both SLOs (TTFT and per-token latency); aborted or lost requests count as misses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specpilot.vllm.intent import SpeculationIntent


def off() -> SpeculationIntent:
    return SpeculationIntent(enabled=False, num_speculative_tokens=None)


def static(k: int) -> SpeculationIntent:
    return SpeculationIntent(enabled=True, num_speculative_tokens=k)


def threshold(k: int, t: int, max_num_seqs: int) -> SpeculationIntent:
    """K up to batch T-1, K = 0 from T: what a V0 threshold T means, written as a V1 table."""
    return SpeculationIntent(
        enabled=True,
        num_speculative_tokens=k,
        disable_above_batch_size=t,
        batch_schedule=((1, t - 1, k), (t, max_num_seqs, 0)),
    )


def label(intent: SpeculationIntent) -> str:
    if not intent.enabled:
        return "off"
    k = intent.num_speculative_tokens
    if intent.batch_schedule:
        return "K" + "/".join(f"{kk}@{lo}" for lo, _hi, kk in intent.batch_schedule)
    if intent.disable_above_batch_size is not None:
        return f"K{k} T{intent.disable_above_batch_size}"
    return f"K{k}"


def candidates(k_max: int, max_num_seqs: int) -> tuple[SpeculationIntent, ...]:
    """Theta of one scenario: off, K in {1, 2, k_max}, and k_max with thresholds 32 and 128."""
    ks = sorted({1, 2, k_max})
    out: list[SpeculationIntent] = [off(), *(static(k) for k in ks)]
    for t in (32, 128):
        if t < max_num_seqs:
            out.append(threshold(k_max, t, max_num_seqs))
    return tuple(out)


@dataclass(frozen=True)
class Outcome:
    """What happened to one request."""

    arrival: float
    ttft: float | None
    tpot: float | None
    e2e: float | None
    tokens: int
    failed: bool


def meets_slo(o: Outcome, tpot_slo_s: float, ttft_slo_s: float) -> bool:
    if o.failed or o.ttft is None or o.ttft > ttft_slo_s:
        return False
    return o.tpot is None or o.tpot <= tpot_slo_s


def goodput(outcomes: Sequence[Outcome], seconds: float, tpot_slo_s: float, ttft_slo_s: float) -> float:
    """Output tokens per second of requests that met both SLOs."""
    if seconds <= 0:
        return 0.0
    return sum(o.tokens for o in outcomes if meets_slo(o, tpot_slo_s, ttft_slo_s)) / seconds


def attainment(outcomes: Sequence[Outcome], tpot_slo_s: float, ttft_slo_s: float) -> float:
    if not outcomes:
        return math.nan
    return sum(1 for o in outcomes if meets_slo(o, tpot_slo_s, ttft_slo_s)) / len(outcomes)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


Score = tuple[float, float]


def score(outcomes: Sequence[Outcome], seconds: float, tpot_slo_s: float, ttft_slo_s: float) -> Score:
    """The oracles' objective J: goodput first (to 0.1%), then the lower mean per-token latency.

    Goodput alone cannot rank configurations that all meet the SLO (at low load every one does); the mean TPOT then
    decides, which is what a user feels.
    """
    g = goodput(outcomes, seconds, tpot_slo_s, ttft_slo_s)
    tpots = [o.tpot for o in outcomes if o.tpot is not None and not o.failed]
    mean = sum(tpots) / len(tpots) if tpots else math.inf
    return (float(f"{g:.3g}") if g > 0 else 0.0, -mean)


def best_static(totals: Mapping[str, Score]) -> str:
    """O_static: the configuration with the best score over the whole trace (ties: the first listed)."""
    return max(totals, key=lambda name: totals[name])


def window_scores(
    outcomes: Sequence[Outcome], window_s: float, duration_s: float, tpot_slo_s: float, ttft_slo_s: float
) -> list[float]:
    """J_w of one configuration's run: goodput of the requests arriving in window w, less 0.01 per ms of mean TPOT.

    The small TPOT term only breaks ties between configurations that all meet the SLO (at low load every one does);
    the faster one is what a user feels.
    """
    count = max(1, math.ceil(duration_s / window_s))
    buckets: list[list[Outcome]] = [[] for _ in range(count)]
    for o in outcomes:
        buckets[min(count - 1, int(o.arrival // window_s))].append(o)
    scores: list[float] = []
    for i, items in enumerate(buckets):
        span = min(window_s, duration_s - i * window_s)
        g = goodput(items, span, tpot_slo_s, ttft_slo_s)
        tpots = [o.tpot for o in items if o.tpot is not None and not o.failed]
        scores.append(g - 0.01 * (1000 * sum(tpots) / len(tpots) if tpots else 0.0))
    return scores


def switching_plan(scores: Mapping[str, Sequence[float]], restart_s: float, window_s: float) -> list[str]:
    """O_DP of performance.md §8: the configuration per window maximising the sum of J_w minus switching costs.

    V_w(θ) = J_w(θ) + max(V_{w-1}(θ), max_{θ'≠θ} V_{w-1}(θ') - C_w(θ)), C_w(θ) = J_w(θ)·restart_s/window_s: the
    goodput the restart's downtime removes from the window it happens in. J_w comes from each configuration's own
    run over the whole trace (its own queue state at w, not a common one): an estimate of the switching optimum that
    the runner then replays through the simulator, restarts included.
    """
    names = list(scores)
    count = len(next(iter(scores.values())))
    value = {n: scores[n][0] for n in names}
    back: list[dict[str, str]] = []
    for w in range(1, count):
        new: dict[str, float] = {}
        choice: dict[str, str] = {}
        for n in names:
            cost = max(0.0, scores[n][w]) * min(1.0, restart_s / window_s)
            best_prev, best_val = n, value[n]
            for m in names:
                if m != n and value[m] - cost > best_val:
                    best_prev, best_val = m, value[m] - cost
            new[n] = scores[n][w] + best_val
            choice[n] = best_prev
        back.append(choice)
        value = new
    last = max(names, key=lambda n: value[n])
    plan = [last]
    for choice in reversed(back):
        plan.append(choice[plan[-1]])
    return list(reversed(plan))
