"""SpeculativeDeployment v1alpha1: the pydantic models that are the single source of the CRD schema.

Field names are the API contract: extend, never rename. Every cross-field rule is declared
once in CROSS_FIELD_RULES, which yields both the CEL `x-kubernetes-validations` the API server enforces and the
Python check `specpilot validate` runs offline, so the two can never disagree about what is valid. The rules of one
drafter are declared once in CONFIG_RULES and applied to the declared config and to each candidate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from specpilot.api.durations import DURATION_PATTERN, parse_duration
from specpilot.api.quantity import is_positive_quantity
from specpilot.api.timestamps import is_zoned_time

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
# The longest rollout a config may take: a day covers loading the largest checkpoints from slow storage, and keeps the
# rendered progressDeadlineSeconds and startup-probe failureThreshold (int32 in the Deployment) far from overflow.
MAX_ROLLOUT_DEADLINE = "24h"

# Patterns are written with ASCII ranges only, so Python, pydantic's Rust engine, the API server's Go regexp (CRD
# `pattern`) and CEL's matches() read them the same way.
# A value vLLM receives as one argv element that must never read as a flag: printable ASCII, no spaces, no leading "-".
ARGUMENT_PATTERN = r"^[!-,.-~][!-~]*$"
# A container image reference: printable ASCII without spaces.
IMAGE_PATTERN = r"^[!-~]+$"
# One extraArgs element: anything but control characters (a NUL cannot even be passed to exec).
EXTRA_ARG_PATTERN = r"^[^\x00-\x1f\x7f]*$"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# Kubernetes qualified name (label keys, resource names): optional DNS-subdomain prefix and "/", then a name <= 63.
QUALIFIED_NAME_PATTERN = f"^({_SUBDOMAIN}/)?{_NAME}$"
# An extended resource (e.g. nvidia.com/gpu): a qualified name that must have a domain prefix.
EXTENDED_RESOURCE_PATTERN = f"^{_SUBDOMAIN}/{_NAME}$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# Environment variable names: printable ASCII except "=" (the API server's relaxed rule, GA since Kubernetes 1.34).
ENV_NAME_PATTERN = r"^[ -<>-~]+$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
TOLERATION_KEY_PATTERN = "^$|" + QUALIFIED_NAME_PATTERN
# RFC 9110 header field name (token) and value (visible ASCII, space and tab; no CR/LF, no non-ASCII).
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
HEADER_VALUE_PATTERN = r"^[\t -~]*$"
# The longest a Prometheus query may take: an evaluation round queries one connection after another.
MAX_QUERY_TIMEOUT = "60s"
MAX_QUERY_TIMEOUT_S = 60.0
# http(s)://host[:port][/path]: a DNS name, IPv4 or bracketed IPv6 host, a port in 1-65535, no query or fragment.
URL_PATTERN = (
    r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?)"
    r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
    r"(/[-A-Za-z0-9._~!$&'()*+,;=:@/%]*)?$"
)
# Headers that carry credentials: those belong in an administrator's Prometheus connection, never in a CR.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")

# What each pattern means, for error messages (pydantic would otherwise print the regex).
PATTERN_HELP: dict[str, str] = {
    ARGUMENT_PATTERN: "printable ASCII without spaces or control characters, not starting with '-' "
    "(vLLM would read it as a flag)",
    IMAGE_PATTERN: "printable ASCII without spaces or control characters",
    EXTRA_ARG_PATTERN: "no control characters (newline, tab, NUL, ...)",
    QUALIFIED_NAME_PATTERN: "a Kubernetes qualified name, e.g. example.com/name or name (<= 63 characters)",
    EXTENDED_RESOURCE_PATTERN: "an extended resource name with a domain, e.g. nvidia.com/gpu",
    LABEL_VALUE_PATTERN: "a label value: <= 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric",
    ENV_NAME_PATTERN: "printable ASCII without '='",
    DNS_LABEL_PATTERN: "a DNS label: lowercase letters, digits and '-'",
    DNS_SUBDOMAIN_PATTERN: "a DNS subdomain: lowercase letters, digits, '-' and '.'",
    CONFIG_KEY_PATTERN: "letters, digits, '-', '_' or '.'",
    TOLERATION_KEY_PATTERN: "empty or a Kubernetes qualified name, e.g. nvidia.com/gpu",
    HEADER_VALUE_PATTERN: "visible ASCII, space or tab (no CR/LF, no non-ASCII characters)",
    URL_PATTERN: "http(s)://host[:port][/path] with a port in 1-65535, no spaces, query or fragment",
    DURATION_PATTERN: "a duration: numbers with units ms, s, m or h, e.g. 250ms, 90s, 5m, 1h30m",
    VERSION_PATTERN: "a vLLM version such as 0.33.0",
}


class _Model(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields rejected like a structural schema prunes."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_default=True, frozen=True
    )


class _Spec(_Model):
    """Base of the spec: types as strict as the API server's (a string "2" is not an integer, "false" not a boolean).

    Enums keep lax mode (per field) because YAML hands them over as plain strings; floats still accept integers, as
    JSON numbers do; NaN and infinity are refused (JSON cannot carry them).
    """

    model_config = ConfigDict(strict=True, allow_inf_nan=False)


def _duration(default: str, description: str) -> Any:
    return Field(default, pattern=DURATION_PATTERN, max_length=32, description=description)


class SpeculationMethod(StrEnum):
    DRAFT_MODEL = "draft_model"
    NGRAM = "ngram"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    SUFFIX = "suffix"
    DFLASH = "dflash"  # parallel (block) drafter checkpoint; vLLM forces parallel_drafting
    DSPARK = "dspark"  # DSpark draft checkpoint; Model Runner V2 only
    NGRAM_GPU = "ngram_gpu"  # n-gram proposer on the GPU; no model


METHODS_NEEDING_DRAFT = (
    SpeculationMethod.DRAFT_MODEL,
    SpeculationMethod.EAGLE,
    SpeculationMethod.EAGLE3,
    SpeculationMethod.DFLASH,
    SpeculationMethod.DSPARK,
)
METHODS_WITHOUT_DRAFT = (
    SpeculationMethod.NGRAM,
    SpeculationMethod.MTP,
    SpeculationMethod.SUFFIX,
    SpeculationMethod.NGRAM_GPU,
)
METHODS_NEEDING_K = (SpeculationMethod.DRAFT_MODEL, SpeculationMethod.NGRAM, SpeculationMethod.NGRAM_GPU)
NGRAM_METHODS = (SpeculationMethod.NGRAM, SpeculationMethod.NGRAM_GPU)  # prompt_lookup_min/max apply
# Methods whose Model Runner V2 speculator estimates acceptance (vLLM 0.33 DraftModelSpeculator subclasses); the
# n-gram speculator has no estimator (vLLM ignores the flag) and suffix does not run on Model Runner V2 at all.
METHODS_WITH_ADAPTIVE_VERIFICATION = (
    SpeculationMethod.DRAFT_MODEL,
    SpeculationMethod.EAGLE,
    SpeculationMethod.EAGLE3,
    SpeculationMethod.MTP,
    SpeculationMethod.DFLASH,
    SpeculationMethod.DSPARK,
)


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


class KvCacheDtype(StrEnum):
    """vLLM's `--kv-cache-dtype` values (CacheConfig of 0.33.0, checked by tests/vllm); the planner sizes most of them
    and says so (KvCacheDtypeUnknown) for the rest."""

    AUTO = "auto"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    FP8_INC = "fp8_inc"
    FP8_DS_MLA = "fp8_ds_mla"
    FP8_PER_TOKEN_HEAD = "fp8_per_token_head"
    INT8_PER_TOKEN_HEAD = "int8_per_token_head"
    INT4_PER_TOKEN_HEAD = "int4_per_token_head"
    TURBOQUANT_K8V4 = "turboquant_k8v4"
    TURBOQUANT_K3V4_NC = "turboquant_k3v4_nc"
    TURBOQUANT_3BIT_NC = "turboquant_3bit_nc"
    TURBOQUANT_4BIT_NC = "turboquant_4bit_nc"
    ULTRAQUANT_4BIT = "ultraquant_4bit"
    OCTAVE_K3V3 = "octave_k3v3"
    OCTAVE_K3V3_COMPACT = "octave_k3v3_compact"
    OCTAVE_K3V4 = "octave_k3v4"
    NVFP4 = "nvfp4"
    NVFP4_4OVER6 = "nvfp4_4over6"
    NVFP4_DS_MLA = "nvfp4_ds_mla"


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


class AutotuneObjective(StrEnum):
    """What the schedule fit ranks first where the cost model cannot tell two K apart (docs/design/decisions.md)."""

    THROUGHPUT = "Throughput"
    LATENCY = "Latency"


class AcceptanceMethod(StrEnum):
    """How the target verifies draft tokens, by intent; vllm/acceptance.py compiles it per vLLM version."""

    EXACT = "Exact"  # lossless token-by-token rejection sampling: vLLM's default on every version, renders nothing
    BLOCK = "Block"  # lossless block verification: same output distribution, more tokens per step (vLLM 0.26+)
    RELAXED = "Relaxed"  # lossy: typical acceptance (V0, 0.6.0-0.9.2) or FLy (0.33+); output may differ from target


class DraftSampling(StrEnum):
    """How the draft proposes tokens (vLLM's draft_sample_method, 0.22+)."""

    GREEDY = "Greedy"  # one-hot draft distribution (vLLM's default)
    PROBABILISTIC = "Probabilistic"  # full draft logits: higher acceptance on sampled requests, more memory


class SpeculationOverride(StrEnum):
    """A user pin that automation must respect: a persistent override in git wins over the autotuner."""

    AUTO = "Auto"
    FORCE_ON = "ForceOn"
    FORCE_OFF = "ForceOff"


class ModelArchitecture(_Spec):
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


class KeySelector(_Spec):
    """A key of a Secret or ConfigMap in the CR's namespace (what the vLLM pod, not the operator, reads)."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN, description="Object name.")
    key: str = Field(min_length=1, max_length=253, pattern=CONFIG_KEY_PATTERN, description="Key.")
    optional: bool | None = Field(None, description="Start the pod even if the key is missing.")


class ObjectFieldSelector(_Spec):
    field_path: str = Field(min_length=1, max_length=256, description="Pod field, e.g. status.podIP.")
    api_version: str | None = Field(None, max_length=64, description="Schema version of fieldPath (default v1).")


class ResourceFieldSelector(_Spec):
    resource: str = Field(min_length=1, max_length=64, description="limits.cpu, requests.memory, ...")
    container_name: str | None = Field(None, max_length=63, description="Container (default: this one).")
    divisor: str | None = Field(None, max_length=32, description="Output format quantity, e.g. 1Mi.")


class EnvVarSource(_Spec):
    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None


class EnvVar(_Spec):
    """A Kubernetes EnvVar: a literal value or one valueFrom source.

    valueFrom.secretKeyRef hands a Secret of the CR's namespace to the vLLM pod (see docs/security.md).
    """

    name: str = Field(min_length=1, max_length=4096, pattern=ENV_NAME_PATTERN, description="Variable name.")
    value: str | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(None, description="Source of the value (exactly one reference).")


class Toleration(_Spec):
    """A Kubernetes pod Toleration."""

    key: str | None = Field(None, max_length=317, pattern=TOLERATION_KEY_PATTERN, description="Taint key.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (default Equal).")
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE_PATTERN, description="Taint value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate; empty matches all."
    )
    toleration_seconds: int | None = Field(None, description="NoExecute only: how long the pod stays bound.")


class EngineSpec(_Spec):
    image: str = Field(
        min_length=1,
        max_length=512,
        pattern=IMAGE_PATTERN,
        description="vLLM container image. Creating pods with it is what a SpeculativeDeployment does: restrict "
        "images with the chart's admission policy (imagePolicy.allowedPrefixes).",
    )
    version: str = Field(
        pattern=VERSION_PATTERN,
        max_length=64,
        description="vLLM version inside the image; selects the command-line dialect (e.g. 0.33.0).",
    )
    max_model_len: int = Field(8192, ge=16, le=10_000_000, description="--max-model-len.")
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1, description="--gpu-memory-utilization.")
    max_num_seqs: int = Field(256, ge=1, le=65536, description="--max-num-seqs (rendered explicitly).")
    dtype: Dtype = Field(Dtype.AUTO, description="--dtype.", strict=False)
    kv_cache_dtype: KvCacheDtype = Field(KvCacheDtype.AUTO, strict=False, description="--kv-cache-dtype.")
    served_model_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=ARGUMENT_PATTERN,
        description="--served-model-name; defaults to the target model id.",
    )
    enable_prefix_caching: bool | None = Field(None, description="Render --no-enable-prefix-caching when false.")
    extra_args: list[Annotated[str, Field(max_length=4096, pattern=EXTRA_ARG_PATTERN)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra vLLM arguments appended after the rendered ones. Flags specpilot renders from other "
        "fields (in any spelling vLLM accepts), --config and --disable-log-stats are refused.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64, description="Extra container env entries (Kubernetes EnvVar objects)."
    )


class TargetSpec(_Spec):
    model: str = Field(
        min_length=1, max_length=512, pattern=ARGUMENT_PATTERN, description="Target model: Hugging Face id or path."
    )
    quantization: Quantization = Field(
        Quantization.NONE, description="Target weight quantization (--quantization).", strict=False
    )
    weight_bits: Literal[4, 8, 16] | None = Field(
        None, description="Bits per weight, required for quantizations that allow several widths."
    )
    revision: str | None = Field(
        None, min_length=1, max_length=128, pattern=ARGUMENT_PATTERN, description="Model revision (--revision)."
    )
    architecture: ModelArchitecture | None = Field(None, description="Config numbers when the model is not cataloged.")


class DraftSpec(_Spec):
    model: str = Field(
        min_length=1, max_length=512, pattern=ARGUMENT_PATTERN, description="Draft model, EAGLE head or weights."
    )
    quantization: Quantization = Field(Quantization.NONE, description="Draft weight quantization.", strict=False)
    weight_bits: Literal[4, 8, 16] | None = Field(None, description="Bits per draft weight when ambiguous.")
    tensor_parallel_size: int | None = Field(
        None, ge=1, le=64, description="Draft TP: 1 or the target's TP (vLLM's rule); defaults to the target's."
    )
    revision: str | None = Field(
        None, min_length=1, max_length=128, pattern=ARGUMENT_PATTERN, description="Draft revision."
    )
    architecture: ModelArchitecture | None = Field(None, description="Config numbers when the draft is not cataloged.")


class AcceptanceMethodSpec(_Spec):
    """The acceptance method by intent; the framework's lever for a quantized target near break-even."""

    method: AcceptanceMethod = Field(
        AcceptanceMethod.EXACT,
        strict=False,
        description="Exact (lossless, default), Block (lossless block verification, vLLM 0.26+) or Relaxed (lossy: "
        "typical acceptance on the V0 engine of vLLM 0.6.0-0.9.2, FLy on vLLM 0.33+).",
    )
    posterior_threshold: float | None = Field(
        None, gt=0, le=1, description="Relaxed on typical acceptance only: posterior threshold (vLLM default 0.09)."
    )
    posterior_alpha: float | None = Field(
        None, gt=0, le=1, description="Relaxed on typical acceptance only: posterior alpha (vLLM default 0.3)."
    )
    draft_sampling: DraftSampling | None = Field(
        None, strict=False, description="Greedy or Probabilistic draft sampling (draft_sample_method, vLLM 0.22+)."
    )


class SpeculationConfig(_Spec):
    """One drafter: the method, its draft model or head, K and the n-gram window.

    spec.speculation is the declared one; each of spec.speculation.candidates is an alternative, checked by the same
    rules (CONFIG_RULES) and, run in place of the declared one, by the same memory plan and vLLM dialect.
    """

    method: SpeculationMethod = Field(description="Speculation method.", strict=False)
    draft: DraftSpec | None = Field(
        None, description="Required for draft_model, eagle, eagle3, dflash, dspark; forbidden otherwise."
    )
    num_speculative_tokens: int | None = Field(
        None, ge=1, le=32, description="Tokens proposed per step (K); required for draft_model, ngram, ngram_gpu."
    )
    prompt_lookup_min: int | None = Field(None, ge=1, le=64, description="ngram, ngram_gpu: shortest match.")
    prompt_lookup_max: int | None = Field(None, ge=1, le=64, description="ngram, ngram_gpu: longest match.")

    def drafter(self) -> str:
        """Who drafts, for people: the draft model or head, or the method when it needs none."""
        return self.draft.model if self.draft is not None else self.method.value


# Candidates are tried one pod at a time, so each costs a trial: a short list keeps the search affordable.
MAX_CANDIDATES = 4


class SpeculationCandidate(SpeculationConfig):
    """An alternative drafter autotune may try on live traffic in place of the declared one, run with the declared
    config's other settings (enabled, disableAboveBatchSize, acceptance, adaptiveVerification)."""

    name: str = Field(
        min_length=1,
        max_length=32,
        pattern=DNS_LABEL_PATTERN,
        description="Names the candidate in status.candidates, events and kubectl get (a DNS label, unique in "
        "the list).",
    )


class SpeculationSpec(SpeculationConfig):
    enabled: bool = Field(True, description="Desired baseline; autotune may switch it within its policy.")
    disable_above_batch_size: int | None = Field(
        None,
        ge=2,
        le=65536,
        description="Intent: stop speculating when this many requests run at once; compiled per vLLM version.",
    )
    acceptance: AcceptanceMethodSpec | None = Field(
        None,
        description="How the target verifies draft tokens (intent; rendered per vLLM version, refused with the "
        "alternatives where the version has no such choice). Omitted: vLLM's exact rejection sampling.",
    )
    adaptive_verification: bool = Field(
        False,
        description="vLLM >= 0.33 adaptive verification (enable_adaptive_verification): vLLM sizes each step's "
        "verification budget from a start-up cost profile, so acceptance falls while speed rises and the autotuner "
        "decides on measured speed instead. Methods "
        + ", ".join(m.value for m in METHODS_WITH_ADAPTIVE_VERIFICATION)
        + "; needs full CUDA graphs (no --enforce-eager), no LoRA, pipelineParallelSize 1.",
    )
    candidates: list[SpeculationCandidate] = Field(
        default_factory=list,
        max_length=MAX_CANDIDATES,
        description=f"Up to {MAX_CANDIDATES} alternative drafters (method, draft, K, n-gram window), each checked "
        "like the declared one: its rules, the memory plan with its draft's weights and KV cache, tokenizer family "
        "and the vLLM version's support for its method. They run with this config's other settings.",
    )


class ParallelismSpec(_Spec):
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="--tensor-parallel-size.")
    pipeline_parallel_size: int = Field(1, ge=1, le=64, description="--pipeline-parallel-size.")


