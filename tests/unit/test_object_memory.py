"""What the operator keeps per object between events (issue 12: memory at fleet scale), on an object as the API server
stores it (tests/testdata/stored-speculativedeployment.json: a bench object after its first evaluation, fetched with
managedFields)."""

from __future__ import annotations

import copy
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from specpilot.handlers import BodySummary, ObjectMemory

STORED: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "testdata" / "stored-speculativedeployment.json").read_text()
)


def _changed(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(STORED)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = body
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            STORED,
            BodySummary(
                STORED["metadata"]["namespace"], "sd-0005", STORED["metadata"]["resourceVersion"], 1, False, False
            ),
        ),
        (
            _changed(spec__monitoring={"podMonitor": True}),
            BodySummary(
                STORED["metadata"]["namespace"], "sd-0005", STORED["metadata"]["resourceVersion"], 1, True, False
            ),
        ),
        (  # rolled out but not yet complete: the periodic pass must keep timing its deadline
            _changed(status__effective__rolloutCompleted=None),
            BodySummary(
                STORED["metadata"]["namespace"], "sd-0005", STORED["metadata"]["resourceVersion"], 1, False, True
            ),
        ),
        (  # nothing rendered yet
            _changed(status=None),
            BodySummary(
                STORED["metadata"]["namespace"], "sd-0005", STORED["metadata"]["resourceVersion"], 1, False, False
            ),
        ),
        (
            _changed(metadata__generation=7, metadata__resourceVersion="991"),
            BodySummary(STORED["metadata"]["namespace"], "sd-0005", "991", 7, False, False),
        ),
    ],
    ids=["stored", "pod-monitor", "rollout-in-flight", "no-status", "new-generation"],
)
def test_the_summary_holds_what_the_periodic_pass_compares(body: dict[str, Any], expected: BodySummary) -> None:
    assert BodySummary.of(body) == expected


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


def test_a_kept_object_costs_a_fraction_of_its_dicts() -> None:
    """The figure behind keeping it compressed: measured, not assumed (the bound leaves room for Python versions)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        memories = [ObjectMemory() for _ in range(50)]
        for memory in memories:
            memory.keep(kopf.Body(cast(kopf.RawBody, STORED)))
        kept_bytes = (tracemalloc.get_traced_memory()[0] - before) / 50
        before = tracemalloc.get_traced_memory()[0]
        dicts = [copy.deepcopy(STORED) for _ in range(50)]
        dict_bytes = (tracemalloc.get_traced_memory()[0] - before) / 50
    finally:
        tracemalloc.stop()
    assert len(dicts) == len(memories)
    print(f"kept {kept_bytes:.0f} B vs {dict_bytes:.0f} B of dicts per object", file=sys.stderr)
    assert kept_bytes < dict_bytes / 5
