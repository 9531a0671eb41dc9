"""What every part of the operator's kopf wiring shares: its settings, the API client, and what the first handler
captures from kopf (the live indexes, kopf's context, kopf's handler threads) for work that runs outside handlers.

The operator's modules (all registered by importing them, see runner.run_operator):
- objects: the watch events of SpeculativeDeployments and their children, the work queue, the periodic pass;
- reconciling: one reconcile of one object (observe, decide, persist status, write children, post events);
- children: the indexes of our children and what they say about one object;
- memory: what the process remembers per object between reconciles;
- rounds: the autotune evaluation rounds over the fleet; tickers: the threads that run rounds and periodic passes.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from specpilot.adapters import watch_events
from specpilot.adapters.k8s import KubeAdapter, load_credentials
from specpilot.api import v1alpha1
from specpilot.shell import telemetry

GROUP, VERSION, PLURAL = v1alpha1.GROUP, v1alpha1.VERSION, v1alpha1.PLURAL
MANAGED = {"app.kubernetes.io/managed-by": "specpilot"}
TICK_SECONDS = float(os.environ.get("SPECPILOT_TICK_SECONDS", "10"))
# Handlers are sync and mostly wait on the API server: more threads than cores keep a burst of creations moving. The
# API client's connection pool is sized to match (adapters.k8s.load_credentials).
HANDLER_THREADS = 20

log = logging.getLogger("specpilot")

# Before kopf starts watching: events arrive without managedFields, and a failed watch re-lists (counted).
watch_events.install(on_failure=lambda resource: telemetry.WATCH_FAILURES.labels(resource).inc())

Indexes = Mapping[str, kopf.Index[tuple[str, str], Any]]


@dataclass
class Captured:
    """What the first handler hands over for work outside handlers; None until then."""

    indexes: Indexes | None = None
    context: contextvars.Context | None = None
    executor: concurrent.futures.Executor | None = None  # kopf's handler threads (configure), sized to the API pool


CAPTURED = Captured()
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
    CAPTURED.executor = settings.execution.executor
    settings.watching.initial_streaming = True
    settings.scanning.disabled = True


def handler_context() -> contextvars.Context:
    """A fresh copy of the first handler's context, to run work outside handlers in.

    What that work needs from kopf's context (where kopf.event posts) is the same for every object. The context
    of the event being handled would also carry kopf's cause of that event, its whole body included, and keep it
    alive until the work runs: in a burst of 1,000 creations, one body per queued object.
    """
    context = CAPTURED.context if CAPTURED.context is not None else contextvars.copy_context()
    return context.copy()
