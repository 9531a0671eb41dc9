"""Latency per load level with and without speculation, and the canary comparison (pure).

"Is speculation helping?" can only be answered at comparable load: P99 rises with the batch whatever the config,
so latency is filed by load bucket (running requests per engine, powers of two: [1,2), [2,4), [4,8), ...). Each
(mode, bucket, latency metric) keeps its last few windows; a window counts only with enough finished requests and
after the config settled. The record is bounded and JSON-able: it lives in status.autotune and survives restarts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specpilot.api.timestamps import format_time, parse_time
from specpilot.autotune.model.evidence import finite
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import LATENCY_SIGNALS, Signal

WINDOWS_PER_BUCKET = 3
MAX_RECORD_AGE = timedelta(days=7)
LOAD_HALF_LIFE = timedelta(days=1)


class Mode(StrEnum):
    OFF = "off"
    ON = "on"


def load_bucket(batch: float) -> int:
    """0 for an idle engine (< 1 running), else b with 2^(b-1) <= batch < 2^b."""
    if batch < 1:
        return 0
    return math.floor(math.log2(batch)) + 1


def bucket_label(bucket: int) -> str:
    if bucket <= 0:
        return "[0,1)"
    return f"[{2 ** (bucket - 1)},{2**bucket})"


@dataclass(frozen=True)
class BaselineEntry:
    """One settled window's latency at one load level."""

    mode: Mode
    bucket: int
    metric: str  # tpot | ttft | e2e (spec.autotune.latency.metric)
    p50_ms: float
    p99_ms: float
    tpot_mean_ms: float | None
    acceptance: float | None  # only with speculation on
    requests: float
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "bucket": self.bucket,
            "metric": self.metric,
            "p50Ms": round(self.p50_ms, 3),
            "p99Ms": round(self.p99_ms, 3),
            "tpotMeanMs": None if self.tpot_mean_ms is None else round(self.tpot_mean_ms, 3),
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "requests": round(self.requests),
            "at": format_time(self.at),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> BaselineEntry:
        return cls(
            mode=Mode(raw["mode"]),
            bucket=int(raw["bucket"]),
            metric=str(raw["metric"]),
            p50_ms=float(raw["p50Ms"]),
            p99_ms=float(raw["p99Ms"]),
            tpot_mean_ms=None if raw.get("tpotMeanMs") is None else float(raw["tpotMeanMs"]),
            acceptance=None if raw.get("acceptance") is None else float(raw["acceptance"]),
            requests=float(raw.get("requests", 0)),
            at=parse_time(str(raw["at"])),
        )


def entry_from_window(
    measurements: Mapping[str, Measurement], *, mode: Mode, metric: str, min_requests: float, now: datetime
) -> BaselineEntry | None:
    """A record entry from one evaluation, or None unless batch size and both latency quantiles are Valid."""
    p50_signal, p99_signal = LATENCY_SIGNALS[metric]
    p50 = _valid_value(measurements, p50_signal)
    p99 = _valid_value(measurements, p99_signal)
    batch = _valid_value(measurements, Signal.BATCH_SIZE)
    requests = _valid_value(measurements, Signal.REQUESTS_IN_WINDOW)
    if p50 is None or p99 is None or batch is None or requests is None or requests < min_requests:
        return None
    tpot = _valid_value(measurements, Signal.TPOT_MEAN)
    acceptance = _valid_value(measurements, Signal.ACCEPTANCE_RATE)
    # rounded as to_dict rounds, so the entry in memory equals the one read back from status
    return BaselineEntry(
        mode=mode,
        bucket=load_bucket(batch),
        metric=metric,
        p50_ms=round(p50 * 1000, 3),
        p99_ms=round(p99 * 1000, 3),
        tpot_mean_ms=None if tpot is None else round(tpot * 1000, 3),
        acceptance=None if acceptance is None or mode is not Mode.ON else round(acceptance, 4),
        requests=round(requests),
        at=now,
    )


def _valid_value(measurements: Mapping[str, Measurement], signal: Signal) -> float | None:
    m = measurements.get(signal)
    return m.value if m is not None and m.valid else None


