"""One autotune evaluation through any QueryClient: measure, classify, decide (orchestration, no I/O of its own).

`measure` runs every query of `promql.build_queries` and classifies the answers; `evaluate_once` adds the decision
this evaluation alone supports (agreement, stabilization and budget aside). Both back the operator's round and the
`specpilot evaluate` dry run (cli.evaluate), which hand them a client over a real Prometheus.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from specpilot.api import timestamps
from specpilot.api.durations import parse_duration
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import (
    AutotuneSpec,
    SpeculativeDeploymentSpec,
)
from specpilot.autotune.model.costprofile import fit_settings_for
from specpilot.autotune.model.rollcost import ttft_deadline_s
from specpilot.autotune.model.schedule import FitSettings
from specpilot.autotune.policy import framework_rules
from specpilot.autotune.policy.decision import desired_intent, evaluate_alone
from specpilot.autotune.policy.state import PolicyInputs, PolicyState
from specpilot.autotune.signals.measurements import (
    Measurement,
    RawResult,
    classify,
    collect_warnings,
    short_gates,
    split_answer,
    unavailable,
    valid_value,
)
from specpilot.autotune.signals.promql import (
    EVIDENCE_GATES,
    Query,
    Scope,
    ScopeSet,
    Signal,
    Window,
    build_queries,
    extended,
    resolve_window,
    wider_windows,
)
from specpilot.reconcile import conditions as cond
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


def running_since(conditions: Sequence[Mapping[str, Any]]) -> datetime | None:
    """When the running configuration completed its rollout (the Progressing condition's RolloutCompleted
    transition); None while it rolls or when no condition says."""
    progressing = next((c for c in conditions if c.get("type") == cond.PROGRESSING), None) or {}
    if progressing.get("reason") == "RolloutCompleted" and progressing.get("lastTransitionTime"):
        return timestamps.parse_time(str(progressing["lastTransitionTime"]))
    return None


def window_limit_s(spec: SpeculativeDeploymentSpec, since: datetime | None, now: datetime) -> float | None:
    """How far back a window may reach: since the running configuration completed its rollout, less the two scrapes
    a new configuration settles for (decision._settled), so an extended window is always a settled one. None when
    the start is not known: only the spec's window is used."""
    if since is None:
        return None
    return (now - since).total_seconds() - 2 * parse_duration(spec.autotune.scrape_interval)


@dataclass(frozen=True)
class Subject:
    """One scope to measure in a fleet round, under the settings of its own spec; `key` names it in the answer.
    `since`: when the scope's configuration completed its rollout (running_since), how far back a window may be
    extended; None keeps the spec's window."""

    key: Hashable
    spec: SpeculativeDeploymentSpec
    scope: Scope
    since: datetime | None = None


@dataclass(frozen=True)
class Measured(Mapping[str, Measurement]):
    """One scope's classified measurements (by signal name) and the window they were all taken over: the spec's
    (effective_window), or a wider one where it held too few samples (wider_windows)."""

    window: Window
    measurements: Mapping[str, Measurement]

    def __getitem__(self, name: str) -> Measurement:
        return self.measurements[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.measurements)

    def __len__(self) -> int:
        return len(self.measurements)


@dataclass(frozen=True)
class RoundResult:
    measurements: dict[Hashable, Measured]
    queries_sent: int


# Runs the queries (all, or only those of the given signals) of each subject at its window; classified by key.
_Run = Callable[
    [Sequence[Subject], Mapping[Hashable, Window], frozenset[Signal] | None], dict[Hashable, dict[str, Measurement]]
]


def measure(
    spec: SpeculativeDeploymentSpec,
    scope: Scope,
    client: QueryClient,
    now: datetime,
    *,
    since: datetime | None = None,
) -> Measured:
    """Run and classify every measurement of one evaluation, gates first, all at the same instant `now`, over the
    spec's window or, where that holds too few samples, the shortest wider one that holds enough (`since`:
    Subject.since)."""
    sender = _Sender(client, now)

    def run(
        subjects: Sequence[Subject], windows: Mapping[Hashable, Window], only: frozenset[Signal] | None
    ) -> dict[Hashable, dict[str, Measurement]]:
        (subject,) = subjects
        names = metric_names_for(VllmVersion.parse(spec.engine.version))
        queries = _only(build_queries(names, scope, windows[subject.key], *query_settings(spec)), only)
        answers = [sender.send(q.promql) for q in queries]
        return {subject.key: _classify_all(queries, answers, min_samples_for(spec.autotune))}

    return _extending([Subject("", spec, scope, since)], run, now)[""]


def _only(queries: Sequence[Query], signals: frozenset[Signal] | None) -> tuple[Query, ...]:
    return tuple(queries) if signals is None else tuple(q for q in queries if q.signal in signals)


def _extending(subjects: Sequence[Subject], run: _Run, now: datetime) -> dict[Hashable, Measured]:
    """Measure every subject at its spec's window; those whose evidence gates counted too few samples again at the
    shortest wider window that holds enough (_wider_where_short). Where none does, the spec's window stands and its
    gated measurements stay NoData: a wider window only ever adds evidence, it never lowers a minimum."""
    base = {s.key: effective_window(s.spec.autotune) for s in subjects}
    first = run(subjects, base, None)
    chosen = _wider_where_short(subjects, base, first, run, now)
    again = run([s for s in subjects if s.key in chosen], chosen, None) if chosen else {}
    return {s.key: Measured(chosen.get(s.key, base[s.key]), again.get(s.key, first[s.key])) for s in subjects}


