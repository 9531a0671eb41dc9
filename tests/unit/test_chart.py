"""The Helm chart ships the generated CRD unchanged and its values satisfy its own schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specpilot"


def test_chart_crds_equal_generated_crds() -> None:
    for crd in (ROOT / "crds").glob("*.yaml"):
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text(), f"run `make generate` ({crd.name})"
    assert {p.name for p in (CHART / "crds").glob("*.yaml")} == {p.name for p in (ROOT / "crds").glob("*.yaml")}


def test_chart_values_match_values_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


def test_chart_values_schema_rejects_unknown_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    errors = list(jsonschema.Draft7Validator(schema).iter_errors({"replicaCount": 2}))
    assert errors


def test_dashboard_is_valid_json_with_panels() -> None:
    dashboard = json.loads((CHART / "dashboards" / "specpilot.json").read_text())
    assert len(dashboard["panels"]) >= 4


def _schema_errors(values: dict[str, object]) -> list[str]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(values)]


def test_values_schema_takes_prometheus_connections_and_the_image_policy() -> None:
    values = {
        "prometheusConnections": {
            "monitoring": {
                "url": "https://prometheus.monitoring.svc:9090",
                "secretName": "prometheus-reader",
                "namespaces": ["ml"],
                "headers": {"X-Scope-OrgID": "ml"},
                "allowPlainHTTP": False,
            }
        },
        "prometheusAllowSpecURLs": False,
        "imagePolicy": {
            "enabled": True,
            "allowedPrefixes": ["registry.example.com/vllm/"],
            "validationActions": ["Warn"],
        },
    }
    assert _schema_errors(values) == []


@pytest.mark.parametrize(
    "values",
    [
        {"prometheusConnections": {"Main": {"url": "https://p:9090"}}},
        {"prometheusConnections": {"main": {"url": "https://p:9090", "secretKey": "token"}}},
        {"prometheusConnections": {"main": {"secretName": "s"}}},
        {"prometheusConnections": {"main": {"url": "https://p:9090", "headers": {"X": "a\r\nb: c"}}}},
        {"imagePolicy": {"validationActions": ["Allow"]}},
        {"imagePolicy": {"allowedPrefixes": ["has space/"]}},
    ],
)
def test_values_schema_refuses_broken_security_settings(values: dict[str, object]) -> None:
    assert _schema_errors(values)


@pytest.mark.parametrize(
    ("values", "valid"),
    [
        ({"replicas": 2}, True),  # leader election is on by default
        ({"replicas": 2, "leaderElection": {"enabled": True, "leaseName": "ops-leader"}}, True),
        ({"replicas": 1, "leaderElection": {"enabled": False}}, True),
        ({"replicas": 2, "leaderElection": {"enabled": False}}, False),  # two operators would both act
        ({"replicas": 0}, False),
        ({"leaderElection": {"leaseDuration": 1.5}}, False),  # the Lease holds whole seconds
        ({"leaderElection": {"leaseName": "Not_A_Name"}}, False),
        ({"leaderElection": {"renewDeadlin": 10}}, False),
    ],
)
def test_values_schema_on_replicas_and_leader_election(values: dict[str, object], valid: bool) -> None:
    assert (_schema_errors(values) == []) is valid, _schema_errors(values)


# The operator's peak resident memory with 1,000 SpeculativeDeployments created in one burst, from `make bench`
# (e2e/bench/operator_scale.py, VmHWM; docs/benchmarks.md, "Operator at scale"). Re-measure it with the bench.
PEAK_RSS_MIB_AT_1000 = 250.5
MEMORY_MARGIN = 0.5


def test_the_memory_limit_keeps_its_margin_over_the_measured_peak() -> None:
    """An operator OOM-killed at its limit stops reconciling every namespace: the limit stays 50% above the peak."""
    limit = yaml.safe_load((CHART / "values.yaml").read_text())["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    assert int(limit.removesuffix("Mi")) >= (1 + MEMORY_MARGIN) * PEAK_RSS_MIB_AT_1000, (
        f"resources.limits.memory {limit} is less than {MEMORY_MARGIN:.0%} above the measured peak "
        f"{PEAK_RSS_MIB_AT_1000} MiB"
    )
