"""Latency per load bucket with and without speculation: filing, bounding, summarising, comparing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specpilot.api.timestamps import format_time, parse_time
from specpilot.autotune.model.baseline import (
    MAX_RECORD_AGE,
    WINDOWS_PER_BUCKET,
    BaselineEntry,
    CanaryOutcome,
    Mode,
    bucket_label,
    compare_canary,
    decay_load,
    entry_from_window,
    load_bucket,
    record,
    side_by_side,
    summary,
)
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Signal

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
FIVE = timedelta(minutes=5)


@pytest.mark.parametrize(
    ("batch", "bucket", "label"),
    [
        (0.0, 0, "[0,1)"),
        (0.99, 0, "[0,1)"),
        (1.0, 1, "[1,2)"),
        (3.9, 2, "[2,4)"),
        (4, 3, "[4,8)"),
        (200, 8, "[128,256)"),
    ],
)
def test_load_buckets_double(batch: float, bucket: int, label: str) -> None:
    assert load_bucket(batch) == bucket
    assert bucket_label(bucket) == label


def entry(mode: Mode, bucket: int, p99: float, minutes: float, acceptance: float | None = None) -> BaselineEntry:
    return BaselineEntry(mode, bucket, "tpot", p99 / 2, p99, None, acceptance, 500, T0 + timedelta(minutes=minutes))


def test_record_skips_overlapping_windows_and_keeps_the_last_few() -> None:
    entries: tuple[BaselineEntry, ...] = ()
    for minute in range(0, 40):
        entries = record(
            entries, entry(Mode.OFF, 3, 10.0 + minute, minute), min_spacing=FIVE, now=T0 + timedelta(minutes=minute)
        )
    assert len(entries) == WINDOWS_PER_BUCKET
    assert [e.at.minute for e in entries] == [25, 30, 35]


def test_record_drops_old_entries_and_keeps_other_keys() -> None:
    old = entry(Mode.ON, 4, 20.0, -MAX_RECORD_AGE.total_seconds() / 60 - 1)
    other = entry(Mode.ON, 5, 30.0, -10)
    kept = record((old, other), entry(Mode.OFF, 4, 25.0, 0), min_spacing=FIVE, now=T0)
    assert old not in kept
    assert other in kept
    assert len(kept) == 2


def test_summary_takes_the_median_of_recent_windows() -> None:
    entries = (entry(Mode.OFF, 3, 10.0, -20), entry(Mode.OFF, 3, 80.0, -10), entry(Mode.OFF, 3, 12.0, -5))
    result = summary(entries, mode=Mode.OFF, bucket=3, metric="tpot", now=T0, max_age=timedelta(hours=1))
    assert result is not None
    assert result.p99_ms == 12.0, "one outlier window does not move the baseline"
    assert result.windows == 3
    assert summary(entries, mode=Mode.OFF, bucket=3, metric="tpot", now=T0, max_age=timedelta(minutes=6)) is not None
    assert summary(entries, mode=Mode.ON, bucket=3, metric="tpot", now=T0, max_age=timedelta(hours=1)) is None


def test_side_by_side_answers_is_speculation_helping() -> None:
    entries = (entry(Mode.OFF, 3, 30.0, -20), entry(Mode.ON, 3, 18.0, -10), entry(Mode.ON, 6, 50.0, -10))
    assert side_by_side(entries, metric="tpot", now=T0) == [
        {"bucket": "[4,8)", "onP99Ms": 18.0, "offP99Ms": 30.0, "p99Ratio": 0.6, "speculationHelps": True},
        {"bucket": "[32,64)", "onP99Ms": 50.0},
    ]


def test_entry_round_trips() -> None:
    e = entry(Mode.ON, 4, 21.5, 3, acceptance=0.71)
    assert BaselineEntry.from_dict(e.to_dict()) == e


@pytest.mark.parametrize("at", [T0, T0.replace(microsecond=250_000)])
def test_times_round_trip(at: datetime) -> None:
    assert parse_time(format_time(at)) == at


def valid(signal: Signal, value: float) -> Measurement:
    return Measurement(signal.value, "q", MeasurementClass.VALID, value, None, "")


def window(**values: float) -> dict[str, Measurement]:
    base = {Signal.TPOT_P50: 0.01, Signal.TPOT_P99: 0.03, Signal.BATCH_SIZE: 5.0, Signal.REQUESTS_IN_WINDOW: 300}
    base.update({Signal(k): v for k, v in values.items()})
    return {k: valid(k, v) for k, v in base.items()}


def test_entry_from_window_needs_valid_latency_load_and_enough_requests() -> None:
    made = entry_from_window(window(), mode=Mode.OFF, metric="tpot", min_requests=100, now=T0)
    assert made is not None
    assert (made.bucket, made.p99_ms, made.p50_ms, made.requests) == (3, 30.0, 10.0, 300)
    assert entry_from_window(window(), mode=Mode.OFF, metric="tpot", min_requests=301, now=T0) is None
    missing = window()
    missing.pop(Signal.TPOT_P99)
    assert entry_from_window(missing, mode=Mode.OFF, metric="tpot", min_requests=1, now=T0) is None
    assert entry_from_window(window(), mode=Mode.OFF, metric="e2e", min_requests=1, now=T0) is None


def test_load_histogram_forgets_with_a_half_life() -> None:
    histogram = decay_load({}, bucket=3, elapsed_s=3600)
    histogram = decay_load(histogram, bucket=5, elapsed_s=86_400)
    assert histogram == {3: 1800.0, 5: 86_400.0}


@pytest.mark.parametrize(
    ("spec_p99", "plain_p99", "spec_batch", "acceptance", "outcome"),
    [
        (0.020, 0.030, 10, 0.8, CanaryOutcome.HELPS),
        (0.020, 0.030, 10, 0.5, CanaryOutcome.INCONCLUSIVE),
        (0.040, 0.030, 10, 0.8, CanaryOutcome.HURTS),
        (0.031, 0.030, 10, 0.8, CanaryOutcome.INCONCLUSIVE),
        (0.020, 0.030, 25, 0.8, CanaryOutcome.INCONCLUSIVE),
    ],
)
def test_compare_canary(
    spec_p99: float, plain_p99: float, spec_batch: float, acceptance: float, outcome: CanaryOutcome
) -> None:
    speculative: dict[str, Measurement] = {
        Signal.TPOT_P99: valid(Signal.TPOT_P99, spec_p99),
        Signal.BATCH_SIZE: valid(Signal.BATCH_SIZE, spec_batch),
        Signal.ACCEPTANCE_RATE: valid(Signal.ACCEPTANCE_RATE, acceptance),
    }
    plain: dict[str, Measurement] = {
        Signal.TPOT_P99: valid(Signal.TPOT_P99, plain_p99),
        Signal.BATCH_SIZE: valid(Signal.BATCH_SIZE, 10),
    }
    verdict = compare_canary(speculative, plain, metric="tpot", tolerance=0.1, enable_above=0.65)
    assert verdict.outcome is outcome
    assert "P99 TPOT" in verdict.reason or "load not comparable" in verdict.reason


def test_compare_canary_without_valid_numbers_is_inconclusive() -> None:
    nodata = Measurement("tpot_p99", "q", MeasurementClass.NO_DATA, None, None, "NaN")
    verdict = compare_canary({Signal.TPOT_P99: nodata}, {}, metric="tpot", tolerance=0.1, enable_above=0.65)
    assert verdict.outcome is CanaryOutcome.INCONCLUSIVE
    assert "NoData" in verdict.reason
