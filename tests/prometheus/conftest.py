"""Fixtures of the Prometheus tier: the real binary (e2e/prometheus/fixture.py) and the fake vLLM pods."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.prometheus.fake_vllm import FakeVllm, Loopback, serve


@pytest.fixture(scope="session")
def loopback() -> Iterator[Loopback]:
    """Four pods: speculating, plain, two engines (data parallel), and one restarting every 4 scrapes."""
    state, server, thread = serve(
        {
            "spec": FakeVllm(),
            "plain": FakeVllm(speculative=False),
            "dp": FakeVllm(engines=("0", "1")),
            "reset": FakeVllm(reset_every=4),
        }
    )
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