class ResourcesSpec(_Spec):
    gpus_per_replica: int = Field(1, ge=1, le=64, description="GPUs requested by each vLLM pod.")
    gpu_memory_gi_b: float = Field(80, gt=0, le=4096, alias="gpuMemoryGiB", description="Memory of one GPU, GiB.")
    gpu_resource_name: str = Field(
        "nvidia.com/gpu",
        min_length=1,
        max_length=317,
        pattern=EXTENDED_RESOURCE_PATTERN,
        description="Extended resource the GPUs are requested as.",
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]] = Field(
        default_factory=dict, max_length=32, description="Pod nodeSelector (label keys and values)."
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Pod tolerations.")
    cpu: str | None = Field(
        None, max_length=32, description="CPU request and limit of the vLLM container (a quantity, e.g. 8 or 7500m)."
    )
    memory: str | None = Field(
        None, max_length=32, description="Memory request and limit of the vLLM container (a quantity, e.g. 64Gi)."
    )
    shm_size_gi_b: float = Field(8, gt=0, le=1024, alias="shmSizeGiB", description="Size of /dev/shm (NCCL), GiB.")


class PrometheusSpec(_Spec):
    """Where the autotuner reads metrics: an administrator's named connection, or a URL queried without credentials.

    A CR never names a Secret: credentials exist only in connections an administrator configured for the operator
    (chart value prometheusConnections), which may be limited to some namespaces (docs/security.md).
    """

    connection: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="Name of a Prometheus connection an administrator defined for the operator (chart value "
        "prometheusConnections): its URL, credentials, CA bundle, TLS settings and headers apply. Exclusive with url.",
    )
    url: str | None = Field(
        None,
        min_length=1,
        max_length=2048,
        pattern=URL_PATTERN,
        description="Prometheus base URL, queried without credentials. Exclusive with connection.",
    )
    insecure_skip_verify: bool = Field(
        False, description="Skip TLS verification of url (a Warning event is posted); not allowed with connection."
    )
    timeout: Duration = _duration(
        "10s",
        f"Query timeout (more than 0s, at most {MAX_QUERY_TIMEOUT}): the whole answer must arrive within it, or the "
        "query is an Error.",
    )
    headers: dict[str, Annotated[str, Field(max_length=1024, pattern=HEADER_VALUE_PATTERN)]] = Field(
        default_factory=dict,
        max_length=16,
        description="Extra headers sent to url, e.g. X-Scope-OrgID (not with connection: its administrator sets "
        "them; never credentials: Authorization, Proxy-Authorization and Cookie are refused).",
    )


