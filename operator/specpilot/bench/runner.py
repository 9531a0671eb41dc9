"""Run scenarios through the simulator under each policy on a virtual clock (the benchmark's imperative shell).

A `Replica` is one vLLM pod behind a Service: an Engine, the requests of the scenario fed at their arrival times,
a Prometheus scrape loop (every 15 s with jitter, some scrapes missed), and restarts: changing the configuration
aborts what is in flight, loses the arrivals during the restart (no ready endpoint) and starts a fresh engine, with
fresh counters, after the preset's restart time. Policies: off, always on (static K), a static threshold, the best
static configuration in hindsight (O_static, searched over Theta, the per-batch-size schedules of its band search
included), the switching-aware per-window oracle (over the same Theta), and specpilot's own policy in closed loop.
Three references beside them, not policies: the oracle held to the closed loop's actuation budget
(`oracle-within-budget`), the best static configuration in hindsight installed at the earliest moment the closed
loop's spec lets any change go in (`best-static-reachable`): what a policy that starts as declared, obeys the
agreement rule and knows the answer would serve with one refit, and the best plan in hindsight that starts in the
declared configuration and pays every switch (`oracle-from-declared`). Two controls (RESTART_CONTROLS): the best static
configuration restarted into itself wherever the oracle, and wherever specpilot, restarted: what those restarts are
worth without any change of configuration.

That is one replica, where a restart is an outage. At N replicas (`Layout`, `specpilot bench --replicas N`) every
run serves on a `Fleet` (bench/fleet.py) instead: N pods behind a balancer, each restart a rolling one with drain,
specpilot's changes one pod first; `deploy` picks which.
"""

from __future__ import annotations

import copy
import math
import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from specpilot.api import rollout, v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.autotune.model.rollcost import restart_cost_seconds
from specpilot.bench import oracles
from specpilot.bench.layout import Balancer, Layout
from specpilot.bench.oracles import Outcome
from specpilot.bench.prometheus import ScrapeClock
from specpilot.bench.queries import ScrapeHistory, snapshot
from specpilot.bench.scenarios import Arrival, Scenario, arrivals, batched_tokens
from specpilot.bench.specpilot_policy import OperatorController, SpecpilotController, bench_document, window_budget
from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
from specpilot.sim.presets import Preset, preset_named
from specpilot.vllm.dialects import ThresholdSupport, threshold_support_for
from specpilot.vllm.intent import SpeculationIntent, intent_from_spec
from specpilot.vllm.versions import DYNAMIC_SPECULATION, VllmVersion

if TYPE_CHECKING:
    from specpilot.bench.fleet import Fleet

SCRAPE_S = 15.0
# What the controller's Prometheus sees is not every nominal scrape: a sample's timestamp is the scrape's start, which
# drifts under load (up to 1 s either way here), and a scrape of a busy pod now and then times out (1 in 50 here).
# Both are assumptions, drawn per seed (bench.prometheus.ScrapeClock).
SCRAPE_JITTER_S = 1.0
MISSED_SCRAPES = 0.02
ONE_REPLICA = Layout()


def spec_config(intent: SpeculationIntent, method: str, version: VllmVersion, max_num_seqs: int) -> SpecConfig | None:
    """What the operator's dialect renders for an intent, as a simulator SpecConfig (threshold -> table on 0.24+)."""
    if not intent.enabled or not intent.num_speculative_tokens:
        return None
    k = intent.num_speculative_tokens
    schedule = intent.batch_schedule
    threshold = intent.disable_above_batch_size
    if schedule is None and threshold is not None and version >= DYNAMIC_SPECULATION:
        schedule = ((1, threshold - 1, k), (threshold, max_num_seqs, 0))
    return SpecConfig(method=method, num_speculative_tokens=k, schedule=schedule, disable_by_batch_size=threshold)


def engine_config(scenario: Scenario, preset: Preset, intent: SpeculationIntent, version: VllmVersion) -> EngineConfig:
    s = scenario
    return EngineConfig(
        preset=preset,
        version=version,
        model_name="bench",
        max_num_seqs=s.max_num_seqs,
        max_model_len=s.max_model_len,
        max_num_batched_tokens=batched_tokens(s.max_model_len),
        speculation=spec_config(intent, s.method, version, s.max_num_seqs),
    )


