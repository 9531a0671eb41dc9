"""The decision benchmark's pure parts and one tiny closed-loop run (virtual clock, seconds)."""

from __future__ import annotations

import itertools
import math
import random
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import pytest

from specpilot.api.v1alpha1 import BudgetSpec
from specpilot.autotune.evaluate import measure
from specpilot.autotune.policy.budget import budget_check, record_actuation
from specpilot.autotune.policy.state import Action, Decision, PolicyState
from specpilot.autotune.signals.promql import Scope, Signal
from specpilot.bench import oracles
from specpilot.bench.oracles import Outcome
from specpilot.bench.queries import ScrapeHistory, SimQueryClient, histogram_quantile, snapshot
from specpilot.bench.runner import (
    RESTART_CONTROLS,
    PolicyRun,
    Replica,
    _restart_controls,
    _static_job,
    batch_size_support,
    closed_loop_spec,
    earliest_refit_s,
    restart_times,
    run_restarted,
    run_scenario,
    run_specpilot,
    run_static,
    run_switch,
    same_as_static,
    spec_config,
    summarize,
)
from specpilot.bench.scenarios import (
    CLIENT_TIMEOUT_S,
    NO_SD_CAPACITY_QPS,
    ONOFF_ONLY_VERSION,
    SCENARIOS,
    SHAREGPT,
    VLLM_VERSION,
    Scenario,
    arrivals,
    at,
    scenario_named,
)
from specpilot.bench.specpilot_policy import bench_spec, to_datetime, to_seconds, window_budget
from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
from specpilot.sim.presets import LLAMA8B_H100
from specpilot.vllm.dialects import ThresholdSupport
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import DISABLE_BY_BATCH_SIZE_REJECTED, DYNAMIC_SPECULATION, VllmVersion
from tests import policy_fit


@pytest.mark.parametrize(
    ("points", "t", "value"),
    [(((0.0, 1.0),), 5.0, 1.0), (((0.0, 0.0), (10.0, 10.0)), 2.5, 2.5), (((0.0, 0.0), (10.0, 10.0)), 20.0, 10.0)],
)
def test_piecewise_linear(points: tuple[tuple[float, float], ...], t: float, value: float) -> None:
    assert at(points, t) == value


def test_every_scenario_has_clients_that_hang_up() -> None:
    """The headline runs count a request whose client gave up as failed: every scenario has the gateway timeout."""
    assert CLIENT_TIMEOUT_S == 60.0
    assert all(s.client_timeout_s == CLIENT_TIMEOUT_S for s in SCENARIOS)


def test_the_24_hour_day_has_a_thin_night_and_a_peak_past_capacity() -> None:
    """diurnal-24h: a night where a 5-minute window holds fewer than 50 requests, a peak above the capacity without
    speculation, a whole day long; the quick version keeps the shape at a tenth of the time."""
    day = scenario_named("diurnal-24h")
    capacity = NO_SD_CAPACITY_QPS[("llama8b-h100", SHAREGPT, 256, 8192)]
    assert day.duration_s == 24 * 3600
    assert at(day.qps, 3 * 3600) * 300 < 50
    assert at(day.qps, 13 * 3600) > capacity
    assert at(day.qps, 23.9 * 3600) * 300 < 50
    quick = day.scaled(0.1)
    assert [at(quick.qps, t * 0.1) for t in (3 * 3600, 13 * 3600)] == [at(day.qps, t) for t in (3 * 3600, 13 * 3600)]


def test_arrivals_are_poisson_at_the_scenario_rate_and_repeatable() -> None:
    s = scenario_named("steady-low")
    a, b = arrivals(s, 1), arrivals(s, 1)
    assert a == b
    assert len(a) / s.duration_s == pytest.approx(s.qps[0][1], rel=0.05)
    assert arrivals(s, 2) != a


@pytest.mark.parametrize(
    ("bounds", "cumulative", "q", "expected"),
    [
        ((0.01, 0.025, 0.05), [0.0, 10.0, 10.0, 10.0], 0.5, 0.0175),
        ((0.01, 0.025, 0.05), [10.0, 10.0, 10.0, 10.0], 0.99, 0.0099),
        ((0.01, 0.025, 0.05), [0.0, 0.0, 0.0, 5.0], 0.5, 0.05),  # +Inf bucket: highest finite bound
        ((0.01,), [0.0, 0.0], 0.5, math.nan),
    ],
)
def test_histogram_quantile_like_prometheus(
    bounds: tuple[float, ...], cumulative: list[float], q: float, expected: float
) -> None:
    got = histogram_quantile(q, bounds, cumulative)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_threshold_renders_as_a_v1_table_on_032() -> None:
    intent = SpeculationIntent(enabled=True, num_speculative_tokens=3, disable_above_batch_size=32)
    assert spec_config(intent, "eagle3", VllmVersion.parse("0.32.0"), 256) == SpecConfig(
        "eagle3", 3, schedule=((1, 31, 3), (32, 256, 0)), disable_by_batch_size=32
    )
    assert spec_config(oracles.off(), "eagle3", VllmVersion.parse("0.32.0"), 256) is None


