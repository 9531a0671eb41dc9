"""Every rendered child against Kubernetes' own OpenAPI v3 schemas, without a cluster.

The schemas are kube-apiserver's published ones for the pinned Kubernetes (vendored by e2e/toolchain/k8s_openapi.py;
tests/operator/test_api_server_agreement.py checks the copy is current and sends the same kind of objects to the real
API server). Checked stricter than the schemas say: no unknown fields (the API server's strict field validation) and
int32/int64 ranges. Semantic rules the schemas cannot state (quantities, label syntax) are the server tests' job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from specpilot.api import v1alpha1
from tests.k8s_specs import children_of, valid_resources

ROOT = Path(__file__).resolve().parents[2]
VENDORED = json.loads((ROOT / "tests" / "unit" / "testdata" / "k8s-openapi-v3.json").read_text())
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _closed(node: Any) -> Any:
    """additionalProperties: false wherever properties are listed (what fieldValidation=Strict enforces)."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


SCHEMAS = _closed(VENDORED["schemas"])


def validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    root = VENDORED["roots"][f"{api_version}/{kind}"]
    schema = {"$ref": f"#/components/schemas/{root}", "components": {"schemas": SCHEMAS}}
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


VALIDATORS = {key: validator(*key.rsplit("/", 1)) for key in VENDORED["roots"]}


def schema_errors(obj: dict[str, Any]) -> list[str]:
    check = VALIDATORS.get(f"{obj['apiVersion']}/{obj['kind']}")
    if check is None:  # PodMonitor: a prometheus-operator CRD, not in Kubernetes' schemas
        return []
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(obj)]


EXAMPLES = [
    d
    for path in sorted((ROOT / "examples").glob("*.yaml"))
    for d in yaml.safe_load_all(path.read_text())
    if isinstance(d, dict) and d.get("kind") == v1alpha1.KIND
]


@pytest.mark.parametrize("doc", EXAMPLES, ids=[d["metadata"]["name"] for d in EXAMPLES])
def test_children_of_every_example_match_kubernetes_schemas(doc: dict[str, Any]) -> None:
    for child in children_of(doc, "ns"):
        assert schema_errors(child) == [], child["kind"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_resources())
def test_children_of_random_valid_specs_match_kubernetes_schemas(doc: dict[str, Any]) -> None:
    """A few hundred random valid specs (the issue's bar; the API server's dry run takes 200 of them)."""
    for child in children_of(doc, "ns"):
        assert schema_errors(child) == [], (child["kind"], schema_errors(child))


def test_the_schema_check_catches_what_the_api_server_would_refuse() -> None:
    deployment = next(c for c in children_of(EXAMPLES[0], "ns") if c["kind"] == "Deployment")
    broken = json.loads(json.dumps(deployment))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["allowPrivilegeEscalation"] = "false"
    container["imagePullPolicy "] = "Always"
    broken["spec"]["replicas"] = 2**31
    errors = schema_errors(broken)
    assert any("allowPrivilegeEscalation: 'false' is not of type 'boolean'" in e for e in errors), errors
    assert any("'imagePullPolicy ' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.replicas:") for e in errors), errors


def test_the_vllm_pod_is_hardened() -> None:
    for doc in EXAMPLES:
        for child in children_of(doc, "ns"):
            if child["kind"] != "Deployment":
                continue
            pod = child["spec"]["template"]["spec"]
            assert pod["automountServiceAccountToken"] is False
            assert pod["enableServiceLinks"] is False
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            context = pod["containers"][0]["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
