"""The backoff before re-listing a failed watch (adapters.watch_events.relist_delay), table-driven."""

from __future__ import annotations

import pytest

from specpilot.adapters.watch_events import relist_delay


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (7, 30.0), (10_000, 30.0)],
)
def test_the_wait_doubles_from_one_second_up_to_thirty(failures: int, seconds: float) -> None:
    assert relist_delay(failures) == seconds
