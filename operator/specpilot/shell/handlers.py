"""kopf wiring only: observe, call the pure reconcile, apply its result, write status, post events.

One level-based reconcile runs on resume, create and update, when an owned child changes (the owner is enqueued,
like controller-runtime's Owns()), and from a periodic pass that repairs drift. Children are read from kopf
indexes, and the periodic pass skips an object whose resourceVersions (its own, our last status write's, its
children's) are those of the last reconcile: an unchanged object costs no API reads, no writes, no rendering.

Autotune evaluations run in fleet rounds (`run_round`, a thread started with the operator): every tick, the objects
that are due (each at its own phase within its interval, so a burst of creations spreads out) are grouped by
Prometheus connection and measured with one query per metric for all of them (evaluate.measure_many).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from specpilot.adapters import connections, heap, watch_events
from specpilot.adapters.k8s import KubeAdapter, LiveChild, MissingApi, StaleStatus, WriteRefused, load_credentials
from specpilot.adapters.prom import PrometheusClient
from specpilot.api import v1alpha1
from specpilot.autotune.evaluate import Subject, measure_many
from specpilot.autotune.evaluation import (
    AutotuneOutcome,
    Cadence,
    DueMarks,
    choose_intent,
    conclude,
    evaluation_scopes,
    format_time,
    idle_conditions,
    is_due,
    without_heartbeat,
)
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Scope
from specpilot.reconcile import core as rec
from specpilot.reconcile import manifests
from specpilot.shell import telemetry
from specpilot.shell.events import EventLimiter
from specpilot.shell.workqueue import WorkQueue

GROUP, VERSION, PLURAL = v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL
MANAGED = {"app.kubernetes.io/managed-by": "specpilot"}
TICK_SECONDS = float(os.environ.get("SPECPILOT_TICK_SECONDS", "10"))
# Handlers are sync and mostly wait on the API server: more threads than cores keep a burst of creations moving. The
# API client's connection pool is sized to match (adapters.k8s.load_credentials).
HANDLER_THREADS = 20
# A child we just applied may not be in the index yet; trust our own write this long to avoid writing twice.
RECENT_APPLY_GRACE_SECONDS = 30.0

FAILPOINT_ENV = "SPECPILOT_FAILPOINT"  # fault injection for tests: "exit-after-actuation-status"
POD_MONITOR_RECHECK_SECONDS = 60.0  # PodMonitors are not watched (the CRD may be absent): re-read this often
FOREIGN_RECHECK_SECONDS = 60.0  # a name another owner holds is looked up again this often
TRANSIENT_RETRY_SECONDS = 30.0  # a write refused for a passing reason (409, 429, 5xx) is retried after this
# A write refused for good (other 4xx) waits for what we send to change, or for this backoff (doubling per refusal,
# capped), since its cause may be outside the spec (an admission policy an admin later removes).
PERMANENT_RETRY_SECONDS = (60.0, 900.0)

log = logging.getLogger("specpilot")

watch_events.install()  # before kopf starts watching: events arrive without managedFields


@dataclass(frozen=True)
class WriteFailure:
    digest: str
    message: str
    permanent: bool
    at: float
    refusals: int = 1  # in a row, for the same digest

    def blocks(self, now: float) -> bool:
        """Whether the same write must not be sent yet."""
        if not self.permanent:
            return now - self.at < TRANSIENT_RETRY_SECONDS
        first, cap = PERMANENT_RETRY_SECONDS
        return now - self.at < min(cap, first * 2.0 ** (self.refusals - 1))


def _refusal(previous: WriteFailure | None, digest: str, message: str, permanent: bool) -> WriteFailure:
    again = previous is not None and previous.digest == digest
    refusals = previous.refusals + 1 if previous is not None and again else 1
    return WriteFailure(digest, message, permanent, time.monotonic(), refusals)


@dataclass(frozen=True)
class BodySummary:
    """What the periodic pass needs to tell that nothing changed, without unpacking the stored body."""

    namespace: str
    name: str
    resource_version: str
    generation: int
    pod_monitor: bool
    rollout_in_flight: bool  # its deadline passes with nothing changing (status.effective.rolloutStarted)
    # what a round's due check reads: rounds unpack only the bodies of objects that are due
    due: DueMarks
    # labels and annotations: with the generation (the spec), what an edit changes and our status writes do not
    metadata_digest: int = 0

    @staticmethod
    def of(body: Mapping[str, Any]) -> BodySummary:
        metadata = body.get("metadata") or {}
        status = body.get("status") or {}
        effective = status.get("effective") or {}
        return BodySummary(
            namespace=str(metadata.get("namespace")),
            name=str(metadata.get("name")),
            resource_version=str(metadata.get("resourceVersion", "")),
            generation=int(metadata.get("generation", 0)),
            pod_monitor=bool(((body.get("spec") or {}).get("monitoring") or {}).get("podMonitor", False)),
            rollout_in_flight=bool(effective.get("configHash")) and not effective.get("rolloutCompleted"),
            due=DueMarks.of(status, metadata.get("annotations") or {}),
            metadata_digest=zlib.crc32(
                json.dumps([metadata.get("labels"), metadata.get("annotations")], sort_keys=True).encode()
            ),
        )

    def edited_since(self, earlier: BodySummary) -> bool:
        """An edit of the object (spec, labels, annotations) rather than a write of its status."""
        return (self.generation, self.metadata_digest) != (earlier.generation, earlier.metadata_digest)


def _pack(data: Mapping[str, Any]) -> bytes:
    """What ObjectMemory keeps for as long as an object lives: compact JSON, compressed (fast level)."""
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def _unpack(packed: bytes) -> Any:
    return json.loads(zlib.decompress(packed))


@dataclass
class ObjectMemory:
    """What this process remembers about one SpeculativeDeployment between reconciles (by UID).

    Mutated only while `lock` is held (one reconcile per object at a time); nothing here is needed for correctness
    after a restart: status and the children's applied-hash annotations carry the durable state.
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    # The status our last patch produced, with its resourceVersion (see reconcile.current_status), as compressed JSON
    # like the body: a status with a recommendation is ~15-40 KiB of dicts and ~3 KB packed, and an evaluation round
    # leaves one behind for every object it wrote until the watch delivers the write (measured at 1,000 objects: 25 MiB
    # of statuses held at once). Read through `written_status`, set through `remember_written`.
    written: tuple[str, bytes] | None = None
    # Children written moments ago ("Kind/name" -> digest, when): the index may not show our write yet.
    recent_applies: dict[str, tuple[str, float]] = field(default_factory=dict)
    pod_monitor: LiveChild | None = None
    pod_monitor_checked: float | None = None
    # Names of our children held by another owner ("Kind/name" -> (who, when looked up)).
    foreign: dict[str, tuple[str, float]] = field(default_factory=dict)
    failures: dict[str, WriteFailure] = field(default_factory=dict)
    warned_missing: set[str] = field(default_factory=set)
    # The latest body kopf handed us (for fleet rounds, owner enqueues and the periodic pass, which run outside the
    # object's handlers): its summary, and the body itself as compressed JSON without metadata.managedFields, one
    # tuple so that a reader never pairs one version's summary with another's body. Kept compressed because it is
    # kept for every object for as long as it lives: 3.5 KiB instead of 53 KiB of dicts (measured on a bench object
    # whose status carries a recommendation), decompressed in ~0.14 ms when a round or a changed object needs it.
    kept: tuple[BodySummary, bytes] | None = None
    # When the spec says the object is due, worked out once per generation: (generation, cadence or None when the
    # spec is invalid). Not the parsed spec itself: that is ~20 KiB of objects per object for as long as it lives.
    cadence: tuple[int, Cadence | None] | None = None
    # When this process last evaluated the object (the watch may not have delivered status.observed yet).
    evaluated_at: datetime | None = None
    # What the last completed reconcile decided from (resourceVersions of the object, our status write and the
    # children): the periodic pass does nothing while it is unchanged.
    fingerprint: tuple[Any, ...] | None = None

    @property
    def written_status(self) -> tuple[str, dict[str, Any]] | None:
        """Our last status write (resourceVersion, status), unpacked afresh on each read."""
        written = self.written
        return (written[0], _unpack(written[1])) if written else None

    def remember_written(self, written: tuple[str, Mapping[str, Any]] | None) -> None:
        self.written = (written[0], _pack(written[1])) if written else None

    def keep(self, body: kopf.Body) -> None:
        metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
        packed = _pack({**body, "metadata": metadata})
        self.kept = (BodySummary.of(body), packed)

    @property
    def summary(self) -> BodySummary | None:
        kept = self.kept
        return kept[0] if kept else None

    @property
    def body(self) -> kopf.Body | None:
        """The latest body (a fresh copy each time)."""
        kept = self.kept
        return kopf.Body(cast(kopf.RawBody, _unpack(kept[1]))) if kept else None