GATES = frozenset(EVIDENCE_GATES.values())


def _wider_where_short(
    subjects: Sequence[Subject],
    base: Mapping[Hashable, Window],
    first: Mapping[Hashable, Mapping[str, Measurement]],
    run: _Run,
    now: datetime,
) -> dict[Hashable, Window]:
    """For each subject whose gates are short at its spec's window (short_gates), the shortest wider window
    (wider_windows) at which every gate meets its minimum, probing the gate queries alone, one doubling at a time."""
    short = {s.key: short_gates(first[s.key], min_samples_for(s.spec.autotune)) for s in subjects}
    ladders = {
        s.key: wider_windows(base[s.key], window_limit_s(s.spec, s.since, now)) for s in subjects if short[s.key]
    }
    chosen: dict[Hashable, Window] = {}
    searching = [s for s in subjects if ladders.get(s.key)]
    step = 0
    while searching:
        windows = {s.key: ladders[s.key][step] for s in searching}
        probed = run(searching, windows, GATES)
        for s in searching:
            minimums = min_samples_for(s.spec.autotune)
            if all(_meets(probed[s.key], gate, minimums[gate]) for gate in short[s.key]) and not short_gates(
                probed[s.key], minimums
            ):
                why = _why(short[s.key], probed[s.key], base[s.key], windows[s.key], minimums)
                chosen[s.key] = extended(base[s.key], windows[s.key], why)
        step += 1
        searching = [s for s in searching if s.key not in chosen and step < len(ladders[s.key])]
    return chosen


def _meets(measurements: Mapping[str, Measurement], gate: Signal, minimum: float) -> bool:
    value = valid_value(measurements, gate)
    return value is not None and value >= minimum


def _why(short: Mapping[Signal, float], probed: Mapping[str, Measurement], base: Window, wider: Window,
         minimums: Mapping[Signal, float]) -> str:  # fmt: skip
    return "; ".join(
        f"{gate.value} {count:.0f} in {base.promql()} < minimum {minimums[gate]:.0f}, "
        f"{valid_value(probed, gate) or 0:.0f} in {wider.promql()}"
        for gate, count in short.items()
    )


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


def measure_many(subjects: Sequence[Subject], client: QueryClient, now: datetime) -> RoundResult:
    """Measure many scopes behind one Prometheus connection with one query per metric per query shape.

    Scopes whose queries differ only in the selector (same vLLM metric names, window, scope labels, output-length
    settings and TTFT deadline) share a ScopeSet query; `split_answer` gives each scope exactly the answer its own
    query would have, and each is then classified with its own spec's evidence minimums, so the result equals
    `measure` per scope (a scope short of samples is measured again over its wider window, grouped the same way).
    Measurements record the scope's own query (what a person would run to check the number), not the grouped one.
    """
    sender = _Sender(client, now)

    def run(
        members: Sequence[Subject], windows: Mapping[Hashable, Window], only: frozenset[Signal] | None
    ) -> dict[Hashable, dict[str, Measurement]]:
        return _measure_grouped(members, windows, only, sender)

    return RoundResult(_extending(subjects, run, now), sender.sent)


def _measure_grouped(
    subjects: Sequence[Subject],
    windows: Mapping[Hashable, Window],
    only: frozenset[Signal] | None,
    sender: _Sender,
) -> dict[Hashable, dict[str, Measurement]]:
    """Each subject's queries at its window, one grouped query per metric per query shape (measure_many)."""
    batches: dict[tuple[Any, ...], list[Subject]] = {}
    for subject in subjects:
        names = metric_names_for(VllmVersion.parse(subject.spec.engine.version))
        settings = query_settings(subject.spec)
        batches.setdefault((names, windows[subject.key], subject.scope.labels(), settings), []).append(subject)
    out: dict[Hashable, dict[str, Measurement]] = {}
    for (names, window, labels, settings), members in batches.items():
        grouped = _only(build_queries(names, ScopeSet.of(m.scope for m in members), window, *settings), only)
        keys = sorted({m.scope.key() for m in members})
        split = [split_answer(sender.send(q.promql), labels, keys) if q.promql else {} for q in grouped]
        for member in members:
            own = _only(build_queries(names, member.scope, window, *settings), only)
            answers = [by_key.get(member.scope.key(), RawResult()) for by_key in split]
            out[member.key] = _classify_all(own, answers, min_samples_for(member.spec.autotune))
    return out


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
    state.Action's values; `reason`; `to`; `evidence`), `framework` (the seed framework's findings: `condition`,
    `status`, `reason`, `message`, `evidence`, from framework_rules.assess, the function the operator uses for
    status.recommendation.framework). `current` defaults to what the spec asks for; `state` (status.autotune)
    supplies the baseline record and the history of an existing deployment; `framework` (status.autotune.framework)
    the acceptance record and `conditions` (status.conditions) which rules were firing, and since when the running
    config runs (running_since: how far back a window short of samples may be extended). The dry run sees no
    Deployment, so the window counts as settled.
    """
    state = state or PolicyState()
    running = current or desired_intent(spec, state).intent
    measurements = measure(spec, scope, client, now, since=running_since(conditions))
    canary = measure(spec, canary_scope, client, now) if canary_scope is not None else None
    window = measurements.window
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
