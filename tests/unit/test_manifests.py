"""Child-object builders: owner references, labels, GPU resources, probes, rollout strategy."""

from __future__ import annotations

import re
from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.signals.promql import Scope
from specpilot.reconcile import manifests

OWNER = manifests.Owner(name="llama", namespace="inference", uid="1234-uid")
COMMAND = ("vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000")


def spec(**overrides: Any) -> v1alpha1.SpeculativeDeploymentSpec:
    raw: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0"},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
        **overrides,
    }
    return v1alpha1.parse_spec(raw)


def deployment(s: v1alpha1.SpeculativeDeploymentSpec, config_hash: str = "abc123") -> dict[str, Any]:
    return manifests.build_deployment(s, OWNER, command=COMMAND, config_hash=config_hash, speculation=True)


def test_build_deployment_sets_controller_owner_reference() -> None:
    ref = deployment(spec())["metadata"]["ownerReferences"][0]
    assert ref == {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "name": "llama",
        "uid": "1234-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_build_deployment_puts_config_hash_on_pods_not_selector() -> None:
    dep = deployment(spec(), "feedbeef00")
    template = dep["spec"]["template"]["metadata"]
    assert template["labels"][manifests.LABEL_CONFIG_HASH] == "feedbeef00"
    assert template["annotations"][manifests.ANNOTATION_CONFIG_HASH] == "feedbeef00"
    assert manifests.LABEL_CONFIG_HASH not in dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= template["labels"].items()


def test_build_deployment_runs_exactly_the_rendered_command() -> None:
    container = deployment(spec())["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == list(COMMAND)
    assert "args" not in container


@pytest.mark.parametrize(
    ("resources", "expected_limits"),
    [
        ({}, {"nvidia.com/gpu": "1"}),
        ({"gpusPerReplica": 2}, {"nvidia.com/gpu": "2"}),
        ({"gpusPerReplica": 4, "gpuResourceName": "amd.com/gpu"}, {"amd.com/gpu": "4"}),
        ({"cpu": "8", "memory": "64Gi"}, {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}),
    ],
)
def test_build_deployment_requests_gpus(resources: dict[str, Any], expected_limits: dict[str, str]) -> None:
    container = deployment(spec(resources=resources))["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": expected_limits, "requests": expected_limits}


@pytest.mark.parametrize(
    ("rollout", "surge", "unavailable", "budget"),
    [
        ({}, 0, 1, 1),  # default: no spare GPUs, one pod at a time
        ({"maxSurge": 1}, 1, 0, 1),  # surge: a new pod first; a node drain still cannot surge, so the PDB allows 1
        ({"maxSurge": 2, "maxUnavailable": 1}, 2, 1, 1),
        ({"maxUnavailable": 2}, 0, 2, 2),
    ],
)
def test_rollout_strategy_and_disruption_budget_agree(
    rollout: dict[str, Any], surge: int, unavailable: int, budget: int
) -> None:
    made = spec(replicas=4, rollout=rollout)
    strategy = deployment(made)["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
    pdb = manifests.build_pod_disruption_budget(made, OWNER)
    assert pdb is not None
    assert pdb["spec"]["maxUnavailable"] == budget


def test_both_surge_and_unavailability_zero_is_refused() -> None:
    with pytest.raises(v1alpha1.InvalidSpec, match=r"spec\.rollout\.maxSurge and spec\.rollout\.maxUnavailable"):
        spec(rollout={"maxUnavailable": 0})


@pytest.mark.parametrize(
    ("overrides", "drain", "grace"),
    [
        ({}, 300, 340),  # 8192 tokens x 50 ms, capped at 300; + preStop 10 + margin 30
        ({"rollout": {"drainSeconds": 45}}, 45, 85),
        ({"rollout": {"drainSeconds": 0}}, 0, 40),
        ({"engine": {"image": "i", "version": "0.33.0", "maxModelLen": 1024}}, 52, 92),  # 51.2 s rounded up
    ],
)
def test_pods_drain_within_their_grace_period(overrides: dict[str, Any], drain: int, grace: int) -> None:
    pod = deployment(spec(**overrides))["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": manifests.PRE_STOP_SECONDS}}}
    assert pod["terminationGracePeriodSeconds"] == grace
    assert grace > manifests.PRE_STOP_SECONDS + drain


@pytest.mark.parametrize(
    ("replicas", "rollout", "waves"),
    [(0, {}, 1), (1, {}, 1), (4, {}, 4), (4, {"maxSurge": 1}, 4), (4, {"maxSurge": 1, "maxUnavailable": 1}, 2),
     (5, {"maxUnavailable": 2}, 3), (40, {}, 40)],
)  # fmt: skip
def test_the_rollout_budget_scales_with_the_waves_of_pods(replicas: int, rollout: dict[str, Any], waves: int) -> None:
    made = spec(replicas=replicas, rollout=rollout)
    assert manifests.rollout_waves(made, replicas) == waves
    assert manifests.rollout_budget_seconds(made, replicas) == waves * manifests.pod_replacement_seconds(made)


def test_build_deployment_probes_vllm_health() -> None:
    container = deployment(spec())["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # weights of large models take minutes to load: the startup probe must allow it
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 1800


def test_build_deployment_mounts_shared_memory() -> None:
    pod = deployment(spec(resources={"shmSizeGiB": 16}))["spec"]["template"]["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


def test_build_deployment_user_env_overrides_defaults() -> None:
    env = deployment(spec(engine={"image": "i", "version": "0.33.0", "env": [{"name": "DO_NOT_TRACK", "value": "0"}]}))
    entries = env["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in entries if e["name"] == "DO_NOT_TRACK"] == [{"name": "DO_NOT_TRACK", "value": "0"}]


def test_build_deployment_progress_deadline_is_one_pod_stopping_then_loading() -> None:
    made = deployment(spec(autotune={"rolloutDeadline": "20m"}, rollout={"drainSeconds": 60}))
    assert made["spec"]["progressDeadlineSeconds"] == (10 + 60 + 30) + 1200  # grace period + rolloutDeadline


@pytest.mark.parametrize(("replicas", "has_pdb"), [(0, False), (1, False), (2, True), (5, True)])
def test_build_pod_disruption_budget_only_for_several_replicas(replicas: int, has_pdb: bool) -> None:
    pdb = manifests.build_pod_disruption_budget(spec(replicas=replicas), OWNER)
    assert (pdb is not None) == has_pdb


@pytest.mark.parametrize(
    ("overrides", "kinds"),
    [
        ({}, ["Deployment", "Service"]),
        ({"replicas": 2}, ["Deployment", "Service", "PodDisruptionBudget"]),
        (
            {"replicas": 2, "monitoring": {"podMonitor": True}},
            ["Deployment", "Service", "PodDisruptionBudget", "PodMonitor"],
        ),
    ],
)
def test_build_children_kinds(overrides: dict[str, Any], kinds: list[str]) -> None:
    children = manifests.build_children(spec(**overrides), OWNER, command=COMMAND, config_hash="h", speculation=True)
    assert [c["kind"] for c in children] == kinds
    for child in children:
        assert child["metadata"]["namespace"] == "inference"
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specpilot"


def test_build_pod_monitor_copies_the_labels_the_queries_select_on() -> None:
    monitor = manifests.build_pod_monitor(spec(), OWNER)
    assert monitor["spec"]["podTargetLabels"] == ["specpilot.dev/deployment", "specpilot.dev/config-hash"]
    scope = Scope(namespace="inference", deployment="llama", config_hash="h")
    # prometheus-operator sanitises label names: every character outside [a-zA-Z0-9_] becomes "_"
    sanitised = {re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in monitor["spec"]["podTargetLabels"]}
    assert sanitised == {scope.deployment_label, scope.config_hash_label}


def test_build_service_selects_the_deployment_pods() -> None:
    svc = manifests.build_service(spec(service={"port": 9000}), OWNER)
    assert svc["spec"]["selector"] == manifests.serving_labels(OWNER)
    assert svc["spec"]["ports"][0]["port"] == 9000


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_a_canary_is_its_own_deployment_behind_the_same_service() -> None:
    base = spec(replicas=3)
    canary = manifests.CanaryCommand(command=["vllm", "serve", "plain"], config_hash="c0ffee", speculation=False)
    children = manifests.build_children(
        base, OWNER, command=["vllm", "serve", "spec"], config_hash="5bec", speculation=True, canary=canary
    )
    deployments = {c["metadata"]["name"]: c for c in children if c["kind"] == "Deployment"}
    assert sorted(deployments) == ["llama", "llama-canary"]
    main, other = deployments["llama"], deployments["llama-canary"]
    assert (main["spec"]["replicas"], other["spec"]["replicas"]) == (2, 1)
    assert other["spec"]["template"]["spec"]["containers"][0]["command"] == ["vllm", "serve", "plain"]
    assert other["spec"]["template"]["metadata"]["annotations"]["specpilot.dev/speculation"] == "off"
    main_pod = main["spec"]["template"]["metadata"]["labels"]
    canary_pod = other["spec"]["template"]["metadata"]["labels"]
    assert canary_pod["specpilot.dev/config-hash"] == "c0ffee"
    assert (main_pod["specpilot.dev/role"], canary_pod["specpilot.dev/role"]) == ("serving", "canary")
    # two controllers must never claim the same pods; the Service, PDB and metrics see both
    assert matches(main["spec"]["selector"]["matchLabels"], main_pod)
    assert not matches(main["spec"]["selector"]["matchLabels"], canary_pod)
    assert matches(other["spec"]["selector"]["matchLabels"], canary_pod)
    assert not matches(other["spec"]["selector"]["matchLabels"], main_pod)
    for child in children:
        if child["kind"] == "Service":
            selector = child["spec"]["selector"]
        elif child["kind"] in ("PodDisruptionBudget", "PodMonitor"):
            selector = child["spec"]["selector"]["matchLabels"]
        else:
            continue
        assert matches(selector, main_pod), child["kind"]
        assert matches(selector, canary_pod), child["kind"]
    assert canary_pod["specpilot.dev/deployment"] == main_pod["specpilot.dev/deployment"] == "llama"


@pytest.mark.parametrize(
    ("deadline", "seconds"), [(None, 1800), ("20m", 1200), ("65s", 65), ("10s", 60), ("24h", 86400)]
)
def test_startup_probe_budget_equals_the_rollout_deadline(deadline: str | None, seconds: int) -> None:
    """A pod is neither killed while its rollout may still succeed, nor left loading after it was declared failed."""
    made = spec(autotune={"rolloutDeadline": deadline} if deadline else {})
    startup = deployment(made)["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert manifests.rollout_deadline_seconds(made) == seconds
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert seconds <= budget < seconds + startup["periodSeconds"]
