"""Each Prometheus connection of a round is measured in its own worker thread, so a slow or silent server costs
only the objects behind it; the round waits for all of them together no longer than its deadline
(rounds.ROUND_DEADLINE_SECONDS) and marks the objects whose measurement has not ended by then."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class StillMeasuring(TimeoutError):
    """This connection's measurement from an earlier round has not ended; it is not started a second time."""


class Measurers:
    """At most `workers` measurements at once, and never two at once for one connection (a measurement that hangs
    is not stacked up round after round). Daemon threads: one stuck on a server never holds the process at exit."""

    def __init__(self, workers: int) -> None:
        self._slots = threading.BoundedSemaphore(workers)
        self._guard = threading.Lock()
        self._in_flight: set[Hashable] = set()

    def submit(self, key: Hashable, measure: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._guard:
            if key in self._in_flight:
                future.set_exception(
                    StillMeasuring(
                        "Prometheus did not answer the measurement of an earlier round (not asked again until it ends)"
                    )
                )
                return future
            self._in_flight.add(key)
        thread = threading.Thread(target=self._run, args=(key, measure, future), name="specpilot-measure", daemon=True)
        thread.start()
        return future

    def _run(self, key: Hashable, measure: Callable[[], T], future: Future[T]) -> None:
        try:
            with self._slots:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(measure())
                    except BaseException as err:  # handed to the round, which marks the objects
                        future.set_exception(err)
        finally:
            with self._guard:
                self._in_flight.discard(key)
