"""Trimming the heap gives a burst's memory back (adapters/heap.py), in a real interpreter with the chart's allocator
setting: a burst of small objects with a few survivors spread among them, as a burst of creations leaves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

BURST = """
import json, sys
from specpilot.adapters import heap

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

burst = [{"name": f"object-{i}", "spec": {"replicas": i, "model": "x" * 40}} for i in range(200_000)]
survivors = burst[::200]  # one in 200 lives on, spread over the whole burst
del burst
before = rss_mib()
called = heap.release_free_memory()
print(json.dumps({"before": before, "after": rss_mib(), "called": called, "kept": len(survivors)}))
"""


def _run(allocator: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONMALLOC": allocator}
    out = subprocess.run([sys.executable, "-c", BURST], env=env, capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out)
    print(allocator, result, file=sys.stderr)
    return result


def test_trimming_returns_what_a_burst_freed_with_the_charts_allocator() -> None:
    trimmed = _run("malloc")
    assert trimmed["called"], "glibc: malloc_trim exists here"
    assert trimmed["after"] < trimmed["before"] / 2, trimmed


def test_with_pythons_own_arenas_the_burst_stays_resident() -> None:
    """Why the chart sets PYTHONMALLOC=malloc: pymalloc's arenas, pinned by survivors, are not the heap's to trim."""
    pinned = _run("pymalloc")
    trimmed = _run("malloc")
    assert pinned["after"] > 2 * trimmed["after"], (pinned, trimmed)
