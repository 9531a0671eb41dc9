"""Kubernetes I/O: server-side apply of owned children, reading them back, and our own status patches.

Nothing else imports the client.

Children are written with server-side apply under one field manager and `force_conflicts` (the Kubernetes guidance
for controllers): we send every field we care about, never read-before-write, and fields other tools add (labels,
annotations, an HPA's replicas) stay theirs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, DynamicApiError, NotFoundError, ResourceNotFoundError

FIELD_MANAGER = "specpilot"
APPLIED_HASH_ANNOTATION = "specpilot.dev/applied-hash"
log = logging.getLogger(__name__)


def load_credentials(concurrency: int = 1) -> client.ApiClient:
    """KUBECONFIG (or ~/.kube/config) when present, else the in-cluster service account.

    The connection pool holds `concurrency` connections: with fewer than the threads that call the API server at once,
    urllib3 discards the surplus connection after each request ("Connection pool is full"), and every later request
    pays a new TLS handshake: measured in a burst of 300 creations with 20 handler threads and the default pool of 10.
    """
    configuration = client.Configuration()
    try:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, concurrency)
    return client.ApiClient(configuration)


MISSING_API_RECHECK_SECONDS = 60.0  # a kind the cluster did not serve is looked up again after this


class MissingApi(RuntimeError):
    """The cluster does not serve this kind (e.g. no prometheus-operator CRDs for PodMonitor)."""


class WriteRefused(RuntimeError):
    """The API server refused a write; `permanent` when the same request will always be refused (a 4xx other than
    conflict or throttling), so the caller must not retry it until what it sends changes."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.permanent = status is not None and 400 <= status < 500 and status not in (408, 409, 429)


class StaleStatus(RuntimeError):
    """A status write with a resourceVersion precondition found the object changed since we read it."""


def _refused(err: Exception) -> WriteRefused:
    """The API server's own words (Status.message), not the client's wrapper text."""
    status = getattr(err, "status", None)
    body = getattr(err, "body", None) or getattr(err, "summary", None)
    message = str(err)
    if isinstance(body, (str, bytes)):
        try:
            message = str(json.loads(body).get("message") or message)
        except ValueError:
            message = str(body)[:500]
    elif callable(body):
        message = str(body())
    return WriteRefused(int(status) if status is not None else None, message[:1000])


@dataclass(frozen=True)
class LiveChild:
    """Who controls a live object, and the spec fields the drift check compares."""

    uid: str
    controller_uid: str | None
    controller: str | None  # "Kind/name" of the controller
    applied_hash: str | None
    spec: dict[str, Any]


def live_child(obj: Mapping[str, Any]) -> LiveChild:
    meta = obj.get("metadata") or {}
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    return LiveChild(
        uid=str(meta.get("uid", "")),
        controller_uid=str(owner["uid"]) if owner else None,
        controller=f"{owner['kind']}/{owner['name']}" if owner else None,
        applied_hash=(meta.get("annotations") or {}).get(APPLIED_HASH_ANNOTATION),
        spec=dict(obj.get("spec") or {}),
    )


def _json(response: Any) -> dict[str, Any]:
    """The body of a raw response. Requests are sent with `serialize=False`: the dynamic client would otherwise turn
    every answer into nested ResourceField objects (and callers back into dicts), most of a reconcile's own CPU."""
    parsed: dict[str, Any] = json.loads(response.data)
    return parsed


