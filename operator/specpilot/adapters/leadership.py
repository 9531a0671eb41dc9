"""Leader election over a coordination.k8s.io/v1 Lease: the rules, pure (the adapter in adapters/lease.py does I/O).

Why a Lease and not kopf's peering: peering makes same-priority peers pause each other (every operator stops while
two see each other) and needs its own cluster-wide CRDs (KopfPeering); a Lease is the API every Kubernetes
controller uses (client-go's leaderelection, controller-runtime's --leader-elect), needs only get/create/update on
one object in the operator's namespace, and `kubectl get lease` shows who leads.

The rules are client-go's:
- a candidate takes the Lease when nobody holds it, when it already holds it (a restarted container of the same
  pod), or when the record has not changed for the holder's leaseDurationSeconds *as measured on the candidate's
  own clock* since it first saw that record (so clock skew between nodes does not matter);
- a leader renews every retry period; if it has not renewed successfully within the renew deadline (counted from
  when the last successful renewal was *sent*) it stops acting at once. Since renew deadline < lease duration, and a
  candidate counts the lease duration from when it *saw* that renewal (after it was sent), the old leader has
  stopped before any candidate may take over: never two active.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LeaseSettings:
    """Where the Lease is, who we are, and the timings (seconds; client-go's defaults 15/10/2)."""

    name: str
    namespace: str
    identity: str
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these settings, one line each naming the flag (empty: valid)."""
        found: list[str] = []
        if not self.name:
            found.append("--leader-election-lease: must not be empty")
        if not self.namespace:
            found.append(
                "--leader-election-namespace: must not be empty (set it, or POD_NAMESPACE, or run in a pod whose "
                "service account namespace is mounted)"
            )
        if not self.identity:
            found.append("--leader-election-identity: must not be empty (set it, or POD_NAME, or HOSTNAME)")
        if self.lease_duration < 1:
            found.append(f"--lease-duration: must be a whole number of seconds >= 1 (got {self.lease_duration})")
        if self.retry_period <= 0:
            found.append(f"--retry-period: must be > 0 (got {self.retry_period})")
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            found.append(
                "--retry-period < --renew-deadline < --lease-duration must hold (got "
                f"{self.retry_period} < {self.renew_deadline} < {self.lease_duration}): a leader must give up "
                "before a candidate may take over, and get more than one try at renewing"
            )
        return found


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as far as election is concerned."""

    holder: str | None
    duration_seconds: int | None
    acquired: datetime | None
    renewed: datetime | None
    transitions: int = 0


def may_take(record: LeaseRecord | None, identity: str, unchanged_for: float) -> bool:
    """Whether `identity` may write itself as holder, given how long (on its own clock) the record has been
    unchanged since it first saw it."""
    if record is None or not record.holder or record.holder == identity:
        return True
    return unchanged_for >= (record.duration_seconds or 0)


def taken(record: LeaseRecord | None, identity: str, now: datetime, duration_seconds: int) -> LeaseRecord:
    """The record that makes (or keeps) `identity` the holder, renewed at `now`."""
    if record is None:
        return LeaseRecord(identity, duration_seconds, now, now, 0)
    kept = record.holder == identity
    return LeaseRecord(
        identity,
        duration_seconds,
        record.acquired if kept and record.acquired else now,
        now,
        record.transitions if kept else record.transitions + 1,
    )


def released(record: LeaseRecord, now: datetime) -> LeaseRecord:
    """What a leader that stops cleanly writes, so a candidate takes over at its next try (client-go's
    ReleaseOnCancel): no holder, a one-second duration."""
    return LeaseRecord(None, 1, now, now, record.transitions)


def must_stop(last_renewal_sent: float, now: float, renew_deadline: float) -> bool:
    """A leader whose last successful renewal was sent `renew_deadline` or more ago stops acting (monotonic clock)."""
    return now - last_renewal_sent >= renew_deadline
