"""One speculation intent -> the exact `vllm serve` argv of one vLLM version (docs/design/vllm-versions.md).

Three command-line dialects exist:

* **Legacy flags (<= 0.8.2)**: `--speculative-model` (`[ngram]` for n-gram), `--num-speculative-tokens`,
  `--speculative-draft-tensor-parallel-size`, `--speculative-model-quantization`, `--ngram-prompt-lookup-max/-min`,
  `--speculative-disable-by-batch-size`.
* **`--speculative-config` JSON (>= 0.8.3)**: compact, keys sorted, so the same intent always hashes the same.
* 0.8.2 accepts both, as the config there is parsed as a Python literal, but 0.8.2's V0/V1 selector
  (`EngineArgs._is_v1_supported_oracle`, 0.8.2 sdist `vllm/engine/arg_utils.py` L1641-1650) looks only at the legacy
  `--speculative-model`: with `--speculative-config` it picks V1, whose model runner asserts "Currently, only ngram
  spec decode is supported in V1" (`vllm/v1/worker/gpu_model_runner.py` L154). With the legacy flags the selector
  falls back to V0 for every method, exactly as on 0.8.0-0.8.1, so 0.8.2 gets the legacy dialect.

Which engine runs the speculation decides what a threshold means. `disable_by_batch_size` is read
only by V0. V0 runs every method below 0.8.0; from 0.8.0 to 0.8.5 vLLM still falls back to V0 for speculation unless
VLLM_USE_V1=1 is set (then ngram, and from 0.8.3 eagle, from 0.8.5 eagle3 run on V1); from 0.9.0 ngram, eagle and
eagle3 run on V1 by default and only draft_model falls back to V0; 0.10.0 removed V0. specpilot reads VLLM_USE_V1
from spec.engine.env to know which engine that is, renders the threshold only where the engine honours it, and
reports ThresholdSupport.UNSUPPORTED otherwise so the caller can say so in a condition and switch speculation as a
whole instead. Not rendering an ignored key also keeps the config hash (and so the pods) unchanged when the autotuner
moves a threshold that would have no effect. One fallback is not modelled because it depends on the GPU: 0.8.x-0.9.x
may also fall back to V0 for an fp8 KV cache that the installed FlashAttention cannot serve.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from specpilot.api import rollout
from specpilot.api.v1alpha1 import Quantization, SpeculationMethod, SpeculativeDeploymentSpec
from specpilot.vllm import acceptance
from specpilot.vllm.adaptive import adaptive_verification_problem
from specpilot.vllm.intent import BatchSchedule, SpeculationIntent, intent_from_spec
from specpilot.vllm.metrics import MetricNames, default_engine, metric_names_for
from specpilot.vllm.versions import (
    BITSANDBYTES_REMOVED,
    CURRENT,
    DFLASH_METHOD,
    DISABLE_BY_BATCH_SIZE_REJECTED,
    DRAFT_MODEL_V1,
    DRAIN_ON_SHUTDOWN,
    DSPARK_METHOD,
    DYNAMIC_SPECULATION,
    EAGLE3_METHOD,
    GGUF_REMOVED,
    LEGACY_FLAGS_REMOVED,
    MTP_METHOD,
    NGRAM_GPU_METHOD,
    NO_ENABLE_PREFIX_CACHING,
    OLDEST_SUPPORTED,
    SPECULATIVE_CONFIG_JSON,
    SUFFIX_METHOD,
    V0_ENGINE_REMOVED,
    V1_EAGLE,
    V1_ENGINE_DEFAULT,
    V1_ENGINE_OPT_IN,
    V1_SPECULATION_DEFAULT,
    V2_BLOCK_MANAGER_DEFAULT,
    Engine,
    VllmVersion,
)

CONFIG_HASH_LENGTH = 10
# vLLM's n-gram window when neither bound is given (>= 0.8.2). Older versions demand an explicit maximum,
# so the window is always rendered: every version then matches the same prompt spans.
NGRAM_DEFAULT_WINDOW = 5
USE_V1_ENV = "VLLM_USE_V1"


class ThresholdSupport(StrEnum):
    """How "stop speculating at batch size N" reaches the engine (status.effective.thresholdSupport)."""

    NOT_REQUESTED = "NotRequested"  # no threshold asked for, or speculation off
    DISABLE_BY_BATCH_SIZE = "DisableByBatchSize"  # V0 engine: skip the proposer while >= N sequence groups run
    BATCH_SCHEDULE = "BatchSchedule"  # >= 0.24: num_speculative_tokens_per_batch_size, K = 0 from N on
    UNSUPPORTED = "Unsupported"  # nothing in this version/engine does it; switch speculation as a whole


class UnsupportedCombination(ValueError):
    """A spec this vLLM version cannot run; raised before any pod starts. `field` is the spec path to change."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class RenderedCommand:
    argv: tuple[str, ...]  # the container command: vllm serve MODEL ...
    version: VllmVersion
    engine: Engine  # the engine the pod runs, which decides the threshold and the metric names
    threshold_support: ThresholdSupport
    # The speculative settings by SpeculativeConfig key: the JSON from 0.8.3, legacy flags before (`method` has none).
    speculative_config: dict[str, Any] | None
    disable_above_batch_size: int | None = None  # the threshold asked for, rendered or not
    batch_schedule: BatchSchedule | None = None  # the schedule rendered (BATCH_SCHEDULE only)
    threshold_reason: str | None = None  # why the threshold is not expressible (UNSUPPORTED only)
    notes: tuple[str, ...] = ()
    # --shutdown-timeout rendered: how long a SIGTERM'd server finishes its in-flight requests; 0 = aborts them
    drain_seconds: int = 0
    image: str = ""  # the container image that runs argv: part of the configuration

    @property
    def speculating(self) -> bool:
        return self.speculative_config is not None

    @property
    def config_hash(self) -> str:
        """Pod-template label: changes exactly when the image or the command line does, so only real changes roll
        the pods, and pods of another image are never measured as the same configuration."""
        return hashlib.sha256("\0".join((self.image, *self.argv)).encode()).hexdigest()[:CONFIG_HASH_LENGTH]

    @property
    def metric_names(self) -> MetricNames:
        return metric_names_for(self.version, self.engine)