@dataclass
class Replica:
    scenario: Scenario
    preset: Preset
    intent: SpeculationIntent
    seed: int
    engine: Engine = field(init=False)
    down_until: float = 0.0
    config_since: float = 0.0
    next_arrival: int = 0
    history: ScrapeHistory = field(default_factory=ScrapeHistory)
    outcomes: list[Outcome] = field(default_factory=list)
    actuations: int = 0  # restarts started (a restart into the same config included)
    changes: int = 0  # of them, those that changed the configuration the pod serves
    trials: int = 0  # one pod is the whole deployment here: never a trial
    timeline: list[tuple[float, str]] = field(default_factory=list)
    series: list[tuple[float, float, float, float]] = field(default_factory=list)  # t, running, waiting, K now
    generation: int = 0

    def __post_init__(self) -> None:
        self.version = VllmVersion.parse(self.scenario.vllm_version)
        self.engine = Engine(self._config(self.intent), seed=self.seed)
        self.timeline.append((0.0, oracles.label(self.intent)))
        scale = self.scenario.time_scale
        self.scrapes = ScrapeClock(SCRAPE_S * scale, SCRAPE_JITTER_S * scale, MISSED_SCRAPES, seed=self.seed)
        self.next_scrape, self.scrape_misses = self.scrapes.next()
        self.history.target = oracles.label(self.intent)

    def _config(self, intent: SpeculationIntent) -> EngineConfig:
        return engine_config(self.scenario, self.preset, intent, self.version)

    def fork(self) -> Replica:
        """An independent copy from this instant (for the oracle's what-ifs); outcomes start empty."""
        outcomes, series, timeline = self.outcomes, self.series, self.timeline
        self.outcomes, self.series, self.timeline = [], [], []
        try:
            twin = copy.deepcopy(self)
        finally:
            self.outcomes, self.series, self.timeline = outcomes, series, timeline
        return twin

    def restart(self, intent: SpeculationIntent, now: float, drafter: str | None = None) -> None:
        """Roll the pod to another configuration (run by `drafter`, default its own): abort in-flight work, fresh
        engine after the restart time."""
        if intent != self.intent or (drafter is not None and drafter != self.scenario.method):
            self.changes += 1
        if drafter is not None and drafter != self.scenario.method:
            self.scenario = replace(self.scenario, method=drafter)
        self.engine.advance_idle(now)
        for r in self.engine.abort_all():
            self.outcomes.append(Outcome(r.arrival, None, None, None, r.generated, True))
        self.intent = intent
        self.generation += 1
        self.down_until = now + self.preset.restart_s
        self.config_since = self.down_until
        self.engine = Engine(self._config(intent), seed=self.seed * 1000 + self.generation, now=self.down_until)
        self.engine.now = now
        self.history.retarget(oracles.label(intent), now)
        self.actuations += 1
        self.timeline.append((now, oracles.label(intent)))

    def _scrapes_until(self, t: float, items: Sequence[Arrival]) -> None:
        """Every scrape up to `t`: none while the pod restarts, a staleness marker for a missed one."""
        while self.next_scrape <= t:
            if self.next_scrape >= self.down_until:
                self.engine.advance_idle(self.next_scrape)
                if self.scrape_misses:
                    self.history.scrape_failed(self.next_scrape)
                else:
                    self.history.add(snapshot(self.engine.metrics, self.next_scrape))
                spec = self.engine.config.speculation
                running = len(self.engine.running)
                k_state = 0.0 if spec is None else float(spec.k_for(self.version, running, running))
                self.series.append(
                    (self.next_scrape, float(len(self.engine.running)), float(len(self.engine.waiting)), k_state)
                )
            self.next_scrape, self.scrape_misses = self.scrapes.next()

    def run_until(self, t_end: float, items: Sequence[Arrival]) -> None:
        e = self.engine
        n = len(items)
        while True:
            e = self.engine
            if e.now >= t_end:
                return
            if e.now < self.down_until:
                stop = min(self.down_until, t_end)
                while self.next_arrival < n and items[self.next_arrival].at < stop:
                    a = items[self.next_arrival]
                    self.outcomes.append(Outcome(a.at, None, None, None, 0, True))
                    self.next_arrival += 1
                self._scrapes_until(stop, items)
                e.advance_idle(stop)
                continue
            while self.next_arrival < n and items[self.next_arrival].at <= e.now:
                a = items[self.next_arrival]
                e.submit(
                    SimRequest(a.rid, a.at, a.prompt_tokens, a.max_tokens, a.output_tokens, a.temperature,
                               a.alpha_multiplier)
                )  # fmt: skip
                self.next_arrival += 1
            if not e.has_work():
                stop = min(items[self.next_arrival].at if self.next_arrival < n else math.inf, t_end)
                self._scrapes_until(stop, items)
                e.advance_idle(stop)
                continue
            timeout = self.scenario.client_timeout_s
            if timeout is not None:
                for r in e.abandon_waiting(e.now - timeout):
                    self.outcomes.append(Outcome(r.arrival, None, None, None, r.generated, True, timed_out=True))
            report = e.step()
            if report.duration == 0:  # nothing fits (a prompt larger than the cache): let time pass
                e.advance_idle(e.now + 0.01)
            for r in report.finished:
                self.outcomes.append(Outcome(r.arrival, r.ttft, r.tpot, (r.finished_at or e.now) - r.arrival,
                                             r.generated, False))  # fmt: skip
            self._scrapes_until(e.now, items)


@dataclass
class PolicyRun:
    scenario: str
    policy: str
    config: str
    outcomes: list[Outcome]
    actuations: int
    timeline: list[tuple[float, str]]
    series: list[tuple[float, float, float, float]]
    duration_s: float
    wall_s: float
    notes: list[str] = field(default_factory=list)
    peak_running: int = 0
    replicas: int = 1
    # of the actuations, the rollouts that changed what every pod serves (a promotion included; a restart into the
    # same config, a one-pod trial and its rollback not), and the one-pod trials started
    changes: int = 0
    trials: int = 0
    # a closed loop's every evaluation and event, in time order (`specpilot bench --decisions`); not in the rows
    trace: list[dict[str, Any]] = field(default_factory=list)


def preset_for(scenario: Scenario) -> Preset:
    """The scenario's simulated set-up, its restart on the scenario's clock (Scenario.time_scale)."""
    preset = preset_named(scenario.preset)
    return replace(preset, restart_s=preset.restart_s * scenario.time_scale)


def deploy(
    scenario: Scenario, preset: Preset, intent: SpeculationIntent, seed: int, layout: Layout = ONE_REPLICA
) -> Replica | Fleet:
    """The pods a run serves with: one Replica where a restart is an outage, else a Fleet (bench/fleet.py)."""
    if layout.outage:
        return Replica(scenario, preset, intent, seed)
    from specpilot.bench.fleet import Fleet  # fleet.py builds on Replica

    return Fleet(scenario, preset, intent, seed, layout)


def for_replicas(scenario: Scenario, replicas: int) -> Scenario:
    """The scenario at `replicas` pods: arrival rates times the replicas (a replayed trace's requests each repeated
    `replicas` times), so each pod sees the load one pod sees in the scenario as written (its rates are shares of one
    pod's capacity)."""
    if replicas == 1:
        return scenario
    return replace(
        scenario,
        qps=tuple((t, v * replicas) for t, v in scenario.qps),
        replay=None if scenario.replay is None else scenario.replay.repeated(replicas),
        previous=None if scenario.previous is None else for_replicas(scenario.previous, replicas),
    )


def rollout_layout(scenario: Scenario, replicas: int = 1, balancer: Balancer = Balancer.ROUND_ROBIN,
                   max_surge: int = 0) -> Layout:  # fmt: skip
    """The Layout the closed loop's spec declares at `replicas` and `max_surge` (api/rollout.py's defaults:
    maxUnavailable, and the drain sized to the scenario's maxModelLen)."""
    spec = closed_loop_spec(scenario, replicas=replicas, max_surge=max_surge)
    return Layout(replicas, balancer, max_surge, rollout.max_unavailable(spec), float(rollout.drain_seconds(spec)))


def restart_cost_s(preset: Preset, layout: Layout) -> float:
    """Seconds of the deployment's serving one change removes on the layout's rollout path (autotune rollcost)."""
    return restart_cost_seconds(preset.restart_s, layout.replicas, layout.max_surge, layout.max_unavailable)


def _row(
    scenario: Scenario,
    policy: str,
    config: str,
    run: Replica | Fleet,
    wall_s: float,
    layout: Layout,
    peak: int = 0,
) -> PolicyRun:
    """What one run served, with its rollouts, as the row of `policy` (`peak`: its most running requests)."""
    return PolicyRun(scenario.name, policy, config, run.outcomes, run.actuations, run.timeline, run.series,
                     scenario.duration_s, wall_s, peak_running=peak, replicas=layout.replicas,
                     changes=run.changes, trials=run.trials)  # fmt: skip


def peak_running(run: Replica | Fleet) -> int:
    return run.engine.peak_running if isinstance(run, Replica) else run.peak_running


def run_static(scenario: Scenario, intent: SpeculationIntent, seed: int, items: Sequence[Arrival]) -> Replica:
    replica = Replica(scenario, preset_for(scenario), intent, seed)
    replica.run_until(scenario.duration_s, items)
    return replica


# The sensitivity variant: acceptance gates low enough that a healthy drafter at K = 3 (aggregate acceptance ~0.4)
# is not switched off, so the rest of the policy (latency baseline, schedule fit) gets to act.
LENIENT = {"disableBelow": 0.25, "enableAbove": 0.35}


