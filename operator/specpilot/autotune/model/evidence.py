"""Numbers written into a decision's evidence (pure).

Evidence lands in the object's status, which is strict JSON: a status write rejects Infinity and NaN. An unbounded
figure (a payback that never comes, a queue that never drains) is written as null and said in words beside it.
"""

from __future__ import annotations

import math


def finite(value: float, digits: int | None = None) -> float | None:
    """`value` rounded to `digits` decimals (to a whole number without), or None where it is infinite or not a
    number."""
    if not math.isfinite(value):
        return None
    return round(value) if digits is None else round(value, digits)
