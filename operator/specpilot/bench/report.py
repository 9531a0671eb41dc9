"""Tables, JSON rows and PNG plots of a benchmark run, and the verdicts against the issue's targets."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specpilot.bench.runner import RESTART_CONTROLS, PolicyRun

COLUMNS = ("scenario", "policy", "config", "goodput", "slo_attainment", "p50_tpot_ms", "p99_tpot_ms", "p50_ttft_ms",
           "p99_ttft_ms", "p99_e2e_ms", "actuations", "changes", "trials", "failed", "timed_out",
           "replicas")  # fmt: skip
LATENCIES = (("p50_tpot_ms", "P50 TPOT"), ("p99_tpot_ms", "P99 TPOT"), ("p50_ttft_ms", "P50 TTFT"),
             ("p99_ttft_ms", "P99 TTFT"), ("p99_e2e_ms", "P99 E2E"))  # fmt: skip


def table(rows: Sequence[dict[str, Any]]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in COLUMNS) for r in rows]
    return "\n".join(lines)


REFERENCES = (  # (row, what it is, how the verdict calls it): printed against specpilot and the oracle
    ("oracle-within-budget", "the oracle held to the deployment's actuation budget", "that oracle"),
    ("best-static-reachable", "the best static config from the earliest refit the agreement rule allows", "that refit"),
    ("oracle-from-declared", "the oracle from the declared config", "that oracle"),
)


def verdicts(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The issue's targets for one scenario, measured: printed, never asserted."""
    by = {r["policy"]: r for r in rows}
    oracle, best, off = by.get("oracle"), by.get("best-static"), by.get("off")
    out: list[str] = []
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
        for policy, what, it in REFERENCES:
            reference = by.get(policy)
            if reference and reference["goodput"] > 0 and oracle and oracle["goodput"] > 0:
                out.append(
                    f"{name}: goodput vs {what} ({reference['config']}) {sp['goodput'] / reference['goodput']:.1%};"
                    f" {it} reaches {reference['goodput'] / oracle['goodput']:.1%} of the oracle"
                    " (no target: a reference)"
                )
        out += latency_verdicts(name, sp, by)
        plain_best = meta.get("best_static_without_searched_schedules")
        plain_goodput = meta.get("static_goodput", {}).get(plain_best, 0.0)
        if best and plain_best and plain_best != best["config"] and plain_goodput > 0:
            gain = sp["goodput"] / plain_goodput - 1
            out.append(f"{name}: goodput vs best static without per-batch schedules ({plain_best}) {gain:+.1%}")
        counted = p99_windows_worse(meta, name) if off else None
        if counted is not None:
            worse, total = counted
            out.append(f"{name}: windows with P99 TPOT > 1.05x speculation-off after 30 min: {worse} of {total}")
    for control, plan in RESTART_CONTROLS:
        restarted, source = by.get(control), by.get(plan)
        if restarted and source and best and best["goodput"] > 0 and restarted["goodput"] > 0:
            who = "the oracle" if plan == "oracle" else plan
            out.append(
                f"{plan}: goodput vs best static {source['goodput'] / best['goodput'] - 1:+.1%}; the best static"
                f" config restarted where {who} restarts ({restarted['config']})"
                f" {restarted['goodput'] / best['goodput'] - 1:+.1%}, and {plan} reaches"
                f" {source['goodput'] / restarted['goodput']:.1%} of it: the same restarts, its own choice of"
                " configuration (a control, no target)"
            )
    return out


PLAIN = ("off", "always-on")  # the two configurations a deployment could run without autotune


def better_plain(rows: Iterable[Mapping[str, Any] | None]) -> Mapping[str, Any] | None:
    """The row of higher goodput among the plain choices given (None where none is)."""
    present = [r for r in rows if r is not None]
    return max(present, key=lambda r: float(r["goodput"])) if present else None


