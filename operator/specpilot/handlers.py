"""kopf wiring only: observe, call the pure reconcile, apply its result, write status, post events.

One level-based reconcile runs on resume, create and update, and again from a timer that also repairs drift and
runs the autotuner when its interval is due. Children are read from kopf indexes (no API reads per tick), and an
unchanged object causes no API writes at all.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from specpilot import connections, manifests, telemetry
from specpilot import reconcile as rec
from specpilot.adapters.k8s import KubeAdapter, MissingApi, load_credentials
from specpilot.adapters.prom import PrometheusClient
from specpilot.api import v1alpha1
from specpilot.autotune import AutotuneOutcome, format_time, idle_conditions, is_due, run_autotune
from specpilot.events import EventLimiter

GROUP, VERSION, PLURAL = v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL
MANAGED = {"app.kubernetes.io/managed-by": "specpilot"}
TICK_SECONDS = float(os.environ.get("SPECPILOT_TICK_SECONDS", "10"))
# A child we just applied may not be in the index yet; trust our own write this long to avoid writing twice.
RECENT_APPLY_GRACE_SECONDS = 30.0

log = logging.getLogger("specpilot")
_limiter = EventLimiter()
_recent_applies: dict[str, tuple[str, float]] = {}
_known_pod_monitors: dict[str, str | None] = {}
_warned_missing: set[tuple[str, str]] = set()
_kube: KubeAdapter | None = None
# Per object: the status our last patch produced, with its resourceVersion (see reconcile.current_status).
_written_status: dict[str, tuple[str, dict[str, Any]]] = {}
# Per object: one reconcile at a time. The timer and the create/update handlers run in different tasks; without this
# both could decide from the same status and the later write would drop the earlier one's decision.
_object_locks: dict[str, threading.Lock] = {}
_object_locks_guard = threading.Lock()


def kube() -> KubeAdapter:
    global _kube
    if _kube is None:
        _kube = KubeAdapter(load_credentials(), on_write=lambda k, v: telemetry.API_WRITES.labels(k, v).inc())
    return _kube


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Own storage names, quiet event posting, standalone: decided once, because changing storages later is risky."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP, v1=False)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration", v1=False
    )
    settings.posting.reporting_component = "specpilot"
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True
    settings.execution.default_backoff = 30
    # Handlers are sync and mostly wait on the API server: more threads than cores keep a burst of creations moving.
    settings.execution.max_workers = 20
    settings.watching.initial_streaming = True
    settings.scanning.disabled = True


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
def owned_deployments(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[tuple[str | None, str], Any]:
    """The live state of our Deployments, so ticks read memory instead of the API server."""
    return {
        (namespace, name): {
            "metadata": {"generation": body.metadata.get("generation"), "annotations": dict(body.metadata.annotations)},
            "spec": {
                "replicas": body.spec.get("replicas"),
                "template": {
                    "metadata": {
                        "annotations": dict(body.spec.get("template", {}).get("metadata", {}).get("annotations", {}))
                    }
                },
            },
            "status": dict(body.get("status", {})),
        }
    }


@kopf.index("", "v1", "services", labels=MANAGED)
def owned_services(
    namespace: str | None, name: str, annotations: Mapping[str, str], **_: Any
) -> dict[tuple[str | None, str], str]:
    return {(namespace, name): annotations.get(rec.ANNOTATION_APPLIED_HASH, "")}


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
def owned_disruption_budgets(
    namespace: str | None, name: str, annotations: Mapping[str, str], **_: Any
) -> dict[tuple[str | None, str], str]:
    return {(namespace, name): annotations.get(rec.ANNOTATION_APPLIED_HASH, "")}


Indexes = Mapping[str, kopf.Index[tuple[str, str], Any]]


def _indexes(kwargs: Mapping[str, Any]) -> Indexes:
    """kopf injects indexes as keyword arguments named after the index functions."""
    return {
        "deployments": kwargs["owned_deployments"],
        "services": kwargs["owned_services"],
        "disruption_budgets": kwargs["owned_disruption_budgets"],
    }


def _first(index: kopf.Index[tuple[str, str], Any], key: tuple[str, str]) -> Any | None:
    for value in index.get(key, []):
        return value
    return None


@dataclass(frozen=True)
class LiveChildren:
    """What the indexes say about one object's children."""

    digests: dict[str, str | None]  # "Kind/name" -> applied digest; absent: the child does not exist
    deployment: rec.ObservedDeployment | None
    canary: rec.ObservedDeployment | None
    recent: frozenset[str]  # applied so recently that the index may not show our write yet (our digest wins)


