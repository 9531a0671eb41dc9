"""Memory budget of one replica and the draft/target checks (the seed framework as code; docs/design/cost-model.md).

Units. Memory is counted in bytes and reported both in GiB (2**30 bytes, the unit of `spec.resources.gpuMemoryGiB`,
of `nvidia-smi` and of vLLM's logs) and in GB (10**9 bytes, the unit of the seed framework's tables and of most
model cards). The seed's "70B INT8 + 8B BF16 ≈ 86 GB" is 70e9 x 1 B + 8e9 x 2 B in GB; the same weights are 80.1 GiB.
An "80 GB" H100 has 80 GiB of HBM, of which CUDA reports about 79.2 GiB as total memory (vLLM's
"total_gpu_memory"); write 79.2 in gpuMemoryGiB for an exact plan.

The model, per replica of TP x PP ranks (vLLM sizes every rank's KV cache to the smallest rank's budget):

    weights       = (parameters - embeddings) x bytes per weight + embeddings x 16-bit   (vLLM keeps the input
                    embedding and LM head unquantized); BF16/FP16 2 B, FP8/INT8 1 B, INT4/FP4 0.5 B
    usable        = gpuMemoryGiB x gpuMemoryUtilization, per rank
    reserve       = ACTIVATION_RESERVE_FIXED_GIB + activations + sampler logits, per rank (see `activation_reserve`)
    KV budget     = usable - weights on the rank - reserve        (x ranks: the replica's KV cache)
    KV bytes/tok  = 2 x layers x KV heads x head dim x KV dtype bytes (MLA: layers x latent dim x bytes), for the
                    target and, where the draft keeps its own cache (draft_model, EAGLE heads, MTP layers), the draft
    KV tokens     = KV budget per rank / KV bytes per token per rank; concurrent sequences = KV tokens // maxModelLen

This mirrors vLLM's own accounting (`vllm/v1/worker/gpu_worker.py`, `determine_available_memory`: requested memory =
total x utilization, minus weights, the profiled activation peak, non-torch memory and, since vLLM 0.21, the CUDA
graph pool). The reserve constants are estimates of those profiled terms, chosen to err on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from specpilot.api.v1alpha1 import (
    Dtype,
    Quantization,
    SpeculationMethod,
    SpeculativeDeploymentSpec,
)
from specpilot.planning.catalog import Architecture, resolve_architecture
from specpilot.vllm.versions import DRAFT_MODEL_V1, V0_ENGINE_REMOVED, VllmVersion

GIB = 1024**3
GB = 1000**3

DRAFT_SHARE_WARN = 0.15  # the seed framework: warn when the draft's weights take more than ~15% of the replica's VRAM
TARGET_SHARE_WARN = 0.70  # ... and when the target's take more than ~70% (little room left for KV)
DRAFT_RATIO_ADVISED = (1 / 12, 1 / 8)  # draft:target parameters, advised 1:12 to 1:8 for draft models

# Per-rank reserve (estimates of what vLLM profiles at start-up; see the module docstring):
ACTIVATION_RESERVE_FIXED_GIB = 1.5  # non-torch memory (CUDA context, cuBLAS/NCCL workspaces) ~1 GiB + CUDA graphs
ACTIVATION_BYTES = 2  # activations in BF16/FP16
LOGIT_BYTES = 4  # the sampler works on float32 logits
INLINE_FFN_RATIO = 3.5  # MLP width / hidden size when inline numbers give none (Llama 3: 14336 / 4096)

# Bits per stored weight, by KV-cache dtype; scale tensors of the block formats are left out.
_KV_DTYPE_BYTES: dict[str, float] = {
    "float16": 2,
    "bfloat16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "fp8_per_token_head": 1,
    "int8_per_token_head": 1,
    "turboquant_k8v4": 0.75,
    "int4_per_token_head": 0.5,
    "nvfp4": 0.5,
    "nvfp4_4over6": 0.5,
    "nvfp4_ds_mla": 0.5,
    "ultraquant_4bit": 0.5,
    "turboquant_4bit_nc": 0.5,
    "turboquant_k3v4_nc": 0.4375,
    "turboquant_3bit_nc": 0.375,
}

_INT4_BY_DEFAULT = (Quantization.AWQ, Quantization.AWQ_MARLIN, Quantization.GPTQ, Quantization.GPTQ_MARLIN)


class Severity(StrEnum):
    ERROR = "Error"
    WARNING = "Warning"
    INFO = "Info"


@dataclass(frozen=True)
class Finding:
    """One verdict: `field` is the spec field to change, `message` carries the numbers behind it."""

    severity: Severity
    code: str
    field: str
    message: str

    def line(self) -> str:
        return f"{self.field}: {self.message} [{self.severity} {self.code}]"

    def to_dict(self) -> dict[str, str]:
        return {"severity": str(self.severity), "code": self.code, "field": self.field, "message": self.message}


@dataclass(frozen=True)
class Precision:
    label: str
    bytes_per_weight: float
    embedding_bytes: float  # bytes per embedding / LM-head weight
    assumed: str | None = None  # set when the width is a guess the user should confirm


def weight_precision(quantization: Quantization, weight_bits: int | None, dtype: Dtype) -> Precision:
    """Bytes per weight for a `--quantization` value; unquantized weights follow `--dtype` (auto: 16-bit)."""
    dtype_bytes = 4 if dtype in (Dtype.FLOAT32, Dtype.FLOAT) else 2
    dtype_label = {Dtype.FLOAT32: "FP32", Dtype.FLOAT: "FP32", Dtype.FLOAT16: "FP16", Dtype.HALF: "FP16"}.get(
        dtype, "BF16"
    )
    name = quantization.value
    if quantization is Quantization.NONE:
        return Precision(dtype_label, dtype_bytes, dtype_bytes)
    if quantization is Quantization.FP8:
        return Precision("FP8", 1, dtype_bytes)
    if quantization in (Quantization.MODELOPT_FP4, Quantization.MXFP4):
        return Precision(f"FP4 ({name})", 0.5, dtype_bytes)
    if quantization in _INT4_BY_DEFAULT:
        bits = weight_bits or 4
        return Precision(f"INT{bits} ({name})", bits / 8, dtype_bytes)
    if quantization is Quantization.BITSANDBYTES:
        bits = weight_bits or 4  # vLLM's in-flight bitsandbytes quantization loads 4-bit unless told otherwise
        return Precision(f"INT{bits} ({name})", bits / 8, dtype_bytes)
    if quantization is Quantization.GGUF:
        if weight_bits is None:
            return Precision("4-bit (gguf, assumed)", 0.5, 0.5, assumed="gguf files mix widths; 4-bit assumed")
        return Precision(f"{weight_bits}-bit (gguf)", weight_bits / 8, weight_bits / 8)
    # compressed-tensors and modelopt hold several widths; the API requires weightBits for them.
    if weight_bits is None:
        return Precision(f"16-bit ({name}, assumed)", 2, dtype_bytes, assumed=f"{name} without weightBits")
    kind = "INT8/FP8" if weight_bits == 8 else ("4-bit" if weight_bits == 4 else "16-bit")
    return Precision(f"{kind} ({name})", weight_bits / 8, dtype_bytes)


def kv_dtype_bytes(kv_cache_dtype: str, dtype: Dtype) -> float | None:
    """Bytes per KV element; `auto` follows the model dtype. None: a dtype this planner does not know."""
    key = kv_cache_dtype.strip().lower()
    if key == "auto":
        return 4 if dtype in (Dtype.FLOAT32, Dtype.FLOAT) else 2
    return _KV_DTYPE_BYTES.get(key)


@dataclass(frozen=True)
class ModelMemory:
    """Weights and KV footprint of one model (target, draft or MTP module) within a replica."""

    role: str  # "target", "draft" (a standalone model), "head" (EAGLE) or "mtp" (the target's MTP layers)
    model: str
    source: str
    parameters: int
    embedding_parameters: int
    precision: Precision
    weight_bytes: int
    kv_layers: int
    kv_bytes_per_token: int  # whole model, as if on one GPU (2 x layers x KV heads x head dim x bytes)
    kv_bytes_per_token_per_rank: int  # on the most loaded rank, after TP sharding or replication
    tensor_parallel_size: int


@dataclass(frozen=True)
class MemoryPlan:
    """The memory budget of one replica; sizes in bytes, with GiB and GB views for humans."""

    gpus_per_replica: int
    ranks: int  # GPUs vLLM uses: TP x PP
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    max_model_len: int
    target: ModelMemory
    draft: ModelMemory | None
    reserve_bytes_per_rank: int
    kv_budget_bytes_per_rank: int  # may be negative: the shortfall
    kv_tokens: int
    concurrent_sequences: int
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def total_vram_bytes(self) -> int:
        return self.gpus_per_replica * self.gpu_memory_bytes

    @property
    def usable_bytes(self) -> int:
        return int(self.ranks * self.gpu_memory_bytes * self.gpu_memory_utilization)

    @property
    def weight_bytes(self) -> int:
        return self.target.weight_bytes + (self.draft.weight_bytes if self.draft else 0)

    @property
    def draft_weight_bytes(self) -> int:
        return self.draft.weight_bytes if self.draft else 0

    @property
    def reserve_bytes(self) -> int:
        return self.ranks * self.reserve_bytes_per_rank

    @property
    def kv_cache_bytes(self) -> int:
        """What vLLM allocates for KV: every rank gets the smallest rank's budget."""
        return self.ranks * max(0, self.kv_budget_bytes_per_rank)

    @property
    def headroom_before_reserve_bytes(self) -> int:
        """VRAM left after weights alone, before utilization and reserve: the seed framework's "leaving" figure."""
        return self.total_vram_bytes - self.weight_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.target.kv_bytes_per_token + (self.draft.kv_bytes_per_token if self.draft else 0)

    @property
    def draft_share_of_vram(self) -> float:
        return self.draft_weight_bytes / self.total_vram_bytes

    @property
    def target_share_of_vram(self) -> float:
        return self.target.weight_bytes / self.total_vram_bytes

    @property
    def draft_to_target_ratio(self) -> float | None:
        """Draft parameters / target parameters (0.1 reads 1:10); None unless the draft is a standalone model."""
        if self.draft is None or self.draft.role != "draft":
            return None
        return self.draft.parameters / self.target.parameters

    @property
    def fits(self) -> bool:
        return self.kv_budget_bytes_per_rank > 0 and self.kv_tokens >= self.max_model_len

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity is Severity.ERROR)

    def to_status(self) -> dict[str, Any]:
        """`status.memory` (api MemoryStatus, camelCase); rounded so a re-plan does not churn the status."""
        return {
            "targetWeightsGiB": round(self.target.weight_bytes / GIB, 2),
            "draftWeightsGiB": round(self.draft_weight_bytes / GIB, 2),
            "kvCacheGiB": round(self.kv_cache_bytes / GIB, 2),
            "kvTokens": self.kv_tokens,
            "concurrentSequences": self.concurrent_sequences,
            "draftShareOfVram": round(self.draft_share_of_vram, 4),
            "targetShareOfVram": round(self.target_share_of_vram, 4),
            "fits": self.fits,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything `plan -o json` prints; every size is given in GiB and in GB, named by its unit."""
        ratio = self.draft_to_target_ratio
        return {
            "units": {"GiB": GIB, "GB": GB},
            "fits": self.fits,
            "gpusPerReplica": self.gpus_per_replica,
            "ranks": self.ranks,
            "gpuMemoryGiB": self.gpu_memory_bytes / GIB,
            "gpuMemoryUtilization": self.gpu_memory_utilization,
            "totalVram": _sizes(self.total_vram_bytes),
            "usable": _sizes(self.usable_bytes),
            "target": _model_json(self.target),
            "draft": _model_json(self.draft) if self.draft else None,
            "weights": _sizes(self.weight_bytes),
            "headroomBeforeReserve": _sizes(self.headroom_before_reserve_bytes),
            "reserve": _sizes(self.reserve_bytes),
            "reservePerRank": _sizes(self.reserve_bytes_per_rank),
            "kvCache": _sizes(self.kv_cache_bytes),
            "kvBudgetPerRank": _sizes(self.kv_budget_bytes_per_rank),
            "kvBytesPerToken": self.kv_bytes_per_token,
            "kvTokens": self.kv_tokens,
            "maxModelLen": self.max_model_len,
            "concurrentSequences": self.concurrent_sequences,
            "draftShareOfVram": round(self.draft_share_of_vram, 4),
            "targetShareOfVram": round(self.target_share_of_vram, 4),
            "draftToTargetRatio": round(ratio, 4) if ratio is not None else None,
            "findings": [f.to_dict() for f in self.findings],
            "status": self.to_status(),
        }


def _sizes(n: int) -> dict[str, float]:
    return {"bytes": n, "GiB": round(n / GIB, 3), "GB": round(n / GB, 3)}


def _model_json(m: ModelMemory) -> dict[str, Any]:
    return {
        "role": m.role,
        "model": m.model,
        "source": m.source,
        "parameters": m.parameters,
        "embeddingParameters": m.embedding_parameters,
        "precision": m.precision.label,
        "bytesPerWeight": m.precision.bytes_per_weight,
        "weights": _sizes(m.weight_bytes),
        "kvLayers": m.kv_layers,
        "kvBytesPerToken": m.kv_bytes_per_token,
        "kvBytesPerTokenPerRank": m.kv_bytes_per_token_per_rank,
        "tensorParallelSize": m.tensor_parallel_size,
    }


def _fmt(n: float) -> str:
    return f"{n / GIB:.1f} GiB ({n / GB:.1f} GB)"


# ----------------------------------------------------------------------------------------------- the planner


def weight_bytes(arch: Architecture, precision: Precision, parameters: int | None = None) -> int:
    total = arch.parameters if parameters is None else parameters
    embeddings = min(arch.embedding_parameters, total) if parameters is None else 0
    return round((total - embeddings) * precision.bytes_per_weight + embeddings * precision.embedding_bytes)


def _per_rank_kv_elements(arch: Architecture, tp: int) -> int:
    """KV elements per token per layer on one rank: heads split over TP, at least one (replicated) per rank."""
    if arch.mla_latent_dim is not None:
        return arch.mla_latent_dim  # the latent is replicated on every TP rank
    return 2 * max(1, math.ceil(arch.num_kv_heads / tp)) * arch.head_dim


def _model_memory(
    role: str,
    arch: Architecture,
    precision: Precision,
    *,
    tp: int,
    kv_layers: int,
    kv_layers_per_rank: int,
    kv_bytes: float,
    parameters: int | None = None,
) -> ModelMemory:
    return ModelMemory(
        role=role,
        model=arch.model_id,
        source=arch.source,
        parameters=arch.parameters if parameters is None else parameters,
        embedding_parameters=0 if parameters is not None else min(arch.embedding_parameters, arch.parameters),
        precision=precision,
        weight_bytes=weight_bytes(arch, precision, parameters),
        kv_layers=kv_layers,
        kv_bytes_per_token=math.ceil(kv_layers * arch.kv_elements_per_token_per_layer * kv_bytes),
        kv_bytes_per_token_per_rank=math.ceil(kv_layers_per_rank * _per_rank_kv_elements(arch, tp) * kv_bytes),
        tensor_parallel_size=tp,
    )


def profile_batched_tokens(gpu_memory_gib: float) -> int:
    """vLLM's default max_num_batched_tokens for the OpenAI server (engine/arg_utils.py, by device memory)."""
    if gpu_memory_gib >= 160:
        return 16384
    if gpu_memory_gib >= 70:
        return 8192
    return 2048


def activation_reserve(
    models: list[Architecture], *, tp: int, batched_tokens: int, max_num_seqs: int, speculative_tokens: int
) -> int:
    """Per-rank reserve: fixed non-torch/CUDA-graph memory + the widest forward's activations + sampler logits.

    Activations: `batched_tokens` tokens x (4 hidden-size buffers + 2 MLP halves split over TP) x 2 B, for the
    larger model (target and draft are profiled one after the other, so their peaks do not add). Logits:
    maxNumSeqs x (K + 1) rows x vocab x 4 B (rejection sampling scores K + 1 positions per request).
    """
    activations = 0
    vocab = 0
    for arch in models:
        ffn = arch.ffn_width or round(INLINE_FFN_RATIO * arch.hidden_size)
        per_token = 4 * arch.hidden_size + 2 * math.ceil(ffn / tp)
        activations = max(activations, batched_tokens * per_token * ACTIVATION_BYTES)
        vocab = max(vocab, arch.vocab_size)
    logits = max_num_seqs * (speculative_tokens + 1) * vocab * LOGIT_BYTES
    return round(ACTIVATION_RESERVE_FIXED_GIB * GIB) + activations + logits


def plan_memory(spec: SpeculativeDeploymentSpec) -> MemoryPlan:
    """Plan one replica. Raises catalog.UnknownArchitecture when a model is neither cataloged nor given inline."""
    engine, speculation = spec.engine, spec.speculation
    tp, pp = spec.parallelism.tensor_parallel_size, spec.parallelism.pipeline_parallel_size
    version = VllmVersion.parse(engine.version)

    target_arch = resolve_architecture(spec.target.model, spec.target.architecture, field="spec.target")
    draft_spec = speculation.draft
    draft_arch = (
        resolve_architecture(draft_spec.model, draft_spec.architecture, field="spec.speculation.draft")
        if draft_spec is not None and speculation.method not in (SpeculationMethod.NGRAM, SpeculationMethod.SUFFIX)
        else None
    )

    kv_bytes, findings = _kv_element_bytes(spec)
    target_precision, assumed = _precision(
        spec.target.quantization, spec.target.weight_bits, engine.dtype, "spec.target.weightBits"
    )
    findings += assumed
    target = _model_memory(
        "target",
        target_arch,
        target_precision,
        tp=tp,
        kv_layers=target_arch.num_layers,
        kv_layers_per_rank=math.ceil(target_arch.num_layers / pp),
        kv_bytes=kv_bytes,
    )
    requested_draft_tp, draft_tp = _draft_tensor_parallel(spec, version)
    draft, assumed = _draft_memory(
        spec, target_arch, target_precision, draft_arch, draft_tp=draft_tp, kv_bytes=kv_bytes
    )
    findings += assumed

    plan = _budget(spec, target_arch, draft_arch, target, draft, draft_tp)
    findings += _memory_findings(spec, plan)
    findings += _draft_findings(spec, plan, target_arch, draft_arch, requested_draft_tp, version)
    findings += _parallelism_findings(spec, target_arch, draft_arch, draft_tp)
    findings += _context_findings(spec, target_arch, draft_arch)
    return replace(plan, findings=tuple(findings))


def _kv_element_bytes(spec: SpeculativeDeploymentSpec) -> tuple[float, list[Finding]]:
    """Bytes per KV-cache element; a dtype the planner does not know is sized at the model dtype, with a warning."""
    engine = spec.engine
    kv_bytes = kv_dtype_bytes(engine.kv_cache_dtype, engine.dtype)
    if kv_bytes is not None:
        return kv_bytes, []
    kv_bytes = 4 if engine.dtype in (Dtype.FLOAT32, Dtype.FLOAT) else 2
    unknown = Finding(
        Severity.WARNING,
        "KvCacheDtypeUnknown",
        "spec.engine.kvCacheDtype",
        f"kvCacheDtype {engine.kv_cache_dtype!r} is not one the planner knows; KV sized at {kv_bytes:g} B "
        f"per element (model dtype)",
    )
    return kv_bytes, [unknown]


def _precision(
    quantization: Quantization, bits: int | None, dtype: Dtype, bits_field: str
) -> tuple[Precision, list[Finding]]:
    """The weights' precision, and an Info finding naming `bits_field` when the width is assumed."""
    precision = weight_precision(quantization, bits, dtype)
    if not precision.assumed:
        return precision, []
    assumed = Finding(
        Severity.INFO,
        "WeightBitsAssumed",
        bits_field,
        f"{precision.assumed}; set {bits_field} for an exact plan",
    )
    return precision, [assumed]


def _draft_tensor_parallel(spec: SpeculativeDeploymentSpec, version: VllmVersion) -> tuple[int, int]:
    """The draft TP the spec asks for, and the one the draft runs at.

    vLLM V1 runs EAGLE heads and MTP layers at the target's TP whatever draft TP says; draft models (and V0
    proposers) use the draft TP, which defaults to the target's.
    """
    tp = spec.parallelism.tensor_parallel_size
    draft_spec = spec.speculation.draft
    requested = draft_spec.tensor_parallel_size if draft_spec and draft_spec.tensor_parallel_size else tp
    v1 = version >= V0_ENGINE_REMOVED
    return requested, tp if (v1 and spec.speculation.method is not SpeculationMethod.DRAFT_MODEL) else requested


def _draft_memory(
    spec: SpeculativeDeploymentSpec,
    target_arch: Architecture,
    target_precision: Precision,
    draft_arch: Architecture | None,
    *,
    draft_tp: int,
    kv_bytes: float,
) -> tuple[ModelMemory | None, list[Finding]]:
    """The memory of the draft (model, EAGLE head or MTP layers), None for draftless methods."""
    method, draft_spec = spec.speculation.method, spec.speculation.draft
    if draft_arch is not None and draft_spec is not None:
        draft_precision, assumed = _precision(
            draft_spec.quantization, draft_spec.weight_bits, spec.engine.dtype, "spec.speculation.draft.weightBits"
        )
        draft = _model_memory(
            "head" if method in (SpeculationMethod.EAGLE, SpeculationMethod.EAGLE3) else "draft",
            draft_arch,
            draft_precision,
            tp=draft_tp,
            kv_layers=draft_arch.num_layers,
            kv_layers_per_rank=draft_arch.num_layers,
            kv_bytes=kv_bytes,
        )
        return draft, assumed
    if method is SpeculationMethod.MTP and target_arch.mtp_layers:
        mtp = _model_memory(
            "mtp",
            target_arch,
            target_precision,  # vLLM quantizes MTP layers like the target unless told otherwise
            tp=spec.parallelism.tensor_parallel_size,
            kv_layers=target_arch.mtp_layers,
            kv_layers_per_rank=target_arch.mtp_layers,
            kv_bytes=kv_bytes,
            parameters=target_arch.mtp_parameters,
        )
        return mtp, []
    return None, []


def _budget(
    spec: SpeculativeDeploymentSpec,
    target_arch: Architecture,
    draft_arch: Architecture | None,
    target: ModelMemory,
    draft: ModelMemory | None,
    draft_tp: int,
) -> MemoryPlan:
    """The KV budget of the most loaded rank, and the plan without findings."""
    engine = spec.engine
    tp, pp = spec.parallelism.tensor_parallel_size, spec.parallelism.pipeline_parallel_size
    ranks = tp * pp
    gpu_bytes = max(1, round(spec.resources.gpu_memory_gi_b * GIB))
    models = [target_arch] + ([draft_arch] if draft_arch is not None else [])
    reserve = activation_reserve(
        models,
        tp=tp,
        batched_tokens=profile_batched_tokens(spec.resources.gpu_memory_gi_b),
        max_num_seqs=engine.max_num_seqs,
        speculative_tokens=spec.speculation.num_speculative_tokens or 1,
    )
    # The most loaded rank holds its share of the target and, in the last pipeline stage, its share of the draft.
    draft_bytes_on_rank = math.ceil(draft.weight_bytes / draft_tp) if draft else 0
    weights_on_rank = math.ceil(target.weight_bytes / ranks) + draft_bytes_on_rank
    usable_per_rank = int(gpu_bytes * engine.gpu_memory_utilization)
    kv_budget_per_rank = usable_per_rank - weights_on_rank - reserve
    kv_per_token_on_rank = target.kv_bytes_per_token_per_rank + (draft.kv_bytes_per_token_per_rank if draft else 0)
    kv_tokens = max(0, kv_budget_per_rank) // max(1, kv_per_token_on_rank)
    return MemoryPlan(
        gpus_per_replica=spec.resources.gpus_per_replica,
        ranks=ranks,
        gpu_memory_bytes=gpu_bytes,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_model_len=engine.max_model_len,
        target=target,
        draft=draft,
        reserve_bytes_per_rank=reserve,
        kv_budget_bytes_per_rank=kv_budget_per_rank,
        kv_tokens=kv_tokens,
        concurrent_sequences=kv_tokens // engine.max_model_len,
    )


# ----------------------------------------------------------------------------------------------- the verdicts


def _memory_findings(spec: SpeculativeDeploymentSpec, plan: MemoryPlan) -> list[Finding]:
    """Whether the KV cache holds a sequence (and how many), how much of the VRAM each model takes, idle GPUs."""
    return [*_fit_findings(spec, plan), *_share_findings(plan), *_rank_findings(plan)]


def _fit_findings(spec: SpeculativeDeploymentSpec, plan: MemoryPlan) -> list[Finding]:
    """At most one verdict on the KV cache: none left, less than one sequence, or fewer sequences than maxNumSeqs."""
    engine, resources = spec.engine, spec.resources
    layout = (
        f"{plan.ranks} x {resources.gpu_memory_gi_b:g} GiB x {engine.gpu_memory_utilization:g}"
        if plan.ranks == plan.gpus_per_replica
        else f"{plan.ranks} of {plan.gpus_per_replica} GPUs x {resources.gpu_memory_gi_b:g} GiB x "
        f"{engine.gpu_memory_utilization:g}"
    )
    if plan.kv_budget_bytes_per_rank <= 0:
        shortfall = -plan.kv_budget_bytes_per_rank * plan.ranks
        return [
            Finding(
                Severity.ERROR,
                "DoesNotFit",
                "spec.resources.gpusPerReplica",
                f"weights {_fmt(plan.weight_bytes)} + reserve {_fmt(plan.reserve_bytes)} exceed usable memory "
                f"{_fmt(plan.usable_bytes)} ({layout}) by {_fmt(shortfall)}, leaving nothing for the KV cache; "
                f"add GPUs, quantize (spec.target.quantization) or use a smaller model",
            )
        ]
    if plan.kv_tokens < engine.max_model_len:
        return [
            Finding(
                Severity.ERROR,
                "DoesNotFit",
                "spec.engine.maxModelLen",
                f"the KV cache holds {plan.kv_tokens} tokens ({_fmt(plan.kv_cache_bytes)} at "
                f"{plan.kv_bytes_per_token} B per token), fewer than one sequence of maxModelLen "
                f"{engine.max_model_len}; lower maxModelLen, use kvCacheDtype fp8 or add GPUs",
            )
        ]
    if plan.concurrent_sequences < engine.max_num_seqs:
        return [
            Finding(
                Severity.INFO,
                "KvLimitsConcurrency",
                "spec.engine.maxNumSeqs",
                f"{plan.kv_tokens} KV tokens hold {plan.concurrent_sequences} sequences of maxModelLen "
                f"{engine.max_model_len}, fewer than maxNumSeqs {engine.max_num_seqs}; shorter requests share the "
                f"rest, long ones queue or are preempted",
            )
        ]
    return []


def _share_findings(plan: MemoryPlan) -> list[Finding]:
    """A draft or a target whose weights take more of the replica's VRAM than advised."""
    found: list[Finding] = []
    if plan.draft is not None and plan.draft_share_of_vram > DRAFT_SHARE_WARN:
        what = "MTP layers" if plan.draft.role == "mtp" else "draft"
        found.append(
            Finding(
                Severity.WARNING,
                "DraftShareHigh",
                "spec.speculation.method" if plan.draft.role == "mtp" else "spec.speculation.draft.model",
                f"the {what} takes {plan.draft_share_of_vram:.1%} of the replica's {_fmt(plan.total_vram_bytes)} "
                f"({_fmt(plan.draft_weight_bytes)}), above {DRAFT_SHARE_WARN:.0%}; that memory would otherwise "
                f"hold KV cache",
            )
        )
    if plan.target_share_of_vram > TARGET_SHARE_WARN:
        found.append(
            Finding(
                Severity.WARNING,
                "TargetShareHigh",
                "spec.target.quantization",
                f"the target's weights take {plan.target_share_of_vram:.1%} of the replica's "
                f"{_fmt(plan.total_vram_bytes)} ({_fmt(plan.target.weight_bytes)} at {plan.target.precision.label}), "
                f"above {TARGET_SHARE_WARN:.0%}: little room for KV cache and batching",
            )
        )
    return found


def _rank_findings(plan: MemoryPlan) -> list[Finding]:
    """TP x PP ranks against the replica's GPUs: more is an error, fewer leaves GPUs idle."""
    if plan.ranks > plan.gpus_per_replica:
        return [
            Finding(
                Severity.ERROR,
                "ParallelismExceedsGpus",
                "spec.parallelism.tensorParallelSize",
                f"tensorParallelSize x pipelineParallelSize = {plan.ranks} needs more GPUs than "
                f"spec.resources.gpusPerReplica {plan.gpus_per_replica}",
            )
        ]
    if plan.ranks < plan.gpus_per_replica:
        return [
            Finding(
                Severity.WARNING,
                "GpusIdle",
                "spec.resources.gpusPerReplica",
                f"vLLM uses tensorParallelSize x pipelineParallelSize = {plan.ranks} GPUs; "
                f"{plan.gpus_per_replica - plan.ranks} of the {plan.gpus_per_replica} requested stay idle",
            )
        ]
    return []


def _draft_findings(
    spec: SpeculativeDeploymentSpec,
    plan: MemoryPlan,
    target: Architecture,
    draft: Architecture | None,
    requested_draft_tp: int,
    version: VllmVersion,
) -> list[Finding]:
    """Whether the draft (model, EAGLE head or MTP layers) can serve this target, and at which TP."""
    method = spec.speculation.method
    tp = spec.parallelism.tensor_parallel_size
    found = _mtp_findings(target) if method is SpeculationMethod.MTP else []
    draft_spec = spec.speculation.draft
    if draft is None or draft_spec is None:
        return found
    family_field = (
        "spec.speculation.draft.architecture.family" if draft_spec.architecture else "spec.speculation.draft.model"
    )
    if draft.family != target.family:
        found.append(
            Finding(
                Severity.ERROR,
                "TokenizerMismatch",
                family_field,
                f"draft {draft.model_id} uses the {draft.family!r} tokenizer, the target {target.model_id} the "
                f"{target.family!r} one; speculation needs the same tokenizer",
            )
        )
    if method is SpeculationMethod.DRAFT_MODEL:
        found += _draft_model_findings(plan, target, draft)
        if version >= DRAFT_MODEL_V1 and requested_draft_tp != tp:
            found.append(
                Finding(
                    Severity.WARNING,
                    "DraftTensorParallel",
                    "spec.speculation.draft.tensorParallelSize",
                    f"draft TP {requested_draft_tp} differs from the target's {tp}; vLLM's V1 draft-model proposer "
                    f"requires them equal (v1/spec_decode/draft_model.py, checked in vLLM 0.32)",
                )
            )
    if method in (SpeculationMethod.EAGLE, SpeculationMethod.EAGLE3):
        found += _eagle_findings(method, target, draft)
    if requested_draft_tp not in (1, tp):
        found.append(
            Finding(
                Severity.ERROR,
                "DraftTensorParallel",
                "spec.speculation.draft.tensorParallelSize",
                f"draft TP {requested_draft_tp} must be 1 or the target's {tp} (vLLM accepts no other value)",
            )
        )
    return found


def _mtp_findings(target: Architecture) -> list[Finding]:
    """MTP needs the target's own next-token layers; inline numbers cannot size them."""
    if target.mtp_layers == 0:
        return [
            Finding(
                Severity.ERROR,
                "MtpNotAvailable",
                "spec.speculation.method",
                f"{target.model_id} has no MTP layers (num_nextn_predict_layers is 0 in its config); "
                f"use eagle3, draft_model or ngram",
            )
        ]
    if target.mtp_layers is None:
        return [
            Finding(
                Severity.INFO,
                "MtpWeightsUnknown",
                "spec.target.architecture",
                "inline numbers do not describe the MTP module; its weights and KV are not in this plan",
            )
        ]
    return []


def _draft_model_findings(plan: MemoryPlan, target: Architecture, draft: Architecture) -> list[Finding]:
    """A standalone draft model: same vocabulary, not an EAGLE head, of an advised size."""
    found: list[Finding] = []
    if draft.vocab_size != target.vocab_size:
        found.append(
            Finding(
                Severity.ERROR,
                "VocabSizeMismatch",
                "spec.speculation.draft.model",
                f"draft vocab_size {draft.vocab_size} differs from the target's {target.vocab_size}; vLLM "
                f"rejects draft models with another vocabulary size (use_heterogeneous_vocab aside)",
            )
        )
    if draft.is_draft_head:
        found.append(
            Finding(
                Severity.ERROR,
                "DraftIsEagleHead",
                "spec.speculation.method",
                f"{draft.model_id} is an EAGLE-3 head, not a standalone model; use method eagle3",
            )
        )
    ratio = plan.draft_to_target_ratio
    low, high = DRAFT_RATIO_ADVISED
    if ratio is not None and not low <= ratio <= high:
        found.append(
            Finding(
                Severity.INFO,
                "DraftRatioOutOfRange",
                "spec.speculation.draft.model",
                f"draft:target parameters are 1:{1 / ratio:.1f} ({draft.parameters / 1e9:.2f}B : "
                f"{target.parameters / 1e9:.2f}B); 1:8 to 1:12 is the usual sweet spot between acceptance "
                f"and draft cost",
            )
        )
    return found


def _eagle_findings(method: SpeculationMethod, target: Architecture, draft: Architecture) -> list[Finding]:
    """An EAGLE head: reads this target's hidden states, ideally was trained for it, and is of the method's kind."""
    found: list[Finding] = []
    expected_hidden = draft.eagle3.target_hidden_size if draft.eagle3 is not None else draft.hidden_size
    if expected_hidden != target.hidden_size:
        found.append(
            Finding(
                Severity.ERROR,
                "DraftHiddenSizeMismatch",
                "spec.speculation.draft.model",
                f"{draft.model_id} reads target hidden states of size {expected_hidden}, the target "
                f"{target.model_id} has {target.hidden_size}; pick the head trained for this target",
            )
        )
    elif draft.eagle3 is not None and target.entry is not None:
        trained = {t.lower() for t in draft.eagle3.trained_for}
        if target.entry.hf_id.lower() not in trained:
            found.append(
                Finding(
                    Severity.INFO,
                    "DraftHeadTrainedForOtherTarget",
                    "spec.speculation.draft.model",
                    f"{draft.model_id} was trained for {', '.join(draft.eagle3.trained_for)}; acceptance on "
                    f"{target.model_id} may be lower",
                )
            )
    if method is SpeculationMethod.EAGLE and draft.is_draft_head:
        found.append(
            Finding(
                Severity.WARNING,
                "DraftHeadMethodMismatch",
                "spec.speculation.method",
                f"{draft.model_id} is an EAGLE-3 head; use method eagle3",
            )
        )
    if draft.entry is not None and not draft.is_draft_head:
        found.append(
            Finding(
                Severity.ERROR,
                "DraftIsNotEagleHead",
                "spec.speculation.draft.model",
                f"{draft.model_id} is a standalone model, not an EAGLE head; use method draft_model",
            )
        )
    return found


def _parallelism_findings(
    spec: SpeculativeDeploymentSpec, target: Architecture, draft: Architecture | None, draft_tp: int
) -> list[Finding]:
    found: list[Finding] = []
    tp, pp = spec.parallelism.tensor_parallel_size, spec.parallelism.pipeline_parallel_size
    checks = [(target, tp, "spec.parallelism.tensorParallelSize", "target")]
    if draft is not None:
        draft_field = (
            "spec.speculation.draft.tensorParallelSize"
            if spec.speculation.method is SpeculationMethod.DRAFT_MODEL
            else "spec.parallelism.tensorParallelSize"
        )
        checks.append((draft, draft_tp, draft_field, "draft"))
    for arch, size, where, role in checks:
        heads = arch.num_attention_heads
        if heads is not None and heads % size:
            found.append(
                Finding(
                    Severity.ERROR,
                    "TensorParallelHeads",
                    where,
                    f"the {role} {arch.model_id} has {heads} attention heads, not divisible by TP {size}; vLLM "
                    f"requires heads divisible by tensor_parallel_size",
                )
            )
        if arch.mla_latent_dim is not None:
            continue
        kv = arch.num_kv_heads
        if kv % size and size % kv:
            found.append(
                Finding(
                    Severity.ERROR,
                    "TensorParallelKvHeads",
                    where,
                    f"the {role} {arch.model_id} has {kv} KV heads; TP {size} must divide them or be a multiple of "
                    f"them",
                )
            )
        elif size > kv:
            found.append(
                Finding(
                    Severity.INFO,
                    "KvHeadsReplicated",
                    where,
                    f"TP {size} exceeds the {role}'s {kv} KV heads: each rank keeps a replica, so KV capacity "
                    f"stops growing with TP",
                )
            )
    if pp > target.num_layers:
        found.append(
            Finding(
                Severity.ERROR,
                "PipelineExceedsLayers",
                "spec.parallelism.pipelineParallelSize",
                f"pipelineParallelSize {pp} exceeds the target's {target.num_layers} layers",
            )
        )
    return found


def _context_findings(
    spec: SpeculativeDeploymentSpec, target: Architecture, draft: Architecture | None
) -> list[Finding]:
    found: list[Finding] = []
    max_len = spec.engine.max_model_len
    if max_len > target.max_position_embeddings:
        found.append(
            Finding(
                Severity.ERROR,
                "MaxModelLenAboveModelLimit",
                "spec.engine.maxModelLen",
                f"maxModelLen {max_len} exceeds {target.model_id}'s max_position_embeddings "
                f"{target.max_position_embeddings}; vLLM refuses it",
            )
        )
    if draft is None or draft.max_position_embeddings >= max_len:
        return found
    if spec.speculation.method is SpeculationMethod.DRAFT_MODEL:
        found.append(
            Finding(
                Severity.WARNING,
                "DraftContextShorter",
                "spec.engine.maxModelLen",
                f"the draft {draft.model_id} supports {draft.max_position_embeddings} positions, less than "
                f"maxModelLen {max_len}; vLLM caps the draft there, so longer sequences are not sped up",
            )
        )
    else:
        found.append(
            Finding(
                Severity.INFO,
                "DraftHeadContextShorter",
                "spec.engine.maxModelLen",
                f"the head {draft.model_id} was configured for {draft.max_position_embeddings} positions "
                f"(vLLM stretches it to maxModelLen {max_len}); acceptance may fall on longer contexts",
            )
        )
    return found


# --------------------------------------------------------------------------------------------------- output


def format_table(plan: MemoryPlan) -> str:
    """`specpilot plan -o table`: one row per figure, sizes in GiB and GB side by side."""
    rows: list[tuple[str, str, str, str]] = []

    def size(label: str, n: float, note: str = "") -> None:
        rows.append((label, f"{n / GIB:.2f} GiB", f"{n / GB:.2f} GB", note))

    def value(label: str, text: str, note: str = "") -> None:
        rows.append((label, text, "", note))

    t = plan.target
    size("VRAM per replica", plan.total_vram_bytes, f"{plan.gpus_per_replica} x {plan.gpu_memory_bytes / GIB:g} GiB")
    ranks = f"{plan.ranks} rank{'s' if plan.ranks != 1 else ''}"
    size("usable", plan.usable_bytes, f"{ranks} x utilization {plan.gpu_memory_utilization:g}")
    size("target weights", t.weight_bytes, f"{t.model}: {t.parameters / 1e9:.2f}B params, {t.precision.label}")
    if plan.draft is not None:
        d = plan.draft
        label = "MTP weights" if d.role == "mtp" else "draft weights"
        size(label, d.weight_bytes, f"{d.model}: {d.parameters / 1e9:.2f}B params, {d.precision.label}")
    size("weights total", plan.weight_bytes)
    size("left after weights", plan.headroom_before_reserve_bytes, "before utilization and reserve")
    size("reserve", plan.reserve_bytes, f"{plan.reserve_bytes_per_rank / GIB:.2f} GiB per rank")
    size("KV cache", plan.kv_cache_bytes, "no room" if plan.kv_budget_bytes_per_rank <= 0 else "")
    kv_note = f"target {t.kv_bytes_per_token}"
    if plan.draft is not None:
        kv_note += f" + draft {plan.draft.kv_bytes_per_token}"
    value("KV bytes per token", f"{plan.kv_bytes_per_token}", kv_note)
    value("KV tokens", f"{plan.kv_tokens}")
    value("sequences at maxModelLen", f"{plan.concurrent_sequences}", f"maxModelLen {plan.max_model_len}")
    value("target share of VRAM", f"{plan.target_share_of_vram:.1%}", f"warn above {TARGET_SHARE_WARN:.0%}")
    if plan.draft is not None:
        value("draft share of VRAM", f"{plan.draft_share_of_vram:.1%}", f"warn above {DRAFT_SHARE_WARN:.0%}")
    ratio = plan.draft_to_target_ratio
    if ratio is not None:
        value("draft:target parameters", f"1:{1 / ratio:.1f}", "advised 1:8 to 1:12 for draft models")
    value("fits", "yes" if plan.fits else "NO")

    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{label:<{widths[0]}}  {a:>{widths[1]}}  {b:>{widths[2]}}  {note}".rstrip() for label, a, b, note in rows]
    for finding in plan.findings:
        lines.append(f"{finding.severity:<7} {finding.code}: {finding.field}: {finding.message}")
    return "\n".join(lines) + "\n"


__all__ = [
    "GB",
    "GIB",
    "Finding",
    "MemoryPlan",
    "ModelMemory",
    "Precision",
    "Severity",
    "activation_reserve",
    "format_table",
    "kv_dtype_bytes",
    "plan_memory",
    "profile_batched_tokens",
    "weight_bytes",
    "weight_precision",
]