def describe_threshold(command: RenderedCommand) -> str:
    """One sentence for status and `specpilot render`: how (or why not) the batch-size threshold reaches vLLM."""
    n = command.disable_above_batch_size
    match command.threshold_support:
        case ThresholdSupport.NOT_REQUESTED:
            return "speculation is off" if not command.speculating else "no batch-size threshold requested"
        case ThresholdSupport.DISABLE_BY_BATCH_SIZE:
            return (
                f"disable_by_batch_size={n}: the V0 engine of vLLM {command.version} skips speculation while "
                f"{n} or more requests run"
            )
        case ThresholdSupport.BATCH_SCHEDULE:
            schedule = json.dumps([list(step) for step in command.batch_schedule or ()], separators=(",", ":"))
            return (
                f"num_speculative_tokens_per_batch_size={schedule}: vLLM {command.version} sets K per step from the "
                "number of scheduled requests (K=0 means no speculation)"
            )
        case ThresholdSupport.UNSUPPORTED:
            asked = f"disableAboveBatchSize={n}" if n is not None else "the batch-size schedule"
            return (
                f"{asked} is not expressible on vLLM {command.version}: {command.threshold_reason}; "
                "specpilot switches speculation on or off as a whole instead"
            )


# ------------------------------------------------------------------------------------------ what each version has

_METHOD_SINCE: dict[SpeculationMethod, VllmVersion] = {
    SpeculationMethod.NGRAM: OLDEST_SUPPORTED,
    SpeculationMethod.DRAFT_MODEL: OLDEST_SUPPORTED,
    SpeculationMethod.EAGLE: OLDEST_SUPPORTED,
    SpeculationMethod.EAGLE3: EAGLE3_METHOD,
    SpeculationMethod.MTP: MTP_METHOD,  # before 0.11 vLLM named MTP per model (deepseek_mtp, ...)
    SpeculationMethod.SUFFIX: SUFFIX_METHOD,
    SpeculationMethod.NGRAM_GPU: NGRAM_GPU_METHOD,
    SpeculationMethod.DFLASH: DFLASH_METHOD,
    SpeculationMethod.DSPARK: DSPARK_METHOD,
}
_V0_METHODS = frozenset({SpeculationMethod.NGRAM, SpeculationMethod.DRAFT_MODEL, SpeculationMethod.EAGLE})
_QUANTIZATION_REMOVED: dict[Quantization, VllmVersion] = {
    Quantization.GGUF: GGUF_REMOVED,
    Quantization.BITSANDBYTES: BITSANDBYTES_REMOVED,
}


def methods_available(version: VllmVersion) -> tuple[SpeculationMethod, ...]:
    """Speculation methods specpilot can render for this version (on some engine)."""
    return tuple(method for method in SpeculationMethod if _method_gap(method, version) is None)


def _method_gap(method: SpeculationMethod, version: VllmVersion) -> str | None:
    since = _METHOD_SINCE[method]
    if version < since:
        return f"method {method} needs vLLM >= {since}"
    if method is SpeculationMethod.DRAFT_MODEL and V0_ENGINE_REMOVED <= version < DRAFT_MODEL_V1:
        return (
            f"method draft_model raises NotImplementedError on vLLM {V0_ENGINE_REMOVED} to 0.14.x "
            f"(V0 removed, V1 support back in {DRAFT_MODEL_V1})"
        )
    return None


