"""The one adapter between the benchmark and specpilot's policy code (re-point it when decision.py changes).

It does per evaluation what operator/specpilot/autotune/evaluation.py does in the operator: measure through
`evaluate.measure` (here against the simulated Prometheus of bench.queries), build PolicyInputs with the running
intent, the rollout state and the config's start time, call `decision.decide`, and when the decision actuates,
`budget.record_actuation`. The spec is an ordinary SpeculativeDeployment in mode Auto with the defaults a user gets
(interval 60s, window 5m, 3 agreeing evaluations over 10m, budget 15m / 2 per hour / 8 per day), the scenario's
vLLM version (0.32.0 unless it names another), and the scenario's TTFT SLO as latency.ttftDeadline.

The controller is not handed the simulator's hardware: the CR states what a user states on a real cluster (the target,
tensor parallelism, GPU memory and the GPU product node label of the simulated set-up), and the cost profile and restart
cost come from that spec exactly as the operator derives them (costprofile.fit_settings_for), whatever true profile
the simulator runs. What it learns beyond that, it learns from its own measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specpilot.api import v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.api.timestamps import format_time
from specpilot.autotune.evaluate import Measured, measure, query_settings
from specpilot.autotune.evaluation import choose_intent, conclude, measurement_starts
from specpilot.autotune.model.costprofile import GPU_PRODUCT_LABEL, fit_settings_for
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.policy.budget import MAX_DWELL, dwell_after, quick_reversal_window, record_actuation
from specpilot.autotune.policy.decision import decide, rendered_hash
from specpilot.autotune.policy.state import PolicyInputs, PolicyState
from specpilot.autotune.signals.promql import Scope
from specpilot.bench.oracles import WindowBudget, label
from specpilot.bench.queries import ScrapeHistory, SimQueryClient
from specpilot.bench.scenarios import VLLM_VERSION
from specpilot.reconcile import conditions as cond
from specpilot.reconcile.core import ObservedDeployment, ReconcileInputs
from specpilot.sim.presets import Preset
from specpilot.vllm.intent import SpeculationIntent, intent_from_spec, intent_to_dict
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DRAFT_MODELS = {"eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle": "yuhuili/EAGLE-LLaMA3-Instruct-70B",
                "draft_model": "meta-llama/Llama-3.2-1B-Instruct",
                "draft_model_8b": "meta-llama/Llama-3.1-8B-Instruct"}  # fmt: skip
# A simulator drafter (a key of the preset's drafters) as the CR states it: the method, and the candidate's name in
# spec.speculation.candidates. Drafters of one method are told apart by their draft model (DRAFT_MODELS).
CR_METHODS = {"draft_model_8b": "draft_model"}
CANDIDATE_NAMES = {"draft_model": "draft-1b", "draft_model_8b": "draft-8b", "ngram": "ngram", "eagle3": "eagle3",
                   "eagle": "eagle"}  # fmt: skip


def speculation_config(drafter: str, k: int) -> dict[str, Any]:
    """spec.speculation's drafter fields (method, draft, K) for a simulator drafter."""
    config: dict[str, Any] = {"method": CR_METHODS.get(drafter, drafter), "numSpeculativeTokens": k}
    if drafter in DRAFT_MODELS:
        config["draft"] = {"model": DRAFT_MODELS[drafter]}
    return config


def simulated_drafter(config: v1alpha1.SpeculationConfig) -> str:
    """The simulator drafter a CR's drafter (the declared one or a candidate) runs as."""
    model = config.draft.model if config.draft is not None else None
    for drafter in (*DRAFT_MODELS, *CANDIDATE_NAMES):
        if CR_METHODS.get(drafter, drafter) == config.method.value and DRAFT_MODELS.get(drafter) == model:
            return drafter
    raise ValueError(f"no simulated drafter for method {config.method.value} with draft {model}")


# The nvidia.com/gpu.product label of each GPU class, as NVIDIA's GPU feature discovery writes it; a class without one
# (an AMD GPU) is described by its memory alone.
GPU_PRODUCT_LABELS = {"H100": "NVIDIA-H100-80GB-HBM3", "A100": "NVIDIA-A100-SXM4-80GB", "L4": "NVIDIA-L4"}
DEFAULT_TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


def to_seconds(at: datetime) -> float:
    return (at - EPOCH).total_seconds()


