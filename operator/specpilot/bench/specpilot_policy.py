"""The one adapter between the benchmark and specpilot's policy code (re-point it when decision.py changes).

It does per evaluation what operator/specpilot/autotune/evaluation.py does in the operator: measure through
`evaluate.measure` (here against the simulated Prometheus of bench.queries), build PolicyInputs with the running
intent, the rollout state and the config's start time, call `decision.decide`, and when the decision actuates,
`decision.record_actuation`. The spec is an ordinary SpeculativeDeployment in mode Auto with the defaults a user gets
(interval 60s, window 5m, 3 agreeing evaluations over 10m, budget 15m / 2 per hour / 8 per day), vLLM 0.32.0, and
the scenario's TTFT SLO as latency.ttftDeadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from specpilot.api import v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.api.rollout import max_surge, max_unavailable
from specpilot.autotune.evaluate import effective_window, measure, query_settings
from specpilot.autotune.model.rollcost import restart_cost_seconds
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.model.stepcost import PROFILES
from specpilot.autotune.policy.decision import PolicyInputs, PolicyState, decide, record_actuation
from specpilot.autotune.signals.promql import Scope
from specpilot.bench.queries import ScrapeHistory, SimQueryClient
from specpilot.sim.presets import Preset
from specpilot.vllm.intent import SpeculationIntent, intent_from_spec
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
VERSION = "0.32.0"
DRAFT_MODELS = {"eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle": "yuhuili/EAGLE-LLaMA3-Instruct-70B",
                "draft_model": "meta-llama/Llama-3.2-1B-Instruct"}  # fmt: skip


TARGETS = {"llama8b-h100": "meta-llama/Llama-3.1-8B-Instruct", "llama70b-4xh100": "meta-llama/Llama-3.3-70B-Instruct"}


def to_datetime(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


def to_seconds(at: datetime) -> float:
    return (at - EPOCH).total_seconds()


def bench_spec(
    preset: Preset,
    method: str,
    k: int,
    max_num_seqs: int,
    max_model_len: int,
    acceptance: dict[str, float] | None = None,
    ttft_slo_s: float | None = None,
    *,
    replicas: int = 1,
    max_surge: int = 0,
) -> Any:
    """The SpeculativeDeployment the closed loop runs: defaults, mode Auto, batch threshold tuning on.

    `acceptance` overrides spec.autotune.acceptance (disableBelow / enableAbove) for the sensitivity variant.
    `ttft_slo_s`: the scenario's TTFT SLO, declared as spec.autotune.latency.ttftDeadline the way a user who is
    judged on it declares it (the scenario's TPOT SLO stays undeclared: the guarded metric and p99Target keep their
    defaults). `replicas` and `max_surge`: spec.replicas and spec.rollout.maxSurge (the other rollout fields keep
    their defaults).
    """
    speculation: dict[str, Any] = {"method": method, "numSpeculativeTokens": k}
    if method in DRAFT_MODELS:
        speculation["draft"] = {"model": DRAFT_MODELS[method]}
    doc = {
        "apiVersion": f"{v1alpha1.GROUP}/{v1alpha1.VERSION}",
        "kind": v1alpha1.KIND,
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {
            **({"replicas": replicas} if replicas != 1 else {}),
            **({"rollout": {"maxSurge": max_surge}} if max_surge else {}),
            "engine": {
                "image": f"vllm/vllm-openai:v{VERSION}",
                "version": VERSION,
                "maxModelLen": max_model_len,
                "maxNumSeqs": max_num_seqs,
            },
            "target": {"model": TARGETS.get(preset.name, "meta-llama/Llama-3.1-8B-Instruct")},
            "speculation": speculation,
            "autotune": {"mode": "Auto", "prometheus": {"url": "http://simulated-prometheus:9090"},
                         "batchThreshold": {"tune": True, "min": 8, "max": max_num_seqs},
                         **({"acceptance": acceptance} if acceptance else {}),
                         **({"latency": {"ttftDeadline": f"{round(ttft_slo_s * 1000)}ms"}} if ttft_slo_s else {})},
        },
    }  # fmt: skip
    return v1alpha1.parse_resource(doc).spec


@dataclass
class SpecpilotController:
    """specpilot's autotuner in closed loop over one simulated deployment."""

    spec: Any
    preset: Preset
    state: PolicyState = field(default_factory=PolicyState)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def interval_s(self) -> float:
        return parse_duration(self.spec.autotune.interval)

    @property
    def scrape_interval_s(self) -> float:
        return parse_duration(self.spec.autotune.scrape_interval)

    @property
    def restart_cost_s(self) -> float:
        """The preset's restart priced on the spec's rollout path (rollcost): an outage on one replica without
        surge, the capacity the waves remove at N replicas, none with surge."""
        spec = self.spec
        return restart_cost_seconds(self.preset.restart_s, spec.replicas, max_surge(spec), max_unavailable(spec))

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
    ) -> SpeculationIntent | None:
        """One evaluation at virtual time `now`; the intent to roll out, or None to keep the running one."""
        window = effective_window(self.spec.autotune)
        scope = Scope(namespace="bench", deployment="bench", config_hash="sim")
        names = metric_names_for(VllmVersion.parse(self.spec.engine.version))
        client = SimQueryClient(names, scope, window, history, to_seconds, *query_settings(self.spec))
        at = to_datetime(now)
        measurements = measure(self.spec, scope, client, at)
        model = PROFILES.get(self.preset.name, PROFILES["llama8b-h100"])
        inputs = PolicyInputs(
            spec=self.spec,
            current=current,
            measurements=measurements,
            window=window,
            rollout_in_progress=rollout_in_progress,
            config_since=None if config_since is None else to_datetime(config_since),
            fit=FitSettings(model=model, restart_cost_s=self.restart_cost_s),
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
