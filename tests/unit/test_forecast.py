"""Where the offered load is heading (forecast.py): which request-rate histories make a trend, table-driven."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from specpilot.autotune.model.forecast import (
    PROJECTION_STEPS,
    RateSample,
    Trend,
    add_rate,
    outpacing,
    projected_ratios,
    projection_ahead_s,
    recent_peak_ratio,
    rising_trend,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = 3600.0  # the payback horizon (FitSettings.horizon_s)


def series(rates: list[float], every_s: float = 60.0) -> tuple[RateSample, ...]:
    return tuple(RateSample(T0 + timedelta(seconds=i * every_s), r) for i, r in enumerate(rates))


def ramp(start: float, end: float, n: int) -> list[float]:
    return [start + (end - start) * i / (n - 1) for i in range(n)]


# deterministic noise of +-5%: what Poisson arrivals over a 5-minute window look like at a few requests per second
WOBBLE = [1.0 + 0.05 * math.sin(1.7 * i) for i in range(61)]


@pytest.mark.parametrize(
    ("case", "rates", "trend", "why"),
    [
        ("nine samples", ramp(2.0, 4.0, 9), False, "9 request-rate samples (a trend needs 10)"),
        ("ten samples over 9 minutes", ramp(2.0, 4.0, 10), False, "request-rate samples over 9m (a trend needs 20m)"),
        ("a steady rate", [2.0 * w for w in WOBBLE[:31]], False, "no sustained rise"),
        ("a falling rate", ramp(4.0, 2.0, 31), False, "no sustained rise: the request rate moved -50%"),
        # a slow drift up: significant, but +10% over half an hour is within what a fit's error absorbs
        ("+10% over 30m", [r * w for r, w in zip(ramp(2.0, 2.2, 31), WOBBLE, strict=False)], False,
         "no sustained rise: the request rate moved +"),
        ("a diurnal ramp, x2 over 30m", [r * w for r, w in zip(ramp(2.0, 4.0, 31), WOBBLE, strict=False)], True,
         "the request rate rose +"),
        # a flash crowd: flat, then x5 for the last 5 minutes; a line fits a step badly
        ("a step", [2.0] * 26 + [10.0] * 5, False, "no sustained rise"),
        ("a clean line", ramp(1.0, 3.0, 21), True, "the request rate rose +200% over 20m (t > 1000)"),
        # a peak behind: 30 minutes up, then 7 down; the line over all 37 still rises, its newest third does not
        ("a ramp and its first fall", ramp(2.0, 4.0, 31) + ramp(4.0, 3.3, 8)[1:], False,
         "the request rate rose +84% over 37m, but not over the last 12m (-2.2 requests/s per hour): a peak"),
        # the first minutes of a fall inside the newest third: the rise still leads
        ("a ramp and a dip", ramp(2.0, 4.0, 31) + ramp(4.0, 3.8, 4)[1:], True, "the request rate rose +102% over 33m"),
    ],
)  # fmt: skip
def test_which_request_rate_histories_make_a_rising_trend(case: str, rates: list[float], trend: bool, why: str) -> None:
    found, reason = rising_trend(series(rates), HOUR)
    assert (found is not None) is trend, reason
    assert reason.startswith(why), reason


def test_a_trend_projects_the_line_no_further_ahead_than_it_was_fitted_over() -> None:
    found, _ = rising_trend(series(ramp(2.0, 4.0, 31)), HOUR)
    assert found is not None
    assert found.rate_now == pytest.approx(4.0)
    assert found.slope == pytest.approx(2.0 / 1800)
    assert found.span_s == 1800
    assert found.rise == pytest.approx(1.0)
    assert projection_ahead_s(found, horizon_s=3600) == 1800
    assert projection_ahead_s(found, horizon_s=600) == 600
    # midpoints of 4 slices of the next 30 minutes: 4.25, 4.75, 5.25, 5.75 requests/s over 4.0
    assert projected_ratios(found, 1800, steps=4) == pytest.approx([1.0625, 1.1875, 1.3125, 1.4375])
    assert found.to_dict() == {
        "requestRateNow": 4.0, "slopePerHour": 4.0, "spanSeconds": 1800, "tStat": 1000.0, "rise": 1.0,
    }  # fmt: skip


@pytest.mark.parametrize(("horizon_s", "every_s"), [(HOUR, 60.0), (HOUR / 10, 6.0)])
def test_the_trend_is_read_on_the_payback_horizons_clock(horizon_s: float, every_s: float) -> None:
    """The same load shape on a clock ten times faster (a horizon of 6 minutes, an evaluation every 6 s) makes the
    same trend, and the same shortfall below a third of the horizon."""
    short, why = rising_trend(series(ramp(2.0, 4.0, 19), every_s), horizon_s)
    assert short is None
    assert why == f"request-rate samples over {18 * every_s / 60:.0f}m (a trend needs {horizon_s / 3 / 60:.0f}m)"
    found, _ = rising_trend(series(ramp(2.0, 4.0, 21), every_s), horizon_s)
    assert found is not None
    assert found.span_s == pytest.approx(20 * every_s)
    assert found.rise == pytest.approx(1.0)
    samples: tuple[RateSample, ...] = ()
    for s in series([1.0] * 70, every_s):
        samples = add_rate(samples, s, horizon_s)
    assert (samples[-1].at - samples[0].at).total_seconds() == horizon_s


def test_the_record_keeps_an_hour_of_samples_in_time_order() -> None:
    samples: tuple[RateSample, ...] = ()
    for s in series([1.0] * 70):
        samples = add_rate(samples, s, HOUR)
    assert len(samples) == 61  # the newest and the hour before it
    assert samples[-1].at - samples[0].at == timedelta(hours=1)
    # a sample not after the newest (a replayed or out-of-order evaluation) replaces what is not before it
    again = add_rate(samples, RateSample(samples[-1].at, 9.0), HOUR)
    assert again[-1].rate == 9.0
    assert len(again) == len(samples)


def test_a_sample_is_kept_at_the_precision_status_keeps_and_survives_the_round_trip() -> None:
    (sample,) = add_rate((), RateSample(T0 + timedelta(seconds=90), 3.14159), HOUR)
    assert sample == RateSample(T0 + timedelta(seconds=90), 3.1416)
    assert sample.to_list() == ["2026-01-01T00:01:30Z", 3.1416]
    assert RateSample.from_list(sample.to_list()) == sample
    (counted,) = add_rate((), RateSample(T0, 3.0, in_system=120.123456), HOUR)
    assert counted.to_list() == ["2026-01-01T00:00:00Z", 3.0, 120.1235]
    assert RateSample.from_list(counted.to_list()) == counted
    # status written before the requests in the engines were kept: two elements, read as not measured
    assert RateSample.from_list(["2026-01-01T00:00:00Z", 3.0]).in_system is None


def counted(in_engines: list[float | None], finished: float = 23.0, every_s: float = 6.0) -> tuple[RateSample, ...]:
    """One evaluation's sample every `every_s` seconds: `finished` requests/s and the requests in the engines."""
    return tuple(RateSample(T0 + timedelta(seconds=i * every_s), finished, n) for i, n in enumerate(in_engines))