def closed_loop_spec(
    scenario: Scenario, acceptance: dict[str, float] | None = None, *, replicas: int = 1, max_surge: int = 0
) -> Any:
    """The SpeculativeDeployment spec the closed loop runs for this scenario (specpilot_policy.bench_spec)."""
    return v1alpha1.parse_resource(closed_loop_document(scenario, acceptance, replicas=replicas,
                                                        max_surge=max_surge)).spec  # fmt: skip


def closed_loop_document(
    scenario: Scenario, acceptance: dict[str, float] | None = None, *, replicas: int = 1, max_surge: int = 0
) -> dict[str, Any]:
    """The SpeculativeDeployment document of closed_loop_spec."""
    return bench_document(preset_for(scenario), scenario.method, scenario.num_speculative_tokens,
                          scenario.max_num_seqs, scenario.max_model_len, acceptance, scenario.ttft_slo_s,
                          tpot_slo_s=scenario.tpot_slo_ms / 1000, speculation_enabled=scenario.speculation_enabled,
                          replicas=replicas, max_surge=max_surge,
                          time_scale=scenario.time_scale, objective=scenario.objective,
                          version=scenario.vllm_version, candidates=scenario.candidates)  # fmt: skip


def earliest_refit_s(spec: Any) -> float:
    """The first moment a change can go in under `spec`: agreeingEvaluations consecutive evaluations must agree
    one interval apart, the first an interval after the config started serving."""
    return float(parse_duration(spec.autotune.interval) * spec.autotune.agreeing_evaluations)


def run_specpilot(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    acceptance: dict[str, float] | None = None,
    layout: Layout = ONE_REPLICA,
) -> tuple[Replica | Fleet, SpecpilotController | OperatorController]:
    """specpilot's controller in closed loop; where the CR changed (`scenario.previous`), the controller first lives
    through what the CR ran before, and keeps its state across the change as status does. With a pod to spare (two
    replicas or more, or surge) it is the operator's own evaluation, one-pod-first trials and their analysis
    (fleet.run_operator); one replica without surge restarts all at once (_drive)."""
    if not layout.outage:
        return _run_operator(scenario, seed, items, acceptance, layout)
    controller = SpecpilotController(_closed_loop_spec_on(scenario, acceptance, layout), time_scale=scenario.time_scale)
    before = scenario.previous
    if before is not None:
        first = SpecpilotController(_closed_loop_spec_on(before, acceptance, layout), time_scale=before.time_scale)
        _, earlier = _drive(before, seed, arrivals(before, seed), first, changed=False)
        controller.state, controller.clock_offset_s = earlier.state, before.duration_s
    return _drive(scenario, seed, items, controller, changed=before is not None)


def _run_operator(
    scenario: Scenario, seed: int, items: Sequence[Arrival], acceptance: dict[str, float] | None, layout: Layout
) -> tuple[Fleet, OperatorController]:
    """The operator's loop over a Fleet; after a CR change its status carries over, as the API server keeps it."""
    from specpilot.bench.fleet import run_operator  # fleet.py builds on Replica

    def operator_for(cr: Scenario) -> OperatorController:
        document = closed_loop_document(cr, acceptance, replicas=layout.replicas, max_surge=layout.max_surge)
        return OperatorController.of(document, time_scale=cr.time_scale)

    operator = operator_for(scenario)
    before = scenario.previous
    if before is not None:
        first = operator_for(before)
        run_operator(before, seed, arrivals(before, seed), first, layout)
        operator.status, operator.clock_offset_s = first.status, before.duration_s
    return run_operator(scenario, seed, items, operator, layout), operator


def _closed_loop_spec_on(scenario: Scenario, acceptance: dict[str, float] | None, layout: Layout) -> Any:
    return closed_loop_spec(scenario, acceptance, replicas=layout.replicas, max_surge=layout.max_surge)


def _drive(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    controller: SpecpilotController,
    *,
    changed: bool,
) -> tuple[Replica, SpecpilotController]:
    """One evaluation per interval over one replica without surge, every change a restart of it (a pod to spare runs
    the operator's loop, _run_operator). `changed`: the config at time 0 was just rolled out (a CR edit), so its
    metrics settle like any new config's."""
    replica = Replica(scenario, preset_for(scenario), controller.initial_intent(), seed)
    t = 0.0
    while t < scenario.duration_s:
        t = min(t + controller.interval_s, scenario.duration_s)
        replica.run_until(t, items)
        target = controller.evaluate(
            t,
            current=replica.intent,
            history=replica.history,
            config_since=replica.config_since if replica.generation or changed else None,
            rollout_in_progress=t < replica.down_until,
            series_since=replica.config_since,
        )
        if target is not None:
            replica.restart(target, t)
    return replica, controller


def run_plan(
    scenario: Scenario,
    plan: Sequence[SpeculationIntent],
    seed: int,
    items: Sequence[Arrival],
    layout: Layout = ONE_REPLICA,
) -> Replica | Fleet:
    """Replay a per-window plan through the simulator: a restart at each window boundary where the plan changes."""
    replica = deploy(scenario, preset_for(scenario), plan[0], seed, layout)
    for w, intent in enumerate(plan):
        start = w * scenario.window_s
        if w and intent != replica.intent:
            replica.run_until(start, items)
            replica.restart(intent, start)
    replica.run_until(scenario.duration_s, items)
    return replica


def run_switch(
    scenario: Scenario,
    start: SpeculationIntent,
    target: SpeculationIntent,
    at: float,
    seed: int,
    items: Sequence[Arrival],
    layout: Layout = ONE_REPLICA,
    drafter: str | None = None,
) -> Replica | Fleet:
    """Serve `start`, restart into `target` (run by `drafter`, default the scenario's) at `at` seconds (no restart
    when they are the same), serve to the end."""
    replica = deploy(scenario, preset_for(scenario), start, seed, layout)
    if target != start or (drafter or scenario.method) != scenario.method:
        replica.run_until(at, items)
        replica.restart(target, at, drafter)
    replica.run_until(scenario.duration_s, items)
    return replica


def run_restarted(
    scenario: Scenario,
    intent: SpeculationIntent,
    times: Sequence[float],
    seed: int,
    items: Sequence[Arrival],
    layout: Layout = ONE_REPLICA,
) -> Replica | Fleet:
    """Serve `intent` throughout, restarting into the same configuration at each of `times` (seconds, ascending).

    The control for a plan's restarts: a restart aborts what is in flight and loses the arrivals while no pod is
    ready, and past capacity that sheds a queue of requests that would miss their deadline anyway, which goodput
    rewards. This run has a plan's restarts without its changes of configuration.
    """
    replica = deploy(scenario, preset_for(scenario), intent, seed, layout)
    for at in times:
        replica.run_until(at, items)
        replica.restart(intent, at)
    replica.run_until(scenario.duration_s, items)
    return replica


