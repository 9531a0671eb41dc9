"""Event rate limiting: burst, refill, dedup, per object."""

from __future__ import annotations

from specpilot.shell.events import EventLimiter


def test_event_limiter_allows_a_burst_then_throttles() -> None:
    limiter = EventLimiter(burst=3)
    allowed = [limiter.allow("uid", "R", f"m{i}", now=0.0) for i in range(5)]
    assert allowed == [True, True, True, False, False]


def test_event_limiter_refills_one_token_per_period() -> None:
    limiter = EventLimiter(burst=1, refill_seconds=300)
    assert limiter.allow("uid", "R", "a", now=0.0)
    assert not limiter.allow("uid", "R", "b", now=299.0)
    assert limiter.allow("uid", "R", "c", now=600.0)


def test_event_limiter_drops_duplicates_within_window() -> None:
    limiter = EventLimiter(burst=10, dedup_seconds=600)
    assert limiter.allow("uid", "R", "same", now=0.0)
    assert not limiter.allow("uid", "R", "same", now=100.0)
    assert limiter.allow("uid", "R", "same", now=700.0)


def test_event_limiter_is_per_object() -> None:
    limiter = EventLimiter(burst=1)
    assert limiter.allow("a", "R", "m", now=0.0)
    assert limiter.allow("b", "R", "m", now=0.0)
