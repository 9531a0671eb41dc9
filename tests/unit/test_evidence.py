"""Numbers written into evidence: rounded, and null where JSON has no number for them."""

from __future__ import annotations

import json
import math

import pytest

from specpilot.autotune.model.evidence import finite


@pytest.mark.parametrize(
    ("value", "digits", "expected"),
    [
        (1.23456, 2, 1.23),
        (1.23456, None, 1),
        (-0.00004, 4, -0.0),
        (0.0, 1, 0.0),
        (math.inf, 1, None),
        (-math.inf, None, None),
        (math.nan, 4, None),
    ],
)
def test_finite(value: float, digits: int | None, expected: float | None) -> None:
    got = finite(value, digits)
    assert got == expected
    json.dumps(got, allow_nan=False)  # what a status write accepts
