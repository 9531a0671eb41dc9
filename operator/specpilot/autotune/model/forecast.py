"""Where the offered load is heading (pure): a sustained rise in the request rate, projected over the payback horizon.

Why: a refit is judged by whether its gain over the load record repays one restart within the horizon
(schedule.plan_threshold). The record is the past, and on a rising load it under-prices the refit exactly while a
restart is cheapest: a schedule that equals the running K at every batch seen so far prices near 0% until the load
reaches its lower ranges, and by then the pods left serving during a wave may no longer carry the load
(docs/design/decisions.md).

The forecast is deliberately narrow:

- The signal is the finished-request rate (requests/s over the query window), not the batch: below capacity it is
  the arrival rate whatever the config (a slower config raises the batch, not the rate), and the prompt growth of
  long-context traffic or an acceptance drop moves the batch at a steady rate. Past capacity it is the capacity, flat.
- Only a sustained rise counts: samples over at least MIN_SPAN_SHARE of the payback horizon (the load is read on the
  clock its gain is priced on), a least-squares slope at least MIN_T standard errors
  above zero (the samples are overlapping windows, so the errors are understated: the bar is high), and a rise of
  at least MIN_RISE of the rate over the span, still rising over its newest third (STILL_RISING_SHARE: a peak
  behind fits a rising line too). A step (a flash crowd) fits a line badly; a flat or falling load, none.
- It projects no further ahead than it has looked back, and never past the horizon.
- It only adds a reason to install a refit that does not lose over the record (plan_threshold): a fitted schedule is
  the best K per batch size by the model, so a wrong forecast costs one restart, inside the actuation budget.

A second source, for a load that is already there: arrivals that outpace completions (`outpacing`). Before the
engines reach their limit the finished-request rate lags the arrivals by exactly the growth of the requests in the
engines (running and waiting, every pod: Little's law's bookkeeping), so arrivals over completions = 1 + that growth
over the finished rate. It is read only from the windows of the config running now, once they are trusted (a change
of config moves the batch by itself), from at least MIN_LINE_POINTS of them with the same MIN_T bar, and it
counts only where it takes the running config past its capacity (schedule.Forecast.past_capacity_only): a config
that keeps up settles at a batch the load record will show; one that cannot keeps falling behind until max_num_seqs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from specpilot.api.timestamps import format_time, parse_time

# The trend is read on the payback horizon's clock (FitSettings.horizon_s, an hour): from samples over at least a third
# of it (20 minutes), and none older than the horizon before the newest (a day's shape is not a line).
MIN_SPAN_SHARE = 1 / 3
MIN_SAMPLES = 10
MIN_T = 6.0  # slope / its standard error
MIN_RISE = 0.25  # the fitted line's rise over the span, relative to its start
STILL_RISING_SHARE = 1 / 3  # the newest part of the span whose own line must still rise
MIN_LINE_POINTS = 3  # the fewest points a least-squares slope has a standard error from (_line)
PROJECTION_STEPS = 12  # equal slices of the time ahead a projection prices
T_SHOWN_MAX = 1000.0
RATE_DIGITS = 4  # requests/s as status keeps them


def _t_text(t_stat: float) -> str:
    return f"t = {t_stat:.1f}" if t_stat < T_SHOWN_MAX else f"t > {T_SHOWN_MAX:.0f}"


@dataclass(frozen=True)
class RateSample:
    at: datetime
    rate: float  # finished requests per second over the query window
    in_system: float | None = None  # requests running or waiting in the engines, every pod (None: not measured)

    def to_list(self) -> list[Any]:
        kept: list[Any] = [format_time(self.at), self.rate]
        return kept if self.in_system is None else [*kept, self.in_system]

    @classmethod
    def from_list(cls, raw: Sequence[Any]) -> RateSample:
        in_system = float(raw[2]) if len(raw) > 2 and raw[2] is not None else None
        return cls(parse_time(str(raw[0])), float(raw[1]), in_system)


def add_rate(samples: Sequence[RateSample], sample: RateSample, horizon_s: float) -> tuple[RateSample, ...]:
    """Append one evaluation's rate, at the precision status keeps (a restored state decides the same); samples more
    than the payback horizon before it, or not before it, are dropped."""
    oldest = sample.at - timedelta(seconds=horizon_s)
    kept = [s for s in samples if oldest <= s.at < sample.at]
    in_system = None if sample.in_system is None else round(sample.in_system, RATE_DIGITS)
    return (*kept, RateSample(sample.at, round(sample.rate, RATE_DIGITS), in_system))


@dataclass(frozen=True)
class Trend:
    rate_now: float  # the fitted line at the newest sample
    slope: float  # requests/s per second
    span_s: float
    t_stat: float
    rise: float  # relative rise of the line over the span

    def rate_ratio(self, ahead_s: float) -> float:
        """The projected rate `ahead_s` after the newest sample, relative to the line now."""
        return (self.rate_now + self.slope * ahead_s) / self.rate_now

    def to_dict(self) -> dict[str, Any]:
        return {
            "requestRateNow": round(self.rate_now, 4),
            "slopePerHour": round(self.slope * 3600, 4),
            "spanSeconds": round(self.span_s),
            "tStat": round(min(self.t_stat, T_SHOWN_MAX), 1),  # a clean line's t is huge (or infinite): not JSON
            "rise": round(self.rise, 3),
        }


def rising_trend(samples: Sequence[RateSample], horizon_s: float) -> tuple[Trend | None, str]:
    """A sustained rise of the request rate over the samples, or None and why not; `horizon_s` (the payback horizon)
    sets the shortest span a trend is read from (MIN_SPAN_SHARE of it)."""
    if len(samples) < MIN_SAMPLES:
        return None, f"{len(samples)} request-rate samples (a trend needs {MIN_SAMPLES})"
    t0 = samples[0].at
    xs = [(s.at - t0).total_seconds() for s in samples]
    span = xs[-1] - xs[0]
    min_span = MIN_SPAN_SHARE * horizon_s
    if span < min_span:
        return None, f"request-rate samples over {span / 60:.0f}m (a trend needs {min_span / 60:.0f}m)"
    slope, intercept, t_stat = _line(xs, [s.rate for s in samples])
    start, now = intercept + slope * xs[0], intercept + slope * xs[-1]
    if start <= 0 or now <= 0:
        return None, "the request rate's line does not stay above zero"
    rise = now / start - 1
    trend = Trend(rate_now=now, slope=slope, span_s=span, t_stat=t_stat, rise=rise)
    if slope <= 0 or t_stat < MIN_T or rise < MIN_RISE:
        return None, (
            f"no sustained rise: the request rate moved {rise:+.0%} over {span / 60:.0f}m "
            f"({_t_text(t_stat)}; a trend needs {MIN_RISE:+.0%} and t >= {MIN_T:.0f})"
        )
    ended = _rise_ended(xs, samples)
    if ended:
        return None, f"the request rate rose {rise:+.0%} over {span / 60:.0f}m, {ended}"
    return trend, f"the request rate rose {rise:+.0%} over {span / 60:.0f}m ({_t_text(t_stat)})"


def _rise_ended(xs: Sequence[float], samples: Sequence[RateSample]) -> str | None:
    """Why a line that rises over the span is a peak behind, not a rise ahead: the newest STILL_RISING_SHARE of the
    span no longer rises (a ramp and the first minutes of its fall still fit a rising line); None while it does."""
    since = xs[-1] - STILL_RISING_SHARE * (xs[-1] - xs[0])
    first = next(i for i, x in enumerate(xs) if x >= since)
    if len(xs) - first < MIN_LINE_POINTS:
        return None
    slope, _, _ = _line(xs[first:], [s.rate for s in samples[first:]])
    if slope > 0:
        return None
    minutes = (xs[-1] - xs[first]) / 60
    return f"but not over the last {minutes:.0f}m ({slope * 3600:+.1f} requests/s per hour): a peak"


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """The least-squares line through the points: slope, intercept and the slope over its standard error (infinite
    on a clean line). At least three points, not all at one x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    stderr = math.sqrt(residual / (n - 2) / sxx) if residual > 0 else 0.0
    return slope, intercept, math.inf if stderr == 0 else slope / stderr


