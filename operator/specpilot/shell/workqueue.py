"""The operator's work queue: each object queued at most once, and the objects someone is waiting on first.

As in controller-runtime, an event queues its object's UID and a handler thread reconciles it later from the
latest kept state, so the events that arrive while it waits are all answered by that one reconcile. Unlike a plain
FIFO, the queue has two classes, as controller-runtime's priority queue does:

- urgent: an object new to this process (created, or listed at start) or edited (spec, labels, annotations): a
  user or a tool is waiting for its Deployment;
- follow-up: a change of a child it owns (a rollout's progress, a Service's assigned IP), which at most refreshes
  status.

Why: in a burst of creations every new object's children report progress several times (the Deployment's ADDED,
then the controller's status updates), and each report queues a follow-up reconcile of an object whose Deployment
already exists. In one FIFO those follow-ups (a status write each) wait in front of the next objects' first
reconciles, so the last object's Deployment waits for most of the burst's status writes as well as for its
creations. Follow-ups run as soon as no urgent object waits; a follow-up queued again as urgent (an edit arrives
while it waits) moves up.

The queue hands out entries; it does not run them. Whoever adds an entry that was not queued yet owes exactly one
`take()` (the operator submits one to its handler threads), so every entry is taken once.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

Payload = TypeVar("Payload")


@dataclass
class Entry(Generic[Payload]):
    trigger: str  # what queued it (the urgent one when a follow-up was raised), for the reconcile metrics
    urgent: bool
    wait_for_lock: bool  # a create/update/resume waits for a running reconcile; a child's change need not
    queued_at: float  # monotonic seconds, for the time it waited
    payload: Payload


class WorkQueue(Generic[Payload]):
    """Thread-safe: events add from the event loop, handler threads take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry[Payload]] = {}
        self._urgent: deque[str] = deque()
        self._follow_up: deque[str] = deque()

    def add(self, uid: str, trigger: str, payload: Payload, *, urgent: bool, wait_for_lock: bool, now: float) -> bool:
        """Queue `uid` unless it waits already (then merge: it may become urgent, or need to wait for the lock).
        True when this added an entry, for which the caller owes one `take()`."""
        with self._lock:
            entry = self._entries.get(uid)
            if entry is not None:
                entry.wait_for_lock = entry.wait_for_lock or wait_for_lock
                if urgent and not entry.urgent:
                    entry.urgent, entry.trigger = True, trigger
                    self._urgent.append(uid)  # its place among the follow-ups is skipped when reached
                return False
            self._entries[uid] = Entry(trigger, urgent, wait_for_lock, now, payload)
            (self._urgent if urgent else self._follow_up).append(uid)
            return True

    def take(self) -> tuple[str, Entry[Payload]] | None:
        """The oldest urgent entry, else the oldest follow-up, removed from the queue (an event after this queues
        the object again); None when nothing waits."""
        with self._lock:
            for line in (self._urgent, self._follow_up):
                while line:
                    uid = line.popleft()
                    entry = self._entries.get(uid)
                    if entry is None or (line is self._follow_up and entry.urgent):
                        continue  # taken already through its other place in line
                    del self._entries[uid]
                    return uid, entry
            return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