class AcceptanceSpec(_Spec):
    disable_below: float = Field(0.5, ge=0, le=1, description="Turn speculation off below this acceptance rate.")
    enable_above: float = Field(0.65, ge=0, le=1, description="Turn it back on above this (must exceed disableBelow).")
    quantization_drop_tolerance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="After a quantization change of target or draft, an acceptance drop beyond this (absolute, "
        "0.05 = 5 points) at the same load sets QuantizationPenalty and recommends the next step.",
    )


class LatencySpec(_Spec):
    metric: LatencyMetric = Field(LatencyMetric.TPOT, description="Latency the policy guards.", strict=False)
    p99_target: Duration | None = Field(
        None, pattern=DURATION_PATTERN, max_length=32, description="Optional P99 objective, e.g. 120ms."
    )
    regression_tolerance: float = Field(
        0.1, ge=0, le=10, description="Allowed P99 regression versus the non-speculative baseline (0.1 = 10%)."
    )
    ttft_deadline: Duration | None = Field(
        None,
        pattern=DURATION_PATTERN,
        max_length=32,
        description="Optional TTFT objective per request, e.g. 2s: a request whose first token comes later has "
        "missed its SLO. A restart under a queue is then priced only on the queued requests that can still start "
        "within it and the running ones whose first token came within it (backlog.py), and a rollout wave the pods "
        "left serving cannot carry at least at the arrivals its queue makes wait past it (rollcost.py). Defaults to "
        "p99Target when metric is ttft; unset, every queued and running request counts, and a wave costs the "
        "capacity it removes.",
    )
    tpot_target: Duration | None = Field(
        None,
        pattern=DURATION_PATTERN,
        max_length=32,
        description="Optional TPOT objective per request, e.g. 15ms: a request whose mean time per output token is "
        "longer has missed its SLO. A rollout wave while other pods serve is then priced as free only while the "
        "pods it leaves serving keep the predicted mean TPOT within it (rollcost.py). Defaults to p99Target when "
        "metric is tpot; unset, a wave is free whenever the pods left serving carry the load.",
    )

    def per_request_objective_s(self, metric: LatencyMetric) -> float | None:
        """The latency in `metric` (TTFT or TPOT) a request must meet to count, in seconds: the field that declares
        it (ttftDeadline, tpotTarget), else p99Target when `metric` is the guarded one (99% within it: a request
        past it missed it); None when the CR declares neither."""
        declared = {LatencyMetric.TTFT: self.ttft_deadline, LatencyMetric.TPOT: self.tpot_target}.get(metric)
        if declared is not None:
            return parse_duration(declared)
        if self.metric is metric and self.p99_target is not None:
            return parse_duration(self.p99_target)
        return None


