"""Configurations, goodput and the choice rules of the oracles (pure; docs/benchmarks.md).

Theta, the deployable configurations a study compares, is searched independently of specpilot's policy (this module
imports nothing of specpilot.autotune; an import-linter contract holds it to that): speculation off, every static K up
to the scenario's, K with a batch-size table that drops to K = 0 at a threshold T (vLLM >= 0.24
`num_speculative_tokens_per_batch_size`), and per-batch-size schedules, one K per batch-size band (BAND_EDGES), that
the runner's coordinate search tries through the simulator itself (`band_schedule`, `band_moves`). Goodput is the
output tokens per second of requests that met both SLOs (TTFT and per-token latency); aborted or lost requests count
as misses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

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


def candidates(k_max: int, max_num_seqs: int, *, thresholds: bool = True) -> tuple[SpeculationIntent, ...]:
    """The first stage of Theta: off, every static K from 1 to k_max, and k_max with thresholds 32 and 128 where the
    engine can stop speculating at a batch size (`thresholds`)."""
    out: list[SpeculationIntent] = [off(), *(static(k) for k in range(1, k_max + 1))]
    for t in (32, 128):
        if thresholds and t < max_num_seqs:
            out.append(threshold(k_max, t, max_num_seqs))
    return tuple(out)


# The per-batch-size schedules' bands: [1, 15], [16, 31], [32, 63], [64, 127], [128, maxNumSeqs]; one K each.
BAND_EDGES = (1, 16, 32, 64, 128)


def reachable_bands(peak_batch: int, max_num_seqs: int) -> int:
    """How many bands a trace can tell apart: those starting at or below the largest batch it ran (and below
    maxNumSeqs). A band above never sees a step, so its K changes nothing."""
    return max(1, sum(1 for edge in BAND_EDGES if edge <= min(peak_batch, max_num_seqs)))


def band_schedule(ks: Sequence[int], max_num_seqs: int) -> SpeculationIntent:
    """The configuration that runs K = ks[i] in band i; the last band's K holds up to maxNumSeqs.

    One K everywhere is that static configuration (or off), so a search meets each configuration under one label.
    """
    if len(set(ks)) == 1:
        return static(ks[0]) if ks[0] else off()
    rows: list[tuple[int, int, int]] = []
    for i, k in enumerate(ks):
        hi = BAND_EDGES[i + 1] - 1 if i + 1 < len(ks) else max_num_seqs
        if rows and rows[-1][2] == k:
            rows[-1] = (rows[-1][0], hi, k)
        else:
            rows.append((BAND_EDGES[i], hi, k))
    off_from = rows[-1][0] if rows[-1][2] == 0 else None
    return SpeculationIntent(
        enabled=True, num_speculative_tokens=max(ks), disable_above_batch_size=off_from, batch_schedule=tuple(rows)
    )


def band_moves(current: Sequence[int], band: int, k_max: int) -> list[tuple[int, ...]]:
    """The neighbours of `current` the search tries in `band`: every other K there, from 0 (off from this band up)
    to k_max, with the bands below raised to at least it and the bands above lowered to at most it. Schedules stay
    non-increasing in the batch size: speculation's gain shrinks as the batch grows."""
    return [
        (*(max(x, k) for x in current[:band]), k, *(min(x, k) for x in current[band + 1 :]))
        for k in range(k_max + 1)
        if k != current[band]
    ]


@dataclass(frozen=True)
class Outcome:
    """What happened to one request."""

    arrival: float
    ttft: float | None
    tpot: float | None
    e2e: float | None
    tokens: int
    failed: bool
    timed_out: bool = False  # failed because its client hung up before the first token (Scenario.client_timeout_s)


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


@dataclass(frozen=True)
class WindowBudget:
    """A deployment's actuation budget (spec.autotune.budget) in seconds, as budget.budget_check applies it
    (specpilot_policy.window_budget reads it off a spec).

    An actuation at `now` is allowed when `now` is at least the dwell after the previous one (budget.dwell_after of
    the trailing reversals, +1 when this one undoes the previous one within budget.quick_reversal_window), when fewer
    than maxPerHour actuations fall in the hour before `now`, and fewer than maxPerDay in the day before.
    """

    max_per_hour: int
    max_per_day: int
    quick_reversal_s: float
    dwells_s: tuple[float, ...]  # budget.dwell_after for 0, 1, 2... reversals, up to where it stops growing

    def dwell_s(self, trailing_reversals: int) -> float:
        return self.dwells_s[min(trailing_reversals, len(self.dwells_s) - 1)]


@dataclass(frozen=True)
class _Switched:
    """What the budget needs to remember of the plan so far, besides the configuration running now."""

    last_at: float | None = None  # the latest switch
    last_from: str | None = None  # what that switch left
    within_hour: tuple[float, ...] = ()  # switch instants less than an hour before the current window
    trailing_reversals: int = 0
    count: int = 0  # switches so far (the trace is at most a day long: all of them are in the rolling day)


