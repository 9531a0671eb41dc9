"""Project-wide pytest plugins: the local Kubernetes control plane fixture (tests marked `cluster`)."""

pytest_plugins = ["e2e.cluster.fixture"]
