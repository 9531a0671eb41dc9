"""Per-object event rate limiting, like client-go's correlator (burst 25, one token back every 5 minutes).

kopf posts every call as a new Event and never throttles, so a flapping object could flood the API server and
`kubectl describe`. Identical (reason, message) pairs within the dedup window are dropped outright.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BURST = 25
REFILL_SECONDS = 300.0
DEDUP_SECONDS = 600.0


@dataclass
class _Bucket:
    tokens: float
    updated: float
    recent: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass
class EventLimiter:
    burst: int = BURST
    refill_seconds: float = REFILL_SECONDS
    dedup_seconds: float = DEDUP_SECONDS
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def allow(self, object_uid: str, reason: str, message: str, now: float) -> bool:
        """Whether an event may be posted now; consumes a token when it may."""
        bucket = self._buckets.get(object_uid)
        if bucket is None:
            bucket = self._buckets[object_uid] = _Bucket(tokens=float(self.burst), updated=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) / self.refill_seconds)
        bucket.updated = now
        bucket.recent = {k: t for k, t in bucket.recent.items() if now - t < self.dedup_seconds}
        if (reason, message) in bucket.recent or bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        bucket.recent[(reason, message)] = now
        return True

    def forget(self, object_uid: str) -> None:
        self._buckets.pop(object_uid, None)
