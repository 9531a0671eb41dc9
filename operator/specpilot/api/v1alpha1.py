"""SpeculativeDeployment v1alpha1: the pydantic models that are the single source of the CRD schema.

Field names follow DESIGN.md §3 and are the API contract: extend, never rename. Every cross-field rule is declared
once in CROSS_FIELD_RULES, which yields both the CEL `x-kubernetes-validations` the API server enforces and the
Python check `specpilot validate` runs offline, so the two can never disagree about what is valid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from specpilot.api.durations import DURATION_PATTERN, parse_duration

GROUP = "specpilot.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ("specdeploy", "sd")

ANNOTATION_PAUSE = f"{GROUP}/pause"
ANNOTATION_REEVALUATE = f"{GROUP}/reevaluate"
ANNOTATION_ALLOW_OVERCOMMIT = f"{GROUP}/allow-memory-overcommit"

VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+([.+-][0-9A-Za-z.+-]*)?$"
Duration = str  # validated against DURATION_PATTERN by Field(pattern=...)


class _Model(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields rejected like a structural schema prunes."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_default=True, frozen=True
    )


def _duration(default: str, description: str) -> Any:
    return Field(default, pattern=DURATION_PATTERN, max_length=32, description=description)


class SpeculationMethod(StrEnum):
    DRAFT_MODEL = "draft_model"
    NGRAM = "ngram"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    SUFFIX = "suffix"


METHODS_NEEDING_DRAFT = (SpeculationMethod.DRAFT_MODEL, SpeculationMethod.EAGLE, SpeculationMethod.EAGLE3)
METHODS_WITHOUT_DRAFT = (SpeculationMethod.NGRAM, SpeculationMethod.MTP, SpeculationMethod.SUFFIX)


class Quantization(StrEnum):
    """Weight quantization methods, spelled as vLLM's `--quantization` values."""

    NONE = "none"
    FP8 = "fp8"
    AWQ = "awq"
    AWQ_MARLIN = "awq_marlin"
    GPTQ = "gptq"
    GPTQ_MARLIN = "gptq_marlin"
    COMPRESSED_TENSORS = "compressed-tensors"
    MODELOPT = "modelopt"
    MODELOPT_FP4 = "modelopt_fp4"
    MXFP4 = "mxfp4"
    BITSANDBYTES = "bitsandbytes"
    GGUF = "gguf"


# Methods whose checkpoint can hold several widths: the planner cannot guess bytes per weight.
QUANTIZATIONS_NEEDING_WEIGHT_BITS = (Quantization.COMPRESSED_TENSORS, Quantization.MODELOPT)


class Dtype(StrEnum):
    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    HALF = "half"
    FLOAT = "float"


class AutotuneMode(StrEnum):
    OFF = "Off"
    RECOMMEND = "Recommend"
    AUTO = "Auto"


class LatencyMetric(StrEnum):
    TPOT = "tpot"
    TTFT = "ttft"
    E2E = "e2e"


class SpeculationOverride(StrEnum):
    """A user pin that automation must respect (control-loop rule 18)."""

    AUTO = "Auto"
    FORCE_ON = "ForceOn"
    FORCE_OFF = "ForceOff"


class ModelArchitecture(_Model):
    """Published config numbers of a model, for models not in specpilot's catalog."""

    family: str = Field(
        min_length=1, max_length=63, description="Tokenizer family, e.g. llama3, qwen2; drafts must match."
    )
    parameters_billions: float = Field(gt=0, le=10000, description="Total parameters, in billions.")
    active_parameters_billions: float | None = Field(
        None, gt=0, le=10000, description="Parameters used per token (MoE); defaults to parametersBillions."
    )
    num_layers: int = Field(ge=1, le=1024, description="Transformer layers (num_hidden_layers).")
    num_kv_heads: int = Field(ge=1, le=1024, description="KV heads (num_key_value_heads).")
    head_dim: int = Field(ge=1, le=4096, description="Dimension of one attention head.")
    hidden_size: int = Field(ge=1, le=65536, description="hidden_size of config.json.")
    vocab_size: int = Field(ge=1, le=4_000_000, description="vocab_size of config.json.")
    max_position_embeddings: int = Field(131072, ge=1, le=10_000_000, description="Longest supported context.")


