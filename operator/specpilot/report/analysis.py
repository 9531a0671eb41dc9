"""Turn per-window range-query results into the report's numbers, verdict and Markdown (pure).

Input: for each `queries.Series`, the samples Prometheus returned (labels + (time, value) points, one point per
non-overlapping window). Each config hash is a *mode*: speculating when its pods drafted tokens in the period, plain
otherwise, so baseline windows (speculation switched off for a while) and a canary (another config running beside
it) are handled the same way. Latency quantiles per mode come from bucket counts summed over all of that mode's
windows, with Prometheus' histogram_quantile interpolation; acceptance is reported as a distribution across windows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from specpilot.report.queries import HISTOGRAMS, Series

Point = tuple[float, float]
LatencyWindows = tuple[tuple[float, float | None, float | None], ...]  # (window time, P50, P99)

# Verdict thresholds: a median per-token latency change smaller than this is noise on a shared node; a tail that
# grows more than TAIL_TOLERANCE cancels a median gain (the seed: judge P99, not only P50).
MEDIAN_EFFECT = 0.05
TAIL_TOLERANCE = 0.10
MIN_REQUESTS = 20  # per mode; below it a P99 is just the maximum
LOAD_MISMATCH = 0.25  # relative difference of mean running requests above which the comparison is confounded
QUANTILES = (0.5, 0.95, 0.99)
LATENCY_LABELS = {Series.TPOT: "TPOT", Series.TTFT: "TTFT", Series.E2E: "E2E latency"}


class Mode(StrEnum):
    SPECULATING = "speculating"
    PLAIN = "plain"


class VerdictKind(StrEnum):
    HELPING = "helping"
    HURTING = "hurting"
    NEUTRAL = "no clear difference"
    NO_BASELINE = "no baseline"
    NO_SPECULATION = "no speculation"
    TOO_FEW = "too few requests"


@dataclass(frozen=True)
class Sample:
    """One series of a range query: its labels and its (unix time, value) points, NaN dropped."""

    labels: Mapping[str, str]
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Actuation:
    at: float
    label: str


@dataclass(frozen=True)
class Distribution:
    p10: float
    p50: float
    p90: float
    overall: float  # sum of accepted / sum of drafted over every window
    windows: int
    draft_tokens: float


@dataclass(frozen=True)
class LatencyStats:
    quantiles: Mapping[float, float | None]
    requests: float

    @property
    def gap(self) -> float | None:
        """P99 / P50: how much worse the tail is than the typical request."""
        p50, p99 = self.quantiles.get(0.5), self.quantiles.get(0.99)
        return p99 / p50 if p50 and p99 is not None else None


@dataclass(frozen=True)
class LoadStats:
    windows: int
    running_mean: float | None
    tokens_per_s: float | None
    requests_per_s: float | None
    kv_mean: float | None
    kv_max: float | None


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    headline: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    namespace: str
    name: str
    start: float
    end: float
    step_s: float
    modes: Mapping[str, Mode]  # config hash -> mode
    first_seen: Mapping[str, float]
    acceptance_windows: tuple[Point, ...]
    acceptance: Distribution | None
    mean_acceptance_length: float | None
    latency: Mapping[Series, Mapping[Mode, LatencyStats]]
    latency_windows: Mapping[Series, Mapping[Mode, LatencyWindows]]
    load: Mapping[Mode, LoadStats]
    load_windows: Mapping[Mode, Mapping[Series, tuple[Point, ...]]]
    actuations: tuple[Actuation, ...]
    verdict: Verdict
    notes: tuple[str, ...] = field(default=())


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative bucket counts keyed by upper bound (math.inf included).

    None where Prometheus gives NaN: no observations, fewer than two buckets, or no +Inf bucket. A rank that lands
    in the +Inf bucket returns the largest finite bound (Prometheus's histogram_quantile saturates there).
    """
    if not 0 <= q <= 1 or len(buckets) < 2 or math.inf not in buckets:
        return None
    bounds = sorted(buckets)
    counts: list[float] = []
    for b in bounds:  # Prometheus fixes non-monotonic counts (extrapolated increases) the same way
        counts.append(max(buckets[b], counts[-1] if counts else 0.0))
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(counts) if c >= rank)
    if bounds[index] == math.inf:
        return bounds[-2]
    upper = bounds[index]
    lower, below = (0.0, 0.0) if index == 0 else (bounds[index - 1], counts[index - 1])
    if index == 0 and upper <= 0:
        return upper
    in_bucket = counts[index] - below
    return upper if in_bucket <= 0 else lower + (upper - lower) * (rank - below) / in_bucket


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of a non-empty sample (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sample")
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _by_config(samples: Iterable[Sample], label: str) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = defaultdict(dict)
    for sample in samples:
        cfg = sample.labels.get(label, "")
        for t, v in sample.points:
            out[cfg][t] = out[cfg].get(t, 0.0) + v
    return out


def _per_mode(
    per_config: Mapping[str, Mapping[float, float]], modes: Mapping[str, Mode]
) -> dict[Mode, dict[float, float]]:
    out: dict[Mode, dict[float, float]] = {m: {} for m in Mode}
    for cfg, points in per_config.items():
        mode = modes.get(cfg, Mode.PLAIN)
        for t, v in points.items():
            out[mode][t] = out[mode].get(t, 0.0) + v
    return out


def _buckets(
    samples: Iterable[Sample], label: str, modes: Mapping[str, Mode]
) -> dict[Mode, dict[float, dict[float, float]]]:
    """mode -> window time -> upper bound -> count in that window."""
    out: dict[Mode, dict[float, dict[float, float]]] = {m: defaultdict(dict) for m in Mode}
    for sample in samples:
        mode = modes.get(sample.labels.get(label, ""), Mode.PLAIN)
        le = float(sample.labels.get("le", "nan").replace("+Inf", "inf"))
        if math.isnan(le):
            continue
        for t, v in sample.points:
            window = out[mode][t]
            window[le] = window.get(le, 0.0) + v
    return out


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def _change(new: float | None, old: float | None) -> float | None:
    return new / old - 1 if new is not None and old else None


def analyse(
    data: Mapping[Series, Sequence[Sample]],
    *,
    namespace: str,
    name: str,
    start: float,
    end: float,
    step_s: float,
    config_label: str,
    actuations: Sequence[Actuation] = (),
) -> Report:
    """Classify each config hash, aggregate per mode, and decide whether speculation helps at the load seen."""
    drafted = _by_config(data.get(Series.DRAFTED, ()), config_label)
    accepted = _by_config(data.get(Series.ACCEPTED, ()), config_label)
    seen = _first_seen(data, config_label)
    modes = {cfg: Mode.SPECULATING if sum(drafted.get(cfg, {}).values()) > 0 else Mode.PLAIN for cfg in seen}

    # Acceptance across windows: all speculating configs of a window together (numerator and denominator summed).
    acc_mode, drafted_mode = _per_mode(accepted, modes)[Mode.SPECULATING], _per_mode(drafted, modes)[Mode.SPECULATING]
    windows, distribution = _acceptance(acc_mode, drafted_mode)
    drafts = sum(_per_mode(_by_config(data.get(Series.DRAFTS, ()), config_label), modes)[Mode.SPECULATING].values())
    mean_length = 1 + sum(acc_mode.values()) / drafts if drafts > 0 else None

    latency, latency_windows = _latency(data, config_label, modes)
    load, load_windows = _load(data, config_label, modes, step_s)
    switches = tuple(
        Actuation(t, f"config {cfg} ({modes[cfg].value}) starts")
        for cfg, t in sorted(seen.items(), key=lambda kv_: kv_[1])[1:]
    )
    verdict = decide(latency, load, distribution, mean_length)
    return Report(
        namespace=namespace,
        name=name,
        start=start,
        end=end,
        step_s=step_s,
        modes=modes,
        first_seen=seen,
        acceptance_windows=windows,
        acceptance=distribution,
        mean_acceptance_length=mean_length,
        latency=latency,
        latency_windows=latency_windows,
        load=load,
        load_windows=load_windows,
        actuations=tuple(sorted((*actuations, *switches), key=lambda a: a.at)),
        verdict=verdict,
    )


def _first_seen(data: Mapping[Series, Sequence[Sample]], config_label: str) -> dict[str, float]:
    """config hash -> the earliest time any series shows it."""
    seen: dict[str, float] = {}
    for series in data.values():
        for sample in series:
            cfg = sample.labels.get(config_label, "")
            for t, _ in sample.points:
                seen[cfg] = min(seen.get(cfg, t), t)
    return seen


def _acceptance(
    accepted: Mapping[float, float], drafted: Mapping[float, float]
) -> tuple[tuple[Point, ...], Distribution | None]:
    """The acceptance rate of each window that drafted, and their distribution (None without any)."""
    windows = tuple(sorted((t, accepted.get(t, 0.0) / d) for t, d in drafted.items() if d > 0))
    if not windows:
        return windows, None
    rates = [r for _, r in windows]
    total_drafted = sum(drafted.values())
    distribution = Distribution(
        p10=percentile(rates, 0.1),
        p50=percentile(rates, 0.5),
        p90=percentile(rates, 0.9),
        overall=sum(accepted.values()) / total_drafted,
        windows=len(windows),
        draft_tokens=total_drafted,
    )
    return windows, distribution


def _latency(
    data: Mapping[Series, Sequence[Sample]], config_label: str, modes: Mapping[str, Mode]
) -> tuple[dict[Series, dict[Mode, LatencyStats]], dict[Series, dict[Mode, LatencyWindows]]]:
    """Per histogram and mode: quantiles of the buckets summed over every window, and each window's P50 and P99."""
    latency: dict[Series, dict[Mode, LatencyStats]] = {}
    latency_windows: dict[Series, dict[Mode, LatencyWindows]] = {}
    for hist in HISTOGRAMS:
        if hist not in data:
            continue
        per_mode = _buckets(data[hist], config_label, modes)
        latency[hist], latency_windows[hist] = {}, {}
        for mode, by_window in per_mode.items():
            if not by_window:
                continue
            summed: dict[float, float] = defaultdict(float)
            for window in by_window.values():
                for le, count in window.items():
                    summed[le] += count
            latency[hist][mode] = LatencyStats(
                {q: histogram_quantile(q, summed) for q in QUANTILES}, summed.get(math.inf, 0.0)
            )
            latency_windows[hist][mode] = tuple(
                (t, histogram_quantile(0.5, w), histogram_quantile(0.99, w)) for t, w in sorted(by_window.items())
            )
    return latency, latency_windows


def _load(
    data: Mapping[Series, Sequence[Sample]], config_label: str, modes: Mapping[str, Mode], step_s: float
) -> tuple[dict[Mode, LoadStats], dict[Mode, dict[Series, tuple[Point, ...]]]]:
    """Per mode that ran: the load it served (running requests, tokens and requests per second, KV use)."""
    load: dict[Mode, LoadStats] = {}
    load_windows: dict[Mode, dict[Series, tuple[Point, ...]]] = {}
    running = _per_mode(_by_config(data.get(Series.RUNNING, ()), config_label), modes)
    generated = _per_mode(_by_config(data.get(Series.GENERATED, ()), config_label), modes)
    kv = _per_mode(_by_config(data.get(Series.KV_CACHE, ()), config_label), modes)
    e2e_count = {
        m: {t: w.get(math.inf, 0.0) for t, w in by_window.items()}
        for m, by_window in _buckets(data.get(Series.E2E, ()), config_label, modes).items()
    }
    for mode in Mode:
        times = set(running[mode]) | set(generated[mode])
        if not times:
            continue
        load[mode] = LoadStats(
            windows=len(times),
            running_mean=_mean(running[mode].values()),
            tokens_per_s=_mean(v / step_s for v in generated[mode].values()),
            requests_per_s=_mean(v / step_s for v in e2e_count[mode].values()),
            kv_mean=_mean(kv[mode].values()),
            kv_max=max(kv[mode].values(), default=None),
        )
        load_windows[mode] = {
            Series.RUNNING: tuple(sorted(running[mode].items())),
            Series.GENERATED: tuple(sorted((t, v / step_s) for t, v in generated[mode].items())),
            Series.KV_CACHE: tuple(sorted(kv[mode].items())),
        }
    return load, load_windows


def decide(
    latency: Mapping[Series, Mapping[Mode, LatencyStats]],
    load: Mapping[Mode, LoadStats],
    acceptance: Distribution | None,
    mean_length: float | None,
) -> Verdict:
    """Speculation helps when per-token latency improves at the median without the tail growing past tolerance.

    TPOT (per-request time per output token) is the quantity speculation changes; E2E stands in for vLLM versions
    without it. The comparison is only as good as the loads are equal, so a load mismatch is stated as a caveat.
    """
    metric = Series.TPOT if Series.TPOT in latency else Series.E2E
    by_mode = latency.get(metric, {})
    spec, plain = by_mode.get(Mode.SPECULATING), by_mode.get(Mode.PLAIN)
    acc = _acceptance_line(acceptance, mean_length)
    if spec is None:
        return Verdict(
            VerdictKind.NO_SPECULATION, "No speculating configuration served requests in this period.", (acc,)
        )
    if plain is None:
        return Verdict(
            VerdictKind.NO_BASELINE,
            "Cannot tell whether speculation helps: no plain (non-speculating) windows to compare with. Run a "
            "baseline window or a canary (spec.autotune.canary).",
            (acc,),
        )
    if min(spec.requests, plain.requests) < MIN_REQUESTS:
        return Verdict(
            VerdictKind.TOO_FEW,
            f"Too few requests to compare ({spec.requests:.0f} speculating, {plain.requests:.0f} plain; need "
            f"{MIN_REQUESTS} each).",
            (acc,),
        )
    label = LATENCY_LABELS[metric]
    p50 = _change(spec.quantiles[0.5], plain.quantiles[0.5])
    p99 = _change(spec.quantiles[0.99], plain.quantiles[0.99])
    reasons = [
        f"{label} P50 {_ms(spec.quantiles[0.5])} speculating vs {_ms(plain.quantiles[0.5])} plain ({_pct(p50)})",
        f"{label} P99 {_ms(spec.quantiles[0.99])} vs {_ms(plain.quantiles[0.99])} ({_pct(p99)}); P99/P50 gap "
        f"{_x(spec.gap)} speculating vs {_x(plain.gap)} plain",
        acc,
        *_context_lines(latency, load),
    ]
    if p50 is None or p99 is None:
        return Verdict(VerdictKind.TOO_FEW, f"{label} quantiles are missing for one mode.", tuple(reasons))
    return _judge(label, p50, p99, tuple(reasons))


def _acceptance_line(acceptance: Distribution | None, mean_length: float | None) -> str:
    if acceptance is None:
        return "no draft tokens in the period"
    return (
        f"acceptance P50 {acceptance.p50:.0%} (P10 {acceptance.p10:.0%}, P90 {acceptance.p90:.0%}) over "
        f"{acceptance.windows} windows"
        + (f", mean acceptance length {mean_length:.2f} tokens/step" if mean_length else "")
    )


def _context_lines(latency: Mapping[Series, Mapping[Mode, LatencyStats]], load: Mapping[Mode, LoadStats]) -> list[str]:
    """TTFT and load of both modes, where both were measured; a load mismatch is named as a confound."""
    lines = []
    ttft = latency.get(Series.TTFT, {})
    if Mode.SPECULATING in ttft and Mode.PLAIN in ttft:
        t_s, t_p = ttft[Mode.SPECULATING].quantiles[0.5], ttft[Mode.PLAIN].quantiles[0.5]
        lines.append(f"TTFT P50 {_ms(t_s)} vs {_ms(t_p)} ({_pct(_change(t_s, t_p))})")
    ls, lp = load.get(Mode.SPECULATING), load.get(Mode.PLAIN)
    if ls and lp and ls.running_mean is not None and lp.running_mean is not None:
        line = f"load: {ls.running_mean:.2f} running requests speculating vs {lp.running_mean:.2f} plain"
        high = max(ls.running_mean, lp.running_mean)
        if high > 0 and abs(ls.running_mean - lp.running_mean) / high > LOAD_MISMATCH:
            line += " — the modes saw different load, so the comparison is confounded; a canary compares at equal load"
        lines.append(line)
    return lines


def _judge(label: str, p50: float, p99: float, reasons: tuple[str, ...]) -> Verdict:
    """Helping, hurting or neutral from the relative change of the median and the tail."""
    if p50 <= -MEDIAN_EFFECT and p99 <= TAIL_TOLERANCE:
        return Verdict(
            VerdictKind.HELPING,
            f"Speculation is helping at this load: {label} P50 {_pct(p50)} and P99 {_pct(p99)} against plain decoding.",
            reasons,
        )
    if p50 >= MEDIAN_EFFECT or p99 > TAIL_TOLERANCE:
        what = "the tail (P99)" if p99 > TAIL_TOLERANCE and p50 < MEDIAN_EFFECT else "per-token latency"
        return Verdict(
            VerdictKind.HURTING,
            f"Speculation is hurting at this load: {what} is worse ({label} P50 {_pct(p50)}, P99 {_pct(p99)}). "
            "Switch it off above this load (disableAboveBatchSize) or let autotune do it.",
            reasons,
        )
    return Verdict(
        VerdictKind.NEUTRAL,
        f"No clear difference at this load ({label} P50 {_pct(p50)}, P99 {_pct(p99)}): speculation costs draft "
        "compute and KV cache for no measurable gain.",
        reasons,
    )


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def _pct(change: float | None) -> str:
    return "n/a" if change is None else f"{change:+.0%}"


def _x(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.1f}x"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_markdown(report: Report, plots: Sequence[str] = ()) -> str:
    """A short Markdown summary: verdict first, then the numbers behind it, then the plots."""
    r = report
    lines = [
        f"# specpilot report: {r.namespace}/{r.name}",
        "",
        f"{_time(r.start)} to {_time(r.end)} UTC, {r.step_s:.0f} s windows. Configurations: "
        + ", ".join(f"`{cfg}` {mode.value}" for cfg, mode in sorted(r.modes.items())),
        "",
        "## Verdict",
        "",
        f"**{r.verdict.headline}**",
        "",
        *[f"- {reason}" for reason in r.verdict.reasons],
        "",
        "## Acceptance (speculating windows)",
        "",
    ]
    if r.acceptance:
        a = r.acceptance
        lines += [
            "| P10 | P50 | P90 | overall | windows | draft tokens | mean acceptance length |",
            "|---|---|---|---|---|---|---|",
            f"| {a.p10:.1%} | {a.p50:.1%} | {a.p90:.1%} | {a.overall:.1%} | {a.windows} | {a.draft_tokens:.0f} | "
            f"{_num(r.mean_acceptance_length)} |",
        ]
    else:
        lines.append("No draft tokens were proposed in this period.")
    lines += [
        "",
        "## Latency",
        "",
        "| metric | mode | P50 | P95 | P99 | P99/P50 | requests |",
        "|---|---|---|---|---|---|---|",
    ]
    for hist, by_mode in r.latency.items():
        for mode, s in sorted(by_mode.items()):
            q = s.quantiles
            lines.append(
                f"| {LATENCY_LABELS[hist]} | {mode.value} | {_ms(q[0.5])} | {_ms(q[0.95])} | {_ms(q[0.99])} | "
                f"{_x(s.gap)} | {s.requests:.0f} |"
            )
    lines += [
        "",
        "## Load",
        "",
        "| mode | windows | running requests (mean) | generated tokens/s | requests/s | KV cache mean / max |",
        "|---|---|---|---|---|---|",
    ]
    for mode, ls in sorted(r.load.items()):
        lines.append(
            f"| {mode.value} | {ls.windows} | {_num(ls.running_mean)} | {_num(ls.tokens_per_s, '{:.1f}')} | "
            f"{_num(ls.requests_per_s)} | {_num(ls.kv_mean, '{:.1%}')} / {_num(ls.kv_max, '{:.1%}')} |"
        )
    lines += ["", "## Actuations and config changes", ""]
    lines += [f"- {_time(a.at)} {a.label}" for a in r.actuations] or ["None in this period."]
    if plots:
        lines += ["", "## Plots", "", *[f"![{p}]({p})" for p in plots]]
    return "\n".join(lines) + "\n"