def test_operator_measurements_over_simulated_scrapes() -> None:
    """specpilot's real `measure` against the simulated Prometheus: acceptance and batch come out as simulated."""
    version = VllmVersion.parse("0.32.0")
    engine = Engine(EngineConfig(LLAMA8B_H100, version, "bench", 256, speculation=SpecConfig("eagle3", 3)), seed=1)
    history = ScrapeHistory()
    next_scrape, n = 15.0, 0
    finished: dict[float, tuple[int, int]] = {}  # scrape time -> (prompt tokens, requests) finished so far
    prompts, done = 0, 0
    first_tokens: list[tuple[float, float]] = []  # (when, TTFT) of every request that got its first token
    while engine.now < 600:
        while n * 0.1 <= engine.now:  # 10 QPS, prompts of 200..600 tokens
            engine.submit(SimRequest(f"r{n}", n * 0.1, 200 + 100 * (n % 5), 150))
            n += 1
        for r in engine.step().finished:
            prompts, done = prompts + r.prompt_tokens, done + 1
            if r.first_token_at is not None and r.ttft is not None:
                first_tokens.append((r.first_token_at, r.ttft))
        while next_scrape <= engine.now:
            history.add(snapshot(engine.metrics, next_scrape))
            finished[next_scrape] = (prompts, done)
            next_scrape += 15.0
    deadline = 0.015  # among the TTFTs of this light load (11..30 ms); counted at the next bucket bound, 0.02 s
    spec = bench_spec(LLAMA8B_H100, "eagle3", 3, 256, 8192, ttft_slo_s=deadline)
    scope = Scope("bench", "bench", "sim")
    from specpilot.autotune.evaluate import effective_window

    window = effective_window(spec.autotune)
    client = SimQueryClient(metric_names_for(version), scope, history, to_seconds, 50, 8192, deadline)
    m = measure(spec, scope, client, to_datetime(600))
    assert m[Signal.ACCEPTANCE_RATE].valid
    assert 0.3 < (m[Signal.ACCEPTANCE_RATE].value or 0) < 0.5  # alpha 0.62, K = 3: mean r_j ≈ 0.41
    assert m[Signal.BATCH_SIZE].valid
    assert 3 < (m[Signal.BATCH_SIZE].value or 0) < 30
    assert m[Signal.TPOT_P99].valid
    assert m[Signal.TPOT_MEAN].valid
    assert [k for k, _ in m[Signal.ACCEPTANCE_BY_POSITION].by_label] == ["0", "1", "2"]
    # the real query's semantics (histogram sum rate over count rate): the mean prompt of the requests that
    # finished between the window's first and last scrape, not of those that arrived or started in it (a range in
    # Prometheus 2.x includes a sample exactly at its start)
    first, last = finished[min(t for t in finished if t >= 600 - window.seconds)], finished[600.0]
    assert m[Signal.MEAN_PROMPT_TOKENS].valid
    assert m[Signal.MEAN_PROMPT_TOKENS].value == pytest.approx((last[0] - first[0]) / (last[1] - first[1]))
    # the share of first tokens within the deadline: those observed between the window's first and last scrape
    # (finished ones here, and the few still running at 600 s that the histogram already counted are left out)
    start = min(t for t in finished if t >= 600 - window.seconds)
    in_window = [ttft for at, ttft in first_tokens if start < at <= 600.0]
    share = m[Signal.TTFT_WITHIN_DEADLINE]
    assert share.valid
    expected = sum(ttft <= 0.02 for ttft in in_window) / len(in_window)
    assert 0.05 < expected < 0.95, "the deadline splits this window's first tokens"
    assert share.value == pytest.approx(expected, abs=0.05)


def test_goodput_counts_only_requests_within_both_slos() -> None:
    outcomes = [
        Outcome(0.0, 0.5, 0.010, 2.0, 100, False),
        Outcome(0.0, 0.5, 0.050, 9.0, 100, False),  # TPOT miss
        Outcome(0.0, 5.0, 0.010, 9.0, 100, False),  # TTFT miss
        Outcome(0.0, None, None, None, 0, True),
    ]
    assert oracles.goodput(outcomes, 10.0, 0.02, 2.0) == 10.0
    assert oracles.attainment(outcomes, 0.02, 2.0) == 0.25


