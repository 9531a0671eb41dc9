"""Mirror every SpeculativeDeployment's status into the operator's per-object gauges (specpilot_condition,
specpilot_speculation_enabled, specpilot_batch_threshold), which the alerts and the dashboard read.

A raw watch-event handler: it sees the status exactly as the API server stores it (after the reconcile's own write),
keeps no state and writes nothing, so it cannot disturb the reconcile; a deleted object's series are dropped.
Registered next to the handlers by runner.run_operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from specpilot.api import v1alpha1
from specpilot.shell import telemetry


def mirror(event_type: str | None, obj: Mapping[str, Any]) -> None:
    """One watch event: set the object's gauges from its status, or drop them when it was deleted."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    if event_type == "DELETED":
        telemetry.forget_object(namespace, name)
    else:
        telemetry.observe_status(namespace, name, dict(obj.get("status") or {}))


@kopf.on.event(v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL)
def mirror_status(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    mirror(event.get("type"), body)
