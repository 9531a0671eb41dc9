"""Pure builders for the objects a SpeculativeDeployment owns: Deployment, Service, PodMonitor, PodDisruptionBudget.

The builders take the already-rendered vLLM command and its config hash, so they never decide *what* vLLM runs, only
*how* it is packaged. Every object carries the controller owner reference (garbage collection removes it with the CR)
and the recommended labels; nothing copies Argo CD tracking labels from the CR, so Argo CD never
takes the generated children for its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.api import rollout, v1alpha1
from specpilot.api.durations import parse_duration
from specpilot.api.quantity import format_bytes

LABEL_DEPLOYMENT = f"{v1alpha1.GROUP}/deployment"
LABEL_CONFIG_HASH = f"{v1alpha1.GROUP}/config-hash"
LABEL_ROLE = f"{v1alpha1.GROUP}/role"
ANNOTATION_CONFIG_HASH = f"{v1alpha1.GROUP}/config-hash"
ANNOTATION_SPECULATION = f"{v1alpha1.GROUP}/speculation"
HTTP_PORT_NAME = "http"
# A stopping pod first sleeps in its preStop hook, still serving, while the endpoint controller withdraws it from the
# Service's EndpointSlices and proxies and gateways stop sending it new requests; only then does vLLM get SIGTERM.
PRE_STOP_SECONDS = 10
# After the drain, vLLM tears down its engine core and workers (and frees the GPUs); the grace period leaves this
# much beyond preStop + drain before the kubelet kills the container.
TERMINATION_MARGIN_SECONDS = 30
# Loading 70B+ weights can take many minutes. The startup probe gets exactly the rollout deadline before liveness
# takes over (startup_probe_failures), so a pod is neither killed while the rollout may still succeed nor left
# loading after the operator declared the rollout failed.
STARTUP_PROBE_PERIOD_SECONDS = 10
MIN_ROLLOUT_DEADLINE_SECONDS = 60


def rollout_deadline_seconds(spec: v1alpha1.SpeculativeDeploymentSpec) -> int:
    """Time one new pod may take to start and load its weights: spec.autotune.rolloutDeadline, at least one minute."""
    return max(MIN_ROLLOUT_DEADLINE_SECONDS, round(parse_duration(spec.autotune.rollout_deadline)))


def termination_grace_seconds(spec: v1alpha1.SpeculativeDeploymentSpec) -> int:
    """The pod's terminationGracePeriodSeconds: the preStop sleep, the drain, and a margin for vLLM's teardown.

    The grace period counts from the start of preStop, so it must cover both; the drain is the spec's even where the
    vLLM version cannot drain (that pod exits sooner, and a grace period is only an upper bound).
    """
    return PRE_STOP_SECONDS + rollout.drain_seconds(spec) + TERMINATION_MARGIN_SECONDS


def pod_replacement_seconds(spec: v1alpha1.SpeculativeDeploymentSpec) -> int:
    """The Deployment's progressDeadlineSeconds: between two steps of progress an old pod stops (up to its grace
    period, and without surge its GPUs are only free then) and a new one loads its weights (the rollout deadline)."""
    return termination_grace_seconds(spec) + rollout_deadline_seconds(spec)


def rollout_waves(spec: v1alpha1.SpeculativeDeploymentSpec, pods: int) -> int:
    """How many rounds of replacement `pods` pods need: maxSurge + maxUnavailable are replaced at a time."""
    at_once = max(1, rollout.max_surge(spec) + rollout.max_unavailable(spec))
    return max(1, -(-pods // at_once))


def rollout_budget_seconds(spec: v1alpha1.SpeculativeDeploymentSpec, pods: int) -> int:
    """How long a whole rollout of `pods` pods may take before the operator declares it failed: one pod replacement
    per wave, so a deployment of many large replicas is not failed for being large."""
    return rollout_waves(spec, pods) * pod_replacement_seconds(spec)


def startup_probe_failures(spec: v1alpha1.SpeculativeDeploymentSpec) -> int:
    """Failures the startup probe allows: its budget (period x failures) covers the whole rollout deadline."""
    return -(-rollout_deadline_seconds(spec) // STARTUP_PROBE_PERIOD_SECONDS)


def container_security_context() -> dict[str, Any]:
    """What the vLLM container may do beyond running vLLM: nothing.

    vLLM needs no extra privileges and no capabilities (NCCL over NVLink/PCIe and /dev/shm work without them).
    Not set, because the official image needs them (docs/security.md): runAsNonRoot (it runs as root and
    caches under /root/.cache) and readOnlyRootFilesystem (vLLM, Triton and torch.compile write to the filesystem).
    """
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@dataclass(frozen=True)
class Owner:
    """The SpeculativeDeployment that owns the children (same namespace: cross-namespace owners are not allowed)."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": v1alpha1.API_VERSION,
            "kind": v1alpha1.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def canary_name(name: str) -> str:
    """The canary Deployment of the SpeculativeDeployment `name`."""
    return f"{name}-canary"