def _live_children(
    namespace: str, name: str, indexes: Indexes, wants_pod_monitor: bool, fresh_read: bool
) -> LiveChildren:
    live: dict[str, str | None] = {}
    observed: dict[str, rec.ObservedDeployment | None] = {}
    for deployment_name in (name, manifests.canary_name(name)):
        deployment = _first(indexes["deployments"], (namespace, deployment_name))
        found = rec.ObservedDeployment.from_object(deployment) if deployment is not None else None
        observed[deployment_name] = found
        if found is not None:
            live[f"Deployment/{deployment_name}"] = found.applied_hash
    for kind, index in (("Service", "services"), ("PodDisruptionBudget", "disruption_budgets")):
        digest = _first(indexes[index], (namespace, name))
        if digest is not None:
            live[f"{kind}/{name}"] = digest
    monitor_key = f"PodMonitor/{name}"
    if wants_pod_monitor and fresh_read:
        _known_pod_monitors[f"{namespace}/{name}"] = kube().applied_digest(
            "monitoring.coreos.com/v1", "PodMonitor", namespace, name
        )
    known = _known_pod_monitors.get(f"{namespace}/{name}")
    if known is not None:
        live[monitor_key] = known
    now = time.monotonic()
    recent: set[str] = set()
    for key, (digest, at) in list(_recent_applies.items()):
        if now - at > RECENT_APPLY_GRACE_SECONDS:
            del _recent_applies[key]
        elif _is_child_of(key, namespace, name):
            child = key.split("/", 1)[1]
            live[child] = digest
            recent.add(child)
    return LiveChildren(live, observed[name], observed[manifests.canary_name(name)], frozenset(recent))


def _is_child_of(key: str, namespace: str, name: str) -> bool:
    """Whether a "<namespace>/<Kind>/<child>" bookkeeping key belongs to this object (its canary included)."""
    child_namespace, _, child = key.split("/", 2)
    return child_namespace == namespace and child in (name, manifests.canary_name(name))


def _now() -> str:
    return format_time(datetime.now(UTC))


@contextmanager
def _one_at_a_time(body: kopf.Body) -> Iterator[None]:
    uid = str(body.metadata.uid)
    with _object_locks_guard:
        lock = _object_locks.setdefault(uid, threading.Lock())
    with lock:
        yield


def _status_of(body: kopf.Body) -> dict[str, Any]:
    """The body's status, or our own last write when kopf's copy of the object predates it."""
    uid = str(body.metadata.uid)
    status, ahead = rec.current_status(
        str(body.metadata.get("resourceVersion", "")), dict(body.get("status", {})), _written_status.get(uid)
    )
    if not ahead:
        _written_status.pop(uid, None)
    return status


def run_reconcile(
    trigger: str,
    body: kopf.Body,
    status: dict[str, Any],
    indexes: Indexes,
    autotune: AutotuneOutcome | None = None,
) -> rec.ReconcileResult:
    """Observe → decide (pure) → apply → status → events."""
    meta = body.metadata
    namespace, name = str(meta.namespace), str(meta.name)
    started = time.monotonic()
    wants_pod_monitor = bool(body.spec.get("monitoring", {}).get("podMonitor", False))
    children = _live_children(namespace, name, indexes, wants_pod_monitor, fresh_read=trigger != "timer")
    inputs = rec.ReconcileInputs(
        name=name,
        namespace=namespace,
        uid=str(meta.uid),
        generation=int(meta.get("generation", 0)),
        annotations=dict(meta.annotations),
        spec=dict(body.spec),
        status=status,
        now=_now(),
        live_children=children.digests,
        deployment=children.deployment,
        canary_deployment=children.canary,
        recently_applied=children.recent,
        autotune_fields=autotune.fields if autotune else {},
        autotune_conditions=tuple(autotune.conditions) if autotune else (),
    )
    result = rec.reconcile(inputs)
    missing_api_events: list[rec.Event] = []
    for child in result.apply:
        key = rec.child_key(child)
        try:
            kube().apply(child)
        except MissingApi as err:
            if (str(meta.uid), key) not in _warned_missing:
                _warned_missing.add((str(meta.uid), key))
                log.warning("%s/%s: skipping %s: %s", namespace, name, key, err)
                missing_api_events.append(rec.Event("Warning", "MonitoringApiMissing", f"not creating {key}: {err}"))
            continue
        digest = child["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH]
        _recent_applies[f"{namespace}/{key}"] = (digest, time.monotonic())
        if child["kind"] == "PodMonitor":
            _known_pod_monitors[f"{namespace}/{name}"] = digest
    for key in result.delete:
        kind, child_name = key.split("/", 1)
        kube().delete(rec.CHILD_API_VERSIONS[kind], kind, namespace, child_name)
        _recent_applies.pop(f"{namespace}/{key}", None)
        if kind == "PodMonitor":
            _known_pod_monitors.pop(f"{namespace}/{name}", None)
    if result.status_patch is not None:
        merge_patch = rec.status_merge_patch(status, result.status_patch)
        log.debug("%s/%s: status changed (%s)", namespace, name, ", ".join(sorted(merge_patch)))
        written = kube().patch_status(f"{GROUP}/{VERSION}", v1alpha1.KIND, namespace, name, merge_patch)
        if written is not None:
            _written_status[str(meta.uid)] = written
    post_events(body, [*(autotune.events if autotune else []), *result.events, *missing_api_events])
    telemetry.RECONCILES.labels(trigger, "ok").inc()
    telemetry.RECONCILE_SECONDS.labels(trigger).observe(time.monotonic() - started)
    return result


def post_events(body: kopf.Body, events: list[rec.Event]) -> None:
    """Post each reason once per tick (the autotuner's message, with its evidence, wins), rate-limited per object."""
    uid = str(body.metadata.uid)
    unique: dict[str, rec.Event] = {}
    for event in events:
        unique.setdefault(event.reason, event)
    for event in unique.values():
        if _limiter.allow(uid, event.reason, event.message, time.monotonic()):
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
            telemetry.API_WRITES.labels("Event", "create").inc()
            telemetry.EVENTS.labels(event.reason, "posted").inc()
        else:
            telemetry.EVENTS.labels(event.reason, "suppressed").inc()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile_speculativedeployment(body: kopf.Body, reason: str, **kwargs: Any) -> None:
    idle = None
    try:
        spec = v1alpha1.parse_spec(dict(body.spec))
        if spec.autotune.mode == v1alpha1.AutotuneMode.OFF or spec.autotune.prometheus is None:
            idle = AutotuneOutcome({}, idle_conditions(spec), [])
    except v1alpha1.InvalidSpec:
        pass
    with _one_at_a_time(body):
        run_reconcile(str(reason), body, _status_of(body), _indexes(kwargs), autotune=idle)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TICK_SECONDS, initial_delay=TICK_SECONDS)