class WorkloadSpec(_Spec):
    """Workload shapes where speculation does not pay for everyone (framework rules; framework_rules.py)."""

    short_output_tokens: int = Field(
        50, ge=1, le=100_000, description="A response shorter than this many tokens counts as short."
    )
    short_output_fraction: float = Field(
        0.5, gt=0, le=1, description="Recommend speculation off when at least this share of responses is short."
    )
    tail_widening_tolerance: float = Field(
        0.25,
        ge=0,
        le=10,
        description="MixedWorkload when the P99/P50 latency ratio with speculation exceeds the one without it at "
        "the same load by more than this (0.25 = 25%) while P50 improves.",
    )


class BatchThresholdSpec(_Spec):
    tune: bool = Field(
        True,
        description="Let autotune refit the batch-size schedule or threshold; on vLLM versions with neither, one K "
        "for every batch size, up to the declared K.",
    )
    min: int = Field(4, ge=2, le=65536, description="Lowest threshold autotune may set.")
    max: int = Field(512, ge=2, le=65536, description="Highest threshold autotune may set.")


class MinSamplesSpec(_Spec):
    draft_tokens: int = Field(2000, ge=0, le=1_000_000_000, description="Draft tokens needed in the window.")
    requests: int = Field(50, ge=0, le=1_000_000_000, description="Finished requests needed in the window.")


class BudgetSpec(_Spec):
    min_interval: Duration = _duration("15m", "Minimum time between two actuations.")
    max_per_hour: int = Field(2, ge=0, le=60, description="Actuations allowed per rolling hour.")
    max_per_day: int = Field(8, ge=0, le=1440, description="Actuations allowed per rolling day.")
    reversal_backoff: float = Field(
        2.0, ge=1, le=100, description="Multiplier on minInterval after an actuation reverses the previous one."
    )


class OverridesSpec(_Spec):
    speculation: SpeculationOverride = Field(
        SpeculationOverride.AUTO, description="Pin speculation on or off.", strict=False
    )
    pin_batch_threshold: bool = Field(False, description="Keep disableAboveBatchSize as written in spec.")


class CanarySpec(_Spec):
    enabled: bool = Field(
        False,
        description="Run one of the replicas as a canary in the other mode (plain when the others speculate, "
        "speculating when they do not), behind the same Service, so both are compared on the same traffic. "
        "Needs replicas >= 2; ignored while autotune mode is Off.",
    )


class AutotuneSpec(_Spec):
    mode: AutotuneMode = Field(
        AutotuneMode.RECOMMEND, description="Off, Recommend (publish only) or Auto (act).", strict=False
    )
    prometheus: PrometheusSpec | None = Field(None, description="Where vLLM metrics are read.")
    interval: Duration = _duration("60s", "Evaluation period.")
    window: Duration = _duration("5m", "Query window; at least 4 scrape intervals.")
    scrape_interval: Duration = _duration("15s", "Prometheus scrape interval of the vLLM pods.")
    acceptance: AcceptanceSpec = Field(default_factory=AcceptanceSpec)
    latency: LatencySpec = Field(default_factory=LatencySpec)
    objective: AutotuneObjective = Field(
        AutotuneObjective.THROUGHPUT,
        description="How the schedule fit chooses K per batch size among the K whose predicted tokens/s are within "
        "1% of the best (a tie at goodput, below the cost model's error). Throughput (default): the smallest of them, "
        "the least drafter work and verify tokens per step, which leaves the step's token budget to prefills and "
        "narrows P99. Latency: the one with the lowest predicted mean time per output token. Outside such ties both "
        "take the fastest K.",
        strict=False,
    )
    batch_threshold: BatchThresholdSpec = Field(default_factory=BatchThresholdSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
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
        "Time one new vLLM pod may take to start and load its weights (its startup probe's budget). A config rollout "
        "is declared failed, and an autotune one reverted, when it takes longer than this plus a pod's termination "
        "grace period, once per wave of pods it replaces (spec.rollout; docs/rollout.md). "
        f"At least 1m, at most {MAX_ROLLOUT_DEADLINE}.",
    )


class ServiceSpec(_Spec):
    port: int = Field(8000, ge=1, le=65535, description="Port of the Service and vLLM's --port.")


class MonitoringSpec(_Spec):
    pod_monitor: bool = Field(False, description="Create a Prometheus-operator PodMonitor for the vLLM pods.")


class RolloutSpec(_Spec):
    """How a configuration change replaces the vLLM pods (docs/rollout.md)."""

    max_surge: int = Field(
        0,
        ge=0,
        le=1000,
        description="Pods a rollout may start above spec.replicas, each with a whole replica's GPUs. 0 (default): "
        "GPUs are scarce, so pods are replaced in place, and one replica without surge is down for every rollout.",
    )
    max_unavailable: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="Pods a rollout may take out of service at once. Default: 1 without surge, 0 with surge. The "
        "PodDisruptionBudget allows the same (at least 1, since a node drain cannot surge).",
    )
    drain_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description="How long a stopping vLLM pod keeps generating for its in-flight requests while it refuses new "
        "ones (vLLM's --shutdown-timeout, vLLM >= 0.18.0); the pod's termination grace period covers it. Default: "
        "spec.engine.maxModelLen tokens at the expected time per output token (spec.autotune.latency.p99Target when "
        "the metric is tpot, else 50ms), at most 300. 0 aborts in-flight requests on every restart.",
    )


class SpeculativeDeploymentSpec(_Spec):
    replicas: int = Field(1, ge=0, le=1000, description="vLLM pods.")
    engine: EngineSpec
    target: TargetSpec
    speculation: SpeculationSpec
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    autotune: AutotuneSpec = Field(default_factory=AutotuneSpec)
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> SpeculativeDeploymentSpec:
        problems = [rule.message for rule in SPEC_RULES if not rule.holds(self)]
        problems += candidate_rule_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def spec_running(spec: SpeculativeDeploymentSpec, drafter: SpeculationConfig) -> SpeculativeDeploymentSpec:
    """The spec as it runs with `drafter` (e.g. one of its candidates) in place of the declared drafter: the drafter's
    method, draft, K and n-gram window, the declared config's other settings, and no candidates of its own."""
    config = {name: getattr(drafter, name) for name in SpeculationConfig.model_fields}
    declared = {name: getattr(spec.speculation, name) for name in SpeculationSpec.model_fields}
    speculation = SpeculationSpec(**{**declared, **config, "candidates": []})
    return SpeculativeDeploymentSpec(
        **{**{name: getattr(spec, name) for name in type(spec).model_fields}, "speculation": speculation}
    )


# ---------------------------------------------------------------- cross-field rules (CEL + Python, one table)


@dataclass(frozen=True)
class CrossFieldRule:
    """One invariant, stated for the API server (CEL at `at`) and for offline validation (`holds`)."""

    at: tuple[str, ...]  # camelCase path below spec where the CEL rule is attached
    cel: str
    message: str
    holds: Callable[[SpeculativeDeploymentSpec], bool]


def _draft_tp_ok(config: SpeculationConfig, spec: SpeculativeDeploymentSpec) -> bool:
    draft = config.draft
    if draft is None or draft.tensor_parallel_size is None:
        return True
    return draft.tensor_parallel_size in (1, spec.parallelism.tensor_parallel_size)


def _weight_bits_ok(quantization: Quantization, bits: int | None) -> bool:
    return quantization not in QUANTIZATIONS_NEEDING_WEIGHT_BITS or bits is not None


@dataclass(frozen=True)
class ConfigRule:
    """One invariant of a drafter (SpeculationConfig), stated once for the declared one and for every candidate.

    `cel` reads the config as `{c}`; a rule that also reads other spec fields (`self.parallelism...`) sets
    `reads_spec`, and is attached at the spec, where `self` is the spec. `message` names the config's fields under
    `{at}`: spec.speculation, or spec.speculation.candidates[i].
    """

    cel: str
    message: str
    holds: Callable[[SpeculationConfig, SpeculativeDeploymentSpec], bool]
    reads_spec: bool = False

    def declared(self) -> CrossFieldRule:
        """The rule on spec.speculation."""
        return CrossFieldRule(
            at=() if self.reads_spec else ("speculation",),
            cel=self.cel.replace("{c}", "self.speculation" if self.reads_spec else "self"),
            message=self.message.replace("{at}", "spec.speculation"),
            holds=lambda s: self.holds(s.speculation, s),
        )

    def on_candidates(self) -> CrossFieldRule:
        """The rule on every element of spec.speculation.candidates; the API server's error names the element for
        rules attached to it (CANDIDATE_ITEM), offline validation names it always (candidate_rule_problems)."""
        message = self.message.replace("{at}", "spec.speculation.candidates[i]")
        if self.reads_spec:
            each = self.cel.replace("{c}", "c")
            return CrossFieldRule(
                at=(),
                cel=f"!has(self.speculation.candidates) || self.speculation.candidates.all(c, {each})",
                message=message,
                holds=lambda s: all(self.holds(c, s) for c in s.speculation.candidates),
            )
        return CrossFieldRule(
            at=("speculation", "candidates", CANDIDATE_ITEM),
            cel=self.cel.replace("{c}", "self"),
            message=message,
            holds=lambda s: all(self.holds(c, s) for c in s.speculation.candidates),
        )


