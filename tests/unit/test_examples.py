"""Every example CR validates against the generated CRD schema and parses into the models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from specpilot.api import v1alpha1

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "specpilot.dev_speculativedeployments.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def speculative_deployments(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == v1alpha1.KIND]


def test_there_are_at_least_six_examples() -> None:
    assert sum(len(speculative_deployments(p)) for p in EXAMPLES) >= 6


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_crd_schema(path: Path) -> None:
    validator = jsonschema.Draft4Validator(crd_schema())
    for doc in speculative_deployments(path):
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_with_cross_field_rules(path: Path) -> None:
    for doc in speculative_deployments(path):
        v1alpha1.parse_resource(doc)


def test_crd_schema_rejects_unknown_method() -> None:
    doc = speculative_deployments(EXAMPLES[0])[0]
    doc["spec"]["speculation"]["method"] = "medusa"
    errors = list(jsonschema.Draft4Validator(crd_schema()).iter_errors(doc))
    assert any(list(e.path) == ["spec", "speculation", "method"] for e in errors)