class EngineSpec(_Model):
    image: str = Field(min_length=1, max_length=512, description="vLLM container image.")
    version: str = Field(
        pattern=VERSION_PATTERN,
        max_length=64,
        description="vLLM version inside the image; selects the command-line dialect (e.g. 0.33.0).",
    )
    max_model_len: int = Field(8192, ge=16, le=10_000_000, description="--max-model-len.")
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1, description="--gpu-memory-utilization.")
    max_num_seqs: int = Field(256, ge=1, le=65536, description="--max-num-seqs (rendered explicitly).")
    dtype: Dtype = Field(Dtype.AUTO, description="--dtype.")
    kv_cache_dtype: str = Field("auto", max_length=32, description="--kv-cache-dtype (auto, fp8, bfloat16, ...).")
    served_model_name: str | None = Field(
        None, max_length=253, description="--served-model-name; defaults to the target model id."
    )
    enable_prefix_caching: bool | None = Field(None, description="Render --no-enable-prefix-caching when false.")
    extra_args: list[str] = Field(
        default_factory=list, max_length=64, description="Extra vLLM arguments appended verbatim (not validated)."
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list, max_length=64, description="Extra container env entries (Kubernetes EnvVar objects)."
    )


class TargetSpec(_Model):
    model: str = Field(min_length=1, max_length=512, description="Target model: Hugging Face id or path.")
    quantization: Quantization = Field(Quantization.NONE, description="Target weight quantization (--quantization).")
    weight_bits: Literal[4, 8, 16] | None = Field(
        None, description="Bits per weight, required for quantizations that allow several widths."
    )
    revision: str | None = Field(None, max_length=128, description="Model revision (--revision).")
    architecture: ModelArchitecture | None = Field(None, description="Config numbers when the model is not cataloged.")


class DraftSpec(_Model):
    model: str = Field(min_length=1, max_length=512, description="Draft model, EAGLE head or weights.")
    quantization: Quantization = Field(Quantization.NONE, description="Draft weight quantization.")
    weight_bits: Literal[4, 8, 16] | None = Field(None, description="Bits per draft weight when ambiguous.")
    tensor_parallel_size: int | None = Field(
        None, ge=1, le=64, description="Draft TP: 1 or the target's TP (vLLM's rule); defaults to the target's."
    )
    revision: str | None = Field(None, max_length=128, description="Draft revision.")
    architecture: ModelArchitecture | None = Field(None, description="Config numbers when the draft is not cataloged.")


class SpeculationSpec(_Model):
    method: SpeculationMethod = Field(description="Speculation method.")
    enabled: bool = Field(True, description="Desired baseline; autotune may switch it within its policy.")
    draft: DraftSpec | None = Field(None, description="Required for draft_model, eagle, eagle3; forbidden otherwise.")
    num_speculative_tokens: int | None = Field(
        None, ge=1, le=32, description="Tokens proposed per step (K); required for draft_model and ngram."
    )
    disable_above_batch_size: int | None = Field(
        None,
        ge=2,
        le=65536,
        description="Intent: stop speculating when this many requests run at once; compiled per vLLM version.",
    )
    prompt_lookup_min: int | None = Field(None, ge=1, le=64, description="ngram: shortest match.")
    prompt_lookup_max: int | None = Field(None, ge=1, le=64, description="ngram: longest match.")


class ParallelismSpec(_Model):
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="--tensor-parallel-size.")
    pipeline_parallel_size: int = Field(1, ge=1, le=64, description="--pipeline-parallel-size.")