def switching_plan(
    scores: Mapping[str, Sequence[float]],
    restart_s: float,
    window_s: float,
    budget: WindowBudget | None = None,
    start: str | None = None,
) -> list[str]:
    """O_DP: the configuration per window maximising the sum of J_w minus switching costs.

    V_w(θ) = J_w(θ) + max(V_{w-1}(θ), max_{θ'≠θ} V_{w-1}(θ') - C_w(θ)), C_w(θ) = J_w(θ)·restart_s/window_s: the
    goodput the restart's downtime removes from the window it happens in. J_w comes from each configuration's own
    run over the whole trace (its own queue state at w, not a common one): an estimate of the switching optimum that
    the runner then replays through the simulator, restarts included.

    With `budget`, a switch at a window boundary must also pass the deployment's actuation budget (WindowBudget),
    as the closed loop's every actuation must: the DP's state is then the configuration and the switches the budget
    remembers, so the plan is the best one the budget allows, not the unconstrained plan cut short. The first window's
    configuration is free, as without a budget.

    With `start` (a label of `scores`), the first window runs that configuration, as a deployment starts in the one it
    declares: the plan is the best one from there, each later switch paying its cost (and passing the budget) as any.
    """
    names = list(scores)
    count = len(next(iter(scores.values())))
    if budget is not None and count * window_s > 86400:
        raise ValueError("a budgeted switching plan counts every switch in the rolling day: traces up to one day")
    if start is not None and start not in scores:
        raise ValueError(f"the starting configuration {start!r} has no scores")
    State = tuple[str, _Switched]
    value: dict[State, float] = {(n, _Switched()): scores[n][0] for n in (names if start is None else [start])}
    back: list[dict[State, State]] = []
    for w in range(1, count):
        now = w * window_s
        cost = {n: max(0.0, scores[n][w]) * min(1.0, restart_s / window_s) for n in names}
        offers: list[tuple[State, float, State]] = []
        for (n, past), v in value.items():  # staying first: a tie keeps the running configuration
            kept = past if budget is None else replace(past, within_hour=_within_hour(past.within_hour, now))
            offers.append(((n, kept), v + scores[n][w], (n, past)))
        for (m, past), v in value.items():
            for n in names:
                nxt = None if n == m else _switch(past, m, n, now, budget)
                if nxt is not None:
                    offers.append(((n, nxt), v - cost[n] + scores[n][w], (m, past)))
        new: dict[State, float] = {}
        choice: dict[State, State] = {}
        for state, v, previous in offers:
            if state not in new or v > new[state]:
                new[state], choice[state] = v, previous
        back.append(choice)
        value = new
    state = max(value, key=lambda s: value[s])
    plan = [state[0]]
    for choice in reversed(back):
        state = choice[state]
        plan.append(state[0])
    return list(reversed(plan))


def held_to_budget(plan: Sequence[str], window_s: float, budget: WindowBudget) -> list[str]:
    """`plan` followed as closely as `budget` allows: at each window boundary, switch to the plan's configuration
    when it differs from the running one and the budget allows the switch; otherwise keep running.

    The DP prices a switch by the per-window scores of each configuration's own run, blind to what a restart does to
    the queue (past capacity it empties one whose requests would miss their deadline anyway, which goodput
    rewards); the replay is not. So the unconstrained plan, held to the budget, is a second budgeted candidate beside
    the budgeted DP's own, and the runner keeps whichever replays better.
    """
    out = [plan[0]]
    past = _Switched()
    for w in range(1, len(plan)):
        running, wanted = out[-1], plan[w]
        nxt = None if wanted == running else _switch(past, running, wanted, w * window_s, budget)
        if nxt is not None:
            past = nxt
            out.append(wanted)
        else:
            out.append(running)
    return out


def _within_hour(instants: tuple[float, ...], now: float) -> tuple[float, ...]:
    return tuple(t for t in instants if now - t < 3600)


def _switch(past: _Switched, current: str, target: str, now: float, budget: WindowBudget | None) -> _Switched | None:
    """The budget's memory after switching `current` -> `target` at `now`, or None when the budget forbids it."""
    if budget is None:
        return past  # unconstrained: nothing to remember
    reversing = past.last_at is not None and past.last_from == target and now - past.last_at <= budget.quick_reversal_s
    chain = past.trailing_reversals + 1 if reversing else 0
    if past.last_at is not None and now < past.last_at + budget.dwell_s(past.trailing_reversals + reversing):
        return None
    recent = _within_hour(past.within_hour, now)
    if len(recent) >= budget.max_per_hour or past.count >= budget.max_per_day:
        return None
    return _Switched(now, current, (*recent, now), chain, past.count + 1)
