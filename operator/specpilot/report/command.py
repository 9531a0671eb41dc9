"""`specpilot report (FILE | NAME -n NAMESPACE) --prometheus URL [--since 7d] [-o DIR]`: wiring only.

FILE is a SpeculativeDeployment manifest (with its status, if saved with `kubectl get -o yaml`, for the actuations),
so a report needs no cluster, like `evaluate`. NAME reads the live object through KUBECONFIG.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from specpilot.api import v1alpha1
from specpilot.api.durations import parse_duration, parse_span
from specpilot.api.loading import STDIN, load_documents, printable, speculative_deployments
from specpilot.api.timestamps import parse_time
from specpilot.autotune.signals.promql import Scope, Window
from specpilot.report.analysis import Actuation, Report, analyse, render_markdown
from specpilot.report.candidates import candidate_records, render_candidates
from specpilot.report.prometheus import RangeClient
from specpilot.report.queries import build_range_queries
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

MAX_POINTS = 240  # windows per report when --step is not given: enough for a distribution, small for Prometheus


# A bounded Prometheus client for a URL, headers, insecure-skip-verify and a timeout per query in seconds
# (adapters.prom, handed in by the CLI).
OpenClient = Callable[[str, Mapping[str, str], bool, float], AbstractContextManager[RangeClient]]


def add_report_command(sub: Any, open_client: OpenClient) -> None:
    p = sub.add_parser(
        "report",
        help="is speculation helping at this load? acceptance distribution, P50/P95/P99 vs a baseline, PNGs + Markdown",
    )
    p.add_argument("target", metavar="FILE|NAME", help="a SpeculativeDeployment YAML file, or the name of a live one")
    p.add_argument("-n", "--namespace", help="namespace of NAME (and of FILE's series if it has none)")
    p.add_argument("--prometheus", help="Prometheus base URL (default: spec.autotune.prometheus.url)")
    p.add_argument("--since", default="7d", help="how far back to look, e.g. 90m, 36h, 7d, 2w (default 7d)")
    p.add_argument("--until", help="end of the period, RFC 3339 (default: now)")
    p.add_argument("--step", help="window length (default: the period / 240, at least 4 scrape intervals)")
    p.add_argument("-o", "--output-dir", type=Path, help="where to write report.md and the PNGs")
    p.add_argument("--header", action="append", default=[], help="extra HTTP header NAME=VALUE (repeatable)")
    p.add_argument("--bearer-token-file", type=Path, help="send Authorization: Bearer <file content>")
    p.add_argument("--insecure-skip-verify", action="store_true", help="do not verify Prometheus' TLS certificate")
    p.add_argument("--timeout", default="30s", help="time for each range query's whole answer (at most 1m)")
    p.set_defaults(func=partial(run_report, open_client=open_client))


def _load(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.target)
    if args.target == STDIN or path.suffix in (".yaml", ".yml", ".json") or path.exists():
        # The same hardened loader as validate/render/plan: one line naming the file for unreadable, non-UTF-8,
        # malformed or hostile YAML (LoadError is a ValueError).
        docs = speculative_deployments(load_documents(args.target), v1alpha1.KIND)
        if not docs:
            raise ValueError(f"{args.target}: no {v1alpha1.KIND} document")
        return docs[0].body
    if not args.namespace:
        raise ValueError(f"{args.target}: not a file; a live object needs -n NAMESPACE")
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    where = f"SpeculativeDeployment {args.namespace}/{args.target}"
    try:
        # KUBECONFIG as it is now: the client reads the variable once, when it is imported
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
        obj: Any = client.CustomObjectsApi().get_namespaced_custom_object(
            v1alpha1.GROUP, v1alpha1.VERSION, args.namespace, "speculativedeployments", args.target
        )
    except ConfigException as err:
        raise ValueError(f"{where}: no usable kubeconfig ({err}); pass a FILE to work without a cluster") from err
    except ApiException as err:  # NotFound, Forbidden, Unauthorized: the API server's own words
        raise ValueError(f"{where}: the API server answered {err.status} {err.reason}") from err
    except (HTTPError, OSError) as err:  # the API server is unreachable (urllib3 gave up retrying)
        raise ValueError(f"{where}: cannot reach the API server ({err})") from err
    return {str(k): v for k, v in dict(obj).items()}


def _actuations(status: dict[str, Any]) -> list[Actuation]:
    out = []
    for item in status.get("actuations") or []:
        try:
            at = parse_time(str(item["at"])).timestamp()
        except (KeyError, ValueError):
            continue
        reason = str(item.get("reason", ""))
        out.append(Actuation(at, f"{item.get('action', 'actuation')}: {reason[:80]}"))
    return out


def _until(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as err:
        raise ValueError(f"--until: {err}") from None


@dataclass(frozen=True)
class _Request:
    """What one report reads: the object, its series' scope and the step-aligned period."""

    doc: dict[str, Any]
    spec: v1alpha1.SpeculativeDeploymentSpec
    namespace: str
    name: str
    url: str
    headers: dict[str, str]
    start_s: int
    end_s: int
    step_s: int