def record(
    entries: Sequence[BaselineEntry], entry: BaselineEntry, *, min_spacing: timedelta, now: datetime
) -> tuple[BaselineEntry, ...]:
    """Add a window unless the same key was recorded less than `min_spacing` ago (overlapping windows repeat data).

    Keeps the last WINDOWS_PER_BUCKET per (mode, bucket, metric) and drops entries older than MAX_RECORD_AGE.
    """
    fresh = [e for e in entries if now - e.at <= MAX_RECORD_AGE]
    same = [e for e in fresh if _key(e) == _key(entry)]
    if same and entry.at - max(e.at for e in same) < min_spacing:
        return tuple(fresh)
    same.append(entry)
    same.sort(key=lambda e: e.at)
    kept_same = same[-WINDOWS_PER_BUCKET:]
    others = [e for e in fresh if _key(e) != _key(entry)]
    return tuple(sorted(others + kept_same, key=lambda e: (e.mode.value, e.metric, e.bucket, e.at)))


def _key(entry: BaselineEntry) -> tuple[str, int, str]:
    return (entry.mode.value, entry.bucket, entry.metric)


@dataclass(frozen=True)
class BaselineSummary:
    """The median of the kept windows for one (mode, bucket, metric): one noisy window cannot decide alone."""

    mode: Mode
    bucket: int
    metric: str
    p50_ms: float
    p99_ms: float
    tpot_mean_ms: float | None
    acceptance: float | None
    windows: int
    newest: datetime

    def describe(self) -> str:
        return (
            f"{self.mode.value} at batch {bucket_label(self.bucket)}: P99 {self.metric.upper()} {self.p99_ms:.1f} ms, "
            f"P50 {self.p50_ms:.1f} ms ({self.windows} window{'s' if self.windows != 1 else ''}, newest "
            f"{format_time(self.newest)})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "bucket": bucket_label(self.bucket),
            "metric": self.metric,
            "p50Ms": round(self.p50_ms, 3),
            "p99Ms": round(self.p99_ms, 3),
            "tpotMeanMs": None if self.tpot_mean_ms is None else round(self.tpot_mean_ms, 3),
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "windows": self.windows,
            "newest": format_time(self.newest),
        }


def summary(
    entries: Sequence[BaselineEntry], *, mode: Mode, bucket: int, metric: str, now: datetime, max_age: timedelta
) -> BaselineSummary | None:
    chosen = [e for e in entries if _key(e) == (mode.value, bucket, metric) and now - e.at <= max_age]
    if not chosen:
        return None
    tpots = [e.tpot_mean_ms for e in chosen if e.tpot_mean_ms is not None]
    accs = [e.acceptance for e in chosen if e.acceptance is not None]
    return BaselineSummary(
        mode=mode,
        bucket=bucket,
        metric=metric,
        p50_ms=statistics.median(e.p50_ms for e in chosen),
        p99_ms=statistics.median(e.p99_ms for e in chosen),
        tpot_mean_ms=statistics.median(tpots) if tpots else None,
        acceptance=statistics.median(accs) if accs else None,
        windows=len(chosen),
        newest=max(e.at for e in chosen),
    )


def side_by_side(entries: Sequence[BaselineEntry], *, metric: str, now: datetime) -> list[dict[str, Any]]:
    """Per load bucket, speculation on vs off: the table status shows to answer "is speculation helping?"."""
    rows: list[dict[str, Any]] = []
    for bucket in sorted({e.bucket for e in entries if e.metric == metric}):
        on = summary(entries, mode=Mode.ON, bucket=bucket, metric=metric, now=now, max_age=MAX_RECORD_AGE)
        off = summary(entries, mode=Mode.OFF, bucket=bucket, metric=metric, now=now, max_age=MAX_RECORD_AGE)
        row: dict[str, Any] = {"bucket": bucket_label(bucket)}
        if on:
            row["onP99Ms"] = round(on.p99_ms, 3)
        if off:
            row["offP99Ms"] = round(off.p99_ms, 3)
        if on and off and off.p99_ms > 0:
            row["p99Ratio"] = round(on.p99_ms / off.p99_ms, 3)
            row["speculationHelps"] = on.p99_ms < off.p99_ms
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ load histogram


def decay_load(
    histogram: Mapping[int, float], *, bucket: int, elapsed_s: float, half_life: timedelta = LOAD_HALF_LIFE
) -> dict[int, float]:
    """Time spent per load bucket, exponentially forgotten (half-life one day by default): the observed batch mix."""
    factor = 0.5 ** (elapsed_s / half_life.total_seconds())
    out = {b: w * factor for b, w in histogram.items() if w * factor >= 1.0}
    out[bucket] = out.get(bucket, 0.0) + elapsed_s
    return {b: round(w, 1) for b, w in out.items()}  # the precision status keeps


