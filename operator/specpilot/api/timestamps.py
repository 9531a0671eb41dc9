"""Timestamps as status stores them: RFC 3339 in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(at: datetime) -> str:
    """RFC 3339 in UTC; sub-second digits only when present, so a restored state compares equal to the original."""
    text = at.astimezone(UTC).isoformat(timespec="microseconds" if at.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time; ValueError for anything else, a time without a zone included: it cannot be compared with
    the operator's clock, and RFC 3339 requires the offset."""
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError(f"{text[:64]!r} has no time zone (RFC 3339 needs Z or an offset)")
    return at


def is_zoned_time(text: str) -> bool:
    """Whether a stored time parses and carries a zone (one without cannot be compared with the operator's clock)."""
    try:
        parse_time(text)
    except ValueError:
        return False
    return True