class ResourcesSpec(_Model):
    gpus_per_replica: int = Field(1, ge=1, le=64, description="GPUs requested by each vLLM pod.")
    gpu_memory_gi_b: float = Field(80, gt=0, le=4096, alias="gpuMemoryGiB", description="Memory of one GPU, GiB.")
    gpu_resource_name: str = Field("nvidia.com/gpu", min_length=1, max_length=253, description="Extended resource.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Pod nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32, description="Pod tolerations.")
    cpu: str | None = Field(None, max_length=32, description="CPU request and limit of the vLLM container.")
    memory: str | None = Field(None, max_length=32, description="Memory request and limit of the vLLM container.")
    shm_size_gi_b: float = Field(8, gt=0, le=1024, alias="shmSizeGiB", description="Size of /dev/shm (NCCL), GiB.")


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, max_length=253, description="Secret in the CR's namespace.")
    token_key: str = Field("token", max_length=253, description="Key holding a bearer token.")
    username_key: str = Field("username", max_length=253, description="Key holding the basic-auth user.")
    password_key: str = Field("password", max_length=253, description="Key holding the basic-auth password.")
    ca_key: str = Field("ca.crt", max_length=253, description="Key holding a PEM CA bundle.")


class PrometheusSpec(_Model):
    url: str = Field(
        min_length=1, max_length=2048, pattern=r"^https?://", description="Prometheus base URL (http or https)."
    )
    auth_secret_ref: SecretKeyRef | None = Field(None, description="Bearer token or basic auth, and CA bundle.")
    insecure_skip_verify: bool = Field(False, description="Skip TLS verification (a Warning event is posted).")
    timeout: Duration = _duration("10s", "Query timeout.")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra headers, e.g. X-Scope-OrgID.")


class AcceptanceSpec(_Model):
    disable_below: float = Field(0.5, ge=0, le=1, description="Turn speculation off below this acceptance rate.")
    enable_above: float = Field(0.65, ge=0, le=1, description="Turn it back on above this (must exceed disableBelow).")


class LatencySpec(_Model):
    metric: LatencyMetric = Field(LatencyMetric.TPOT, description="Latency the policy guards.")
    p99_target: Duration | None = Field(
        None, pattern=DURATION_PATTERN, max_length=32, description="Optional P99 objective, e.g. 120ms."
    )
    regression_tolerance: float = Field(
        0.1, ge=0, le=10, description="Allowed P99 regression versus the non-speculative baseline (0.1 = 10%)."
    )


class BatchThresholdSpec(_Model):
    tune: bool = Field(True, description="Let autotune move the batch-size threshold.")
    min: int = Field(4, ge=2, le=65536, description="Lowest threshold autotune may set.")
    max: int = Field(512, ge=2, le=65536, description="Highest threshold autotune may set.")


class MinSamplesSpec(_Model):
    draft_tokens: int = Field(2000, ge=0, le=1_000_000_000, description="Draft tokens needed in the window.")
    requests: int = Field(50, ge=0, le=1_000_000_000, description="Finished requests needed in the window.")


class BudgetSpec(_Model):
    min_interval: Duration = _duration("15m", "Minimum time between two actuations.")
    max_per_hour: int = Field(2, ge=0, le=60, description="Actuations allowed per rolling hour.")
    max_per_day: int = Field(8, ge=0, le=1440, description="Actuations allowed per rolling day.")
    reversal_backoff: float = Field(
        2.0, ge=1, le=100, description="Multiplier on minInterval after an actuation reverses the previous one."
    )


class OverridesSpec(_Model):
    speculation: SpeculationOverride = Field(SpeculationOverride.AUTO, description="Pin speculation on or off.")
    pin_batch_threshold: bool = Field(False, description="Keep disableAboveBatchSize as written in spec.")


class CanarySpec(_Model):
    enabled: bool = Field(
        False,
        description="Run one of the replicas as a canary in the other mode (plain when the others speculate, "
        "speculating when they do not), behind the same Service, so both are compared on the same traffic. "
        "Needs replicas >= 2; ignored while autotune mode is Off.",
    )


