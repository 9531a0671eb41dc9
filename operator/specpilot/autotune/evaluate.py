"""One autotune evaluation through any QueryClient: measure, classify, decide (orchestration, no I/O of its own).

`measure` runs every query of `promql.build_queries` and classifies the answers; `evaluate_once` adds the decision
this evaluation alone supports (agreement, stabilization and budget aside). Both back the operator's round and the
`specpilot evaluate` dry run (cli.evaluate), which hand them a client over a real Prometheus.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from specpilot.api.durations import parse_duration
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import (
    AutotuneSpec,
    SpeculativeDeploymentSpec,
)
from specpilot.autotune.model.costprofile import fit_settings_for
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.policy import framework_rules
from specpilot.autotune.policy.backlog import ttft_deadline_s
from specpilot.autotune.policy.decision import PolicyInputs, PolicyState, desired_intent, evaluate_alone
from specpilot.autotune.signals.measurements import (
    Measurement,
    RawResult,
    classify,
    collect_warnings,
    split_answer,
    unavailable,
)
from specpilot.autotune.signals.promql import (
    Query,
    Scope,
    ScopeSet,
    Signal,
    Window,
    build_queries,
    resolve_window,
)
from specpilot.vllm.intent import SpeculationIntent, intent_to_dict
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion


class QueryClient(Protocol):
    """Anything that answers an instant query with a RawResult (the Prometheus adapter, or a test double)."""

    def query(self, promql: str, at: datetime | None = None) -> RawResult: ...


def effective_window(autotune: AutotuneSpec) -> Window:
    """spec.autotune.window raised to at least 4 scrape intervals and one evaluation interval."""
    return resolve_window(
        parse_duration(autotune.window), parse_duration(autotune.scrape_interval), parse_duration(autotune.interval)
    )


def min_samples_for(autotune: AutotuneSpec) -> dict[Signal, float]:
    return {
        Signal.DRAFT_TOKENS_IN_WINDOW: autotune.min_samples.draft_tokens,
        Signal.REQUESTS_IN_WINDOW: autotune.min_samples.requests,
    }


def measure(
    spec: SpeculativeDeploymentSpec, scope: Scope, client: QueryClient, now: datetime
) -> dict[str, Measurement]:
    """Run and classify every measurement of one evaluation, gates first, all at the same instant `now`."""
    names = metric_names_for(VllmVersion.parse(spec.engine.version))
    queries = build_queries(names, scope, effective_window(spec.autotune), *query_settings(spec))
    sender = _Sender(client, now)
    return _classify_all(queries, [sender.send(q.promql) for q in queries], min_samples_for(spec.autotune))


def query_settings(spec: SpeculativeDeploymentSpec) -> tuple[int, int | None, float | None]:
    """What the queries depend on besides the scope: "short" and the longest possible response (output-length
    queries), and the TTFT deadline (the share of first tokens within it, for the backlog gate)."""
    return (
        spec.autotune.workload.short_output_tokens,
        spec.engine.max_model_len,
        ttft_deadline_s(spec.autotune.latency),
    )


class _Sender:
    """Sends queries at one instant; after a refused or timed-out connection, answers the rest without sending.

    A blackholed Prometheus would otherwise cost timeout x queries per evaluation.
    """

    def __init__(self, client: QueryClient, now: datetime) -> None:
        self.client, self.now = client, now
        self.unreachable: RawResult | None = None
        self.sent = 0

    def send(self, promql: str | None) -> RawResult:
        if promql is None:
            return RawResult()  # never read: the query is unavailable for this version
        if self.unreachable is not None:
            return self.unreachable
        raw = self.client.query(promql, self.now)
        self.sent += 1
        if raw.transport_error or raw.timed_out:
            self.unreachable = replace(raw, transport_error=f"{raw.transport_error} (later queries not sent)")
        return raw


def _classify_all(
    queries: Sequence[Query], answers: Sequence[RawResult], minimums: Mapping[Signal, float]
) -> dict[str, Measurement]:
    """Classify one scope's answers in query order, each gated by the evidence count of the same window."""
    results: dict[str, Measurement] = {}
    for query, raw in zip(queries, answers, strict=True):
        if query.promql is None:
            results[query.signal] = unavailable(query)
            continue
        gate = query.gate
        results[query.signal] = classify(
            query,
            raw,
            gate=results.get(gate) if gate is not None else None,
            min_samples=minimums[gate] if gate is not None else None,
        )
    return results


