"""Random *valid* SpeculativeDeployments that exercise every field the rendered Kubernetes objects carry.

Shared by the tests that hold specpilot's own validation against the API server's: names, replicas, ports,
quantities, node selectors, tolerations, env entries, /dev/shm sizes, canary and PodMonitor. Every value drawn is one
`specpilot validate` accepts, so each rendered child must be one the API server accepts too.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from specpilot.api import v1alpha1
from specpilot.reconcile import manifests
from specpilot.reconcile.core import canary_command
from specpilot.vllm.dialects import render_command
from specpilot.vllm.intent import intent_from_spec


def children_of(doc: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The objects the operator renders for a document (spec speculation, a fixed owner uid)."""
    spec = v1alpha1.parse_spec(doc["spec"])
    owner = manifests.Owner(doc["metadata"]["name"], namespace, "0b5a9c34-7d1e-4f4e-9d0c-3c2f7a1e5b60")
    intent = intent_from_spec(spec)
    rendered = render_command(spec, intent)
    return manifests.build_children(
        spec,
        owner,
        command=rendered.argv,
        config_hash=rendered.config_hash,
        speculation=intent.enabled,
        canary=canary_command(spec, intent),
    )


LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9_.]{0,20}[a-z0-9])?\Z")
QUALIFIED = st.builds(
    lambda prefix, name: f"{prefix}/{name}" if prefix else name,
    st.sampled_from(["", "nvidia.com", "example.com", "node.kubernetes.io"]),
    LABEL,
)
CPU = st.one_of(
    st.integers(1, 256).map(str),
    st.integers(1, 256_000).map(lambda m: f"{m}m"),
    st.sampled_from(["0.5", "1.5", "1e3", "2e-3", "100u", ".5"]),
)
MEMORY = st.one_of(
    st.builds(
        lambda n, unit: f"{n}{unit}", st.integers(1, 2048), st.sampled_from(["Ki", "Mi", "Gi", "Ti", "k", "M", "G"])
    ),
    st.sampled_from(["1.5Gi", "64e9", "1073741824", "1E"]),
)
TOLERATION = st.one_of(
    st.builds(
        lambda key, effect: {"key": key, "operator": "Exists", **({"effect": effect} if effect else {})},
        QUALIFIED,
        st.sampled_from([None, "NoSchedule", "PreferNoSchedule", "NoExecute"]),
    ),
    st.builds(lambda key, value: {"key": key, "operator": "Equal", "value": value}, QUALIFIED, LABEL),
    st.builds(
        lambda key, s: {"key": key, "effect": "NoExecute", "tolerationSeconds": s}, QUALIFIED, st.integers(0, 3600)
    ),
    st.just({"operator": "Exists"}),
)
ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,30}\Z")
ENV = st.one_of(
    st.builds(lambda n, v: {"name": n, "value": v}, ENV_NAME, st.text(max_size=20)),
    st.builds(
        lambda n, s, k: {"name": n, "valueFrom": {"secretKeyRef": {"name": s, "key": k}}},
        ENV_NAME,
        st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z"),
        st.from_regex(r"\A[-._a-zA-Z0-9]{1,20}\Z"),
    ),
    st.builds(lambda n: {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, ENV_NAME),
)
NAME = st.from_regex(r"\A[a-z]([-a-z0-9]{0,40}[a-z0-9])?\Z")
# Alternative drafters that run next to an 8B target on any of the GPUs drawn below.
FITTING_CANDIDATES: list[dict[str, Any]] = [
    {"name": "ngram-5", "method": "ngram", "numSpeculativeTokens": 5, "promptLookupMin": 2},
    {"name": "suffix", "method": "suffix"},
    {"name": "gpu-lookup", "method": "ngram_gpu", "numSpeculativeTokens": 2, "promptLookupMax": 3},
    {"name": "eagle3-head", "method": "eagle3", "draft": {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
]
CANDIDATES = st.lists(
    st.sampled_from(FITTING_CANDIDATES), max_size=v1alpha1.MAX_CANDIDATES, unique_by=lambda c: str(c["name"])
)


@st.composite
def valid_resources(draw: st.DrawFn) -> dict[str, Any]:
    """A whole SpeculativeDeployment document whose spec specpilot accepts."""
    replicas = draw(st.integers(0, 5))
    canary = replicas >= 2 and draw(st.booleans())
    resources: dict[str, Any] = {
        "gpusPerReplica": draw(st.sampled_from([1, 2, 4, 8])),
        "gpuMemoryGiB": draw(st.sampled_from([24, 40, 80, 141])),
        "gpuResourceName": draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "example.com/accelerator-x"])),
        "shmSizeGiB": draw(st.one_of(st.sampled_from([8, 0.5, 16]), st.floats(1e-6, 1024))),
    }
    if draw(st.booleans()):
        resources["cpu"] = draw(CPU)
    if draw(st.booleans()):
        resources["memory"] = draw(MEMORY)
    if draw(st.booleans()):
        resources["nodeSelector"] = draw(st.dictionaries(QUALIFIED, LABEL, max_size=3))
    if draw(st.booleans()):
        resources["tolerations"] = draw(st.lists(TOLERATION, max_size=3))
    engine: dict[str, Any] = {
        "image": draw(
            st.sampled_from(["vllm/vllm-openai:v0.33.0", "registry.example.com:5000/vllm@sha256:" + "a" * 64])
        ),
        "version": "0.33.0",
        "maxModelLen": draw(st.sampled_from([2048, 8192])),
    }
    if draw(st.booleans()):
        engine["env"] = draw(st.lists(ENV, max_size=3, unique_by=lambda e: e["name"]))
    spec: dict[str, Any] = {
        "replicas": replicas,
        "engine": engine,
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": draw(st.integers(1, 8))},
        "resources": resources,
        "service": {"port": draw(st.integers(1, 65535))},
        "monitoring": {"podMonitor": draw(st.booleans())},
        "autotune": {
            "mode": "Recommend",
            "rolloutDeadline": draw(st.sampled_from(["1s", "15m", "2h", "250ms"])),
            "canary": {"enabled": canary},
        },
    }
    candidates = draw(CANDIDATES)
    if candidates:
        spec["speculation"]["candidates"] = candidates
    if draw(st.booleans()):
        surge = draw(st.integers(0, 2))
        spec["rollout"] = {
            "maxSurge": surge,
            "maxUnavailable": draw(st.integers(0 if surge else 1, 2)),
            "drainSeconds": draw(st.integers(0, 3600)),
        }
    return {
        "apiVersion": v1alpha1.API_VERSION,
        "kind": v1alpha1.KIND,
        "metadata": {"name": draw(NAME)},
        "spec": spec,
    }