@dataclass
class KubeAdapter:
    api_client: client.ApiClient
    on_write: Callable[[str, str], None] = lambda kind, verb: None
    # (kind, verb, seconds) of every request: the API server's share of a reconcile, told apart from the operator's.
    on_request: Callable[[str, str, float], None] = lambda kind, verb, seconds: None
    _dynamic: DynamicClient | None = field(default=None, init=False, repr=False)
    # Kinds the cluster did not serve (no prometheus-operator CRDs, say), with when discovery said so: looked up again
    # only after MISSING_API_RECHECK_SECONDS, so ticks do not rediscover them and a CRD installed later is found.
    _missing: dict[tuple[str, str], float] = field(default_factory=dict, init=False, repr=False)

    @property
    def dynamic(self) -> Any:
        """The dynamic client (untyped upstream, hence Any)."""
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api_client)  # type: ignore[no-untyped-call]
        return self._dynamic

    @contextmanager
    def _timed(self, kind: str, verb: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.on_request(kind, verb, time.monotonic() - started)

    def _served(self, api_version: str, kind: str) -> Any:
        """The resource of a kind, or MissingApi while the cluster does not serve it (rediscovered now and then)."""
        key = (api_version, kind)
        missing_since = self._missing.get(key)
        if missing_since is not None and time.monotonic() - missing_since < MISSING_API_RECHECK_SECONDS:
            raise MissingApi(f"the cluster does not serve {api_version} {kind}")
        try:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as err:  # the discovery client invalidated its cache before saying so
            self._missing[key] = time.monotonic()
            raise MissingApi(f"the cluster does not serve {api_version} {kind}") from err
        self._missing.pop(key, None)
        return resource

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply one object as specpilot, taking over conflicting fields we own."""
        resource = self._served(str(obj["apiVersion"]), str(obj["kind"]))
        self.on_write(str(obj["kind"]), "apply")
        try:
            with self._timed(str(obj["kind"]), "apply"):
                response = self.dynamic.server_side_apply(
                    resource,
                    body=dict(obj),
                    namespace=obj["metadata"].get("namespace"),
                    field_manager=FIELD_MANAGER,
                    force_conflicts=True,
                    serialize=False,
                )
        except (DynamicApiError, ApiException) as err:
            refused = _refused(err)
            if refused.status == 404:  # server-side apply creates: 404 may mean the kind went away (a CRD deleted)
                self.dynamic.resources.invalidate_cache()
                self._served(str(obj["apiVersion"]), str(obj["kind"]))  # MissingApi if so
            raise refused from err
        return _json(response)

    def read_child(self, api_version: str, kind: str, namespace: str, name: str) -> LiveChild | None:
        """A live object by name (its controller, applied hash and spec), or None when it (or its API) is absent."""
        try:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            with self._timed(kind, "get"):
                response = self.dynamic.get(resource, name=name, namespace=namespace, serialize=False)
        except (ResourceNotFoundError, NotFoundError):
            return None
        return live_child(_json(response))

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> tuple[str, dict[str, Any]] | None:
        """Merge-patch the status subresource; (resourceVersion, status) as written, or None when the object is gone.

        Done here rather than through kopf's patch so the caller learns which version holds its write (see
        reconcile.current_status: the body the watch delivered may predate our last patch). With
        `resource_version`, the API server applies the patch only to that version (raises StaleStatus otherwise):
        a decision made from one version of the object is never written over a newer one. Any other refusal raises
        WriteRefused.
        """
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        self.on_write(f"{kind}/status", "patch")
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            with self._timed(f"{kind}/status", "patch"):
                response = self.dynamic.patch(
                    resource.subresources["status"],
                    body=body,
                    name=name,
                    namespace=namespace,
                    content_type="application/merge-patch+json",
                    serialize=False,
                )
        except NotFoundError:
            return None
        except ConflictError as err:
            raise StaleStatus(str(err)) from err
        except (DynamicApiError, ApiException) as err:  # the server's own words, not the client's dump of the answer
            refused = _refused(err)
            raise WriteRefused(refused.status, f"status patch refused (HTTP {refused.status}): {refused}") from err
        written = _json(response)
        return str(written["metadata"]["resourceVersion"]), dict(written.get("status") or {})

    def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete a child that is no longer wanted (e.g. the PDB after scaling to one replica).

        With `uid`, only that very object goes (a UID precondition): an object of the same name created since we
        looked, by anyone, is never deleted.
        """
        try:
            resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
            self.on_write(kind, "delete")
            body = {"preconditions": {"uid": uid}} if uid else None
            with self._timed(kind, "delete"):
                self.dynamic.delete(resource, name=name, namespace=namespace, body=body, serialize=False)
        except (ResourceNotFoundError, NotFoundError):
            return
        except (DynamicApiError, ApiException) as err:
            raise _refused(err) from err
