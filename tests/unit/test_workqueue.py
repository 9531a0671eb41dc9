"""The operator's work queue (workqueue.py): each object once, new and edited objects before children's follow-ups."""

from __future__ import annotations

import threading

import pytest

from specpilot.shell.workqueue import WorkQueue

URGENT = {"create", "resume", "update"}

# (what is added, in order: (uid, trigger)), the order the entries are taken in as (uid, trigger), and how many
# adds owed a take (created an entry)
CASES = [
    pytest.param([("a", "create"), ("b", "create")], [("a", "create"), ("b", "create")], 2, id="fifo-within-a-class"),
    pytest.param(
        [("a", "child"), ("b", "child"), ("c", "create")],
        [("c", "create"), ("a", "child"), ("b", "child")],
        3,
        id="a-new-object-goes-before-queued-follow-ups",
    ),
    pytest.param(
        [("a", "create"), ("a", "child"), ("a", "child")], [("a", "create")], 1, id="an-object-is-queued-once"
    ),
    pytest.param(
        [("a", "child"), ("b", "create"), ("a", "update")],
        [("b", "create"), ("a", "update")],
        2,
        id="an-edit-raises-a-waiting-follow-up-and-it-is-taken-once",
    ),
    pytest.param(
        [("a", "create"), ("a", "child")], [("a", "create")], 1, id="a-follow-up-does-not-lower-an-urgent-entry"
    ),
    pytest.param(
        [("a", "child"), ("b", "child"), ("b", "resume"), ("c", "child")],
        [("b", "resume"), ("a", "child"), ("c", "child")],
        3,
        id="the-raised-entry-leaves-its-old-place",
    ),
]


@pytest.mark.parametrize(("adds", "taken", "owed"), CASES)
def test_order_of_taking(adds: list[tuple[str, str]], taken: list[tuple[str, str]], owed: int) -> None:
    queue: WorkQueue[str] = WorkQueue()
    added = [
        queue.add(uid, trigger, f"{uid}-{trigger}", urgent=trigger in URGENT, wait_for_lock=False, now=float(i))
        for i, (uid, trigger) in enumerate(adds)
    ]
    assert sum(added) == owed
    order = []
    for _ in range(owed):  # exactly one take per entry added, as the operator submits them
        got = queue.take()
        assert got is not None
        order.append((got[0], got[1].trigger))
    assert order == taken
    assert queue.take() is None
    assert len(queue) == 0


def test_a_merged_add_keeps_the_first_time_queued_and_the_strongest_lock_wish() -> None:
    queue: WorkQueue[str] = WorkQueue()
    assert queue.add("a", "child", "first", urgent=False, wait_for_lock=False, now=1.0)
    assert not queue.add("a", "update", "second", urgent=True, wait_for_lock=True, now=5.0)
    got = queue.take()
    assert got is not None
    uid, entry = got
    assert (uid, entry.trigger, entry.urgent, entry.wait_for_lock, entry.queued_at, entry.payload) == (
        "a",
        "update",
        True,
        True,
        1.0,
        "first",
    )


def test_an_object_taken_is_queued_again_by_its_next_event() -> None:
    queue: WorkQueue[str] = WorkQueue()
    assert queue.add("a", "child", "x", urgent=False, wait_for_lock=False, now=0.0)
    assert queue.take() is not None
    assert queue.add("a", "child", "y", urgent=False, wait_for_lock=False, now=1.0)
    got = queue.take()
    assert got is not None
    assert got[1].payload == "y"


def test_every_entry_is_taken_exactly_once_under_concurrent_adds_and_takes() -> None:
    """Events add from the event loop while handler threads take: one take per added entry gets every object
    once, whatever the interleaving (a lost or doubled entry would show here)."""
    queue: WorkQueue[int] = WorkQueue()
    owed = threading.Semaphore(0)
    taken: list[str] = []
    added = [0, 0, 0]
    lock = threading.Lock()

    def adder(offset: int) -> None:
        for i in range(2000):
            uid = f"o{(offset + i) % 700}"
            trigger = "child" if i % 3 else "update"
            if queue.add(uid, trigger, i, urgent=trigger in URGENT, wait_for_lock=False, now=float(i)):
                added[offset // 97] += 1
                owed.release()

    def taker(stop: threading.Event) -> None:
        while not (stop.is_set() and len(queue) == 0):
            if owed.acquire(timeout=0.01):
                got = queue.take()
                assert got is not None, "an owed take found nothing"
                with lock:
                    taken.append(got[0])

    stop = threading.Event()
    takers = [threading.Thread(target=taker, args=(stop,)) for _ in range(4)]
    adders = [threading.Thread(target=adder, args=(k * 97,)) for k in range(3)]
    for t in [*takers, *adders]:
        t.start()
    for t in adders:
        t.join()
    stop.set()
    for t in takers:
        t.join()
    assert len(queue) == 0
    assert not owed.acquire(blocking=False), "every owed take ran"
    assert len(taken) == sum(added) >= 700  # each entry taken once; every object was queued at least once