class AutotuneSpec(_Model):
    mode: AutotuneMode = Field(AutotuneMode.RECOMMEND, description="Off, Recommend (publish only) or Auto (act).")
    prometheus: PrometheusSpec | None = Field(None, description="Where vLLM metrics are read.")
    interval: Duration = _duration("60s", "Evaluation period.")
    window: Duration = _duration("5m", "Query window; at least 4 scrape intervals.")
    scrape_interval: Duration = _duration("15s", "Prometheus scrape interval of the vLLM pods.")
    acceptance: AcceptanceSpec = Field(default_factory=AcceptanceSpec)
    latency: LatencySpec = Field(default_factory=LatencySpec)
    batch_threshold: BatchThresholdSpec = Field(default_factory=BatchThresholdSpec)
    min_samples: MinSamplesSpec = Field(default_factory=MinSamplesSpec)
    agreeing_evaluations: int = Field(3, ge=1, le=100, description="Consecutive evaluations that must agree.")
    stabilization: Duration = _duration("10m", "Every recommendation in this window must agree before acting.")
    probe_interval: Duration = _duration(
        "6h",
        "After autotune turned speculation off for low acceptance, turn it back on this often (at no higher load) "
        "to re-measure; each probe counts against the budget. 0s disables probes.",
    )
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    overrides: OverridesSpec = Field(default_factory=OverridesSpec)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    rollout_deadline: Duration = _duration(
        "30m",
        "A config rollout slower than this is reverted (progressDeadlineSeconds); each vLLM container's startup "
        "probe gets the same budget to load its weights. At least 1m.",
    )


class ServiceSpec(_Model):
    port: int = Field(8000, ge=1, le=65535, description="Port of the Service and vLLM's --port.")


class MonitoringSpec(_Model):
    pod_monitor: bool = Field(False, description="Create a Prometheus-operator PodMonitor for the vLLM pods.")


class SpeculativeDeploymentSpec(_Model):
    replicas: int = Field(1, ge=0, le=1000, description="vLLM pods.")
    engine: EngineSpec
    target: TargetSpec
    speculation: SpeculationSpec
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    autotune: AutotuneSpec = Field(default_factory=AutotuneSpec)
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> SpeculativeDeploymentSpec:
        problems = [rule.message for rule in CROSS_FIELD_RULES if not rule.holds(self)]
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ---------------------------------------------------------------- cross-field rules (CEL + Python, one table)


@dataclass(frozen=True)
class CrossFieldRule:
    """One invariant, stated for the API server (CEL at `at`) and for offline validation (`holds`)."""

    at: tuple[str, ...]  # camelCase path below spec where the CEL rule is attached
    cel: str
    message: str
    holds: Callable[[SpeculativeDeploymentSpec], bool]


def _draft_tp_ok(spec: SpeculativeDeploymentSpec) -> bool:
    draft = spec.speculation.draft
    if draft is None or draft.tensor_parallel_size is None:
        return True
    return draft.tensor_parallel_size in (1, spec.parallelism.tensor_parallel_size)


def _weight_bits_ok(quantization: Quantization, bits: int | None) -> bool:
    return quantization not in QUANTIZATIONS_NEEDING_WEIGHT_BITS or bits is not None


