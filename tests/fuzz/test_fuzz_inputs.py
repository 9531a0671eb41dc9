"""Fuzz tier: arbitrary bytes, YAML-shaped text and mutated SpeculativeDeployments through validate, render, plan and
evaluate's spec parsing, and arbitrary stored status.autotune documents through the operator's reader. Each must end
in a clean result or a clean error (an exit status and lines of text, or one of the documented exceptions), never
another exception.

Bounded: every property has a fixed example budget (FUZZ_EXAMPLES, default 60) and no deadline, so the tier costs
about the same on every run (measured: see the closing note of issue 10); raise SPECPILOT_FUZZ_EXAMPLES for a
longer hunt. Hypothesis keeps failing examples in its database, so a crash found once is replayed first next time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.api import v1alpha1
from specpilot.api.loading import LoadError
from specpilot.autotune.policy.decision import desired_intent
from specpilot.autotune.policy.state import STATE_VERSION, PolicyState
from specpilot.cli import evaluate
from specpilot.cli.main import main, validate_document
from specpilot.planning.plan import plan_memory
from specpilot.reconcile.manifests import Owner, build_children
from specpilot.vllm.dialects import render_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [
    d
    for path in sorted((ROOT / "examples").glob("*.yaml"))
    for d in yaml.safe_load_all(path.read_text())
    if isinstance(d, dict) and d.get("kind") == v1alpha1.KIND
]
FUZZ_EXAMPLES = int(os.environ.get("SPECPILOT_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
YAML_ALPHABET = st.sampled_from(
    [*list("ab:- \n\t[]{},&*!|>'\"#%@`?~.0123456789eE+"), "kind: ", "SpeculativeDeployment"]
)
YAML_TEXT = st.lists(YAML_ALPHABET, max_size=200).map("".join)


def run_cli(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text
    return code, text


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    """An example with a few values replaced, removed or added at random paths (any JSON, wrong types included)."""
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_dump(draw(st.sampled_from(EXAMPLES))))
    for _ in range(draw(st.integers(1, 4))):
        node: Any = doc
        path = draw(
            st.lists(
                st.sampled_from(
                    [
                        "spec",
                        "metadata",
                        "status",
                        "engine",
                        "target",
                        "speculation",
                        "autotune",
                        "prometheus",
                        "resources",
                        "draft",
                        "env",
                        "extraArgs",
                        "name",
                        "replicas",
                        "model",
                        "url",
                        "headers",
                        "cpu",
                        "memory",
                    ]
                ),
                min_size=1,
                max_size=4,
            )
        )
        for key in path[:-1]:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                break
            node = child
        if isinstance(node, dict):
            if draw(st.booleans()) and path[-1] in node:
                del node[path[-1]]
            else:
                node[path[-1]] = draw(JSON)
    return doc


@FUZZ
@given(st.binary(max_size=300))
@pytest.mark.parametrize("command", ["validate", "render", "plan"])
def test_arbitrary_bytes(tmp_path: Path, command: str, data: bytes) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(data)
    code, _ = run_cli([command, str(path)])
    assert code in (0, 1)


@FUZZ
@given(YAML_TEXT)
def test_yaml_shaped_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    for command in ("validate", "render", "plan"):
        code, _ = run_cli([command, str(path)])
        assert code in (0, 1)


@FUZZ
@given(mutated_documents())
def test_mutated_documents_validate_render_and_plan_cleanly(doc: dict[str, Any]) -> None:
    problems, _ = validate_document(doc)
    if problems:
        return
    resource = v1alpha1.parse_resource(doc)  # validate said yes: parsing must agree
    rendered = render_command(resource.spec)
    plan_memory(resource.spec)
    children = build_children(
        resource.spec,
        Owner("x", "ns", "uid"),
        command=rendered.argv,
        config_hash=rendered.config_hash,
        speculation=resource.spec.speculation.enabled,
    )
    yaml.safe_dump_all(children)


@FUZZ
@given(mutated_documents())
def test_evaluate_parses_any_document_cleanly(tmp_path: Path, doc: dict[str, Any]) -> None:
    """evaluate's loading: a clean result (malformed status noted, not fatal) or InvalidSpec; never a crash."""
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        loaded = evaluate._load(str(path))
    except (LoadError, v1alpha1.InvalidSpec):
        return
    notes: list[str] = []
    state = evaluate._policy_state(loaded.status, notes)
    desired_intent(loaded.spec, state)


AUTOTUNE_KEYS = [
    "specFingerprint",
    "intentFingerprint",
    "consecutiveErrors",
    "metricsAvailable",
    "paused",
    "throttled",
    "streak",
    "lastRecommendation",
    "actuations",
    "selected",
    "off",
    "probeStarted",
    "lastProbe",
    "baseline",
    "load",
    "loadUpdated",
    "stepSamples",
    "stepSampled",
]


# Keys the nested records of status.autotune use (streak, actuations, off, baseline, step samples, intents), so
# generated documents get past the first lookup and into the conversions.
NESTED_KEYS = st.sampled_from(
    [
        "acceptance",
        "action",
        "at",
        "batch",
        "batchSchedule",
        "bucket",
        "count",
        "detail",
        "disableAboveBatchSize",
        "draftTokens",
        "enabled",
        "from",
        "k",
        "key",
        "kind",
        "method",
        "mode",
        "note",
        "numSpeculativeTokens",
        "probe",
        "reason",
        "requests",
        "reversal",
        "since",
        "speculation",
        "speed",
        "stepMs",
        "threshold",
        "to",
        "tpotMeanMs",
        "waiting",
    ]
) | st.text(max_size=12)
# What the API server can store: JSON, so no NaN or infinity (YAML files can hold them; etcd cannot).
STORED_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["2026-11-26T10:00:00Z", "Disable", "Enable", "LowAcceptance"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(NESTED_KEYS, children, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(AUTOTUNE_KEYS), STORED_JSON, max_size=6))
def test_any_current_version_autotune_status_is_read_or_reported(fields: dict[str, Any]) -> None:
    """status.autotune is free-form in the CRD: whatever the API server stores there under the current version is
    read (and then usable: the policy decides on it, it serialises back) or reported and replaced, never raised."""
    state, problem = PolicyState.from_status({"version": STATE_VERSION, **fields})
    if problem is not None:
        assert state == PolicyState()
    spec = v1alpha1.parse_resource(EXAMPLES[0]).spec
    desired_intent(spec, state)
    json.dumps(state.to_dict(), allow_nan=False)
