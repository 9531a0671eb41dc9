"""Autotune evaluation rounds over the fleet (a thread started with the operator, tickers.ROUNDS).

Every tick, the objects that are due (each at its own phase within its interval, so a burst of creations spreads out)
are grouped by Prometheus connection and measured with one query per metric for all of them (evaluate.measure_many),
each connection in its own worker (shell/measuring.py), then concluded and reconciled one by one as their
measurements end. Any object's exception, or a connection that does not answer by the round's deadline, marks the
objects concerned (shell/failures.py) and the rest of the round proceeds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable, Mapping
from concurrent.futures import Future, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specpilot.adapters import connections
from specpilot.adapters.prom import PrometheusClient
from specpilot.api import v1alpha1
from specpilot.autotune.evaluate import Measured, RoundResult, Subject, measure_many
from specpilot.autotune.evaluation import (
    AutotuneOutcome,
    conclude,
    evaluation_scopes,
    is_due,
    measurement_starts,
    without_heartbeat,
)
from specpilot.autotune.signals.promql import Scope
from specpilot.reconcile import core as rec
from specpilot.shell import telemetry
from specpilot.shell.children import fingerprint_of, first
from specpilot.shell.failures import evaluation_failed
from specpilot.shell.measuring import Measurers
from specpilot.shell.memory import MEMORY, BodySummary, ObjectMemory, cadence_of, spec_of
from specpilot.shell.reconciling import run_reconcile, status_of
from specpilot.shell.wiring import CAPTURED, Indexes, log

Client = PrometheusClient | connections.UnavailablePrometheus
# The longest a round waits for its measurements, all connections together (each is measured in its own worker);
# well below tickers.STALL_SECONDS.
ROUND_DEADLINE_SECONDS = float(os.environ.get("SPECPILOT_ROUND_DEADLINE_SECONDS", "120"))
MEASURERS = Measurers(workers=8)


@dataclass(frozen=True)
class _Due:
    uid: str
    memory: ObjectMemory
    spec: v1alpha1.SpeculativeDeploymentSpec
    scope: Scope
    canary: Scope | None
    warnings: list[rec.Event]
    since: datetime | None  # how far back each group's window may reach (evaluation.measurement_starts)
    canary_since: datetime | None


@dataclass
class _Groups:
    """The due objects of one round by Prometheus connection; each connection is resolved once per round."""

    groups: dict[tuple[Any, ...], tuple[Client, list[_Due]]] = field(default_factory=dict)
    resolved: dict[tuple[str, str], tuple[connections.Resolution, list[rec.Event]]] = field(default_factory=dict)

    def resolve(
        self, prometheus: v1alpha1.PrometheusSpec, namespace: str
    ) -> tuple[connections.Resolution, list[rec.Event]]:
        where = (prometheus.model_dump_json(), namespace)
        if where not in self.resolved:
            resolution = connections.resolve(connections.registry(), prometheus, namespace)
            events = [rec.Event("Warning", reason, message) for reason, message in resolution.warnings]
            if resolution.problem is not None:
                events.append(rec.Event("Warning", "PrometheusConnectionRefused", resolution.problem))
            self.resolved[where] = (resolution, events)
        return self.resolved[where]

    def add(self, resolution: connections.Resolution, due: _Due) -> None:
        key = ("ok", *resolution.connection.identity()) if resolution.connection else ("none", resolution.problem)
        if key not in self.groups:
            client: Client = (
                PrometheusClient(resolution.connection)
                if resolution.connection
                else connections.UnavailablePrometheus(resolution.problem or "unknown")
            )
            self.groups[key] = (client, [])
        self.groups[key][1].append(due)


def _collect(uid: str, memory: ObjectMemory, now: datetime, groups: _Groups) -> None:
    """Add the object to its connection's group if it is due and can be evaluated."""
    summary, cadence = memory.summary, cadence_of(memory)
    if summary is None or cadence is None or not cadence.active:
        return
    written = memory.written_status
    marks = summary.due.with_status(written[1]) if written else summary.due
    if not is_due(cadence, marks, now, phase_key=uid, evaluated_at=memory.evaluated_at):
        return
    body = memory.body
    spec = spec_of(body) if body is not None else None
    if body is None or spec is None or spec.autotune.prometheus is None or body.metadata.get("deletionTimestamp"):
        return
    status = written[1] if written else dict(body.get("status", {}))
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    scopes = evaluation_scopes(spec, name=name, namespace=namespace, status=status)
    if scopes is None:
        return  # no rendered config in status.effective yet: the reconcile writes one first
    resolution, events = groups.resolve(spec.autotune.prometheus, namespace)
    groups.add(resolution, _Due(uid, memory, spec, scopes[0], scopes[1], events, *measurement_starts(status)))


def _measure(client: Client, members: list[_Due], now: datetime) -> RoundResult:
    """One connection's due objects measured together (in a worker thread)."""
    subjects = [Subject((m.uid, "main"), m.spec, m.scope, m.since) for m in members]
    subjects += [Subject((m.uid, "canary"), m.spec, m.canary, m.canary_since) for m in members if m.canary is not None]
    with client:
        return measure_many(subjects, client, now)