def refresh_speculativedeployment(body: kopf.Body, **kwargs: Any) -> None:
    """Follow rollouts, repair drift of children, and run the autotuner when it is due."""
    indexes = _indexes(kwargs)
    with _one_at_a_time(body):
        status = _status_of(body)
        run_reconcile("timer", body, status, indexes, autotune=_autotune_if_due(body, status, indexes))


def _autotune_if_due(body: kopf.Body, status: Mapping[str, Any], indexes: Indexes) -> AutotuneOutcome | None:
    try:
        spec = v1alpha1.parse_spec(dict(body.spec))
    except v1alpha1.InvalidSpec:
        return None
    annotations = dict(body.metadata.annotations)
    if spec.autotune.mode == v1alpha1.AutotuneMode.OFF or spec.autotune.prometheus is None:
        return AutotuneOutcome({}, idle_conditions(spec), [])
    now = datetime.now(UTC)
    if not is_due(spec, status, annotations, now):
        return None
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    deployment = _first(indexes["deployments"], (namespace, name))
    observed = rec.ObservedDeployment.from_object(deployment) if deployment is not None else None
    prometheus_client, warnings = _prometheus_client(spec.autotune.prometheus, namespace)
    with prometheus_client as client:
        outcome = run_autotune(
            spec,
            name=name,
            namespace=namespace,
            annotations=annotations,
            status=status,
            deployment=observed,
            now=now,
            client=client,
        )
    action = str(outcome.decision.get("action", "Keep"))
    decision = outcome.decision
    if not decision:
        log.info("%s/%s: autotune waits: no rendered config in status.effective yet", namespace, name)
    else:
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
    return AutotuneOutcome(
        outcome.fields, outcome.conditions, [*warnings, *outcome.events], outcome.actuated, outcome.decision
    )


def _prometheus_client(
    prometheus: v1alpha1.PrometheusSpec, namespace: str
) -> tuple[PrometheusClient | connections.UnavailablePrometheus, list[rec.Event]]:
    """Credentials only from connections an administrator configured (connections.py); a CR never names a Secret."""
    client, resolution = connections.open_client(prometheus, namespace)
    events = [rec.Event("Warning", reason, message) for reason, message in resolution.warnings]
    if resolution.problem is not None:
        events.append(rec.Event("Warning", "PrometheusConnectionRefused", resolution.problem))
    return client, events


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def forget_speculativedeployment(body: kopf.Body, **_: Any) -> None:
    """Children go by garbage collection (owner references); only in-memory bookkeeping is dropped here."""
    uid = str(body.metadata.uid)
    _limiter.forget(uid)
    _written_status.pop(uid, None)
    with _object_locks_guard:
        _object_locks.pop(uid, None)
    for key in [k for k in _recent_applies if _is_child_of(k, str(body.metadata.namespace), str(body.metadata.name))]:
        del _recent_applies[key]
    _known_pod_monitors.pop(f"{body.metadata.namespace}/{body.metadata.name}", None)
