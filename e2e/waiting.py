"""Small helpers every e2e part needs: a free loopback port, and a bounded wait that says what it waited for."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bind to 0 and let the kernel choose)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60, interval: float = 0.3) -> Any:
    """Poll until probe() returns something truthy and return it; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
