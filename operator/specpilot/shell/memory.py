"""What this process remembers about each SpeculativeDeployment between reconciles, by UID; nothing here is needed for
correctness after a restart (status and the children's applied-hash annotations carry the durable state)."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import kopf

from specpilot.adapters.k8s import LiveChild
from specpilot.api import v1alpha1
from specpilot.autotune.evaluation import Cadence, DueMarks
from specpilot.shell.events import EventLimiter

TRANSIENT_RETRY_SECONDS = 30.0  # a write refused for a passing reason (409, 429, 5xx) is retried after this
# A write refused for good (other 4xx) waits for what we send to change, or for this backoff (doubling per refusal,
# capped), since its cause may be outside the spec (an admission policy an admin later removes).
PERMANENT_RETRY_SECONDS = (60.0, 900.0)


@dataclass(frozen=True)
class WriteFailure:
    digest: str
    message: str
    permanent: bool
    at: float
    refusals: int = 1  # in a row, for the same digest

    def blocks(self, now: float) -> bool:
        """Whether the same write must not be sent yet."""
        if not self.permanent:
            return now - self.at < TRANSIENT_RETRY_SECONDS
        first, cap = PERMANENT_RETRY_SECONDS
        return now - self.at < min(cap, first * 2.0 ** (self.refusals - 1))


def refusal(previous: WriteFailure | None, digest: str, message: str, permanent: bool) -> WriteFailure:
    again = previous is not None and previous.digest == digest
    refusals = previous.refusals + 1 if previous is not None and again else 1
    return WriteFailure(digest, message, permanent, time.monotonic(), refusals)


@dataclass(frozen=True)
class BodySummary:
    """What the periodic pass needs to tell that nothing changed, without unpacking the stored body."""

    namespace: str
    name: str
    resource_version: str
    generation: int
    pod_monitor: bool
    rollout_in_flight: bool  # its deadline passes with nothing changing (status.effective.rolloutStarted)
    # what a round's due check reads: rounds unpack only the bodies of objects that are due
    due: DueMarks
    # labels and annotations: with the generation (the spec), what an edit changes and our status writes do not
    metadata_digest: int = 0

    @staticmethod
    def of(body: Mapping[str, Any]) -> BodySummary:
        metadata = body.get("metadata") or {}
        status = body.get("status") or {}
        effective = status.get("effective") or {}
        return BodySummary(
            namespace=str(metadata.get("namespace")),
            name=str(metadata.get("name")),
            resource_version=str(metadata.get("resourceVersion", "")),
            generation=int(metadata.get("generation", 0)),
            pod_monitor=bool(((body.get("spec") or {}).get("monitoring") or {}).get("podMonitor", False)),
            rollout_in_flight=bool(effective.get("configHash")) and not effective.get("rolloutCompleted"),
            due=DueMarks.of(status, metadata.get("annotations") or {}),
            metadata_digest=zlib.crc32(
                json.dumps([metadata.get("labels"), metadata.get("annotations")], sort_keys=True).encode()
            ),
        )

    def edited_since(self, earlier: BodySummary) -> bool:
        """An edit of the object (spec, labels, annotations) rather than a write of its status."""
        return (self.generation, self.metadata_digest) != (earlier.generation, earlier.metadata_digest)


def _pack(data: Mapping[str, Any]) -> bytes:
    """What ObjectMemory keeps for as long as an object lives: compact JSON, compressed (fast level)."""
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def _unpack(packed: bytes) -> Any:
    return json.loads(zlib.decompress(packed))


@dataclass
class ObjectMemory:
    """What this process remembers about one SpeculativeDeployment between reconciles (by UID).

    Mutated only while `lock` is held (one reconcile per object at a time); nothing here is needed for correctness
    after a restart: status and the children's applied-hash annotations carry the durable state.
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    # The status our last patch produced, with its resourceVersion (see reconcile.current_status), as compressed JSON
    # like the body: a status with a recommendation is ~15-40 KiB of dicts and ~3 KB packed, and an evaluation round
    # leaves one behind for every object it wrote until the watch delivers the write (measured at 1,000 objects: 25 MiB
    # of statuses held at once). Read through `written_status`, set through `remember_written`.
    written: tuple[str, bytes] | None = None
    # Children written moments ago ("Kind/name" -> digest, when): the index may not show our write yet.
    recent_applies: dict[str, tuple[str, float]] = field(default_factory=dict)
    pod_monitor: LiveChild | None = None
    pod_monitor_checked: float | None = None
    # Names of our children held by another owner ("Kind/name" -> (who, when looked up)).
    foreign: dict[str, tuple[str, float]] = field(default_factory=dict)
    failures: dict[str, WriteFailure] = field(default_factory=dict)
    warned_missing: set[str] = field(default_factory=set)
    # The latest body kopf handed us (for fleet rounds, owner enqueues and the periodic pass, which run outside the
    # object's handlers): its summary, and the body itself as compressed JSON without metadata.managedFields, one
    # tuple so that a reader never pairs one version's summary with another's body. Kept compressed because it is
    # kept for every object for as long as it lives: 3.5 KiB instead of 53 KiB of dicts (measured on a bench object
    # whose status carries a recommendation), decompressed in ~0.14 ms when a round or a changed object needs it.
    kept: tuple[BodySummary, bytes] | None = None
    # When the spec says the object is due, worked out once per generation: (generation, cadence or None when the
    # spec is invalid). Not the parsed spec itself: that is ~20 KiB of objects per object for as long as it lives.
    cadence: tuple[int, Cadence | None] | None = None
    # When this process last evaluated the object (the watch may not have delivered status.observed yet).
    evaluated_at: datetime | None = None
    # What the last completed reconcile decided from (resourceVersions of the object, our status write and the
    # children): the periodic pass does nothing while it is unchanged.
    fingerprint: tuple[Any, ...] | None = None

    @property
    def written_status(self) -> tuple[str, dict[str, Any]] | None:
        """Our last status write (resourceVersion, status), unpacked afresh on each read."""
        written = self.written
        return (written[0], _unpack(written[1])) if written else None

    def remember_written(self, written: tuple[str, Mapping[str, Any]] | None) -> None:
        self.written = (written[0], _pack(written[1])) if written else None

    def keep(self, body: kopf.Body) -> None:
        metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
        packed = _pack({**body, "metadata": metadata})
        self.kept = (BodySummary.of(body), packed)

    @property
    def summary(self) -> BodySummary | None:
        kept = self.kept
        return kept[0] if kept else None

    @property
    def body(self) -> kopf.Body | None:
        """The latest body (a fresh copy each time)."""
        kept = self.kept
        return kopf.Body(cast(kopf.RawBody, _unpack(kept[1]))) if kept else None


