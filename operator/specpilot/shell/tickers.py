"""The operator's own threads: the evaluation round and the periodic pass, each every tick."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kopf

from specpilot.adapters import heap
from specpilot.shell import telemetry
from specpilot.shell.objects import periodic_pass
from specpilot.shell.rounds import run_round
from specpilot.shell.wiring import CAPTURED, TICK_SECONDS, log

# A ticker whose last tick ended longer ago than this is stuck: /healthz fails (the pod restarts) and
# SpecpilotTickerStuck fires. Rounds are bounded well below it (rounds.ROUND_DEADLINE_SECONDS).
STALL_SECONDS = max(600.0, 30 * TICK_SECONDS)


class Ticker:
    """A thread that runs `work` every tick inside kopf's context (so events post as from a handler)."""

    def __init__(
        self,
        name: str,
        work: Callable[[], object],
        took: Callable[[float], None] | None = None,
        *,
        interval: float = TICK_SECONDS,
        stall_seconds: float = STALL_SECONDS,
    ) -> None:
        self.name, self._work, self._took = name, work, took
        self._interval, self._stall_seconds = interval, stall_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_tick = time.monotonic()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._last_tick = time.monotonic()
            self._thread = threading.Thread(target=self._loop, name=f"specpilot-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def stalled(self) -> str | None:
        """Why this ticker is stuck (its last tick ended too long ago), or None while it runs on time or not at all."""
        age = time.monotonic() - self._last_tick
        if self._thread is None or age <= self._stall_seconds:
            return None
        return f"{self.name}: no tick has ended for {age:.0f} s (limit {self._stall_seconds:.0f} s)"

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            context = CAPTURED.context
            if context is not None:  # else no object handled yet
                self._tick(context)
            self._last_tick = time.monotonic()
            telemetry.TICK_ENDED.labels(self.name).set_to_current_time()

    def _tick(self, context: contextvars.Context) -> None:
        started = time.monotonic()
        try:
            context.copy().run(self._work)
        except Exception:
            telemetry.TICK_FAILURES.labels(self.name).inc()
            log.exception("%s failed", self.name)
        heap.release_free_memory()  # what the pass or round freed goes back to the kernel (adapters/heap.py)
        for state, size in heap.usage().items():
            telemetry.HEAP_BYTES.labels(state).set(size)
        if self._took is not None:
            self._took(time.monotonic() - started)


ROUNDS = Ticker("evaluation round", lambda: run_round(datetime.now(UTC)), telemetry.ROUND_SECONDS.observe)


PERIODIC = Ticker("periodic pass", periodic_pass)


def stalled() -> str | None:
    """Why the operator's own threads are stuck, or None (for /healthz)."""
    return ROUNDS.stalled() or PERIODIC.stalled()


@kopf.on.startup()
def start_tickers(**_: Any) -> None:
    log.info("memory goes back to the kernel through %s after each pass (adapters/heap.py)", heap.allocator())
    ROUNDS.start()
    PERIODIC.start()


@kopf.on.cleanup()
def stop_tickers(**_: Any) -> None:
    ROUNDS.stop()
    PERIODIC.stop()