def _v1_methods(version: VllmVersion) -> frozenset[SpeculationMethod]:
    """Methods the V1 engine runs before V0 was removed (its selector lists them; the rest fall back to V0)."""
    methods = {SpeculationMethod.NGRAM}
    if version >= V1_EAGLE:
        methods.add(SpeculationMethod.EAGLE)
    if version >= EAGLE3_METHOD:
        methods.add(SpeculationMethod.EAGLE3)
    return frozenset(methods)


def _allowed(methods: frozenset[SpeculationMethod] | tuple[SpeculationMethod, ...]) -> str:
    return ", ".join(sorted(methods)) or "none"


@dataclass(frozen=True)
class _UseV1:
    value: bool | None  # None: VLLM_USE_V1 not set (or set from a Secret/ConfigMap specpilot cannot read)
    field: str = "spec.engine.env"


def _use_v1(spec: SpeculativeDeploymentSpec) -> _UseV1:
    for index, entry in enumerate(spec.engine.env):
        if entry.name != USE_V1_ENV:
            continue
        field = f"spec.engine.env[{index}].value"
        raw = entry.value
        if raw is None:
            return _UseV1(None, field)
        if str(raw).strip() not in ("0", "1"):
            raise UnsupportedCombination(field, f"{USE_V1_ENV} must be 0 or 1 (got {raw!r})")
        return _UseV1(str(raw).strip() == "1", field)
    return _UseV1(None)


def _speculation_engine(version: VllmVersion, method: SpeculationMethod, use_v1: _UseV1) -> Engine:
    """The engine vLLM picks for this method; raise UnsupportedCombination where that engine cannot run it.

    Mirrors `_is_v1_supported_oracle` (0.8.2, 0.8.5, 0.9.2 sdists): with VLLM_USE_V1 unset, 0.8.x falls
    back to V0 for all speculation and 0.9.x for the methods V1 lacks; VLLM_USE_V1=1 with such a method is a startup
    error, and VLLM_USE_V1=0 forces V0, which has no eagle3.
    """
    if version >= V0_ENGINE_REMOVED:
        return Engine.V1
    if version < V1_ENGINE_DEFAULT:
        if use_v1.value and version >= V1_ENGINE_OPT_IN:
            raise UnsupportedCombination(
                use_v1.field,
                f"specpilot runs speculation on vLLM {version} only on the V0 engine (V1 was an opt-in alpha "
                f"before {V1_ENGINE_DEFAULT}); remove {USE_V1_ENV}=1",
            )
        return Engine.V0
    v1_methods = _v1_methods(version)
    if use_v1.value is True:
        if method not in v1_methods:
            raise UnsupportedCombination(
                use_v1.field,
                f"{USE_V1_ENV}=1 makes vLLM {version} refuse method {method}: its V1 engine runs only "
                f"{_allowed(v1_methods)}; remove {USE_V1_ENV}=1",
            )
        return Engine.V1
    if use_v1.value is None and version >= V1_SPECULATION_DEFAULT and method in v1_methods:
        return Engine.V1
    if method not in _V0_METHODS:
        fix = f"remove {USE_V1_ENV}=0" if use_v1.value is False else f"set {USE_V1_ENV}=1"
        raise UnsupportedCombination(
            use_v1.field,
            f"vLLM {version} would run method {method} on its V0 engine, which runs only {_allowed(_V0_METHODS)}; "
            f"{fix} so it runs on V1",
        )
    return Engine.V0


def _engine_without_speculation(version: VllmVersion, use_v1: _UseV1) -> Engine:
    if version >= V0_ENGINE_REMOVED or version < V1_ENGINE_OPT_IN or use_v1.value is None:
        return default_engine(version)
    return Engine.V1 if use_v1.value else Engine.V0


# ------------------------------------------------------------------------------------------------ spec checks