class OperatorMemory:
    """All per-object bookkeeping of this process in one place, safe across kopf's worker threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._objects: dict[str, ObjectMemory] = {}
        self._limiter = EventLimiter()

    def of(self, uid: str) -> ObjectMemory:
        with self._guard:
            return self._objects.setdefault(uid, ObjectMemory())

    def known(self, uid: str) -> ObjectMemory | None:
        with self._guard:
            return self._objects.get(uid)

    def snapshot(self) -> list[tuple[str, ObjectMemory]]:
        with self._guard:
            return list(self._objects.items())

    def allow_event(self, uid: str, reason: str, message: str) -> bool:
        with self._guard:
            return self._limiter.allow(uid, reason, message, time.monotonic())

    def forget(self, uid: str) -> None:
        with self._guard:
            self._objects.pop(uid, None)
            self._limiter.forget(uid)


MEMORY = OperatorMemory()


def spec_of(body: kopf.Body) -> v1alpha1.SpeculativeDeploymentSpec | None:
    """The body's parsed spec, None when invalid (the reconcile reports why)."""
    try:
        return v1alpha1.parse_spec(dict(body.spec))
    except v1alpha1.InvalidSpec:
        return None


def cadence_of(memory: ObjectMemory) -> Cadence | None:
    """When the kept body's spec makes it due, worked out once per generation (rounds look at every object every
    tick; only the due ones are unpacked and parsed)."""
    summary = memory.summary
    if summary is None:
        return None
    if memory.cadence is None or memory.cadence[0] != summary.generation:
        body = memory.body
        spec = spec_of(body) if body is not None else None
        memory.cadence = (summary.generation, Cadence.of(spec) if spec is not None else None)
    return memory.cadence[1]
