"""Generate the CustomResourceDefinition and the API reference from the pydantic models.

pydantic emits JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3.0 schema (no $ref, no anyOf with
null, boolean exclusive bounds, x-kubernetes-preserve-unknown-fields instead of additionalProperties: true). The
conversion is mechanical and lives here so `crds/`, the chart's copy and docs/api.md are pure functions of the models.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml
from pydantic import BaseModel

from specpilot.api import v1alpha1

NAME_RULE = {
    "rule": "self.metadata.name.size() <= 50 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "message": "metadata.name must be a DNS-1035 label of at most 50 characters (lowercase letters, digits, '-', "
    "starting with a letter) so the Deployment, Service and pod names derived from it stay valid",
}

_NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def name_is_valid(name: str) -> bool:
    """The Python twin of NAME_RULE's CEL, for offline validation."""
    return len(name) <= 50 and bool(_NAME_PATTERN.match(name))


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Mode", "type": "string", "jsonPath": ".spec.autotune.mode"},
    {"name": "Speculation", "type": "boolean", "jsonPath": ".status.effective.speculation"},
    {"name": "Drafter", "type": "string", "jsonPath": ".status.effective.drafter"},
    {"name": "Threshold", "type": "integer", "jsonPath": ".status.effective.disableAboveBatchSize"},
    {"name": "Accept", "type": "number", "jsonPath": ".status.observed.acceptanceRate", "format": "float"},
    {"name": "P99-TPOT-ms", "type": "number", "jsonPath": ".status.observed.p99TpotMs"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Reason",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {"name": "Recommendation", "type": "string", "priority": 1, "jsonPath": ".status.recommendation.action"},
    {"name": "Config", "type": "string", "priority": 1, "jsonPath": ".status.effective.configHash"},
    {"name": "Trial", "type": "string", "priority": 1, "jsonPath": ".status.trial.phase"},
]


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].split("/")[-1]])
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _inline(merged, defs)
    return schema


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node into a structural OpenAPI v3.0 node."""
    schema = _inline(schema, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express union {schema['anyOf']} in a structural schema")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        if schema.get("default") is not None:
            rest["default"] = schema["default"]
        return _structural({**_inline(options[0], defs), **rest}, defs)

    out: dict[str, Any] = {}
    for key in (
        "description",
        "type",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "format",
    ):
        if key in schema:
            out[key] = schema[key]
    if "const" in schema:
        out["enum"] = [schema["const"]]
        out.setdefault("type", "string")
    for bound, exclusive, flag in (("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", True)):
        if bound in schema:
            out[bound] = schema[bound]
        if exclusive in schema:
            out[bound] = schema[exclusive]
            out[exclusive] = flag
    if "enum" in out and "type" not in out:
        out["type"] = "integer" if all(isinstance(v, int) for v in out["enum"]) else "string"
    if "default" in schema and schema["default"] is not None:
        out["default"] = schema["default"]

    if out.get("type") == "object" or "properties" in schema:
        out["type"] = "object"
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props:
            out["properties"] = {name: _structural(sub, defs) for name, sub in props.items()}
            required = [r for r in schema.get("required", []) if r in props]
            if required:
                out["required"] = required
        elif isinstance(extra, dict) and extra:
            out["additionalProperties"] = _structural(extra, defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "array":
        out["items"] = _structural(schema.get("items", {}), defs)
    return out


def _apply_model_defaults(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Give every object-valued field with a default_factory its *fully defaulted* value as the schema default.

    pydantic leaves such defaults out of its schema. `default: {}` is not enough: the API server validates a default
    against the object's CEL rules before nested defaults apply, so the rules would see missing keys.
    """
    for name, info in model.model_fields.items():
        alias = info.alias or name
        sub = schema.get("properties", {}).get(alias)
        if sub is None:
            continue
        annotation = info.annotation
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if nested is None:
            continue
        _apply_model_defaults(sub, nested)
        if info.default_factory is not None and not info.is_required():
            value = info.default_factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                sub["default"] = value.model_dump(mode="json", by_alias=True, exclude_none=True)


def _attach_rules(spec_schema: dict[str, Any]) -> None:
    for rule in v1alpha1.CROSS_FIELD_RULES:
        node = spec_schema
        for part in rule.at:
            node = node["items"] if part == v1alpha1.CANDIDATE_ITEM else node["properties"][part]
        node.setdefault("x-kubernetes-validations", []).append({"rule": rule.cel, "message": rule.message})


def _keyed_by_name(array: dict[str, Any]) -> None:
    """A list whose elements are identified by `name`: the API server refuses two with the same name and merges by it
    under server-side apply."""
    array["x-kubernetes-list-type"] = "map"
    array["x-kubernetes-list-map-keys"] = ["name"]


def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def _strip_status_defaults(node: dict[str, Any]) -> None:
    node.pop("default", None)
    for sub in node.get("properties", {}).values():
        _strip_status_defaults(sub)
    if "items" in node:
        _strip_status_defaults(node["items"])


