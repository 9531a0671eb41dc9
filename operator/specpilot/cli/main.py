"""The `specpilot` command line: generate, validate, plan and render SpeculativeDeployments, run the operator."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import yaml

from specpilot.api import crd, v1alpha1
from specpilot.api.loading import Document, LoadError, duplicate_problems, load_documents, printable
from specpilot.cli.evaluate import add_evaluate_command
from specpilot.planning.candidates import candidate_findings
from specpilot.planning.catalog import UnknownArchitecture
from specpilot.planning.plan import Finding, MemoryPlan, Severity, format_table, plan_memory
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import UnsupportedCombination, drain_note, render_command
from specpilot.vllm.versions import image_version_problem

# The plan finding the operator lets an annotation override (reconcile.MEMORY_FINDING): render follows the same rule.
MEMORY_DOES_NOT_FIT = "DoesNotFit"


def _say(line: str, stream: TextIO | None = None) -> None:
    """Print one line that may carry user-supplied names or paths, its control characters escaped."""
    print(printable(line), file=stream or sys.stdout)


def _say_each(lines: Sequence[str], stream: TextIO | None = None) -> None:
    for line in lines:
        _say(line, stream)


def _inputs(sources: Sequence[str]) -> tuple[list[Document], bool]:
    """SpeculativeDeployment documents of every source, and whether any source failed (each failure printed once).

    One bad file never hides the others: each is read, and reported, on its own.
    """
    found: list[Document] = []
    failed = False
    for source in sources:
        try:
            documents = load_documents(source)
        except LoadError as err:
            _say(str(err), sys.stderr)
            failed = True
            continue
        mine = [d for d in documents if d.kind == v1alpha1.KIND]
        if not mine:
            _say(f"{source}: no {v1alpha1.KIND} documents found (kind: {v1alpha1.KIND})", sys.stderr)
            failed = True
        found.extend(mine)
    return found, failed


def _with_version(spec: v1alpha1.SpeculativeDeploymentSpec, version: str | None) -> v1alpha1.SpeculativeDeploymentSpec:
    """The spec with --vllm-version in place of spec.engine.version, checked by the same rules as the field."""
    if version is None:
        return spec
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["engine"]["version"] = version
    try:
        return v1alpha1.parse_spec(raw)
    except v1alpha1.InvalidSpec as err:
        problems = [p.replace("spec.engine.version", "--vllm-version") for p in err.problems]
        raise v1alpha1.InvalidSpec(problems) from None


def _allows_overcommit(resource: v1alpha1.SpeculativeDeployment) -> bool:
    annotations = resource.metadata.get("annotations")
    value = annotations.get(v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT) if isinstance(annotations, dict) else None
    return isinstance(value, str) and value.lower() == "true"


def validate_document(
    doc: dict[str, object], *, vllm_version: str | None = None, allow_overcommit: bool = False
) -> tuple[list[str], list[str]]:
    """Return (problems, warnings) for one document: schema, cross-field rules, memory plan, vLLM dialect.

    `allow_overcommit` downgrades "does not fit" to a warning, as the operator does for the annotation.
    """
    try:
        resource = v1alpha1.parse_resource(doc)
        spec = _with_version(resource.spec, vllm_version)
    except v1alpha1.InvalidSpec as err:
        return err.problems, []
    problems: list[str] = []
    warnings: list[str] = []
    name = resource.metadata.get("name")
    if not isinstance(name, str) or not crd.name_is_valid(name):
        problems.append(f"metadata.name: {crd.NAME_RULE['message']} (got {name!r})")
    problems.extend(v1alpha1.metadata_problems(resource.metadata))
    problems.extend(v1alpha1.duration_problems(spec))
    image_problem = image_version_problem(spec.engine.image, spec.engine.version) if vllm_version is None else None
    if image_problem is not None:  # with --vllm-version the caller renders for another release on purpose
        problems.append(f"spec.engine.image: {image_problem}")
    overcommit = allow_overcommit or _allows_overcommit(resource)
    try:
        plan = plan_memory(spec)
    except UnknownArchitecture as err:
        warnings.append(f"{err}: the memory plan cannot be checked")
    else:
        _sort_findings(plan.findings, overcommit, problems, warnings)
    try:
        rendered = render_command(spec)
        warnings.extend(f"spec.speculation: {note}" for note in rendered.notes)
        lossy = drain_note(rendered)
        if lossy is not None:
            warnings.append(f"spec.engine.version: {lossy}")
    except UnsupportedCombination as err:
        problems.append(str(err))
    _sort_findings(candidate_findings(spec), overcommit, problems, warnings)
    return problems, warnings


def _sort_findings(findings: Sequence[Finding], overcommit: bool, problems: list[str], warnings: list[str]) -> None:
    """Errors into `problems`, the rest into `warnings`; with `overcommit`, "does not fit" is only a warning."""
    for finding in findings:
        is_error = finding.severity is Severity.ERROR and not (overcommit and finding.code == MEMORY_DOES_NOT_FIT)
        (problems if is_error else warnings).append(finding.line())


def _cmd_validate(args: argparse.Namespace) -> int:
    documents, failed = _inputs(args.files)
    duplicates = duplicate_problems(documents)
    for position, doc in enumerate(documents):
        problems, warnings = validate_document(doc.body)
        if position in duplicates:
            problems = [duplicates[position], *problems]
        for line in warnings:
            _say(f"{doc.source}: {doc.name}: warning: {line}")
        for line in problems:
            _say(f"{doc.source}: {doc.name}: {line}")
        failed = failed or bool(problems)
        if not problems:
            _say(f"{doc.source}: {doc.name}: valid")
    return 1 if failed else 0


def _cmd_render(args: argparse.Namespace) -> int:
    documents, failed = _inputs([args.file])
    if failed:
        return 1
    out: list[dict[str, object]] = []
    for doc in documents:
        problems, _ = validate_document(
            doc.body, vllm_version=args.vllm_version, allow_overcommit=args.allow_memory_overcommit
        )
        if problems:
            _say_each([f"{doc.source}: {doc.name}: {p}" for p in problems], sys.stderr)
            return 1
        resource = v1alpha1.parse_resource(doc.body)
        spec = _with_version(resource.spec, args.vllm_version)
        rendered = render_command(spec)
        meta = resource.metadata
        namespace = meta.get("namespace")
        uid = meta.get("uid")
        owner = manifests.Owner(
            name=doc.name,
            namespace=namespace if isinstance(namespace, str) and namespace else "default",
            uid=uid if isinstance(uid, str) and uid else "00000000-0000-0000-0000-000000000000",
        )
        out.extend(
            manifests.build_children(
                spec,
                owner,
                command=rendered.argv,
                config_hash=rendered.config_hash,
                speculation=spec.speculation.enabled,
            )
        )
        for note in (*rendered.notes, drain_note(rendered)):
            if note is not None:
                _say(f"# {doc.name}: {note}", sys.stderr)
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=120))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    documents, failed = _inputs([args.file])
    if failed:
        return 1
    plans: list[tuple[str, MemoryPlan, dict[str, MemoryPlan]]] = []
    for doc in documents:
        try:
            resource = v1alpha1.parse_resource(doc.body)
        except v1alpha1.InvalidSpec as err:
            _say_each([f"{doc.source}: {doc.name}: {p}" for p in err.problems], sys.stderr)
            return 1
        try:
            plans.append((doc.name, plan_memory(resource.spec), _candidate_plans(resource.spec)))
        except UnknownArchitecture as err:
            _say(f"{doc.source}: {doc.name}: {err}", sys.stderr)
            return 1
    if args.output == "json":
        print(json.dumps({name: _plan_json(plan, candidates) for name, plan, candidates in plans}, indent=2))
    else:
        for name, plan, candidates in plans:
            _say(f"== {name}")
            print(format_table(plan))
            for candidate, candidate_plan in candidates.items():
                _say(f"== {name}: candidate {candidate}")
                print(format_table(candidate_plan))
    return 0 if all(p.fits for _, plan, candidates in plans for p in (plan, *candidates.values())) else 1


def _candidate_plans(spec: v1alpha1.SpeculativeDeploymentSpec) -> dict[str, MemoryPlan]:
    """Each candidate's plan by name: the replica as it runs with that candidate in place of the declared drafter.

    Raises UnknownArchitecture naming spec.speculation.candidates[i] for a draft neither cataloged nor given inline.
    """
    plans: dict[str, MemoryPlan] = {}
    for index, candidate in enumerate(spec.speculation.candidates):
        try:
            plans[candidate.name] = plan_memory(v1alpha1.spec_running(spec, candidate))
        except UnknownArchitecture as err:
            field = err.field.replace("spec.speculation.", f"spec.speculation.candidates[{index}].", 1)
            raise UnknownArchitecture(err.model_id, field) from None
    return plans


def _plan_json(plan: MemoryPlan, candidates: dict[str, MemoryPlan]) -> dict[str, object]:
    """`plan -o json` of one object: the declared plan, with each candidate's plan under "candidates" if any."""
    if not candidates:
        return plan.to_json()
    return {**plan.to_json(), "candidates": {name: p.to_json() for name, p in candidates.items()}}


