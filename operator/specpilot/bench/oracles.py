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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

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

    def dwell_s(self, trailing_reversals: NDArray[np.int64]) -> NDArray[np.float64]:
        """The dwell after each of `trailing_reversals` (it stops growing at the last of dwells_s)."""
        return np.asarray(self.dwells_s)[np.minimum(trailing_reversals, len(self.dwells_s) - 1)]


ROUGH_BEAM = 1000  # states kept per window by the beam-limited DP whose plan sets the exact DP's floor
HOUR_S = 3600.0  # the rolling hour of maxPerHour

# Columns of a plan's budget memory, one row per DP state (the configuration running now, then what the budget needs).
_CONFIG, _COUNT, _LAST, _FROM, _REVERSALS, _HOUR = range(6)


def _memory_width(budget: WindowBudget | None) -> int:
    return _HOUR + (max(1, budget.max_per_hour) if budget is not None else 1)


def _forget(rows: NDArray[np.int64], w: int, window_s: float, budget: WindowBudget | None) -> NDArray[np.int64]:
    """`rows` at window w with what no later switch depends on set to -1 (0 for the reversals), so that plans whose
    pasts the budget can no longer tell apart are one DP state: a switch that left the rolling hour; the configuration
    the latest switch left, once undoing it is no longer a quick reversal; the latest switch and its reversal chain,
    once no later switch can be a reversal and the dwell after it has passed; everything, once the day's switches
    are spent."""
    if budget is None:
        return rows
    rows = rows.copy()
    now = w * window_s
    hour = rows[:, _HOUR:]
    hour[(hour >= 0) & ~(now - hour * window_s < HOUR_S)] = -1
    has_last = rows[:, _LAST] >= 0
    last_at = rows[:, _LAST] * window_s
    past_reversal = has_last & ~(now - last_at <= budget.quick_reversal_s)
    rows[past_reversal, _FROM] = -1
    settled = past_reversal & ~(now < last_at + budget.dwell_s(rows[:, _REVERSALS]))
    spent = rows[:, _COUNT] >= budget.max_per_day
    rows[settled | spent, _LAST] = -1
    rows[settled | spent, _REVERSALS] = 0
    rows[spent, _FROM] = -1
    hour[spent] = -1
    return rows


