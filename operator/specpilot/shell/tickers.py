"""The operator's own threads: the evaluation round and the periodic pass, each every tick."""

from __future__ import annotations

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


class Ticker:
    """A thread that runs `work` every tick inside kopf's context (so events post as from a handler)."""

    def __init__(self, name: str, work: Callable[[], object], took: Callable[[float], None] | None = None) -> None:
        self._name, self._work, self._took = name, work, took
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=f"specpilot-{self._name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            context = CAPTURED.context
            if context is None:
                continue  # no object handled yet
            started = time.monotonic()
            try:
                context.copy().run(self._work)
            except Exception:
                log.exception("%s failed", self._name)
            heap.release_free_memory()  # what the pass or round freed goes back to the kernel (adapters/heap.py)
            for state, size in heap.usage().items():
                telemetry.HEAP_BYTES.labels(state).set(size)
            if self._took is not None:
                self._took(time.monotonic() - started)


ROUNDS = Ticker("evaluation round", lambda: run_round(datetime.now(UTC)), telemetry.ROUND_SECONDS.observe)


PERIODIC = Ticker("periodic pass", periodic_pass)


@kopf.on.startup()
def start_tickers(**_: Any) -> None:
    log.info("memory goes back to the kernel through %s after each pass (adapters/heap.py)", heap.allocator())
    ROUNDS.start()
    PERIODIC.start()


@kopf.on.cleanup()
def stop_tickers(**_: Any) -> None:
    ROUNDS.stop()
    PERIODIC.stop()