# A path element of CrossFieldRule.at that means "each element of this list".
CANDIDATE_ITEM = "[]"


def _methods_cel(methods: tuple[SpeculationMethod, ...]) -> str:
    return "[" + ", ".join(f"'{m.value}'" for m in methods) + "]"


def _methods_text(methods: tuple[SpeculationMethod, ...]) -> str:
    return ", ".join(m.value for m in methods)


_DRAFT_REQUIRED = ConfigRule(
    cel=f"!({{c}}.method in {_methods_cel(METHODS_NEEDING_DRAFT)}) || has({{c}}.draft)",
    message=f"{{at}}.draft is required when {{at}}.method is {_methods_text(METHODS_NEEDING_DRAFT)}",
    holds=lambda c, _: c.method not in METHODS_NEEDING_DRAFT or c.draft is not None,
)
_DRAFT_FORBIDDEN = ConfigRule(
    cel=f"!({{c}}.method in {_methods_cel(METHODS_WITHOUT_DRAFT)}) || !has({{c}}.draft)",
    message=f"{{at}}.draft must be omitted when {{at}}.method is {_methods_text(METHODS_WITHOUT_DRAFT)} (ngram, "
    "ngram_gpu and suffix need no model; mtp uses the target's own heads)",
    holds=lambda c, _: c.method not in METHODS_WITHOUT_DRAFT or c.draft is None,
)
_K_REQUIRED = ConfigRule(
    cel=f"!({{c}}.method in {_methods_cel(METHODS_NEEDING_K)}) || has({{c}}.numSpeculativeTokens)",
    message=f"{{at}}.numSpeculativeTokens is required when {{at}}.method is {_methods_text(METHODS_NEEDING_K)} (1-32)",
    holds=lambda c, _: c.method not in METHODS_NEEDING_K or c.num_speculative_tokens is not None,
)
_LOOKUP_NGRAM_ONLY = ConfigRule(
    cel="{c}.method in ['ngram', 'ngram_gpu'] || (!has({c}.promptLookupMin) && !has({c}.promptLookupMax))",
    message="{at}.promptLookupMin and promptLookupMax are only allowed when method is ngram or ngram_gpu",
    holds=lambda c, _: c.method in NGRAM_METHODS or (c.prompt_lookup_min is None and c.prompt_lookup_max is None),
)
_LOOKUP_ORDERED = ConfigRule(
    cel="!has({c}.promptLookupMin) || !has({c}.promptLookupMax) || {c}.promptLookupMin <= {c}.promptLookupMax",
    message="{at}.promptLookupMin must be less than or equal to {at}.promptLookupMax",
    holds=lambda c, _: (
        c.prompt_lookup_min is None or c.prompt_lookup_max is None or c.prompt_lookup_min <= c.prompt_lookup_max
    ),
)
_DRAFT_TP = ConfigRule(
    cel="!has({c}.draft) || !has({c}.draft.tensorParallelSize) || {c}.draft.tensorParallelSize == 1 || "
    "{c}.draft.tensorParallelSize == self.parallelism.tensorParallelSize",
    message="{at}.draft.tensorParallelSize must be 1 or equal to spec.parallelism.tensorParallelSize (vLLM accepts "
    "no other draft TP)",
    holds=_draft_tp_ok,
    reads_spec=True,
)
_DRAFT_WEIGHT_BITS = ConfigRule(
    cel="!has({c}.draft) || !({c}.draft.quantization in ['compressed-tensors', 'modelopt']) || "
    "has({c}.draft.weightBits)",
    message="{at}.draft.weightBits is required when {at}.draft.quantization is compressed-tensors or modelopt (4, 8 "
    "or 16)",
    holds=lambda c, _: c.draft is None or _weight_bits_ok(c.draft.quantization, c.draft.weight_bits),
)
# A candidate runs with the declared config's adaptiveVerification, so its method must support it too.
_CANDIDATE_ADAPTIVE = ConfigRule(
    cel="!has(self.speculation.adaptiveVerification) || !self.speculation.adaptiveVerification || {c}.method in "
    + _methods_cel(METHODS_WITH_ADAPTIVE_VERIFICATION),
    message="{at}.method must be "
    + _methods_text(METHODS_WITH_ADAPTIVE_VERIFICATION)
    + " while spec.speculation.adaptiveVerification is true (a candidate runs with the declared config's settings)",
    holds=lambda c, s: not s.speculation.adaptive_verification or c.method in METHODS_WITH_ADAPTIVE_VERIFICATION,
    reads_spec=True,
)

CONFIG_RULES: tuple[ConfigRule, ...] = (
    _DRAFT_REQUIRED,
    _DRAFT_FORBIDDEN,
    _K_REQUIRED,
    _LOOKUP_NGRAM_ONLY,
    _LOOKUP_ORDERED,
    _DRAFT_TP,
    _DRAFT_WEIGHT_BITS,
)
CANDIDATE_RULES: tuple[ConfigRule, ...] = (*CONFIG_RULES, _CANDIDATE_ADAPTIVE)


def candidate_rule_problems(spec: SpeculativeDeploymentSpec) -> list[str]:
    """CANDIDATE_RULES on each candidate, and unique names, one line naming spec.speculation.candidates[i]."""
    problems = []
    first_with: dict[str, int] = {}
    for index, candidate in enumerate(spec.speculation.candidates):
        at = f"spec.speculation.candidates[{index}]"
        problems += [rule.message.replace("{at}", at) for rule in CANDIDATE_RULES if not rule.holds(candidate, spec)]
        if candidate.name in first_with:
            problems.append(
                f"{at}.name: {candidate.name!r} already names spec.speculation.candidates[{first_with[candidate.name]}]"
                " (names are unique)"
            )
        first_with.setdefault(candidate.name, index)
    return problems