# ------------------------------------------------------------------------------------------------ canary


class CanaryOutcome(StrEnum):
    HELPS = "SpeculationHelps"
    HURTS = "SpeculationHurts"
    INCONCLUSIVE = "Inconclusive"


@dataclass(frozen=True)
class CanaryVerdict:
    outcome: CanaryOutcome
    reason: str
    evidence: dict[str, Any]


def compare_canary(
    speculative: Mapping[str, Measurement],
    plain: Mapping[str, Measurement],
    *,
    metric: str,
    tolerance: float,
    enable_above: float,
) -> CanaryVerdict:
    """Decide on two replica groups serving the same traffic, one speculating and one not.

    Comparable load is required (per-engine batch within a factor of 2; otherwise the P99s differ for another reason).
    Speculation helps when its P99 is below the plain P99 by more than the tolerance and the acceptance clears
    enableAbove; it hurts when its P99 is above the plain P99 by more than the tolerance; anything else is
    inconclusive, which holds.
    """
    _, p99_signal = LATENCY_SIGNALS[metric]
    evidence: dict[str, Any] = {
        "speculative": {
            k: speculative[k].to_dict()
            for k in (p99_signal, Signal.BATCH_SIZE, Signal.ACCEPTANCE_RATE)
            if k in speculative
        },
        "plain": {k: plain[k].to_dict() for k in (p99_signal, Signal.BATCH_SIZE) if k in plain},
        "tolerance": tolerance,
    }
    needed = {
        "speculative": (speculative, (p99_signal, Signal.BATCH_SIZE)),
        "plain": (plain, (p99_signal, Signal.BATCH_SIZE)),
    }
    for side, (group, signals) in needed.items():
        for signal in signals:
            m = group.get(signal)
            if m is None or not m.valid or m.value is None:
                why = "missing" if m is None else f"{m.klass.value}: {m.detail}"
                return CanaryVerdict(CanaryOutcome.INCONCLUSIVE, f"{side} {signal} is {why}", evidence)
    spec_p99, plain_p99 = _v(speculative, p99_signal), _v(plain, p99_signal)
    spec_batch, plain_batch = _v(speculative, Signal.BATCH_SIZE), _v(plain, Signal.BATCH_SIZE)
    low, high = sorted((max(spec_batch, 0.5), max(plain_batch, 0.5)))
    if high / low > 2:
        return CanaryVerdict(
            CanaryOutcome.INCONCLUSIVE,
            f"load not comparable: batch {spec_batch:.1f} speculative vs {plain_batch:.1f} plain",
            evidence,
        )
    ratio = spec_p99 / plain_p99 if plain_p99 > 0 else math.inf
    shown = (
        f"P99 {metric.upper()} {spec_p99 * 1000:.1f} ms speculative vs {plain_p99 * 1000:.1f} ms plain "
        f"({ratio - 1:+.0%}) at batch {spec_batch:.1f}/{plain_batch:.1f}"
    )
    evidence["p99Ratio"] = finite(ratio, 4)
    if ratio > 1 + tolerance:
        return CanaryVerdict(CanaryOutcome.HURTS, f"{shown}: speculation hurts beyond {tolerance:.0%}", evidence)
    acceptance = speculative.get(Signal.ACCEPTANCE_RATE)
    if ratio * (1 + tolerance) < 1:
        if acceptance is None or not acceptance.valid or acceptance.value is None:
            return CanaryVerdict(CanaryOutcome.INCONCLUSIVE, f"{shown}, but acceptance is not Valid", evidence)
        if acceptance.value < enable_above:
            return CanaryVerdict(
                CanaryOutcome.INCONCLUSIVE,
                f"{shown}, but acceptance {acceptance.value:.2f} < enableAbove {enable_above:.2f}",
                evidence,
            )
        return CanaryVerdict(
            CanaryOutcome.HELPS, f"{shown}, acceptance {acceptance.value:.2f}: speculation helps", evidence
        )
    return CanaryVerdict(CanaryOutcome.INCONCLUSIVE, f"{shown}: within ±{tolerance:.0%}", evidence)


def _v(group: Mapping[str, Measurement], signal: Signal) -> float:
    value = group[signal].value
    assert value is not None
    return value


