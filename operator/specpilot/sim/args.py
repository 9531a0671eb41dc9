"""Read a `vllm serve MODEL [flags]` command line the way vLLM would, into the simulator's engine settings (pure).

The pod runner can start `specpilot simulate ... serve MODEL [flags]` in place of `vllm serve MODEL [flags]`, so this
parser takes exactly what specpilot.vllm.dialects renders: the engine flags, `--speculative-config` JSON (with
`num_speculative_tokens_per_batch_size` and `disable_by_batch_size`) and the legacy flags of vLLM < 0.8.3. Flags
that do not change the simulated behaviour (dtype, quantization, parallelism, revision, ...) are accepted and listed
in `ignored`; a malformed value is a `SimArgsError` naming the flag.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, NoReturn

from specpilot.sim.engine import Schedule, SpecConfig


class SimArgsError(ValueError):
    """A command line the simulator (like vLLM) refuses; the message names the flag."""


@dataclass(frozen=True)
class ServeArgs:
    model: str
    served_model_name: str
    host: str
    port: int
    max_num_seqs: int | None
    max_model_len: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    speculation: SpecConfig | None
    ignored: tuple[str, ...]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SimArgsError(message)


def _parser() -> _Parser:
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.92)
    p.add_argument("--speculative-config")
    # legacy speculation flags (vLLM < 0.8.3)
    p.add_argument("--speculative-model")
    p.add_argument("--num-speculative-tokens", type=int)
    p.add_argument("--speculative-disable-by-batch-size", type=int)
    p.add_argument("--ngram-prompt-lookup-max", type=int)
    p.add_argument("--ngram-prompt-lookup-min", type=int)
    return p


def _schedule(raw: Any) -> Schedule:
    if not isinstance(raw, list) or not raw:
        raise SimArgsError("--speculative-config: num_speculative_tokens_per_batch_size must be a non-empty list")
    out: list[tuple[int, int, int]] = []
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 3 or not all(isinstance(x, int) for x in entry):
            raise SimArgsError(
                f"--speculative-config: num_speculative_tokens_per_batch_size entry {entry!r} is not [lo, hi, K]"
            )
        out.append((entry[0], entry[1], entry[2]))
    if out[0][0] != 1:
        raise SimArgsError("--speculative-config: num_speculative_tokens_per_batch_size must start at batch size 1")
    return tuple(out)


def _spec_from_json(text: str) -> SpecConfig:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise SimArgsError(f"--speculative-config: not JSON ({err})") from None
    if not isinstance(config, dict):
        raise SimArgsError("--speculative-config: expected a JSON object")
    model = config.get("model")
    method = config.get("method") or _method_from_model(model)
    k = config.get("num_speculative_tokens")
    if not isinstance(k, int) or k < 1:
        raise SimArgsError(f"--speculative-config: num_speculative_tokens must be an integer >= 1, got {k!r}")
    schedule = config.get("num_speculative_tokens_per_batch_size")
    threshold = config.get("disable_by_batch_size")
    if threshold is not None and (not isinstance(threshold, int) or threshold < 2):
        raise SimArgsError(f"--speculative-config: disable_by_batch_size must be an integer >= 2, got {threshold!r}")
    return SpecConfig(
        method=str(method),
        num_speculative_tokens=k,
        schedule=None if schedule is None else _schedule(schedule),
        disable_by_batch_size=threshold,
        model=None if model is None else str(model),
    )


def _method_from_model(model: Any) -> str:
    if model in ("[ngram]", "ngram"):
        return "ngram"
    if isinstance(model, str) and "eagle" in model.lower():
        return "eagle"
    if model is None:
        raise SimArgsError("--speculative-config: neither method nor model given")
    return "draft_model"


def parse_serve_args(argv: list[str]) -> ServeArgs:
    """Parse what follows `vllm` (`serve MODEL [flags]`); a leading "vllm" is tolerated."""
    args = list(argv)
    if args[:1] == ["vllm"]:
        args = args[1:]
    if args[:1] != ["serve"]:
        raise SimArgsError(f"expected `serve MODEL [vLLM flags]`, got {' '.join(args[:2]) or 'nothing'}")
    known, unknown = _parser().parse_known_args(args[1:])
    speculation: SpecConfig | None = None
    if known.speculative_config:
        speculation = _spec_from_json(known.speculative_config)
    elif known.speculative_model:
        k = known.num_speculative_tokens
        if k is None or k < 1:
            raise SimArgsError("--speculative-model needs --num-speculative-tokens >= 1")
        speculation = SpecConfig(
            method=_method_from_model(known.speculative_model),
            num_speculative_tokens=k,
            disable_by_batch_size=known.speculative_disable_by_batch_size,
            model=known.speculative_model,
        )
    model = known.model_flag or known.model
    if known.max_model_len < 1 or (known.max_num_seqs is not None and known.max_num_seqs < 1):
        raise SimArgsError("--max-model-len and --max-num-seqs must be >= 1")
    if not 0 < known.gpu_memory_utilization <= 1:
        raise SimArgsError(f"--gpu-memory-utilization must be in (0, 1], got {known.gpu_memory_utilization}")
    batched = known.max_num_batched_tokens or max(8192, known.max_model_len if known.max_model_len <= 65536 else 8192)
    return ServeArgs(
        model=model,
        served_model_name=(known.served_model_name or [model])[0],
        host=known.host,
        port=known.port,
        max_num_seqs=known.max_num_seqs,
        max_model_len=known.max_model_len,
        max_num_batched_tokens=batched,
        gpu_memory_utilization=known.gpu_memory_utilization,
        speculation=speculation,
        ignored=tuple(unknown),
    )
