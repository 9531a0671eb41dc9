"""`specpilot bench [--scenario NAME]... [-o json] [--report DIR] [--calibration] [--quick]` (shell)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import AutotuneObjective
from specpilot.bench import compare, report
from specpilot.bench.layout import Balancer, Layout
from specpilot.bench.scenarios import (
    CLIENT_TIMEOUT_S,
    SCENARIOS,
    Scenario,
    capacity_ratio,
    on_true_capacity,
    scenario_named,
)
from specpilot.bench.trace import TraceError, read_trace
from specpilot.sim.presets import GPU_CLASS_COPIES, PERTURBATIONS, TRUE_PROFILES, preset_named

if TYPE_CHECKING:
    from specpilot.bench.runner import PolicyRun


def add_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p)
    _client_arguments(p)
    add_trace_arguments(p)
    _deployment_arguments(p)
    _output_arguments(p)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """Which scenarios, seeds and clock, and how many processes run them."""
    p.add_argument("--scenario", action="append", default=[], help="run only this scenario (repeatable)")
    p.add_argument(
        "--seed",
        type=seed_list,
        default=[1],
        help="seed, or seeds to run and compare paired: 3, 1-5 or 1,3,5 (use at least 5 to see the spread)",
    )
    p.add_argument("--calibration", action="store_true", help="print the simulator against published measurements")
    p.add_argument(
        "--quick",
        action="store_true",
        help="time-compressed scenarios (x0.1), the controller's time constants and the simulator's restarts with them",
    )
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations run in parallel processes")


def _client_arguments(p: argparse.ArgumentParser) -> None:
    """How long clients wait for a first token."""
    patience = p.add_mutually_exclusive_group()
    patience.add_argument(
        "--client-timeout",
        type=client_timeout,
        default=CLIENT_TIMEOUT_S,
        metavar="DURATION",
        help=f"clients hang up after this long without a first token and vLLM aborts their requests, which count as "
        f"failed in every policy's row (default {CLIENT_TIMEOUT_S:g}s, the default read timeout of ingress-nginx and "
        "AWS ALB)",
    )
    patience.add_argument(
        "--no-client-timeout",
        dest="client_timeout",
        action="store_const",
        const=None,
        help="clients wait forever for their first token (a sensitivity run: past capacity the queue grows without "
        "bound)",
    )


def _deployment_arguments(p: argparse.ArgumentParser) -> None:
    """The hardware the simulator runs and the deployment every scenario's CR declares."""
    p.add_argument(
        "--true-profile",
        choices=("calibrated", *PERTURBATIONS, *GPU_CLASS_COPIES),
        default="calibrated",
        help="the hardware the simulator runs: the calibrated preset the CR describes; a perturbed copy of it "
        "(roofline ridge x0.6 or x1.4, verify x1.5, drafter x2, restart x1.5) that the operator is not told about; "
        "or an unseen GPU class (the 8B scaled from the H100 by datasheet bandwidth and FLOP/s) that the CR names "
        "and the operator has no profile for, only the scenarios of the presets it has a copy of. The scenario's "
        "load is at the same share of the true profile's own capacity",
    )
    p.add_argument(
        "--replicas",
        type=replicas,
        default=1,
        help="vLLM pods per scenario, each at the load one pod has in the scenario as written (arrivals x N); at 2 "
        "or more a change rolls one wave of pods at a time with drain, and specpilot's change goes to one pod first",
    )
    p.add_argument(
        "--balancer",
        choices=[b.value for b in Balancer],
        default=Balancer.ROUND_ROBIN.value,
        help="how arrivals reach the pods: round-robin (a Kubernetes Service) or least-outstanding (an inference "
        "gateway's endpoint picker)",
    )
    p.add_argument(
        "--max-surge",
        type=int,
        choices=(0, 1),
        default=0,
        help="spec.rollout.maxSurge: 1 starts each new pod before an old one drains (maxUnavailable then 0)",
    )
    p.add_argument(
        "--objective",
        choices=[o.value for o in AutotuneObjective],
        default=AutotuneObjective.THROUGHPUT.value,
        help="spec.autotune.objective of specpilot's CR in every scenario (the oracles do not read it)",
    )


