"""N vLLM replicas behind a balancer, rolled one wave at a time with drain (the benchmark's imperative shell).

A `Fleet` is what a SpeculativeDeployment of N >= 2 replicas (or one with surge) runs: N pods (each a `Replica`
of bench.runner fed only the requests the balancer sends it), a balancer, and rollouts as spec.rollout and
docs/rollout.md describe them:

- The balancer sends each arrival to one serving pod: round robin (a Kubernetes Service), or the pod with the fewest
  outstanding requests, queued or running (an inference gateway's endpoint picker). Pods that drain or start take
  none; an arrival with no serving pod is lost (`failed`).
- A rollout replaces pods in waves: an old pod is taken out of the endpoints (no new arrivals) and drains, its
  requests in flight finishing for up to the drain time (spec.rollout.drainSeconds, vLLM's --shutdown-timeout);
  whatever is still in flight then is aborted (`failed`). A pod holds its GPUs until it has drained; its replacement
  then loads for the preset's restart time and joins with the new configuration. At most maxUnavailable pods are
  out of service at once, and with maxSurge the replacement loads before an old pod drains (N + maxSurge pods'
  worth of GPUs).
- The progressive path (`canary`, `promote`, `rollback`): one pod changes first and serves next to the others, then
  the rest roll to it or it rolls back.
- Each pod runs a drafter and a config (`Config`): a CR's candidate drafter runs on the trial pod only. The
  operator's own evaluation decides (`run_operator`: its measurements through the simulated Prometheus, its trials
  and their analysis), and `converge` brings the pods to what its reconcile renders.

One replica without surge is not a Fleet: bench.runner.Replica keeps its outage (every restart aborts what is in
flight and loses the arrivals until the pod is back).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from specpilot.bench import oracles
from specpilot.bench.layout import Balancer, Layout
from specpilot.bench.oracles import Outcome
from specpilot.bench.queries import Sample, ScrapeHistory, merge_pods
from specpilot.bench.runner import SCRAPE_S, Replica, preset_for
from specpilot.bench.scenarios import Arrival, Scenario
from specpilot.sim.engine import Engine
from specpilot.sim.presets import Preset
from specpilot.vllm.intent import SpeculationIntent

if TYPE_CHECKING:
    from specpilot.bench.specpilot_policy import OperatorController

# What a pod runs: its drafter (a key of the preset's drafters, the scenario's method unless a candidate's) and config.
Config = tuple[str, SpeculationIntent]

# How often a rollout in progress looks at its pods (a drained pod is noticed within this time).
ROLL_TICK_S = 0.5


class PodState(enum.Enum):
    STARTING = "starting"  # loading: holds its GPUs, takes no requests
    SERVING = "serving"
    DRAINING = "draining"  # out of the endpoints: finishes its requests in flight, then releases its GPUs


@dataclass
class Pod:
    uid: int
    replica: Replica
    state: PodState
    items: list[Arrival] = field(default_factory=list)  # what the balancer sent it, in order
    ready_at: float = 0.0
    drain_deadline: float = math.inf

    @property
    def outstanding(self) -> int:
        """Requests sent to it and not finished: queued, running, or not yet seen by its engine."""
        e = self.replica.engine
        return len(e.running) + len(e.waiting) + len(self.items) - self.replica.next_arrival


def pick(balancer: Balancer, serving: Sequence[Pod], turn: int) -> Pod:
    """The pod an arrival goes to; `turn` counts the arrivals balanced so far (round robin's position, and where
    least-outstanding starts looking, so that ties rotate)."""
    start = turn % len(serving)
    rotated = [*serving[start:], *serving[:start]]
    if balancer is Balancer.ROUND_ROBIN:
        return rotated[0]
    return min(rotated, key=lambda p: p.outstanding)


@dataclass
class Roll:
    """A rollout in progress: the old pods still to replace and how many replacements are still to start."""

    target: Config
    pending: list[Pod]
    to_start: int
    canary: bool = False


# How many sets of pods keep their merged scrapes: the main pods and the trial pod's, asked for in turn each interval.
MERGED_SETS = 2


@dataclass
class Fleet:
    """N pods behind a balancer (module docstring), with the attributes bench.runner's runs read of a Replica."""

    scenario: Scenario
    preset: Preset
    intent: SpeculationIntent
    seed: int
    layout: Layout
    method: str = ""  # the deployment's drafter; "" is the scenario's
    pods: list[Pod] = field(default_factory=list)
    retired: list[Pod] = field(default_factory=list)
    roll: Roll | None = None
    lost: list[Outcome] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    series: list[tuple[float, float, float, float]] = field(default_factory=list)  # t, running, waiting, K now
    actuations: int = 0  # rollouts started: restarts, one-pod trials and their rollbacks
    changes: int = 0  # rollouts that changed what every pod serves: a restart to another config, a promotion
    trials: int = 0  # one-pod trials started
    generation: int = 0
    config_since: float = 0.0
    next_arrival: int = 0
    now: float = 0.0
    next_scrape: float = SCRAPE_S
    turn: int = 0
    _uids: int = 0
    # merged samples per set of serving pods (the main pods', the trial pod's): the last MERGED_SETS sets asked for
    _merged: dict[tuple[int, ...], dict[float, Sample]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.method = self.method or self.scenario.method
        for _ in range(self.layout.replicas):
            self.pods.append(Pod(self._uid(), self._replica(self.config), PodState.SERVING))
        self.timeline.append((0.0, self.label(self.config)))

    @property
    def config(self) -> Config:
        """The deployment's drafter and configuration, as its pod template says."""
        return self.method, self.intent

    def label(self, config: Config) -> str:
        """A configuration's name in timelines and scrape series: the drafter first where it is not the scenario's."""
        drafter, intent = config
        return oracles.label(intent) if drafter == self.scenario.method else f"{drafter} {oracles.label(intent)}"

    @staticmethod
    def runs(pod: Pod) -> Config:
        return pod.replica.scenario.method, pod.replica.intent

    def _uid(self) -> int:
        self._uids += 1
        return self._uids

    def _replica(self, config: Config) -> Replica:
        # One seed for every pod: a request's acceptance draws depend on the run's seed and the request, not on the
        # pod it lands on, so runs that route it differently stay paired.
        drafter, intent = config
        replica = Replica(replace(self.scenario, method=drafter), self.preset, intent, self.seed)
        replica.history.target = self.label(config)
        return replica

    # ---------------------------------------------------------------------------------- what the runs read

    @property
    def down_until(self) -> float:
        """Until when a rollout is in progress (infinite while one is), as Replica.down_until for the runs."""
        return math.inf if self.roll is not None else self.config_since

    @property
    def rolling(self) -> bool:
        return self.roll is not None

    @property
    def outcomes(self) -> list[Outcome]:
        out = list(self.lost)
        for pod in (*self.retired, *self.pods):
            out += pod.replica.outcomes
        return out

    @property
    def peak_running(self) -> int:
        return max(p.replica.engine.peak_running for p in (*self.retired, *self.pods))

    @property
    def history(self) -> ScrapeHistory:
        """The deployment's scrapes as Prometheus would hold them: the serving pods of the running configuration,
        one merged sample per scrape instant up to the fleet's clock (queries.merge_pods). Merged samples are kept
        while the same pods serve: every pod has stepped past those instants, so their merge cannot change."""
        return self.history_of(self.config)

    def history_of(self, config: Config) -> ScrapeHistory:
        """The scrapes of the serving pods that run `config` (the running one, or the trial pod's), merged."""
        pods = [p for p in self.pods if p.state is PodState.SERVING and self.runs(p) == config]
        target = self.label(config)
        key = tuple(p.uid for p in pods)
        merged = self._merged.pop(key, {})
        self._merged[key] = merged  # the most recently asked for last
        while len(self._merged) > MERGED_SETS:
            del self._merged[next(iter(self._merged))]
        by_t: dict[float, dict[int, Sample]] = {}
        for pod in pods:
            for sample in reversed(pod.replica.history.series.get(target, [])):
                if sample.t > self.now or sample.stale:  # past the fleet's clock (other pods may not be there yet)
                    continue
                if sample.t in merged:
                    break
                by_t.setdefault(sample.t, {})[pod.uid] = sample
        for t, samples in by_t.items():
            merged[t] = merge_pods(samples, t)
        history = ScrapeHistory(target=target)
        for t in sorted(merged):
            history.add(merged[t])
        return history

    # ---------------------------------------------------------------------------------- serving

    def run_until(self, t_end: float, items: Sequence[Arrival]) -> None:
        """Serve the arrivals before `t_end`: every pod steps to each arrival, the balancer places it, and a rollout
        in progress advances between them."""
        n = len(items)
        while True:
            t = t_end
            if self.next_arrival < n:
                t = min(t, items[self.next_arrival].at)
            if self.roll is not None or any(p.state is not PodState.SERVING for p in self.pods):
                t = min(t, self.now + ROLL_TICK_S)
            t = max(min(t, self.next_scrape), self.now)
            for pod in self.pods:
                pod.replica.run_until(t, pod.items)
            self.now = t
            self._advance_roll(t)
            while self.next_arrival < n and items[self.next_arrival].at <= t and items[self.next_arrival].at < t_end:
                self._dispatch(items[self.next_arrival])
                self.next_arrival += 1
            self._scrape(t)
            if t >= t_end:
                return

    def _dispatch(self, arrival: Arrival) -> None:
        serving = [p for p in self.pods if p.state is PodState.SERVING]
        if not serving:
            self.lost.append(Outcome(arrival.at, None, None, None, 0, True))
            return
        pick(self.layout.balancer, serving, self.turn).items.append(arrival)
        self.turn += 1

    def _scrape(self, t: float) -> None:
        """The fleet's series for the plots: requests running and waiting over all pods, and K at the mean batch."""
        while self.next_scrape <= t:
            serving = [p for p in self.pods if p.state is not PodState.STARTING]
            running = sum(len(p.replica.engine.running) for p in serving)
            waiting = sum(len(p.replica.engine.waiting) for p in serving)
            spec = serving[0].replica.engine.config.speculation if serving else None
            batch = round(running / len(serving)) if serving else 0
            k_now = 0.0 if spec is None else float(spec.k_for(self.pods[0].replica.version, batch, batch))
            self.series.append((self.next_scrape, float(running), float(waiting), k_now))
            self.next_scrape += SCRAPE_S

    # ---------------------------------------------------------------------------------- rollouts

    def restart(self, intent: SpeculationIntent, now: float, drafter: str | None = None) -> None:
        """Roll the pods to `intent` (run by `drafter`, default the deployment's), one wave at a time: those that run
        another configuration, or every pod when it is the deployment's own (a restart into itself: the restart
        controls)."""
        target = (drafter or self.method, intent)
        live = [p for p in self.pods if p.state is not PodState.DRAINING]
        stale = live if target == self.config else [p for p in live if self.runs(p) != target]
        if target != self.config:
            self.changes += 1
        self._start_roll(target, now, stale, canary=False)
        self.actuations += 1
        self.timeline.append((now, self.label(target)))

    def canary(self, intent: SpeculationIntent, now: float, drafter: str | None = None) -> None:
        """The progressive path's first step: one pod rolls to `intent` (run by `drafter`, default the deployment's),
        the others keep the running configuration."""
        first = next(p for p in self.pods if p.state is PodState.SERVING)
        target = (drafter or self.method, intent)
        self._start_roll(target, now, [first], canary=True)
        self.actuations += 1
        self.trials += 1
        self.timeline.append((now, self.label(target)))

    def promote(self, now: float) -> None:
        """Roll the pods still on the old configuration to the one the canary pod runs."""
        target = self.trial_config
        if target is None:
            raise ValueError("no canary pod to promote")
        self._start_roll(target, now, [p for p in self.pods if self.runs(p) != target], canary=False)
        self.changes += 1

    def rollback(self, now: float) -> None:
        """Roll the canary pod back to the running configuration (an actuation of its own)."""
        self._start_roll(self.config, now, [p for p in self.pods if self.runs(p) != self.config], canary=False)
        self.actuations += 1
        self.timeline.append((now, self.label(self.config)))

    @property
    def trial_config(self) -> Config | None:
        """What the pod that runs other than the deployment runs, if one does."""
        return next((self.runs(p) for p in self.pods if self.runs(p) != self.config), None)

    def converge(self, main: Config, trial: Config | None, now: float) -> None:
        """Bring the pods to what the operator's reconcile renders: every pod on `main`, or with a `trial`, one pod
        (the trial's own Deployment behind the same Service) on it. A trial ending with `main` its config is a
        promotion (the pods still on the old config roll to it), one ending with `main` unchanged a rollback."""
        roll = self.roll
        if roll is not None and roll.canary == (trial is not None) and roll.target == (trial or main):
            return  # the pods are already rolling to what is rendered (the trial pod, or a promotion or rollback)
        running = self.trial_config
        if trial is not None:
            if main == self.config and running != trial:
                self.canary(trial[1], now, trial[0])
            return
        if running is None and main == self.config:
            return
        if running is not None and running == main:
            self.promote(now)
            self.timeline.append((now, self.label(main)))
        elif main == self.config:
            self.rollback(now)
        else:
            self.restart(main[1], now, main[0])

    def _start_roll(self, target: Config, now: float, replace_pods: list[Pod], *, canary: bool) -> None:
        for pod in [p for p in self.pods if p.state is PodState.STARTING]:  # a superseded rollout's pods: deleted
            self._retire(pod, now)
        pending = [p for p in replace_pods if p in self.pods]
        staying = sum(1 for p in self.pods if p.state is not PodState.DRAINING)
        replacements = len(pending) + max(0, self.layout.replicas - staying)  # and any a superseded rollout owed
        self.roll = Roll(target, pending, replacements, canary)
        if not canary:
            self.method, self.intent = target  # the deployment's configuration, as its pod template says from now on
        self.generation += 1
        self.config_since = now
        self._advance_roll(now)

    def _advance_roll(self, now: float) -> None:
        """Drained pods leave, loaded ones serve, then old pods drain and replacements start as the layout allows."""
        for pod in [p for p in self.pods if p.state is PodState.DRAINING]:
            if pod.outstanding == 0 or now >= pod.drain_deadline:
                self._retire(pod, now)
        for pod in self.pods:
            if pod.state is PodState.STARTING and now >= pod.ready_at:
                pod.state = PodState.SERVING
        roll = self.roll
        if roll is None:
            return
        changed = True
        while changed:
            changed = self._drain_one(roll, now) or self._start_one(roll, now)
        if not roll.pending and roll.to_start == 0 and all(p.state is PodState.SERVING for p in self.pods):
            self.roll = None
            if not roll.canary:
                self.method, self.intent = roll.target
                self.config_since = now

    def _drain_one(self, roll: Roll, now: float) -> bool:
        serving = [p for p in self.pods if p.state is PodState.SERVING]
        candidates = [p for p in roll.pending if p.state is PodState.SERVING]
        floor = self.layout.replicas - self.layout.max_unavailable
        if not candidates or len(serving) - 1 < floor:
            return False
        pod = candidates[0]
        roll.pending.remove(pod)
        pod.state = PodState.DRAINING
        pod.drain_deadline = now + self.layout.drain_s
        return True

    def _start_one(self, roll: Roll, now: float) -> bool:
        if roll.to_start == 0 or len(self.pods) >= self.layout.replicas + self.layout.max_surge:
            return False
        replica = self._replica(roll.target)
        replica.down_until = replica.config_since = now + self.preset.restart_s
        replica.engine = Engine(replica.engine.config, seed=self.seed, now=replica.down_until)
        replica.engine.now = now
        replica.history = ScrapeHistory(target=self.label(roll.target))
        self.pods.append(Pod(self._uid(), replica, PodState.STARTING, ready_at=replica.down_until))
        roll.to_start -= 1
        return True

    def _retire(self, pod: Pod, now: float) -> None:
        """The pod leaves: whatever it still runs or queues is aborted (past the drain, or never started)."""
        replica = pod.replica
        replica.run_until(now, pod.items)
        replica.engine.advance_idle(now)
        for r in replica.engine.abort_all():
            replica.outcomes.append(Outcome(r.arrival, None, None, None, r.generated, True))
        for a in pod.items[replica.next_arrival :]:
            replica.outcomes.append(Outcome(a.at, None, None, None, 0, True))
        self.pods.remove(pod)
        self.retired.append(pod)


# ------------------------------------------------------------------------------------------ the operator's loop


def run_operator(
    scenario: Scenario, seed: int, items: Sequence[Arrival], controller: OperatorController, layout: Layout
) -> Fleet:
    """specpilot's closed loop as the operator runs it, for a CR with spec.speculation.candidates: each interval the
    controller concludes an evaluation over the main pods and the trial pod (autotune.evaluation) and says what the
    reconcile would render; the fleet converges to it. Trials, their analysis and promotion are the operator's."""
    fleet = Fleet(scenario, preset_for(scenario), controller.initial_intent(), seed, layout)
    t = 0.0
    while t < scenario.duration_s:
        t = min(t + controller.interval_s, scenario.duration_s)
        fleet.run_until(t, items)
        trial = fleet.trial_config
        slot_ready = trial is not None and any(
            p.state is PodState.SERVING and fleet.runs(p) == trial for p in fleet.pods
        )
        main, wanted = controller.evaluate(
            t,
            main=(fleet.config, fleet.label(fleet.config), fleet.history),
            trial=None if trial is None else (trial, fleet.label(trial), fleet.history_of(trial)),
            trial_ready=slot_ready,
            ready_pods=sum(1 for p in fleet.pods if p.state is PodState.SERVING and fleet.runs(p) == fleet.config),
            rolling=fleet.rolling,
            config_since=fleet.config_since,
        )
        fleet.converge(main, wanted, t)
    return fleet
