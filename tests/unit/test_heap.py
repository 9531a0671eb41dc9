"""Giving a burst's memory back (adapters/heap.py), in a real interpreter with the chart's allocator settings (jemalloc
preloaded, as the image does) and with glibc alone: a burst of small objects with a few survivors spread among them,
as a burst of creations leaves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from e2e.operator_process import host_allocator

BURST = """
import json, sys
from specpilot.adapters import heap

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

burst = [{"name": f"object-{i}", "spec": {"replicas": i, "model": "x" * 40}} for i in range(200_000)]
peak, usage_peak = rss_mib(), heap.usage()
survivors = burst[::200]  # one in 200 lives on, spread over the whole burst
del burst
before = rss_mib()
called = heap.release_free_memory()
print(json.dumps({"peak": peak, "before": before, "after": rss_mib(), "called": called, "kept": len(survivors),
                  "allocator": heap.allocator(), "usage_peak": usage_peak, "usage": heap.usage()}))
"""

GLIBC_ALONE = {"PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": "2"}


def _run(settings: dict[str, str]) -> dict[str, Any]:
    """The burst in a fresh interpreter with exactly these allocator variables (none inherited from here)."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "MALLOC_ARENA_MAX")}
    env = {**inherited, **settings}
    out = subprocess.run([sys.executable, "-c", BURST], env=env, capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    print(settings, result, file=sys.stderr)
    return result


def test_with_the_charts_allocator_jemalloc_gives_back_what_a_burst_freed() -> None:
    """The chart's variables with this machine's copy of the image's jemalloc (e2e.operator_process.host_allocator,
    what every operator the tests and benchmarks start gets): jemalloc is the allocator and its purge returns the
    burst's pages."""
    purged = _run(host_allocator())
    assert purged["allocator"] == "jemalloc", purged
    assert purged["called"], purged
    # with the chart's decay 0 the pages go back as they are freed, before the purge is even called
    assert purged["before"] < purged["peak"] / 2, purged
    assert purged["after"] < purged["peak"] / 2, purged
    # jemalloc's own account (the gauge specpilot_heap_bytes exports it after every pass): the survivors' bytes are
    # a sliver of what the burst held resident
    usage, peak = purged["usage"], purged["usage_peak"]
    assert 0 < usage["allocated"] <= usage["active"] <= usage["resident"], usage
    assert usage["resident"] < peak["resident"] / 2, (peak, usage)


def test_without_decay_0_the_purge_is_what_gives_the_burst_back() -> None:
    """jemalloc's default decay keeps freed pages ~10 s: the operator's purge after each pass returns them at once."""
    settings = {**host_allocator(), "MALLOC_CONF": "background_thread:true,narenas:2"}
    purged = _run(settings)
    assert purged["allocator"] == "jemalloc", purged
    assert purged["before"] > purged["peak"] / 2, "freed but still resident until purged or decayed"
    assert purged["after"] < purged["before"] / 2, purged


def test_with_glibc_alone_trimming_returns_what_a_burst_freed() -> None:
    trimmed = _run(GLIBC_ALONE)
    assert trimmed["allocator"] == "glibc", "no jemalloc preloaded: glibc's malloc_trim"
    assert trimmed["called"], "glibc: malloc_trim exists here"
    assert trimmed["after"] < trimmed["before"] / 2, trimmed
    assert trimmed["usage"] == {}, "no jemalloc counters without jemalloc"


def test_with_pythons_own_arenas_the_burst_stays_resident() -> None:
    """Why the chart sets PYTHONMALLOC=malloc: pymalloc's arenas, pinned by survivors, are not the allocator's to
    give back."""
    pinned = _run({**GLIBC_ALONE, "PYTHONMALLOC": "pymalloc"})
    trimmed = _run(GLIBC_ALONE)
    assert pinned["after"] > 2 * trimmed["after"], (pinned, trimmed)
