"""The API models: defaults, field-naming errors, cross-field rules, and the generated CRD/docs staying in sync."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from specpilot.api import crd, v1alpha1
from specpilot.api.durations import format_duration, parse_duration, parse_span

ROOT = Path(__file__).resolve().parents[2]


def minimal_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
    }
    spec.update(overrides)
    return spec


def test_crd_file_matches_models() -> None:
    committed = (ROOT / "crds" / "specpilot.dev_speculativedeployments.yaml").read_text()
    assert committed == crd.render_crd_yaml(), "crds/ is stale: run `make generate`"


def test_api_docs_match_models() -> None:
    assert (ROOT / "docs" / "api.md").read_text() == crd.render_api_docs(), "docs/api.md is stale: run `make generate`"


def test_parse_spec_fills_design_defaults() -> None:
    spec = v1alpha1.parse_spec(minimal_spec())
    assert spec.replicas == 1
    assert spec.engine.gpu_memory_utilization == 0.92
    assert spec.autotune.mode is v1alpha1.AutotuneMode.RECOMMEND
    assert spec.autotune.acceptance.disable_below == 0.5
    assert spec.autotune.acceptance.enable_above == 0.65
    assert spec.autotune.budget.max_per_hour == 2
    assert spec.resources.gpu_resource_name == "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"speculation": {"method": "draft_model", "numSpeculativeTokens": 4}}, "spec.speculation.draft is required"),
        (
            {"speculation": {"method": "ngram", "numSpeculativeTokens": 4, "draft": {"model": "x"}}},
            "spec.speculation.draft must be omitted",
        ),
        ({"speculation": {"method": "ngram"}}, "spec.speculation.numSpeculativeTokens is required"),
        (
            {"speculation": {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 5, "promptLookupMax": 2}},
            "promptLookupMin must be less than or equal",
        ),
        (
            {
                "parallelism": {"tensorParallelSize": 2},
                "resources": {"gpusPerReplica": 2},
                "speculation": {
                    "method": "draft_model",
                    "numSpeculativeTokens": 4,
                    "draft": {"model": "d", "tensorParallelSize": 3},
                },
            },
            "spec.speculation.draft.tensorParallelSize must be 1 or equal",
        ),
        ({"parallelism": {"tensorParallelSize": 4}}, "must not exceed spec.resources.gpusPerReplica"),
        ({"autotune": {"acceptance": {"disableBelow": 0.7, "enableAbove": 0.6}}}, "enableAbove must be greater"),
        ({"autotune": {"batchThreshold": {"min": 64, "max": 8}}}, "batchThreshold.min must be less than"),
        ({"autotune": {"budget": {"maxPerHour": 9, "maxPerDay": 8}}}, "maxPerHour must be less than"),
        ({"autotune": {"mode": "Auto"}}, "spec.autotune.prometheus is required"),
        ({"autotune": {"canary": {"enabled": True}}}, "spec.autotune.canary.enabled needs spec.replicas >= 2"),
        ({"target": {"model": "m", "quantization": "compressed-tensors"}}, "spec.target.weightBits is required"),
        (
            {"speculation": {"method": "ngram", "numSpeculativeTokens": 3, "disableAboveBatchSize": 512}},
            "disableAboveBatchSize must not exceed spec.engine.maxNumSeqs",
        ),
    ],
)
def test_cross_field_rule_names_the_field(patch: dict[str, Any], expected: str) -> None:
    with pytest.raises(v1alpha1.InvalidSpec) as err:
        v1alpha1.parse_spec(minimal_spec(**patch))
    assert any(expected in line for line in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"engine": {"image": "i", "version": "latest"}}, "spec.engine.version"),
        ({"engine": {"image": "i", "version": "0.33.0", "maxModelLen": 0}}, "spec.engine.maxModelLen"),
        (
            {"engine": {"image": "i", "version": "0.33.0", "gpuMemoryUtilization": 1.5}},
            "spec.engine.gpuMemoryUtilization",
        ),
        ({"speculation": {"method": "medusa"}}, "spec.speculation.method"),
        ({"target": {"model": "m", "quantization": "int3"}}, "spec.target.quantization"),
        ({"autotune": {"window": "five minutes"}}, "spec.autotune.window"),
        ({"replicas": -1}, "spec.replicas"),
        ({"unknownField": 1}, "spec.unknownField"),
    ],
)
def test_field_error_names_the_field(patch: dict[str, Any], field: str) -> None:
    with pytest.raises(v1alpha1.InvalidSpec) as err:
        v1alpha1.parse_spec(minimal_spec(**patch))
    assert any(line.startswith(f"{field}:") for line in err.value.problems), err.value.problems


def test_enum_error_lists_allowed_values() -> None:
    with pytest.raises(v1alpha1.InvalidSpec) as err:
        v1alpha1.parse_spec(minimal_spec(speculation={"method": "medusa"}))
    assert "draft_model" in err.value.problems[0]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("1.5m", 90)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"), [("7d", 604800), ("2w", 1209600), ("1d12h", 129600), ("90m", 5400), ("250ms", 0.25)]
)
def test_parse_span_takes_days_and_weeks(text: str, seconds: float) -> None:
    assert parse_span(text) == seconds


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("7d", "'7d' is not a duration; use a number with a unit ms, s, m or h"),  # the CR keeps the CRD's spellings
        ("5 m", "is not a duration"),
        ("-5m", "is not a duration"),
        ("9999999999999h", "'9999999999999h' is out of range for a duration"),
    ],
)
def test_parse_duration_refuses_with_the_accepted_form(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_duration(text)


def test_parse_span_names_its_units() -> None:
    expected = "'7 days' is not a duration; use a number with a unit ms, s, m, h, d or w"
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse_span("7 days")


@pytest.mark.parametrize(("seconds", "text"), [(90, "1m30s"), (300, "5m"), (5400, "1h30m"), (0.25, "250ms")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_every_cross_field_rule_is_attached_to_the_crd() -> None:
    schema = crd.spec_schema()
    attached: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        attached.extend(r["rule"] for r in node.get("x-kubernetes-validations", []))
        for sub in node.get("properties", {}).values():
            walk(sub)
        if "items" in node:
            walk(node["items"])

    walk(schema)
    assert sorted(attached) == sorted(rule.cel for rule in v1alpha1.CROSS_FIELD_RULES)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"minimum": 0, "exclusiveMinimum": True}, "> 0"),
        ({"minimum": 0}, ">= 0"),
        ({"maximum": 1, "exclusiveMaximum": True}, "< 1"),
        ({"maximum": 1000}, "<= 1000"),
        ({"minimum": 0, "exclusiveMinimum": True, "maximum": 1}, "> 0, <= 1"),
        ({"pattern": "^a$"}, "pattern `^a$`"),
        ({}, ""),
    ],
)
def test_api_docs_render_bounds_as_the_api_server_checks_them(schema: dict[str, Any], expected: str) -> None:
    assert crd.describe_bounds(schema) == expected


def test_api_docs_show_exclusive_minimum_of_a_real_field() -> None:
    row = next(line for line in crd.render_api_docs().splitlines() if "`spec.engine.gpuMemoryUtilization`" in line)
    assert "(> 0, <= 1)" in row, row
