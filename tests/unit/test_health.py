"""/healthz fails while one of the operator's own threads is stuck in a tick, and recovers when the tick ends:
a real Ticker thread and the real health endpoint over HTTP."""

from __future__ import annotations

import contextvars
import threading
import time

import httpx
import pytest
from prometheus_client import REGISTRY

from e2e.waiting import wait_for
from specpilot.shell import wiring
from specpilot.shell.runner import Health
from specpilot.shell.tickers import Ticker


def failures() -> float:
    return REGISTRY.get_sample_value("specpilot_tick_failures_total", {"ticker": "test round"}) or 0.0


def test_a_stuck_tick_fails_healthz_and_an_aborted_one_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wiring.CAPTURED, "context", contextvars.copy_context())  # as after the first handler
    release = threading.Event()
    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("one aborted tick")
        release.wait(30)  # the second tick hangs, as on a server that never answers

    aborted = failures()
    ticker = Ticker("test round", work, interval=0.05, stall_seconds=1.0)
    health = Health()
    health.stalled = ticker.stalled
    server = health.serve("127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    ticker.start()
    try:
        assert httpx.get(url, timeout=5).status_code == 200
        wait_for("the hanging tick", lambda: len(calls) >= 2, 10, 0.02)
        assert failures() == aborted + 1
        assert httpx.get(url, timeout=5).status_code == 200, "within the limit"
        time.sleep(1.2)
        answer = httpx.get(url, timeout=5)
        assert answer.status_code == 500
        assert "test round: no tick has ended for" in answer.json()["operator"]
        release.set()
        wait_for("healthy again", lambda: httpx.get(url, timeout=5).status_code == 200, 10, 0.05)
    finally:
        release.set()
        ticker.stop()
        server.shutdown()