def _request(args: argparse.Namespace) -> _Request:
    """The command line and the object read into a request; InvalidSpec, OSError or ValueError on bad input."""
    doc = _load(args)
    resource = v1alpha1.parse_resource(doc)
    meta, spec = resource.metadata, resource.spec
    prom = spec.autotune.prometheus
    url = args.prometheus or (prom.url if prom else None)
    if not url:
        raise ValueError("no Prometheus URL: pass --prometheus or set spec.autotune.prometheus.url")
    end = _until(args.until) if args.until else datetime.now(UTC)
    span = parse_span(args.since)
    scrape = parse_duration(spec.autotune.scrape_interval)
    step_s = int(max(parse_span(args.step) if args.step else span / MAX_POINTS, 4 * scrape, 1))
    headers = dict(h.split("=", 1) for h in args.header if "=" in h)
    if len(headers) != len(args.header):
        raise ValueError("--header takes NAME=VALUE")
    if args.bearer_token_file:
        headers["Authorization"] = f"Bearer {args.bearer_token_file.read_text().strip()}"
    # Align windows to the step so reruns over the same period give the same windows.
    end_s = int(end.timestamp()) // step_s * step_s
    start_s = end_s - int(span) // step_s * step_s
    namespace = args.namespace or str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    return _Request(doc, spec, namespace, name, url.rstrip("/"), headers, start_s, end_s, step_s)


def run_report(args: argparse.Namespace, open_client: OpenClient) -> int:
    from specpilot.report.prometheus import ReportQueryError, run_range_queries

    try:
        req = _request(args)
    except v1alpha1.InvalidSpec as err:
        print("\n".join(printable(f"{args.target}: {p}") for p in err.problems), file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(printable(f"error: {err}"), file=sys.stderr)
        return 1
    names = metric_names_for(VllmVersion.parse(req.spec.engine.version))
    scope = Scope(namespace=req.namespace, deployment=req.name, config_hash=None)
    queries = build_range_queries(names, scope, Window(req.step_s, req.step_s, ""))
    started = time.monotonic()
    try:
        timeout_s = parse_duration(args.timeout)
        with open_client(req.url, req.headers, args.insecure_skip_verify, timeout_s) as client:
            start, end = datetime.fromtimestamp(req.start_s, UTC), datetime.fromtimestamp(req.end_s, UTC)
            data = run_range_queries(client, queries, start, end, req.step_s)
    except (ReportQueryError, ValueError) as err:  # ValueError: a URL, header or timeout the client refuses
        print(printable(f"error: Prometheus {req.url}: {err}"), file=sys.stderr)
        return 1
    report = analyse(
        data,
        namespace=req.namespace,
        name=req.name,
        start=req.start_s,
        end=req.end_s,
        step_s=req.step_s,
        config_label=scope.config_hash_label,
        actuations=_actuations(dict(req.doc.get("status") or {})),
    )
    out_dir = args.output_dir or Path(f"specpilot-report-{req.namespace}-{req.name}")
    written = _write(report, req.doc, out_dir)
    print(printable(f"wrote {out_dir / 'report.md'} and {written} ({len(queries)} range queries, "
                    f"{(req.end_s - req.start_s) // req.step_s} windows of {req.step_s} s, "
                    f"{time.monotonic() - started:.1f} s)"))  # fmt: skip
    return 0


def _write(report: Report, doc: Mapping[str, Any], out_dir: Path) -> str:
    """Draw the plots, write report.md and print the verdict and the candidates' table; the plots' file names."""
    from specpilot.report.plots import draw_all  # matplotlib loads slowly: only once there is something to draw

    plots = draw_all(report, out_dir)
    candidates = render_candidates(candidate_records(doc.get("status")))
    markdown = render_markdown(report, [p.name for p in plots])
    (out_dir / "report.md").write_text(markdown + ("\n" + "\n".join(candidates) if candidates else ""))
    print(f"{report.verdict.headline}\n")
    for line in candidates[4:]:  # the table and the notes, without the heading
        print(printable(line))
    return ", ".join(p.name for p in plots)