def latency_verdicts(name: str, mine: dict[str, Any], by: dict[str, dict[str, Any]]) -> list[str]:
    """Goodput against the better plain choice (off or the declared config always on), and every latency of the
    row as a ratio to the oracle's and to speculation off's (< 1: faster): printed, never asserted."""
    out: list[str] = []
    better = better_plain(by[p] for p in PLAIN if p in by and by[p]["goodput"] > 0)
    if better is not None:
        ratio = mine["goodput"] / better["goodput"]
        out.append(f"{name}: goodput vs max(off, always-on) ({better['policy']}) {ratio:.1%}"
                   f" (target >= 99%: {'met' if ratio >= 0.99 else 'MISSED'})")  # fmt: skip
    for reference in ("oracle", "off"):
        row = by.get(reference)
        if row is None:
            continue
        ratios = [f"{label} {_latency_ratio(mine.get(key), row.get(key))}" for key, label in LATENCIES]
        if all(r.endswith(" -") for r in ratios):
            continue
        out.append(f"{name}: latency vs {reference}: " + ", ".join(ratios))
    return out


def _latency_ratio(mine: Any, reference: Any) -> str:
    if not (_finite(mine) and _finite(reference)) or reference <= 0:
        return "-"
    return f"x{mine / reference:.2f}"


def p99_windows_worse(meta: dict[str, Any], policy: str) -> tuple[int, int] | None:
    """(windows whose P99 TPOT is > 1.05x speculation-off's, windows counted), from 30 min in (after stabilization).

    None when either series is missing. A window without a finite P99 on either side is not counted as worse.
    """
    windows = meta.get("windows_p99_tpot_ms", {})
    mine, plain = windows.get(policy, []), windows.get("off", [])
    if not mine or not plain:
        return None
    skip = max(1, math.ceil(1800 / meta["window_s"]))
    worse = [i for i, (a, b) in enumerate(zip(mine, plain, strict=False))
             if i >= skip and _finite(a) and _finite(b) and a > 1.05 * b]  # fmt: skip
    return len(worse), max(0, len(mine) - skip)


def _finite(value: Any) -> bool:
    """A window's P99 as bench.json stores it: a number, or None where the window had no finished request."""
    return isinstance(value, int | float) and not math.isnan(value)