def _output_arguments(p: argparse.ArgumentParser) -> None:
    """What is printed and stored, and against which stored run."""
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--report", type=Path, default=Path("bench-report"), help="folder for the JSON and PNG plots")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--against",
        type=Path,
        metavar="RUN.json",
        help="a stored run (what -o json printed, or its bench.json): print every row of this run beside the stored "
        "row of the same scenario, seed and policy, with specpilot's ratios to the oracle and to max(off, always-on) "
        "(after the table, or on stderr with -o json)",
    )
    p.add_argument(
        "--specpilot-only",
        action="store_true",
        help="run specpilot's closed loop alone, the same run as its row in a full run (no other row depends on the "
        "policy); with --against, judged by the stored run's oracle and controls",
    )
    p.add_argument(
        "--decisions",
        type=Path,
        metavar="FILE",
        help="write specpilot's closed loop evaluation by evaluation to FILE, one JSON object a line: each "
        "evaluation's action, whether it acted, the gate that held it and its reason, and each event it posted, "
        "with the scenario, seed, replicas and policy (specpilot, specpilot-lenient)",
    )


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """`--trace FILE` and how to replay it (bench/replay.py)."""
    g = p.add_argument_group("trace replay (Azure LLM inference CSV, BurstGPT CSV or Mooncake JSONL)")
    g.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="replay this trace's arrivals and lengths (.gz read "
        "compressed) through every policy, instead of the built-in scenarios unless --scenario names some",
    )
    g.add_argument("--trace-preset", default="llama8b-h100", help="simulator preset (default llama8b-h100)")
    g.add_argument("--trace-method", default="eagle3", help="speculation method of the preset (default eagle3)")
    g.add_argument("--trace-k", type=positive(int), default=3, help="the declared num_speculative_tokens (default 3)")
    load = g.add_mutually_exclusive_group()
    load.add_argument(
        "--trace-load",
        type=positive(float),
        metavar="SHARE",
        help="scale time so the busiest minute is at this share of the preset's no-speculation capacity"
        " at the trace's lengths (0.9: 90%%)",
    )
    load.add_argument(
        "--trace-time-scale",
        type=positive(float),
        default=1.0,
        metavar="FACTOR",
        help="multiply arrival times (0.5: twice the rate; default 1, the trace's own rate)",
    )
    g.add_argument(
        "--trace-hot-share",
        type=share,
        default=0.2,
        metavar="SHARE",
        help="share of requests at temperature 1.0, the rest at 0 or 0.7 (default 0.2)",
    )
    g.add_argument("--trace-acceptance-scale", type=positive(float), default=1.0, metavar="FACTOR",
                   help="multiply the drafter's acceptance (0.5: a drafter half as good; default 1)")  # fmt: skip


