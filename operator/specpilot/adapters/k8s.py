"""Kubernetes I/O: server-side apply of owned children, our own status patches and reading Secrets.

Nothing else imports the client.

Children are written with server-side apply under one field manager and `force_conflicts` (the Kubernetes guidance
for controllers): we send every field we care about, never read-before-write, and fields other tools add (labels,
annotations, an HPA's replicas) stay theirs.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

FIELD_MANAGER = "specpilot"
APPLIED_HASH_ANNOTATION = "specpilot.dev/applied-hash"
log = logging.getLogger(__name__)


def load_credentials() -> client.ApiClient:
    """KUBECONFIG (or ~/.kube/config) when present, else the in-cluster service account."""
    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class MissingApi(RuntimeError):
    """The cluster does not serve this kind (e.g. no prometheus-operator CRDs for PodMonitor)."""


@dataclass
class KubeAdapter:
    api_client: client.ApiClient
    on_write: Callable[[str, str], None] = lambda kind, verb: None
    _dynamic: DynamicClient | None = field(default=None, init=False, repr=False)
    # Kinds the cluster does not serve (no prometheus-operator CRDs, say): remembered so ticks do not rediscover them.
    _missing: set[tuple[str, str]] = field(default_factory=set, init=False, repr=False)

    @property
    def dynamic(self) -> Any:
        """The dynamic client (untyped upstream, hence Any)."""
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api_client)  # type: ignore[no-untyped-call]
        return self._dynamic

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply one object as specpilot, taking over conflicting fields we own."""
        key = (str(obj["apiVersion"]), str(obj["kind"]))
        if key in self._missing:
            raise MissingApi(f"the cluster does not serve {key[0]} {key[1]}")
        try:
            resource = self.dynamic.resources.get(api_version=key[0], kind=key[1])
        except ResourceNotFoundError as err:
            self._missing.add(key)
            raise MissingApi(f"the cluster does not serve {key[0]} {key[1]}") from err
        self.on_write(str(obj["kind"]), "apply")
        result = self.dynamic.server_side_apply(
            resource,
            body=dict(obj),
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        applied: dict[str, Any] = result.to_dict()
        return applied

    def applied_digest(self, api_version: str, kind: str, namespace: str, name: str) -> str | None:
        """The applied-hash annotation of a live child, or None when it (or its API) does not exist."""
        try:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            live = self.dynamic.get(resource, name=name, namespace=namespace)
        except (ResourceNotFoundError, NotFoundError):
            return None
        annotations = (live.metadata.annotations or {}) if live.metadata else {}
        digest = dict(annotations).get(APPLIED_HASH_ANNOTATION)
        return str(digest) if digest is not None else ""

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """Merge-patch the status subresource; (resourceVersion, status) as written, or None when the object is gone.

        Done here rather than through kopf's patch so the caller learns which version holds its write (see
        handlers.current_status: kopf hands timers a body that may predate our last patch).
        """
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        self.on_write(f"{kind}/status", "patch")
        try:
            result = self.dynamic.patch(
                resource.subresources["status"],
                body={"status": dict(status)},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return None
        written: dict[str, Any] = result.to_dict()
        return str(written["metadata"]["resourceVersion"]), dict(written.get("status") or {})

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete a child that is no longer wanted (e.g. the PDB after scaling to one replica)."""
        try:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            self.on_write(kind, "delete")
            self.dynamic.delete(resource, name=name, namespace=namespace)
        except (ResourceNotFoundError, NotFoundError):
            return

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """Decoded Secret data (values are never logged)."""
        secret = client.CoreV1Api(self.api_client).read_namespaced_secret(name, namespace)
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