CROSS_FIELD_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        at=("speculation",),
        cel="!(self.method in ['draft_model', 'eagle', 'eagle3']) || has(self.draft)",
        message="spec.speculation.draft is required when spec.speculation.method is draft_model, eagle or eagle3",
        holds=lambda s: s.speculation.method not in METHODS_NEEDING_DRAFT or s.speculation.draft is not None,
    ),
    CrossFieldRule(
        at=("speculation",),
        cel="!(self.method in ['ngram', 'mtp', 'suffix']) || !has(self.draft)",
        message="spec.speculation.draft must be omitted when spec.speculation.method is ngram, mtp or suffix "
        "(ngram and suffix need no model; mtp uses the target's own heads)",
        holds=lambda s: s.speculation.method not in METHODS_WITHOUT_DRAFT or s.speculation.draft is None,
    ),
    CrossFieldRule(
        at=("speculation",),
        cel="!(self.method in ['draft_model', 'ngram']) || has(self.numSpeculativeTokens)",
        message="spec.speculation.numSpeculativeTokens is required when spec.speculation.method is "
        "draft_model or ngram (1-32)",
        holds=lambda s: (
            s.speculation.method not in (SpeculationMethod.DRAFT_MODEL, SpeculationMethod.NGRAM)
            or s.speculation.num_speculative_tokens is not None
        ),
    ),
    CrossFieldRule(
        at=("speculation",),
        cel="self.method == 'ngram' || (!has(self.promptLookupMin) && !has(self.promptLookupMax))",
        message="spec.speculation.promptLookupMin and promptLookupMax are only allowed when method is ngram",
        holds=lambda s: (
            s.speculation.method == SpeculationMethod.NGRAM
            or (s.speculation.prompt_lookup_min is None and s.speculation.prompt_lookup_max is None)
        ),
    ),
    CrossFieldRule(
        at=("speculation",),
        cel="!has(self.promptLookupMin) || !has(self.promptLookupMax) || self.promptLookupMin <= self.promptLookupMax",
        message="spec.speculation.promptLookupMin must be less than or equal to spec.speculation.promptLookupMax",
        holds=lambda s: (
            s.speculation.prompt_lookup_min is None
            or s.speculation.prompt_lookup_max is None
            or s.speculation.prompt_lookup_min <= s.speculation.prompt_lookup_max
        ),
    ),
    CrossFieldRule(
        at=(),
        cel="!has(self.speculation.draft) || !has(self.speculation.draft.tensorParallelSize) || "
        "self.speculation.draft.tensorParallelSize == 1 || "
        "self.speculation.draft.tensorParallelSize == self.parallelism.tensorParallelSize",
        message="spec.speculation.draft.tensorParallelSize must be 1 or equal to "
        "spec.parallelism.tensorParallelSize (vLLM accepts no other draft TP)",
        holds=_draft_tp_ok,
    ),
    CrossFieldRule(
        at=(),
        cel="self.parallelism.tensorParallelSize * self.parallelism.pipelineParallelSize <= "
        "self.resources.gpusPerReplica",
        message="spec.parallelism.tensorParallelSize x pipelineParallelSize must not exceed "
        "spec.resources.gpusPerReplica",
        holds=lambda s: (
            s.parallelism.tensor_parallel_size * s.parallelism.pipeline_parallel_size <= s.resources.gpus_per_replica
        ),
    ),
    CrossFieldRule(
        at=(),
        cel="!has(self.speculation.disableAboveBatchSize) || "
        "self.speculation.disableAboveBatchSize <= self.engine.maxNumSeqs",
        message="spec.speculation.disableAboveBatchSize must not exceed spec.engine.maxNumSeqs "
        "(no batch can be larger than maxNumSeqs)",
        holds=lambda s: (
            s.speculation.disable_above_batch_size is None
            or s.speculation.disable_above_batch_size <= s.engine.max_num_seqs
        ),
    ),
    CrossFieldRule(
        at=("target",),
        cel="!(self.quantization in ['compressed-tensors', 'modelopt']) || has(self.weightBits)",
        message="spec.target.weightBits is required when spec.target.quantization is compressed-tensors or "
        "modelopt (4, 8 or 16)",
        holds=lambda s: _weight_bits_ok(s.target.quantization, s.target.weight_bits),
    ),
    CrossFieldRule(
        at=("speculation",),
        cel="!has(self.draft) || !(self.draft.quantization in ['compressed-tensors', 'modelopt']) || "
        "has(self.draft.weightBits)",
        message="spec.speculation.draft.weightBits is required when spec.speculation.draft.quantization is "
        "compressed-tensors or modelopt (4, 8 or 16)",
        holds=lambda s: (
            s.speculation.draft is None
            or _weight_bits_ok(s.speculation.draft.quantization, s.speculation.draft.weight_bits)
        ),
    ),
    CrossFieldRule(
        at=(),
        cel="!has(self.autotune) || !has(self.autotune.canary) || !self.autotune.canary.enabled || "
        "(has(self.replicas) && self.replicas >= 2)",
        message="spec.autotune.canary.enabled needs spec.replicas >= 2 (the canary is one of the replicas, and at "
        "least one must keep serving the chosen config)",
        holds=lambda s: not s.autotune.canary.enabled or s.replicas >= 2,
    ),
    CrossFieldRule(
        at=("autotune", "acceptance"),
        cel="self.enableAbove > self.disableBelow",
        message="spec.autotune.acceptance.enableAbove must be greater than spec.autotune.acceptance.disableBelow "
        "(hysteresis)",
        holds=lambda s: s.autotune.acceptance.enable_above > s.autotune.acceptance.disable_below,
    ),
    CrossFieldRule(
        at=("autotune", "batchThreshold"),
        cel="self.min <= self.max",
        message="spec.autotune.batchThreshold.min must be less than or equal to spec.autotune.batchThreshold.max",
        holds=lambda s: s.autotune.batch_threshold.min <= s.autotune.batch_threshold.max,
    ),
    CrossFieldRule(
        at=("autotune", "budget"),
        cel="self.maxPerHour <= self.maxPerDay",
        message="spec.autotune.budget.maxPerHour must be less than or equal to spec.autotune.budget.maxPerDay",
        holds=lambda s: s.autotune.budget.max_per_hour <= s.autotune.budget.max_per_day,
    ),
    CrossFieldRule(
        at=("autotune",),
        cel="self.mode != 'Auto' || has(self.prometheus)",
        message="spec.autotune.prometheus is required when spec.autotune.mode is Auto",
        holds=lambda s: s.autotune.mode != AutotuneMode.AUTO or s.autotune.prometheus is not None,
    ),
)