@pytest.mark.parametrize(
    ("scores", "restart_s", "plan"),
    [
        # a two-window dip is not worth two restarts of a full window each
        ({"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 89.0]}, 300.0, ["K3"] * 4),
        # with 30 s restarts it is
        ({"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 89.0]}, 30.0, ["K3", "off", "off", "K3"]),
        # a lasting regime change is worth one restart
        ({"K3": [100.0, 50.0, 50.0, 50.0, 50.0], "off": [0.0, 80.0, 80.0, 80.0, 80.0]}, 300.0, ["K3"] + ["off"] * 4),
    ],
)
def test_switching_aware_oracle(scores: dict[str, list[float]], restart_s: float, plan: list[str]) -> None:
    assert oracles.switching_plan(scores, restart_s, 300.0) == plan


@pytest.mark.parametrize("budgeted", [False, True])
def test_of_two_plans_worth_the_same_the_one_with_fewer_switches_wins(budgeted: bool) -> None:
    """Switching back to K3 for the last window gains 100 - 10 (its restart share), exactly what staying off gives."""
    scores = {"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 90.0]}
    budget = window_budget(budget_spec(minInterval="5m")) if budgeted else None
    assert oracles.switching_plan(scores, 30.0, 300.0, budget) == ["K3", "off", "off", "off"]
    assert oracles.switching_plan(scores, 30.0, 300.0, budget, start="off") == ["off"] * 4


@pytest.mark.parametrize(
    ("scores", "restart_s", "start", "plan"),
    [
        # declared K3 is far off K1: the free start runs K1 throughout, the declared start pays one switch
        ({"K3": [10.0] * 4, "K1": [100.0] * 4}, 30.0, None, ["K1"] * 4),
        ({"K3": [10.0] * 4, "K1": [100.0] * 4}, 30.0, "K3", ["K3", "K1", "K1", "K1"]),
        # a switch that costs a whole window is not worth 10 per window: the declared start keeps K3
        ({"K3": [90.0] * 4, "K1": [100.0] * 4}, 300.0, None, ["K1"] * 4),
        ({"K3": [90.0] * 4, "K1": [100.0] * 4}, 300.0, "K3", ["K3"] * 4),
        # starting where the free start starts is the free start's plan
        ({"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 89.0]}, 30.0, "K3", ["K3", "off", "off", "K3"]),
        # from off, the one window where K3 beats off by more than its restart share is worth a switch
        ({"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 89.0]}, 30.0, "off", ["off", "off", "off", "K3"]),
    ],
)
def test_a_switching_plan_from_the_declared_config(
    scores: dict[str, list[float]], restart_s: float, start: str | None, plan: list[str]
) -> None:
    assert oracles.switching_plan(scores, restart_s, 300.0, start=start) == plan


@pytest.mark.parametrize(
    ("start", "unbudgeted", "budgeted"),
    [
        (None, ["off", "K3", "off", "K3", "K3"], ["off", "K3", "K3", "K3", "K3"]),
        ("off", ["off", "K3", "off", "K3", "K3"], ["off", "K3", "K3", "K3", "K3"]),
        # from K3 the dip to off and back breaks minInterval 15m: within the budget K3 stays
        ("K3", ["K3", "K3", "off", "K3", "K3"], ["K3"] * 5),
    ],
)
def test_a_budgeted_plan_from_the_declared_config(
    start: str | None, unbudgeted: list[str], budgeted: list[str]
) -> None:
    scores = {"off": [90.0, 10.0, 90.0, 10.0, 10.0], "K3": [0.0, 100.0, 0.0, 100.0, 100.0]}
    budget = window_budget(BudgetSpec())
    assert oracles.switching_plan(scores, 30.0, 300.0, start=start) == unbudgeted
    assert oracles.switching_plan(scores, 30.0, 300.0, budget, start=start) == budgeted


def test_a_plan_cannot_start_in_a_configuration_without_scores() -> None:
    with pytest.raises(ValueError, match="'K9' has no scores"):
        oracles.switching_plan({"K3": [1.0], "off": [2.0]}, 30.0, 300.0, start="K9")


T0 = to_datetime(0.0)
PLAN_INTENTS = {"A": oracles.static(1), "B": oracles.static(3), "C": oracles.off()}


def plan_value(plan: list[str], scores: dict[str, list[float]], restart_s: float, window_s: float) -> float:
    """The DP's objective for a whole plan: J_w of each window's configuration, less each switch's cost."""
    total = sum(scores[name][w] for w, name in enumerate(plan))
    switches = [w for w in range(1, len(plan)) if plan[w] != plan[w - 1]]
    return total - sum(max(0.0, scores[plan[w]][w]) * min(1.0, restart_s / window_s) for w in switches)


def passes_policy_budget(plan: list[str], budget: BudgetSpec, window_s: float) -> bool:
    """Does every switch of `plan` pass the closed loop's own budget check (budget.budget_check), each recorded as
    the closed loop records it (budget.record_actuation)?"""
    state = PolicyState()
    for w in range(1, len(plan)):
        if plan[w] == plan[w - 1]:
            continue
        now = T0 + timedelta(seconds=w * window_s)
        current, target = PLAN_INTENTS[plan[w - 1]], PLAN_INTENTS[plan[w]]
        if not budget_check(state, budget, current, target, now)[0]:
            return False
        applied = Decision(Action.CHANGE_THRESHOLD, target, "plan", {}, Action.CHANGE_THRESHOLD, True, "", True,
                           False, False)  # fmt: skip
        state = record_actuation(state, applied, current, now, budget)
    return True


def test_a_budgeted_plan_gives_up_the_switch_back_the_budget_forbids() -> None:
    """The dip of the first table, with 30 s restarts: switching back after 10 minutes breaks minInterval 15m."""
    scores = {"K3": [100.0, 50.0, 50.0, 100.0], "off": [90.0, 60.0, 60.0, 89.0]}
    budget = window_budget(BudgetSpec())
    assert oracles.switching_plan(scores, 30.0, 300.0) == ["K3", "off", "off", "K3"]
    assert oracles.switching_plan(scores, 30.0, 300.0, budget) == ["K3", "off", "off", "off"]


def budget_spec(**fields: object) -> BudgetSpec:
    """spec.autotune.budget as a user writes it (camelCase)."""
    return BudgetSpec.model_validate(fields)


BUDGETS = {
    "defaults: 15m, 2 per hour, 8 per day, x2 after a reversal": BudgetSpec(),
    "per hour binds": budget_spec(minInterval="5m", maxPerHour=2, maxPerDay=100, reversalBackoff=1),
    "per day binds": budget_spec(minInterval="5m", maxPerHour=60, maxPerDay=2, reversalBackoff=1),
    "reversals back off x3": budget_spec(minInterval="5m", maxPerHour=60, maxPerDay=100, reversalBackoff=3),
    "no actuation at all": budget_spec(maxPerHour=0),
}


@pytest.mark.parametrize("budget_name", list(BUDGETS))
@pytest.mark.parametrize(
    ("seed", "restart_s", "window_s"),
    [(0, 0.0, 600.0), (1, 30.0, 300.0), (2, 30.0, 300.0), (3, 150.0, 600.0), (4, 0.0, 600.0)],
)
def test_the_budgeted_plan_is_the_best_plan_the_closed_loops_budget_allows(
    budget_name: str, seed: int, restart_s: float, window_s: float
) -> None:
    """Exhaustively, over every plan of 8 windows and 3 configurations, judged by budget.budget_check itself (with
    10-minute windows the plan spans 80 minutes: a switch leaves the rolling hour exactly at a window boundary).
    Seed 0: A and B take turns at 100 with free restarts, so the best plan switches as often as the budget allows."""
    budget = BUDGETS[budget_name]
    draw = random.Random(seed)
    scores = {name: [draw.uniform(0.0, 100.0) for _ in range(8)] for name in PLAN_INTENTS}
    if seed == 0:
        scores = {"A": [100.0, 0.0] * 4, "B": [0.0, 100.0] * 4, "C": [50.0] * 8}
    allowed = [list(p) for p in itertools.product(PLAN_INTENTS, repeat=8)
               if passes_policy_budget(list(p), budget, window_s)]  # fmt: skip
    best = max(plan_value(p, scores, restart_s, window_s) for p in allowed)
    plan = oracles.switching_plan(scores, restart_s, window_s, window_budget(budget))
    assert passes_policy_budget(plan, budget, window_s)
    assert plan_value(plan, scores, restart_s, window_s) == pytest.approx(best)
    unconstrained = oracles.switching_plan(scores, restart_s, window_s)
    everything = max(plan_value(list(p), scores, restart_s, window_s)
                     for p in itertools.product(PLAN_INTENTS, repeat=8))  # fmt: skip
    assert plan_value(unconstrained, scores, restart_s, window_s) == pytest.approx(everything)


@pytest.mark.parametrize("budget_name", list(BUDGETS))
def test_the_plan_from_the_declared_config_is_the_best_plan_that_starts_there(budget_name: str) -> None:
    """Exhaustively, over every plan of 8 windows that starts in C, with and without the closed loop's budget."""
    budget = BUDGETS[budget_name]
    draw = random.Random(5)
    scores = {name: [draw.uniform(0.0, 100.0) for _ in range(8)] for name in PLAN_INTENTS}
    from_c = [["C", *p] for p in itertools.product(PLAN_INTENTS, repeat=7)]
    allowed = [p for p in from_c if passes_policy_budget(p, budget, 600.0)]
    for plan, among in (
        (oracles.switching_plan(scores, 30.0, 600.0, start="C"), from_c),
        (oracles.switching_plan(scores, 30.0, 600.0, window_budget(budget), start="C"), allowed),
    ):
        assert plan[0] == "C"
        assert plan in among
        assert plan_value(plan, scores, 30.0, 600.0) == pytest.approx(
            max(plan_value(p, scores, 30.0, 600.0) for p in among)
        )


@pytest.mark.parametrize(
    ("plan", "budget", "held"),
    [
        # switching back after 10 minutes breaks minInterval 15m: keep running until the plan's next change
        (["K3", "off", "off", "K3"], BudgetSpec(), ["K3", "off", "off", "off"]),
        # and switching back within the hour is a reversal: the dwell doubles to 30 minutes
        (["K3", "off", "off", "K3", "K3", "K3", "K3", "K3"], BudgetSpec(), ["K3"] + ["off"] * 6 + ["K3"]),
        # a plan that keeps the budget is itself
        (["K3"] + ["off"] * 6 + ["K3"], BudgetSpec(), ["K3"] + ["off"] * 6 + ["K3"]),
        # two per hour: the third change waits until the first leaves the rolling hour (12 windows)
        (["A", "B", "A", "B", "B", "B", "B", "B", "B", "B", "B", "B", "B", "B"],
         budget_spec(minInterval="5m", reversalBackoff=1), ["A", "B", "A"] + ["A"] * 10 + ["B"]),
        (["A", "B", "C"], budget_spec(maxPerHour=0), ["A", "A", "A"]),
    ],
)  # fmt: skip
def test_a_plan_held_to_the_budget_follows_it_as_far_as_the_budget_allows(
    plan: list[str], budget: BudgetSpec, held: list[str]
) -> None:
    assert oracles.held_to_budget(plan, 300.0, window_budget(budget)) == held


@pytest.mark.parametrize("budget_name", list(BUDGETS))
def test_every_plan_held_to_the_budget_passes_the_closed_loops_check(budget_name: str) -> None:
    budget = BUDGETS[budget_name]
    window = window_budget(budget)
    for plan in itertools.product(PLAN_INTENTS, repeat=7):
        held = oracles.held_to_budget(plan, 600.0, window)
        assert passes_policy_budget(held, budget, 600.0)
        if passes_policy_budget(list(plan), budget, 600.0):
            assert held == list(plan)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.timeout(120)
def test_a_budgeted_plan_over_a_day_of_short_windows(seed: int) -> None:
    """The shape of diurnal-24h --quick: 18 configurations, 288 windows of 30 s, so the rolling hour spans 120 of
    them. Each configuration's score drifts, so the unconstrained plan switches more often than the budget allows.
    The budgeted plan keeps the budget and is worth at least what holding the unconstrained plan to it and every
    constant plan are."""
    draw = random.Random(seed)
    scores: dict[str, list[float]] = {}
    for i in range(18):
        level, series = draw.uniform(0.0, 100.0), []
        for _ in range(288):
            level = max(0.0, level + draw.gauss(0.0, 20.0))
            series.append(level)
        scores[f"c{i}"] = series
    budget = window_budget(BudgetSpec())
    free = oracles.switching_plan(scores, 9.0, 30.0)
    plan = oracles.switching_plan(scores, 9.0, 30.0, budget)
    assert oracles.held_to_budget(plan, 30.0, budget) == plan
    assert oracles.held_to_budget(free, 30.0, budget) != free  # the budget binds
    floor = max(plan_value(oracles.held_to_budget(free, 30.0, budget), scores, 9.0, 30.0),
                *(plan_value([name] * 288, scores, 9.0, 30.0) for name in scores))  # fmt: skip
    assert plan_value(plan, scores, 9.0, 30.0) >= floor - 1e-6
    assert plan_value(plan, scores, 9.0, 30.0) <= plan_value(free, scores, 9.0, 30.0) + 1e-6


def test_a_budgeted_plan_refuses_a_trace_longer_than_the_day_it_counts() -> None:
    scores = {"A": [0.0] * 300, "B": [1.0] * 300}
    with pytest.raises(ValueError, match="up to one day"):
        oracles.switching_plan(scores, 30.0, 300.0, window_budget(BudgetSpec()))


def tiny_scenario() -> Scenario:
    base = scenario_named("drafter-degraded")
    return Scenario(**{**base.__dict__, "name": "tiny", "duration_s": 480.0, "qps": ((0.0, 1.0),),
                       "alpha_multiplier": ((0.0, 1.0), (239.0, 1.0), (240.0, 0.45)), "window_s": 240.0})  # fmt: skip


def test_a_table_is_reused_only_where_it_replays_the_static_run_step_for_step() -> None:
    """The benchmark skips a K-per-batch table whose K equals the static K at every batch size that run reached."""
    tiny = tiny_scenario()
    items = arrivals(tiny, 1)
    fixed = _static_job((tiny, oracles.static(3), 1))
    peak = fixed.peak_running
    assert peak > 1
    for threshold, reusable in ((peak + 1, True), (peak, False)):
        table = oracles.threshold(3, threshold, tiny.max_num_seqs)
        assert same_as_static(tiny, table, fixed) is reusable
        replayed = run_static(tiny, table, 1, items).outcomes
        assert (replayed == fixed.outcomes) is reusable


def test_tiny_benchmark_runs_every_policy() -> None:
    """One short scenario end to end: rows carry the issue's fields; the oracle is no worse than any static config."""
    tiny = tiny_scenario()
    runs, meta = run_scenario(tiny, seed=1)
    rows = {r["policy"]: r for r in (summarize(run, tiny) for run in runs)}
    assert set(rows) == {
        "off",
        "always-on",
        "static-threshold",
        "best-static",
        "oracle",
        "oracle-within-budget",
        "best-static-reachable",
        "oracle-from-declared",
        "best-static-restarted-as-oracle",
        "best-static-restarted-as-specpilot",
        "specpilot",
        "specpilot-lenient",
    }
    for row in rows.values():
        assert {"scenario", "policy", "goodput", "slo_attainment", "p50_tpot_ms", "p99_tpot_ms", "p99_e2e_ms",
                "actuations", "changes", "trials"} <= set(row)  # fmt: skip
    # one replica has no trials; a restart changes what it serves unless it restarts into the same config
    assert all(row["trials"] == 0 for row in rows.values())
    assert rows["best-static-reachable"]["changes"] == rows["best-static-reachable"]["actuations"]
    assert rows["best-static-restarted-as-oracle"]["changes"] == 0
    # an oracle is an upper bound over its search space: every configuration of Theta, the searched schedules included
    assert set(meta["searched_schedules"]) <= set(meta["static_goodput"])
    assert rows["oracle"]["goodput"] >= max(meta["static_goodput"].values())
    # every replayed candidate plan is in the oracle's search space, those from the declared config included; the
    # budgeted ones in the budgeted oracle's
    candidates = meta["oracle_candidates"]
    from_declared = meta["oracle_from_declared_candidates"]
    assert set(from_declared) == {"switching DP from the declared config",
                                  "DP from the declared config within the budget", "the declared config kept",
                                  "best static from the earliest refit"}  # fmt: skip
    assert set(candidates) == {"switching DP", "DP within the budget", "switching DP held to the budget",
                               "best constant", *from_declared}  # fmt: skip
    assert rows["oracle"]["goodput"] == pytest.approx(max(candidates.values()), abs=0.01)
    within = rows["oracle-within-budget"]["goodput"]
    budgeted = {"DP within the budget", "switching DP held to the budget", "best constant"}
    assert within == pytest.approx(max(g for k, g in candidates.items() if k in budgeted), abs=0.01)
    # the oracle from the declared config: the best of its candidates, which start as always-on does and which the
    # oracle's free start contains
    assert rows["oracle-from-declared"]["goodput"] == pytest.approx(max(from_declared.values()), abs=0.01)
    assert from_declared["the declared config kept"] == rows["always-on"]["goodput"]
    assert from_declared["best static from the earliest refit"] == rows["best-static-reachable"]["goodput"]
    assert rows["always-on"]["goodput"] <= rows["oracle-from-declared"]["goodput"] <= rows["oracle"]["goodput"]
    assert meta["oracle_from_declared_plan"][0] == [0.0, "K3"]
    assert max(meta["static_goodput"].values()) <= within <= rows["oracle"]["goodput"]
    assert len(meta["oracle_within_budget_plan"]) == len(meta["oracle_plan"])
    assert rows["best-static"]["goodput"] == max(meta["static_goodput"].values())
    reachable, best = rows["best-static-reachable"], rows["best-static"]["config"]
    if best == "K3":  # the declared config: no refit to make
        assert reachable["actuations"] == 0
        assert reachable["goodput"] == rows["best-static"]["goodput"]
    else:
        assert reachable["actuations"] == 1
        assert reachable["config"] == f"K3 until 180s, then {best}"
    # each restart control repeats its plan's restarts (the oracle's at window boundaries, specpilot's at its
    # evaluations) in the best static config; a plan without restarts has the best static run as its control
    by_policy = {run.policy: run for run in runs}
    for control, plan in RESTART_CONTROLS:
        times = restart_times(by_policy[plan].timeline)
        assert by_policy[control].actuations == len(times) == rows[plan]["actuations"]
        if times:
            assert rows[control]["config"] == f"{best} restarted at " + ", ".join(f"{t:.0f}s" for t in times)
            assert restart_times(by_policy[control].timeline) == times
        else:
            assert rows[control]["config"] == best
            assert rows[control]["goodput"] == rows["best-static"]["goodput"]
    assert len(SCENARIOS) == 15


def test_the_reachable_reference_restarts_once_at_the_earliest_refit_the_spec_allows() -> None:
    """best-static-reachable: the declared config until agreeingEvaluations x interval, then one restart."""
    tiny = tiny_scenario()
    items = arrivals(tiny, 1)
    spec = closed_loop_spec(tiny)
    at = earliest_refit_s(spec)
    assert spec.autotune.agreeing_evaluations == 3
    assert at == 180.0
    declared = run_static(tiny, oracles.static(3), 1, items)
    switched = run_switch(tiny, oracles.static(3), oracles.static(1), at, 1, items)
    assert switched.actuations == 1
    assert switched.timeline == [(0.0, "K3"), (at, "K1")]
    # until the refit it is the declared run, step for step; whatever was in flight at `at` is aborted
    finished_before = [o for o in declared.outcomes if o.e2e is not None and o.arrival + o.e2e <= at]
    assert finished_before
    assert finished_before == switched.outcomes[: len(finished_before)]
    aborted = [o for o in switched.outcomes if o.failed and o.tokens > 0]
    assert aborted, "requests in flight at the refit are aborted with the tokens they had"
    # arrivals while the pod restarts find no ready endpoint
    restart_s = LLAMA8B_H100.restart_s
    during = [o for o in switched.outcomes if at <= o.arrival < at + restart_s]
    assert during
    assert all(o.failed and o.tokens == 0 for o in during)
    # the same config on both sides is no refit: the declared run itself
    same = run_switch(tiny, oracles.static(3), oracles.static(3), at, 1, items)
    assert same.actuations == 0
    assert same.outcomes == declared.outcomes


def test_a_restart_control_restarts_into_the_same_config_where_the_plan_restarted() -> None:
    """run_restarted: the configuration never changes; each restart aborts what is in flight, loses the arrivals
    while no pod is ready, and starts a fresh engine; without restarts it is the static run, step for step."""
    tiny = tiny_scenario()
    items = arrivals(tiny, 1)
    static = run_static(tiny, oracles.static(1), 1, items)
    assert run_restarted(tiny, oracles.static(1), (), 1, items).outcomes == static.outcomes
    times = [150.0, 330.0]
    restarted = run_restarted(tiny, oracles.static(1), times, 1, items)
    assert restarted.actuations == 2
    assert restarted.timeline == [(0.0, "K1"), (150.0, "K1"), (330.0, "K1")]
    assert restart_times(restarted.timeline) == times
    finished_before = [o for o in static.outcomes if o.e2e is not None and o.arrival + o.e2e <= times[0]]
    assert finished_before
    assert finished_before == restarted.outcomes[: len(finished_before)]
    restart_s = LLAMA8B_H100.restart_s
    for t in times:
        during = [o for o in restarted.outcomes if t <= o.arrival < t + restart_s]
        assert during
        assert all(o.failed and o.tokens == 0 for o in during)
    assert sum(1 for o in restarted.outcomes if o.failed) > sum(1 for o in static.outcomes if o.failed)


def test_each_restart_control_repeats_its_own_plan_s_restarts() -> None:
    """_restart_controls: a plan that restarted gets the best static config restarted at the same instants (the
    timeline a Replica records); a plan that never restarted gets the best static run itself, not a rerun."""
    tiny = tiny_scenario()
    items = arrivals(tiny, 1)
    best = _static_job((tiny, oracles.static(1), 1))
    switched = run_switch(tiny, oracles.static(3), oracles.static(1), 180.0, 1, items)
    plans = {
        "oracle": PolicyRun(tiny.name, "oracle", "K3/K1", switched.outcomes, switched.actuations, switched.timeline,
                            switched.series, tiny.duration_s, 0.0),
        "specpilot": PolicyRun(tiny.name, "specpilot", "K1", best.outcomes, 0, best.timeline, best.series,
                               tiny.duration_s, 0.0),
    }  # fmt: skip
    as_oracle, as_specpilot = _restart_controls(tiny, 1, best, oracles.static(1), plans, workers=1)
    assert (as_oracle.policy, as_specpilot.policy) == tuple(control for control, _ in RESTART_CONTROLS)
    assert as_oracle.config == "K1 restarted at 180s"
    assert as_oracle.timeline == [(0.0, "K1"), (180.0, "K1")]
    assert as_oracle.outcomes == run_restarted(tiny, oracles.static(1), [180.0], 1, items).outcomes
    assert as_oracle.outcomes != best.outcomes
    assert as_specpilot.config == "K1"
    assert as_specpilot.actuations == 0
    assert as_specpilot.outcomes is best.outcomes


def test_true_survival_is_what_the_simulator_draws() -> None:
    """The policy-fit reference prices the simulator's own acceptance law: r_j = E[alpha^j]·rho^(j(j-1)/2)."""
    from specpilot.sim import acceptance
    from specpilot.sim.presets import LLAMA70B_4XH100

    for drafter, temperature, multiplier in (
        (LLAMA8B_H100.drafter("eagle3"), 0.7, 0.45),
        (LLAMA70B_4XH100.drafter("draft_model"), 1.0, 1.0),
        (LLAMA8B_H100.drafter("eagle"), 0.0, 1.0),  # rho = 0.85: positions decay
    ):
        rng = random.Random(7)
        n, k = 40_000, 4
        hits = [0] * k
        for _ in range(n):
            state = acceptance.start(drafter, temperature, multiplier, rng)
            accepted = acceptance.accept(drafter, state, k, rng)
            for j in range(accepted):
                hits[j] += 1
        expected = policy_fit.true_survival(drafter, temperature, multiplier, k)
        assert [h / n for h in hits] == pytest.approx(expected, abs=0.01)


def test_theta_starts_with_every_static_k_and_two_thresholds() -> None:
    theta = [oracles.label(i) for i in oracles.candidates(3, 256)]
    assert theta == ["off", "K1", "K2", "K3", "K3@1/0@32", "K3@1/0@128"]
    assert [oracles.label(i) for i in oracles.candidates(4, 64)] == ["off", "K1", "K2", "K3", "K4", "K4@1/0@32"]
    assert [oracles.label(i) for i in oracles.candidates(3, 256, thresholds=False)] == ["off", "K1", "K2", "K3"]


@pytest.mark.parametrize(
    ("version", "support"),
    [(VLLM_VERSION, ThresholdSupport.BATCH_SCHEDULE), (ONOFF_ONLY_VERSION, ThresholdSupport.UNSUPPORTED)],
)
def test_what_a_scenarios_version_can_express_is_the_renderers_answer(version: str, support: ThresholdSupport) -> None:
    """The on/off-only release lies between the boundaries where disable_by_batch_size is refused and the
    per-batch-size schedule arrives; the CR, the engines and the oracle's Theta all run the scenario's version."""
    scenario = replace(scenario_named("steady-low"), vllm_version=version)
    assert batch_size_support(scenario) is support
    assert closed_loop_spec(scenario).engine.version == version
    assert Replica(scenario, LLAMA8B_H100, oracles.static(3), 1).engine.config.version == VllmVersion.parse(version)
    assert scenario_named("onoff-only-version").vllm_version == ONOFF_ONLY_VERSION
    assert DISABLE_BY_BATCH_SIZE_REJECTED <= VllmVersion.parse(ONOFF_ONLY_VERSION) < DYNAMIC_SPECULATION


def test_the_oracle_of_an_onoff_only_version_searches_what_it_runs() -> None:
    """The tiny scenario on a release without a batch-size threshold: Theta is off and the static Ks, no threshold
    or schedule is searched and there is no static-threshold row; on the default release the same scenario has both
    (test_tiny_benchmark_runs_every_policy)."""
    tiny = replace(tiny_scenario(), vllm_version=ONOFF_ONLY_VERSION)
    runs, meta = run_scenario(tiny, seed=1)
    assert set(meta["static_goodput"]) == {"off", "K1", "K2", "K3"}
    assert meta["searched_schedules"] == []
    assert "static-threshold" not in {run.policy for run in runs}
    assert {config for run in runs for _, config in run.timeline} <= {"off", "K1", "K2", "K3"}


@pytest.mark.parametrize(("version", "schedule"), [(ONOFF_ONLY_VERSION, False), (VLLM_VERSION, True)])
def test_on_an_onoff_only_version_the_closed_loop_never_installs_a_schedule(version: str, schedule: bool) -> None:
    """A drafter at 0.45x its acceptance at 8 QPS for 12 minutes: on the default release the closed loop installs a
    per-batch-size schedule; on the on/off-only release the same evidence can only change K for every batch size or
    switch speculation off."""
    slow = replace(tiny_scenario(), vllm_version=version, qps=((0.0, 8.0),), duration_s=720.0,
                   alpha_multiplier=((0.0, 0.45),))  # fmt: skip
    replica, _ = run_specpilot(slow, 1, arrivals(slow, 1))
    configs = [config for _, config in replica.timeline[1:]]
    assert configs, "the closed loop acted"
    if schedule:
        assert any("@" in config for config in configs), configs
    else:
        assert not any("@" in config for config in configs), configs
        assert set(configs) <= {"off", "K1", "K2", "K3"}, configs


@pytest.mark.parametrize(
    ("ks", "label", "off_from"),
    [
        ((3, 3, 3), "K3", None),
        ((0, 0), "off", None),
        ((3, 2, 2, 0), "K3@1/2@16/0@64", 64),
        ((3, 3, 1, 1, 1), "K3@1/1@32", None),
    ],
)
def test_band_schedule(ks: tuple[int, ...], label: str, off_from: int | None) -> None:
    intent = oracles.band_schedule(ks, 256)
    assert oracles.label(intent) == label
    assert intent.disable_above_batch_size == off_from
    if intent.batch_schedule:
        assert intent.batch_schedule[-1][1] == 256
        assert intent.num_speculative_tokens == max(ks)


@pytest.mark.parametrize(
    ("current", "band", "k_max", "moves"),
    [
        ((3, 3, 3), 2, 3, [(3, 3, 0), (3, 3, 1), (3, 3, 2)]),
        ((1, 1, 1), 0, 3, [(0, 0, 0), (2, 1, 1), (3, 1, 1)]),  # the bands above go down with it, never up
        ((3, 2, 2), 1, 3, [(3, 0, 0), (3, 1, 1), (3, 3, 2)]),
        ((2, 2, 2), 1, 3, [(2, 0, 0), (2, 1, 1), (3, 3, 2)]),  # the bands below go up with it, never down
    ],
)
def test_band_moves(current: tuple[int, ...], band: int, k_max: int, moves: list[tuple[int, ...]]) -> None:
    assert oracles.band_moves(current, band, k_max) == moves


def test_reachable_bands_follow_the_largest_batch() -> None:
    assert [oracles.reachable_bands(peak, 256) for peak in (0, 1, 15, 16, 100, 256)] == [1, 1, 1, 2, 4, 5]
    assert oracles.reachable_bands(256, 64) == 4


def test_the_search_finds_a_schedule_at_least_as_good_as_the_policys_fit() -> None:
    """The oracle's Theta, searched without the policy, against what specpilot's own fit installs from each window's
    true acceptance (tests/policy_fit.py): on the tiny scenario (healthy drafter, then at 0.45x), the best of Theta
    serves at least as well as every fitted schedule run over the same trace. At 8 QPS the batch passes 16, so the
    search has two bands to set."""
    tiny = replace(tiny_scenario(), qps=((0.0, 8.0),))
    fitted = policy_fit.fitted_schedules(tiny, arrivals(tiny, 1), LLAMA8B_H100)
    assert fitted
    runs, meta = run_scenario(tiny, seed=1)
    tpot_slo, ttft_slo = tiny.tpot_slo_ms / 1000, tiny.ttft_slo_s
    by_policy = {r.policy: r for r in runs}
    best = oracles.score(by_policy["best-static"].outcomes, tiny.duration_s, tpot_slo, ttft_slo)
    for intent in fitted:
        run = _static_job((tiny, intent, 1))
        assert best >= oracles.score(run.outcomes, tiny.duration_s, tpot_slo, ttft_slo), oracles.label(intent)
    assert meta["searched_schedules"]


def test_the_oracle_imports_nothing_of_the_policy() -> None:
    """bench.oracles loads without any specpilot.autotune module (the import-linter contract says the same)."""
    code = "import sys, specpilot.bench.oracles; print(sorted(m for m in sys.modules if m.startswith('specpilot.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "'specpilot.bench.oracles'" in done.stdout
    assert "specpilot.autotune" not in done.stdout, done.stdout


def test_clients_past_their_timeout_leave_a_queue_past_capacity() -> None:
    """--client-timeout: a request queued longer than the timeout without a first token is aborted (its client hung
    up). Two minutes at twice K = 3's capacity: without a timeout every request is served, late; with 20 s the queue
    holds at most 20 s of arrivals, no request starts later than that, and the abandoned ones count as failed."""
    crowd = replace(
        tiny_scenario(), name="crowd", duration_s=120.0, qps=((0.0, 30.0),), max_num_seqs=16, client_timeout_s=None
    )
    items = arrivals(crowd, 1)
    patient = run_static(crowd, oracles.static(3), 1, items)
    assert max(o.ttft or 0.0 for o in patient.outcomes) > 40.0  # the queue grew past the timeout
    impatient = run_static(replace(crowd, client_timeout_s=20.0), oracles.static(3), 1, items)
    for run in (patient, impatient):  # every request accounted for, once: an outcome, in the engine, or not yet due
        in_engine = len(run.engine.waiting) + len(run.engine.running)
        assert len(run.outcomes) + in_engine + len(items) - run.next_arrival == len(items)
    assert len(impatient.engine.waiting) < len(patient.engine.waiting) / 2
    assert summarize(PolicyRun("crowd", "K3", "K3", impatient.outcomes, 0, [], [], 120.0, 0.0), crowd)[
        "timed_out"
    ] == sum(1 for o in impatient.outcomes if o.failed)  # nothing else fails here: no restart
    started = [o for o in impatient.outcomes if o.ttft is not None]
    assert started
    gave_up = [o for o in impatient.outcomes if o.failed]
    assert gave_up
    assert all(o.tokens == 0 and o.ttft is None for o in gave_up)
    # scheduled within the timeout, plus one prefill
    assert max(o.ttft for o in started if o.ttft is not None) < 20.0 + 1.0
    assert not any(o.failed for o in patient.outcomes)


@pytest.mark.parametrize(
    ("factor", "durations", "samples", "restart_s", "horizon_s", "window_budget_dwell_s"),
    [
        (1.0, ("60s", "5m", "15s", "10m", "6h", "15m"), (50, 2000), 90.0, 3600.0, 900.0),
        (0.1, ("6s", "30s", "1.5s", "60s", "2160s", "90s"), (5, 200), 9.0, 360.0, 90.0),
    ],
)
def test_quick_mode_runs_the_controller_and_the_simulator_on_the_scenarios_clock(
    factor: float,
    durations: tuple[str, ...],
    samples: tuple[int, int],
    restart_s: float,
    horizon_s: float,
    window_budget_dwell_s: float,
) -> None:
    """A scenario compressed x0.1 compresses the CR's time constants, the restart and the payback horizon with it
    (and the minimum samples of a window a tenth as long); the drain, which lets uncompressed requests finish, stays."""
    from specpilot.bench.runner import closed_loop_spec, preset_for, rollout_layout
    from specpilot.bench.specpilot_policy import SpecpilotController

    scenario = scenario_named("drafter-degraded").scaled(factor)
    assert scenario.time_scale == pytest.approx(factor)
    spec = closed_loop_spec(scenario, replicas=2)
    at = spec.autotune
    got = (at.interval, at.window, at.scrape_interval, at.stabilization, at.probe_interval, at.budget.min_interval)
    assert got == durations
    assert (at.min_samples.requests, at.min_samples.draft_tokens) == samples
    assert (at.budget.max_per_hour, at.budget.max_per_day) == (2, 8)
    assert rollout_layout(scenario, 2).drain_s == rollout_layout(scenario_named("drafter-degraded"), 2).drain_s
    assert preset_for(scenario).restart_s == pytest.approx(restart_s)
    fit = SpecpilotController(spec, time_scale=scenario.time_scale).fit()
    assert fit.restart_cost_s == pytest.approx(restart_s)
    assert fit.horizon_s == pytest.approx(horizon_s)
    assert window_budget(at.budget).dwells_s[0] == pytest.approx(window_budget_dwell_s)
