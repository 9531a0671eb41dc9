"""`specpilot simulate [--vllm-version V] [--preset NAME] ... serve MODEL [vLLM flags]` (shell)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specpilot.sim.args import SimArgsError, parse_serve_args
from specpilot.sim.presets import PRESETS, Preset, preset_from_profile, preset_named
from specpilot.vllm.versions import CURRENT, OLDEST_SUPPORTED, VllmVersion


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm-version", default="0.32.0", help="vLLM version whose /metrics to imitate (default 0.32.0)")
    p.add_argument("--preset", default="llama8b-h100", choices=sorted(PRESETS), help="hardware/model cost preset")
    p.add_argument("--profile", type=Path, metavar="FILE",
                   help="JSON profile in place of --preset: a base preset with numbers replaced, e.g. fitted to a "
                        "real server (docs/design/simulator.md)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall-clock second")
    p.add_argument("--startup-seconds", type=float, default=2.0, help="/health answers 503 this long after start")
    p.add_argument("vllm_argv", nargs=argparse.REMAINDER, metavar="serve MODEL [vLLM flags]")


def imitated_version(raw: str) -> tuple[VllmVersion, str | None]:
    """The version whose /metrics the simulator imitates, and a note when it is not one specpilot knows exactly.

    The operator renders a version newer than the newest it knows as that one, with a note (dialects._notes); the
    simulator does the same rather than claim the series of a release nobody has checked. A version older than the
    oldest specpilot renders (versions.OLDEST_SUPPORTED) has no known series at all: refused, with the range."""
    try:
        version = VllmVersion.parse(raw)
    except ValueError as err:
        raise SimArgsError(f"--vllm-version: {err}") from None
    if version < OLDEST_SUPPORTED:
        raise SimArgsError(
            f"--vllm-version {version}: older than {OLDEST_SUPPORTED}, the oldest version specpilot knows "
            f"(known: {OLDEST_SUPPORTED} to {CURRENT})"
        )
    if version > CURRENT:
        return version, (
            f"vLLM {version} is newer than the newest version specpilot knows; its /metrics are imitated as {CURRENT}'s"
        )
    return version, None


MAX_PROFILE_BYTES = 64 * 1024


def read_profile(path: Path) -> Preset:
    """The preset a profile file describes; a ValueError naming the file for anything unreadable or malformed."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as err:
        raise ValueError(f"--profile {path}: {err.strerror or err}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ValueError(f"--profile {path}: larger than {MAX_PROFILE_BYTES:,} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"--profile {path}: not JSON: {err}") from None
    return preset_from_profile(doc, str(path))


def main(args: argparse.Namespace) -> int:
    try:
        version, note = imitated_version(args.vllm_version)
        preset = preset_named(args.preset) if args.profile is None else read_profile(args.profile)
        serve = parse_serve_args(list(args.vllm_argv))
        if serve.speculation is not None:
            preset.drafter(serve.speculation.method)
        if args.time_scale <= 0:
            raise SimArgsError(f"--time-scale must be > 0, got {args.time_scale}")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if note is not None:
        print(f"specpilot simulator: {note}", file=sys.stderr)
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
