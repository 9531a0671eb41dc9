"""Hand freed heap memory back to the kernel after bursts (glibc's malloc_trim).

Why: the operator's resident memory is set by its busiest moment, not by what it keeps. A burst of creations (or a
restart that resumes every object at once) holds many objects' events and reconciles in memory together; once they
are done, what stays is small (measured at 300 objects: ~45 MiB of Python objects kept, ~200 MiB resident), but the
freed memory sits in allocator pools between the few objects that live on, so the process keeps it. glibc returns
pages only from the top of its heap by itself; `malloc_trim(0)` releases every whole free page. With
`PYTHONMALLOC=malloc` (the chart sets it) Python's small objects live in that heap too instead of in pymalloc's
1 MiB arenas, which go back only when entirely empty; trimming then gives back nearly all of a burst.

Elsewhere (musl, macOS) there is nothing to call and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Give whole free pages of the C heap back to the kernel; whether there was anything to call (glibc)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