_SPECULATION_FLAGS = (
    "--speculative-config",
    "-sc",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
    "--speculative-model",
    "--num-speculative-tokens",
    "--speculative-draft-tensor-parallel-size",
    "-spec-draft-tp",
    "--speculative-model-quantization",
    "--speculative-max-model-len",
    "--speculative-disable-by-batch-size",
    "--ngram-prompt-lookup-max",
    "--ngram-prompt-lookup-min",
    *(flag for _, flag in acceptance.LEGACY_FLAGS),
)
# Flags the renderer owns, with the spec field that sets them: a second copy in extraArgs would silently win
# (argparse keeps the last), so the plan, the threshold and the status would describe a pod that does not exist.
_OWNED_FLAGS: dict[str, str] = {
    "--model": "spec.target.model",
    "--served-model-name": "spec.engine.servedModelName",
    "--port": "spec.service.port",
    "--tensor-parallel-size": "spec.parallelism.tensorParallelSize",
    "-tp": "spec.parallelism.tensorParallelSize",
    "--pipeline-parallel-size": "spec.parallelism.pipelineParallelSize",
    "-pp": "spec.parallelism.pipelineParallelSize",
    "--dtype": "spec.engine.dtype",
    "--max-model-len": "spec.engine.maxModelLen",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--device-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--max-num-seqs": "spec.engine.maxNumSeqs",
    "--kv-cache-dtype": "spec.engine.kvCacheDtype",
    "--quantization": "spec.target.quantization",
    "-q": "spec.target.quantization",
    "--revision": "spec.target.revision",
    "--use-v2-block-manager": "spec.engine.version (rendered where speculation needs it)",
    "--shutdown-timeout": "spec.rollout.drainSeconds",
    "--enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--disable-prefix-caching": "spec.engine.enablePrefixCaching",
    **dict.fromkeys(_SPECULATION_FLAGS, "spec.speculation"),
}
_DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")


# Flags refused whatever they would say: --config loads any flag from a YAML file, and --disable-log-stats turns off
# the metrics specpilot reads.
_REFUSED_FLAGS: dict[str, str] = {
    "--config": "--config loads arbitrary flags from a file (including the ones specpilot renders); put each flag "
    "in extraArgs instead",
    "--disable-log-stats": "--disable-log-stats is not allowed: it also turns off the Prometheus metrics specpilot "
    "reads",
}
_LONG_OWNED = {flag: owner for flag, owner in _OWNED_FLAGS.items() if flag.startswith("--")}
_SHORT_OWNED = {flag: owner for flag, owner in _OWNED_FLAGS.items() if not flag.startswith("--")}


