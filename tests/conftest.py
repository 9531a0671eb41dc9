"""Project-wide pytest plugins: the real components the integration tiers run against.

- e2e.cluster.fixture: the local Kubernetes control plane (tests marked `cluster`; opt out: SPECPILOT_SKIP_CLUSTER=1)
- e2e.vllm.fixture: the real vLLM venvs, tiny models and servers (`vllm`; opt out: SPECPILOT_SKIP_VLLM=1)
- e2e.prometheus.fixture: the real Prometheus binary (`prometheus`; opt out: SPECPILOT_SKIP_PROMETHEUS=1)
"""

pytest_plugins = ["e2e.cluster.fixture", "e2e.vllm.fixture", "e2e.prometheus.fixture"]