_RELATIONS: tuple[CrossFieldRule, ...] = (
    _DRAFT_REQUIRED.declared(),
    _DRAFT_FORBIDDEN.declared(),
    _K_REQUIRED.declared(),
    CrossFieldRule(
        at=("speculation",),
        cel="!has(self.acceptance) || (has(self.acceptance.method) && self.acceptance.method == 'Relaxed') || "
        "(!has(self.acceptance.posteriorThreshold) && !has(self.acceptance.posteriorAlpha))",
        message="spec.speculation.acceptance.posteriorThreshold and posteriorAlpha are only allowed when "
        "spec.speculation.acceptance.method is Relaxed",
        holds=lambda s: (
            s.speculation.acceptance is None
            or s.speculation.acceptance.method is AcceptanceMethod.RELAXED
            or (s.speculation.acceptance.posterior_threshold, s.speculation.acceptance.posterior_alpha) == (None, None)
        ),
    ),
    _LOOKUP_NGRAM_ONLY.declared(),
    _LOOKUP_ORDERED.declared(),
    _DRAFT_TP.declared(),
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
        at=("speculation",),
        cel="!has(self.adaptiveVerification) || !self.adaptiveVerification || self.method in ["
        + ", ".join(f"'{m.value}'" for m in METHODS_WITH_ADAPTIVE_VERIFICATION)
        + "]",
        message="spec.speculation.adaptiveVerification needs method "
        + ", ".join(m.value for m in METHODS_WITH_ADAPTIVE_VERIFICATION)
        + " (vLLM's n-gram speculator has no acceptance estimator and suffix does not run on Model Runner V2)",
        holds=lambda s: (
            not s.speculation.adaptive_verification or s.speculation.method in METHODS_WITH_ADAPTIVE_VERIFICATION
        ),
    ),
    CrossFieldRule(
        at=(),
        cel="!has(self.speculation.adaptiveVerification) || !self.speculation.adaptiveVerification || "
        "!has(self.parallelism) || !has(self.parallelism.pipelineParallelSize) || "
        "self.parallelism.pipelineParallelSize == 1",
        message="spec.speculation.adaptiveVerification needs spec.parallelism.pipelineParallelSize 1 (vLLM: "
        "adaptive verification is not currently compatible with pipeline parallelism)",
        holds=lambda s: not s.speculation.adaptive_verification or s.parallelism.pipeline_parallel_size == 1,
    ),
    CrossFieldRule(
        at=("target",),
        cel="!(self.quantization in ['compressed-tensors', 'modelopt']) || has(self.weightBits)",
        message="spec.target.weightBits is required when spec.target.quantization is compressed-tensors or "
        "modelopt (4, 8 or 16)",
        holds=lambda s: _weight_bits_ok(s.target.quantization, s.target.weight_bits),
    ),
    _DRAFT_WEIGHT_BITS.declared(),
    CrossFieldRule(
        at=(),
        cel="!has(self.autotune) || !has(self.autotune.canary) || !self.autotune.canary.enabled || "
        "(has(self.replicas) && self.replicas >= 2)",
        message="spec.autotune.canary.enabled needs spec.replicas >= 2 (the canary is one of the replicas, and at "
        "least one must keep serving the chosen config)",
        holds=lambda s: not s.autotune.canary.enabled or s.replicas >= 2,
    ),
    CrossFieldRule(
        at=("rollout",),
        cel="(has(self.maxSurge) && self.maxSurge > 0) || !has(self.maxUnavailable) || self.maxUnavailable > 0",
        message="spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0 (a rollout could neither "
        "start a new pod nor stop an old one)",
        holds=lambda s: s.rollout.max_surge > 0 or s.rollout.max_unavailable != 0,
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


def _seconds(duration: str) -> float:
    """A duration that matched DURATION_PATTERN, in seconds; one too large to represent reads as infinite."""
    try:
        return parse_duration(duration)
    except ValueError:
        return math.inf


def _positive(duration: str | None) -> bool:
    return duration is None or _seconds(duration) > 0


def _header_name_ok(name: str) -> bool:
    return bool(re.fullmatch(HEADER_NAME_PATTERN, name)) and name.lower() not in CREDENTIAL_HEADERS


def _toleration_ok(t: Toleration) -> bool:
    exists = t.operator == "Exists"
    return (
        (t.toleration_seconds is None or t.effect == "NoExecute")
        and (bool(t.key) or exists)
        and (not exists or not t.value)
    )


def _env_ok(e: EnvVar) -> bool:
    if e.value_from is None:
        return True
    source = e.value_from
    refs = [source.secret_key_ref, source.config_map_key_ref, source.field_ref, source.resource_field_ref]
    return not e.value and sum(ref is not None for ref in refs) == 1


_CREDENTIAL_HEADERS_CEL = ", ".join(f"'{h}'" for h in CREDENTIAL_HEADERS)

FIELD_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        at=("resources",),
        cel="!has(self.cpu) || (isQuantity(self.cpu) && quantity(self.cpu).isGreaterThan(quantity('0')))",
        message="spec.resources.cpu must be a Kubernetes quantity greater than 0, e.g. 8 or 7500m",
        holds=lambda s: s.resources.cpu is None or is_positive_quantity(s.resources.cpu),
    ),
    CrossFieldRule(
        at=("resources",),
        cel="!has(self.memory) || (isQuantity(self.memory) && quantity(self.memory).isGreaterThan(quantity('0')))",
        message="spec.resources.memory must be a Kubernetes quantity greater than 0, e.g. 64Gi",
        holds=lambda s: s.resources.memory is None or is_positive_quantity(s.resources.memory),
    ),
    CrossFieldRule(
        at=("resources",),
        cel=f"!has(self.nodeSelector) || self.nodeSelector.all(k, k.matches(r'{QUALIFIED_NAME_PATTERN}'))",
        message="spec.resources.nodeSelector keys must be Kubernetes label keys (qualified names, e.g. "
        "nvidia.com/gpu.product)",
        holds=lambda s: all(re.fullmatch(QUALIFIED_NAME_PATTERN, k) for k in s.resources.node_selector),
    ),
    CrossFieldRule(
        at=("resources",),
        cel="!has(self.tolerations) || self.tolerations.all(t, "
        "(!has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute')) && "
        "((has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists')) && "
        "(!(has(t.operator) && t.operator == 'Exists') || !has(t.value) || t.value == ''))",
        message="spec.resources.tolerations: tolerationSeconds needs effect NoExecute, an empty key needs operator "
        "Exists, and operator Exists takes no value",
        holds=lambda s: all(_toleration_ok(t) for t in s.resources.tolerations),
    ),
    CrossFieldRule(
        at=("engine",),
        cel="!has(self.env) || self.env.all(e, !has(e.valueFrom) || ((!has(e.value) || e.value == '') && "
        "[has(e.valueFrom.secretKeyRef), has(e.valueFrom.configMapKeyRef), has(e.valueFrom.fieldRef), "
        "has(e.valueFrom.resourceFieldRef)].filter(x, x).size() == 1))",
        message="spec.engine.env: an entry with valueFrom has no value and exactly one of secretKeyRef, "
        "configMapKeyRef, fieldRef or resourceFieldRef",
        holds=lambda s: all(_env_ok(e) for e in s.engine.env),
    ),
    CrossFieldRule(
        at=("autotune", "prometheus"),
        cel="has(self.url) != has(self.connection)",
        message="spec.autotune.prometheus needs exactly one of url (queried without credentials) or connection "
        "(a connection an administrator configured, with its credentials)",
        holds=lambda s: (
            s.autotune.prometheus is None
            or ((s.autotune.prometheus.url is None) != (s.autotune.prometheus.connection is None))
        ),
    ),
    CrossFieldRule(
        at=("autotune", "prometheus"),
        cel="!has(self.connection) || ((!has(self.insecureSkipVerify) || !self.insecureSkipVerify) && "
        "(!has(self.headers) || size(self.headers) == 0))",
        message="spec.autotune.prometheus.insecureSkipVerify and headers are set by the administrator of a "
        "connection; omit them when spec.autotune.prometheus.connection is set",
        holds=lambda s: (
            s.autotune.prometheus is None
            or s.autotune.prometheus.connection is None
            or (not s.autotune.prometheus.insecure_skip_verify and not s.autotune.prometheus.headers)
        ),
    ),
    CrossFieldRule(
        at=("autotune", "prometheus"),
        cel=f'!has(self.headers) || self.headers.all(k, k.matches(r"{HEADER_NAME_PATTERN}") && '
        f"!(k.lowerAscii() in [{_CREDENTIAL_HEADERS_CEL}]))",
        message="spec.autotune.prometheus.headers names must be HTTP header names (letters, digits and "
        "!#$%&'*+.^_`|~-) other than Authorization, Proxy-Authorization and Cookie (credentials belong in an "
        "administrator's connection)",
        holds=lambda s: s.autotune.prometheus is None or all(_header_name_ok(k) for k in s.autotune.prometheus.headers),
    ),
    CrossFieldRule(
        at=("autotune", "prometheus"),
        cel=f"duration(self.timeout) > duration('0s') && duration(self.timeout) <= duration('{MAX_QUERY_TIMEOUT}')",
        message=f"spec.autotune.prometheus.timeout must be greater than 0s and at most {MAX_QUERY_TIMEOUT} (a "
        "round measures every object one query after the other)",
        holds=lambda s: (
            s.autotune.prometheus is None or 0 < parse_duration(s.autotune.prometheus.timeout) <= MAX_QUERY_TIMEOUT_S
        ),
    ),
    CrossFieldRule(
        at=("autotune",),
        cel="duration(self.interval) > duration('0s') && duration(self.window) > duration('0s') && "
        "duration(self.scrapeInterval) > duration('0s') && duration(self.rolloutDeadline) > duration('0s')",
        message="spec.autotune.interval, window, scrapeInterval and rolloutDeadline must be greater than 0s",
        holds=lambda s: all(
            _positive(d)
            for d in (s.autotune.interval, s.autotune.window, s.autotune.scrape_interval, s.autotune.rollout_deadline)
        ),
    ),
    CrossFieldRule(
        at=("autotune",),
        cel=f"duration(self.rolloutDeadline) <= duration('{MAX_ROLLOUT_DEADLINE}')",
        message=f"spec.autotune.rolloutDeadline must be at most {MAX_ROLLOUT_DEADLINE} (it becomes the Deployment's "
        "progressDeadlineSeconds and the startup probe's budget)",
        holds=lambda s: _seconds(s.autotune.rollout_deadline) <= parse_duration(MAX_ROLLOUT_DEADLINE),
    ),
    CrossFieldRule(
        at=("autotune", "latency"),
        cel="!has(self.p99Target) || duration(self.p99Target) > duration('0s')",
        message="spec.autotune.latency.p99Target must be greater than 0s",
        holds=lambda s: _positive(s.autotune.latency.p99_target),
    ),
    CrossFieldRule(
        at=("autotune", "latency"),
        cel="!has(self.ttftDeadline) || duration(self.ttftDeadline) > duration('0s')",
        message="spec.autotune.latency.ttftDeadline must be greater than 0s",
        holds=lambda s: _positive(s.autotune.latency.ttft_deadline),
    ),
    CrossFieldRule(
        at=("autotune", "latency"),
        cel="!has(self.tpotTarget) || duration(self.tpotTarget) > duration('0s')",
        message="spec.autotune.latency.tpotTarget must be greater than 0s",
        holds=lambda s: _positive(s.autotune.latency.tpot_target),
    ),
)


