"""The running config's first measured acceptance and a fall from it (autotune/policy/traffic.py), table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import tests.unit.test_policy as tp
from specpilot.autotune.policy.state import AcceptanceSeen
from specpilot.autotune.policy.traffic import FALL_EVIDENCE, acceptance_fell, acceptance_for_fall, acceptance_seen_after
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Signal
from specpilot.vllm.intent import SpeculationIntent

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
K3 = SpeculationIntent(True, 3)
K2 = SpeculationIntent(True, 2)
OFF = K3.without_speculation()
SEEN_K3 = AcceptanceSeen(K3, 0.40, T0 - timedelta(minutes=30))


@pytest.mark.parametrize(
    ("case", "seen", "running", "acceptance", "expected"),
    [
        ("first window of a config", None, K3, 0.40, AcceptanceSeen(K3, 0.40, T0)),
        ("same config: the first window stays", SEEN_K3, K3, 0.10, SEEN_K3),
        ("same config, not measured now: stays", SEEN_K3, K3, None, SEEN_K3),
        ("another config went in: its own first window", SEEN_K3, K2, 0.55, AcceptanceSeen(K2, 0.55, T0)),
        ("another config, not measured yet: no record", SEEN_K3, K2, None, None),
        ("speculation off: no record", SEEN_K3, OFF, None, None),
    ],
)
def test_the_record_is_the_running_configs_first_measured_window(
    case: str, seen: AcceptanceSeen | None, running: SpeculationIntent, acceptance: float | None, expected: object
) -> None:
    assert acceptance_seen_after(seen, running, acceptance, T0) == expected


@pytest.mark.parametrize(
    ("case", "seen", "running", "acceptance", "fell"),
    [
        ("fell by the shift", SEEN_K3, K3, 0.25, True),
        ("fell far", SEEN_K3, K3, 0.11, True),
        ("fell less than the shift", SEEN_K3, K3, 0.30, False),
        ("rose", SEEN_K3, K3, 0.70, False),
        ("another config's record", SEEN_K3, K2, 0.11, False),
        ("no record", None, K3, 0.11, False),
        ("not measured now", SEEN_K3, K3, None, False),
    ],
)
def test_a_fall_counts_from_the_same_configs_record_by_the_shift(
    case: str, seen: AcceptanceSeen | None, running: SpeculationIntent, acceptance: float | None, fell: bool
) -> None:
    assert (acceptance_fell(seen, running, acceptance) is seen and seen is not None) is fell


def window(requests: float | None, acceptance: float | None) -> dict[str, Measurement]:
    def m(signal: Signal, value: float | None) -> Measurement:
        return tp.m(signal, value, MeasurementClass.VALID if value is not None else MeasurementClass.NO_DATA)

    return {
        Signal.REQUESTS_IN_WINDOW.value: m(Signal.REQUESTS_IN_WINDOW, requests),
        Signal.ACCEPTANCE_RATE.value: m(Signal.ACCEPTANCE_RATE, acceptance),
    }


@pytest.mark.parametrize(
    ("case", "requests", "acceptance", "min_requests", "expected"),
    [
        ("ten times the minimum", 500, 0.36, 50, 0.36),
        ("above it", 4_000, 0.11, 50, 0.11),
        ("below it: a figure that may decide, too noisy for a fall", 499, 0.36, 50, None),
        ("requests not measured", None, 0.36, 50, None),
        ("acceptance not measured", 800, None, 50, None),
        ("a minimum of 0 still needs ten requests", 9, 0.36, 0, None),
    ],
)
def test_a_fall_is_read_only_from_windows_with_ten_times_the_requests_minimum(
    case: str, requests: float | None, acceptance: float | None, min_requests: int, expected: float | None
) -> None:
    assert FALL_EVIDENCE == 10
    assert acceptance_for_fall(window(requests, acceptance), min_requests) == expected