def positive(kind: Callable[[str], float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or math.isinf(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0")
        return value

    return parse


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share between 0 and 1")
    return value


def seed_list(text: str) -> list[int]:
    """`3`, `1-5` or `1,3,5` (ranges inside a list too): distinct non-negative seeds, in the order given."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = (int(low), int(high)) if dash else (int(low), int(low))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected a seed, a range or a comma list of them (3, 1-5, 1,3,5)"
            ) from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"{text!r}: {part.strip()!r} is not an ascending range of seeds >= 0")
        seeds += [s for s in range(first, last + 1) if s not in seeds]
    return seeds


def replicas(text: str) -> int:
    """A number of pods, 1 to 16."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of replicas (1 to 16)") from None
    if not 1 <= count <= 16:
        raise argparse.ArgumentTypeError(f"{text!r}: replicas must be between 1 and 16")
    return count


def client_timeout(text: str) -> float:
    """A duration such as 60s or 2m, greater than 0 (seconds)."""
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a client timeout must be greater than 0s")
    return seconds


def _chosen(args: argparse.Namespace) -> list[Scenario]:
    """The scenarios to run: --scenario names (built-in and the standard trace scenarios), the --trace replay, or
    the whole suite."""
    from specpilot.bench.replay import replay_scenario, standard_trace_scenarios

    suite = [*SCENARIOS, *standard_trace_scenarios()]
    try:
        chosen = [scenario_named(n, suite) for n in args.scenario]
    except ValueError as err:
        raise ValueError(f"--scenario: {err}") from None
    if args.trace is not None:
        trace = read_trace(args.trace)
        name = "trace-" + args.trace.name.split(".")[0]
        chosen.append(replay_scenario(trace, name, args.trace_preset, args.trace_method, args.trace_k,
                                      load=args.trace_load, time_scale=args.trace_time_scale,
                                      hot_share=args.trace_hot_share,
                                      acceptance_scale=args.trace_acceptance_scale))  # fmt: skip
    return chosen or suite


def with_true_profile(scenario: Scenario, variant: str) -> Scenario:
    """The scenario (and what its CR ran before) simulated on the perturbed copy of its calibrated preset, its
    arrival rates at the same share of that copy's capacity (on_true_capacity; a replay keeps its recorded arrivals,
    a scenario of absolute rates its rates); a scenario that already runs an uncalibrated profile keeps it. The CR,
    and so the operator, is the calibrated run's."""
    previous = None if scenario.previous is None else with_true_profile(scenario.previous, variant)
    name = f"{scenario.preset}-{variant}"
    if name not in TRUE_PROFILES:
        return replace(scenario, previous=previous)
    qps = scenario.qps if scenario.absolute_rates else on_true_capacity(scenario.qps, scenario.preset, name)
    return replace(scenario, preset=name, previous=previous, qps=qps)


def on_gpu_class(scenario: Scenario, gpu_class: str) -> Scenario | None:
    """The scenario on an unseen GPU class's copy of its preset, sized to that hardware as a deployment on it would
    be: arrivals at the same share of the copy's no-speculation capacity (a replay thinned or compressed in time to
    that rate; absolute rates as written) and the TPOT objective and TTFT deadline loosened by how much slower one
    step is (never tightened). The CR states the class's GPU. None: the class has no copy of its preset (or of the
    one its CR ran before)."""
    copies = GPU_CLASS_COPIES[gpu_class]
    if scenario.preset not in copies:
        return None
    previous = None if scenario.previous is None else on_gpu_class(scenario.previous, gpu_class)
    if scenario.previous is not None and previous is None:
        return None
    base, copy = preset_named(scenario.preset), copies[scenario.preset]
    slower = max(1.0, preset_named(copy).verify_base_ms / base.verify_base_ms)
    sized = replace(scenario, preset=copy, previous=previous, tpot_slo_ms=scenario.tpot_slo_ms * slower,
                    ttft_slo_s=scenario.ttft_slo_s * slower)  # fmt: skip
    if scenario.absolute_rates:
        return sized
    if scenario.replay is None:
        return replace(sized, qps=on_true_capacity(scenario.qps, scenario.preset, copy))
    replay = scenario.replay.at_rate(capacity_ratio(scenario.preset, copy))
    tail_s = scenario.duration_s - scenario.replay.last_arrival_s
    return replace(sized, replay=replay, duration_s=replay.last_arrival_s + tail_s)


def on_true_profile(chosen: list[Scenario], variant: str, named: bool) -> list[Scenario]:
    """`chosen` on `--true-profile variant`. A GPU class runs the scenarios it has a copy of the hardware for; the
    others are left out, with a line on stderr, or, when named with --scenario, refused."""
    if variant in PERTURBATIONS:
        return [with_true_profile(s, variant) for s in chosen]
    kept: list[Scenario] = []
    for scenario in chosen:
        sized = on_gpu_class(scenario, variant)
        if sized is not None:
            kept.append(sized)
            continue
        before = f" after {scenario.previous.preset}" if scenario.previous else ""
        copied = ", ".join(GPU_CLASS_COPIES[variant])
        why = f"{scenario.name} runs {scenario.preset}{before}; --true-profile {variant} has a copy of {copied} only"
        if named:
            raise ValueError(f"--scenario: {why}")
        print(f"left out: {why}", file=sys.stderr)
    return kept


def with_objective(scenario: Scenario, objective: AutotuneObjective) -> Scenario:
    """The scenario with specpilot's CR under another spec.autotune.objective, the scenario before it too."""
    previous = None if scenario.previous is None else with_objective(scenario.previous, objective)
    return replace(scenario, objective=objective, previous=previous)


def with_client_timeout(scenario: Scenario, seconds: float | None) -> Scenario:
    """The scenario (and what its CR ran before) with clients that hang up after `seconds` (None: never)."""
    previous = None if scenario.previous is None else with_client_timeout(scenario.previous, seconds)
    return replace(scenario, client_timeout_s=seconds, previous=previous)


def main(args: argparse.Namespace) -> int:
    if args.calibration:
        from specpilot.bench.calibration import calibration_rows, format_rows

        points = calibration_rows()
        if args.output == "json":
            print(json.dumps(points, indent=2))
        else:
            print(format_rows(points))
        return 0
    try:
        stored = _stored(args.against)
        chosen = _prepared(args)
        _writable(args.decisions)
    except TraceError as err:
        print(f"error: --trace: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows, trace = _specpilot_rows(args, chosen) if args.specpilot_only else _all_rows(args, chosen)
    if args.decisions is not None:
        with args.decisions.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(entry) + "\n" for entry in trace)
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    if stored is not None:
        out = sys.stderr if args.output == "json" else sys.stdout
        print(f"\n== against {args.against}", file=out)
        print(compare.table(compare.compare(rows, stored)), file=out)
    return 0


def _stored(path: Path | None) -> dict[compare.Key, dict[str, Any]] | None:
    """The --against run's rows, read before any simulation so a bad file fails at once."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--against {path}: cannot read it ({err})") from err
    return compare.parse_stored_rows(text, f"--against {path}")


Rows = list[dict[str, Any]]
Trace = list[dict[str, Any]]  # --decisions: one entry an evaluation or event


def _writable(path: Path | None) -> None:
    """--decisions FILE can be written (created empty now), checked before any simulation runs."""
    if path is None:
        return
    try:
        path.write_text("", encoding="utf-8")
    except OSError as err:
        raise ValueError(f"--decisions {path}: cannot write it ({err})") from err


def _traced(runs: list[PolicyRun], scenario: Scenario, seed: int, replicas: int) -> Trace:
    """The closed loops' traces (PolicyRun.trace) of one scenario and seed, each entry saying whose it is."""
    where = {"scenario": scenario.name, "seed": seed, "replicas": replicas}
    return [{**where, "policy": run.policy, **entry} for run in runs for entry in run.trace]


def _prepared(args: argparse.Namespace) -> list[Scenario]:
    """The chosen scenarios with every setting of the command line applied."""
    chosen = _chosen(args)
    if args.quick:
        chosen = [s.scaled(0.1) for s in chosen]
    if args.true_profile != "calibrated":
        chosen = on_true_profile(chosen, args.true_profile, bool(args.scenario))
    if args.objective != AutotuneObjective.THROUGHPUT.value:
        chosen = [with_objective(s, AutotuneObjective(args.objective)) for s in chosen]
    return [with_client_timeout(s, args.client_timeout) for s in chosen]


def _specpilot_rows(args: argparse.Namespace, chosen: list[Scenario]) -> tuple[Rows, Trace]:
    """specpilot's row alone on every scenario and seed, the scenarios in parallel (--jobs); printed as rows. With
    the closed loops' traces."""
    from specpilot.bench.runner import rollout_layout, rows_of, specpilot_alone

    balancer = Balancer(args.balancer)
    jobs = [(s, seed, rollout_layout(s, args.replicas, balancer, args.max_surge)) for seed in args.seed for s in chosen]
    runs = specpilot_alone(jobs, args.jobs)
    rows: Rows = []
    trace: Trace = []
    for (s, seed, lay), run in zip(jobs, runs, strict=True):
        rows += rows_of([run], s, seed)
        trace += _traced([run], s, seed, lay.replicas)
    if args.output == "table":
        print(report.table(rows))
        for run in runs:
            for line in run.notes:
                print(f"   {run.scenario}: specpilot actuation: {line[:200]}")
    return rows, trace


def _all_rows(args: argparse.Namespace, chosen: list[Scenario]) -> tuple[Rows, Trace]:
    """Every policy, oracle and control on every scenario and seed, with the verdicts; bench.json and plots under
    --report. With the closed loops' traces."""
    from specpilot.bench.runner import rollout_layout, rows_of, run_scenario

    rows: Rows = []
    trace: Trace = []
    metas: list[dict[str, Any]] = []
    several = len(args.seed) > 1
    for seed in args.seed:
        for scenario in chosen:
            layout = rollout_layout(scenario, args.replicas, Balancer(args.balancer), args.max_surge)
            runs, meta = run_scenario(
                scenario,
                seed,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
                workers=args.jobs,
                layout=layout,
            )
            scenario_rows = rows_of(runs, scenario, seed)
            trace += _traced(runs, scenario, seed, layout.replicas)
            meta["verdicts"] = report.verdicts(scenario_rows, meta)
            rows += scenario_rows
            metas.append(meta)
            if not args.no_plots:
                meta["plot"] = str(report.plot(runs, meta, args.report / f"seed-{seed}" if several else args.report))
            if args.output == "table":
                _print_scenario(scenario, seed if several else None, layout, scenario_rows, meta)
    summary = report.across_seeds(rows, metas) if several else []
    if summary and args.output == "table":
        print(f"\n== across seeds {','.join(str(s) for s in args.seed)}: each ratio paired within one seed "
              "(same arrivals and acceptance draws for every policy)")  # fmt: skip
        print(report.seeds_table(summary))
    args.report.mkdir(parents=True, exist_ok=True)
    report.write_json(rows, metas, args.report / "bench.json", summary)
    return rows, trace


def _print_scenario(
    scenario: Scenario, seed: int | None, layout: Layout, rows: list[dict[str, Any]], meta: dict[str, Any]
) -> None:
    print(f"\n== {scenario.name}{f' (seed {seed})' if seed is not None else ''}: {scenario.description}")
    if not layout.outage:
        print(f"   {layout.replicas} replicas behind {layout.balancer.value}, arrivals x{layout.replicas};"
              f" rollouts: maxSurge {layout.max_surge}, maxUnavailable {layout.max_unavailable},"
              f" drain {layout.drain_s:g} s")  # fmt: skip
    if scenario.objective is not AutotuneObjective.THROUGHPUT:
        print(f"   specpilot's CR: spec.autotune.objective {scenario.objective.value}")
    patience = scenario.client_timeout_s
    print(f"   clients hang up after {patience:g} s without a first token" if patience is not None
          else "   clients wait forever for a first token (--no-client-timeout)")  # fmt: skip
    print(report.table(rows))
    for line in meta["verdicts"]:
        print(f"   {line}")
    for line in meta["actuation_reasons"]:
        print(f"   specpilot actuation: {line[:200]}")
    for line in meta["lenient_actuation_reasons"]:
        print(f"   specpilot-lenient actuation: {line[:200]}")
    sys.stdout.flush()
