"""Drop `metadata.managedFields` from every object kopf's watches deliver, as each event is parsed; and re-list a
watch that failed instead of stopping the operator.

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

A failed watch: kopf re-lists only after "410 Gone". Any other ERROR event in a watch stream (the API server sends
500 when its storage or a conversion fails), or a watch request still refused once kopf's own retries are spent,
ends kopf's whole operator, every namespace's watches with it. Here, as client-go's reflector does, the failure is
logged and counted, and the watch of that one kind and namespace re-lists after a capped, doubling backoff
(tests/operator/test_api_server_faults.py injects these through a proxy in front of the real API server).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf._cogs.clients import errors, watching

_WRAPPED_MARK = "_specpilot_without_managed_fields"
RELIST_BACKOFF_SECONDS = (1.0, 30.0)  # the first wait after a failed watch, and the cap of its doubling
RELIST_BACKOFF_RESET_SECONDS = 300.0  # a failure this long after the last one waits the least again
log = logging.getLogger(__name__)


def relist_delay(failures_in_a_row: int) -> float:
    """Seconds to wait before re-listing after the n-th failed watch in a row (n >= 1; failures less than
    RELIST_BACKOFF_RESET_SECONDS apart): doubling, capped."""
    first, cap = RELIST_BACKOFF_SECONDS
    return float(min(cap, first * 2 ** min(failures_in_a_row - 1, 16)))


def without_managed_fields(event: Any) -> Any:
    """The event with its object's metadata.managedFields removed (in place); anything else unchanged."""
    if isinstance(event, dict):
        obj = event.get("object")
        if isinstance(obj, dict):
            metadata = obj.get("metadata")
            if isinstance(metadata, dict):
                metadata.pop("managedFields", None)
    return event


def install(on_failure: Callable[[str], None] = lambda resource: None) -> None:
    """Wrap kopf's watch stream once per process (idempotent). `on_failure(resource)` is called for each failed
    watch that is re-listed."""
    original: Callable[..., AsyncIterator[Any]] = watching.continuous_watch
    if getattr(original, _WRAPPED_MARK, False):
        return
    if not inspect.isasyncgenfunction(original):
        raise RuntimeError("kopf._cogs.clients.watching.continuous_watch is no longer an async generator")
    failures: dict[tuple[str, str | None], tuple[int, float]] = {}  # per kind and namespace: (in a row, when last)

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        resource, namespace = str(kwargs.get("resource")), kwargs.get("namespace")
        key = (resource, namespace)
        try:
            async for event in original(**kwargs):
                yield without_managed_fields(event)
        except (watching.WatchingError, errors.APIError) as err:
            count, last = failures.get(key, (0, 0.0))
            now = time.monotonic()
            count = 1 if now - last > RELIST_BACKOFF_RESET_SECONDS else count + 1
            failures[key] = (count, now)
            delay = relist_delay(count)
            where = f"in {namespace!r}" if namespace is not None else "cluster-wide"
            log.warning("watch of %s %s failed (%s); re-listing in %g s", resource, where, err, delay)
            on_failure(resource)
            await asyncio.sleep(delay)  # returning ends this stream: kopf starts a fresh one, a re-list

    setattr(continuous_watch, _WRAPPED_MARK, True)
    continuous_watch.__wrapped__ = original  # type: ignore[attr-defined]
    watching.continuous_watch = continuous_watch