# Relations between fields, then rules on single fields that a structural schema cannot state (quantities, map keys,
# durations above zero). CEL raw strings (r'...', r"...") hand patterns to the API server's Go regexp verbatim.
SPEC_RULES: tuple[CrossFieldRule, ...] = _RELATIONS + FIELD_RULES
# The same drafter rules on each of spec.speculation.candidates; offline validation names the element
# (candidate_rule_problems), so these are checked there rather than through their generic messages.
CANDIDATE_CROSS_FIELD_RULES: tuple[CrossFieldRule, ...] = tuple(rule.on_candidates() for rule in CANDIDATE_RULES)
# Every rule the CRD carries as CEL.
CROSS_FIELD_RULES: tuple[CrossFieldRule, ...] = SPEC_RULES + CANDIDATE_CROSS_FIELD_RULES


def duration_problems(spec: SpeculativeDeploymentSpec) -> list[str]:
    """Offline-only checks that need durations compared (CEL cannot multiply a duration)."""
    if window_covers_scrapes(spec.autotune):
        return []
    return [
        f"spec.autotune.window: {spec.autotune.window} is shorter than 4 x spec.autotune.scrapeInterval "
        f"({spec.autotune.scrape_interval}); rate() over fewer than 4 scrapes is noise"
    ]


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
    rollout_started: str | None = Field(
        None,
        description="When the operator first applied configHash; its own rollout deadline (rolloutDeadline) counts "
        "from here, also where the Deployment never reports ProgressDeadlineExceeded (a return to an old ReplicaSet).",
    )
    rollout_completed: str | None = Field(
        None, description="When every replica of configHash was first available (the deadline no longer applies)."
    )
    source: str | None = Field(None, description="Where the running intent comes from: spec, autotune or override.")
    drafter: str | None = Field(
        None, description="The drafter the pods run: draft model or head, or the method when it needs none."
    )
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


class CandidateVerdict(StrEnum):
    """Where a candidate stands after its trials on live traffic."""

    UNTRIED = "Untried"  # not run yet
    TRIALLING = "Trialling"  # one pod runs it now, measured against the incumbent pods
    WON = "Won"  # measured faster than the incumbent: promoted (Auto) or recommended (Recommend)
    LOST = "Lost"  # measured slower: not tried again until the traffic changes (MeasuredTraffic)
    INCONCLUSIVE = "Inconclusive"  # too few samples, or a difference within the noise


class TrialFigures(_Model):
    """What one side of a trial measured over the same window and traffic, at comparable batch sizes."""

    output_tokens_per_second: float | None = Field(
        None, description="Generated tokens per second per pod: the speed the verdict compares."
    )
    mean_batch_size: float | None = Field(None, description="Mean running requests per pod over the window.")
    acceptance_rate: float | None = Field(None, description="Accepted draft tokens / proposed draft tokens.")
    mean_acceptance_length: float | None = Field(None, description="Tokens emitted per verification step.")
    p50_tpot_ms: float | None = Field(None, description="Median time per output token, ms.")
    p99_tpot_ms: float | None = Field(None, description="P99 time per output token, ms.")
    requests: int | None = Field(None, description="Finished requests in the window (the sample size).")


class TrialPhase(StrEnum):
    """Where a one-pod trial of a new speculation config stands."""

    RUNNING = "Running"  # one pod runs the trial config beside the incumbent pods; analysis pending
    PROMOTED = "Promoted"  # the analysis was Successful: every pod rolls to the trial config
    ROLLED_BACK = "RolledBack"  # Failed, still Inconclusive after its one extension, or never ready: trial pod removed
    ABANDONED = "Abandoned"  # the config it tried is no longer wanted (spec edit, mode change, pin): trial pod removed
    RECOMMENDED = "Recommended"  # a candidate drafter measured faster in Recommend: recommended, trial pod removed


class TrialOutcome(StrEnum):
    """The analysis of a trial, as Argo Rollouts' analysis names its results."""

    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"


class MeasuredTraffic(_Model):
    """The traffic a verdict was measured on, as the incumbent pods saw it over the analysis window.

    Read back by the operator: a Lost or Inconclusive candidate drafter, and a config rolled back by its one-pod trial,
    are tried again when the traffic has shifted from this (acceptance under the same incumbent config, or the prompt /
    output length mix), without waiting for their retry time."""

    config_hash: str = Field(description="The incumbent pods' config hash (acceptance is compared only under it).")
    acceptance_rate: float | None = Field(None, description="The incumbent pods' acceptance rate.")
    output_tokens_p50: float | None = Field(None, description="Median generated tokens per request.")
    mean_prompt_tokens: float | None = Field(None, description="Mean prompt tokens per request.")