@dataclass(frozen=True)
class Subject:
    """One scope to measure in a fleet round, under the settings of its own spec; `key` names it in the answer."""

    key: Hashable
    spec: SpeculativeDeploymentSpec
    scope: Scope


@dataclass(frozen=True)
class RoundResult:
    measurements: dict[Hashable, dict[str, Measurement]]
    queries_sent: int


def measure_many(subjects: Sequence[Subject], client: QueryClient, now: datetime) -> RoundResult:
    """Measure many scopes behind one Prometheus connection with one query per metric per query shape.

    Scopes whose queries differ only in the selector (same vLLM metric names, window, scope labels, output-length
    settings and TTFT deadline) share a ScopeSet query; `split_answer` gives each scope exactly the answer its own
    query would have, and each is then classified with its own spec's evidence minimums, so the result equals
    `measure` per scope. Measurements record the scope's own query (what a person would run to check the number),
    not the grouped one.
    """
    batches: dict[tuple[Any, ...], list[Subject]] = {}
    for subject in subjects:
        names = metric_names_for(VllmVersion.parse(subject.spec.engine.version))
        window = effective_window(subject.spec.autotune)
        settings = query_settings(subject.spec)
        batches.setdefault((names, window, subject.scope.labels(), settings), []).append(subject)
    sender = _Sender(client, now)
    out: dict[Hashable, dict[str, Measurement]] = {}
    for (names, window, labels, settings), members in batches.items():
        grouped = build_queries(names, ScopeSet.of(m.scope for m in members), window, *settings)
        keys = sorted({m.scope.key() for m in members})
        split = [split_answer(sender.send(q.promql), labels, keys) if q.promql else {} for q in grouped]
        for member in members:
            own = build_queries(names, member.scope, window, *settings)
            answers = [by_key.get(member.scope.key(), RawResult()) for by_key in split]
            out[member.key] = _classify_all(own, answers, min_samples_for(member.spec.autotune))
    return RoundResult(out, sender.sent)


def evaluate_once(
    spec: SpeculativeDeploymentSpec,
    scope: Scope,
    client: QueryClient,
    now: datetime,
    *,
    current: SpeculationIntent | None = None,
    state: PolicyState | None = None,
    fit: FitSettings | None = None,
    canary_scope: Scope | None = None,
    framework: Mapping[str, Any] | None = None,
    conditions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Measure once and decide as this evaluation alone would; JSON-able.

    Keys: `scope`, `window`, `current`, `measurements` (name -> class, value, samples, resolved query, detail),
    `canaryMeasurements` (the canary replica's, or null), `warnings` (from Prometheus), `decision` (`action` one of
    Keep, DisableSpeculation, EnableSpeculation, ChangeBatchThreshold; `reason`; `to`; `evidence`), `framework`
    (the seed framework's findings: `condition`, `status`, `reason`, `message`, `evidence`, from
    framework_rules.assess, the function the operator uses for status.recommendation.framework). `current` defaults
    to what the spec asks for; `state` (status.autotune) supplies the baseline record and the history of an existing
    deployment; `framework` (status.autotune.framework) the acceptance record and `conditions` (status.conditions)
    which rules were firing. The dry run sees no Deployment, so the window counts as settled.
    """
    state = state or PolicyState()
    running = current or desired_intent(spec, state).intent
    measurements = measure(spec, scope, client, now)
    canary = measure(spec, canary_scope, client, now) if canary_scope is not None else None
    window = effective_window(spec.autotune)
    inputs = PolicyInputs(
        spec=spec,
        current=running,
        measurements=measurements,
        window=window,
        canary=canary,
        fit=fit or fit_settings_for(spec),
    )
    decision = evaluate_alone(inputs, state, now)
    findings, _ = framework_rules.assess(inputs, state.baseline, framework, conditions, now)
    return {
        "scope": scope.to_dict(),
        "window": {"value": window.promql(), "requested": spec.autotune.window, "note": window.note},
        "evaluatedAt": format_time(now.replace(microsecond=0)),
        "current": intent_to_dict(running),
        "measurements": {str(name): m.to_dict() for name, m in measurements.items()},
        "canaryMeasurements": None if canary is None else {str(k): m.to_dict() for k, m in canary.items()},
        "warnings": collect_warnings(measurements),
        "decision": decision.to_dict(),
        "framework": [f.to_dict() for f in findings],
    }


# ------------------------------------------------------------------------------------------------ CLI
