"""What vLLM's adaptive verification needs from the rest of the command line (pure; docs/design/vllm-versions.md).

vLLM 0.33.0 (`VllmConfig._validate_adaptive_verification`, `_get_v1_model_runner_unsupported_features`) refuses
`enable_adaptive_verification` with LoRA, without full CUDA graphs (`--enforce-eager`, or a compilation config whose
cudagraph_mode is NONE or PIECEWISE) and with pipeline parallelism, and only Model Runner V2 runs it (Model Runner
V1: "does not support: adaptive draft verification"). Each would stop the pod at start-up; specpilot refuses them
before any pod starts, naming the field. Pipeline parallelism and the method are CEL rules of the API
(v1alpha1.py); the version and what `extraArgs`/`env` can switch off are checked here, where the renderer knows them.
"""

from __future__ import annotations

import json

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec
from specpilot.vllm.versions import ADAPTIVE_VERIFICATION, VllmVersion

FIELD = "spec.speculation.adaptiveVerification"
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
_FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
_COMPILATION_FLAGS = ("--compilation-config", "-cc")
# long flags (as vLLM's parser reads them: "_" as "-", before "=" or ".") that rule adaptive verification out
_REFUSED: dict[str, str] = {
    "--enforce-eager": "--enforce-eager turns CUDA graphs off, and adaptive verification requires full CUDA graphs",
    "--enable-lora": "vLLM: adaptive verification is not currently compatible with LoRA",
}


def _long(arg: str) -> str:
    return "--" + arg[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")


def _graph_mode(extra_args: list[str], index: int) -> str | None:
    """cudagraph_mode set by the compilation-config argument at `index` (JSON or dotted key), upper-cased."""
    arg = extra_args[index]
    flag, _, inline = arg.partition("=")
    dotted = flag.split(".", 1)
    if len(dotted) == 2 and dotted[1].replace("-", "_") == "cudagraph_mode":
        value = inline or (extra_args[index + 1] if index + 1 < len(extra_args) else "")
        return value.upper()
    if flag not in _COMPILATION_FLAGS:
        return None
    raw = inline or (extra_args[index + 1] if index + 1 < len(extra_args) else "")
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    mode = parsed.get("cudagraph_mode") if isinstance(parsed, dict) else None
    return None if mode is None else str(mode).upper()


def adaptive_verification_problem(spec: SpeculativeDeploymentSpec, version: VllmVersion) -> tuple[str, str] | None:
    """(field, problem) when this spec cannot run adaptive verification on `version`; None when it can (or is off)."""
    if not spec.speculation.adaptive_verification:
        return None
    if version < ADAPTIVE_VERIFICATION:
        return FIELD, (
            f"needs vLLM >= {ADAPTIVE_VERIFICATION} (enable_adaptive_verification for methods other than dspark, "
            f"on Model Runner V2); this deployment runs {version}"
        )
    extra = spec.engine.extra_args
    for index, arg in enumerate(extra):
        if arg.startswith("--") and len(arg) > 2:
            flag = _long(arg)
            why = _REFUSED.get(flag)
            if why is not None:
                return f"spec.engine.extraArgs[{index}]", f"{why}; remove it or turn off {FIELD}"
        mode = _graph_mode(extra, index) if arg.startswith("-") else None
        if mode is not None and mode not in _FULL_GRAPH_MODES:
            return f"spec.engine.extraArgs[{index}]", (
                f"cudagraph_mode {mode}: adaptive verification requires full CUDA graphs "
                f"({', '.join(_FULL_GRAPH_MODES)}); remove it or turn off {FIELD}"
            )
    for index, entry in enumerate(spec.engine.env):
        if entry.name == V2_RUNNER_ENV and entry.value is not None and entry.value.strip() in ("0", "false", "False"):
            return f"spec.engine.env[{index}].value", (
                f"{V2_RUNNER_ENV}={entry.value.strip()} selects Model Runner V1, which does not support adaptive "
                f"draft verification; remove it or turn off {FIELD}"
            )
    return None
