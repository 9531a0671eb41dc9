"""Run the simulator (`specpilot simulate`) where a pod would run `vllm serve`: same command line, simulated engine.

`simulator_argv` maps a pod's container command (`vllm serve MODEL [flags]`, exactly as the operator renders it)
to `python -m specpilot simulate --preset P --vllm-version V ... serve MODEL [flags] --host 127.0.0.1 --port N`;
`SimulatedVllmServer` is a VllmServer (same start/wait_ready/metrics/stop) that runs it. The pod runner uses them
when given `SimulatorOptions`, so a test chooses per run whether pods are real vLLM CPU servers or simulated ones
(e.g. a 70B model on 4xH100, which no CI machine can run).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.vllm.serve import VllmServer, strip_launcher

_DROP_WITH_VALUE = {"--host", "--port"}


@dataclass(frozen=True)
class SimulatorOptions:
    preset: str = "llama8b-h100"
    vllm_version: str = "0.32.0"
    time_scale: float = 1.0
    startup_seconds: float = 2.0
    seed: int = 0


def simulator_argv(
    command: Sequence[str], *, port: int, options: SimulatorOptions, host: str = "127.0.0.1"
) -> list[str]:
    """`specpilot simulate` arguments for a pod command; --host/--port are replaced, every other flag kept."""
    rest = strip_launcher(command)
    kept: list[str] = []
    skip = False
    for arg in rest:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROP_WITH_VALUE:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return [
        "simulate",
        "--preset", options.preset,
        "--vllm-version", options.vllm_version,
        "--time-scale", repr(options.time_scale),
        "--startup-seconds", repr(options.startup_seconds),
        "--seed", str(options.seed),
        "serve", *kept, "--host", host, "--port", str(port),
    ]  # fmt: skip


class SimulatedVllmServer(VllmServer):
    """A VllmServer whose process is the simulator, run with this interpreter (the project env)."""

    def __init__(self, args: Sequence[str], *, port: int, served_model_name: str, log_path: Path | None = None) -> None:
        super().__init__(args, python=Path(sys.executable), port=port, served_model_name=served_model_name,
                         log_path=log_path)  # fmt: skip

    @property
    def command(self) -> list[str]:
        return [str(self.python), "-m", "specpilot", *self.args]


def served_name(command: Sequence[str]) -> str:
    """The name clients use: --served-model-name, else the model."""
    rest = strip_launcher(command)
    for i, arg in enumerate(rest):
        if arg == "--served-model-name" and i + 1 < len(rest):
            return rest[i + 1]
    return rest[0] if rest else "model"
