"""The watch events of SpeculativeDeployments and of their children, the work queue they feed, and the periodic pass.

One level-based reconcile runs when an object is new to this process or edited, when an owned child changes (the
owner is enqueued, like controller-runtime's Owns()), and from a periodic pass that repairs drift. Children are read
from kopf indexes, and the periodic pass skips an object whose resourceVersions (its own, our last status write's,
its children's) are those of the last reconcile: an unchanged object costs no API reads, no writes, no rendering.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Mapping
from typing import Any

import kopf

from specpilot.api import v1alpha1
from specpilot.autotune.evaluation import AutotuneOutcome, Cadence, idle_conditions
from specpilot.shell import telemetry
from specpilot.shell.children import fingerprint_of, indexes_of
from specpilot.shell.failures import reconcile_failed
from specpilot.shell.memory import MEMORY, ObjectMemory, cadence_of
from specpilot.shell.reconciling import caught_up, run_reconcile, status_of
from specpilot.shell.wiring import CAPTURED, GROUP, MANAGED, PLURAL, VERSION, Indexes, handler_context, log
from specpilot.shell.workqueue import WorkQueue


def _idle_outcome(cadence: Cadence | None) -> AutotuneOutcome | None:
    """The autotune conditions of an object that cannot be evaluated (mode Off, or no Prometheus)."""
    if cadence is not None and cadence.idle is not None:
        return AutotuneOutcome({}, idle_conditions(cadence.idle), [])
    return None


def reconcile_if_changed(trigger: str, indexes: Indexes, memory: ObjectMemory) -> None:
    """Reconcile the kept body unless nothing it reads changed since the last one (then: no API reads, no writes, and
    the stored body is not even unpacked). Call with the object's lock held."""
    summary = memory.summary
    if summary is None:
        return
    caught_up(memory, summary.resource_version)
    fingerprint = fingerprint_of(summary, indexes, memory)
    if fingerprint is not None and fingerprint == memory.fingerprint:
        telemetry.RECONCILES.labels(trigger, "unchanged").inc()
        return
    body = memory.body
    if body is None:
        return
    decided = status_of(body, memory)
    if run_reconcile(trigger, body, decided, indexes, memory, autotune=_idle_outcome(cadence_of(memory))) is not None:
        memory.fingerprint = fingerprint


def _remember(body: kopf.Body, kwargs: Mapping[str, Any]) -> tuple[ObjectMemory, Indexes]:
    """Keep the latest body, the (live) indexes and kopf's context for work that runs outside this handler."""
    indexes = indexes_of(kwargs)
    if CAPTURED.indexes is None or CAPTURED.context is None:
        CAPTURED.indexes, CAPTURED.context = indexes, contextvars.copy_context()
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
    Autotune evaluations run in fleet rounds (rounds.run_round), not here."""
    indexes = CAPTURED.indexes
    if indexes is None:
        return 0
    looked = 0
    for uid, memory in MEMORY.snapshot():
        if memory.kept is None or not memory.lock.acquire(blocking=False):
            continue
        try:
            looked += 1
            reconcile_if_changed("timer", indexes, memory)
        except Exception as err:  # one object's failure must not cost the others their pass
            reconcile_failed(uid, memory, err)
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
    _enqueue(uid, "child", indexes_of(kwargs), memory, wait_for_lock=False)


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
    run = functools.partial(handler_context().run, _run_next)
    future = asyncio.get_running_loop().run_in_executor(CAPTURED.executor, run)
    future.add_done_callback(_after_queued)


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
        reconcile_if_changed(entry.trigger, indexes, memory)
    except Exception as err:  # the periodic pass retries it
        memory.fingerprint = None
        reconcile_failed(uid, memory, err)
    finally:
        memory.lock.release()


def _after_queued(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("taking from the work queue failed", exc_info=future.exception())