def across_seeds(rows: Sequence[dict[str, Any]], metas: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets per scenario over several seeds, each ratio paired within one seed.

    Every policy of a seed replays the same arrivals and acceptance draws, so the ratio specpilot / oracle of one seed
    is a paired comparison; the spread of those ratios over seeds (>= 5 seeds, paired) says how
    much of a figure is the draw. One entry per (scenario, closed-loop policy), its per-seed lists in seed order.
    `failed` (and `oracle_failed`) counts the requests a restart aborted or lost: goodput counts a request past its
    SLO as nothing either way, so a restart into a queue that would miss its deadlines anyway costs no goodput, and
    a reader should see how many requests a figure dropped.
    """
    by_seed = {(r["scenario"], r["seed"], r["policy"]): r for r in rows}
    (as_oracle, _), (as_mine, mine_of) = RESTART_CONTROLS
    out: list[dict[str, Any]] = []
    scenarios = list(dict.fromkeys(m["scenario"] for m in metas))
    for scenario in scenarios:
        runs = sorted((m for m in metas if m["scenario"] == scenario), key=lambda m: m["seed"])
        for policy in ("specpilot", "specpilot-lenient"):
            entry: dict[str, Any] = {"scenario": scenario, "policy": policy, "dynamic": bool(runs[0].get("dynamic")),
                                     "seeds": [], "vs_oracle": [], "vs_oracle_from_declared": [],
                                     "vs_best_static": [], "vs_reachable": [],
                                     "vs_oracle_within_budget": [], "oracle_vs_best_static": [],
                                     "oracle_restarts_alone": [], "vs_restart_control": [],
                                     "p99_windows_worse": [], "actuations": [], "changes": [], "trials": [],
                                     "failed": [],
                                     "oracle_failed": [], "vs_plain": [], "latency_vs_oracle": [],
                                     "latency_vs_off": []}  # fmt: skip
            for meta in runs:
                seed = meta["seed"]
                mine = by_seed.get((scenario, seed, policy))
                oracle = by_seed.get((scenario, seed, "oracle"))
                best = by_seed.get((scenario, seed, "best-static"))
                reachable = by_seed.get((scenario, seed, "best-static-reachable"))
                within = by_seed.get((scenario, seed, "oracle-within-budget"))
                from_declared = by_seed.get((scenario, seed, "oracle-from-declared"))
                if mine is None or oracle is None or best is None:
                    continue
                entry["seeds"].append(seed)
                entry["vs_oracle"].append(_ratio(mine, oracle))
                entry["vs_oracle_from_declared"].append(_ratio(mine, from_declared))
                entry["vs_best_static"].append(_ratio(mine, best) - 1)
                entry["vs_reachable"].append(_ratio(mine, reachable))
                entry["vs_oracle_within_budget"].append(_ratio(mine, within))
                entry["oracle_vs_best_static"].append(_ratio(oracle, best) - 1)
                restarted = by_seed.get((scenario, seed, as_oracle))
                entry["oracle_restarts_alone"].append(_ratio(restarted, best) - 1 if restarted else math.nan)
                control = by_seed.get((scenario, seed, as_mine)) if policy == mine_of else None  # not the lenient's
                entry["vs_restart_control"].append(_ratio(mine, control))
                counted = p99_windows_worse(meta, policy)
                entry["p99_windows_worse"].append(list(counted) if counted else None)
                entry["actuations"].append(mine["actuations"])
                entry["changes"].append(mine.get("changes"))  # None in rows written before they were counted
                entry["trials"].append(mine.get("trials"))
                entry["failed"].append(mine.get("failed", 0))
                entry["oracle_failed"].append(oracle.get("failed", 0))
                _add_latency(entry, mine, oracle, {p: by_seed.get((scenario, seed, p)) for p in PLAIN})
            if entry["seeds"]:
                out.append(entry)
    return out


def actuations_text(actuations: int, changes: int | None, trials: int | None) -> str:
    """One seed's actuations with, of them, the changes of what every pod serves and the one-pod trials (rows
    written before those were counted show the actuations alone)."""
    return str(actuations) if changes is None else f"{actuations} ({changes}, {trials or 0})"


def _add_latency(
    entry: dict[str, Any], mine: dict[str, Any], oracle: dict[str, Any], plain: dict[str, dict[str, Any] | None]
) -> None:
    """One seed's goodput against max(off, always-on) and [P50 TPOT, P99 TTFT] ratios to the oracle and to off."""
    better = better_plain(plain.values())
    entry["vs_plain"].append(_ratio(mine, better))
    off = plain.get("off")
    for key, reference in (("latency_vs_oracle", oracle), ("latency_vs_off", off)):
        entry[key].append([_quotient(mine.get(m), reference.get(m)) if reference else math.nan
                           for m in ("p50_tpot_ms", "p99_ttft_ms")])  # fmt: skip


def _quotient(mine: Any, reference: Any) -> float:
    return float(mine) / float(reference) if _finite(mine) and _finite(reference) and reference > 0 else math.nan


def goodput_ratio(mine: Mapping[str, Any], reference: Mapping[str, Any] | None) -> float | None:
    """`mine`'s goodput over `reference`'s; None without a reference, or where the reference's goodput is 0."""
    if reference is None or float(reference["goodput"]) <= 0:
        return None
    return float(mine["goodput"]) / float(reference["goodput"])


def _ratio(mine: Mapping[str, Any], reference: Mapping[str, Any] | None) -> float:
    """goodput_ratio for the seeds table's aggregates, which skip NaN: NaN where there is no ratio."""
    ratio = goodput_ratio(mine, reference)
    return math.nan if ratio is None else ratio