def restart_times(timeline: Sequence[tuple[float, str]]) -> list[float]:
    """When a run restarted: every entry of its timeline after the configuration it started in."""
    return [at for at, _ in timeline[1:]]


def summarize(run: PolicyRun, scenario: Scenario) -> dict[str, Any]:
    tpot_slo, ttft_slo = scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s
    done = [o for o in run.outcomes if not o.failed]
    tpots = [o.tpot for o in done if o.tpot is not None]
    e2es = [o.e2e for o in done if o.e2e is not None]
    ttfts = [o.ttft for o in done if o.ttft is not None]
    return {
        "scenario": run.scenario,
        "policy": run.policy,
        "config": run.config,
        "goodput": round(oracles.goodput(run.outcomes, run.duration_s, tpot_slo, ttft_slo), 2),
        "slo_attainment": round(oracles.attainment(run.outcomes, tpot_slo, ttft_slo), 4),
        "mean_tpot_ms": round(sum(tpots) / len(tpots) * 1000, 3) if tpots else math.nan,
        "p50_tpot_ms": round(oracles.quantile(tpots, 0.5) * 1000, 3),
        "p99_tpot_ms": round(oracles.quantile(tpots, 0.99) * 1000, 3),
        "p50_ttft_ms": round(oracles.quantile(ttfts, 0.5) * 1000, 1),
        "p99_ttft_ms": round(oracles.quantile(ttfts, 0.99) * 1000, 1),
        "p99_e2e_ms": round(oracles.quantile(e2es, 0.99) * 1000, 1),
        "actuations": run.actuations,
        "changes": run.changes,
        "trials": run.trials,
        "requests": len(run.outcomes),
        "failed": sum(1 for o in run.outcomes if o.failed),
        "timed_out": sum(1 for o in run.outcomes if o.timed_out),
        "replicas": run.replicas,
        "wall_s": round(run.wall_s, 1),
    }


def rows_of(runs: Sequence[PolicyRun], scenario: Scenario, seed: int) -> list[dict[str, Any]]:
    """The JSON rows of one scenario run under one seed, as `specpilot bench` prints and stores them."""
    return [{**summarize(run, scenario), "seed": seed} for run in runs]


def window_p99(outcomes: Sequence[Outcome], window_s: float, duration_s: float) -> list[float]:
    """P99 TPOT (ms) per window, by arrival time (NaN where a window has no finished request)."""
    out: list[float] = []
    t = 0.0
    while t < duration_s:
        tp = [o.tpot for o in outcomes if t <= o.arrival < t + window_s and o.tpot is not None and not o.failed]
        out.append(oracles.quantile(tp, 0.99) * 1000 if tp else math.nan)
        t += window_s
    return out


# A simulation job: scenario, configuration, seed and, when not one replica, the layout.
Job = tuple[Scenario, SpeculationIntent, int] | tuple[Scenario, SpeculationIntent, int, Layout]


def _job_parts(job: Job) -> tuple[Scenario, SpeculationIntent, int, Layout]:
    return job[0], job[1], job[2], job[3] if len(job) == 4 else ONE_REPLICA


def _static_job(job: Job) -> PolicyRun:
    scenario, intent, seed, layout = _job_parts(job)
    started = time.monotonic()
    r = deploy(scenario, preset_for(scenario), intent, seed, layout)
    r.run_until(scenario.duration_s, arrivals(scenario, seed))
    name = oracles.label(intent)
    return _row(scenario, name, name, r, time.monotonic() - started, layout, peak=peak_running(r))


def same_as_static(scenario: Scenario, table: SpeculationIntent, static_run: PolicyRun, k: int | None = None) -> bool:
    """Whether a K-per-batch-size table would have run exactly like the static K run: it gives that K at every batch
    size the static run reached (same seed, same arrivals, so the same steps; the table only changes K beyond).
    `k`: the static run's K (default the scenario's)."""
    version = VllmVersion.parse(scenario.vllm_version)
    static_k = oracles.static(k or scenario.num_speculative_tokens)
    fixed = spec_config(static_k, scenario.method, version, scenario.max_num_seqs)
    tuned = spec_config(table, scenario.method, version, scenario.max_num_seqs)
    if fixed is None or tuned is None:
        return False
    preset = preset_for(scenario)
    if engine_config(scenario, preset, table, version).capture_max != (
        engine_config(scenario, preset, static_k, version).capture_max
    ):  # the CUDA-graph sizes follow the configured K, not the K a step uses
        return False
    return all(tuned.k_for(version, b, b) == fixed.k_for(version, b, b) for b in range(static_run.peak_running + 1))


def _as_static(scenario: Scenario, intent: SpeculationIntent, source: PolicyRun) -> PolicyRun:
    name = oracles.label(intent)
    return PolicyRun(scenario.name, name, name, source.outcomes, source.actuations, [(0.0, name)], source.series,
                     source.duration_s, 0.0, peak_running=source.peak_running, replicas=source.replicas,
                     changes=source.changes, trials=source.trials)  # fmt: skip


def _specpilot_job(job: Job) -> PolicyRun:
    return _closed_loop(job, None, "specpilot")


def _lenient_job(job: Job) -> PolicyRun:
    return _closed_loop(job, LENIENT, "specpilot-lenient")


def _closed_loop(job: Job, acceptance: dict[str, float] | None, name: str) -> PolicyRun:
    scenario, _, seed, layout = _job_parts(job)
    return closed_loop_row(scenario, seed, layout, acceptance, name)


def specpilot_alone(jobs: Sequence[tuple[Scenario, int, Layout]], workers: int = 1) -> list[PolicyRun]:
    """specpilot's row of each (scenario, seed, layout) without the other policies, oracles and controls (none of
    which depends on the policy): the same run, to the request, as its row in run_scenario."""
    return _run_jobs([(_alone_job, job) for job in jobs], workers)


def _alone_job(job: tuple[Scenario, int, Layout]) -> PolicyRun:
    scenario, seed, layout = job
    return closed_loop_row(for_replicas(scenario, layout.replicas), seed, layout)


def closed_loop_row(
    scenario: Scenario, seed: int, layout: Layout, acceptance: dict[str, float] | None = None, name: str = "specpilot"
) -> PolicyRun:
    """specpilot's controller in closed loop as the row `name`, its actuations' reasons and trials' events as notes."""
    started = time.monotonic()
    replica, controller = run_specpilot(scenario, seed, arrivals(scenario, seed), acceptance, layout)
    config = oracles.label(replica.intent) if isinstance(replica, Replica) else replica.label(replica.config)
    run = _row(scenario, name, config, replica, time.monotonic() - started, layout)
    run.notes = [f"{d['t']:.0f}s {d['action']}: {d['reason']}" for d in controller.decisions if d["actuate"]]
    if isinstance(controller, OperatorController):  # its trials' events: started, verdict, promoted or rolled back
        run.notes += [e for e in controller.events if "Trial" in e or "Candidate" in e]
    run.notes = sorted(run.notes, key=lambda note: float(note.split("s ", 1)[0]))
    run.trace = decision_trace(controller)
    return run