def window_covers_scrapes(spec: AutotuneSpec) -> bool:
    """A rate() window shorter than 4 scrapes is noise (robustperception); checked offline with durations parsed."""
    return parse_duration(spec.window) >= 4 * parse_duration(spec.scrape_interval)


# ---------------------------------------------------------------------------------------------- status


class Condition(_Model):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024)
    message: str = Field("", max_length=32768)
    observed_generation: int | None = None
    last_transition_time: str | None = None


class CanaryStatus(_Model):
    speculation: bool = Field(description="Whether the canary replica speculates (the other mode of the rest).")
    config_hash: str = Field(description="Hash of the canary's vLLM command line; its metrics carry this label.")
    ready_replicas: int = 0


class IntentStatus(_Model):
    """The speculation config the pods were rendered from, kept whole while speculation is off."""

    enabled: bool = Field(description="Whether speculation is on.")
    num_speculative_tokens: int | None = Field(None, description="K, kept while off so turning on restores it.")
    disable_above_batch_size: int | None = Field(None, description="Batch-size threshold intent.")
    batch_schedule: list[list[int]] | None = Field(
        None, description="Per-batch-size K ([first, last, K] ranges) chosen by autotune, kept while off."
    )


class EffectiveStatus(_Model):
    speculation: bool = Field(description="Whether the running pods speculate.")
    intent: IntentStatus | None = Field(
        None, description="The lossless record of the running speculation intent (the autotuner reverts to it)."
    )
    method: str | None = None
    num_speculative_tokens: int | None = None
    disable_above_batch_size: int | None = None
    batch_schedule: list[list[int]] | None = Field(
        None, description="Rendered num_speculative_tokens_per_batch_size ([first, last, K] ranges)."
    )
    threshold_support: str | None = Field(None, description="How the threshold is expressed for this vLLM version.")
    config_hash: str = Field(description="Hash of the rendered vLLM command line on the pod template.")
    source: str | None = Field(None, description="Where the running intent comes from: spec, autotune or override.")
    canary: CanaryStatus | None = Field(None, description="The canary replica, while spec.autotune.canary runs one.")