@dataclass(frozen=True)
class Outpacing:
    """Arrivals that outpace completions: the requests in the engines grow by `growth` per second while `finished`
    requests per second complete (the newest window's rate)."""

    growth: float  # requests/s added to those running or waiting, every pod
    finished: float  # finished requests per second
    span_s: float
    t_stat: float

    @property
    def ratio(self) -> float:
        """Arrivals over completions."""
        return 1 + self.growth / self.finished

    def ratios(self) -> tuple[float, ...]:
        """The projection's slices: the arrivals now over the rate now, held."""
        return (self.ratio,) * PROJECTION_STEPS

    def to_dict(self) -> dict[str, Any]:
        return {
            "inEnginesGrowthPerSecond": round(self.growth, 4),
            "finishedPerSecond": round(self.finished, 4),
            "arrivalsOverFinished": round(self.ratio, 4),
            "spanSeconds": round(self.span_s),
            "tStat": round(min(self.t_stat, T_SHOWN_MAX), 1),
        }


def outpacing(samples: Sequence[RateSample], since: datetime) -> tuple[Outpacing | None, str]:
    """Arrivals outpacing completions over the samples from `since` (when the running config's windows are trusted):
    a growth of the requests in the engines at least MIN_T standard errors above zero; None and why not."""
    points = [s for s in samples if s.at >= since and s.in_system is not None]
    if len(points) < MIN_LINE_POINTS:
        return None, f"{len(points)} windows of this config (outpacing needs {MIN_LINE_POINTS})"
    xs = [(s.at - points[0].at).total_seconds() for s in points]
    growth, _, t_stat = _line(xs, [s.in_system or 0.0 for s in points])
    finished = points[-1].rate
    if growth <= 0 or t_stat < MIN_T or finished <= 0:
        shown = f"{growth:+.2f}/s ({_t_text(t_stat)}; outpacing needs t >= {MIN_T:.0f})"
        return None, f"the requests in the engines moved {shown}"
    found = Outpacing(growth, finished, xs[-1], t_stat)
    why = (
        f"arrivals outpace completions {found.ratio:.2f}x: the requests in the engines grew {growth:.2f}/s at "
        f"{finished:.2f} finished/s ({_t_text(t_stat)})"
    )
    return found, why


def projection_ahead_s(trend: Trend, horizon_s: float) -> float:
    """How far ahead the line is trusted: no further than it was fitted over, never past the payback horizon."""
    return min(trend.span_s, horizon_s)


def projected_ratios(trend: Trend, ahead_s: float, steps: int = PROJECTION_STEPS) -> list[float]:
    """The projected rate relative to now at the midpoints of `steps` equal slices of the next `ahead_s`."""
    return [trend.rate_ratio((i + 0.5) * ahead_s / steps) for i in range(steps)]


def recent_peak_ratio(samples: Sequence[RateSample], span_s: float) -> float:
    """The highest request rate over the last `span_s` before the newest sample, relative to the newest: how far the
    load rose within that span just now, and so may rise again within the next. 1.0 without a positive newest rate."""
    if not samples or samples[-1].rate <= 0:
        return 1.0
    newest = samples[-1]
    since = newest.at - timedelta(seconds=span_s)
    return max(s.rate for s in samples if s.at >= since) / newest.rate
