# specpilot developer entry points. `make test` is what CI runs (.ci/run); `make demo` is the main job.
SHELL := /bin/bash
export SPECPILOT_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/specpilot
UV ?= uv
RUN := $(UV) run --locked

.PHONY: help deps generate lint typecheck unit test demo clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

deps: ## install uv (if missing) and the locked Python environment
	@command -v $(UV) >/dev/null || python3 -m pip install --quiet "uv==0.13.9"
	$(UV) sync --locked

generate: deps ## regenerate crds/, the chart's CRDs and docs/api.md from the pydantic models
	$(RUN) specpilot crd -o crds/specpilot.dev_speculativedeployments.yaml
	$(RUN) specpilot crd --docs -o docs/api.md
	cp crds/*.yaml charts/specpilot/crds/

lint: deps ## ruff, formatting and the import-linter contract (pure core does no I/O)
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) lint-imports

typecheck: deps ## mypy --strict over the package, tests and e2e helpers
	$(RUN) mypy operator/specpilot tests e2e

unit: deps ## fast tests without external components
	$(RUN) pytest -q -m "not cluster and not vllm and not prometheus"

test: lint typecheck ## everything CI runs
	$(RUN) pytest -q