def status_schema() -> dict[str, Any]:
    schema = _model_schema(v1alpha1.SpeculativeDeploymentStatus)
    _strip_status_defaults(schema)
    schema["x-kubernetes-preserve-unknown-fields"] = True
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["items"]["required"] = ["type", "status", "reason"]
    conditions["maxItems"] = 32
    schema["properties"]["actuations"]["maxItems"] = 50
    _keyed_by_name(schema["properties"]["candidates"])
    return schema


def spec_schema() -> dict[str, Any]:
    schema = _model_schema(v1alpha1.SpeculativeDeploymentSpec)
    _apply_model_defaults(schema, v1alpha1.SpeculativeDeploymentSpec)
    _attach_rules(schema)
    _keyed_by_name(schema["properties"]["speculation"]["properties"]["candidates"])
    return schema


def build_crd() -> dict[str, Any]:
    """Return the CustomResourceDefinition for SpeculativeDeployment."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}",
            "annotations": {
                # Argo CD must never prune or delete the CRD: that would delete every SpeculativeDeployment.
                "argocd.argoproj.io/sync-options": "Prune=false,Delete=false,ServerSideApply=true",
                "argocd.argoproj.io/sync-wave": "-10",
            },
            "labels": {"app.kubernetes.io/name": "specpilot", "app.kubernetes.io/part-of": "specpilot"},
        },
        "spec": {
            "group": v1alpha1.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": v1alpha1.KIND,
                "listKind": f"{v1alpha1.KIND}List",
                "plural": v1alpha1.PLURAL,
                "singular": v1alpha1.SINGULAR,
                "shortNames": list(v1alpha1.SHORT_NAMES),
                "categories": ["specpilot", "ai"],
            },
            "versions": [
                {
                    "name": v1alpha1.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A vLLM deployment with speculative decoding that specpilot keeps in "
                            "the configuration that serves best.",
                            "required": ["spec"],
                            "x-kubernetes-validations": [NAME_RULE],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The exact text committed under crds/ (a golden test compares it)."""
    header = "# Generated by `specpilot crd` from operator/specpilot/api/v1alpha1.py. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


def describe_bounds(schema: dict[str, Any]) -> str:
    """A field's bounds as the API server checks them: `> 0` for an exclusive minimum, `<= 1` for a maximum."""
    parts = []
    for bound, exclusive, strict, inclusive in (
        ("minimum", "exclusiveMinimum", ">", ">="),
        ("maximum", "exclusiveMaximum", "<", "<="),
    ):
        if bound in schema:
            parts.append(f"{strict if schema.get(exclusive) is True else inclusive} {schema[bound]}")
    if "pattern" in schema:
        parts.append(f"pattern `{schema['pattern']}`")
    return ", ".join(parts)


def _doc_rows(schema: dict[str, Any], path: str, rows: list[tuple[str, str, str, str]]) -> None:
    for name, sub in schema.get("properties", {}).items():
        field = f"{path}.{name}"
        kind = sub.get("type", "")
        if "enum" in sub:
            kind = " \\| ".join(str(v) for v in sub["enum"])
        bounds = describe_bounds(sub)
        default = "" if "default" not in sub else f"`{sub['default']}`"
        desc = sub.get("description", "") + (f" ({bounds})" if bounds else "")
        required = " (required)" if name in schema.get("required", []) else ""
        rows.append((f"`{field}`{required}", kind, default, desc.replace("|", "\\|")))
        if sub.get("type") == "object":
            _doc_rows(sub, field, rows)
        if sub.get("type") == "array" and sub.get("items", {}).get("type") == "object":
            _doc_rows(sub["items"], f"{field}[]", rows)


def render_api_docs() -> str:
    """Markdown reference of every spec field and cross-field rule (docs/api.md)."""
    rows: list[tuple[str, str, str, str]] = []
    _doc_rows(spec_schema(), "spec", rows)
    lines = [
        "<!-- Generated by `specpilot crd --docs` from operator/specpilot/api/v1alpha1.py. Do not edit. -->",
        f"# {v1alpha1.KIND} ({v1alpha1.API_VERSION})",
        "",
        f'Short names: {", ".join(v1alpha1.SHORT_NAMES)}. Annotations: `{v1alpha1.ANNOTATION_PAUSE}: "true"` '
        f"(break glass), `{v1alpha1.ANNOTATION_REEVALUATE}: <token>` (one-shot evaluation), "
        f'`{v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT}: "true"` (deploy although the memory plan does not fit).',
        "",
        "## Spec fields",
        "",
        "| Field | Type | Default | Description |",
        "|---|---|---|---|",
        *(f"| {f} | {t} | {d} | {desc} |" for f, t, d, desc in rows),
        "",
        "## Cross-field rules (enforced by the API server with CEL and by `specpilot validate`)",
        "",
        *(f"- {rule.message}" for rule in v1alpha1.CROSS_FIELD_RULES),
        f"- {NAME_RULE['message']}",
        "",
    ]
    return "\n".join(lines)