def decision_trace(controller: SpecpilotController | OperatorController) -> list[dict[str, Any]]:
    """The controller's evaluations ("decision": action, whether it acted, the gate that held it, the reason) and
    the events it posted ("event"), by time, an event after the evaluation that posted it."""
    decisions = [{"kind": "decision", **d} for d in controller.decisions]
    posted = controller.event_records if isinstance(controller, OperatorController) else []
    events = [{"kind": "event", **e} for e in posted]
    return sorted(decisions + events, key=lambda entry: (entry["t"], entry["kind"] == "event"))


def _run_jobs(jobs: list[tuple[Any, ...]], workers: int) -> list[PolicyRun]:
    """Independent simulations, in worker processes when more than one core is available."""
    if workers <= 1:
        return [job[0](job[1]) for job in jobs]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(fn, arg) for fn, arg in jobs]
        return [f.result() for f in futures]


def _best_static_reachable(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    best_run: PolicyRun,
    best: SpeculationIntent,
    layout: Layout = ONE_REPLICA,
    drafter: str | None = None,
) -> PolicyRun:
    """The best static config in hindsight (run by `drafter`, default the declared one), installed at the earliest
    refit the closed loop's spec allows.

    The oracle and the best static config start in their configuration for free; the closed loop starts as declared
    and cannot change anything before agreeingEvaluations x interval (earliest_refit_s). This run is that bound for
    one refit: where the declared config is the best static one it is that run, else one restart at the earliest
    moment. The gap between it and the oracle is what no policy under the agreement rule can recover with a single
    change; the gap between specpilot and it is the policy's own.
    """
    started = time.monotonic()
    spec = closed_loop_spec(scenario)
    declared = intent_from_spec(spec)
    if oracles.label(declared) == best_run.policy:
        return replace(best_run, policy="best-static-reachable", wall_s=0.0)
    at = earliest_refit_s(spec)
    replica = run_switch(scenario, declared, best, at, seed, items, layout, drafter=drafter)
    config = f"{oracles.label(declared)} until {at:.0f}s, then {best_run.policy}"
    return _row(scenario, "best-static-reachable", config, replica, time.monotonic() - started, layout)


def _restarted_job(job: tuple[Scenario, SpeculationIntent, tuple[float, ...], int, str, Layout]) -> PolicyRun:
    scenario, intent, times, seed, policy, layout = job
    started = time.monotonic()
    replica = run_restarted(scenario, intent, times, seed, arrivals(scenario, seed), layout)
    config = f"{oracles.label(intent)} restarted at " + ", ".join(f"{t:.0f}s" for t in times)
    return _row(scenario, policy, config, replica, time.monotonic() - started, layout)


# The restart controls (row, the row whose restarts it repeats): the best static config restarted into itself where
# that plan restarts (run_restarted).
RESTART_CONTROLS = (("best-static-restarted-as-oracle", "oracle"), ("best-static-restarted-as-specpilot", "specpilot"))


def _restart_controls(
    scenario: Scenario, seed: int, best_run: PolicyRun, best: SpeculationIntent, plans: dict[str, PolicyRun],
    workers: int, layout: Layout = ONE_REPLICA,
) -> list[PolicyRun]:  # fmt: skip
    """RESTART_CONTROLS for one scenario and seed: where a plan never restarts, its control is the best static run."""
    jobs: list[tuple[Any, ...]] = []
    out: dict[str, PolicyRun] = {}
    for policy, plan in RESTART_CONTROLS:
        times = tuple(restart_times(plans[plan].timeline))
        if times:
            jobs.append((_restarted_job, (scenario, best, times, seed, policy, layout)))
        else:
            out[policy] = replace(best_run, policy=policy, wall_s=0.0)
    for run in _run_jobs(jobs, min(workers, len(jobs))) if jobs else []:
        out[run.policy] = run
    return [out[policy] for policy, _ in RESTART_CONTROLS]


def batch_size_support(scenario: Scenario) -> ThresholdSupport:
    """How the scenario's CR can stop speculating at a batch size on its vLLM version, as the operator's renderer
    answers it (dialects.threshold_support_for): the oracle's Theta holds only configurations the version runs, so a
    per-batch-size schedule needs BATCH_SCHEDULE, a threshold anything but UNSUPPORTED."""
    return threshold_support_for(closed_loop_spec(scenario))[0]


def run_scenario(
    scenario: Scenario,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    layout: Layout = ONE_REPLICA,
) -> tuple[list[PolicyRun], dict[str, Any]]:
    """Every policy on one scenario; returns the runs and the scenario-level verdicts.

    At `layout.replicas` pods the scenario's arrival rates are multiplied by the replicas (`for_replicas`) and every
    run, oracle replay and control serves them on that layout.
    """
    say = progress or (lambda _: None)
    scenario = for_replicas(scenario, layout.replicas)
    items = arrivals(scenario, seed)
    k = scenario.num_speculative_tokens
    support = batch_size_support(scenario)
    theta = oracles.candidates(k, scenario.max_num_seqs, thresholds=support is not ThresholdSupport.UNSUPPORTED)
    statics, (mine, lenient) = _theta_and_closed_loop_runs(scenario, seed, theta, workers, say, layout)
    found = _search_declared(scenario, seed, items, statics, support, theta, workers, say, layout)
    for drafter in scenario.candidates:  # each candidate drafter searched as the declared one, on its own
        references = _drafter_references(scenario, drafter, seed, items, theta, workers, say, layout)
        found = _with_drafter(found, scenario, drafter, references)
    statics, searched, by_name, drafter_of, refs = (found.statics, found.searched, found.by_name, found.drafter_of,
                                                    found.refs)  # fmt: skip
    tpot_slo, ttft_slo = scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s
    scores = {n: oracles.score(r.outcomes, scenario.duration_s, tpot_slo, ttft_slo) for n, r in statics.items()}
    totals = _totals(scenario, statics)
    best = oracles.best_static(scores)
    best_unscheduled = oracles.best_static({n: v for n, v in scores.items() if n not in searched})
    best_drafter = drafter_of[best]
    reachable = _best_static_reachable(scenario, seed, items, statics[best], by_name[best], layout, best_drafter)
    switches = {
        "best static from the earliest refit": reachable,
        **_drafter_switches(scenario, seed, items, statics, by_name, drafter_of, best, reachable, layout),
    }
    from_declared = _oracle_from_declared(scenario, found.declared_refs, switches, layout)
    oracle_run, oracle_plan = _oracle_row(scenario, refs, from_declared, layout)
    runs = _reference_rows(scenario, statics, best, oracle_run, refs, layout)
    runs += [reachable, from_declared.run]
    plans = {"oracle": oracle_run, "specpilot": mine}
    runs.extend(_restart_controls(replace(scenario, method=best_drafter), seed, statics[best], by_name[best], plans,
                                  workers, layout))  # fmt: skip
    runs.append(mine)
    runs.append(lenient)
    meta = {
        "scenario": scenario.name,
        "seed": seed,
        "description": scenario.description,
        "static_goodput": {n: round(g, 2) for n, g in totals.items()},
        "best_static": best,
        "best_static_without_searched_schedules": best_unscheduled,
        "searched_schedules": sorted(searched),
        **_oracle_meta(oracle_plan, refs, from_declared),
        "dynamic": scenario.dynamic,
        "actuation_reasons": mine.notes,
        "lenient_actuation_reasons": lenient.notes,
        "windows_p99_tpot_ms": {r.policy: window_p99(r.outcomes, scenario.window_s, scenario.duration_s) for r in runs},
        "window_s": scenario.window_s,
        "client_timeout_s": scenario.client_timeout_s,
        "objective": scenario.objective.value,
        **_layout_meta(layout),
    }
    return runs, meta