# ------------------------------------------------------------------------------------------------ acceptance per config

ACCEPTANCE_WINDOWS_PER_CONFIG = 3
ACCEPTANCE_CONFIGS_KEPT = 6


@dataclass(frozen=True)
class ConfigKey:
    """What acceptance depends on besides the traffic: quantization of both models, method, acceptance method, K."""

    target_quantization: str
    draft_quantization: str | None  # None: no separate draft (ngram, mtp, suffix)
    method: str
    acceptance_method: str
    k: int | None

    def describe(self) -> str:
        draft = "" if self.draft_quantization is None else f", draft {self.draft_quantization}"
        k = "model default" if self.k is None else str(self.k)
        return f"target {self.target_quantization}{draft}, {self.method}, {self.acceptance_method}, K={k}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "targetQuantization": self.target_quantization,
            "draftQuantization": self.draft_quantization,
            "method": self.method,
            "acceptanceMethod": self.acceptance_method,
            "k": self.k,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ConfigKey:
        return cls(
            target_quantization=str(raw["targetQuantization"]),
            draft_quantization=None if raw.get("draftQuantization") is None else str(raw["draftQuantization"]),
            method=str(raw["method"]),
            acceptance_method=str(raw["acceptanceMethod"]),
            k=None if raw.get("k") is None else int(raw["k"]),
        )

    def same_except_quantization(self, other: ConfigKey) -> bool:
        """Only the quantization of target or draft differs: the one change whose acceptance cost is compared."""
        return (self.method, self.acceptance_method, self.k) == (other.method, other.acceptance_method, other.k) and (
            self.target_quantization,
            self.draft_quantization,
        ) != (other.target_quantization, other.draft_quantization)


@dataclass(frozen=True)
class AcceptanceWindow:
    """One settled window's acceptance under one configuration and load bucket, with its sample counts."""

    config: ConfigKey
    bucket: int
    acceptance: float
    draft_tokens: float
    requests: float | None
    short_fraction: float | None  # share of short responses in the window (traffic mix), when measured
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "bucket": self.bucket,
            "acceptance": round(self.acceptance, 4),
            "draftTokens": round(self.draft_tokens),
            "requests": None if self.requests is None else round(self.requests),
            "shortFraction": None if self.short_fraction is None else round(self.short_fraction, 4),
            "at": format_time(self.at),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AcceptanceWindow:
        return cls(
            config=ConfigKey.from_dict(raw["config"]),
            bucket=int(raw["bucket"]),
            acceptance=float(raw["acceptance"]),
            draft_tokens=float(raw["draftTokens"]),
            requests=None if raw.get("requests") is None else float(raw["requests"]),
            short_fraction=None if raw.get("shortFraction") is None else float(raw["shortFraction"]),
            at=parse_time(str(raw["at"])),
        )


def record_acceptance(
    entries: Sequence[AcceptanceWindow], entry: AcceptanceWindow, *, min_spacing: timedelta, now: datetime
) -> tuple[AcceptanceWindow, ...]:
    """Add a settled window to the per-configuration acceptance record (bounded, JSON-able).

    Per (configuration, bucket) it keeps the FIRST window (the comparison point right after a change) and the
    latest ones (the comparison point right before the next change); only the newest ACCEPTANCE_CONFIGS_KEPT
    configurations stay, and nothing older than MAX_RECORD_AGE.
    """
    fresh = [e for e in entries if now - e.at <= MAX_RECORD_AGE]
    same = sorted((e for e in fresh if (e.config, e.bucket) == (entry.config, entry.bucket)), key=lambda e: e.at)
    if same and entry.at - same[-1].at < min_spacing:
        return tuple(fresh)
    same.append(entry)
    kept_same = same if len(same) <= ACCEPTANCE_WINDOWS_PER_CONFIG else [same[0], *same[-2:]]
    others = [e for e in fresh if (e.config, e.bucket) != (entry.config, entry.bucket)]
    merged = others + kept_same
    newest: dict[ConfigKey, datetime] = {}
    for e in merged:
        newest[e.config] = max(newest.get(e.config, e.at), e.at)
    keep = set(sorted(newest, key=lambda c: newest[c])[-ACCEPTANCE_CONFIGS_KEPT:])
    return tuple(sorted((e for e in merged if e.config in keep), key=lambda e: (e.at, e.bucket)))