def _cmd_crd(args: argparse.Namespace) -> int:
    text = crd.render_api_docs() if args.docs else crd.render_crd_yaml()
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as err:
            _say(f"{args.output}: cannot write: {err.strerror or err}", sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from specpilot.adapters import connections
    from specpilot.shell.runner import run_operator

    try:
        connections.configure(args.prometheus_connections)
    except connections.ConnectionsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1

    election = None
    if args.leader_elect:
        from specpilot.adapters.leadership import LeaseSettings
        from specpilot.adapters.lease import default_namespace

        election = LeaseSettings(
            name=args.leader_election_lease,
            namespace=args.leader_election_namespace or default_namespace(),
            identity=args.leader_election_identity or os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", ""),
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
        problems = election.problems()
        if problems:
            print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
            return 1

    run_operator(
        namespaces=args.namespace,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        bind_address=args.bind_address,
        log_level=args.log_level,
        tick_seconds=args.tick_seconds,
        leader_election=election,
    )
    return 0


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "")
    if value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise SystemExit(f"error: {name}={value!r}: expected true or false")


def _add_leader_election_arguments(p_run: argparse.ArgumentParser) -> None:
    """Flags of `specpilot run` for high availability; each also read from the environment variable it names."""
    env = os.environ.get
    group = p_run.add_argument_group(
        "leader election",
        "run several replicas, one acting (a coordination.k8s.io/v1 Lease; see docs/operations.md)",
    )
    group.add_argument(
        "--leader-elect",
        action="store_true",
        default=_env_flag("SPECPILOT_LEADER_ELECT"),
        help="act only while holding the Lease; wait as a candidate otherwise (env SPECPILOT_LEADER_ELECT)",
    )
    group.add_argument(
        "--leader-election-lease",
        default=env("SPECPILOT_LEADER_ELECTION_LEASE", "specpilot-leader"),
        help="name of the Lease (env SPECPILOT_LEADER_ELECTION_LEASE; default: specpilot-leader)",
    )
    group.add_argument(
        "--leader-election-namespace",
        default=env("SPECPILOT_LEADER_ELECTION_NAMESPACE", ""),
        help="namespace of the Lease (env SPECPILOT_LEADER_ELECTION_NAMESPACE; default: POD_NAMESPACE, or the "
        "in-cluster service account's namespace)",
    )
    group.add_argument(
        "--leader-election-identity",
        default=env("SPECPILOT_LEADER_ELECTION_IDENTITY", ""),
        help="this replica's name in the Lease; unique per replica (default: POD_NAME, else HOSTNAME)",
    )
    group.add_argument(
        "--lease-duration",
        type=int,
        default=env("SPECPILOT_LEASE_DURATION", "15"),
        help="seconds a candidate waits, after the Lease last changed, before taking it over (default 15)",
    )
    group.add_argument(
        "--renew-deadline",
        type=float,
        default=env("SPECPILOT_RENEW_DEADLINE", "10"),
        help="seconds a leader keeps acting without a successful renewal before it exits (default 10)",
    )
    group.add_argument(
        "--retry-period",
        type=float,
        default=env("SPECPILOT_RETRY_PERIOD", "2"),
        help="seconds between a candidate's tries and a leader's renewals (default 2)",
    )


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
    p_validate.add_argument("files", nargs="+", metavar="FILE", help='YAML files, or "-" for stdin')
    p_validate.set_defaults(func=_cmd_validate)

    p_render = sub.add_parser("render", help="print the child manifests (Deployment, Service, ...) as YAML")
    p_render.add_argument("file", metavar="FILE", help='YAML file, or "-" for stdin')
    p_render.add_argument("--vllm-version", help="render for this vLLM version instead of spec.engine.version")
    p_render.add_argument(
        "--allow-memory-overcommit",
        action="store_true",
        help="render although the memory plan does not fit (like the specpilot.dev/allow-memory-overcommit annotation)",
    )
    p_render.set_defaults(func=_cmd_render)

    p_plan = sub.add_parser("plan", help="print the per-replica memory budget and its verdicts")
    p_plan.add_argument("file", metavar="FILE", help='YAML file, or "-" for stdin')
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
    p_run.add_argument(
        "--prometheus-connections",
        metavar="FILE",
        help="JSON file of the Prometheus connections (with credentials) SpeculativeDeployments may name; written "
        "by the chart from its prometheusConnections value",
    )
    _add_leader_election_arguments(p_run)
    p_run.set_defaults(func=_cmd_run)
    add_evaluate_command(sub)
    # --- specpilot report: logic in specpilot/report/, imported lazily (matplotlib is slow to load) ---
    from specpilot.cli.report import open_range_client
    from specpilot.report.command import add_report_command

    add_report_command(sub, open_range_client)
    # --- end specpilot report ---
    _add_simulator_commands(sub)
    return parser


# ------------------------------------------------------------------------------ simulator and benchmark
def _add_simulator_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`simulate` (a vLLM stand-in serving the operator's command line) and `bench` (the decision benchmark)."""
    from specpilot.bench import loadgen
    from specpilot.bench import main as bench_main
    from specpilot.sim import main as sim_main

    p_sim = sub.add_parser("simulate", help="serve a simulated vLLM: specpilot simulate [opts] serve MODEL [flags]")
    sim_main.add_arguments(p_sim)
    p_sim.set_defaults(func=sim_main.main)
    p_bench = sub.add_parser("bench", help="does the autotuner beat a static config? (simulated scenarios)")
    bench_main.add_arguments(p_bench)
    p_bench.set_defaults(func=bench_main.main)
    p_load = sub.add_parser("loadgen", help="replay a request trace against an OpenAI-compatible server (vLLM)")
    loadgen.add_arguments(p_load)
    p_load.set_defaults(func=loadgen.main)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; output that cannot be written (a closed pipe, a full disk) is one line, not a traceback."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # inside the try: a buffered write fails here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`specpilot render x.yaml | head`): nothing is left to tell it. Point stdout at
        # /dev/null so the interpreter's final flush does not fail a second time.
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:
        where = f" ({err.filename})" if err.filename else ""
        _say(f"specpilot {args.command}: error: {err.strerror or err}{where}", sys.stderr)
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
