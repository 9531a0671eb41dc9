"""The bench's Prometheus (bench/prometheus.py, bench/queries.py): worked examples of rate()/increase()
extrapolation, counter resets, histogram_quantile, staleness and the scrape clock.

Every expected figure is worked by hand from Prometheus 2.x's extrapolatedRate (promql/functions.go): result =
last - first (+ the value before each reset); the gap to each edge is extrapolated in full when under 1.1 average
sample intervals, else by half an interval; for a counter the start gap is at most sampled x first / result (the zero
point). tests/prometheus/test_emulation_agreement.py checks the same against the real binary.
"""

from __future__ import annotations

import math

import pytest

from specpilot.bench.prometheus import ScrapeClock, bucket_quantile, extrapolated_rate, in_range, instant_value
from specpilot.bench.queries import Sample, ScrapeHistory


@pytest.mark.parametrize(
    ("points", "increase"),
    [
        # 15 s scrapes, 1/s, both edges within a scrape interval: extrapolated to the whole 60 s
        ([(5, 10), (20, 25), (35, 40), (50, 55)], 60.0),
        # a reset between 20 s and 35 s: 15 - 10 + 20 = 25 over 45 s, times 60/45
        ([(5, 10), (20, 20), (35, 5), (50, 15)], 25 * 60 / 45),
        # the series starts inside the range (first sample 30 s in): only back to its zero point, 3 s before
        ([(30, 3), (45, 18), (60, 33)], 33.0),
        # it ends 30 s before the range does: half an average interval (7.5 s) past the last sample
        ([(0, 0), (15, 15), (30, 30)], 37.5),
        # a missed scrape at 35 s: the average interval is 22.5 s, both edges still within 1.1 of it
        ([(5, 5), (20, 20), (50, 50)], 60.0),
        # the start gap (30 s) is past the threshold, the zero point (10 s) is not: Prometheus 2.x extrapolates to it
        # (Prometheus 3 clamps to half an interval first and would give 37.5)
        ([(30, 10), (45, 25), (60, 40)], 40.0),
    ],
)
def test_increase_worked_examples(points: list[tuple[float, float]], increase: float) -> None:
    assert extrapolated_rate(points, 0.0, 60.0, is_rate=False) == pytest.approx(increase)
    assert extrapolated_rate(points, 0.0, 60.0) == pytest.approx(increase / 60)


def test_rate_needs_two_samples_and_drops_staleness_markers() -> None:
    assert extrapolated_rate([(5, 10)], 0.0, 60.0) is None
    points = in_range([(-10, 1), (5, 10), (20, math.nan), (35, 40), (61, 99)], 0.0, 60.0)
    assert points == [(5, 10), (35, 40)]


@pytest.mark.parametrize(
    ("buckets", "q", "expected"),
    [
        ([(0.1, 0.0), (0.2, 10.0), (math.inf, 10.0)], 0.5, 0.15),
        ([(0.1, 0.0), (0.2, 0.0), (math.inf, 4.0)], 0.5, 0.2),  # the +Inf bucket: the highest finite bound
        ([(0.1, 5.0), (0.2, 4.0), (math.inf, 10.0)], 0.5, 0.1),  # made monotonic: 5, 5, 10
        ([(0.1, 0.0), (math.inf, 0.0)], 0.5, math.nan),  # no observations
        ([(0.1, 1.0), (0.2, 2.0)], 0.5, math.nan),  # no +Inf bucket
        ([(0.1, 1.0), (math.inf, 2.0)], 1.5, math.inf),
    ],
)
def test_bucket_quantile(buckets: list[tuple[float, float]], q: float, expected: float) -> None:
    got = bucket_quantile(q, buckets)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("points", "at", "expected"),
    [
        ([(0.0, 1.0), (15.0, 2.0)], 20.0, 2.0),
        ([(0.0, 1.0), (15.0, 2.0), (30.0, math.nan)], 31.0, None),  # a staleness marker ends it at once
        ([(0.0, 1.0)], 300.0, 1.0),
        ([(0.0, 1.0)], 300.001, None),  # 5 minutes after its last sample the series is gone
    ],
)
def test_instant_value_staleness(points: list[tuple[float, float]], at: float, expected: float | None) -> None:
    assert instant_value(points, at) == expected


def _sample(t: float, value: float) -> Sample:
    return Sample(t, {"vllm:generation_tokens": {(): value}}, {}, {})


def test_a_configuration_that_runs_again_continues_its_series_after_a_reset() -> None:
    history = ScrapeHistory(target="K3")
    for t, v in ((15, 100), (30, 200)):
        history.add(_sample(t, v))
    history.retarget("off", 40.0)
    history.add(_sample(60, 50))
    history.retarget("K3", 70.0)
    for t, v in ((90, 30), (105, 130)):
        history.add(_sample(t, v))
    points = history.points("K3", "vllm:generation_tokens_total")
    assert [t for t, _ in points] == [15, 30, 40, 90, 105]
    assert math.isnan(points[2][1])
    assert [t for t, _ in history.points("off", "vllm:generation_tokens_total")] == [60, 70]
    window = history.window(105, 100)
    assert [s.t for s in window] == [15, 30, 90, 105]
    # 200 -> 30 is a reset: 130 - 100 + 200 = 230 over 90 s; the start gap (10 s) and the end (0) are extrapolated
    values = [(s.t, s.counters["vllm:generation_tokens"][()]) for s in window]
    assert extrapolated_rate(values, 5.0, 105.0, is_rate=False) == pytest.approx(230 * 100 / 90)


def test_scrape_clock_is_seeded_jittered_and_misses_some() -> None:
    def schedule(seed: int) -> list[tuple[float, bool]]:
        clock = ScrapeClock(15.0, 1.0, 0.1, seed)
        return [clock.next() for _ in range(1000)]

    first = schedule(1)
    assert first == schedule(1)
    assert first != schedule(2)
    assert all(abs(t - 15.0 * (i + 1)) <= 1.0 for i, (t, _) in enumerate(first))
    assert all(round(t * 1000) == t * 1000 for t, _ in first[:50])  # whole milliseconds
    assert 60 < sum(missed for _, missed in first) < 140
    with pytest.raises(ValueError, match="jitter"):
        ScrapeClock(15.0, 8.0, 0.0, 1)
