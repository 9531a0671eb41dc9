"""Run the operator: kopf embedded in our own asyncio loop, plus the operator's Prometheus metrics endpoint."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence

import kopf
from prometheus_client import start_http_server


def run_operator(
    *,
    namespaces: Sequence[str],
    metrics_port: int,
    health_port: int,
    bind_address: str,
    log_level: str,
    tick_seconds: float,
) -> None:
    """Block running the operator until interrupted."""
    os.environ["SPECPILOT_TICK_SECONDS"] = str(tick_seconds)  # read by handlers at import (decorator arguments)
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if log_level != "debug":
        # kopf logs every handler success at INFO: one line per object per tick drowns what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        # httpx logs every Prometheus query at INFO (about 20 per evaluation); the decision line says what they gave.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    # Importing registers the kopf handlers: the reconcile, and the per-object status gauges (alerts, dashboard).
    from specpilot import handlers, status_metrics  # noqa: F401

    start_http_server(metrics_port, addr=bind_address)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=f"http://{bind_address}:{health_port}/healthz",
        )
    )