class TrialStatus(_Model):
    """The one-pod trial of a speculation config (progressive actuation, docs/rollout.md).

    The operator reads back only the typed record of the trial (intents, hashes, times, phase, extended, experiment,
    incumbentTpotBeforeMs, trafficBefore, traffic); the figures, speedup and reason are evidence for people.
    """

    intent: IntentStatus = Field(description="The speculation config on trial (what the trial pod runs).")
    config_hash: str = Field(description="Hash of the trial pod's vLLM command line; its metrics carry this label.")
    incumbent_intent: IntentStatus = Field(description="The config the other pods keep running during the trial.")
    incumbent_config_hash: str = Field(description="Hash of the incumbent pods' command line.")
    action: str | None = Field(None, description="The autotune actuation the trial carries out.")
    candidate_name: str | None = Field(
        None,
        description="The spec.speculation.candidates[].name whose drafter the trial pod runs; absent when the trial "
        "carries an autotune change of the declared drafter.",
    )
    phase: TrialPhase = Field(
        description="Running, Promoted, RolledBack, Abandoned, or Recommended (a candidate drafter won in Recommend)."
    )
    started_at: str = Field(description="When the operator recorded the trial (before creating its pod).")
    ready_at: str | None = Field(None, description="When an evaluation first saw the trial pod ready.")
    analysis_at: str | None = Field(
        None,
        description="When the analysis concludes: readyAt + window + 2 scrape intervals, once more if extended; "
        "sooner where an earlier analysis is decisive (beyond twice regressionTolerance).",
    )
    extended: bool = Field(False, description="The analysis was Inconclusive once and got one more window.")
    experiment: bool = Field(
        False,
        description="An experiment: started because neither a usable cost model nor a measured comparison could "
        "decide, so it is promoted only when the trial pod is faster than the incumbents beyond regressionTolerance "
        "(a tie keeps the incumbent config), both during the trial and as they ran before it "
        "(incumbentTpotBeforeMs).",
    )
    incumbent_tpot_before_ms: float | None = Field(
        None,
        description="The yardstick from before the trial of an experiment or a candidate drafter: the incumbents' mean "
        "time per output token over the window that started it. While the trial pod restarts the incumbents carry "
        "its traffic, and the backlog can slow them for the whole analysis; the trial pod must beat them as they ran "
        "before too.",
    )
    traffic_before: MeasuredTraffic | None = Field(
        None,
        description="The incumbents' traffic over the window that started the trial, which incumbentTpotBeforeMs was "
        "measured on: once the traffic during the trial has shifted from it, that yardstick no longer applies and "
        "only the comparison on the same traffic counts.",
    )
    ended_at: str | None = Field(None, description="When the trial was promoted, rolled back or abandoned.")
    retry_after: str | None = Field(
        None,
        description="After a rollback: the same config is not tried again before this time (probeInterval), unless "
        "the traffic shifts from `traffic`.",
    )
    traffic: MeasuredTraffic | None = Field(
        None,
        description="The traffic the incumbent pods measured when the trial ended: a large shift from it lets a "
        "rolled-back config be tried again before retryAfter.",
    )
    outcome: TrialOutcome | None = Field(None, description="The last analysis: Successful, Failed or Inconclusive.")
    candidate: TrialFigures | None = Field(None, description="The trial pod's figures over the analysis window.")
    incumbent: TrialFigures | None = Field(None, description="The incumbent pods' figures over the same window.")
    speedup: float | None = Field(
        None, description="Incumbent over trial mean time per output token at comparable batch (> 1: trial faster)."
    )
    reason: str | None = Field(None, description="The analysis or the end of the trial in words, for people.")

    @model_validator(mode="after")
    def _times_are_rfc3339(self) -> TrialStatus:
        """The times the operator reads back must parse, with a zone: a record that does not is unreadable."""
        _check_zoned_times(self, ("started_at", "ready_at", "analysis_at", "ended_at", "retry_after"))
        return self


def _check_zoned_times(record: BaseModel, names: Sequence[str]) -> None:
    """ValueError naming the first of `names` whose value is set but is not an RFC 3339 time with a zone."""
    for name in names:
        value = getattr(record, name)
        if value is not None and not is_zoned_time(value):
            raise ValueError(f"{to_camel(name)} {value!r} is not an RFC 3339 time with a zone")


class CandidateStatus(_Model):
    """One spec.speculation.candidates element: what it is, what its trials measured and the verdict."""

    name: str = Field(description="spec.speculation.candidates[].name.")
    method: str = Field(description="Its speculation method.")
    drafter: str = Field(description="Its draft model or head, or the method when it needs none.")
    num_speculative_tokens: int | None = Field(None, description="Its K.")
    verdict: CandidateVerdict = Field(description="Untried, Trialling, Won, Lost or Inconclusive.")
    candidate: TrialFigures | None = Field(None, description="The candidate pod's figures in its last trial.")
    incumbent: TrialFigures | None = Field(
        None, description="The incumbent pods' figures over the same window (the comparison)."
    )
    speedup: float | None = Field(
        None,
        description="Incumbent over candidate mean time per output token at comparable batch, from its last trial "
        "(> 1: the candidate was faster).",
    )
    trial_started: str | None = Field(None, description="When its last trial was recorded (its pod is created after).")
    evidence_time: str | None = Field(None, description="When the figures behind the verdict were measured.")
    trials: int | None = Field(None, description="Trials run so far.")
    retry_after: str | None = Field(
        None,
        description="Inconclusive: not tried again before this time (probeInterval after its trial) unless the "
        "traffic shifts. A Lost candidate has none: only a traffic shift re-opens it.",
    )
    reason: str | None = Field(None, description="The verdict in words, for people.")
    traffic: MeasuredTraffic | None = Field(
        None, description="The traffic of the verdict: a large shift from it re-opens a Lost or Inconclusive candidate."
    )

    @model_validator(mode="after")
    def _times_are_rfc3339(self) -> CandidateStatus:
        """The time the operator reads back (retryAfter) and the two it shows must parse, with a zone."""
        _check_zoned_times(self, ("trial_started", "evidence_time", "retry_after"))
        return self


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
    trial: TrialStatus | None = Field(
        None, description="The last one-pod trial of an autotune change: its configs, phase and comparison."
    )
    candidates: list[CandidateStatus] = Field(
        default_factory=list,
        max_length=MAX_CANDIDATES,
        description="Each of spec.speculation.candidates: its measured figures against the incumbent and verdict.",
    )


class SpeculativeDeployment(BaseModel):
    """The whole object, as read from the API server or a file."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    api_version: Literal["specpilot.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeDeployment"]
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeDeploymentSpec
    status: SpeculativeDeploymentStatus | None = None


# The API server's own limit on all annotations of one object together (keys plus values, in bytes).
ANNOTATIONS_MAX_BYTES = 256 * 1024


class ObjectMeta(BaseModel):
    """The parts of `metadata` the API server checks itself (ValidateObjectMeta), whatever the CRD says.

    A CRD cannot constrain metadata beyond the name, so these rules are not in the generated schema; `validate` checks
    them offline so that it refuses what `kubectl apply` would: a label value that is a number, an annotation key that
    is not a qualified name, a namespace that is not a DNS label. Other metadata fields pass through untouched.
    """

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    name: str | None = None
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL_PATTERN)
    uid: str | None = None
    labels: (
        dict[
            Annotated[str, Field(max_length=317, pattern=QUALIFIED_NAME_PATTERN)],
            Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
        ]
        | None
    ) = None
    annotations: dict[str, str] | None = None
    finalizers: list[Annotated[str, Field(max_length=317, pattern=QUALIFIED_NAME_PATTERN)]] | None = None

    @model_validator(mode="after")
    def _annotations(self) -> ObjectMeta:
        annotations = self.annotations or {}
        for key in annotations:
            # the API server lowercases annotation keys before checking them (label keys it does not)
            if len(key) > 317 or not re.fullmatch(QUALIFIED_NAME_PATTERN, key.lower()):
                raise ValueError(
                    f"metadata.annotations: key {_shown(key)} must be {PATTERN_HELP[QUALIFIED_NAME_PATTERN]}"
                )
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            raise ValueError(
                f"metadata.annotations: {size} bytes in all, more than the API server's {ANNOTATIONS_MAX_BYTES}"
            )
        return self


def metadata_problems(metadata: object) -> list[str]:
    """One line per field of `metadata` the API server would refuse (see ObjectMeta); [] when it would accept it."""
    try:
        ObjectMeta.model_validate(metadata)
    except ValidationError as err:
        return describe_validation_error(err, prefix="metadata")
    return []


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
        ctx = item.get("ctx") or {}
        if item["type"] == "value_error" and message.startswith(("spec.", "metadata.")):
            lines.extend(message.split("; "))  # cross-field messages already name their fields
        elif item["type"] == "extra_forbidden" and item["loc"] and item["loc"][-1] in REMOVED_FIELDS:
            lines.append(f"{path}: {REMOVED_FIELDS[str(item['loc'][-1])]}")
        elif item["type"] == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_HELP:
            lines.append(f"{path}: must be {PATTERN_HELP[ctx['pattern']]} (got {_shown(item.get('input'))})")
        else:
            allowed = _allowed_values(ctx)
            got = f" (got {_shown(item.get('input'))})" if str(item["type"]).endswith("_type") else ""
            lines.append(f"{path or '<root>'}: {message}{allowed}{got}")
    return lines


# Fields that existed once: a clear refusal beats "Extra inputs are not permitted" (or the API server's pruning).
REMOVED_FIELDS = {
    "authSecretRef": "was removed: a SpeculativeDeployment can no longer name a Secret for the operator to read. "
    "Ask an administrator for a Prometheus connection and set spec.autotune.prometheus.connection "
    "(docs/security.md)",
}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_values(ctx: dict[str, Any] | None) -> str:
    if not ctx or "expected" not in ctx or str(ctx["expected"]).startswith("'"):  # enum messages list them already
        return ""
    return f" (allowed: {ctx['expected']})"