def _conclude_group(members: list[_Due], result: RoundResult, now: datetime, indexes: Indexes) -> int:
    """Conclude each object of one measured connection. Returns the queries its measurement sent."""
    telemetry.PROMETHEUS_QUERIES.inc(result.queries_sent)
    telemetry.ROUND_SIZE.observe(len(members))
    for member in members:
        try:
            _conclude_and_reconcile(member, result.measurements, now, indexes)
        except Exception as err:  # one object's failure must not cost the others their evaluation
            evaluation_failed(member.uid, member.memory, "conclusion", err)
    return result.queries_sent


def _measurement_failed(members: list[_Due], err: Exception) -> None:
    for member in members:
        evaluation_failed(member.uid, member.memory, "measurement", err)


def _conclude_as_measured(measuring: dict[Future[RoundResult], list[_Due]], now: datetime, indexes: Indexes) -> int:
    """Conclude each connection's objects as soon as its measurement ends; at the round's deadline, mark the objects
    of the connections still measuring (their workers go on, and the next round does not start them again)."""
    pending = dict(measuring)
    sent = 0
    try:
        for future in as_completed(measuring, timeout=ROUND_DEADLINE_SECONDS):
            members = pending.pop(future)
            try:
                result = future.result()
            except Exception as err:  # this connection's objects are marked; the others are concluded
                _measurement_failed(members, err)
                continue
            sent += _conclude_group(members, result, now, indexes)
    except TimeoutError:
        late = TimeoutError(f"Prometheus did not answer within the round's deadline ({ROUND_DEADLINE_SECONDS:g} s)")
        for members in pending.values():
            _measurement_failed(members, late)
    return sent


def run_round(now: datetime) -> int:
    """One evaluation round: every due object, grouped by Prometheus connection, measured with one query per metric
    per query shape (evaluate.measure_many), then concluded and reconciled one by one. Returns the queries sent."""
    indexes = CAPTURED.indexes
    if indexes is None:
        return 0
    groups = _Groups()
    for uid, memory in MEMORY.snapshot():
        try:
            _collect(uid, memory, now, groups)
        except Exception as err:  # a malformed object is marked and left out of this round; the rest proceed
            evaluation_failed(uid, memory, "due check", err)
    measuring = {
        MEASURERS.submit(key, functools.partial(_measure, client, members, now)): members
        for key, (client, members) in groups.groups.items()
    }
    return _conclude_as_measured(measuring, now, indexes)


def _conclude_and_reconcile(
    member: _Due, measured: Mapping[Hashable, Measured], now: datetime, indexes: Indexes
) -> None:
    memory = member.memory
    with memory.lock:
        body = memory.body
        if body is None:
            return
        decided = status_of(body, memory)
        namespace, name = str(body.metadata.namespace), str(body.metadata.name)
        if evaluation_scopes(member.spec, name=name, namespace=namespace, status=decided.status) != (
            member.scope,
            member.canary,
        ):
            return  # the config changed while we measured: the next round measures the new one
        deployment = first(indexes["deployments"], (namespace, name))
        ours = deployment is not None and deployment.get("owner") == member.uid
        outcome = conclude(
            member.spec,
            annotations=dict(body.metadata.annotations),
            status=decided.status,
            deployment=rec.ObservedDeployment.from_object(deployment) if deployment is not None and ours else None,
            measurements=measured[(member.uid, "main")],
            canary=measured.get((member.uid, "canary")),
            now=now,
            window=measured[(member.uid, "main")].window,
        )
        outcome = AutotuneOutcome(
            without_heartbeat(outcome.fields, decided.status),
            outcome.conditions,
            [*member.warnings, *outcome.events],
            outcome.actuated,
            outcome.decision,
        )
        _report(namespace, name, member.spec, outcome)
        fingerprint = fingerprint_of(BodySummary.of(body), indexes, memory)
        if run_reconcile("autotune", body, decided, indexes, memory, autotune=outcome) is not None:
            memory.evaluated_at = now
            memory.fingerprint = fingerprint


def _report(namespace: str, name: str, spec: v1alpha1.SpeculativeDeploymentSpec, outcome: AutotuneOutcome) -> None:
    """The decision line and the decision/query metrics of one evaluation."""
    decision = outcome.decision
    action = str(decision.get("action", "Keep"))
    log.info(
        "%s/%s: autotune %s (proposal %s%s%s): %s",
        namespace,
        name,
        action,
        decision.get("proposal", action),
        ", actuated" if outcome.actuated else "",
        f", gate: {decision['gate']}" if decision.get("gate") else "",
        decision.get("reason", ""),
    )
    telemetry.DECISIONS.labels(action, spec.autotune.mode.value).inc()
    if outcome.actuated:
        telemetry.ACTUATIONS.labels(action, "applied").inc()
    for measurement in (outcome.fields.get("recommendation") or {}).get("measurements", {}).values():
        telemetry.QUERIES.labels(measurement.get("name", "?"), measurement.get("class", "?")).inc()
        if measurement.get("class") == "Error":
            telemetry.METRIC_ERRORS.labels(measurement.get("name", "?")).inc()