# A candidate drafter's static runs, searched schedules, every configuration by name, and its oracles.
_DrafterReferences = tuple[
    dict[str, PolicyRun], dict[str, SpeculationIntent], dict[str, SpeculationIntent], "OracleReferences"
]


@dataclass(frozen=True)
class _Found:
    """The static runs and searched schedules of every drafter (labels carry a candidate's drafter), which drafter
    each runs, and the oracles: the best over every drafter, and the declared drafter's alone."""

    statics: dict[str, PolicyRun]
    searched: dict[str, SpeculationIntent]
    by_name: dict[str, SpeculationIntent]
    drafter_of: dict[str, str]
    refs: OracleReferences
    declared_refs: OracleReferences


def _search_declared(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    statics: dict[str, PolicyRun],
    support: ThresholdSupport,
    theta: Sequence[SpeculationIntent],
    workers: int,
    say: Callable[[str], None],
    layout: Layout,
) -> _Found:
    """The declared drafter's band search (where the engine takes a per-batch schedule) and its oracles."""
    searched = (_band_search(scenario, seed, statics, workers, say, layout)
                if support is ThresholdSupport.BATCH_SCHEDULE else {})  # fmt: skip
    by_name = {**{oracles.label(i): i for i in theta}, **searched}
    declared = oracles.label(intent_from_spec(closed_loop_spec(scenario)))
    refs = _oracle_references(scenario, seed, items, preset_for(scenario), statics, by_name, _totals(scenario, statics),
                              layout, declared)  # fmt: skip
    say(f"{scenario.name}: oracles done in {refs.wall_s:.1f}s ({refs.replayed_plans} plans replayed)")
    return _Found(statics, searched, by_name, dict.fromkeys(statics, scenario.method), refs, refs)


def _with_drafter(found: _Found, scenario: Scenario, drafter: str, references: _DrafterReferences) -> _Found:
    """`found` with a candidate drafter's runs, schedules and oracles (`_drafter_references`) added; the oracle is the
    better of the two."""
    more, more_searched, more_by_name, more_refs = references
    return replace(
        found,
        statics={**found.statics, **more},
        searched={**found.searched, **more_searched},
        by_name={**found.by_name, **more_by_name},
        drafter_of={**found.drafter_of, **dict.fromkeys(more, drafter)},
        refs=max(found.refs, more_refs, key=lambda r: _goodput(scenario, r.oracle.outcomes)),
    )


def _reference_rows(
    scenario: Scenario,
    statics: Mapping[str, PolicyRun],
    best: str,
    oracle_run: PolicyRun,
    refs: OracleReferences,
    layout: Layout,
) -> list[PolicyRun]:
    """The fixed rows (off, the declared config always on, the static threshold at batch 32 where the engine has
    one, the best static) and the oracle's two rows."""
    k = scenario.num_speculative_tokens
    runs = [
        replace(statics["off"], policy="off"),
        replace(statics[oracles.label(oracles.static(k))], policy="always-on"),
    ]
    threshold_32 = oracles.label(oracles.threshold(k, 32, scenario.max_num_seqs))
    if threshold_32 in statics:  # a version that cannot stop speculating at a batch size has no such row
        runs.append(replace(statics[threshold_32], policy="static-threshold"))
    runs.append(replace(statics[best], policy="best-static"))
    runs.append(oracle_run)
    runs.append(_plan_run(scenario, "oracle-within-budget", refs.budgeted_plan, refs.budgeted, refs.wall_s, layout))
    return runs


def _oracle_meta(oracle_plan: list[str] | None, refs: OracleReferences, from_declared: FromDeclared) -> dict[str, Any]:
    """The oracles' plans and the goodput of every candidate plan they chose among, as the report shows them."""
    candidates = {**refs.candidate_goodput, **from_declared.candidate_goodput}
    return {
        "oracle_plan": oracle_plan,
        "oracle_within_budget_plan": refs.budgeted_plan,
        "oracle_candidates": {kind: round(g, 2) for kind, g in candidates.items()},
        "oracle_from_declared_plan": [[at, name] for at, name in from_declared.run.timeline],
        "oracle_from_declared_candidates": {kind: round(g, 2) for kind, g in from_declared.candidate_goodput.items()},
    }


def _layout_meta(layout: Layout) -> dict[str, Any]:
    """The replicas and rollout a run served on; nothing for the one-replica outage layout."""
    if layout.outage:
        return {}
    return {
        "replicas": layout.replicas,
        "balancer": layout.balancer.value,
        "max_surge": layout.max_surge,
        "max_unavailable": layout.max_unavailable,
        "drain_s": layout.drain_s,
    }


def _totals(scenario: Scenario, statics: Mapping[str, PolicyRun]) -> dict[str, float]:
    return {n: _goodput(scenario, r.outcomes) for n, r in statics.items()}


def _goodput(scenario: Scenario, outcomes: Sequence[Outcome]) -> float:
    return oracles.goodput(outcomes, scenario.duration_s, scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s)


def _plan_run(
    scenario: Scenario, policy: str, plan: Sequence[str], replay: Replica | Fleet, wall_s: float, layout: Layout
) -> PolicyRun:
    """A replayed per-window plan as a row; its config names what it ran, in the order it first ran it."""
    return _row(scenario, policy, "/".join(dict.fromkeys(plan)), replay, wall_s, layout)


def drafter_label(scenario: Scenario, drafter: str, name: str) -> str:
    """A configuration's name with its drafter first where that is not the declared one (as Fleet.label)."""
    return name if drafter == scenario.method else f"{drafter} {name}"