def _switches(
    rows: NDArray[np.int64], configs: int, w: int, window_s: float, budget: WindowBudget | None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every switch the budget allows at window w from `rows` (as `_forget` leaves them) to another configuration:
    the row each one leaves and the memory after it, ordered by that row, then by target."""
    source = np.repeat(np.arange(len(rows)), configs)
    target = np.tile(np.arange(configs), len(rows))
    past = rows[source]
    allowed = target != past[:, _CONFIG]
    after = past.copy()
    after[:, _CONFIG] = target
    if budget is not None:
        now = w * window_s
        has_last = past[:, _LAST] >= 0
        last_at = past[:, _LAST] * window_s
        reversing = has_last & (past[:, _FROM] == target) & (now - last_at <= budget.quick_reversal_s)
        chain = past[:, _REVERSALS] + reversing
        allowed &= ~(has_last & (now < last_at + budget.dwell_s(chain)))
        allowed &= (past[:, _HOUR:] >= 0).sum(axis=1) < budget.max_per_hour
        allowed &= past[:, _COUNT] < budget.max_per_day
        after[:, _COUNT] += 1
        after[:, _LAST] = w
        after[:, _FROM] = past[:, _CONFIG]
        after[:, _REVERSALS] = np.where(reversing, chain, 0)
        after[:, _HOUR] = w
        after[:, _HOUR + 1 :] = past[:, _HOUR:-1]
    return source[allowed], after[allowed]


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
    configuration is free, as without a budget. It stays tractable over a day of short windows because memories no
    later switch can tell apart are one state (`_forget`) and a state that cannot reach the value of a plan known to
    keep the budget is dropped (`_best_plan`); neither changes the best plan's value.

    Of plans worth the same, the one with fewer switches wins (each is a rollout the estimate does not price beyond
    its downtime); beyond that, staying is offered before switching at every window.

    With `start` (a label of `scores`), the first window runs that configuration, as a deployment starts in the one it
    declares: the plan is the best one from there, each later switch paying its cost (and passing the budget) as any.
    """
    names = list(scores)
    count = len(next(iter(scores.values())))
    if budget is not None and count * window_s > 86400:
        raise ValueError("a budgeted switching plan counts every switch in the rolling day: traces up to one day")
    if start is not None and start not in scores:
        raise ValueError(f"the starting configuration {start!r} has no scores")
    table = np.asarray([scores[n] for n in names], dtype=np.float64)
    first = range(len(names)) if start is None else [names.index(start)]
    restart_share = min(1.0, restart_s / window_s)
    floor = -math.inf
    if budget is not None:  # two plans that keep the budget set the floor the exact DP prunes below
        held = held_to_budget(switching_plan(scores, restart_s, window_s, start=start), window_s, budget)
        rough = _best_plan(table, first, restart_share, window_s, budget, -math.inf, beam=ROUGH_BEAM)
        floor = max(_plan_value(table, plan, restart_share) for plan in ([names.index(n) for n in held], rough))
    return [names[c] for c in _best_plan(table, first, restart_share, window_s, budget, floor)]


def _best_plan(
    table: NDArray[np.float64],
    first: Iterable[int],
    restart_share: float,
    window_s: float,
    budget: WindowBudget | None,
    floor: float,
    beam: int | None = None,
) -> list[int]:
    """The DP of switching_plan over the configurations' rows of `table`, a state being the configuration and the
    budget's memory (`_forget`). A state that cannot reach `floor` (the value of a plan known to keep the budget) even
    switching freely from there on (`_best_futures`) is dropped: it cannot lead to the best plan.

    With `beam`, only that many states survive each window, the most promising first: a plan that keeps the budget,
    quickly, but not always the best one. Give it no floor: the states a beam keeps may all fall short of one later."""
    rows = _first_rows(first, budget)
    value = table[rows[:, _CONFIG], 0]
    moves = np.zeros(len(rows), dtype=np.int64)  # switches so far: of two plans worth the same, the fewer wins
    futures = _best_futures(table, restart_share)
    slack = 1e-9 * (1.0 + float(np.abs(table).sum()))  # rounding of the sums, never a real difference
    configs, back = [rows[:, _CONFIG]], []
    for w in range(1, table.shape[1]):
        rows = _forget(rows, w, window_s, budget)
        source, switched = _switches(rows, table.shape[0], w, window_s, budget)
        gain = table[:, w]
        cost = np.maximum(0.0, gain) * restart_share
        offers = np.concatenate([rows, switched])  # staying first: a full tie keeps the running configuration
        values = np.concatenate(
            [value + gain[rows[:, _CONFIG]], value[source] - cost[switched[:, _CONFIG]] + gain[switched[:, _CONFIG]]]
        )
        made = np.concatenate([moves, moves[source] + 1])
        sources = np.concatenate([np.arange(len(rows)), source])
        hopeful = values + futures[offers[:, _CONFIG], w] >= floor - slack
        rows, value, moves, previous = _best_per_state(
            offers[hopeful], values[hopeful], made[hopeful], sources[hopeful]
        )
        if beam is not None and len(rows) > beam:
            kept = np.sort(np.argsort(-(value + futures[rows[:, _CONFIG], w]), kind="stable")[:beam])
            rows, value, moves, previous = rows[kept], value[kept], moves[kept], previous[kept]
        configs.append(rows[:, _CONFIG])
        back.append(previous)
    state = int(np.lexsort((moves, -value))[0])
    plan = [int(configs[-1][state])]
    for step in range(len(back) - 1, -1, -1):
        state = int(back[step][state])
        plan.append(int(configs[step][state]))
    return list(reversed(plan))


def _best_futures(table: NDArray[np.float64], restart_share: float) -> NDArray[np.float64]:
    """[c, w]: the most the windows after w add to a plan that runs c in window w, switching without a budget."""
    futures = np.zeros_like(table)
    for w in range(table.shape[1] - 2, -1, -1):
        staying = table[:, w + 1] + futures[:, w + 1]
        arriving = staying - np.maximum(0.0, table[:, w + 1]) * restart_share
        futures[:, w] = np.maximum(staying, arriving.max())
    return futures


def _plan_value(table: NDArray[np.float64], plan: Sequence[int], restart_share: float) -> float:
    """The DP's objective for a whole plan: each window's score, less the restart share of each switch's window."""
    total = sum(float(table[c, w]) for w, c in enumerate(plan))
    switches = [w for w in range(1, len(plan)) if plan[w] != plan[w - 1]]
    return total - sum(max(0.0, float(table[plan[w], w])) * restart_share for w in switches)


def _first_rows(configs: Iterable[int], budget: WindowBudget | None) -> NDArray[np.int64]:
    first = list(configs)
    rows = np.full((len(first), _memory_width(budget)), -1, dtype=np.int64)
    rows[:, _CONFIG] = first
    rows[:, _COUNT] = 0
    rows[:, _REVERSALS] = 0
    return rows


def _best_per_state(
    offers: NDArray[np.int64], values: NDArray[np.float64], moves: NDArray[np.int64], sources: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """One row per distinct state among `offers`: its offer of the highest value, of the fewest switches among those,
    of the first among those; the states in the order of their first offer."""
    _, first, group = np.unique(offers, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    order = np.lexsort((np.arange(len(offers)), moves, -values, group))
    starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    best = order[starts]  # per state, in the order np.unique sorts them
    by_first_offer = np.argsort(first, kind="stable")
    chosen = best[by_first_offer]
    return offers[first[by_first_offer]], values[chosen], moves[chosen], sources[chosen]


def held_to_budget(plan: Sequence[str], window_s: float, budget: WindowBudget) -> list[str]:
    """`plan` followed as closely as `budget` allows: at each window boundary, switch to the plan's configuration
    when it differs from the running one and the budget allows the switch; otherwise keep running.

    The DP prices a switch by the per-window scores of each configuration's own run, blind to what a restart does to
    the queue (past capacity it empties one whose requests would miss their deadline anyway, which goodput
    rewards); the replay is not. So the unconstrained plan, held to the budget, is a second budgeted candidate beside
    the budgeted DP's own, and the runner keeps whichever replays better.
    """
    names = list(dict.fromkeys(plan))
    row = _first_rows([names.index(plan[0])], budget)
    out = [plan[0]]
    for w in range(1, len(plan)):
        row = _forget(row, w, window_s, budget)
        wanted = names.index(plan[w])
        if wanted != row[0, _CONFIG]:
            _, after = _switches(row, len(names), w, window_s, budget)
            allowed = after[after[:, _CONFIG] == wanted]
            row = allowed if len(allowed) else row
        out.append(names[row[0, _CONFIG]])
    return out