def main_replicas(spec: v1alpha1.SpeculativeDeploymentSpec, *, with_canary: bool, trial: bool = False) -> int:
    """Replicas of the main Deployment: the canary, when there is one, is one of spec.replicas. A trial pod is one of
    them too, unless spec.rollout allows surge: then it is the extra pod and every replica keeps serving. Where
    spec.autotune.canary already gives up a replica, the trial takes the canary's place."""
    if trial and rollout.max_surge(spec) >= 1 and not spec.autotune.canary.enabled:
        return spec.replicas
    return spec.replicas - 1 if with_canary else spec.replicas


def selector_labels(owner: Owner, *, canary: bool = False) -> dict[str, str]:
    """Labels that select one Deployment's pods; immutable, so the config hash is not among them.

    The canary is its own instance, so the two Deployments' selectors never overlap (two controllers claiming the
    same pods fight); both keep the deployment label, which is what the Service and the metrics select on.
    """
    instance = canary_name(owner.name) if canary else owner.name
    return {"app.kubernetes.io/instance": instance, LABEL_DEPLOYMENT: owner.name}


def serving_labels(owner: Owner) -> dict[str, str]:
    """Every pod of this SpeculativeDeployment, canary included: the Service, PDB and PodMonitor select these."""
    return {LABEL_DEPLOYMENT: owner.name}


def common_labels(owner: Owner, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "specpilot",
        "app.kubernetes.io/part-of": "specpilot",
        **selector_labels(owner),
    }


def _metadata(owner: Owner, component: str, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or owner.name,
        "namespace": owner.namespace,
        "labels": common_labels(owner, component),
        "ownerReferences": [owner.reference()],
    }


def _http_probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": HTTP_PORT_NAME},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def _resources(spec: v1alpha1.SpeculativeDeploymentSpec) -> dict[str, Any]:
    res = spec.resources
    limits: dict[str, str] = {res.gpu_resource_name: str(res.gpus_per_replica)}
    if res.cpu:
        limits["cpu"] = res.cpu
    if res.memory:
        limits["memory"] = res.memory
    # Extended resources must have requests == limits; CPU and memory are pinned too for a Guaranteed pod.
    return {"limits": dict(limits), "requests": dict(limits)}


def shm_size_limit(spec: v1alpha1.SpeculativeDeploymentSpec) -> str:
    """spec.resources.shmSizeGiB as an exact Kubernetes quantity ("8Gi", "1536Mi"); "1e-05Gi" would not parse."""
    return format_bytes(max(1, math.ceil(spec.resources.shm_size_gi_b * 2**30)))


def _env(spec: v1alpha1.SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    defaults = [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}, {"name": "DO_NOT_TRACK", "value": "1"}]
    user = [entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in spec.engine.env]
    user_names = {entry["name"] for entry in user}
    return [e for e in defaults if e["name"] not in user_names] + user


def build_deployment(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    owner: Owner,
    *,
    command: Sequence[str],
    config_hash: str,
    speculation: bool,
    canary: bool = False,
    replicas: int | None = None,
) -> dict[str, Any]:
    """The vLLM Deployment: one pod per replica running exactly `command`.

    The config hash sits on the pod template, so a changed command line rolls the pods and an unchanged one does not.
    The rollout follows spec.rollout (default: one pod at a time without surge, as GPU nodes rarely have a spare GPU
    for an extra pod); each stopping pod drains (preStop, then vLLM's --shutdown-timeout) within its grace period.
    """
    selector = selector_labels(owner, canary=canary)
    pod_labels = {
        **common_labels(owner, "inference-server"),
        **selector,
        LABEL_ROLE: "canary" if canary else "serving",
        LABEL_CONFIG_HASH: config_hash,
    }
    pod_annotations = {ANNOTATION_CONFIG_HASH: config_hash, ANNOTATION_SPECULATION: "on" if speculation else "off"}
    pod_spec = _pod_spec(spec, _container(spec, command))
    metadata = _metadata(owner, "inference-server", canary_name(owner.name) if canary else None)
    metadata["labels"].update(selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**metadata, "annotations": {ANNOTATION_CONFIG_HASH: config_hash}},
        "spec": {
            "replicas": spec.replicas if replicas is None else replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": rollout.max_surge(spec), "maxUnavailable": rollout.max_unavailable(spec)},
            },
            "progressDeadlineSeconds": pod_replacement_seconds(spec),
            "revisionHistoryLimit": 3,
            "template": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod_spec},
        },
    }


def _container(spec: v1alpha1.SpeculativeDeploymentSpec, command: Sequence[str]) -> dict[str, Any]:
    """The vLLM container: the command line, the serving port, probes and the drain's preStop."""
    return {
        "name": "vllm",
        "image": spec.engine.image,
        "command": list(command),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": spec.service.port, "protocol": "TCP"}],
        "env": _env(spec),
        "resources": _resources(spec),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": "/root/.cache"}],
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "startupProbe": _http_probe(STARTUP_PROBE_PERIOD_SECONDS, startup_probe_failures(spec)),
        "readinessProbe": _http_probe(5, 3),
        "livenessProbe": _http_probe(10, 6),
        "securityContext": container_security_context(),
    }


