"""Duration strings: Kubernetes-style in the CR ("90s", "5m", "1h30m", "250ms"), Prometheus-style on the command line
(also "7d", "2w").

The CR carries durations as strings, like the rest of the Kubernetes ecosystem (Argo Rollouts, Flagger, KEDA), so a
user reads "5m" in git rather than 300. DURATION_PATTERN is shared with the CRD schema so the API server and the
operator accept exactly the same spellings; SPAN_PATTERN adds days and weeks for look-back periods such as
`specpilot report --since 7d`. The arithmetic is durationpy's (Go's duration syntax, the Kubernetes client's own
dependency); the patterns only decide which spellings each place accepts.
"""

from __future__ import annotations

import re

import durationpy

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
SPAN_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d|w))+$"
_UNITS = {DURATION_PATTERN: "ms, s, m or h, e.g. 90s, 5m, 1h30m", SPAN_PATTERN: "ms, s, m, h, d or w, e.g. 90m, 7d, 2w"}


def parse_duration(text: str, pattern: str = DURATION_PATTERN) -> float:
    """Return the duration in seconds; raise ValueError naming the accepted form (or that it is out of range)."""
    if not re.fullmatch(pattern, text):
        raise ValueError(f"{text!r} is not a duration; use a number with a unit {_UNITS[pattern]}")
    try:
        return durationpy.from_str(text).total_seconds()
    except durationpy.DurationError:
        raise ValueError(f"{text!r} is out of range for a duration") from None


def parse_span(text: str) -> float:
    """A look-back period or step on the command line: a duration that may also use days (d) and weeks (w)."""
    return parse_duration(text, SPAN_PATTERN)


def format_duration(seconds: float) -> str:
    """Render seconds the way a person writes them ("5m", "90s", "1h30m")."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
