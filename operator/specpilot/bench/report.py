"""Tables, JSON rows and PNG plots of a benchmark run, and the verdicts against the issue's targets."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specpilot.bench.runner import PolicyRun

COLUMNS = ("scenario", "policy", "config", "goodput", "slo_attainment", "p50_tpot_ms", "p99_tpot_ms", "p99_e2e_ms",
           "actuations", "failed")  # fmt: skip


def table(rows: Sequence[dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in COLUMNS) for r in rows]
    return "\n".join(lines)


def verdicts(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The issue's targets for one scenario, measured: printed, never asserted."""
    by = {r["policy"]: r for r in rows}
    oracle, best, off = by.get("oracle"), by.get("best-static"), by.get("off")
    out: list[str] = []
    windows = meta.get("windows_p99_tpot_ms", {})
    for name in ("specpilot", "specpilot-lenient"):
        sp = by.get(name)
        if sp is None:
            continue
        if oracle and oracle["goodput"] > 0:
            ratio = sp["goodput"] / oracle["goodput"]
            out.append(f"{name}: goodput vs oracle {ratio:.1%} (target >= 95%: {'met' if ratio >= 0.95 else 'MISSED'})")
        if best and best["goodput"] > 0:
            gain = sp["goodput"] / best["goodput"] - 1
            target = f"target >= +10%: {'met' if gain >= 0.10 else 'MISSED'}" if meta.get("dynamic") else "no target"
            out.append(f"{name}: goodput vs best static ({best['config']}) {gain:+.1%} ({target})")
        reachable = by.get("best-static-reachable")
        if reachable and reachable["goodput"] > 0 and oracle and oracle["goodput"] > 0:
            out.append(
                f"{name}: goodput vs the best static config from the earliest refit the agreement rule allows "
                f"({reachable['config']}) {sp['goodput'] / reachable['goodput']:.1%}; that refit reaches "
                f"{reachable['goodput'] / oracle['goodput']:.1%} of the oracle (no target: a reference)"
            )
        plain_best = meta.get("best_static_without_fitted_schedules")
        plain_goodput = meta.get("static_goodput", {}).get(plain_best, 0.0)
        if best and plain_best and plain_best != best["config"] and plain_goodput > 0:
            gain = sp["goodput"] / plain_goodput - 1
            out.append(f"{name}: goodput vs best static without fitted schedules ({plain_best}) {gain:+.1%}")
        mine, plain = windows.get(name, []), windows.get("off", [])
        if mine and plain and off:
            skip = max(1, math.ceil(1800 / meta["window_s"]))  # after stabilization: 30 min in
            worse = [i for i, (a, b) in enumerate(zip(mine, plain, strict=False)) if i >= skip and not math.isnan(a)
                     and not math.isnan(b) and a > 1.05 * b]  # fmt: skip
            out.append(f"{name}: windows with P99 TPOT > 1.05x speculation-off after 30 min: {len(worse)} of "
                       f"{max(0, len(mine) - skip)}")  # fmt: skip
    return out


def write_json(rows: Sequence[dict[str, Any]], metas: Sequence[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps({"rows": list(rows), "scenarios": list(metas)}, indent=2, default=_nan))


def _nan(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


def plot(runs: Sequence[PolicyRun], meta: dict[str, Any], folder: Path) -> Path:
    """Load, configuration and per-window P99 TPOT over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    for run in runs:
        t = [s[0] / 60 for s in run.series]
        axes[0].plot(t, [s[1] for s in run.series], label=run.policy, linewidth=0.8)
        axes[1].step(t, [s[3] for s in run.series], where="post", label=run.policy, linewidth=1.0)
        p99 = meta["windows_p99_tpot_ms"].get(run.policy, [])
        w = meta["window_s"] / 60
        axes[2].plot([(i + 0.5) * w for i in range(len(p99))], p99, marker=".", label=run.policy, linewidth=0.8)
    axes[0].set_ylabel("running requests")
    axes[1].set_ylabel("K at the running batch (0 = none)")
    axes[2].set_ylabel("P99 TPOT per window (ms)")
    axes[2].set_xlabel("minutes")
    axes[0].set_title(f"{meta['scenario']}: {meta['description']}", fontsize=9)
    axes[0].legend(fontsize=7, ncol=3)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{meta['scenario']}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
