"""Hand freed heap memory back to the kernel after bursts.

Why: the operator's resident memory is set by its busiest moment, not by what it keeps. A burst of creations (or a
restart that resumes every object at once) holds many objects' events and reconciles in memory together; once they
are done, what stays is small (measured at 1,000 objects: ~85 MiB in use), but the freed memory sits in allocator
pools between the objects that live on, so the process keeps it.

The chart runs Python with `PYTHONMALLOC=malloc` (Python's small objects in the C allocator instead of pymalloc's
1 MiB arenas, which go back only when entirely empty) and preloads jemalloc (`LD_PRELOAD`, `MALLOC_CONF`): jemalloc
keeps objects of one size class together in small slabs, fills the lowest slabs first and gives back every page a
slab or extent no longer uses, so what outlives a burst pins far fewer pages than in glibc's heap, where survivors
lie between the burst's freed chunks. The chart sets jemalloc's decay to 0 (`dirty_decay_ms:0,muzzy_decay_ms:0`), so
freed pages go back as they are freed rather than ~10 s later: at 1,000 objects the evaluation rounds free tens of
MiB between two passes. `release_free_memory` purges at once after each periodic pass, for a jemalloc configured
otherwise. Without jemalloc (glibc alone, as in a development
checkout), it calls glibc's `malloc_trim(0)`, which releases every whole free page of glibc's heaps. Elsewhere (musl,
macOS) there is nothing to call and it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

_ALL_ARENAS = 4096  # jemalloc's MALLCTL_ARENAS_ALL
# jemalloc's counters (bytes): in live allocations; in pages of active slabs and extents (live + fragmentation within
# them); resident (active + allocator metadata + dirty pages not yet purged); see jemalloc(3), "stats.*".
_JEMALLOC_STATS = ("allocated", "active", "resident", "metadata")


def _mallctl() -> Callable[..., int] | None:
    """jemalloc's control function, when jemalloc is the process's allocator (preloaded or linked)."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except (OSError, AttributeError):
        return None
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    mallctl.restype = ctypes.c_int
    control: Callable[..., int] = mallctl
    return control


def _jemalloc_purge(mallctl: Callable[..., int] | None) -> Callable[[], None] | None:
    """jemalloc's purge of every arena."""
    if mallctl is None:
        return None
    name = f"arena.{_ALL_ARENAS}.purge".encode()

    def purge() -> None:
        mallctl(name, None, None, None, 0)

    return purge


def _jemalloc_stats(mallctl: Callable[..., int] | None) -> Callable[[], dict[str, int]] | None:
    """jemalloc's heap counters, refreshed (mallctl "epoch") on each call."""
    if mallctl is None:
        return None

    def read() -> dict[str, int]:
        epoch = ctypes.c_uint64(1)
        mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch))
        counters: dict[str, int] = {}
        for name in _JEMALLOC_STATS:
            value = ctypes.c_size_t(0)
            size = ctypes.c_size_t(ctypes.sizeof(value))
            if mallctl(f"stats.{name}".encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
                counters[name] = value.value
        return counters

    return read


def _glibc_trim() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int

    def trim() -> None:
        function(0)

    return trim


def allocator() -> str:
    """Which allocator this process gives memory back through: "jemalloc", "glibc" or "none"."""
    return "jemalloc" if _PURGE is not None else "glibc" if _TRIM is not None else "none"


_MALLCTL = _mallctl()
_PURGE = _jemalloc_purge(_MALLCTL)
_STATS = _jemalloc_stats(_MALLCTL)
_TRIM = _glibc_trim() if _PURGE is None else None


def usage() -> dict[str, int]:
    """The allocator's own account of the heap, in bytes: what live objects use ("allocated") against what the
    allocator holds for them ("active", "resident"). Resident memory well above "allocated" after a burst is
    fragmentation (pages kept by a few survivors), not data the operator keeps. Empty without jemalloc."""
    return _STATS() if _STATS is not None else {}


def release_free_memory() -> bool:
    """Give the pages the allocator holds free back to the kernel; whether there was anything to call."""
    if _PURGE is not None:
        _PURGE()
        return True
    if _TRIM is not None:
        _TRIM()
        return True
    return False
