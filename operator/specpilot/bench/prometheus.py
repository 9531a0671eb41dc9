"""Prometheus' query semantics over scraped samples, as the bench's controller reads them (pure).

What the closed loop's simulated Prometheus does with the samples a scrape loop stored, following Prometheus 2.x
(the version the Prometheus test tier runs, tests/prometheus/test_emulation_agreement.py):

- `extrapolated_rate`: rate() and increase() (promql/functions.go, extrapolatedRate). Counter resets add the value
  before the drop; the result is extrapolated from the first and last sample towards the range's edges: all the way
  when the gap to an edge is under 1.1 average sample intervals, else by half an average interval (the series is taken
  to start or end inside the range); for counters, never to before the counter's extrapolated zero point. rate()
  divides by the range, not by the covered time, so a series that started inside the range rates low.
- `bucket_quantile`: histogram_quantile over per-bucket rates (promql/quantile.go): the buckets made monotonic,
  linear interpolation inside the bucket, the highest finite bound for a rank in the +Inf bucket.
- `instant_value`: an instant vector selector: the latest sample within the 5 minute lookback, none after a
  staleness marker (written when a scrape fails or a target goes away).
- `ScrapeClock`: when the scrape loop's samples land: every interval, seeded jitter, and seeded missed scrapes.

Sample timestamps are whole milliseconds, as Prometheus stores them. A range selects the samples with
start <= t <= end (2.x; Prometheus 3 drops a sample exactly at the start).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

LOOKBACK_S = 300.0  # Prometheus' default --query.lookback-delta

Point = tuple[float, float]  # (t seconds, value); a staleness marker is a NaN value


def ms(t: float) -> float:
    """A timestamp rounded to the millisecond, as Prometheus stores it."""
    return round(t * 1000) / 1000


def in_range(points: Sequence[Point], start: float, end: float) -> list[Point]:
    """The samples a range selector [start, end] returns: staleness markers dropped."""
    return [(t, v) for t, v in points if start <= t <= end and not math.isnan(v)]


def extrapolated_rate(
    points: Sequence[Point], start: float, end: float, *, is_counter: bool = True, is_rate: bool = True
) -> float | None:
    """rate() (is_rate) or increase() of one series' samples inside [start, end]; None below two samples."""
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    if is_counter:
        previous = 0.0
        for _, value in points:
            if value < previous:  # a reset: the counter restarted from zero
                result += previous
            previous = value
    to_start = first_t - start
    to_end = end - last_t
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    average = sampled / (len(points) - 1)
    if is_counter and result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / result))  # not before the counter's zero point
    threshold = average * 1.1
    covered = sampled + (to_start if to_start < threshold else average / 2)
    covered += to_end if to_end < threshold else average / 2
    result *= covered / sampled
    return result / (end - start) if is_rate else result


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """histogram_quantile(q) over (upper bound, cumulative rate) pairs, the last bound +Inf."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]):
        return math.nan
    bounds = [b for b, _ in ordered]
    counts: list[float] = []
    for _, c in ordered:  # ensureMonotonic: a bucket's rate never below the one before it
        counts.append(max(c, counts[-1]) if counts else c)
    if len(counts) < 2 or counts[-1] == 0:
        return math.nan
    rank = q * counts[-1]
    b = next((i for i in range(len(counts) - 1) if counts[i] >= rank), len(counts) - 1)
    if b == len(counts) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    lower = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else counts[b - 1]
    return lower + (bounds[b] - lower) * ((rank - below) / (counts[b] - below))


def instant_value(points: Sequence[Point], at: float, lookback_s: float = LOOKBACK_S) -> float | None:
    """An instant vector selector at `at`: the latest sample in [at - lookback, at], None if that is a marker."""
    latest: Point | None = None
    for t, v in points:
        if at - lookback_s <= t <= at:
            latest = (t, v)
    if latest is None or math.isnan(latest[1]):
        return None
    return latest[1]


@dataclass
class ScrapeClock:
    """The scrape loop's timing: one scrape per interval at its nominal time plus uniform jitter in
    [-jitter_s, +jitter_s], each missed with probability `missed`; seeded, so one seed gives one schedule."""

    interval_s: float
    jitter_s: float
    missed: float
    seed: int
    nominal: float = 0.0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if not 0 <= self.jitter_s < self.interval_s / 2:
            raise ValueError("scrape jitter must be below half the scrape interval, so scrapes stay in order")
        self.rng = random.Random(self.seed)

    def next(self) -> tuple[float, bool]:
        """The next scrape: its timestamp (ms) and whether it failed."""
        self.nominal += self.interval_s
        jitter = self.rng.uniform(-self.jitter_s, self.jitter_s)
        return ms(self.nominal + jitter), self.rng.random() < self.missed