def _pod_spec(spec: v1alpha1.SpeculativeDeploymentSpec, container: dict[str, Any]) -> dict[str, Any]:
    """The pod around the container: grace period, volumes, placement, and no API token or Service env vars."""
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
        # no API token in a pod that runs a user-chosen image; no Service env vars (a Service named "vllm" would set
        # VLLM_PORT, which vLLM reads as its own setting)
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size_limit(spec)}},
            {"name": "cache", "emptyDir": {}},
        ],
    }
    if spec.resources.node_selector:
        pod_spec["nodeSelector"] = dict(spec.resources.node_selector)
    if spec.resources.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec.resources.tolerations
        ]
    return pod_spec


def build_service(spec: v1alpha1.SpeculativeDeploymentSpec, owner: Owner) -> dict[str, Any]:
    """ClusterIP Service on vLLM's OpenAI-compatible port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, "inference-server"),
        "spec": {
            "type": "ClusterIP",
            "selector": serving_labels(owner),
            "ports": [
                {"name": HTTP_PORT_NAME, "port": spec.service.port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


# Metric labels the autotuner's queries select on (autotune.signals.promql.Scope): Prometheus derives them from the pod
# labels by sanitising the names, through PodMonitor podTargetLabels or a labelmap rule alike.
METRIC_LABEL_DEPLOYMENT = "specpilot_dev_deployment"
METRIC_LABEL_CONFIG_HASH = "specpilot_dev_config_hash"


def build_pod_monitor(spec: v1alpha1.SpeculativeDeploymentSpec, owner: Owner) -> dict[str, Any]:
    """A prometheus-operator PodMonitor scraping /metrics and labelling series for the autotuner's queries."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(owner, "monitoring"),
        "spec": {
            "selector": {"matchLabels": serving_labels(owner)},
            "namespaceSelector": {"matchNames": [owner.namespace]},
            "podTargetLabels": [LABEL_DEPLOYMENT, LABEL_CONFIG_HASH],
            "podMetricsEndpoints": [
                {"port": HTTP_PORT_NAME, "path": "/metrics", "interval": spec.autotune.scrape_interval}
            ],
        },
    }


def disruption_budget(spec: v1alpha1.SpeculativeDeploymentSpec) -> int:
    """Pods a voluntary disruption (a node drain) may take down at once: what a rollout may (spec.rollout
    maxUnavailable), at least 1, since an eviction cannot surge and a budget of 0 would block every node drain."""
    return max(1, rollout.max_unavailable(spec))


def build_pod_disruption_budget(spec: v1alpha1.SpeculativeDeploymentSpec, owner: Owner) -> dict[str, Any] | None:
    """Keep the replicas a rollout keeps serving also serving during node drains; none for a single replica (its
    only possible budget, 1, protects nothing, and 0 would block node drains)."""
    if spec.replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(owner, "inference-server"),
        "spec": {"maxUnavailable": disruption_budget(spec), "selector": {"matchLabels": serving_labels(owner)}},
    }


@dataclass(frozen=True)
class CanaryCommand:
    """What the canary replica runs: the other mode's command line and its config hash, or a config on trial."""

    command: Sequence[str]
    config_hash: str
    speculation: bool
    trial: bool = False  # a config on trial (progressive actuation), not the other mode of spec.autotune.canary


def build_children(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    owner: Owner,
    *,
    command: Sequence[str],
    config_hash: str,
    speculation: bool,
    canary: CanaryCommand | None = None,
) -> list[dict[str, Any]]:
    """Every child object in apply order: the Deployments first, since they are what serves and what a new resource
    waits for; the Service after them (its endpoints follow the pods whenever they become ready). Measured in a burst
    of 300 creations on the local API server: a Service apply took 5.5 s on average (each new Service also gets a
    cluster IP), a Deployment apply 0.45 s, and the Service ahead of it delayed every Deployment.

    With a canary, one of spec.replicas runs in the canary Deployment and the rest in the main one.
    """
    children = [
        build_deployment(
            spec,
            owner,
            command=command,
            config_hash=config_hash,
            speculation=speculation,
            replicas=main_replicas(spec, with_canary=canary is not None, trial=canary is not None and canary.trial),
        ),
    ]
    if canary is not None:
        children.append(
            build_deployment(
                spec,
                owner,
                command=canary.command,
                config_hash=canary.config_hash,
                speculation=canary.speculation,
                canary=True,
                replicas=1,
            )
        )
    children.append(build_service(spec, owner))
    pdb = build_pod_disruption_budget(spec, owner)
    if pdb is not None:
        children.append(pdb)
    if spec.monitoring.pod_monitor:
        children.append(build_pod_monitor(spec, owner))
    return children
