"""Pure tests of the command-line adaptation and the metrics/load helpers (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.vllm.load import SpecCounters, check_loopback, metric_sum, parse_spec_counters
from e2e.vllm.serve import CPU_WORKAROUNDS, adapt_serve_argv, strip_launcher

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "meta-llama/Llama-3.2-1B-Instruct"


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("tiny-llama", "tiny-llama-draft", "tiny-llama-draft-same"):
        (tmp_path / name).mkdir()
        out[name] = tmp_path / name
    return out


def _spec(args: list[str]) -> dict[str, object]:
    value = args[args.index("--speculative-config") + 1]
    spec: dict[str, object] = json.loads(value)
    return spec


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    ("argv", "rest"),
    [
        (["vllm", "serve", "m", "--port", "1"], ["m", "--port", "1"]),
        (["/usr/bin/vllm", "serve", "m"], ["m"]),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ["--model", "m"]),
        (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], ["m"]),
        (["m", "--port", "1"], ["m", "--port", "1"]),
    ],
)
def test_strip_launcher_drops_only_the_launcher(argv: list[str], rest: list[str]) -> None:
    assert strip_launcher(argv) == rest


def test_adapt_serve_argv_maps_models_and_overrides_gpu_settings(folders: dict[str, Path]) -> None:
    argv = [
        "vllm", "serve", TARGET, "--host", "0.0.0.0", "--port", "8000", "-tp", "2", "--quantization", "fp8",
        "--gpu-memory-utilization", "0.92", "--max-model-len", "8192", "--max-num-seqs", "256", "--dtype", "bfloat16",
        "--speculative-config",
        json.dumps({"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 5,
                    "draft_tensor_parallel_size": 1, "quantization": "fp8"}),
    ]  # fmt: skip
    mapping = {TARGET: folders["tiny-llama"], DRAFT: folders["tiny-llama-draft-same"]}
    out = adapt_serve_argv(argv, mapping, port=12345)
    args = out.args
    assert args[0] == str(folders["tiny-llama"])
    assert _flag(args, "--host") == "127.0.0.1"
    assert _flag(args, "--port") == "12345"
    assert "-tp" not in args
    assert "--quantization" not in args
    assert "--gpu-memory-utilization" not in args
    assert _flag(args, "--max-model-len") == "512"
    assert _flag(args, "--max-num-seqs") == "256"
    assert _flag(args, "--dtype") == "float32"
    assert args.count("--dtype") == 1
    assert args[-len(CPU_WORKAROUNDS) :] == list(CPU_WORKAROUNDS)
    assert _spec(args) == {"method": "draft_model", "model": str(folders["tiny-llama-draft-same"]),
                           "num_speculative_tokens": 5}  # fmt: skip
    assert out.served_model_name == TARGET
    assert _flag(args, "--served-model-name") == TARGET
    assert "dropped -tp 2" in out.notes


def test_adapt_serve_argv_turns_eagle3_into_the_default_draft(folders: dict[str, Path]) -> None:
    spec = {"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[1, 15, 3], [16, 256, 0]]}  # fmt: skip
    out = adapt_serve_argv(
        [TARGET, "--served-model-name", "llama", "x", "--speculative-config", json.dumps(spec)],
        {},
        port=1,
        default_model=folders["tiny-llama"],
        default_draft=folders["tiny-llama-draft-same"],
    )
    assert _spec(out.args) == {
        "method": "draft_model",
        "model": str(folders["tiny-llama-draft-same"]),
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 15, 3], [16, 256, 0]],
    }
    assert out.served_model_name == "llama"
    assert _flag(out.args, "--served-model-name") == "llama"
    assert any("eagle3 -> draft_model" in n for n in out.notes)


def test_adapt_serve_argv_keeps_ngram_and_unknown_flags(folders: dict[str, Path]) -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    out = adapt_serve_argv(
        ["--model", TARGET, "--enable-chunked-prefill", "--speculative-config=" + json.dumps(spec), "--port=9"],
        {TARGET: folders["tiny-llama"]},
        port=2,
    )
    assert out.args[0] == str(folders["tiny-llama"])
    assert "--enable-chunked-prefill" in out.args
    assert _spec(out.args) == spec
    assert _flag(out.args, "--port") == "2"
    assert out.args.count("--port") == 1


def test_adapt_serve_argv_refuses_an_unmapped_model_without_default() -> None:
    with pytest.raises(ValueError, match="no local folder"):
        adapt_serve_argv(["vllm", "serve", TARGET], {}, port=1)


_METRICS = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 176.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 458.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 355.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 161.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1280.0
"""


def test_parse_spec_counters_sums_engines_and_ignores_per_position() -> None:
    c = parse_spec_counters(_METRICS)
    assert c == SpecCounters(drafts=176.0, draft_tokens=458.0, accepted_tokens=360.0, present=True)
    assert c.acceptance == pytest.approx(360 / 458)
    assert c.mean_acceptance_length == pytest.approx(1 + 360 / 176)
    assert metric_sum(_METRICS, "vllm:spec_decode_num_accepted_tokens_total", engine="1") == 5.0


def test_parse_spec_counters_without_speculation_is_absent_not_zero() -> None:
    c = parse_spec_counters('vllm:generation_tokens_total{engine="0",model_name="tiny"} 1.0\n')
    assert not c.present
    assert c.acceptance is None
    assert (c - c).draft_tokens == 0


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:2", "http://127.3.4.5"])
def test_check_loopback_accepts_loopback(url: str) -> None:
    check_loopback(url)


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "http://192.168.1.2", "http://example.com", "http://0.0.0.0"])
def test_check_loopback_refuses_anything_else(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        check_loopback(url)