def seeds_table(summary: Sequence[dict[str, Any]]) -> str:
    """One line per (scenario, policy): min / mean / max of each paired ratio and on how many seeds a target is met."""
    header = ("scenario", "policy", "seeds", "vs oracle min/mean/max", ">=95%",
              "vs oracle from declared min/mean/max", ">=95%", "vs best static min/mean/max",
              ">=+10%", "vs earliest refit min/mean/max", "vs oracle within budget min/mean/max",
              "oracle vs best static min/mean/max", "of which the oracle's restarts alone",
              "vs the best static with its restarts",
              "P99 windows > 1.05x off", "actuations (changes, trials)", "aborted or lost (oracle)",
              "vs max(off, always-on) min/mean/max", ">=99%", "P50 TPOT, P99 TTFT vs oracle (mean)",
              "P50 TPOT, P99 TTFT vs off (mean)")  # fmt: skip
    lines: list[tuple[str, ...]] = [header]
    for e in summary:
        dropped = ", ".join(f"{f} ({o})" for f, o in zip(e["failed"], e["oracle_failed"], strict=True))
        n = len(e["seeds"])
        met_oracle = sum(1 for r in e["vs_oracle"] if r >= 0.95)
        met_from_declared = sum(1 for r in e["vs_oracle_from_declared"] if r >= 0.95)
        met_static = f"{sum(1 for g in e['vs_best_static'] if g >= 0.10)}/{n}" if e["dynamic"] else "no target"
        windows = ", ".join("-" if w is None else f"{w[0]}/{w[1]}" for w in e["p99_windows_worse"])
        lines.append((e["scenario"], e["policy"], _seed_list(e["seeds"]), _spread(e["vs_oracle"], "{:.1%}"),
                      f"{met_oracle}/{n}", _spread(e["vs_oracle_from_declared"], "{:.1%}"), f"{met_from_declared}/{n}",
                      _spread(e["vs_best_static"], "{:+.1%}"), met_static,
                      _spread(e["vs_reachable"], "{:.1%}"), _spread(e["vs_oracle_within_budget"], "{:.1%}"),
                      _spread(e["oracle_vs_best_static"], "{:+.1%}"), _spread(e["oracle_restarts_alone"], "{:+.1%}"),
                      _spread(e["vs_restart_control"], "{:.1%}"), windows,
                      ", ".join(actuations_text(*counts) for counts in zip(e["actuations"], e["changes"], e["trials"],
                                                                         strict=True)),
                      dropped, _spread(e["vs_plain"], "{:.1%}"),
                      f"{sum(1 for r in e['vs_plain'] if r >= 0.99)}/{n}", _mean_latency(e["latency_vs_oracle"]),
                      _mean_latency(e["latency_vs_off"])))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines)


def _spread(values: Sequence[float], fmt: str) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    return " / ".join(fmt.format(v) for v in (min(finite), sum(finite) / len(finite), max(finite)))


def _mean_latency(per_seed: Sequence[Sequence[float]]) -> str:
    """Mean of each latency ratio over the seeds, as x0.55, x1.02 ("-" where no seed has it)."""
    out = []
    for i in range(len(per_seed[0]) if per_seed else 0):
        finite = [r[i] for r in per_seed if not math.isnan(r[i])]
        out.append(f"x{sum(finite) / len(finite):.2f}" if finite else "-")
    return ", ".join(out) or "-"


def _seed_list(seeds: Sequence[int]) -> str:
    return ",".join(str(s) for s in seeds)


def write_json(
    rows: Sequence[dict[str, Any]],
    metas: Sequence[dict[str, Any]],
    path: Path,
    across: Sequence[dict[str, Any]] = (),
) -> None:
    document: dict[str, Any] = {"rows": list(rows), "scenarios": list(metas)}
    if across:
        document["seeds"] = list(across)
    path.write_text(json.dumps(as_strict_json(document), indent=2, allow_nan=False, default=str))


def as_strict_json(value: Any) -> Any:
    """NaN and infinities (a window without a finished request) as null: strict JSON, which `jq` and browsers read."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: as_strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_strict_json(v) for v in value]
    return value


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
