"""Fixtures of the real-vLLM tier (e2e/vllm/fixture.py): venvs installed on demand, tiny models, servers."""

from __future__ import annotations

from e2e.vllm.fixture import (  # noqa: F401  (pytest fixtures and hooks)
    pytest_collection_modifyitems,
    pytest_configure,
    tiny_models,
    vllm_server,
    vllm_validator_venv,
    vllm_venv,
)
