"""Kubernetes-style duration strings ("90s", "5m", "1h30m", "250ms").

The CR carries durations as strings, like the rest of the Kubernetes ecosystem (Argo Rollouts, Flagger, KEDA), so a
user reads "5m" in git rather than 300. The regex is shared with the CRD schema so the API server and the operator
accept exactly the same spellings.
"""

from __future__ import annotations

import re

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Return the duration in seconds; raise ValueError naming the accepted form."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration; use a number with a unit ms, s, m or h, e.g. 90s, 5m, 1h30m")
    return sum(float(value) * _UNIT_SECONDS[unit] for value, unit in _PART.findall(text))


def format_duration(seconds: float) -> str:
    """Render seconds the way a person writes them ("5m", "90s", "1h30m")."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
