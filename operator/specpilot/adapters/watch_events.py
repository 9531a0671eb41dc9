"""Drop `metadata.managedFields` from every object kopf's watches deliver, as each event is parsed.

Why: kopf keeps each event's parsed body while it works on that object, and at times it keeps many at once: at start
every object's first event waits until all watched kinds are listed (kopf's indexes must be complete before any
handler runs), and in a burst of creations the events of many objects wait for the event loop. managedFields is most
of a parsed body (a SpeculativeDeployment with status: ~60% of its Python objects, thousands of tiny `f:` dicts),
and nothing in kopf or in specpilot reads it (specpilot applies with server-side apply, where the API server keeps
the field owners). With 1,000 objects and their children that is a few hundred MiB at the peak, and resident memory
stays near the peak (adapters/heap.py).

kopf has no hook between parsing and queueing, so this wraps its watch generator (`kopf._cogs.clients.watching.
continuous_watch`, the one source of raw events for its queues, used by name from `infinite_watch`). The kopf
version is pinned in uv.lock; `install` refuses to run if the function it wraps is missing or changed shape, and
tests/cluster/test_watch_events.py checks on the real API server that kopf's watch delivers none.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf._cogs.clients import watching

_WRAPPED_MARK = "_specpilot_without_managed_fields"


def without_managed_fields(event: Any) -> Any:
    """The event with its object's metadata.managedFields removed (in place); anything else unchanged."""
    if isinstance(event, dict):
        obj = event.get("object")
        if isinstance(obj, dict):
            metadata = obj.get("metadata")
            if isinstance(metadata, dict):
                metadata.pop("managedFields", None)
    return event


def install() -> None:
    """Wrap kopf's watch stream once per process (idempotent)."""
    original: Callable[..., AsyncIterator[Any]] = watching.continuous_watch
    if getattr(original, _WRAPPED_MARK, False):
        return
    if not inspect.isasyncgenfunction(original):
        raise RuntimeError("kopf._cogs.clients.watching.continuous_watch is no longer an async generator")

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        async for event in original(**kwargs):
            yield without_managed_fields(event)

    setattr(continuous_watch, _WRAPPED_MARK, True)
    continuous_watch.__wrapped__ = original  # type: ignore[attr-defined]
    watching.continuous_watch = continuous_watch
