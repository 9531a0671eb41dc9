"""What the operator keeps per object between events (issue 12: memory at fleet scale), on an object as the API server
stores it (tests/testdata/stored-speculativedeployment.json: a bench object after its first evaluation, fetched with
managedFields)."""

from __future__ import annotations

import copy
import json
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from specpilot.api.v1alpha1 import ANNOTATION_PAUSE as PAUSE
from specpilot.api.v1alpha1 import ANNOTATION_REEVALUATE as REEVALUATE
from specpilot.autotune.evaluation import DueMarks
from specpilot.shell.memory import BodySummary, ObjectMemory
from tests.seams import apply_merge_patch

STORED: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "testdata" / "stored-speculativedeployment.json").read_text()
)


def _changed(patch: dict[str, Any]) -> dict[str, Any]:
    """The stored object with an RFC 7386 merge patch applied (None deletes), as the API server would store it."""
    changed: dict[str, Any] = apply_merge_patch(STORED, patch)
    return changed


NAMESPACE, VERSION = STORED["metadata"]["namespace"], STORED["metadata"]["resourceVersion"]
EVALUATED = DueMarks(None, None, "2026-11-26T19:35:19Z")  # the stored object's status.observed.evaluatedAt


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (STORED, BodySummary(NAMESPACE, "sd-0005", VERSION, 1, False, False, EVALUATED)),
        (
            _changed({"spec": {"monitoring": {"podMonitor": True}}}),
            BodySummary(NAMESPACE, "sd-0005", VERSION, 1, True, False, EVALUATED),
        ),
        (  # rolled out but not yet complete: the periodic pass must keep timing its deadline
            _changed({"status": {"effective": {"rolloutCompleted": None}}}),
            BodySummary(NAMESPACE, "sd-0005", VERSION, 1, False, True, EVALUATED),
        ),
        (  # nothing rendered yet, never evaluated
            _changed({"status": None}),
            BodySummary(NAMESPACE, "sd-0005", VERSION, 1, False, False, DueMarks()),
        ),
        (
            _changed({"metadata": {"generation": 7, "resourceVersion": "991"}}),
            BodySummary(NAMESPACE, "sd-0005", "991", 7, False, False, EVALUATED),
        ),
        (  # a user asked for a new evaluation (kubectl annotate ... specpilot.dev/reevaluate=...)
            _changed({"metadata": {"annotations": {REEVALUATE: "t1"}}}),
            BodySummary(NAMESPACE, "sd-0005", VERSION, 1, False, False, DueMarks("t1", None, EVALUATED.evaluated_at)),
        ),
        (  # ... which the operator handled
            _changed({"metadata": {"annotations": {REEVALUATE: "t1"}}, "status": {"lastHandledReevaluate": "t1"}}),
            BodySummary(NAMESPACE, "sd-0005", VERSION, 1, False, False, DueMarks("t1", "t1", EVALUATED.evaluated_at)),
        ),
    ],
    ids=["stored", "pod-monitor", "rollout-in-flight", "no-status", "new-generation", "reevaluate", "reevaluated"],
)
def test_the_summary_holds_what_the_periodic_pass_compares(body: dict[str, Any], expected: BodySummary) -> None:
    assert replace(BodySummary.of(body), metadata_digest=0) == expected  # the digest: the next test


@pytest.mark.parametrize(
    ("later", "edited"),
    [
        # our own writes: status (any part of it) and the resourceVersion it moves
        ({"metadata": {"resourceVersion": "991"}, "status": {"observed": None}}, False),
        ({"metadata": {"resourceVersion": "991"}, "status": {"lastHandledReevaluate": "t0"}}, False),
        ({"metadata": {"resourceVersion": "991", "managedFields": None}}, False),
        # a user's edits: the spec (the API server moves the generation), labels, annotations
        ({"metadata": {"generation": 2}, "spec": {"replicas": 3}}, True),
        ({"metadata": {"labels": {"team": "search"}}}, True),
        ({"metadata": {"annotations": {REEVALUATE: "t1"}}}, True),
        ({"metadata": {"annotations": {PAUSE: "true"}}}, True),
    ],
    ids=["status", "reevaluate-handled", "managed-fields", "spec", "label", "reevaluate", "pause"],
)
def test_an_edit_queues_a_reconcile_and_a_status_write_does_not(later: dict[str, Any], edited: bool) -> None:
    """The watch event of a known object queues a reconcile only for an edit (objects.speculativedeployment_changed):
    our own status writes come back as events too, and must not reconcile each object once more per write."""
    assert BodySummary.of(_changed(later)).edited_since(BodySummary.of(STORED)) is edited


