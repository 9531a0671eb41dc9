"""Small helpers every e2e part needs: a free loopback port, a bounded wait that says what it waited for, and
stopping a child process and reading its log's tail the same way everywhere."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
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


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within timeout_s (a no-op for a process that already exited)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def log_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file, or a note that there is none (yet)."""
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
