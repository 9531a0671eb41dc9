"""One object's exception kept to that object: counted, logged, and told on the object itself, so that the rest of
the fleet proceeds and whoever owns the object sees what is wrong with it."""

from __future__ import annotations

import kopf

from specpilot.reconcile import conditions as cond
from specpilot.reconcile import core as rec
from specpilot.shell import telemetry
from specpilot.shell.memory import ObjectMemory
from specpilot.shell.reconciling import now_text, post_events, status_of, write_status
from specpilot.shell.wiring import log

EVALUATION_FAILED = "EvaluationFailed"
RECONCILE_FAILED = "ReconcileFailed"
MESSAGE_CHARS = 1024  # what an event and a condition message carry of the exception


def evaluation_failed(uid: str, memory: ObjectMemory, stage: str, err: Exception) -> None:
    """An exception in a round's `stage` for one object: the metric, a Warning event, and MetricsAvailable Unknown
    with reason EvaluationFailed (the next evaluation that succeeds sets it again). Takes the object's lock."""
    telemetry.OBJECT_FAILURES.labels(stage).inc()
    log.warning("autotune %s of %s failed; the rest of the round proceeds", stage, uid, exc_info=err)
    message = f"autotune skipped this object ({stage}): {type(err).__name__}: {err}"[:MESSAGE_CHARS]
    with memory.lock:
        _tell(uid, memory, cond.ConditionUpdate(cond.METRICS_AVAILABLE, "Unknown", EVALUATION_FAILED, message))


def reconcile_failed(uid: str, memory: ObjectMemory, err: Exception) -> None:
    """An exception in one object's reconcile: the metric, a Warning event, and Ready Unknown with reason
    ReconcileFailed (the next reconcile that succeeds sets Ready again). Call with the object's lock held."""
    telemetry.OBJECT_FAILURES.labels("reconcile").inc()
    log.warning("reconcile of %s failed; it is retried, the rest proceed", uid, exc_info=err)
    message = f"the operator could not reconcile this object: {type(err).__name__}: {err}"[:MESSAGE_CHARS]
    _tell(uid, memory, cond.ConditionUpdate(cond.READY, "Unknown", RECONCILE_FAILED, message))


def _tell(uid: str, memory: ObjectMemory, update: cond.ConditionUpdate) -> None:
    """The event and the condition, best effort: the object's own status, or the API server, may be what fails."""
    try:
        body = memory.body
        if body is None:
            return
        post_events(body, [rec.Event("Warning", update.reason, update.message)])
        _set_condition(body, memory, update)
    except Exception:
        log.exception("could not mark %s as failed", uid)


def _set_condition(body: kopf.Body, memory: ObjectMemory, update: cond.ConditionUpdate) -> None:
    decided = status_of(body, memory)
    stored = decided.status.get("conditions") or []
    merged = cond.merge_conditions(stored, [update], generation=body.metadata.get("generation"), now=now_text())
    if merged != stored:
        write_status(body, memory, decided.status, {**decided.status, "conditions": merged}, decided.resource_version)