def test_the_kept_body_is_the_object_without_managed_fields() -> None:
    assert STORED["metadata"]["managedFields"], "test data as stored, with managedFields"
    memory = ObjectMemory()
    memory.keep(kopf.Body(cast(kopf.RawBody, STORED)))
    kept = memory.body
    assert kept is not None
    expected = copy.deepcopy(STORED)
    del expected["metadata"]["managedFields"]
    assert dict(kept) == expected
    assert memory.summary == BodySummary.of(STORED)
    assert memory.body is not kept, "a fresh copy each time: callers cannot change what is kept"


def _packed_and_dict_bytes(pack: Callable[[ObjectMemory], None], data: dict[str, Any]) -> tuple[float, float]:
    """Bytes per object of ten memories packed by `pack`, and of ten copies of `data` as dicts: what tracemalloc saw
    allocated from this file's frames and is still held, so threads other tests left running do not count."""
    ours = [tracemalloc.Filter(True, __file__, all_frames=True)]
    tracemalloc.start(24)
    try:
        start = tracemalloc.take_snapshot().filter_traces(ours)
        memories = [ObjectMemory() for _ in range(10)]
        for memory in memories:
            pack(memory)
        packed = tracemalloc.take_snapshot().filter_traces(ours)
        dicts = [copy.deepcopy(data) for _ in range(10)]
        copied = tracemalloc.take_snapshot().filter_traces(ours)
    finally:
        tracemalloc.stop()
    assert len(dicts) == len(memories)
    packed_bytes = sum(stat.size_diff for stat in packed.compare_to(start, "filename")) / 10
    dict_bytes = sum(stat.size_diff for stat in copied.compare_to(packed, "filename")) / 10
    return packed_bytes, dict_bytes


def test_a_kept_object_costs_a_fraction_of_its_dicts() -> None:
    """The figure behind keeping it compressed: measured, not assumed (the bound leaves room for Python versions)."""
    kept_bytes, dict_bytes = _packed_and_dict_bytes(lambda m: m.keep(kopf.Body(cast(kopf.RawBody, STORED))), STORED)
    print(f"kept {kept_bytes:.0f} B vs {dict_bytes:.0f} B of dicts per object", file=sys.stderr)
    assert kept_bytes < dict_bytes / 5


def test_a_remembered_status_write_reads_back_as_written_and_costs_a_fraction_of_its_dicts() -> None:
    """Each evaluation round leaves the status it wrote behind for every object until the watch delivers the write
    (the status a reconcile decides from meanwhile): kept packed, read back equal, forgotten on None."""
    status = STORED["status"]
    assert status.get("recommendation"), "test data as stored, with a recommendation"
    memory = ObjectMemory()
    assert memory.written_status is None
    memory.remember_written(("4711", status))
    assert memory.written_status == ("4711", status)
    first, second = memory.written_status, memory.written_status
    assert first is not None
    assert second is not None
    assert first[1] is not second[1], "a fresh copy each time"
    memory.remember_written(None)
    assert memory.written is None
    assert memory.written_status is None
    kept_bytes, dict_bytes = _packed_and_dict_bytes(lambda m: m.remember_written(("4711", status)), status)
    print(f"written status kept in {kept_bytes:.0f} B vs {dict_bytes:.0f} B of dicts", file=sys.stderr)
    assert kept_bytes < dict_bytes / 4


def test_a_queued_reconcile_does_not_keep_the_body_of_the_event_that_queued_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reconcile queued from an event handler runs later, in a handler thread. The context it runs in must not be
    the handler's own: kopf's cause of the event (the whole body) would live until the reconcile runs, one body per
    queued object in a burst. It gets a copy of the first handler's context (what kopf.event needs is the same)."""
    import contextvars

    from kopf._core.actions.execution import cause_var

    from specpilot.shell import wiring

    monkeypatch.setattr(wiring.CAPTURED, "context", contextvars.copy_context())  # the first handler's, captured earlier
    body: Any = copy.deepcopy(STORED)  # stands for kopf's cause, which holds the event's body

    def while_handling() -> tuple[contextvars.Context, contextvars.Context]:
        cause_var.set(body)  # kopf sets the cause of the event being handled
        return contextvars.copy_context(), wiring.handler_context()

    handling, queued = contextvars.copy_context().run(while_handling)
    assert handling[cause_var] is body  # the handler's own context holds the event's body...
    assert cause_var not in queued  # ...the queued reconcile's does not
    assert queued is not wiring.CAPTURED.context  # a copy per reconcile: one context cannot be entered by two threads
