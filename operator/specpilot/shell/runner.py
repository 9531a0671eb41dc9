"""Run the operator: kopf embedded in our own asyncio loop, plus the operator's metrics and liveness endpoints.

With leader election (`LeaseSettings`), the process first waits as a candidate: /healthz and /metrics answer
(specpilot_leader 0), no kopf handler runs, nothing is watched or written. Once it holds the Lease it starts kopf;
if it cannot renew the Lease in time it exits at once (adapters/lease.py) and its pod restarts as a candidate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from prometheus_client import start_http_server

from specpilot.adapters.leadership import LeaseSettings
from specpilot.shell import telemetry

log = logging.getLogger("specpilot")
LOOP_ANSWER_SECONDS = 5.0  # a leader's event loop that cannot run a no-op this fast is reported not live


class Health:
    """/healthz: live while waiting as a candidate, and, once leading, while kopf's event loop still runs and the
    operator's own threads (the evaluation round, the periodic pass) end their ticks in time.

    kopf's own liveness endpoint starts only with kopf, so a candidate (which does not run kopf) needs its own.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.leader = False
        self.electing: Callable[[], bool] = lambda: True
        self.stalled: Callable[[], str | None] = lambda: None  # why the operator's own threads are stuck

    def check(self) -> tuple[bool, dict[str, Any]]:
        stuck = self.stalled()
        if stuck is not None:
            return False, {"leader": self.leader, "operator": stuck}
        loop = self.loop
        if loop is None:
            if not self.electing():
                return False, {"leader": self.leader, "operator": "leader election stopped"}
            return True, {"leader": self.leader, "operator": "waiting for leadership"}
        try:
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=LOOP_ANSWER_SECONDS)
        except Exception as err:
            return False, {"leader": self.leader, "operator": f"event loop not answering: {err!r}"}
        return True, {"leader": self.leader, "operator": "running"}

    def serve(self, address: str, port: int) -> ThreadingHTTPServer:
        health = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/healthz":
                    self.send_error(404)
                    return
                ok, body = health.check()
                data = json.dumps(body).encode()
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer((address, port), Handler)
        threading.Thread(target=server.serve_forever, name="specpilot-healthz", daemon=True).start()
        return server


def run_operator(
    *,
    namespaces: Sequence[str],
    metrics_port: int,
    health_port: int,
    bind_address: str,
    log_level: str,
    tick_seconds: float,
    leader_election: LeaseSettings | None = None,
) -> None:
    """Block running the operator until interrupted (as a candidate first, with leader election)."""
    os.environ["SPECPILOT_TICK_SECONDS"] = str(tick_seconds)  # read by shell.wiring at import
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if log_level != "debug":
        # kopf logs every handler success at INFO: one line per object per tick drowns what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        # httpx logs every Prometheus query at INFO (about 20 per evaluation); the decision line says what they gave.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    # Importing registers the kopf handlers: the settings, the children's indexes, the reconcile of watch events,
    # the threads of rounds and periodic passes, and the per-object status gauges (alerts, dashboard).
    from specpilot.shell import children, objects, status_metrics, tickers, wiring  # noqa: F401

    health = Health()
    health.stalled = tickers.stalled

    def leading(now: bool) -> None:
        health.leader = now
        telemetry.LEADER.set(1 if now else 0)

    start_http_server(metrics_port, addr=bind_address)
    health.serve(bind_address, health_port)
    elector = None
    if leader_election is None:
        leading(True)
    else:
        from specpilot.adapters.k8s import load_credentials
        from specpilot.adapters.lease import LeaderElector

        leading(False)
        elector = LeaderElector(load_credentials(), leader_election, on_leading=leading)
        log.info(
            "candidate %s for lease %s/%s (duration %d s, renew deadline %g s, retry %g s)",
            leader_election.identity, leader_election.namespace, leader_election.name,
            leader_election.lease_duration, leader_election.renew_deadline, leader_election.retry_period,
        )  # fmt: skip
        elector.start()
        health.electing = elector.alive
        elector.wait_until_leading()

    async def operate() -> None:
        health.loop = asyncio.get_running_loop()
        await kopf.operator(standalone=True, clusterwide=not namespaces, namespaces=list(namespaces))

    try:
        asyncio.run(operate())
    finally:
        if elector is not None:
            elector.release()
