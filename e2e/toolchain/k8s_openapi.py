"""Vendor the Kubernetes OpenAPI v3 schemas of the objects specpilot renders, for checks that need no cluster.

`python -m e2e.toolchain.k8s_openapi` reads kube-apiserver's published schemas (api/openapi-spec/v3 of the
k8s.io/kubernetes module the toolchain builds, in $SPECPILOT_CACHE/go/mod) and writes the definitions reachable from
Deployment, Service, PodDisruptionBudget and Pod, without descriptions, to tests/unit/testdata/. A cluster-tier test
checks the vendored file still equals what the pinned Kubernetes publishes.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "tests" / "unit" / "testdata" / "k8s-openapi-v3.json"
SOURCES = ("api__v1_openapi.json", "apis__apps__v1_openapi.json", "apis__policy__v1_openapi.json")
ROOTS = {
    ("apps/v1", "Deployment"): "io.k8s.api.apps.v1.Deployment",
    ("v1", "Service"): "io.k8s.api.core.v1.Service",
    ("policy/v1", "PodDisruptionBudget"): "io.k8s.api.policy.v1.PodDisruptionBudget",
    ("v1", "Pod"): "io.k8s.api.core.v1.Pod",
}


def k8s_version() -> str:
    text = (ROOT / "e2e" / "toolchain" / "versions.sh").read_text()
    match = re.search(r"^K8S_VERSION=\$\{K8S_VERSION:-([0-9.]+)\}", text, re.MULTILINE)
    if match is None:
        raise RuntimeError("K8S_VERSION not found in e2e/toolchain/versions.sh")
    return match[1]


def spec_dir() -> Path:
    cache = Path(os.environ.get("SPECPILOT_CACHE", Path.home() / ".cache" / "specpilot"))
    return cache / "go" / "mod" / "k8s.io" / f"kubernetes@v{k8s_version()}" / "api" / "openapi-spec" / "v3"


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def trimmed(directory: Path) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for name in SOURCES:
        schemas.update(json.loads((directory / name).read_text())["components"]["schemas"])
    keep: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    name = value.rsplit("/", 1)[-1]
                    if name not in keep:
                        keep.add(name)
                        walk(schemas[name])
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for root in ROOTS.values():
        keep.add(root)
        walk(schemas[root])
    return {
        "kubernetes": k8s_version(),
        "roots": {f"{api}/{kind}": name for (api, kind), name in ROOTS.items()},
        "schemas": {name: _strip(schemas[name]) for name in sorted(keep)},
    }


def render(directory: Path) -> str:
    return json.dumps(trimmed(directory), sort_keys=True, indent=1) + "\n"


def main() -> int:
    VENDORED.parent.mkdir(parents=True, exist_ok=True)
    VENDORED.write_text(render(spec_dir()))
    print(f"wrote {VENDORED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
