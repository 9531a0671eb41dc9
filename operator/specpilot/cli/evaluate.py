"""`specpilot evaluate FILE --prometheus URL`: the dry run of one autotune evaluation, without a cluster.

It answers "what would the autotuner do now?" with the operator's own measurement and decision code
(autotune.evaluate). The exit status tells a decision from a failure to measure: 0 when it decided (Keep included),
1 for input it cannot use (file, spec, flags), 2 for a command-line usage error (argparse), and 3 when Prometheus
could not answer: unreachable, not a Prometheus API, or every evidence gate an Error, so scripts never read "Keep"
into an evaluation that saw nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.api.durations import parse_duration
from specpilot.api.loading import LoadError, load_documents, printable
from specpilot.api.v1alpha1 import (
    InvalidSpec,
    SpeculativeDeploymentSpec,
    SpeculativeDeploymentStatus,
    parse_resource,
)
from specpilot.autotune.evaluate import evaluate_once
from specpilot.autotune.policy.decision import desired_intent, running_intent
from specpilot.autotune.policy.state import PolicyState
from specpilot.autotune.signals.measurements import (
    MeasurementClass,
)
from specpilot.autotune.signals.promql import (
    EVIDENCE_GATES,
    Scope,
)
from specpilot.vllm.intent import SpeculationIntent

EXIT_DECIDED = 0
EXIT_INVALID_INPUT = 1
EXIT_PROMETHEUS_FAILED = 3


def add_evaluate_command(sub: Any) -> None:
    """Register `specpilot evaluate` on the CLI's subparsers."""
    p = sub.add_parser(
        "evaluate",
        help="measure a SpeculativeDeployment in Prometheus once and print what the autotuner would do now",
        description="One dry-run evaluation: every measurement with its class and resolved query, and the decision "
        "this evaluation alone supports (stabilization and budget aside). Needs no cluster.",
    )
    p.add_argument(
        "file",
        help='SpeculativeDeployment YAML, or "-" for stdin (status, when present, supplies config hash and history)',
    )
    p.add_argument("--prometheus", help="Prometheus base URL (default: spec.autotune.prometheus.url)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("-n", "--namespace", help="namespace of the deployment (default: metadata.namespace or default)")
    p.add_argument("--config-hash", help="config hash to scope to (default: status.effective.configHash, else all)")
    p.add_argument("--bearer-token-file", type=Path, help="file holding a bearer token")
    p.add_argument("--username", help="basic-auth user")
    p.add_argument("--password-file", type=Path, help="file holding the basic-auth password")
    p.add_argument("--ca-file", type=Path, help="PEM CA bundle for https")
    p.add_argument("--insecure-skip-verify", action="store_true", help="skip TLS verification (testing only)")
    p.add_argument(
        "--allow-plain-http", action="store_true", help="send the credentials even though the URL is plain http://"
    )
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE", help="extra header (repeatable)")
    p.add_argument("--timeout", help="query timeout, e.g. 10s (default: spec.autotune.prometheus.timeout or 10s)")
    for label, default in (
        ("namespace", "namespace"),
        ("deployment", "specpilot_dev_deployment"),
        ("config-hash", "specpilot_dev_config_hash"),
    ):
        p.add_argument(
            f"--{label}-label", default=default, help=f"metric label holding the {label} (default {default})"
        )
    p.set_defaults(func=_cmd_evaluate)


@dataclass(frozen=True)
class _Loaded:
    spec: SpeculativeDeploymentSpec
    metadata: dict[str, Any]
    status: SpeculativeDeploymentStatus | None
    notes: tuple[str, ...]


def _load(source: str) -> _Loaded:
    """The first SpeculativeDeployment of `source`; a malformed status is reported in `notes` and ignored."""
    documents = [d for d in load_documents(source) if d.kind == "SpeculativeDeployment"]
    if not documents:
        raise InvalidSpec(["no SpeculativeDeployment documents found (kind: SpeculativeDeployment)"])
    body = documents[0].body
    resource = parse_resource({k: v for k, v in body.items() if k != "status"})
    notes: list[str] = []
    status: SpeculativeDeploymentStatus | None = None
    raw_status = body.get("status")
    if raw_status is not None:
        try:
            status = SpeculativeDeploymentStatus.model_validate(raw_status)
        except ValidationError as err:
            notes.append(f"status is malformed ({err.error_count()} problems, first at {_first_loc(err)}); ignored")
    return _Loaded(resource.spec, resource.metadata, status, tuple(notes))


def _first_loc(err: ValidationError) -> str:
    loc = err.errors(include_url=False)[0]["loc"]
    return "status." + ".".join(str(part) for part in loc) if loc else "status"


def _policy_state(status: SpeculativeDeploymentStatus | None, notes: list[str]) -> PolicyState:
    """status.autotune as the policy reads it; a malformed one is reported and replaced by a fresh state."""
    state, problem = PolicyState.from_status(status.autotune if status else None)
    if problem:
        notes.append(problem)
    return state


def _read_secret_file(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{what} {path}: cannot read it ({type(err).__name__})") from None


def _timeout_seconds(flag: str | None, spec_timeout: str) -> float:
    """--timeout if given (named in the error: the spec's own timeout was checked when the spec was parsed)."""
    if flag is None:
        return parse_duration(spec_timeout)
    try:
        return parse_duration(flag)
    except ValueError as err:
        raise ValueError(f"--timeout: {err}") from None


@dataclass(frozen=True)
class StoredContext:
    """What the dry run takes from a stored status besides the policy state (evaluate_once's keyword arguments)."""

    current: SpeculationIntent
    canary_scope: Scope | None
    framework: Mapping[str, Any] | None
    conditions: Sequence[Mapping[str, Any]]


def from_status(
    stored: Mapping[str, Any], spec: SpeculativeDeploymentSpec, scope: Scope, state: PolicyState
) -> StoredContext:
    """The stored status (as the API server returns it) read as the operator reads it in autotune.conclude."""
    # What the pods run (the lossless record in status.effective) beats what autotune last chose.
    current = (running_intent(stored, spec) if stored else None) or desired_intent(spec, state).intent
    # The canary replica (other mode, same Service), measured as the operator measures it (autotune.evaluation_scopes).
    canary_hash = ((stored.get("effective") or {}).get("canary") or {}).get("configHash")
    canary_scope = scope.with_config_hash(str(canary_hash)) if canary_hash and scope.config_hash else None
    autotune = stored.get("autotune")
    framework = autotune.get("framework") if isinstance(autotune, Mapping) else None
    return StoredContext(current, canary_scope, framework, list(stored.get("conditions") or ()))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    try:
        loaded, headers = _read_input(args)
        url = _prometheus_url(args, loaded.spec)
        scope, connection = _target(args, loaded, url, headers)
    except _InputError as err:
        for line in err.lines:
            print(printable(f"error: {line}"), file=sys.stderr)
        return EXIT_INVALID_INPUT
    if connection.insecure_skip_verify:
        print("warning: TLS verification is off for Prometheus", file=sys.stderr)
    spec, status = loaded.spec, loaded.status
    notes = list(loaded.notes)
    state = _policy_state(status, notes)
    for note in notes:
        print(printable(f"warning: {args.file}: {note}"), file=sys.stderr)
    stored = from_status(status.model_dump(by_alias=True, exclude_none=True) if status else {}, spec, scope, state)
    with PrometheusClient(connection) as client:
        result = evaluate_once(
            spec,
            scope,
            client,
            datetime.now(UTC),
            current=stored.current,
            state=state,
            canary_scope=stored.canary_scope,
            framework=stored.framework,
            conditions=stored.conditions,
        )
    if scope.config_hash is None:
        result["scope"]["note"] = "no config hash known: measured every configuration of this deployment"
    return _print_result(args, result)


class _InputError(Exception):
    """The command's input cannot be used: each line says what and where (printed after "error: ")."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = list(lines)


def _read_input(args: argparse.Namespace) -> tuple[_Loaded, dict[str, str]]:
    """The file's spec and status, and the --header pairs."""
    try:
        return _load(args.file), dict(_header(h) for h in args.header)
    except LoadError as err:
        raise _InputError([str(err)]) from err
    except (InvalidSpec, ValueError) as err:
        problems = err.problems if isinstance(err, InvalidSpec) else [str(err)]
        raise _InputError([f"{args.file}: {line}" for line in problems]) from err


def _prometheus_url(args: argparse.Namespace, spec: SpeculativeDeploymentSpec) -> str:
    """--prometheus, else spec.autotune.prometheus.url."""
    prom = spec.autotune.prometheus
    url = args.prometheus or (prom.url if prom else None)
    if url:
        return url
    hint = (
        f" (spec.autotune.prometheus.connection {prom.connection!r} is defined by the operator's administrator)"
        if prom and prom.connection
        else ""
    )
    raise _InputError([f"no Prometheus URL: pass --prometheus or set spec.autotune.prometheus.url{hint}"])


def _target(
    args: argparse.Namespace, loaded: _Loaded, url: str, headers: Mapping[str, str]
) -> tuple[Scope, PrometheusConnection]:
    """Which series to read (the deployment, its config hash: the flag's, else the status's) and how to reach
    Prometheus (the flags over the spec's connection settings)."""
    prom = loaded.spec.autotune.prometheus
    status = loaded.status
    config_hash = args.config_hash or (status.effective.config_hash if status and status.effective else None)
    spec_headers = prom.headers if prom and not args.prometheus else {}
    try:
        scope = Scope(
            namespace=args.namespace or str(loaded.metadata.get("namespace") or "default"),
            deployment=str(loaded.metadata.get("name") or ""),
            config_hash=config_hash,
            namespace_label=args.namespace_label,
            deployment_label=args.deployment_label,
            config_hash_label=args.config_hash_label,
        )
        connection = PrometheusConnection(
            url=url,
            timeout_s=_timeout_seconds(args.timeout, prom.timeout if prom else "10s"),
            bearer_token=_read_secret_file(args.bearer_token_file, "--bearer-token-file"),
            username=args.username,
            password=_read_secret_file(args.password_file, "--password-file"),
            ca_pem=_read_secret_file(args.ca_file, "--ca-file"),
            insecure_skip_verify=args.insecure_skip_verify or bool(prom and prom.insecure_skip_verify),
            headers={**spec_headers, **headers},
            allow_plain_http=args.allow_plain_http,
        )
    except ValueError as err:
        raise _InputError([str(err)]) from err
    return scope, connection


def _print_result(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print the evaluation as asked (-o), and its exit code: EXIT_PROMETHEUS_FAILED where nothing was measured."""
    failure = prometheus_failure(result["measurements"])
    if failure is not None:
        result["failure"] = failure
    if args.output == "json":
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n".join(printable(line) for line in render_text(result).split("\n")))
    if failure is not None:
        print(f"error: {failure}", file=sys.stderr)
        return EXIT_PROMETHEUS_FAILED
    return EXIT_DECIDED


def prometheus_failure(measurements: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why this evaluation saw nothing (every evidence gate an Error), or None when something was measured."""
    gates = {str(gate) for gate in EVIDENCE_GATES.values()}
    details = [m for name, m in measurements.items() if name in gates]
    if not details or any(m["class"] != MeasurementClass.ERROR for m in details):
        return None
    detail = str(details[0].get("detail", ""))
    if detail.startswith(("transport:", "timeout:")):
        return f"Prometheus is unreachable ({detail})"
    if "too_large" in detail:
        return f"Prometheus' answers are too large to read ({detail})"
    if "bad_response" in detail or "not a Prometheus API answer" in detail:
        return f"the URL does not answer like a Prometheus API ({detail})"
    return f"every evidence gate is an Error ({detail})"


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--header {text!r}: expected NAME=VALUE")
    return name.strip(), value


def render_text(result: Mapping[str, Any]) -> str:
    """A terminal view: one line per measurement, the decision and its reason, then one line per framework rule."""
    scope = result["scope"]
    canary = result.get("canaryMeasurements")
    lines = [
        f"scope    {scope['selector']}" + (f"  ({scope['note']})" if scope.get("note") else ""),
        *([f"canary   {len(canary)} measurements of the canary replica (-o json shows them)"] if canary else []),
        f"window   {result['window']['value']}"
        + (f"  ({result['window']['note']})" if result["window"]["note"] else ""),
        "",
    ]
    width = max((len(name) for name in result["measurements"]), default=10)
    for name, m in result["measurements"].items():
        value = "-" if m["value"] is None else f"{m['value']:.6g}"
        if m.get("byLabel"):
            value = " ".join(f"{k}:{v:.3g}" for k, v in m["byLabel"].items())
        samples = "" if m["samples"] is None else f"  n={m['samples']:.0f}"
        detail = f"  {m['detail']}" if m["class"] != "Valid" else ""
        lines.append(f"{name:<{width}}  {m['class']:<7} {value}{samples}{detail}")
    for warning in result.get("warnings", []):
        lines.append(f"prometheus warning: {warning}")
    decision = result["decision"]
    lines += ["", f"decision {decision['action']}: {decision['reason']}"]
    if decision["action"] != "Keep":
        lines.append(f"to       {json.dumps(decision['to'])}")
    findings = result.get("framework") or []
    if findings:
        lines += ["", "framework (recommendations, never applied; -o json shows the evidence)"]
        width = max(len(f["condition"]) for f in findings)
        lines += [f"{f['condition']:<{width}}  {f['status']:<7} {f['reason']}: {f['message']}" for f in findings]
        lines.append("")
    lines.append("queries  -o json shows every resolved query")
    return "\n".join(lines) + "\n"