def _drafter_references(
    scenario: Scenario,
    drafter: str,
    seed: int,
    items: Sequence[Arrival],
    theta: Sequence[SpeculationIntent],
    workers: int,
    say: Callable[[str], None],
    layout: Layout,
) -> _DrafterReferences:
    """One candidate drafter's static runs (Theta without "off", which is the declared drafter's), its band search
    and its oracles, searched exactly as the declared drafter's and independently of the policy; every label
    carries the drafter (drafter_label)."""
    other = replace(scenario, method=drafter)
    theta_on = [i for i in theta if i.enabled]
    statics, _ = _theta_and_closed_loop_runs(other, seed, theta_on, workers, say, layout, closed_loop=False)
    searched = _band_search(other, seed, statics, workers, say, layout)
    by_name = {**{oracles.label(i): i for i in theta_on}, **searched}
    refs = _oracle_references(other, seed, items, preset_named(other.preset), statics, by_name,
                              _totals(other, statics), layout)  # fmt: skip
    say(f"{scenario.name}: {drafter} oracles done in {refs.wall_s:.1f}s")
    named = {drafter_label(scenario, drafter, n): r for n, r in statics.items()}
    named = {n: replace(r, policy=n, config=n) for n, r in named.items()}
    refs = replace(refs, oracle_plan=[drafter_label(scenario, drafter, n) for n in refs.oracle_plan],
                   budgeted_plan=[drafter_label(scenario, drafter, n) for n in refs.budgeted_plan])  # fmt: skip
    return (
        named,
        {drafter_label(scenario, drafter, n): i for n, i in searched.items()},
        {drafter_label(scenario, drafter, n): i for n, i in by_name.items()},
        refs,
    )


def _theta_and_closed_loop_runs(
    scenario: Scenario,
    seed: int,
    theta: Sequence[SpeculationIntent],
    workers: int,
    say: Callable[[str], None],
    layout: Layout = ONE_REPLICA,
    closed_loop: bool = True,
) -> tuple[dict[str, PolicyRun], list[PolicyRun]]:
    """Every static configuration of Theta (by label, in Theta's order), and with `closed_loop` specpilot's and the
    lenient closed loop (in that order).

    The fixed configurations and both closed loops run first; a schedule table that never leaves one static K within
    the batch sizes that static run reached replays it step for step, so it reuses that run instead of a new one.
    """
    tables = [i for i in theta if i.batch_schedule]
    fixed = [i for i in theta if not i.batch_schedule]
    jobs: list[tuple[Any, ...]] = [(_static_job, (scenario, intent, seed, layout)) for intent in fixed]
    if closed_loop:
        jobs.append((_specpilot_job, (scenario, theta[0], seed, layout)))
        jobs.append((_lenient_job, (scenario, theta[0], seed, layout)))
    done = _run_jobs(jobs, workers)
    loops = done[-2:] if closed_loop else []
    statics = {r.policy: r for r in done[: len(done) - len(loops)]}
    reused: dict[str, PolicyRun] = {}
    for t in tables:
        for i in fixed:
            run = statics[oracles.label(i)]
            if i.num_speculative_tokens and i.enabled and same_as_static(scenario, t, run, i.num_speculative_tokens):
                reused[oracles.label(t)] = _as_static(scenario, t, run)
                break
    rest = [(_static_job, (scenario, t, seed, layout)) for t in tables if oracles.label(t) not in reused]
    extra = _run_jobs(rest, workers) if rest else []
    by_label = {**statics, **reused, **{r.policy: r for r in extra}}
    statics = {oracles.label(i): by_label[oracles.label(i)] for i in theta}
    for r in [*statics.values(), *loops]:
        say(
            f"{scenario.name}: {r.policy} done in {r.wall_s:.1f}s"
            + (" (same steps as K, reused)" if r.policy in reused else "")
        )
    return statics, loops


def _band_search(
    scenario: Scenario,
    seed: int,
    statics: dict[str, PolicyRun],
    workers: int,
    say: Callable[[str], None],
    layout: Layout = ONE_REPLICA,
) -> dict[str, SpeculationIntent]:
    """The per-batch-size schedules of Theta, found through the simulator (adds their runs to `statics`).

    A coordinate search over one K per band (oracles.band_moves): from the best static K everywhere, the bands the
    trace reached (oracles.reachable_bands of the largest batch of any first-stage run), lowest first, so that a
    staircase can be built band by band; in each band the neighbouring schedules run over the whole trace (in
    parallel) and the best by the oracles' score is kept when it beats the current one. Returns the schedules it
    ran, by label.
    """
    k_max = scenario.num_speculative_tokens
    tpot_slo, ttft_slo = scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s

    def score(ks: tuple[int, ...]) -> oracles.Score:
        run = statics[oracles.label(oracles.band_schedule(ks, scenario.max_num_seqs))]
        return oracles.score(run.outcomes, scenario.duration_s, tpot_slo, ttft_slo)

    peak = max(r.peak_running for r in statics.values())
    bands = oracles.reachable_bands(peak, scenario.max_num_seqs)
    current = max(((k,) * bands for k in range(1, k_max + 1)), key=score)
    searched: dict[str, SpeculationIntent] = {}
    for band in range(bands):
        moves = oracles.band_moves(current, band, k_max)
        fresh = {oracles.label(i): i for i in (oracles.band_schedule(m, scenario.max_num_seqs) for m in moves)}
        fresh = {name: i for name, i in fresh.items() if name not in statics}
        for run in (
            _run_jobs([(_static_job, (scenario, i, seed, layout)) for i in fresh.values()], workers) if fresh else []
        ):
            statics[run.policy] = run
            say(f"{scenario.name}: {run.policy} done in {run.wall_s:.1f}s (band search)")
        searched.update(fresh)
        current = max([current, *moves], key=score)  # ties: the current schedule
    return searched


# The kinds of candidate plans: the free-start oracle's, those of them that keep the budget (oracle-within-budget's),
# and those that start in the declared configuration (oracle-from-declared's, with its switches at the earliest refit).
FREE_START = ("switching DP", "DP within the budget", "switching DP held to the budget", "best constant")
WITHIN_BUDGET = FREE_START[1:]
FROM_DECLARED = ("switching DP from the declared config", "DP from the declared config within the budget",
                 "the declared config kept")  # fmt: skip


@dataclass(frozen=True)
class OracleReferences:
    """The switching oracle, unbounded and within the deployment's budget, and the plans that start in the declared
    configuration: plans, replays and their goodput."""

    oracle_plan: list[str]  # configuration label per window
    oracle: Replica | Fleet
    budgeted_plan: list[str]
    budgeted: Replica | Fleet
    candidate_goodput: dict[str, float]  # replayed goodput of each candidate plan, by kind
    replayed_plans: int
    wall_s: float  # the replays' time, the DP's own left out
    from_declared: dict[str, tuple[list[str], Replica | Fleet]] = field(default_factory=dict)  # FROM_DECLARED plans


