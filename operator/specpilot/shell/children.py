"""Our children (Deployments, Services, PodDisruptionBudgets) as kopf indexes, and what they say about one object.

Children are recognised by their controller reference's UID, never by name alone. PodMonitors are not indexed (their
CRD may be absent): they are read on demand and remembered a while.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from specpilot.adapters.k8s import LiveChild
from specpilot.reconcile import core as rec
from specpilot.reconcile import manifests
from specpilot.shell.memory import BodySummary, ObjectMemory
from specpilot.shell.wiring import MANAGED, Indexes, kube

# A child we just applied may not be in the index yet; trust our own write this long to avoid writing twice.
RECENT_APPLY_GRACE_SECONDS = 30.0
POD_MONITOR_RECHECK_SECONDS = 60.0  # PodMonitors are not watched (the CRD may be absent): re-read this often
FOREIGN_RECHECK_SECONDS = 60.0  # a name another owner holds is looked up again this often


def _ownership(body: kopf.Body) -> dict[str, Any]:
    """uid and controller of a child: it is ours only if its controller reference carries our CR's UID."""
    owner = next((r for r in body.metadata.get("ownerReferences") or [] if r.get("controller")), None)
    return {
        "uid": str(body.metadata.uid),
        "resourceVersion": body.metadata.get("resourceVersion"),
        "owner": str(owner["uid"]) if owner else None,
        "controller": f"{owner['kind']}/{owner['name']}" if owner else None,
    }


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def owned_deployments(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    """The live state of our Deployments, so ticks read memory instead of the API server."""
    return {
        (namespace, name): {
            **_ownership(body),
            "metadata": {"generation": body.metadata.get("generation"), "annotations": dict(body.metadata.annotations)},
            "spec": {
                "replicas": body.spec.get("replicas"),
                "template": {
                    "metadata": {
                        "annotations": dict(body.spec.get("template", {}).get("metadata", {}).get("annotations", {}))
                    }
                },
            },
            "status": dict(body.get("status", {})),
        }
    }


def _small_child(body: kopf.Body) -> dict[str, Any]:
    return {
        **_ownership(body),
        "appliedHash": body.metadata.annotations.get(rec.ANNOTATION_APPLIED_HASH, ""),
        "spec": dict(body.spec),
    }


@kopf.index("", "v1", "services", labels=MANAGED)
async def owned_services(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    return {(namespace, name): _small_child(body)}


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def owned_disruption_budgets(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str | None, str], Any]:
    return {(namespace, name): _small_child(body)}


def indexes_of(kwargs: Mapping[str, Any]) -> Indexes:
    """kopf injects indexes as keyword arguments named after the index functions."""
    return {
        "deployments": kwargs["owned_deployments"],
        "services": kwargs["owned_services"],
        "disruption_budgets": kwargs["owned_disruption_budgets"],
    }


def first(index: kopf.Index[tuple[str, str], Any], key: tuple[str, str]) -> Any | None:
    for value in index.get(key, []):
        return value
    return None


@dataclass(frozen=True)
class LiveChildren:
    """What the indexes (and memory) say about one object's children."""

    digests: dict[str, str | None]  # "Kind/name" -> applied digest, ours only; absent: we have no such child
    uids: dict[str, str]  # "Kind/name" -> the child's own UID (delete precondition)
    specs: dict[str, dict[str, Any]]  # live spec of our Services, PDBs and PodMonitors (drift check)
    foreign: dict[str, str]  # names of our children held by another owner -> who holds them
    deployment: rec.ObservedDeployment | None
    canary: rec.ObservedDeployment | None
    recent: frozenset[str]  # applied so recently that the index may not show our write yet (our digest wins)


NO_CONTROLLER = "no controller (specpilot adopts nothing)"


@dataclass
class _Found:
    """The children found so far for one object, sorted into ours (by controller UID) and foreign ones."""

    uid: str
    digests: dict[str, str | None] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    foreign: dict[str, str] = field(default_factory=dict)

    def ours(self, key: str, entry: Mapping[str, Any]) -> bool:
        """Whether an indexed child is ours; a foreign one is recorded with who holds it."""
        if entry.get("owner") == self.uid:
            self.uids[key] = str(entry.get("uid", ""))
            return True
        self.foreign[key] = str(entry.get("controller") or NO_CONTROLLER)
        return False

    def deployment(self, key: str, entry: Mapping[str, Any] | None) -> rec.ObservedDeployment | None:
        if entry is None or not self.ours(key, entry):
            return None
        found = rec.ObservedDeployment.from_object(entry)
        self.digests[key] = found.applied_hash
        return found

    def small_child(self, key: str, entry: Mapping[str, Any] | None) -> None:
        if entry is not None and self.ours(key, entry):
            self.digests[key] = entry["appliedHash"]
            self.specs[key] = dict(entry["spec"])

    def pod_monitor(self, key: str, monitor: LiveChild | None) -> None:
        if monitor is None:
            return
        if monitor.controller_uid == self.uid:
            self.digests[key] = monitor.applied_hash or ""
            self.uids[key] = monitor.uid
            self.specs[key] = monitor.spec
        else:
            self.foreign[key] = monitor.controller or NO_CONTROLLER


def _read_pod_monitor(namespace: str, name: str, memory: ObjectMemory, fresh: bool, now: float) -> LiveChild | None:
    """The PodMonitor as last read, read again when `fresh` or when the last read is too old."""
    checked = memory.pod_monitor_checked
    if fresh or checked is None or now - checked >= POD_MONITOR_RECHECK_SECONDS:
        memory.pod_monitor = kube().read_child("monitoring.coreos.com/v1", "PodMonitor", namespace, name)
        memory.pod_monitor_checked = now
    return memory.pod_monitor


def _overlay_memory(found: _Found, memory: ObjectMemory, now: float) -> frozenset[str]:
    """Add what memory knows and the indexes may not show yet: foreign holders looked up by name, and our own
    writes of moments ago (our digest wins until the index shows it). Returns the keys applied so recently."""
    for key, (who, at) in list(memory.foreign.items()):
        if now - at >= FOREIGN_RECHECK_SECONDS:
            del memory.foreign[key]
        else:
            found.foreign.setdefault(key, who)
    recent: set[str] = set()
    for key, (digest, at) in list(memory.recent_applies.items()):
        if now - at > RECENT_APPLY_GRACE_SECONDS or found.digests.get(key) == digest:
            del memory.recent_applies[key]  # the grace ran out, or the index shows our write already
        else:
            found.digests[key] = digest
            recent.add(key)
            found.foreign.pop(key, None)
    return frozenset(recent)


def live_children(
    namespace: str, name: str, uid: str, indexes: Indexes, memory: ObjectMemory, wants_pod_monitor: bool, fresh: bool
) -> LiveChildren:
    """Our children, recognised by their controller's UID (never by name alone)."""
    found = _Found(uid)
    canary = manifests.canary_name(name)
    deployment = found.deployment(f"Deployment/{name}", first(indexes["deployments"], (namespace, name)))
    canary_deployment = found.deployment(f"Deployment/{canary}", first(indexes["deployments"], (namespace, canary)))
    found.small_child(f"Service/{name}", first(indexes["services"], (namespace, name)))
    found.small_child(f"PodDisruptionBudget/{name}", first(indexes["disruption_budgets"], (namespace, name)))
    now = time.monotonic()
    if wants_pod_monitor:
        found.pod_monitor(f"PodMonitor/{name}", _read_pod_monitor(namespace, name, memory, fresh, now))
    recent = _overlay_memory(found, memory, now)
    return LiveChildren(found.digests, found.uids, found.specs, found.foreign, deployment, canary_deployment, recent)


def fingerprint_of(summary: BodySummary, indexes: Indexes, memory: ObjectMemory) -> tuple[Any, ...] | None:
    """What a reconcile of this object decides from, as resourceVersions; None while something is pending in time
    (a write in its grace period, a refusal waiting out its backoff, a foreign holder, a PodMonitor to look up
    again, or a rollout whose deadline the operator times itself), which the periodic pass must handle even though
    no object changed."""
    if memory.recent_applies or memory.failures or memory.foreign:
        return None
    if summary.pod_monitor or summary.rollout_in_flight:
        return None
    namespace, name = summary.namespace, summary.name
    children = []
    for index, child in (
        ("deployments", name),
        ("deployments", manifests.canary_name(name)),
        ("services", name),
        ("disruption_budgets", name),
    ):
        entry = first(indexes[index], (namespace, child))
        children.append(None if entry is None else (entry.get("uid"), entry.get("resourceVersion")))
    written = memory.written[0] if memory.written else None
    return (summary.resource_version, written, *children)
