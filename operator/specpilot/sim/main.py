"""`specpilot simulate [--vllm-version V] [--preset NAME] ... serve MODEL [vLLM flags]` (shell)."""

from __future__ import annotations

import argparse
import sys

from specpilot.sim.args import SimArgsError, parse_serve_args
from specpilot.sim.presets import PRESETS, preset_named
from specpilot.vllm.versions import VllmVersion


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm-version", default="0.32.0", help="vLLM version whose /metrics to imitate (default 0.32.0)")
    p.add_argument("--preset", default="llama8b-h100", choices=sorted(PRESETS), help="hardware/model cost preset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall-clock second")
    p.add_argument("--startup-seconds", type=float, default=2.0, help="/health answers 503 this long after start")
    p.add_argument("vllm_argv", nargs=argparse.REMAINDER, metavar="serve MODEL [vLLM flags]")


def main(args: argparse.Namespace) -> int:
    try:
        version = VllmVersion.parse(args.vllm_version)
        preset = preset_named(args.preset)
        serve = parse_serve_args(list(args.vllm_argv))
        if serve.speculation is not None:
            preset.drafter(serve.speculation.method)
        if args.time_scale <= 0:
            raise SimArgsError(f"--time-scale must be > 0, got {args.time_scale}")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from specpilot.sim.server import run

    run(
        serve,
        preset=preset,
        version=version,
        seed=args.seed,
        time_scale=args.time_scale,
        startup_s=args.startup_seconds,
    )
    return 0