def _oracle_references(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    preset: Preset,
    statics: Mapping[str, PolicyRun],
    by_name: Mapping[str, SpeculationIntent],
    totals: Mapping[str, float],
    layout: Layout = ONE_REPLICA,
    declared: str | None = None,
) -> OracleReferences:
    """O_DP, and the same held to the deployment's actuation budget, which every closed-loop actuation must pass.

    The budgeted one is a reference: how much of the oracle's margin is switching more often than the deployment
    allows. The DP prices each window from each configuration's own run (its own queue state): an estimate, blind to
    what a restart does to the queue. So every candidate plan is replayed through the simulator, restarts included,
    and each reference is the best replay among its candidates: the budgeted plans are in the oracle's search space
    too, and so is the best constant plan, so neither falls below any member of Theta.

    With `declared` (the label of the configuration the CR declares), the FROM_DECLARED plans are replayed too, for
    oracle-from-declared (`_oracle_from_declared`); the oracle's own choice among them is `_oracle_row`'s.
    """
    tpot_slo, ttft_slo = scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s
    per_window = {
        n: oracles.window_scores(r.outcomes, scenario.window_s, scenario.duration_s, tpot_slo, ttft_slo)
        for n, r in statics.items()
    }
    cost_s = restart_cost_s(preset, layout)
    switching = oracles.switching_plan(per_window, cost_s, scenario.window_s)
    started = time.monotonic()
    budget = window_budget(closed_loop_spec(scenario).autotune.budget)
    constant = max(totals, key=lambda n: totals[n])
    candidates = {
        "switching DP": switching,
        "DP within the budget": oracles.switching_plan(per_window, cost_s, scenario.window_s, budget),
        "switching DP held to the budget": oracles.held_to_budget(switching, scenario.window_s, budget),
        "best constant": [constant] * len(switching),
    }
    if declared is not None:
        candidates.update(zip(FROM_DECLARED, (
            oracles.switching_plan(per_window, cost_s, scenario.window_s, start=declared),
            oracles.switching_plan(per_window, cost_s, scenario.window_s, budget, start=declared),
            [declared] * len(switching),
        ), strict=True))  # fmt: skip
    replays: dict[tuple[str, ...], Replica | Fleet] = {}
    for plan in candidates.values():
        if tuple(plan) not in replays:
            replays[tuple(plan)] = (
                _constant_plan(scenario, preset, by_name[plan[0]], seed, statics[plan[0]])
                if len(set(plan)) == 1
                else run_plan(scenario, [by_name[n] for n in plan], seed, items, layout)
            )
    replayed = {kind: _goodput(scenario, replays[tuple(plan)].outcomes) for kind, plan in candidates.items()}

    def best_of(kinds: Sequence[str]) -> tuple[list[str], Replica | Fleet]:
        kind = max(kinds, key=lambda k: replayed[k])  # ties: the first listed
        return candidates[kind], replays[tuple(candidates[kind])]

    plan_names, oracle = best_of(FREE_START)
    budgeted_names, budgeted = best_of(WITHIN_BUDGET)
    from_declared = {kind: (candidates[kind], replays[tuple(candidates[kind])]) for kind in FROM_DECLARED
                     if kind in candidates}  # fmt: skip
    wall_s = time.monotonic() - started
    return OracleReferences(plan_names, oracle, budgeted_names, budgeted, replayed, len(replays), wall_s, from_declared)


def _constant_plan(
    scenario: Scenario, preset: Preset, intent: SpeculationIntent, seed: int, source: PolicyRun
) -> Replica:
    """A plan that never switches is that static run (same seed, same requests): its outcomes, not a rerun."""
    replica = Replica(scenario, preset, intent, seed)
    replica.outcomes, replica.timeline, replica.series = source.outcomes, source.timeline, source.series
    return replica


@dataclass(frozen=True)
class FromDeclared:
    """oracle-from-declared: the best replay, by goodput, of the plans that start in the declared configuration."""

    run: PolicyRun  # the row
    plan: list[str] | None  # its configuration per window; None where it is a switch at the earliest refit
    candidate_goodput: dict[str, float]  # every candidate's goodput, by kind


def _oracle_from_declared(
    scenario: Scenario, refs: OracleReferences, switches: Mapping[str, PolicyRun], layout: Layout
) -> FromDeclared:
    """The best of the declared drafter's FROM_DECLARED plans (`refs`, replayed by _oracle_references) and of
    `switches`: runs that start as declared and switch once at the earliest refit (best-static-reachable, and per
    candidate drafter its best static config, _drafter_switches). Ties: the first listed."""
    wall_s = refs.wall_s + sum(run.wall_s for run in switches.values())
    candidates: dict[str, tuple[PolicyRun, list[str] | None]] = {
        kind: (_plan_run(scenario, "oracle-from-declared", plan, replay, wall_s, layout), plan)
        for kind, (plan, replay) in refs.from_declared.items()
    }
    for kind, run in switches.items():
        candidates[kind] = (replace(run, policy="oracle-from-declared", wall_s=wall_s), None)
    goodput = {kind: refs.candidate_goodput[kind] for kind in refs.from_declared}
    goodput.update((kind, _goodput(scenario, run.outcomes)) for kind, run in switches.items())
    run, plan = candidates[max(goodput, key=lambda kind: goodput[kind])]
    return FromDeclared(run, plan, goodput)


def _drafter_switches(
    scenario: Scenario,
    seed: int,
    items: Sequence[Arrival],
    statics: Mapping[str, PolicyRun],
    by_name: Mapping[str, SpeculationIntent],
    drafter_of: Mapping[str, str],
    best: str,
    reachable: PolicyRun,
    layout: Layout,
) -> dict[str, PolicyRun]:
    """Per candidate drafter, the declared config until the earliest refit, then that drafter's best static config
    (`reachable` where that is the best static config of all, `best`)."""
    tpot_slo, ttft_slo = scenario.tpot_slo_ms / 1000, scenario.ttft_slo_s
    out: dict[str, PolicyRun] = {}
    for drafter in scenario.candidates:
        name = oracles.best_static({n: oracles.score(r.outcomes, scenario.duration_s, tpot_slo, ttft_slo)
                                    for n, r in statics.items() if drafter_of[n] == drafter})  # fmt: skip
        out[f"best static of {drafter} from the earliest refit"] = (
            reachable if name == best
            else _best_static_reachable(scenario, seed, items, statics[name], by_name[name], layout, drafter)
        )  # fmt: skip
    return out


def _oracle_row(
    scenario: Scenario, refs: OracleReferences, from_declared: FromDeclared, layout: Layout
) -> tuple[PolicyRun, list[str] | None]:
    """The oracle and its plan per window: the best of its free-start candidates (`refs`) and oracle-from-declared,
    whose candidates a free start may run too (ties: the free start's). None for the plan where the winner is a
    switch at the earliest refit."""
    free = _plan_run(scenario, "oracle", refs.oracle_plan, refs.oracle, refs.wall_s, layout)
    if _goodput(scenario, from_declared.run.outcomes) > _goodput(scenario, free.outcomes):
        return replace(from_declared.run, policy="oracle", wall_s=refs.wall_s), from_declared.plan
    return free, refs.oracle_plan