@pytest.mark.parametrize(
    ("case", "in_engines", "since_s", "ratio", "why"),
    [
        ("two windows", [180.0, 200.0], 0.0, None, "2 windows of this config (outpacing needs 3)"),
        ("not measured", [None, None, None, None], 0.0, None, "0 windows of this config"),
        # 3 requests/s more in the engines at 23 finished/s: 26 arrive
        ("the engines fall behind", [180.0, 198.0, 216.0, 234.0], 0.0, 26.0 / 23.0,
         "arrivals outpace completions 1.13x"),
        ("keeping up", [200.0 * w for w in WOBBLE[:8]], 0.0, None, "the requests in the engines moved"),
        ("catching up", [234.0, 216.0, 198.0, 180.0], 0.0, None, "the requests in the engines moved -3.00/s"),
        # the previous config's windows (before the running one's are trusted) ran fewer requests: not a growth
        ("a config change", [100.0, 100.0, 200.0, 200.0, 200.0], 12.0, None, "the requests in the engines moved +0.00"),
        ("two windows since the change", [100.0, 100.0, 100.0, 200.0, 200.0], 18.0, None, "2 windows of this config"),
    ],
)  # fmt: skip
def test_which_histories_of_the_requests_in_the_engines_say_arrivals_outpace_completions(
    case: str, in_engines: list[float | None], since_s: float, ratio: float | None, why: str
) -> None:
    found, reason = outpacing(counted(in_engines), T0 + timedelta(seconds=since_s))
    assert reason.startswith(why), (case, reason)
    if ratio is None:
        assert found is None, case
        return
    assert found is not None, case
    assert found.ratio == pytest.approx(ratio), case
    assert found.ratios() == pytest.approx((ratio,) * PROJECTION_STEPS)
    assert found.to_dict() == {
        "inEnginesGrowthPerSecond": 3.0, "finishedPerSecond": 23.0, "arrivalsOverFinished": 1.1304,
        "spanSeconds": 18, "tStat": 1000.0,
    }  # fmt: skip


def test_a_trend_dataclass_projects_linearly() -> None:
    trend = Trend(rate_now=2.0, slope=0.001, span_s=1200, t_stat=10.0, rise=0.8)
    assert trend.rate_ratio(0) == 1.0
    assert trend.rate_ratio(1000) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("case", "rates", "span_s", "ratio"),
    [
        ("no samples", [], 300.0, 1.0),
        ("a steady rate", [4.0] * 10, 300.0, 1.0),
        ("a rising rate: the newest is the peak", ramp(2.0, 4.0, 10), 300.0, 1.0),
        # samples a minute apart: the span reaches back five minutes, the burst seven
        ("a burst just now", [4.0] * 5 + [6.0, 6.0] + [4.0] * 3, 300.0, 1.5),
        ("a burst longer ago than the span", [4.0] * 2 + [6.0, 6.0] + [4.0] * 6, 300.0, 1.0),
        ("the span reaches it", [4.0] * 2 + [6.0, 6.0] + [4.0] * 6, 420.0, 1.5),
        ("a falling rate: two minutes back", ramp(6.0, 3.0, 10), 120.0, 11.0 / 9.0),
        ("an idle newest sample", [4.0, 0.0], 300.0, 1.0),
    ],
)
def test_the_recent_peak_is_the_highest_rate_within_the_span_over_the_rate_now(
    case: str, rates: list[float], span_s: float, ratio: float
) -> None:
    assert recent_peak_ratio(series(rates), span_s) == pytest.approx(ratio), case
