"""The event filter of adapters.watch_events, table-driven: only metadata.managedFields goes, whatever the event."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.adapters.watch_events import without_managed_fields

FIELDS = [{"manager": "specpilot", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"type": "ADDED", "object": {"metadata": {"name": "a", "managedFields": FIELDS}, "spec": {"replicas": 1}}},
            {"type": "ADDED", "object": {"metadata": {"name": "a"}, "spec": {"replicas": 1}}},
        ),
        ({"type": None, "object": {"metadata": {"name": "a"}}}, {"type": None, "object": {"metadata": {"name": "a"}}}),
        ({"type": "ERROR", "object": {"code": 410}}, {"type": "ERROR", "object": {"code": 410}}),
        ({"type": "BOOKMARK", "object": {"metadata": None}}, {"type": "BOOKMARK", "object": {"metadata": None}}),
        ("LISTED", "LISTED"),  # kopf's Bookmark marks pass through untouched
    ],
)
def test_only_managed_fields_are_dropped(event: Any, expected: Any) -> None:
    assert without_managed_fields(event) == expected