def bench_document(
    preset: Preset,
    method: str,
    k: int,
    max_num_seqs: int,
    max_model_len: int,
    acceptance: dict[str, float] | None = None,
    ttft_slo_s: float | None = None,
    *,
    tpot_slo_s: float | None = None,
    speculation_enabled: bool = True,
    replicas: int = 1,
    max_surge: int = 0,
    time_scale: float = 1.0,
    objective: v1alpha1.AutotuneObjective = v1alpha1.AutotuneObjective.THROUGHPUT,
    version: str = VLLM_VERSION,
    candidates: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The SpeculativeDeployment document the closed loop runs: defaults, mode Auto, batch threshold tuning on.

    The set-up (target, TP, GPU memory and product label) is the preset's, never its step-time numbers.
    `speculation_enabled`: spec.speculation.enabled (a deployment declared without speculation).
    `acceptance` overrides spec.autotune.acceptance (disableBelow / enableAbove) for the sensitivity variant.
    `ttft_slo_s` and `tpot_slo_s`: the scenario's SLOs, declared as spec.autotune.latency.ttftDeadline and
    tpotTarget the way a user who is judged on them declares them (the guarded metric and p99Target keep their
    defaults). `replicas` and `max_surge`: spec.replicas and spec.rollout.maxSurge (the other rollout fields keep
    their defaults). `time_scale`: the scenario's clock (Scenario.time_scale); below 1 every duration the bench
    configures is the default's times it (time_constants_on) and the minimum samples shrink with the window.
    `objective`: spec.autotune.objective, written only when it is not the default. `version`: spec.engine.version
    and the image tag. `candidates`: simulator drafters listed in spec.speculation.candidates, at the declared K.
    """
    speculation: dict[str, Any] = {**speculation_config(method, k), "enabled": speculation_enabled}
    if candidates:
        speculation["candidates"] = [{**speculation_config(c, k), "name": CANDIDATE_NAMES[c]} for c in candidates]
    latency = {
        **({"ttftDeadline": f"{round(ttft_slo_s * 1000)}ms"} if ttft_slo_s else {}),
        **({"tpotTarget": f"{tpot_slo_s * 1000:g}ms"} if tpot_slo_s else {}),
    }
    doc = {
        "apiVersion": f"{v1alpha1.GROUP}/{v1alpha1.VERSION}",
        "kind": v1alpha1.KIND,
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {
            **({"replicas": replicas} if replicas != 1 else {}),
            **({"rollout": {"maxSurge": max_surge}} if max_surge else {}),
            "engine": {
                "image": f"vllm/vllm-openai:v{version}",
                "version": version,
                "maxModelLen": max_model_len,
                "maxNumSeqs": max_num_seqs,
            },
            "target": {"model": preset.target_model or DEFAULT_TARGET},
            "parallelism": {"tensorParallelSize": preset.tensor_parallel_size},
            "resources": {
                "gpusPerReplica": preset.tensor_parallel_size,
                "gpuMemoryGiB": preset.gpu_memory_gib,
                **({"nodeSelector": {GPU_PRODUCT_LABEL: GPU_PRODUCT_LABELS[preset.gpu]}}
                   if preset.gpu in GPU_PRODUCT_LABELS else {}),
            },
            "speculation": speculation,
            "autotune": {"mode": "Auto", "prometheus": {"url": "http://simulated-prometheus:9090"},
                         "batchThreshold": {"tune": True, "min": 8, "max": max_num_seqs},
                         **({"acceptance": acceptance} if acceptance else {}),
                         **({"objective": objective.value}
                            if objective is not v1alpha1.AutotuneObjective.THROUGHPUT else {}),
                         **({"latency": latency} if latency else {})},
        },
    }  # fmt: skip
    return doc if time_scale == 1 else time_constants_on(doc, time_scale)


def time_constants_on(doc: dict[str, Any], scale: float) -> dict[str, Any]:
    """`doc` with its evaluation interval, query window, scrape interval, stabilization, probe interval and budget
    interval on a clock `scale` times the real one, and the minimum samples of a window `scale` times as long at the
    same traffic. The drain stays: a request takes as long to generate in a compressed scenario, and a shorter drain
    would abort what a real one lets finish. The rollout deadline (at least 1m) and the budget's per-hour and per-day
    counts stay too: they bound failures and actuation counts, not how fast a decision is reached."""
    at = v1alpha1.parse_resource(doc).spec.autotune

    def scaled(duration: str) -> str:
        return f"{parse_duration(duration) * scale:g}s"

    doc["spec"]["autotune"] |= {
        "interval": scaled(at.interval), "window": scaled(at.window), "scrapeInterval": scaled(at.scrape_interval),
        "stabilization": scaled(at.stabilization), "probeInterval": scaled(at.probe_interval),
        "budget": {"minInterval": scaled(at.budget.min_interval)},
        "minSamples": {"requests": math.ceil(at.min_samples.requests * scale),
                       "draftTokens": math.ceil(at.min_samples.draft_tokens * scale)},
    }  # fmt: skip
    return doc


def bench_spec(*args: Any, **kwargs: Any) -> Any:
    """The parsed spec of bench_document (same arguments)."""
    return v1alpha1.parse_resource(bench_document(*args, **kwargs)).spec


def window_budget(budget: v1alpha1.BudgetSpec) -> WindowBudget:
    """The deployment's actuation budget as the oracles' plans obey it: the policy's own dwell and reversal rules."""
    dwells = [dwell_after(budget, 0).total_seconds()]
    while dwells[-1] < MAX_DWELL.total_seconds() and (len(dwells) < 2 or dwells[-1] > dwells[-2]):
        dwells.append(dwell_after(budget, len(dwells)).total_seconds())
    quick_s = quick_reversal_window(budget).total_seconds()
    return WindowBudget(budget.max_per_hour, budget.max_per_day, quick_s, tuple(dwells))


def fit_on_clock(spec: Any, time_scale: float) -> FitSettings:
    """The fit the operator derives from the spec, its restart cost and payback horizon on the scenario's clock."""
    fit = fit_settings_for(spec)
    if time_scale == 1:
        return fit
    return replace(fit, restart_cost_s=fit.restart_cost_s * time_scale, horizon_s=fit.horizon_s * time_scale)


@dataclass
class SpecpilotController:
    """specpilot's autotuner in closed loop over one simulated deployment."""

    spec: Any
    time_scale: float = 1.0  # the scenario's clock: the cost profile's restart and payback horizon run on it too
    state: PolicyState = field(default_factory=PolicyState)
    clock_offset_s: float = 0.0  # scenario time 0 on the controller's clock (it lived through an earlier CR)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def interval_s(self) -> float:
        return parse_duration(self.spec.autotune.interval)

    @property
    def scrape_interval_s(self) -> float:
        return parse_duration(self.spec.autotune.scrape_interval)

    def fit(self) -> FitSettings:
        return fit_on_clock(self.spec, self.time_scale)

    def initial_intent(self) -> SpeculationIntent:
        return intent_from_spec(self.spec)

    def evaluate(
        self,
        now: float,
        *,
        current: SpeculationIntent,
        history: ScrapeHistory,
        config_since: float | None,
        rollout_in_progress: bool,
        series_since: float = 0.0,
    ) -> SpeculationIntent | None:
        """One evaluation at virtual time `now`; the intent to roll out, or None to keep the running one.

        `config_since`: when the running config started, None for the one the scenario began with (settled long
        ago); `series_since`: when its series in `history` begin, what the Progressing condition tells the operator
        (how far back a window short of samples may reach)."""
        scope = Scope(namespace="bench", deployment="bench", config_hash=label(current))  # the running config's series
        names = metric_names_for(VllmVersion.parse(self.spec.engine.version))
        offset = self.clock_offset_s
        client = SimQueryClient(names, scope, history, lambda at: to_seconds(at) - offset, *query_settings(self.spec))
        at = to_datetime(now + offset)
        measured = measure(self.spec, scope, client, at, since=to_datetime(series_since + offset))
        inputs = PolicyInputs(
            spec=self.spec,
            current=current,
            measurements=measured,
            window=measured.window,
            rollout_in_progress=rollout_in_progress,
            config_since=None if config_since is None else to_datetime(config_since + offset),
            fit=self.fit(),
        )
        decision, self.state = decide(inputs, self.state, at)
        self.decisions.append(
            {"t": now, "action": decision.action.value, "actuate": decision.actuate, "reason": decision.reason,
             "gate": decision.gate}
        )  # fmt: skip
        if not decision.actuate:
            return None
        self.state = record_actuation(self.state, decision, current, at, self.spec.autotune.budget)
        return decision.target


# What one pod group runs, what the controller calls it in its scrapes, and those scrapes.
Group = tuple[tuple[str, SpeculationIntent], str, ScrapeHistory]


@dataclass
class OperatorController:
    """specpilot's autotune as the operator runs it, for a CR that lists candidate drafters: each evaluation is
    autotune.evaluation.conclude over the stored status (the main pods' measurements, and the trial pod's in the
    canary slot), its fields merged into status as the API server stores a merge patch, then
    evaluation.choose_intent says what the reconcile renders: the main pods' config and drafter, and the trial
    pod's. Trials of candidates and of autotune changes, their analysis, verdicts and promotion are the operator's
    own code; the bench only supplies the status the reconcile would have written (effective config, the trial
    slot's readiness, the rollout's Progressing condition)."""

    spec: Any
    document: dict[str, Any]
    time_scale: float = 1.0  # the scenario's clock (SpecpilotController.time_scale)
    status: dict[str, Any] = field(default_factory=dict)
    clock_offset_s: float = 0.0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    event_records: list[dict[str, Any]] = field(default_factory=list)  # posted events: t, type, reason, message

    @classmethod
    def of(cls, document: dict[str, Any], time_scale: float = 1.0) -> OperatorController:
        return cls(v1alpha1.parse_resource(document).spec, document, time_scale)

    @property
    def events(self) -> list[str]:
        """The posted events as text, "<t>s <reason>: <message>" (the rows' notes)."""
        return [f"{e['t']:.0f}s {e['reason']}: {e['message']}" for e in self.event_records]

    @property
    def interval_s(self) -> float:
        return parse_duration(self.spec.autotune.interval)

    def initial_intent(self) -> SpeculationIntent:
        return intent_from_spec(self.spec)

    def _candidate(self, drafter: str) -> v1alpha1.SpeculationCandidate | None:
        return next((c for c in self.spec.speculation.candidates if simulated_drafter(c) == drafter), None)

    def _hash(self, config: tuple[str, SpeculationIntent]) -> str:
        drafter, intent = config
        found = rendered_hash(self.spec, intent, self._candidate(drafter))
        if found is None:
            raise ValueError(f"vLLM {self.spec.engine.version} cannot render {drafter} {intent}")
        return found

    def _measure(self, group: Group, at: datetime, since: datetime | None) -> Measured:
        _, name, history = group
        scope = Scope(namespace="bench", deployment="bench", config_hash=name)
        names = metric_names_for(VllmVersion.parse(self.spec.engine.version))
        offset = self.clock_offset_s
        clock = lambda when: to_seconds(when) - offset  # noqa: E731
        client = SimQueryClient(names, scope, history, clock, *query_settings(self.spec))
        return measure(self.spec, scope, client, at, since=since)

    def _observed(self, main: Group, trial: Group | None, trial_ready: bool, ready_pods: int, rolling: bool,
                  config_since: float) -> ObservedDeployment:  # fmt: skip
        """Write what the reconcile would have recorded of the pods into status; the main Deployment as observed."""
        main_hash = self._hash(main[0])
        effective: dict[str, Any] = {"intent": intent_to_dict(main[0][1]), "configHash": main_hash}
        if trial is not None:
            effective["canary"] = {"configHash": self._hash(trial[0]), "readyReplicas": int(trial_ready)}
        since = format_time(to_datetime(config_since + self.clock_offset_s))
        progressing = {
            "type": cond.PROGRESSING,
            "status": "True" if rolling else "False",
            "reason": "RollingOut" if rolling else "RolloutCompleted",
            "lastTransitionTime": since,
        }
        others = [c for c in self.status.get("conditions", []) if c.get("type") != cond.PROGRESSING]
        self.status.update(effective=effective, readyReplicas=ready_pods, conditions=[progressing, *others])
        return ObservedDeployment(1, 1, ready_pods, ready_pods, ready_pods, ready_pods, main_hash, main_hash, False)

    def evaluate(
        self, now: float, *, main: Group, trial: Group | None, trial_ready: bool, ready_pods: int, rolling: bool,
        config_since: float,
    ) -> tuple[tuple[str, SpeculationIntent], tuple[str, SpeculationIntent] | None]:  # fmt: skip
        """One evaluation at virtual time `now`: (the main pods' drafter and config, the trial pod's or None)."""
        at = to_datetime(now + self.clock_offset_s)
        deployment = self._observed(main, trial, trial_ready, ready_pods, rolling, config_since)
        main_since, slot_since = measurement_starts(self.status)
        measured = self._measure(main, at, main_since)
        outcome = conclude(self.spec, annotations={}, status=self.status, deployment=deployment, measurements=measured,
                           canary=None if trial is None else self._measure(trial, at, slot_since), now=at,
                           window=measured.window, fit=fit_on_clock(self.spec, self.time_scale))  # fmt: skip
        for key, value in outcome.fields.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        conditions = cond.merge_conditions(
            self.status.get("conditions", []), outcome.conditions, generation=1, now=format_time(at)
        )
        self.status["conditions"] = conditions
        self.event_records += [
            {"t": now, "type": e.type, "reason": e.reason, "message": e.message} for e in outcome.events
        ]
        decision = outcome.decision
        self.decisions.append({"t": now, "action": decision.get("action"), "actuate": outcome.actuated,
                               "reason": decision.get("reason"), "gate": decision.get("gate")})  # fmt: skip
        chosen = choose_intent(ReconcileInputs("bench", "bench", "bench", 1, {}, self.document["spec"], self.status,
                                               format_time(at)))  # fmt: skip
        if chosen is None:
            raise ValueError("the bench CR does not parse")
        declared = simulated_drafter(self.spec.speculation)
        drafter = simulated_drafter(chosen.drafter) if chosen.drafter is not None else declared
        if chosen.trial is None:
            return (drafter, chosen.intent), None
        on_trial = simulated_drafter(chosen.trial_candidate) if chosen.trial_candidate is not None else drafter
        return (drafter, chosen.intent), (on_trial, chosen.trial)
