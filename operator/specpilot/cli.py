"""The `specpilot` command line: generate, validate, plan and render SpeculativeDeployments, run the operator."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from specpilot import manifests
from specpilot.api import crd, v1alpha1
from specpilot.catalog import UnknownArchitecture
from specpilot.evaluate import add_evaluate_command
from specpilot.plan import MemoryPlan, format_table, plan_memory
from specpilot.vllm.dialects import UnsupportedCombination, render_command


def _documents(path: str) -> list[dict[str, object]]:
    """SpeculativeDeployment documents of a YAML file ("-" reads stdin)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == v1alpha1.KIND]


def _name(doc: dict[str, object]) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name", "<unnamed>")) if isinstance(meta, dict) else "<unnamed>"


def _with_version(spec: v1alpha1.SpeculativeDeploymentSpec, version: str | None) -> v1alpha1.SpeculativeDeploymentSpec:
    if version is None:
        return spec
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"version": version})})


def validate_document(doc: dict[str, object]) -> tuple[list[str], list[str]]:
    """Return (problems, warnings) for one document: schema, cross-field rules, memory plan, vLLM dialect."""
    try:
        resource = v1alpha1.parse_resource(doc)
    except v1alpha1.InvalidSpec as err:
        return err.problems, []
    problems: list[str] = []
    warnings: list[str] = []
    name = _name(doc)
    if not crd.name_is_valid(name):
        problems.append(f"metadata.name: {crd.NAME_RULE['message']}")
    spec = resource.spec
    if not v1alpha1.window_covers_scrapes(spec.autotune):
        problems.append(
            f"spec.autotune.window: {spec.autotune.window} is shorter than 4 x spec.autotune.scrapeInterval "
            f"({spec.autotune.scrape_interval}); rate() over fewer than 4 scrapes is noise"
        )
    try:
        plan = plan_memory(spec)
    except UnknownArchitecture as err:
        warnings.append(f"{err}: the memory plan cannot be checked")
    else:
        for finding in plan.findings:
            (problems if finding in plan.errors else warnings).append(finding.line())
    try:
        rendered = render_command(spec)
        warnings.extend(f"spec.speculation: {note}" for note in rendered.notes)
    except UnsupportedCombination as err:
        problems.append(f"{err.field}: {err}")
    return problems, warnings


def _cmd_validate(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        docs = _documents(path)
        if not docs:
            print(f"{path}: no {v1alpha1.KIND} documents found")
            failed = True
        for doc in docs:
            problems, warnings = validate_document(doc)
            for line in warnings:
                print(f"{path}: {_name(doc)}: warning: {line}")
            for line in problems:
                print(f"{path}: {_name(doc)}: {line}")
            failed = failed or bool(problems)
            if not problems:
                print(f"{path}: {_name(doc)}: valid")
    return 1 if failed else 0


def _cmd_render(args: argparse.Namespace) -> int:
    out: list[dict[str, object]] = []
    for doc in _documents(args.file):
        try:
            resource = v1alpha1.parse_resource(doc)
            spec = _with_version(resource.spec, args.vllm_version)
            rendered = render_command(spec)
        except v1alpha1.InvalidSpec as err:
            print("\n".join(f"{args.file}: {_name(doc)}: {p}" for p in err.problems), file=sys.stderr)
            return 1
        except UnsupportedCombination as err:
            print(f"{args.file}: {_name(doc)}: {err.field}: {err}", file=sys.stderr)
            return 1
        meta = resource.metadata
        owner = manifests.Owner(
            name=str(meta.get("name", "example")),
            namespace=str(meta.get("namespace", "default")),
            uid=str(meta.get("uid", "00000000-0000-0000-0000-000000000000")),
        )
        speculating = spec.speculation.enabled
        out.extend(
            manifests.build_children(
                spec, owner, command=rendered.argv, config_hash=rendered.config_hash, speculation=speculating
            )
        )
        for note in rendered.notes:
            print(f"# {_name(doc)}: {note}", file=sys.stderr)
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=120))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    plans: list[tuple[str, MemoryPlan]] = []
    for doc in _documents(args.file):
        try:
            resource = v1alpha1.parse_resource(doc)
        except v1alpha1.InvalidSpec as err:
            print("\n".join(f"{args.file}: {_name(doc)}: {p}" for p in err.problems), file=sys.stderr)
            return 1
        try:
            plans.append((_name(doc), plan_memory(resource.spec)))
        except UnknownArchitecture as err:
            print(f"{args.file}: {_name(doc)}: {err}", file=sys.stderr)
            return 1
    if args.output == "json":
        print(json.dumps({name: plan.to_json() for name, plan in plans}, indent=2))
    else:
        for name, plan in plans:
            print(f"== {name}")
            print(format_table(plan))
    return 0 if all(plan.fits for _, plan in plans) else 1