class MemoryStatus(_Model):
    target_weights_gi_b: float = Field(alias="targetWeightsGiB")
    draft_weights_gi_b: float = Field(alias="draftWeightsGiB")
    kv_cache_gi_b: float = Field(alias="kvCacheGiB")
    kv_tokens: int
    concurrent_sequences: int
    draft_share_of_vram: float
    target_share_of_vram: float
    fits: bool


class ObservedStatus(_Model):
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    p50_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    p99_ttft_ms: float | None = None
    p99_e2e_ms: float | None = Field(None, alias="p99E2eMs")  # to_camel would say p99E2EMs
    running_requests: float | None = None
    waiting_requests: float | None = None
    request_rate: float | None = None
    kv_cache_usage: float | None = None
    window: str | None = None
    evaluated_at: str | None = None


class SpeculativeDeploymentStatus(BaseModel):
    """Written by the operator only. Nested objects preserve unknown fields so newer operators can add evidence."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    effective: EffectiveStatus | None = None
    memory: MemoryStatus | None = None
    observed: ObservedStatus | None = None
    recommendation: dict[str, Any] | None = None
    actuations: list[dict[str, Any]] = Field(default_factory=list)
    autotune: dict[str, Any] | None = Field(None, description="Controller memory: budget, agreement, baseline.")
    replicas: int | None = None
    ready_replicas: int | None = None
    updated_replicas: int | None = None
    last_handled_reevaluate: str | None = None
    autotune_halt: dict[str, Any] | None = Field(
        None, description="Set when automation halted itself (a failed autotune rollout); cleared by a reevaluate."
    )


class SpeculativeDeployment(BaseModel):
    """The whole object, as read from the API server or a file."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    api_version: Literal["specpilot.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeDeployment"]
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeDeploymentSpec
    status: SpeculativeDeploymentStatus | None = None


def parse_spec(raw: dict[str, Any]) -> SpeculativeDeploymentSpec:
    """Parse a CR's spec; raise InvalidSpec listing each problem with its field path."""
    try:
        return SpeculativeDeploymentSpec.model_validate(raw)
    except ValidationError as err:
        raise InvalidSpec(describe_validation_error(err, prefix="spec")) from None


def parse_resource(raw: dict[str, Any]) -> SpeculativeDeployment:
    """Parse a whole SpeculativeDeployment document; raise InvalidSpec naming each bad field."""
    try:
        return SpeculativeDeployment.model_validate(raw)
    except ValidationError as err:
        raise InvalidSpec(describe_validation_error(err, prefix="")) from None


class InvalidSpec(ValueError):
    """A spec that cannot be deployed; `problems` has one line per field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def describe_validation_error(err: ValidationError, *, prefix: str) -> list[str]:
    """Turn pydantic errors into "spec.engine.maxModelLen: Input should be ..." lines."""
    lines: list[str] = []
    for item in err.errors(include_url=False):
        path = ".".join([prefix] if prefix else [])
        for part in item["loc"]:
            path = f"{path}[{part}]" if isinstance(part, int) else (f"{path}.{part}" if path else str(part))
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "value_error" and message.startswith("spec."):
            lines.extend(message.split("; "))  # cross-field messages already name their fields
        else:
            allowed = _allowed_values(item.get("ctx"))
            lines.append(f"{path or '<root>'}: {message}{allowed}")
    return lines


def _allowed_values(ctx: dict[str, Any] | None) -> str:
    if not ctx or "expected" not in ctx:
        return ""
    return f" (allowed: {ctx['expected']})"
