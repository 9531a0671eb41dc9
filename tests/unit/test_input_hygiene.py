"""What a spec may say: strict types, values that never become flags, closed sets, quantities, URLs and headers.

Each case goes through `parse_spec` (what the operator and `specpilot validate` run) and, for rules the CRD states as
schema (types, patterns, enums), through the generated CRD schema too, so the two cannot drift apart. CEL rules are
checked against the real API server in tests/cluster/test_hostile_input.py.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from specpilot.api import v1alpha1
from specpilot.api.quantity import InvalidQuantity, format_bytes, parse_quantity
from specpilot.cli.main import validate_document
from specpilot.planning.plan import kv_dtype_bytes, plan_memory
from specpilot.vllm.dialects import UnsupportedCombination, render_command

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {
    "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
    "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    """BASE with one dotted path set (lists of dicts as JSON-ish values)."""
    spec: dict[str, Any] = yaml.safe_load(yaml.safe_dump(BASE))
    node = spec
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return spec


@functools.cache
def _crd_spec_validator() -> jsonschema.Draft4Validator:
    crd = yaml.safe_load((ROOT / "crds" / "specpilot.dev_speculativedeployments.yaml").read_text())
    return jsonschema.Draft4Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def crd_errors(spec: dict[str, Any]) -> list[str]:
    return [e.message for e in _crd_spec_validator().iter_errors(spec)]


def problems(spec: dict[str, Any]) -> list[str]:
    try:
        v1alpha1.parse_spec(spec)
    except v1alpha1.InvalidSpec as err:
        return err.problems
    return []


NGRAM_CANDIDATE = {"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3}

SCHEMA_REFUSALS = [
    ("replicas", "2", "spec.replicas: Input should be a valid integer"),
    ("speculation.enabled", "false", "spec.speculation.enabled: Input should be a valid boolean"),
    ("engine.maxModelLen", 4096.5, "spec.engine.maxModelLen: Input should be a valid integer"),
    ("engine.gpuMemoryUtilization", "0.9", "spec.engine.gpuMemoryUtilization: Input should be a valid number"),
    ("engine.gpuMemoryUtilization", True, "spec.engine.gpuMemoryUtilization: Input should be a valid number"),
    ("engine.kvCacheDtype", "int3", "spec.engine.kvCacheDtype: Input should be 'auto'"),
    ("target.model", "--trust-remote-code", "spec.target.model: must be printable ASCII without spaces"),
    ("target.model", "org/model name", "spec.target.model: must be printable ASCII"),
    ("target.model", "org/model\n--x", "spec.target.model: must be printable ASCII"),
    ("target.revision", "-main", "spec.target.revision: must be printable ASCII"),
    ("target.revision", "main\t", "spec.target.revision: must be printable ASCII"),
    (
        "speculation",
        {"method": "draft_model", "draft": {"model": "--enforce-eager"}, "numSpeculativeTokens": 3},
        "spec.speculation.draft.model: must be printable ASCII",
    ),
    (
        "speculation",
        {"method": "draft_model", "draft": {"model": "org/d", "revision": "v1 --x"}, "numSpeculativeTokens": 3},
        "spec.speculation.draft.revision: must be printable ASCII",
    ),
    ("engine.servedModelName", "-api", "spec.engine.servedModelName: must be printable ASCII"),
    ("engine.servedModelName", "chat\x1b[2J", "spec.engine.servedModelName: must be printable ASCII"),
    ("engine.image", "vllm/vllm-openai:v0.33.0 --privileged", "spec.engine.image: must be printable ASCII"),
    ("engine.extraArgs", ["--enforce-eager\n--x"], "spec.engine.extraArgs[0]: must be no control characters"),
    ("engine.env", [{"name": "A=B", "value": "1"}], "spec.engine.env[0].name: must be printable ASCII without '='"),
    ("engine.env", [{"name": "VLLM_USE_V1", "value": 1}], "spec.engine.env[0].value: Input should be a valid string"),
    ("engine.env", [{"name": "X", "valueFrom": {"podRef": {}}}], "spec.engine.env[0].valueFrom.podRef: Extra inputs"),
    ("resources.gpuResourceName", "gpu", "spec.resources.gpuResourceName: must be an extended resource name"),
    ("resources.gpuResourceName", "nvidia.com/gpu ", "spec.resources.gpuResourceName: must be an extended resource"),
    ("resources.nodeSelector", {"gpu": "H100 80GB"}, "spec.resources.nodeSelector.gpu: must be a label value"),
    ("resources.nodeSelector", {"gpu": 1}, "spec.resources.nodeSelector.gpu: Input should be a valid string"),
    ("resources.tolerations", [{"effect": "Sometimes"}], "spec.resources.tolerations[0].effect: Input should be"),
    ("resources.cpu", 8, "spec.resources.cpu: Input should be a valid string"),
    ("autotune.prometheus", {"url": "http://p:99999"}, "spec.autotune.prometheus.url: must be http(s)://host[:port]"),
    ("autotune.prometheus", {"url": "http://p:9090/?x=1"}, "spec.autotune.prometheus.url: must be http(s)://"),
    ("autotune.prometheus", {"url": "http://p:9090\r\nX: y"}, "spec.autotune.prometheus.url: must be http(s)://"),
    ("autotune.prometheus", {"url": "ftp://p"}, "spec.autotune.prometheus.url: must be http(s)://"),
    (
        "autotune.prometheus",
        {"url": "http://p:9090", "headers": {"X-Scope-OrgID": "a\r\nInjected: 1"}},
        "spec.autotune.prometheus.headers.X-Scope-OrgID: must be visible ASCII, space or tab",
    ),
    (
        "autotune.prometheus",
        {"url": "http://p:9090", "headers": {"X-Scope-OrgID": "équipe"}},
        "spec.autotune.prometheus.headers.X-Scope-OrgID: must be visible ASCII",
    ),
    ("autotune.prometheus", {"connection": "Main"}, "spec.autotune.prometheus.connection: must be a DNS label"),
    (
        "autotune.prometheus",
        {"url": "http://p:9090", "authSecretRef": {"name": "prometheus-reader"}},
        "spec.autotune.prometheus.authSecretRef: was removed: a SpeculativeDeployment can no longer name a Secret",
    ),
    ("autotune.interval", "-5s", "spec.autotune.interval: must be a duration"),
    (
        "speculation.candidates",
        [{"name": f"n{i}", "method": "ngram", "numSpeculativeTokens": 3} for i in range(5)],
        "spec.speculation.candidates: List should have at most 4 items",
    ),
    (
        "speculation.candidates",
        [{"name": "Big_Draft", "method": "ngram", "numSpeculativeTokens": 3}],
        "spec.speculation.candidates[0].name: must be a DNS label",
    ),
    ("speculation.candidates", [{"method": "ngram", "numSpeculativeTokens": 3}], "spec.speculation.candidates[0].name"),
]


@pytest.mark.parametrize(
    ("path", "value", "problem"), SCHEMA_REFUSALS, ids=[f"{p}={v!r}" for p, v, _ in SCHEMA_REFUSALS]
)
def test_schema_refusals_name_the_field_and_agree_with_the_crd(path: str, value: Any, problem: str) -> None:
    spec = with_(path, value)
    found = problems(spec)
    assert any(line.startswith(problem) for line in found), found
    if "Extra inputs" in problem or "was removed" in problem:
        return  # unknown fields: the API server refuses them under kubectl's strict field validation, else prunes
    assert crd_errors(spec), "the CRD schema must refuse it too"


CEL_REFUSALS = [
    ("resources.cpu", "8 cores", "spec.resources.cpu must be a Kubernetes quantity greater than 0"),
    ("resources.cpu", "0", "spec.resources.cpu must be a Kubernetes quantity greater than 0"),
    ("resources.cpu", "-1", "spec.resources.cpu must be a Kubernetes quantity greater than 0"),
    ("resources.memory", "64GB", "spec.resources.memory must be a Kubernetes quantity greater than 0"),
    ("resources.memory", "1e1.5", "spec.resources.memory must be a Kubernetes quantity greater than 0"),
    ("resources.nodeSelector", {"bad key!": "x"}, "spec.resources.nodeSelector keys must be Kubernetes label keys"),
    ("resources.tolerations", [{"operator": "Equal", "value": "x"}], "spec.resources.tolerations: "),
    ("resources.tolerations", [{"key": "k", "tolerationSeconds": 5}], "spec.resources.tolerations: "),
    ("resources.tolerations", [{"key": "k", "operator": "Exists", "value": "v"}], "spec.resources.tolerations: "),
    ("engine.env", [{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}], "spec.engine.env: "),
    ("engine.env", [{"name": "X", "valueFrom": {}}], "spec.engine.env: an entry with valueFrom"),
    ("autotune.prometheus", {}, "spec.autotune.prometheus needs exactly one of url"),
    ("autotune.prometheus", {"url": "http://p:1", "connection": "main"}, "spec.autotune.prometheus needs exactly one"),
    (
        "autotune.prometheus",
        {"connection": "main", "insecureSkipVerify": True},
        "spec.autotune.prometheus.insecureSkipVerify and headers are set by the administrator",
    ),
    (
        "autotune.prometheus",
        {"connection": "main", "headers": {"X-Scope-OrgID": "other-tenant"}},
        "spec.autotune.prometheus.insecureSkipVerify and headers are set by the administrator",
    ),
    (
        "autotune.prometheus",
        {"url": "http://p:9090", "headers": {"Authorization": "Bearer x"}},
        "spec.autotune.prometheus.headers names must be HTTP header names",
    ),
    (
        "autotune.prometheus",
        {"url": "http://p:9090", "headers": {"X Bad": "x"}},
        "spec.autotune.prometheus.headers names must be HTTP header names",
    ),
    ("autotune.prometheus", {"url": "http://p:9090", "timeout": "0s"}, "spec.autotune.prometheus.timeout must be"),
    ("autotune.prometheus", {"url": "http://p:9090", "timeout": "61s"}, "spec.autotune.prometheus.timeout must be"),
    ("autotune.prometheus", {"url": "http://p:9090", "timeout": "1000h"}, "spec.autotune.prometheus.timeout must be"),
    ("autotune.interval", "0s", "spec.autotune.interval, window, scrapeInterval and rolloutDeadline must be greater"),
    ("autotune.rolloutDeadline", "0ms", "spec.autotune.interval, window, scrapeInterval and rolloutDeadline"),
    ("autotune.rolloutDeadline", "24h1s", "spec.autotune.rolloutDeadline must be at most 24h"),
    ("autotune.rolloutDeadline", "2000000h", "spec.autotune.rolloutDeadline must be at most 24h"),
    ("autotune.rolloutDeadline", "9999999999999h", "spec.autotune.rolloutDeadline must be at most 24h"),
    ("autotune.latency", {"p99Target": "0s"}, "spec.autotune.latency.p99Target must be greater than 0s"),
    ("autotune.latency", {"ttftDeadline": "0s"}, "spec.autotune.latency.ttftDeadline must be greater than 0s"),
    (
        "speculation.acceptance",
        {"method": "Exact", "posteriorAlpha": 0.3},
        "spec.speculation.acceptance.posteriorThreshold and posteriorAlpha are only allowed",
    ),
    (
        "speculation.acceptance",
        {"posteriorThreshold": 0.2},  # method defaults to Exact
        "spec.speculation.acceptance.posteriorThreshold and posteriorAlpha are only allowed",
    ),
    (
        "speculation",
        {"method": "ngram", "numSpeculativeTokens": 3, "adaptiveVerification": True},
        "spec.speculation.adaptiveVerification needs method draft_model, eagle, eagle3, mtp, dflash, dspark",
    ),
    ("rollout", {"maxUnavailable": 0}, "spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0"),
    (
        "rollout",
        {"maxSurge": 0, "maxUnavailable": 0, "drainSeconds": 30},
        "spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0",
    ),
    ("speculation", {"method": "dflash", "numSpeculativeTokens": 3}, "spec.speculation.draft is required"),
    ("speculation", {"method": "ngram_gpu"}, "spec.speculation.numSpeculativeTokens is required"),
    (
        "speculation",
        {"method": "dspark", "draft": {"model": "d"}, "promptLookupMin": 2},
        "spec.speculation.promptLookupMin and promptLookupMax are only allowed",
    ),
    # The declared drafter's rules hold for each candidate: CEL on the list's elements names the element, CEL at the
    # spec (rules that read spec.parallelism or the declared config) the rule's own words.
    ("speculation.candidates", [{"name": "e", "method": "eagle3"}], "spec.speculation.candidates[0].draft is required"),
    (
        "speculation.candidates",
        [NGRAM_CANDIDATE, {"name": "m", "method": "mtp", "draft": {"model": "d"}}],
        "spec.speculation.candidates[1].draft must be omitted",
    ),
    (
        "speculation.candidates",
        [{"name": "n", "method": "ngram"}],
        "spec.speculation.candidates[0].numSpeculativeTokens",
    ),
    (
        "speculation.candidates",
        [{"name": "n", "method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 4, "promptLookupMax": 2}],
        "spec.speculation.candidates[0].promptLookupMin must be less than or equal to",
    ),
    (
        "speculation.candidates",
        [{"name": "s", "method": "suffix", "promptLookupMax": 2}],
        "spec.speculation.candidates[0].promptLookupMin and promptLookupMax are only allowed",
    ),
    (
        "speculation.candidates",
        [{"name": "d", "method": "dflash", "draft": {"model": "d", "quantization": "compressed-tensors"}}],
        "spec.speculation.candidates[0].draft.weightBits is required",
    ),
    (
        "speculation.candidates",
        [
            {
                "name": "d",
                "method": "draft_model",
                "numSpeculativeTokens": 3,
                "draft": {"model": "d", "tensorParallelSize": 2},
            }
        ],
        "spec.speculation.candidates[0].draft.tensorParallelSize must be 1 or equal to",
    ),
    (
        "speculation",
        {"method": "eagle3", "draft": {"model": "e"}, "adaptiveVerification": True, "candidates": [NGRAM_CANDIDATE]},
        "spec.speculation.candidates[0].method must be draft_model, eagle, eagle3, mtp, dflash, dspark while",
    ),
    ("speculation.candidates", [NGRAM_CANDIDATE, NGRAM_CANDIDATE], "spec.speculation.candidates[1].name: 'ngram'"),
]


@pytest.mark.parametrize(("path", "value", "problem"), CEL_REFUSALS, ids=[f"{p}={v!r}" for p, v, _ in CEL_REFUSALS])
def test_rule_refusals_name_the_field(path: str, value: Any, problem: str) -> None:
    found = problems(with_(path, value))
    assert any(line.startswith(problem) for line in found), found


ACCEPTED = [
    ("resources.cpu", "7500m"),
    ("resources.memory", "64Gi"),
    ("resources.memory", "1.5e9"),
    ("resources.nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    ("resources.tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    ("resources.tolerations", [{"operator": "Exists"}]),
    ("engine.env", [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]),
    ("engine.gpuMemoryUtilization", 1),
    ("engine.kvCacheDtype", "fp8_e5m2"),
    ("target.model", "/models/llama-3.1-8b"),
    ("autotune.prometheus", {"url": "https://[::1]:9090/prom/api-root"}),
    ("autotune.prometheus", {"url": "http://thanos-query.monitoring.svc.cluster.local:10902"}),
    ("autotune.prometheus", {"connection": "monitoring"}),
    ("autotune.prometheus", {"url": "http://p:9090", "timeout": "1m"}),
    ("autotune.prometheus", {"url": "http://p:9090", "timeout": "1500ms"}),
    ("autotune.probeInterval", "0s"),
    ("autotune.rolloutDeadline", "24h"),
    ("rollout", {"maxSurge": 1}),
    ("rollout", {"maxSurge": 1, "maxUnavailable": 0, "drainSeconds": 0}),
    ("rollout", {"maxUnavailable": 2, "drainSeconds": 3600}),
    ("speculation.acceptance", {"method": "Relaxed", "posteriorThreshold": 0.2, "posteriorAlpha": 0.4}),
    ("speculation.acceptance", {"method": "Block", "draftSampling": "Probabilistic"}),
    ("autotune.workload", {"shortOutputTokens": 100, "shortOutputFraction": 0.8, "tailWideningTolerance": 0.5}),
    (
        "speculation",
        {"method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, "adaptiveVerification": True},
    ),
    ("speculation", {"method": "ngram_gpu", "numSpeculativeTokens": 3, "promptLookupMax": 4}),
    ("speculation", {"method": "dspark", "draft": {"model": "example/dspark"}, "adaptiveVerification": True}),
    (
        "speculation.candidates",
        [
            NGRAM_CANDIDATE,
            {"name": "head", "method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
            {
                "name": "d1b",
                "method": "draft_model",
                "numSpeculativeTokens": 4,
                "draft": {"model": "d", "tensorParallelSize": 1},
            },
            {
                "name": "lookup",
                "method": "ngram_gpu",
                "numSpeculativeTokens": 2,
                "promptLookupMin": 2,
                "promptLookupMax": 4,
            },
        ],
    ),
    (
        "speculation",
        {
            "method": "eagle3",
            "draft": {"model": "e"},
            "adaptiveVerification": True,
            "candidates": [
                {"name": "mtp", "method": "mtp"},
                {"name": "d", "method": "dspark", "draft": {"model": "d"}},
            ],
        },
    ),
]


@pytest.mark.parametrize(("path", "value"), ACCEPTED, ids=[f"{p}={v!r}" for p, v in ACCEPTED])
def test_valid_values_stay_valid(path: str, value: Any) -> None:
    spec = with_(path, value)
    assert problems(spec) == []
    assert crd_errors(spec) == []


# metadata: the API server checks it itself (ValidateObjectMeta), outside any CRD schema; `validate` checks the same.
METADATA_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"labels": {"tier": 1}}, "metadata.labels.tier: Input should be a valid string (got 1)"),
    ({"labels": {"tier": True}}, "metadata.labels.tier: Input should be a valid string (got True)"),
    ({"labels": {"tier": "gold plated"}}, "metadata.labels.tier: must be a label value"),
    ({"labels": {"tier": "x" * 64}}, "metadata.labels.tier: String should have at most 63 characters"),
    ({"labels": {"bad key": "x"}}, "metadata.labels.bad key.[key]: must be a Kubernetes qualified name"),
    ({"labels": {"Example.com/x": "y"}}, "metadata.labels.Example.com/x.[key]: must be a Kubernetes qualified name"),
    ({"labels": ["tier"]}, "metadata.labels: Input should be a valid dictionary"),
    ({"annotations": {"note": 5}}, "metadata.annotations.note: Input should be a valid string (got 5)"),
    ({"annotations": {"note": {"a": "b"}}}, "metadata.annotations.note: Input should be a valid string"),
    ({"annotations": {"not a key": "v"}}, "metadata.annotations: key 'not a key' must be a Kubernetes qualified"),
    ({"annotations": {"big": "x" * (256 * 1024)}}, "metadata.annotations: 262147 bytes in all, more than"),
    ({"namespace": "Team_A"}, "metadata.namespace: must be a DNS label"),
    ({"namespace": 7}, "metadata.namespace: Input should be a valid string (got 7)"),
    ({"finalizers": ["not a finalizer"]}, "metadata.finalizers[0]: must be a Kubernetes qualified name"),
]
METADATA_ACCEPTED: list[dict[str, Any]] = [
    {"labels": {"app.kubernetes.io/part-of": "chat", "tier": "", "x": "A-b_c.9"}},
    {"annotations": {"Example.COM/Note": "any text\nwith newlines, unicode é and 'quotes'", "empty": ""}},
    {"finalizers": ["example.com/cleanup"], "generateName": "chat-"},
]


def metadata_refusals(metadata: dict[str, Any]) -> list[str]:
    """What `specpilot validate` says about a valid spec under this metadata (name added)."""
    doc: dict[str, object] = {
        "apiVersion": v1alpha1.API_VERSION,
        "kind": v1alpha1.KIND,
        "metadata": {"name": "meta", **metadata},
        "spec": BASE,
    }
    return validate_document(doc)[0]


@pytest.mark.parametrize(
    ("metadata", "problem"), METADATA_REFUSALS, ids=[p.split(":")[0] for _, p in METADATA_REFUSALS]
)
def test_metadata_the_api_server_would_refuse_is_refused_by_field(metadata: dict[str, Any], problem: str) -> None:
    found = metadata_refusals(metadata)
    assert any(line.startswith(problem) for line in found), found


@pytest.mark.parametrize("metadata", METADATA_ACCEPTED, ids=[",".join(m) for m in METADATA_ACCEPTED])
def test_metadata_the_api_server_accepts_stays_valid(metadata: dict[str, Any]) -> None:
    assert metadata_refusals(metadata) == []


def test_every_kv_cache_dtype_is_sized_or_flagged_by_the_planner() -> None:
    for dtype in v1alpha1.KvCacheDtype:
        if kv_dtype_bytes(dtype, v1alpha1.Dtype.AUTO) is not None:
            continue
        plan = plan_memory(v1alpha1.parse_spec(with_("engine.kvCacheDtype", dtype.value)))
        assert "KvCacheDtypeUnknown" in {f.code for f in plan.findings}, dtype


# The API server's answers for these strings (ParseQuantity of apimachinery v0.37): tests/cluster checks the same
# table against the real server.
QUANTITIES = [
    ("0", Decimal(0)),
    ("1", Decimal(1)),
    ("500m", Decimal("0.5")),
    ("8Gi", Decimal(8 * 2**30)),
    ("1.5Gi", Decimal(3 * 2**29)),
    (".5", Decimal("0.5")),
    ("1.", Decimal(1)),
    ("+", Decimal(0)),
    ("1e3", Decimal(1000)),
    ("1E", Decimal(10**18)),
    ("2e-3", Decimal("0.002")),
    ("e5", Decimal(0)),
    ("-1", Decimal(-1)),
    ("1e1.5", None),
    ("1Ki5", None),
    ("1e", None),
    ("e-10", None),
    (".e-20", None),
    ("", None),
    (" 1", None),
    ("1 ", None),
    ("0x10", None),
    ("1_000", None),
    ("8GB", None),
    ("\u0661", None),  # ARABIC-INDIC DIGIT ONE: Python's int() would take it, Go's parser does not
]


@pytest.mark.parametrize(("text", "value"), QUANTITIES, ids=[repr(t) for t, _ in QUANTITIES])
def test_quantities_parse_as_the_api_server_parses_them(text: str, value: Decimal | None) -> None:
    if value is None:
        with pytest.raises(InvalidQuantity):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("size", "text"), [(8 * 2**30, "8Gi"), (1536 * 2**20, "1536Mi"), (10_737, "10737"), (2**60, "1Ei")]
)
def test_byte_sizes_format_exactly(size: int, text: str) -> None:
    assert format_bytes(size) == text
    assert parse_quantity(text) == size


EXTRA_ARGS_REFUSED = [
    ("--speculative_config", "--speculative-config is rendered by specpilot from spec.speculation"),
    ('--speculative-config={"method":"ngram"}', "--speculative-config is rendered by specpilot"),
    ("--speculative-config.method", "--speculative-config is rendered by specpilot"),
    ("--spec", "(as --spec, which vLLM reads as --speculative-config)"),
    ("--disable_log_stats", "--disable-log-stats is not allowed"),
    ("--disable-log", "abbreviates --disable-log-stats"),
    ("--max_model_len=4096", "--max-model-len is rendered by specpilot from spec.engine.maxModelLen"),
    ("--max-model", "(as --max-model, which vLLM reads as --max-model-len)"),
    ("--tensor_parallel_size", "--tensor-parallel-size is rendered by specpilot"),
    ("-tp", "-tp is rendered by specpilot from spec.parallelism.tensorParallelSize"),
    ("-tp=4", "-tp is rendered by specpilot"),
    ("-tp4", "would be read as -tp"),
    ("-qfp8", "would be read as -q"),
    ("--config", "--config loads arbitrary flags from a file"),
    ("--conf", "abbreviates --config"),
    ("--served_model_name", "--served-model-name is rendered by specpilot"),
    ("--port=9000", "--port is rendered by specpilot from spec.service.port"),
    ("--model=other", "--model is rendered by specpilot from spec.target.model"),
    ("--", "a bare -- would make every later token a positional argument"),
]


@pytest.mark.parametrize(("arg", "problem"), EXTRA_ARGS_REFUSED, ids=[a for a, _ in EXTRA_ARGS_REFUSED])
def test_extra_args_cannot_set_rendered_flags_in_any_spelling(arg: str, problem: str) -> None:
    spec = v1alpha1.parse_spec(with_("engine.extraArgs", ["--enforce-eager", arg]))
    with pytest.raises(UnsupportedCombination) as caught:
        render_command(spec)
    assert caught.value.field == "spec.engine.extraArgs[1]"
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "args",
    [["--enforce-eager"], ["--config-format", "hf"], ["--seed", "-1"], ["-O3"], ["--max-num-batched-tokens", "8192"]],
)
def test_ordinary_extra_args_pass_through(args: list[str]) -> None:
    rendered = render_command(v1alpha1.parse_spec(with_("engine.extraArgs", args)))
    assert list(rendered.argv[-len(args) :]) == args
