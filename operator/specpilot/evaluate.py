"""One autotune evaluation against a live Prometheus: measure, classify, decide (orchestration).

`measure` runs every query of `promql.build_queries` and classifies the answers; `evaluate_once` adds the decision
this evaluation alone supports (agreement, stabilization and budget aside). Both back the operator's timer and the
`specpilot evaluate FILE --prometheus URL` dry run, which answers "what would the autotuner do now?" without a
cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import (
    AutotuneSpec,
    InvalidSpec,
    SpeculativeDeployment,
    SpeculativeDeploymentSpec,
    parse_resource,
)
from specpilot.baseline import format_time
from specpilot.measurements import Measurement, RawResult, classify, collect_warnings, unavailable
from specpilot.policy import (
    PolicyInputs,
    PolicyState,
    desired_intent,
    evaluate_alone,
    running_intent,
)
from specpilot.promql import Scope, Signal, Window, build_queries, resolve_window
from specpilot.schedule import FitSettings
from specpilot.vllm.intent import SpeculationIntent, intent_to_dict
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion


class QueryClient(Protocol):
    """Anything that answers an instant query with a RawResult (the Prometheus adapter, or a test double)."""

    def query(self, promql: str, at: datetime | None = None) -> RawResult: ...


def effective_window(autotune: AutotuneSpec) -> Window:
    """spec.autotune.window raised to at least 4 scrape intervals and one evaluation interval."""
    return resolve_window(
        parse_duration(autotune.window), parse_duration(autotune.scrape_interval), parse_duration(autotune.interval)
    )


def min_samples_for(autotune: AutotuneSpec) -> dict[Signal, float]:
    return {
        Signal.DRAFT_TOKENS_IN_WINDOW: autotune.min_samples.draft_tokens,
        Signal.REQUESTS_IN_WINDOW: autotune.min_samples.requests,
    }


def measure(
    spec: SpeculativeDeploymentSpec, scope: Scope, client: QueryClient, now: datetime
) -> dict[str, Measurement]:
    """Run and classify every measurement of one evaluation, gates first, all at the same instant `now`."""
    names = metric_names_for(VllmVersion.parse(spec.engine.version))
    window = effective_window(spec.autotune)
    minimums = min_samples_for(spec.autotune)
    results: dict[str, Measurement] = {}
    unreachable: RawResult | None = None
    for query in build_queries(names, scope, window):
        if query.promql is None:
            results[query.signal] = unavailable(query)
            continue
        if unreachable is None:
            raw = client.query(query.promql, now)
            if raw.transport_error or raw.timed_out:
                # one refused or timed-out connection answers for the rest: a blackholed Prometheus would
                # otherwise cost timeout x queries per evaluation
                unreachable = replace(raw, transport_error=f"{raw.transport_error} (later queries not sent)")
        else:
            raw = unreachable
        gate = query.gate
        results[query.signal] = classify(
            query,
            raw,
            gate=results.get(gate) if gate is not None else None,
            min_samples=minimums[gate] if gate is not None else None,
        )
    return results


def evaluate_once(
    spec: SpeculativeDeploymentSpec,
    scope: Scope,
    client: QueryClient,
    now: datetime,
    *,
    current: SpeculationIntent | None = None,
    state: PolicyState | None = None,
    fit: FitSettings | None = None,
) -> dict[str, Any]:
    """Measure once and decide as this evaluation alone would; JSON-able.

    Keys: `scope`, `window`, `current`, `measurements` (name -> class, value, samples, resolved query, detail),
    `warnings` (from Prometheus), `decision` (`action` one of Keep, DisableSpeculation, EnableSpeculation,
    ChangeBatchThreshold; `reason`; `to`; `evidence`). `current` defaults to what the spec asks for; `state`
    (status.autotune) supplies the baseline record and the history of an existing deployment.
    """
    state = state or PolicyState()
    running = current or desired_intent(spec, state).intent
    measurements = measure(spec, scope, client, now)
    window = effective_window(spec.autotune)
    inputs = PolicyInputs(
        spec=spec, current=running, measurements=measurements, window=window, fit=fit or FitSettings()
    )
    decision = evaluate_alone(inputs, state, now)
    return {
        "scope": scope.to_dict(),
        "window": {"value": window.promql(), "requested": spec.autotune.window, "note": window.note},
        "evaluatedAt": format_time(now.replace(microsecond=0)),
        "current": intent_to_dict(running),
        "measurements": {str(name): m.to_dict() for name, m in measurements.items()},
        "warnings": collect_warnings(measurements),
        "decision": decision.to_dict(),
    }


# ------------------------------------------------------------------------------------------------ CLI


def add_evaluate_command(sub: Any) -> None:
    """Register `specpilot evaluate` on the CLI's subparsers."""
    p = sub.add_parser(
        "evaluate",
        help="measure a SpeculativeDeployment in Prometheus once and print what the autotuner would do now",
        description="One dry-run evaluation: every measurement with its class and resolved query, and the decision "
        "this evaluation alone supports (stabilization and budget aside). Needs no cluster.",
    )
    p.add_argument("file", help="SpeculativeDeployment YAML (status, when present, supplies config hash and history)")
    p.add_argument("--prometheus", help="Prometheus base URL (default: spec.autotune.prometheus.url)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("-n", "--namespace", help="namespace of the deployment (default: metadata.namespace or default)")
    p.add_argument("--config-hash", help="config hash to scope to (default: status.effective.configHash, else all)")
    p.add_argument("--bearer-token-file", type=Path, help="file holding a bearer token")
    p.add_argument("--username", help="basic-auth user")
    p.add_argument("--password-file", type=Path, help="file holding the basic-auth password")
    p.add_argument("--ca-file", type=Path, help="PEM CA bundle for https")
    p.add_argument("--insecure-skip-verify", action="store_true", help="skip TLS verification (testing only)")
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


def _load_resource(path: Path) -> SpeculativeDeployment:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, Mapping)]
    chosen = next((d for d in docs if d.get("kind") == "SpeculativeDeployment"), None)
    if chosen is None:
        raise InvalidSpec([f"{path}: no SpeculativeDeployment document found"])
    return parse_resource(dict(chosen))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    try:
        resource = _load_resource(Path(args.file))
        headers = dict(_header(h) for h in args.header)
    except (OSError, yaml.YAMLError, InvalidSpec, ValueError) as err:
        problems = err.problems if isinstance(err, InvalidSpec) else [str(err)]
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        return 1
    spec = resource.spec
    prom = spec.autotune.prometheus
    url = args.prometheus or (prom.url if prom else None)
    if not url:
        print("error: no Prometheus URL: pass --prometheus or set spec.autotune.prometheus.url", file=sys.stderr)
        return 1
    status = resource.status
    config_hash = args.config_hash or (status.effective.config_hash if status and status.effective else None)
    try:
        scope = Scope(
            namespace=args.namespace or str(resource.metadata.get("namespace") or "default"),
            deployment=str(resource.metadata.get("name") or ""),
            config_hash=config_hash,
            namespace_label=args.namespace_label,
            deployment_label=args.deployment_label,
            config_hash_label=args.config_hash_label,
        )
        connection = PrometheusConnection(
            url=url,
            timeout_s=parse_duration(args.timeout or (prom.timeout if prom else "10s")),
            bearer_token=args.bearer_token_file.read_text().strip() if args.bearer_token_file else None,
            username=args.username,
            password=args.password_file.read_text().strip() if args.password_file else None,
            ca_pem=args.ca_file.read_text() if args.ca_file else None,
            insecure_skip_verify=args.insecure_skip_verify or bool(prom and prom.insecure_skip_verify),
            headers={**(prom.headers if prom else {}), **headers},
        )
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if connection.insecure_skip_verify:
        print("warning: TLS verification is off for Prometheus", file=sys.stderr)
    state = PolicyState.from_dict(status.autotune if status else None)
    # What the pods run (the lossless record in status.effective) beats what autotune last chose.
    running = running_intent(status.model_dump(by_alias=True, exclude_none=True), spec) if status else None
    current = running or desired_intent(spec, state).intent
    with PrometheusClient(connection) as client:
        result = evaluate_once(spec, scope, client, datetime.now(UTC), current=current, state=state)
    if config_hash is None:
        result["scope"]["note"] = "no config hash known: measured every configuration of this deployment"
    if args.output == "json":
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(result))
    return 0


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--header {text!r}: expected NAME=VALUE")
    return name.strip(), value


def render_text(result: Mapping[str, Any]) -> str:
    """A terminal view: one line per measurement, then the decision and its reason."""
    scope = result["scope"]
    lines = [
        f"scope    {scope['selector']}" + (f"  ({scope['note']})" if scope.get("note") else ""),
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
    lines.append("queries  -o json shows every resolved query")
    return "\n".join(lines) + "\n"
