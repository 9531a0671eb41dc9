"""PNG plots of a report (matplotlib, headless): acceptance, latency by mode, load; actuations on every time axis."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specpilot.report.analysis import LATENCY_LABELS, Mode, Report
from specpilot.report.queries import Series

COLORS = {Mode.SPECULATING: "tab:blue", Mode.PLAIN: "tab:orange"}


def _dt(t: float) -> float:
    """Unix seconds as matplotlib's date number (so the axis formats as UTC times)."""
    return float(mdates.date2num(datetime.fromtimestamp(t, UTC)))  # type: ignore[no-untyped-call]


def _mark_actuations(ax: Axes, report: Report, *, label: bool) -> None:
    for a in report.actuations:
        ax.axvline(_dt(a.at), color="tab:red", linestyle="--", linewidth=1)
        if label:
            ax.annotate(
                a.label if len(a.label) <= 38 else a.label[:37] + "…",
                xy=(_dt(a.at), 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                color="tab:red",
                annotation_clip=True,
                clip_on=True,
            )


def _time_format(report: Report) -> str:
    span = report.end - report.start
    return "%H:%M:%S" if span <= 7200 else "%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M"


def _finish(fig: Figure, axes: list[Axes], path: Path, report: Report) -> Path:
    for ax in axes:
        ax.xaxis.set_major_formatter(mdates.DateFormatter(_time_format(report), tz=UTC))  # type: ignore[no-untyped-call]
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (UTC)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_acceptance(report: Report, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    points = report.acceptance_windows
    if points:
        ax.plot([_dt(t) for t, _ in points], [v for _, v in points], "o-", ms=3, color=COLORS[Mode.SPECULATING])
    if report.acceptance:
        for q, v in (("P10", report.acceptance.p10), ("P50", report.acceptance.p50), ("P90", report.acceptance.p90)):
            ax.axhline(v, color="grey", linestyle=":", linewidth=1)
            ax.annotate(f"{q} {v:.0%}", xy=(1.0, v), xycoords=("axes fraction", "data"), fontsize=8, va="bottom")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("acceptance rate per window")
    ax.set_title(f"{report.namespace}/{report.name}: draft acceptance ({report.step_s:.0f} s windows)")
    _mark_actuations(ax, report, label=True)
    return _finish(fig, [ax], path, report)


def plot_latency(report: Report, path: Path) -> Path:
    hists = [h for h in (Series.TPOT, Series.TTFT, Series.E2E) if h in report.latency_windows]
    fig, axes_ = plt.subplots(len(hists), 1, figsize=(10, 3 * len(hists)), sharex=True, squeeze=False)
    axes = [a[0] for a in axes_]
    for ax, hist in zip(axes, hists, strict=True):
        for mode, windows in report.latency_windows[hist].items():
            times = [_dt(t) for t, _, _ in windows]
            p50s = [math.nan if p50 is None else p50 * 1000 for _, p50, _ in windows]
            p99s = [math.nan if p99 is None else p99 * 1000 for _, _, p99 in windows]
            ax.plot(times, p50s, "-", color=COLORS[mode], label=f"{mode.value} P50")
            ax.plot(times, p99s, "--", color=COLORS[mode], label=f"{mode.value} P99")
        ax.set_ylabel(f"{LATENCY_LABELS[hist]} (ms)")
        ax.legend(fontsize=8, loc="upper left")
        _mark_actuations(ax, report, label=ax is axes[0])
    axes[0].set_title(f"{report.namespace}/{report.name}: latency per window, speculating vs plain")
    return _finish(fig, axes, path, report)


def plot_load(report: Report, path: Path) -> Path:
    rows = (
        (Series.GENERATED, "generated tokens/s"),
        (Series.RUNNING, "running requests"),
        (Series.KV_CACHE, "KV cache"),
    )
    fig, axes_ = plt.subplots(len(rows), 1, figsize=(10, 7), sharex=True, squeeze=False)
    axes = [a[0] for a in axes_]
    for ax, (series, label) in zip(axes, rows, strict=True):
        for mode, by_series in report.load_windows.items():
            points = by_series.get(series, ())
            ax.plot([_dt(t) for t, _ in points], [v for _, v in points], "-", color=COLORS[mode], label=mode.value)
        ax.set_ylabel(label)
        ax.legend(fontsize=8, loc="upper left")
        _mark_actuations(ax, report, label=ax is axes[0])
    axes[0].set_title(f"{report.namespace}/{report.name}: throughput and load")
    return _finish(fig, axes, path, report)


def draw_all(report: Report, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_acceptance(report, out_dir / "acceptance.png"),
        plot_latency(report, out_dir / "latency.png"),
        plot_load(report, out_dir / "load.png"),
    ]
