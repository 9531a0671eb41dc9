"""Leader election I/O: read, create and update one coordination.k8s.io/v1 Lease (rules in
adapters.leadership).

The elector runs in its own thread with the synchronous client, independent of kopf's event loop, so a busy or
stuck loop cannot delay the decision to stop. Every request carries a timeout no longer than the time left before
the renew deadline, so the deadline check runs on time even when the API server does not answer. Losing the lease
ends the process at once (`os._exit`, like controller-runtime's exit on lost leadership): no handler of this
process writes after that point, and the pod's restart makes it a candidate again.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specpilot.adapters.leadership import LeaseRecord, LeaseSettings, may_take, must_stop, released, taken

log = logging.getLogger("specpilot.leader")
LOST_LEADERSHIP_EXIT = 3  # the process's exit status when it stops because it could not keep the lease


def _record(lease: Any) -> LeaseRecord | None:
    if lease is None:
        return None
    spec = lease.spec
    if spec is None:
        return LeaseRecord(None, None, None, None, 0)
    return LeaseRecord(
        spec.holder_identity or None,
        spec.lease_duration_seconds,
        spec.acquire_time,
        spec.renew_time,
        spec.lease_transitions or 0,
    )


def _spec(record: LeaseRecord) -> client.V1LeaseSpec:
    return client.V1LeaseSpec(
        holder_identity=record.holder or "",
        lease_duration_seconds=record.duration_seconds,
        acquire_time=record.acquired,
        renew_time=record.renewed,
        lease_transitions=record.transitions,
    )


class LeaderElector:
    """Become leader (blocking `wait_until_leading`), then renew in the background until the process ends."""

    def __init__(
        self,
        api_client: client.ApiClient,
        settings: LeaseSettings,
        *,
        on_leading: Callable[[bool], None] = lambda _: None,
        stop_acting: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self._api = client.CoordinationV1Api(api_client)
        self._on_leading = on_leading
        self._stop_acting = stop_acting or _exit_now
        self._leading = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # The Lease as last seen (its resourceVersion; None: absent) and when, on our monotonic clock, it was
        # first seen like that: a holder's lease expires only after it stayed unchanged that long for *us*.
        self._seen: tuple[str | None, float] | None = None
        self._last_renewal_sent = 0.0
        self._resource_version: str | None = None
        self._record: LeaseRecord | None = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def alive(self) -> bool:
        """Whether the election thread still runs (a candidate whose thread died would wait forever)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specpilot-leader-election", daemon=True)
        self._thread.start()

    def wait_until_leading(self) -> None:
        self._leading.wait()

    # ------------------------------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            self._elect_and_renew()
        except BaseException as err:  # a leader nobody renews for must not go on acting
            log.exception("leader election failed")
            if self._leading.is_set():
                self._lose(f"the election thread failed: {err!r}")

    def _elect_and_renew(self) -> None:
        s = self.settings
        started = time.monotonic()
        while not self._stopping.is_set() and not self._leading.is_set():
            try:
                if self._try_take(timeout=s.retry_period):
                    log.info(
                        "became leader: lease %s/%s held by %s (after %.1f s as a candidate)",
                        s.namespace, s.name, s.identity, time.monotonic() - started,
                    )  # fmt: skip
                    self._leading.set()
                    self._on_leading(True)
                    break
            except Exception as err:  # an unreachable API server, a refusal: try again next period
                log.warning("lease %s/%s: %s", s.namespace, s.name, _briefly(err))
            self._stopping.wait(s.retry_period * (1 + 0.2 * random.random()))  # client-go's jitter
        while not self._stopping.is_set():
            # Wake at the next renewal, or at the deadline if that comes first.
            deadline = self._last_renewal_sent + s.renew_deadline
            self._stopping.wait(max(0.0, min(s.retry_period, deadline - time.monotonic())))
            if self._stopping.is_set():
                return
            if must_stop(self._last_renewal_sent, time.monotonic(), s.renew_deadline):
                self._lose(f"not renewed within the renew deadline ({s.renew_deadline:g} s)")
                return
            try:
                # No request may outlive the deadline: the check above must run on time.
                remaining = self._last_renewal_sent + s.renew_deadline - time.monotonic()
                if not self._try_take(timeout=max(0.01, min(s.retry_period, remaining))):
                    holder = self._record.holder if self._record else None
                    if holder != s.identity:
                        self._lose(f"the lease is held by {holder!r}")
                        return
            except Exception as err:  # keep trying until the deadline
                log.warning("lease %s/%s: renewal failed: %s", s.namespace, s.name, _briefly(err))

    def _lose(self, why: str) -> None:
        s = self.settings
        self._leading.clear()
        self._on_leading(False)
        self._stop_acting(f"lost leadership of lease {s.namespace}/{s.name}: {why}; stopping now")

    def _try_take(self, *, timeout: float) -> bool:
        """Read the Lease and write ourselves as holder if the rules allow; True: we hold it now."""
        s = self.settings
        sent = time.monotonic()
        try:
            lease: Any = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=timeout)
        except ApiException as err:
            if err.status != 404:
                raise
            lease = None
        record = _record(lease)
        version = lease.metadata.resource_version if lease is not None else None
        self._record = record
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, sent)
        if not may_take(record, s.identity, sent - self._seen[1]):
            return False
        new = taken(record, s.identity, datetime.now(UTC), s.lease_duration)
        try:
            if lease is None:
                body = client.V1Lease(metadata=client.V1ObjectMeta(name=s.name, namespace=s.namespace), spec=_spec(new))
                written: Any = self._api.create_namespaced_lease(s.namespace, body, _request_timeout=timeout)
            else:
                lease.spec = _spec(new)  # the read's resourceVersion makes this a compare-and-swap
                written = self._api.replace_namespaced_lease(s.name, s.namespace, lease, _request_timeout=timeout)
        except ApiException as err:
            if err.status == 409:  # someone else wrote first: read again next period
                return False
            raise
        self._record, self._resource_version = new, written.metadata.resource_version
        self._seen = (self._resource_version, sent)
        self._last_renewal_sent = sent
        return True

    # ------------------------------------------------------------------------------------------------ clean stop

    def release(self) -> None:
        """Stop renewing and, if we still hold the lease, hand it over now (no waiting out the lease duration)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.retry_period + 5)
        if not self._leading.is_set():
            return
        s = self.settings
        try:
            lease: Any = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=5)
            record = _record(lease)
            if record is None or record.holder != s.identity:
                return
            lease.spec = _spec(released(record, datetime.now(UTC)))
            self._api.replace_namespaced_lease(s.name, s.namespace, lease, _request_timeout=5)
            log.info("released lease %s/%s", s.namespace, s.name)
        except Exception as err:  # it expires by itself
            log.warning("lease %s/%s: release failed (it expires after %d s): %s", s.namespace, s.name,
                        s.lease_duration, err)  # fmt: skip
        finally:
            self._leading.clear()
            self._on_leading(False)


def _briefly(err: Exception) -> str:
    """One line: the API server's status and reason, not the client's headers and body dump."""
    if isinstance(err, ApiException):
        return f"HTTP {err.status} {err.reason}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _exit_now(message: str) -> None:
    """End the process without running any more of its code (no kopf cleanup: that could still write)."""
    log.critical(message)
    logging.shutdown()
    os._exit(LOST_LEADERSHIP_EXIT)


def default_namespace() -> str:
    """POD_NAMESPACE, else the in-cluster service account's namespace file, else empty (the settings say so)."""
    explicit = os.environ.get("POD_NAMESPACE", "")
    if explicit:
        return explicit
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        return ""