def _long_flag(arg: str) -> str:
    """The flag vLLM's parser reads from a `--...` token: before "=", before the first "." (dotted keys set one key
    of a JSON flag), with "_" as "-" (FlexibleArgumentParser accepts both)."""
    return "--" + arg[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")


def extra_arg_problem(arg: str) -> str | None:
    """Why one extraArgs token could set something the renderer owns, in any spelling vLLM's parser accepts."""
    if arg == "--":
        return "a bare -- would make every later token a positional argument (the model)"
    if arg.startswith("--"):
        flag = _long_flag(arg)
        for refused, why in _REFUSED_FLAGS.items():
            if refused.startswith(flag):  # exact, or a prefix argparse would expand to it
                return why if refused == flag else f"{arg.split('=', 1)[0]} abbreviates {refused}: {why}"
        for owned, owner in _LONG_OWNED.items():
            if owned.startswith(flag):
                spelled = "" if owned == flag else f" (as {arg.split('=', 1)[0]}, which vLLM reads as {owned})"
                return f"{owned} is rendered by specpilot from {owner}{spelled}; set it there instead"
        return None
    if arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit() and arg[1] != ".":
        name = arg.split("=", 1)[0]
        for owned, owner in _SHORT_OWNED.items():
            if name == owned:
                return f"{owned} is rendered by specpilot from {owner}; set it there instead"
            if name.startswith(owned) or owned.startswith(name):
                return f"{arg} would be read as {owned}, which specpilot renders from {owner}; set it there instead"
    return None


def _check_extra_args(extra_args: list[str]) -> None:
    for index, arg in enumerate(extra_args):
        problem = extra_arg_problem(arg)
        if problem is not None:
            raise UnsupportedCombination(f"spec.engine.extraArgs[{index}]", problem)


def _data_parallel_size(extra_args: list[str]) -> int:
    """The data parallel size vLLM reads from extraArgs: every spelling its parser accepts (`--data-parallel-size`,
    `--data_parallel_size`, `-dp`, each with the value as the next token or after "="), the last one winning as
    argparse's does. Prefixes are ambiguous there (--data-parallel-size-local, -dpl, ...), so only these count."""
    size = 1
    for index, arg in enumerate(extra_args):
        name, equals, inline = arg.partition("=")
        flag = _long_flag(arg) if arg.startswith("--") else name
        if flag in _DATA_PARALLEL_FLAGS:
            value = inline if equals else (extra_args[index + 1] if index + 1 < len(extra_args) else "")
            size = int(value) if value.isdigit() else 1
    return size


def _check_spec(spec: SpeculativeDeploymentSpec, version: VllmVersion, engine: Engine) -> None:
    """Reject what this version cannot run, whether or not speculation is on now (autotune may switch it on)."""
    speculation = spec.speculation
    draft = speculation.draft
    quantizations = [("spec.target.quantization", spec.target.quantization)]
    if draft is not None:
        quantizations.append(("spec.speculation.draft.quantization", draft.quantization))
    for field, quantization in quantizations:
        removed = _QUANTIZATION_REMOVED.get(quantization)
        if removed is not None and version >= removed:
            raise UnsupportedCombination(
                field, f"quantization {quantization} was removed in vLLM {removed} (this deployment runs {version})"
            )
    target_tp = spec.parallelism.tensor_parallel_size
    if draft is not None and draft.tensor_parallel_size not in (None, 1, target_tp):
        raise UnsupportedCombination(
            "spec.speculation.draft.tensorParallelSize",
            f"must be 1 or spec.parallelism.tensorParallelSize ({target_tp}); vLLM accepts no other draft TP",
        )
    if draft is not None and draft.revision is not None and version < LEGACY_FLAGS_REMOVED:
        raise UnsupportedCombination(
            "spec.speculation.draft.revision",
            f"vLLM {version} has no flag for the draft revision (the speculative config's `revision` is rendered "
            f"from {LEGACY_FLAGS_REMOVED}); remove it, or point spec.speculation.draft.model at a local copy of it",
        )
    if engine is Engine.V0 and spec.parallelism.pipeline_parallel_size > 1:
        raise UnsupportedCombination(
            "spec.parallelism.pipelineParallelSize",
            f"must be 1: the V0 engine that speculates on vLLM {version} raises NotImplementedError "
            "(speculative decoding is incompatible with pipeline parallelism)",
        )
    _acceptance(spec, version, engine)
    _check_drain(spec, version)
    _check_extra_args(spec.engine.extra_args)
    problem = adaptive_verification_problem(spec, version)
    if problem is not None:
        raise UnsupportedCombination(*problem)


def _check_drain(spec: SpeculativeDeploymentSpec, version: VllmVersion) -> None:
    """A drain asked for explicitly is refused where vLLM cannot drain; the default one is only noted (drain_note)."""
    asked = spec.rollout.drain_seconds
    if asked and version < DRAIN_ON_SHUTDOWN:
        raise UnsupportedCombination(
            "spec.rollout.drainSeconds",
            f"vLLM {version} cannot drain: --shutdown-timeout arrives in vLLM {DRAIN_ON_SHUTDOWN}, and before it "
            "SIGTERM aborts every in-flight request; set 0 (or omit it) or run vLLM >= "
            f"{DRAIN_ON_SHUTDOWN}",
        )


def rendered_drain_seconds(spec: SpeculativeDeploymentSpec, version: VllmVersion) -> int:
    """The --shutdown-timeout this version gets: the spec's drain where vLLM has the flag, else 0 (abort)."""
    return rollout.drain_seconds(spec) if version >= DRAIN_ON_SHUTDOWN else 0


def drain_note(command: RenderedCommand) -> str | None:
    """What `validate` says about a version that cannot drain: its restarts lose the requests in flight."""
    if command.version >= DRAIN_ON_SHUTDOWN or command.drain_seconds:
        return None
    return (
        f"vLLM {command.version} has no --shutdown-timeout (vLLM >= {DRAIN_ON_SHUTDOWN}): every restart, rollout "
        "or autotune actuation aborts the requests its pods are generating"
    )


def _acceptance(spec: SpeculativeDeploymentSpec, version: VllmVersion, engine: Engine) -> dict[str, Any]:
    """The acceptance-method keys (vllm/acceptance.py), its refusal as an UnsupportedCombination."""
    try:
        return acceptance.acceptance_config(spec.speculation.acceptance, version, engine, spec.speculation.method)
    except acceptance.AcceptanceUnsupported as err:
        raise UnsupportedCombination(err.field, err.problem) from None


# ------------------------------------------------------------------------------------------------- threshold


@dataclass(frozen=True)
class _Threshold:
    support: ThresholdSupport
    disable_above_batch_size: int | None = None
    schedule: BatchSchedule | None = None
    reason: str | None = None


def _check_schedule(schedule: BatchSchedule) -> None:
    """vLLM's rules for the dynamic schedule (vLLM's dynamic/utils.py); a bad one is a caller bug, not a user error."""
    if not schedule or schedule[0][0] != 1:
        raise ValueError(f"batch schedule {schedule}: the first range must start at batch size 1")
    previous_end = 0
    for start, end, k in schedule:
        if start <= previous_end or end < start or k < 0:
            raise ValueError(
                f"batch schedule {schedule}: ranges (start, end, K) must ascend without overlap, with end >= start "
                "and K >= 0"
            )
        previous_end = end


def _forces_runner_v1(spec: SpeculativeDeploymentSpec) -> bool:
    """VLLM_USE_V2_MODEL_RUNNER=0 in spec.engine.env: Model Runner V1 (V2 is vLLM 0.33's default on a GPU)."""
    return any(
        e.name == "VLLM_USE_V2_MODEL_RUNNER" and (e.value or "").strip() in ("0", "false", "False")
        for e in spec.engine.env
    )


def _schedule_switched_off(method: SpeculationMethod, extra_args: list[str], runner_v1: bool = False) -> str | None:
    """Where vLLM ignores the schedule with only a warning (vllm/config/vllm.py), so claiming it would be false."""
    if method is SpeculationMethod.SUFFIX or (runner_v1 and method is SpeculationMethod.NGRAM_GPU):
        return (
            f"vLLM switches the batch-size schedule off for method {method} on Model Runner V1 "
            "(only ngram, eagle, eagle3, mtp, draft_model and dflash keep it)"
        )
    data_parallel = _data_parallel_size(extra_args)
    if data_parallel > 1:
        return f"vLLM switches the batch-size schedule off with data parallel {data_parallel} > 1"
    return None


def _plan_threshold(
    spec: SpeculativeDeploymentSpec, version: VllmVersion, engine: Engine, intent: SpeculationIntent
) -> _Threshold:
    requested = intent.disable_above_batch_size
    if not intent.enabled or (requested is None and intent.batch_schedule is None):
        return _Threshold(ThresholdSupport.NOT_REQUESTED)
    method = spec.speculation.method
    max_num_seqs = spec.engine.max_num_seqs
    if requested is not None and not 2 <= requested <= max_num_seqs:
        raise UnsupportedCombination(
            "spec.speculation.disableAboveBatchSize",
            f"must be between 2 and spec.engine.maxNumSeqs ({max_num_seqs}); got {requested}",
        )
    if version >= DYNAMIC_SPECULATION:
        if intent.batch_schedule is not None:
            _check_schedule(intent.batch_schedule)
        switched_off = _schedule_switched_off(method, spec.engine.extra_args, _forces_runner_v1(spec))
        if switched_off is not None:
            return _Threshold(ThresholdSupport.UNSUPPORTED, requested, reason=switched_off)
        schedule = intent.batch_schedule
        if schedule is None:
            assert requested is not None
            k = intent.num_speculative_tokens
            if k is None:
                raise UnsupportedCombination(
                    "spec.speculation.numSpeculativeTokens",
                    f"is required to express disableAboveBatchSize on vLLM {version}: the "
                    "num_speculative_tokens_per_batch_size schedule names K for the batches below the threshold",
                )
            schedule = ((1, requested - 1, k), (requested, max_num_seqs, 0))
        return _Threshold(ThresholdSupport.BATCH_SCHEDULE, requested, schedule=schedule)
    if requested is None:  # a schedule alone; with a threshold too, the threshold is the fallback (intent.py)
        raise UnsupportedCombination(
            "spec.engine.version",
            f"a per-batch-size schedule needs vLLM >= {DYNAMIC_SPECULATION} "
            f"(num_speculative_tokens_per_batch_size); this deployment runs {version}",
        )
    if engine is Engine.V0:
        return _Threshold(ThresholdSupport.DISABLE_BY_BATCH_SIZE, requested)
    if version < V0_ENGINE_REMOVED:
        hint = f"; {USE_V1_ENV}=0 would run it on V0" if method in _V0_METHODS else ""
        reason = f"method {method} runs on the V1 engine, which ignores disable_by_batch_size{hint}"
    elif version < DISABLE_BY_BATCH_SIZE_REJECTED:
        reason = (
            f"disable_by_batch_size has been a no-op since {V0_ENGINE_REMOVED} and the per-batch-size schedule "
            f"arrives in {DYNAMIC_SPECULATION}"
        )
    else:
        reason = (
            f"disable_by_batch_size is rejected since {DISABLE_BY_BATCH_SIZE_REJECTED} and the per-batch-size "
            f"schedule arrives in {DYNAMIC_SPECULATION}"
        )
    return _Threshold(ThresholdSupport.UNSUPPORTED, requested, reason=reason)


# ---------------------------------------------------------------------------------------------------- render


def _ngram_window(spec: SpeculativeDeploymentSpec) -> tuple[int, int]:
    """(min, max) as vLLM >= 0.8.2 fills them in; rendered on every version so they all match the same spans."""
    low, high = spec.speculation.prompt_lookup_min, spec.speculation.prompt_lookup_max
    if low is None and high is None:
        return NGRAM_DEFAULT_WINDOW, NGRAM_DEFAULT_WINDOW
    if low is None:
        assert high is not None
        return high, high
    return low, high if high is not None else low


def _speculative_config(
    spec: SpeculativeDeploymentSpec, intent: SpeculationIntent, threshold: _Threshold, *, legacy: bool
) -> dict[str, Any]:
    speculation = spec.speculation
    method = speculation.method
    config: dict[str, Any] = {"method": str(method)}
    if method in (SpeculationMethod.NGRAM, SpeculationMethod.NGRAM_GPU):
        if legacy:
            config["model"] = "[ngram]"
        config["prompt_lookup_min"], config["prompt_lookup_max"] = _ngram_window(spec)
    draft = speculation.draft
    if draft is not None:
        config["model"] = draft.model
        if draft.tensor_parallel_size is not None:
            config["draft_tensor_parallel_size"] = draft.tensor_parallel_size
        if draft.quantization is not Quantization.NONE:
            config["quantization"] = str(draft.quantization)
        if draft.revision is not None:
            config["revision"] = draft.revision
    if intent.num_speculative_tokens is not None:
        config["num_speculative_tokens"] = intent.num_speculative_tokens
    if speculation.adaptive_verification:
        config["enable_adaptive_verification"] = True
    if threshold.support is ThresholdSupport.DISABLE_BY_BATCH_SIZE:
        config["disable_by_batch_size"] = threshold.disable_above_batch_size
    elif threshold.support is ThresholdSupport.BATCH_SCHEDULE:
        config["num_speculative_tokens_per_batch_size"] = [list(step) for step in threshold.schedule or ()]
    return config


# SpeculativeConfig key -> legacy flag (removed in 0.8.3), in rendering order; `method` has no flag.
_LEGACY_FLAGS = (
    ("model", "--speculative-model"),
    ("num_speculative_tokens", "--num-speculative-tokens"),
    ("draft_tensor_parallel_size", "--speculative-draft-tensor-parallel-size"),
    ("quantization", "--speculative-model-quantization"),
    ("prompt_lookup_max", "--ngram-prompt-lookup-max"),
    ("prompt_lookup_min", "--ngram-prompt-lookup-min"),
    ("disable_by_batch_size", "--speculative-disable-by-batch-size"),
    *acceptance.LEGACY_FLAGS,
)


def _speculation_args(config: dict[str, Any], *, legacy: bool) -> list[str]:
    if not legacy:
        return ["--speculative-config", json.dumps(config, sort_keys=True, separators=(",", ":"))]
    args: list[str] = []
    for key, flag in _LEGACY_FLAGS:
        if key in config:
            args += [flag, str(config[key])]
    return args


def _engine_args(spec: SpeculativeDeploymentSpec, version: VllmVersion, port: int) -> list[str]:
    engine = spec.engine
    target = spec.target
    args = [
        "vllm",
        "serve",
        target.model,
        "--served-model-name",
        engine.served_model_name or target.model,
        "--port",
        str(port),
        "--tensor-parallel-size",
        str(spec.parallelism.tensor_parallel_size),
        "--pipeline-parallel-size",
        str(spec.parallelism.pipeline_parallel_size),
        "--dtype",
        str(engine.dtype),
        "--max-model-len",
        str(engine.max_model_len),
        "--gpu-memory-utilization",
        repr(engine.gpu_memory_utilization),
        "--max-num-seqs",
        str(engine.max_num_seqs),
    ]
    if engine.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", engine.kv_cache_dtype]
    if target.quantization is not Quantization.NONE:
        args += ["--quantization", str(target.quantization)]
    if target.revision is not None:
        args += ["--revision", target.revision]
    if engine.enable_prefix_caching is True:
        args.append("--enable-prefix-caching")
    elif engine.enable_prefix_caching is False and version >= NO_ENABLE_PREFIX_CACHING:
        # Older versions have only the store_true flag, and prefix caching is off by default there.
        args.append("--no-enable-prefix-caching")
    drain = rendered_drain_seconds(spec, version)
    if drain:
        args += ["--shutdown-timeout", str(drain)]
    return args


def _notes(
    spec: SpeculativeDeploymentSpec, version: VllmVersion, threshold: _Threshold, speculating: bool
) -> list[str]:
    notes: list[str] = []
    if version > CURRENT:
        notes.append(f"vLLM {version} is newer than the newest version specpilot knows; rendered as for {CURRENT}")
    if not speculating:
        return notes
    method = spec.speculation.method
    if version == SPECULATIVE_CONFIG_JSON:
        notes.append(
            f"vLLM {version} picks its engine from the legacy flags only (with --speculative-config it would run "
            "V1, which runs ngram only), so the deprecated legacy flags are rendered"
        )
    if method is SpeculationMethod.EAGLE and version < EAGLE3_METHOD:
        notes.append(
            f"vLLM {version} cannot be told the method: it treats the draft as EAGLE only when its name contains "
            "'eagle-' or its config.json is in vLLM's EAGLE format"
        )
    if method is SpeculationMethod.SUFFIX:
        notes.append("method suffix needs the arctic-inference package in the vLLM image (ImportError otherwise)")
    if threshold.reason is not None:
        notes.append(f"threshold not rendered: {threshold.reason}")
    return notes


def threshold_support_for(spec: SpeculativeDeploymentSpec) -> tuple[ThresholdSupport, str | None]:
    """How a batch-size threshold would reach this spec's engine, exactly as render_command would render one.

    The one place that answers "can the threshold be tuned here": by version, engine (V0/V1, VLLM_USE_V1), method
    and extra args (data parallel, suffix), not by version alone. UNSUPPORTED carries the reason.
    """
    try:
        version = VllmVersion.parse(spec.engine.version)
        if spec.engine.max_num_seqs < 2:
            return ThresholdSupport.UNSUPPORTED, "spec.engine.maxNumSeqs < 2 leaves no batch size to switch at"
        use_v1 = _use_v1(spec) if V1_ENGINE_OPT_IN <= version < V0_ENGINE_REMOVED else _UseV1(None)
        engine = _speculation_engine(version, spec.speculation.method, use_v1)
        k = spec.speculation.num_speculative_tokens or 1
        probe = SpeculationIntent(enabled=True, num_speculative_tokens=k, disable_above_batch_size=2)
        threshold = _plan_threshold(spec, version, engine, probe)
    except (ValueError, UnsupportedCombination) as err:
        return ThresholdSupport.UNSUPPORTED, str(err)
    return threshold.support, threshold.reason


def render_command(
    spec: SpeculativeDeploymentSpec, intent: SpeculationIntent | None = None, *, port: int | None = None
) -> RenderedCommand:
    """The container command for this spec and intent on spec.engine.version.

    Raises UnsupportedCombination (naming the spec field) for what that version cannot run, checked for the spec's
    speculation even when the intent turns it off, since the autotuner may turn it back on later.
    """
    try:
        version = VllmVersion.parse(spec.engine.version)
    except ValueError as err:
        raise UnsupportedCombination("spec.engine.version", str(err)) from None
    if version < OLDEST_SUPPORTED:
        raise UnsupportedCombination(
            "spec.engine.version", f"vLLM {version} is older than the oldest supported version {OLDEST_SUPPORTED}"
        )
    method = spec.speculation.method
    gap = _method_gap(method, version)
    if gap is not None:
        raise UnsupportedCombination(
            "spec.speculation.method",
            f"{gap}; vLLM {version} supports {_allowed(methods_available(version))}",
        )
    # VLLM_USE_V1 exists from 0.7.0 and means nothing once V0 is gone.
    use_v1 = _use_v1(spec) if V1_ENGINE_OPT_IN <= version < V0_ENGINE_REMOVED else _UseV1(None)
    speculation_engine = _speculation_engine(version, method, use_v1)
    _check_spec(spec, version, speculation_engine)
    spec_intent = intent_from_spec(spec)
    _plan_threshold(spec, version, speculation_engine, replace(spec_intent, enabled=True))

    intent = intent or spec_intent
    legacy = version < LEGACY_FLAGS_REMOVED
    argv = _engine_args(spec, version, spec.service.port if port is None else port)
    speculative_config: dict[str, Any] | None = None
    if intent.enabled:
        engine = speculation_engine
        threshold = _plan_threshold(spec, version, engine, intent)
        speculative_config = _speculative_config(spec, intent, threshold, legacy=legacy)
        speculative_config.update(_acceptance(spec, version, engine))
        if version < V2_BLOCK_MANAGER_DEFAULT:
            argv.append("--use-v2-block-manager")
        argv += _speculation_args(speculative_config, legacy=legacy)
    else:
        engine = _engine_without_speculation(version, use_v1)
        threshold = _Threshold(ThresholdSupport.NOT_REQUESTED)
    argv += spec.engine.extra_args
    return RenderedCommand(
        argv=tuple(argv),
        image=spec.engine.image,
        drain_seconds=rendered_drain_seconds(spec, version),
        version=version,
        engine=engine,
        threshold_support=threshold.support,
        speculative_config=speculative_config,
        disable_above_batch_size=threshold.disable_above_batch_size,
        batch_schedule=threshold.schedule,
        threshold_reason=threshold.reason,
        notes=tuple(_notes(spec, version, threshold, intent.enabled)),
    )