def _cmd_crd(args: argparse.Namespace) -> int:
    text = crd.render_api_docs() if args.docs else crd.render_crd_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from specpilot.runner import run_operator

    run_operator(
        namespaces=args.namespace,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        bind_address=args.bind_address,
        log_level=args.log_level,
        tick_seconds=args.tick_seconds,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specpilot", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p_crd = sub.add_parser("crd", help="print the generated CustomResourceDefinition (or --docs: the API reference)")
    p_crd.add_argument("--docs", action="store_true", help="print docs/api.md instead of the CRD")
    p_crd.add_argument("-o", "--output", help="write to this file instead of stdout")
    p_crd.set_defaults(func=_cmd_crd)

    p_validate = sub.add_parser(
        "validate", help="validate SpeculativeDeployment files (schema, rules, memory, dialect)"
    )
    p_validate.add_argument("files", nargs="+", metavar="FILE")
    p_validate.set_defaults(func=_cmd_validate)

    p_render = sub.add_parser("render", help="print the child manifests (Deployment, Service, ...) as YAML")
    p_render.add_argument("file", metavar="FILE")
    p_render.add_argument("--vllm-version", help="render for this vLLM version instead of spec.engine.version")
    p_render.set_defaults(func=_cmd_render)

    p_plan = sub.add_parser("plan", help="print the per-replica memory budget and its verdicts")
    p_plan.add_argument("file", metavar="FILE")
    p_plan.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p_plan.set_defaults(func=_cmd_plan)

    p_run = sub.add_parser("run", help="run the operator (KUBECONFIG or in-cluster credentials)")
    p_run.add_argument(
        "--namespace", action="append", default=[], help="watch only this namespace (repeatable; default: all)"
    )
    p_run.add_argument("--metrics-port", type=int, default=9090, help="port of the operator's /metrics")
    p_run.add_argument("--health-port", type=int, default=8080, help="port of the liveness endpoint /healthz")
    p_run.add_argument("--bind-address", default="0.0.0.0", help="address for the metrics and health endpoints")
    p_run.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    p_run.add_argument(
        "--tick-seconds", type=float, default=10.0, help="how often each object is re-checked for drift and autotune"
    )
    p_run.set_defaults(func=_cmd_run)
    add_evaluate_command(sub)
    _add_simulator_commands(sub)
    return parser


# ------------------------------------------------------------------------------ simulator and benchmark (issue 9)
def _add_simulator_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`simulate` (a vLLM stand-in serving the operator's command line) and `bench` (the decision benchmark)."""
    from specpilot.bench import main as bench_main
    from specpilot.sim import main as sim_main

    p_sim = sub.add_parser("simulate", help="serve a simulated vLLM: specpilot simulate [opts] serve MODEL [flags]")
    sim_main.add_arguments(p_sim)
    p_sim.set_defaults(func=sim_main.main)
    p_bench = sub.add_parser("bench", help="does the autotuner beat a static config? (simulated scenarios)")
    bench_main.add_arguments(p_bench)
    p_bench.set_defaults(func=bench_main.main)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