class OperatorMemory:
    """All per-object bookkeeping of this process in one place, safe across kopf's worker threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._objects: dict[str, ObjectMemory] = {}
        self._limiter = EventLimiter()

    def of(self, uid: str) -> ObjectMemory:
        with self._guard:
            return self._objects.setdefault(uid, ObjectMemory())

    def known(self, uid: str) -> ObjectMemory | None:
        with self._guard:
            return self._objects.get(uid)

    def snapshot(self) -> list[tuple[str, ObjectMemory]]:
        with self._guard:
            return list(self._objects.items())

    def allow_event(self, uid: str, reason: str, message: str) -> bool:
        with self._guard:
            return self._limiter.allow(uid, reason, message, time.monotonic())

    def forget(self, uid: str) -> None:
        with self._guard:
            self._objects.pop(uid, None)
            self._limiter.forget(uid)


MEMORY = OperatorMemory()
_kube: KubeAdapter | None = None


def kube() -> KubeAdapter:
    global _kube
    if _kube is None:
        _kube = KubeAdapter(
            load_credentials(HANDLER_THREADS),
            on_write=lambda kind, verb: telemetry.API_WRITES.labels(kind, verb).inc(),
            on_request=lambda kind, verb, seconds: telemetry.API_REQUEST_SECONDS.labels(kind, verb).observe(seconds),
        )
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
    settings.execution.max_workers = HANDLER_THREADS
    global _EXECUTOR
    _EXECUTOR = settings.execution.executor
    settings.watching.initial_streaming = True
    settings.scanning.disabled = True


def _ownership(body: kopf.Body) -> dict[str, Any]:
    """uid and controller of a child: it is ours only if its controller reference carries our CR's UID."""
    owner = next((r for r in body.metadata.get("ownerReferences") or [] if r.get("controller")), None)
    return {
        "uid": str(body.metadata.uid),
        "resourceVersion": body.metadata.get("resourceVersion"),
        "owner": str(owner["uid"]) if owner else None,
        "controller": f"{owner['kind']}/{owner['name']}" if owner else None,
    }


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def owned_deployments(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    """The live state of our Deployments, so ticks read memory instead of the API server."""
    return {
        (namespace, name): {
            **_ownership(body),
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


def _small_child(body: kopf.Body) -> dict[str, Any]:
    return {
        **_ownership(body),
        "appliedHash": body.metadata.annotations.get(rec.ANNOTATION_APPLIED_HASH, ""),
        "spec": dict(body.spec),
    }


@kopf.index("", "v1", "services", labels=MANAGED)
async def owned_services(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    return {(namespace, name): _small_child(body)}


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def owned_disruption_budgets(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    return {(namespace, name): _small_child(body)}


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
    """What the indexes (and memory) say about one object's children."""

    digests: dict[str, str | None]  # "Kind/name" -> applied digest, ours only; absent: we have no such child
    uids: dict[str, str]  # "Kind/name" -> the child's own UID (delete precondition)
    specs: dict[str, dict[str, Any]]  # live spec of our Services, PDBs and PodMonitors (drift check)
    foreign: dict[str, str]  # names of our children held by another owner -> who holds them
    deployment: rec.ObservedDeployment | None
    canary: rec.ObservedDeployment | None
    recent: frozenset[str]  # applied so recently that the index may not show our write yet (our digest wins)


def _live_children(
    namespace: str, name: str, uid: str, indexes: Indexes, memory: ObjectMemory, wants_pod_monitor: bool, fresh: bool
) -> LiveChildren:
    """Our children, recognised by their controller's UID (never by name alone)."""
    digests: dict[str, str | None] = {}
    uids: dict[str, str] = {}
    specs: dict[str, dict[str, Any]] = {}
    foreign: dict[str, str] = {}
    observed: dict[str, rec.ObservedDeployment | None] = {}

    def sort(key: str, entry: Mapping[str, Any]) -> bool:
        if entry.get("owner") == uid:
            uids[key] = str(entry.get("uid", ""))
            return True
        foreign[key] = str(entry.get("controller") or "no controller (specpilot adopts nothing)")
        return False

    for deployment_name in (name, manifests.canary_name(name)):
        key = f"Deployment/{deployment_name}"
        entry = _first(indexes["deployments"], (namespace, deployment_name))
        found = None
        if entry is not None and sort(key, entry):
            found = rec.ObservedDeployment.from_object(entry)
            digests[key] = found.applied_hash
        observed[deployment_name] = found
    for kind, index in (("Service", "services"), ("PodDisruptionBudget", "disruption_budgets")):
        key = f"{kind}/{name}"
        entry = _first(indexes[index], (namespace, name))
        if entry is not None and sort(key, entry):
            digests[key] = entry["appliedHash"]
            specs[key] = dict(entry["spec"])
    now = time.monotonic()
    if wants_pod_monitor and (
        fresh or memory.pod_monitor_checked is None or now - memory.pod_monitor_checked >= POD_MONITOR_RECHECK_SECONDS
    ):
        memory.pod_monitor = kube().read_child("monitoring.coreos.com/v1", "PodMonitor", namespace, name)
        memory.pod_monitor_checked = now
    monitor = memory.pod_monitor if wants_pod_monitor else None
    if monitor is not None:
        key = f"PodMonitor/{name}"
        if monitor.controller_uid == uid:
            digests[key] = monitor.applied_hash or ""
            uids[key] = monitor.uid
            specs[key] = monitor.spec
        else:
            foreign[key] = monitor.controller or "no controller (specpilot adopts nothing)"
    for key, (who, at) in list(memory.foreign.items()):
        if now - at >= FOREIGN_RECHECK_SECONDS:
            del memory.foreign[key]
        else:
            foreign.setdefault(key, who)
    recent: set[str] = set()
    for key, (digest, at) in list(memory.recent_applies.items()):
        if now - at > RECENT_APPLY_GRACE_SECONDS or digests.get(key) == digest:
            del memory.recent_applies[key]  # the grace ran out, or the index shows our write already
        else:
            digests[key] = digest
            recent.add(key)
            foreign.pop(key, None)
    return LiveChildren(
        digests,
        uids,
        specs,
        foreign,
        observed[name],
        observed[manifests.canary_name(name)],
        frozenset(recent),
    )


def _now() -> str:
    return format_time(datetime.now(UTC))


@dataclass(frozen=True)
class DecidedFrom:
    """The status a reconcile decides from and the resourceVersion that holds it (the write precondition)."""

    status: dict[str, Any]
    resource_version: str


def _caught_up(memory: ObjectMemory, resource_version: str) -> None:
    """Forget our last status write once the watch has delivered it (or anything newer): `_status_of`'s rule
    (reconcile.current_status), for the periodic pass, which decides from the summary before unpacking the body."""
    if memory.written is not None and not rec.resource_version_is_older(resource_version, memory.written[0]):
        memory.written = None


def _status_of(body: kopf.Body, memory: ObjectMemory) -> DecidedFrom:
    """The body's status, or our own last write when kopf's copy of the object predates it."""
    body_version = str(body.metadata.get("resourceVersion", ""))
    written = memory.written_status
    status, ahead = rec.current_status(body_version, dict(body.get("status", {})), written)
    if ahead and written is not None:
        return DecidedFrom(status, written[0])
    memory.written = None
    return DecidedFrom(status, body_version)


def _blocking_failures(memory: ObjectMemory) -> dict[str, rec.ApplyFailure]:
    """Refusals still in force: passing ones for a short while, lasting ones with a doubling backoff (and until what
    we send changes, since a changed object is a new request)."""
    now = time.monotonic()
    return {key: rec.ApplyFailure(f.digest, f.message) for key, f in memory.failures.items() if f.blocks(now)}


def _failpoint(name: str) -> None:
    """Die here, as a crash would, when a test asks for it (proves that persisted intent survives a kill)."""
    if os.environ.get(FAILPOINT_ENV) == name:
        log.critical("failpoint %s: exiting now", name)
        logging.shutdown()
        os._exit(86)


def _inputs(
    body: kopf.Body,
    decided: DecidedFrom,
    children: LiveChildren,
    memory: ObjectMemory,
    autotune: AutotuneOutcome | None,
) -> rec.ReconcileInputs:
    meta = body.metadata
    return rec.ReconcileInputs(
        name=str(meta.name),
        namespace=str(meta.namespace),
        uid=str(meta.uid),
        generation=int(meta.get("generation", 0)),
        annotations=dict(meta.annotations),
        spec=dict(body.spec),
        status=decided.status,
        now=_now(),
        live_children=children.digests,
        deployment=children.deployment,
        canary_deployment=children.canary,
        recently_applied=children.recent,
        autotune_fields=autotune.fields if autotune else {},
        autotune_conditions=tuple(autotune.conditions) if autotune else (),
        conflicts=children.foreign,
        apply_failures=_blocking_failures(memory),
        live_specs=children.specs,
    )


def _look_for_foreign(result: rec.ReconcileResult, inputs: rec.ReconcileInputs, memory: ObjectMemory) -> bool:
    """Before creating a child we have never seen, check that its name is free: one GET, on creation only.

    The indexes see only objects labelled as ours; a same-named object without the label (someone's own Service,
    say) would otherwise be taken over by server-side apply. Returns whether a foreign holder was found.
    """
    found = False
    for child in result.apply:
        key = rec.child_key(child)
        if key in inputs.live_children or key in inputs.conflicts:
            continue
        live = kube().read_child(child["apiVersion"], child["kind"], inputs.namespace, child["metadata"]["name"])
        if live is not None and live.controller_uid != inputs.uid:
            who = live.controller or "no controller (specpilot adopts nothing)"
            memory.foreign[key] = (who, time.monotonic())
            found = True
    return found


def _write_status(
    body: kopf.Body, memory: ObjectMemory, before: Mapping[str, Any], after: Mapping[str, Any], precondition: str | None
) -> bool:
    """Patch status as an exact merge patch; with `precondition`, only over that resourceVersion. False: stale."""
    meta = body.metadata
    merge_patch = rec.status_merge_patch(before, after)
    log.debug("%s/%s: status changed %s", meta.namespace, meta.name, json.dumps(merge_patch)[:600])
    try:
        written = kube().patch_status(
            f"{GROUP}/{VERSION}", v1alpha1.KIND, str(meta.namespace), str(meta.name), merge_patch,
            resource_version=precondition,
        )  # fmt: skip
    except StaleStatus:
        log.info("%s/%s: the object changed since this decision was made; deciding again", meta.namespace, meta.name)
        telemetry.RECONCILES.labels("status", "stale").inc()
        return False
    if written is not None:
        memory.remember_written(written)
    return True


def _write_children(
    result: rec.ReconcileResult, inputs: rec.ReconcileInputs, children: LiveChildren, memory: ObjectMemory
) -> tuple[list[rec.Event], bool]:
    """Apply and delete what the reconcile asked for; (events, whether a refusal appeared or cleared)."""
    namespace, name = inputs.namespace, inputs.name
    events: list[rec.Event] = []
    changed = False
    for child in result.apply:
        key = rec.child_key(child)
        digest = child["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH]
        try:
            kube().apply(child)
        except MissingApi as err:
            if key not in memory.warned_missing:
                memory.warned_missing.add(key)
                log.warning("%s/%s: skipping %s: %s", namespace, name, key, err)
                events.append(rec.Event("Warning", "MonitoringApiMissing", f"not creating {key}: {err}"))
            continue
        except WriteRefused as err:
            log.warning("%s/%s: %s refused (HTTP %s): %s", namespace, name, key, err.status, err)
            telemetry.WRITE_ERRORS.labels(child["kind"], "apply", str(err.status)).inc()
            memory.failures[key] = _refusal(memory.failures.get(key), digest, str(err), err.permanent)
            changed = True
            continue
        changed |= memory.failures.pop(key, None) is not None
        memory.recent_applies[key] = (digest, time.monotonic())
        if child["kind"] == "PodMonitor":
            memory.pod_monitor_checked = None  # read it back on the next tick
    for key in result.delete:
        kind, child_name = key.split("/", 1)
        try:
            kube().delete(rec.CHILD_API_VERSIONS[kind], kind, namespace, child_name, uid=children.uids.get(key))
        except WriteRefused as err:
            log.warning("%s/%s: deleting %s refused (HTTP %s): %s", namespace, name, key, err.status, err)
            telemetry.WRITE_ERRORS.labels(kind, "delete", str(err.status)).inc()
            memory.failures[key] = _refusal(memory.failures.get(key), rec.DELETE_DIGEST, str(err), err.permanent)
            changed = True
            continue
        changed |= memory.failures.pop(key, None) is not None
        memory.recent_applies.pop(key, None)
        if kind == "PodMonitor":
            memory.pod_monitor, memory.pod_monitor_checked = None, None
    return events, changed


def run_reconcile(
    trigger: str,
    body: kopf.Body,
    decided: DecidedFrom,
    indexes: Indexes,
    memory: ObjectMemory,
    autotune: AutotuneOutcome | None = None,
) -> rec.ReconcileResult | None:
    """Observe -> decide (pure) -> persist the decision in status -> apply children -> report refusals -> events.

    Status goes first: an autotune actuation (the chosen config and its record, which charges the budget) is
    written with a resourceVersion precondition before any child changes, so a failed write changes nothing and a
    crash after it resumes into exactly one rollout from the persisted choice. None: the status write found the
    object changed since the decision (nothing was applied).
    """
    meta = body.metadata
    namespace, name = str(meta.namespace), str(meta.name)
    started = time.monotonic()
    wants_pod_monitor = bool(body.spec.get("monitoring", {}).get("podMonitor", False))

    def decide() -> tuple[rec.ReconcileInputs, LiveChildren, rec.ReconcileResult]:
        children = _live_children(
            namespace, name, str(meta.uid), indexes, memory, wants_pod_monitor, trigger != "timer"
        )
        inputs = _inputs(body, decided, children, memory, autotune)
        return inputs, children, rec.reconcile(inputs, choose_intent(inputs))

    inputs, children, result = decide()
    if _look_for_foreign(result, inputs, memory):
        inputs, children, result = decide()
    actuating = autotune is not None and autotune.actuated
    if result.status_patch is not None:
        precondition = decided.resource_version if actuating else None
        if not _write_status(body, memory, decided.status, result.status_patch, precondition):
            return None  # nothing applied: the next tick decides again from the newer object
        if actuating:
            _failpoint("exit-after-actuation-status")
    write_events, refusals_changed = _write_children(result, inputs, children, memory)
    events = [*(autotune.events if autotune else []), *result.events, *write_events]
    if refusals_changed:
        # Say what the API server refused (or that it stopped refusing) in status and one event.
        written = memory.written_status
        stored = written[1] if written else decided.status
        children = _live_children(namespace, name, str(meta.uid), indexes, memory, wants_pod_monitor, False)
        again_inputs = replace(_inputs(body, DecidedFrom(stored, ""), children, memory, None), now=inputs.now)
        again = rec.reconcile(again_inputs, choose_intent(again_inputs))
        if again.status_patch is not None:
            _write_status(body, memory, stored, again.status_patch, None)
        events += again.events
    post_events(body, events)
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
        if MEMORY.allow_event(uid, event.reason, event.message):
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
            telemetry.API_WRITES.labels("Event", "create").inc()
            telemetry.EVENTS.labels(event.reason, "posted").inc()
        else:
            telemetry.EVENTS.labels(event.reason, "suppressed").inc()


def _spec_of(body: kopf.Body) -> v1alpha1.SpeculativeDeploymentSpec | None:
    """The body's parsed spec, None when invalid (the reconcile reports why)."""
    try:
        return v1alpha1.parse_spec(dict(body.spec))
    except v1alpha1.InvalidSpec:
        return None


def _cadence_of(memory: ObjectMemory) -> Cadence | None:
    """When the kept body's spec makes it due, worked out once per generation (rounds look at every object every
    tick; only the due ones are unpacked and parsed)."""
    summary = memory.summary
    if summary is None:
        return None
    if memory.cadence is None or memory.cadence[0] != summary.generation:
        body = memory.body
        spec = _spec_of(body) if body is not None else None
        memory.cadence = (summary.generation, Cadence.of(spec) if spec is not None else None)
    return memory.cadence[1]


def _idle_outcome(cadence: Cadence | None) -> AutotuneOutcome | None:
    """The autotune conditions of an object that cannot be evaluated (mode Off, or no Prometheus)."""
    if cadence is not None and cadence.idle is not None:
        return AutotuneOutcome({}, idle_conditions(cadence.idle), [])
    return None


def _fingerprint(summary: BodySummary, indexes: Indexes, memory: ObjectMemory) -> tuple[Any, ...] | None:
    """What a reconcile of this object decides from, as resourceVersions; None while something is pending in time
    (a write in its grace period, a refusal waiting out its backoff, a foreign holder, a PodMonitor to look up
    again, or a rollout whose deadline the operator times itself), which the periodic pass must handle even though
    no object changed."""
    if memory.recent_applies or memory.failures or memory.foreign:
        return None
    if summary.pod_monitor or summary.rollout_in_flight:
        return None
    namespace, name = summary.namespace, summary.name
    children = []
    for index, child in (
        ("deployments", name),
        ("deployments", manifests.canary_name(name)),
        ("services", name),
        ("disruption_budgets", name),
    ):
        entry = _first(indexes[index], (namespace, child))
        children.append(None if entry is None else (entry.get("uid"), entry.get("resourceVersion")))
    written = memory.written[0] if memory.written else None
    return (summary.resource_version, written, *children)


def _reconcile_if_changed(trigger: str, indexes: Indexes, memory: ObjectMemory) -> None:
    """Reconcile the kept body unless nothing it reads changed since the last one (then: no API reads, no writes, and
    the stored body is not even unpacked). Call with the object's lock held."""
    summary = memory.summary
    if summary is None:
        return
    _caught_up(memory, summary.resource_version)
    fingerprint = _fingerprint(summary, indexes, memory)
    if fingerprint is not None and fingerprint == memory.fingerprint:
        telemetry.RECONCILES.labels(trigger, "unchanged").inc()
        return
    body = memory.body
    if body is None:
        return
    decided = _status_of(body, memory)
    if run_reconcile(trigger, body, decided, indexes, memory, autotune=_idle_outcome(_cadence_of(memory))) is not None:
        memory.fingerprint = fingerprint


_INDEXES: Indexes | None = None
_CONTEXT: contextvars.Context | None = None


def _remember(body: kopf.Body, kwargs: Mapping[str, Any]) -> tuple[ObjectMemory, Indexes]:
    """Keep the latest body, the (live) indexes and kopf's context for work that runs outside this handler."""
    global _INDEXES, _CONTEXT
    indexes = _indexes(kwargs)
    if _INDEXES is None or _CONTEXT is None:
        _INDEXES, _CONTEXT = indexes, contextvars.copy_context()
    memory = MEMORY.of(str(body.metadata.uid))
    memory.keep(body)
    return memory, indexes


@kopf.on.event(GROUP, VERSION, PLURAL)
async def speculativedeployment_changed(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    """Keep the latest body and queue a reconcile when the object is new to this process or was edited.

    Watch events drive reconciles directly, as in controller-runtime: kopf's create/update/resume handlers would
    make kopf write its own annotations (the last handled spec, handler progress) on every object it handles, one
    more API write per creation and per edit, and kopf would hold each object's events until that write came back:
    in a burst of 1,000 creations that, with handlers waiting on handler threads, held ~400 MiB at the peak, and
    resident memory stays near its peak. Here an event costs a compression (~1 ms) in the event loop and, when
    there is something to do, one queue entry; a handler thread reconciles from the kept body (`_run_next`).

    New to this process: the initial listing (type None: the operator started, kopf's "resume") or ADDED
    ("create"). Edited: the spec (generation), labels or annotations changed ("update"; the pause and reevaluate
    annotations are edits). Our own status writes are none of these; the periodic pass catches anything else that
    changes (a status edited by hand) within a tick.
    """
    uid = str(body.metadata.uid)
    if type == "DELETED":
        MEMORY.forget(uid)
        return
    before = MEMORY.known(uid)
    earlier = before.summary if before is not None else None
    memory, indexes = _remember(body, kwargs)
    now = memory.summary
    if earlier is None or now is None:
        trigger = "resume" if type is None else "create"
    elif now.edited_since(earlier):
        trigger = "update"
    else:
        return
    _enqueue(uid, trigger, indexes, memory, wait_for_lock=True)


def periodic_pass() -> int:
    """Drift repair and retries for every known object, from the operator's memory; nothing at all (no API reads, no
    writes) while an object and its children are unchanged. Returns how many objects it looked at.

    One pass every tick in the operator's own thread rather than a kopf timer per object: kopf puts a finalizer on
    every object with a timer (one more write at creation, and the create handler waits for that write's event), so
    objects would stay Terminating while no operator runs (an uninstall, a namespace deletion); and a timer is a task
    per object held in memory. An object being reconciled right now is skipped: that reconcile is the pass.
    Autotune evaluations run in fleet rounds (`run_round`), not here."""
    indexes = _INDEXES
    if indexes is None:
        return 0
    looked = 0
    for uid, memory in MEMORY.snapshot():
        if memory.kept is None or not memory.lock.acquire(blocking=False):
            continue
        try:
            looked += 1
            _reconcile_if_changed("timer", indexes, memory)
        except Exception:  # one object's failure must not cost the others their pass
            log.exception("periodic pass of %s failed", uid)
        finally:
            memory.lock.release()
    return looked


def _owner_uid(body: kopf.Body) -> str | None:
    for ref in body.metadata.get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == v1alpha1.KIND
            and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
        ):
            return str(ref.get("uid"))
    return None


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("", "v1", "services", labels=MANAGED)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def enqueue_owner(body: kopf.Body, **kwargs: Any) -> None:
    """A change of an owned child reconciles its owner at once (controller-runtime's Owns()): a rollout's progress
    or a child edited or deleted behind our back is seen without waiting for the periodic pass.

    Like controller-runtime's work queue, an owner is queued at most once: the reconcile reads the children's
    latest state from the indexes when it runs, so the events that arrive while it waits are all answered by it.
    The event's own handling ends here, in the event loop: kopf's worker for the child is free at once instead of
    holding the child's events (a body each) until a handler thread frees up behind slower reconciles."""
    uid = _owner_uid(body)
    memory = MEMORY.known(uid) if uid else None
    if uid is None or memory is None or memory.kept is None:
        return  # not ours, or the owner's own handlers have not run yet (they reconcile it anyway)
    _enqueue(uid, "child", _indexes(kwargs), memory, wait_for_lock=False)


_EXECUTOR: concurrent.futures.Executor | None = None  # kopf's handler threads (configure), sized to the API pool
_WORK: WorkQueue[tuple[Indexes, ObjectMemory]] = WorkQueue()


def _enqueue(uid: str, trigger: str, indexes: Indexes, memory: ObjectMemory, *, wait_for_lock: bool) -> None:
    """controller-runtime's work queue (workqueue.py): an object is queued at most once, new and edited objects before
    children's follow-ups; the reconcile reads the kept body and the children's indexes when it runs, so whatever
    arrives while it waits is answered by that one reconcile. Each new entry hands one `_run_next` to the handler
    threads, which takes whichever entry is first in line when a thread is free."""
    added = _WORK.add(
        uid, trigger, (indexes, memory), urgent=trigger != "child", wait_for_lock=wait_for_lock, now=time.monotonic()
    )
    if not added:
        telemetry.RECONCILES.labels(trigger, "queued").inc()
        return
    run = functools.partial(_handler_context().run, _run_next)
    future = asyncio.get_running_loop().run_in_executor(_EXECUTOR, run)
    future.add_done_callback(_after_queued)


def _handler_context() -> contextvars.Context:
    """A fresh copy of the first handler's context, to run a queued reconcile in.

    What the reconcile needs from kopf's context (where kopf.event posts) is the same for every object. The context
    of the event being handled would also carry kopf's cause of that event, its whole body included, and keep it
    alive until the reconcile runs: in a burst of 1,000 creations, one body per queued object.
    """
    context = _CONTEXT if _CONTEXT is not None else contextvars.copy_context()
    return context.copy()


def _run_next() -> None:
    """Reconcile the entry first in line. A reconcile that fails is retried by the periodic pass (its fingerprint
    is forgotten), not lost."""
    taken = _WORK.take()
    if taken is None:
        return
    uid, entry = taken
    indexes, memory = entry.payload
    telemetry.QUEUE_WAIT_SECONDS.labels(entry.trigger).observe(time.monotonic() - entry.queued_at)
    if not memory.lock.acquire(blocking=entry.wait_for_lock):
        # Being reconciled right now (often: the event was that reconcile's own write). Do not hold a thread
        # waiting for it; the next periodic pass looks again.
        memory.fingerprint = None
        telemetry.RECONCILES.labels(entry.trigger, "busy").inc()
        return
    try:
        _reconcile_if_changed(entry.trigger, indexes, memory)
    except Exception:
        memory.fingerprint = None
        log.exception("reconcile of %s failed; the periodic pass retries it", uid)
    finally:
        memory.lock.release()


def _after_queued(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("taking from the work queue failed", exc_info=future.exception())


# ------------------------------------------------------------------------------------------------ fleet rounds


@dataclass(frozen=True)
class _Due:
    uid: str
    memory: ObjectMemory
    spec: v1alpha1.SpeculativeDeploymentSpec
    scope: Scope
    canary: Scope | None
    warnings: list[rec.Event]


def run_round(now: datetime) -> int:
    """One evaluation round: every due object, grouped by Prometheus connection, measured with one query per metric
    per query shape (evaluate.measure_many), then concluded and reconciled one by one. Returns the queries sent."""
    indexes = _INDEXES
    if indexes is None:
        return 0
    groups: dict[tuple[Any, ...], tuple[PrometheusClient | connections.UnavailablePrometheus, list[_Due]]] = {}
    resolved: dict[tuple[str, str], tuple[connections.Resolution, list[rec.Event]]] = {}
    for uid, memory in MEMORY.snapshot():
        summary, cadence = memory.summary, _cadence_of(memory)
        if summary is None or cadence is None or not cadence.active:
            continue
        written = memory.written_status
        marks = summary.due.with_status(written[1]) if written else summary.due
        if not is_due(cadence, marks, now, phase_key=uid, evaluated_at=memory.evaluated_at):
            continue
        body = memory.body
        spec = _spec_of(body) if body is not None else None
        if body is None or spec is None or spec.autotune.prometheus is None:
            continue
        status = written[1] if written else dict(body.get("status", {}))
        namespace, name = str(body.metadata.namespace), str(body.metadata.name)
        scopes = evaluation_scopes(spec, name=name, namespace=namespace, status=status)
        if scopes is None:
            continue  # no rendered config in status.effective yet: the reconcile writes one first
        where = (spec.autotune.prometheus.model_dump_json(), namespace)
        if where not in resolved:
            resolution = connections.resolve(connections.registry(), spec.autotune.prometheus, namespace)
            events = [rec.Event("Warning", reason, message) for reason, message in resolution.warnings]
            if resolution.problem is not None:
                events.append(rec.Event("Warning", "PrometheusConnectionRefused", resolution.problem))
            resolved[where] = (resolution, events)
        resolution, events = resolved[where]
        key = ("ok", *resolution.connection.identity()) if resolution.connection else ("none", resolution.problem)
        if key not in groups:
            client: PrometheusClient | connections.UnavailablePrometheus = (
                PrometheusClient(resolution.connection)
                if resolution.connection
                else connections.UnavailablePrometheus(resolution.problem or "unknown")
            )
            groups[key] = (client, [])
        groups[key][1].append(_Due(uid, memory, spec, scopes[0], scopes[1], events))
    sent = 0
    for client, members in groups.values():
        subjects = [Subject((m.uid, "main"), m.spec, m.scope) for m in members]
        subjects += [Subject((m.uid, "canary"), m.spec, m.canary) for m in members if m.canary is not None]
        with client:
            result = measure_many(subjects, client, now)
        sent += result.queries_sent
        telemetry.PROMETHEUS_QUERIES.inc(result.queries_sent)
        telemetry.ROUND_SIZE.observe(len(members))
        for member in members:
            try:
                _conclude_and_reconcile(member, result.measurements, now, indexes)
            except Exception:  # one object's failure must not cost the others their evaluation
                log.exception("autotune evaluation of %s failed", member.uid)
    return sent


def _conclude_and_reconcile(
    member: _Due, measured: Mapping[Hashable, dict[str, Measurement]], now: datetime, indexes: Indexes
) -> None:
    memory = member.memory
    with memory.lock:
        body = memory.body
        if body is None:
            return
        decided = _status_of(body, memory)
        namespace, name = str(body.metadata.namespace), str(body.metadata.name)
        if evaluation_scopes(member.spec, name=name, namespace=namespace, status=decided.status) != (
            member.scope,
            member.canary,
        ):
            return  # the config changed while we measured: the next round measures the new one
        deployment = _first(indexes["deployments"], (namespace, name))
        ours = deployment is not None and deployment.get("owner") == member.uid
        outcome = conclude(
            member.spec,
            annotations=dict(body.metadata.annotations),
            status=decided.status,
            deployment=rec.ObservedDeployment.from_object(deployment) if deployment is not None and ours else None,
            measurements=measured[(member.uid, "main")],
            canary=measured.get((member.uid, "canary")),
            now=now,
        )
        outcome = AutotuneOutcome(
            without_heartbeat(outcome.fields, decided.status),
            outcome.conditions,
            [*member.warnings, *outcome.events],
            outcome.actuated,
            outcome.decision,
        )
        _report(namespace, name, member.spec, outcome)
        fingerprint = _fingerprint(BodySummary.of(body), indexes, memory)
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


class Ticker:
    """A thread that runs `work` every tick inside kopf's context (so events post as from a handler)."""

    def __init__(self, name: str, work: Callable[[], object], took: Callable[[float], None] | None = None) -> None:
        self._name, self._work, self._took = name, work, took
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=f"specpilot-{self._name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            context = _CONTEXT
            if context is None:
                continue  # no object handled yet
            started = time.monotonic()
            try:
                context.copy().run(self._work)
            except Exception:
                log.exception("%s failed", self._name)
            heap.release_free_memory()  # what the pass or round freed goes back to the kernel (adapters/heap.py)
            for state, size in heap.usage().items():
                telemetry.HEAP_BYTES.labels(state).set(size)
            if self._took is not None:
                self._took(time.monotonic() - started)


ROUNDS = Ticker("evaluation round", lambda: run_round(datetime.now(UTC)), telemetry.ROUND_SECONDS.observe)


PERIODIC = Ticker("periodic pass", periodic_pass)


@kopf.on.startup()
def start_tickers(**_: Any) -> None:
    log.info("memory goes back to the kernel through %s after each pass (adapters/heap.py)", heap.allocator())
    ROUNDS.start()
    PERIODIC.start()


@kopf.on.cleanup()
def stop_tickers(**_: Any) -> None:
    ROUNDS.stop()
    PERIODIC.stop()
