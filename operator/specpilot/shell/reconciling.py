"""One reconcile of one object: observe (indexes, memory), decide (the pure reconcile), persist the decision in
status, write children, report refusals, post events."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import kopf

from specpilot.adapters.k8s import MissingApi, StaleStatus, WriteRefused
from specpilot.api import v1alpha1
from specpilot.autotune.evaluation import AutotuneOutcome, choose_intent, format_time
from specpilot.reconcile import core as rec
from specpilot.shell import telemetry
from specpilot.shell.children import LiveChildren, live_children
from specpilot.shell.memory import MEMORY, ObjectMemory, refusal
from specpilot.shell.wiring import GROUP, VERSION, Indexes, kube, log

FAILPOINT_ENV = "SPECPILOT_FAILPOINT"  # fault injection for tests: "exit-after-actuation-status"


def now_text() -> str:
    return format_time(datetime.now(UTC))


@dataclass(frozen=True)
class DecidedFrom:
    """The status a reconcile decides from and the resourceVersion that holds it (the write precondition)."""

    status: dict[str, Any]
    resource_version: str


def caught_up(memory: ObjectMemory, resource_version: str) -> None:
    """Forget our last status write once the watch has delivered it (or anything newer): `status_of`'s rule
    (reconcile.current_status), for the periodic pass, which decides from the summary before unpacking the body."""
    if memory.written is not None and not rec.resource_version_is_older(resource_version, memory.written[0]):
        memory.written = None


def status_of(body: kopf.Body, memory: ObjectMemory) -> DecidedFrom:
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
        now=now_text(),
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


def write_status(
    body: kopf.Body, memory: ObjectMemory, before: Mapping[str, Any], after: Mapping[str, Any], precondition: str
) -> bool:
    """Patch status as an exact merge patch, only over the resourceVersion `precondition` the decision was made
    from: never over a newer object, nor over another created since under the same name (a UID in a status patch
    guards nothing; the status strategy keeps the stored metadata). False: stale, or the object is gone."""
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
    if written is None:  # 404: the object is gone, and nothing may be applied for it
        log.info("%s/%s: the object is gone; applying nothing for it, forgetting it", meta.namespace, meta.name)
        telemetry.RECONCILES.labels("status", "gone").inc()
        # Its DELETED event may never come: a watch that failed re-lists, and a re-list does not name what went away.
        MEMORY.forget(str(meta.uid))
        telemetry.forget_object(str(meta.namespace), str(meta.name))
        return False
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
            memory.failures[key] = refusal(memory.failures.get(key), digest, str(err), err.permanent)
            changed = True
            continue
        changed |= memory.failures.pop(key, None) is not None
        memory.warned_missing.discard(key)  # served now: warn again should its API go away
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
            memory.failures[key] = refusal(memory.failures.get(key), rec.DELETE_DIGEST, str(err), err.permanent)
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
    crash after it resumes into exactly one rollout from the persisted choice. None: nothing was applied, because
    the object is being deleted, or the status write found it changed since the decision or gone.
    """
    meta = body.metadata
    if meta.get("deletionTimestamp"):
        # Being deleted (a foreground deletion waits for its children): what the collector removes stays removed.
        telemetry.RECONCILES.labels(trigger, "deleting").inc()
        return None
    namespace, name = str(meta.namespace), str(meta.name)
    started = time.monotonic()
    wants_pod_monitor = bool(body.spec.get("monitoring", {}).get("podMonitor", False))

    def decide() -> tuple[rec.ReconcileInputs, LiveChildren, rec.ReconcileResult]:
        children = live_children(namespace, name, str(meta.uid), indexes, memory, wants_pod_monitor, trigger != "timer")
        inputs = _inputs(body, decided, children, memory, autotune)
        return inputs, children, rec.reconcile(inputs, choose_intent(inputs))

    inputs, children, result = decide()
    if _look_for_foreign(result, inputs, memory):
        inputs, children, result = decide()
    actuating = autotune is not None and autotune.actuated
    if result.status_patch is not None:
        if not write_status(body, memory, decided.status, result.status_patch, decided.resource_version):
            return None  # nothing applied: the next tick decides again from the newer object
        if actuating:
            _failpoint("exit-after-actuation-status")
    write_events, refusals_changed = _write_children(result, inputs, children, memory)
    events = [*(autotune.events if autotune else []), *result.events, *write_events]
    if refusals_changed:
        # Say what the API server refused (or that it stopped refusing) in status and one event.
        written = memory.written_status
        version, stored = written if written else (decided.resource_version, decided.status)
        children = live_children(namespace, name, str(meta.uid), indexes, memory, wants_pod_monitor, False)
        again_inputs = replace(_inputs(body, DecidedFrom(stored, ""), children, memory, None), now=inputs.now)
        again = rec.reconcile(again_inputs, choose_intent(again_inputs))
        if again.status_patch is not None:
            write_status(body, memory, stored, again.status_patch, version)
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
