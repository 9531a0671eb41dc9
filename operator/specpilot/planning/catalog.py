"""Known model architectures, with the numbers of their published config.json, for the memory planner and tests.

Each entry copies the published config.json of one Hugging Face repository (and its sibling checkpoints: base and
Instruct variants share an architecture). Parameter counts are *computed* from those numbers by `count_parameters`,
which the unit tests hold within a few percent of the published totals, so a typo in a width shows up as a wrong
parameter count. Where a number is not from the published config it is listed in `CatalogEntry.estimated`.

Models that are not listed here can still be planned: users give the numbers inline (`spec.target.architecture`,
`spec.speculation.draft.architecture`), and inline numbers always win over the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from specpilot.api.v1alpha1 import ModelArchitecture


class Kind(StrEnum):
    DENSE = "dense"
    MOE = "moe"
    EAGLE3_HEAD = "eagle3-head"


@dataclass(frozen=True)
class MoeShape:
    """Mixture-of-experts widths; `first_dense_layers` leading layers use the dense MLP (DeepSeek)."""

    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_experts: int = 0
    first_dense_layers: int = 0


@dataclass(frozen=True)
class MlaShape:
    """DeepSeek multi-head latent attention; its KV cache holds one latent of kv_lora_rank + qk_rope_head_dim."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class Eagle3Shape:
    """An EAGLE-3 head: one decoder layer fed 3 target hidden states, predicting a reduced draft vocabulary."""

    draft_vocab_size: int
    target_hidden_size: int
    trained_for: tuple[str, ...]


@dataclass(frozen=True)
class CatalogEntry:
    hf_id: str
    aliases: tuple[str, ...]
    family: str  # tokenizer family: a draft must share it with the target
    kind: Kind
    architectures: tuple[str, ...]
    model_type: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope_theta: float
    rms_norm_eps: float
    bos_token_id: int
    eos_token_id: int | tuple[int, ...]
    torch_dtype: str = "bfloat16"
    rope_scaling: Mapping[str, Any] | None = None
    attention_bias: bool = False  # q/k/v biases (Qwen2)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    moe: MoeShape | None = None
    mla: MlaShape | None = None
    eagle3: Eagle3Shape | None = None
    mtp_layers: int = 0  # num_nextn_predict_layers; 0 means the checkpoint has no MTP module
    published_parameters_b: float | None = None
    published_active_parameters_b: float | None = None
    checkpoint_quantization: str | None = None  # quantization of the published weights (DeepSeek-V3 ships FP8)
    extra_config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({})
    )  # further published config.json keys, verbatim
    source: str = ""
    estimated: tuple[str, ...] = ()  # fields that are not from the published config

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """K and V per head for ordinary attention; one shared latent for MLA."""
        if self.mla is not None:
            return self.mla.latent_dim
        return 2 * self.num_key_value_heads * self.head_dim


# ------------------------------------------------------------------------------------------- parameter counts


def _attention_parameters(e: CatalogEntry, *, input_size: int | None = None) -> int:
    hidden = e.hidden_size
    if e.mla is not None:
        m = e.mla
        heads = e.num_attention_heads
        return (
            hidden * m.q_lora_rank
            + m.q_lora_rank
            + m.q_lora_rank * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            + hidden * (m.kv_lora_rank + m.qk_rope_head_dim)
            + m.kv_lora_rank
            + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            + heads * m.v_head_dim * hidden
        )
    q_width = e.num_attention_heads * e.head_dim
    kv_width = e.num_key_value_heads * e.head_dim
    qkv_input = input_size if input_size is not None else hidden
    total = qkv_input * (q_width + 2 * kv_width) + q_width * hidden
    if e.attention_bias:
        total += q_width + 2 * kv_width
    if e.qk_norm:
        total += 2 * e.head_dim
    return total


def _dense_mlp(hidden: int, intermediate: int) -> int:
    return 3 * hidden * intermediate  # gate, up, down


def _moe_mlp(e: CatalogEntry, moe: MoeShape, *, active: bool) -> int:
    experts = moe.experts_per_token if active else moe.num_experts
    one_expert = _dense_mlp(e.hidden_size, moe.moe_intermediate_size)
    router = e.hidden_size * moe.num_experts
    correction_bias = moe.num_experts if e.mla is not None else 0  # DeepSeek's e_score_correction_bias
    return experts * one_expert + moe.shared_experts * one_expert + router + correction_bias


def _decoder_layer(e: CatalogEntry, index: int, *, active: bool) -> int:
    norms = 2 * e.hidden_size
    if e.moe is not None and index >= e.moe.first_dense_layers:
        mlp = _moe_mlp(e, e.moe, active=active)
    else:
        mlp = _dense_mlp(e.hidden_size, e.intermediate_size)
    return _attention_parameters(e) + mlp + norms


def embedding_parameters(e: CatalogEntry) -> int:
    """Input embedding plus LM head; these stay 16-bit in quantized checkpoints, so the planner prices them apart."""
    if e.eagle3 is not None:
        return e.hidden_size * e.eagle3.draft_vocab_size  # its own lm_head; the input embedding is the target's
    return e.vocab_size * e.hidden_size * (1 if e.tie_word_embeddings else 2)


def _eagle3_parameters(e: CatalogEntry, shape: Eagle3Shape) -> int:
    fc = 3 * shape.target_hidden_size * e.hidden_size
    layer = _attention_parameters(e, input_size=2 * e.hidden_size) + _dense_mlp(e.hidden_size, e.intermediate_size)
    norms = 4 * e.hidden_size  # input, hidden, post-attention and final RMSNorm
    return fc + layer + norms + embedding_parameters(e)


def count_parameters(e: CatalogEntry) -> int:
    """Parameters held in GPU memory for this checkpoint, MTP module excluded (see `mtp_parameters`)."""
    if e.eagle3 is not None:
        return _eagle3_parameters(e, e.eagle3)
    layers = sum(_decoder_layer(e, i, active=False) for i in range(e.num_hidden_layers))
    return embedding_parameters(e) + layers + e.hidden_size  # + final norm


def count_active_parameters(e: CatalogEntry) -> int:
    """Parameters used per token: all of them for dense models, routed top-k plus shared experts for MoE."""
    if e.moe is None:
        return count_parameters(e)
    layers = sum(_decoder_layer(e, i, active=True) for i in range(e.num_hidden_layers))
    return embedding_parameters(e) + layers + e.hidden_size


def mtp_parameters(e: CatalogEntry) -> int:
    """Extra weights vLLM loads for method mtp: per MTP layer two norms, eh_proj, one decoder layer and a head norm.

    The MTP module's embedding and LM head are the target's (vLLM shares them), so they are not counted again;
    DeepSeek's "685B" checkpoint total counts them, which is why it exceeds 671B + this figure.
    """
    if e.mtp_layers == 0:
        return 0
    per_layer = (
        3 * e.hidden_size + 2 * e.hidden_size * e.hidden_size + _decoder_layer(e, e.num_hidden_layers, active=False)
    )
    return e.mtp_layers * per_layer


# ------------------------------------------------------------------------------------------------ the catalog

_LLAMA31_ROPE = MappingProxyType(
    {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    }
)
_LLAMA32_ROPE = MappingProxyType({**_LLAMA31_ROPE, "factor": 32.0})
_LLAMA_EOS = (128001, 128008, 128009)
_QWEN_NO_SLIDING = MappingProxyType({"use_sliding_window": False, "sliding_window": None})


def _llama(
    hf_id: str,
    aliases: tuple[str, ...],
    *,
    layers: int,
    heads: int,
    head_dim: int,
    hidden: int,
    intermediate: int,
    tie: bool,
    rope: Mapping[str, Any],
    published: float,
    source: str,
) -> CatalogEntry:
    return CatalogEntry(
        hf_id=hf_id,
        aliases=aliases,
        family="llama3",
        kind=Kind.DENSE,
        architectures=("LlamaForCausalLM",),
        model_type="llama",
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=128256,
        max_position_embeddings=131072,
        tie_word_embeddings=tie,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        bos_token_id=128000,
        eos_token_id=_LLAMA_EOS,
        rope_scaling=rope,
        published_parameters_b=published,
        source=source,
    )


def _qwen2(
    hf_id: str,
    aliases: tuple[str, ...],
    *,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    intermediate: int,
    vocab: int,
    tie: bool,
    published: float,
    source: str,
) -> CatalogEntry:
    return CatalogEntry(
        hf_id=hf_id,
        aliases=aliases,
        family="qwen2.5",
        kind=Kind.DENSE,
        architectures=("Qwen2ForCausalLM",),
        model_type="qwen2",
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=32768,
        tie_word_embeddings=tie,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=151643,
        eos_token_id=151645,
        attention_bias=True,
        published_parameters_b=published,
        extra_config=_QWEN_NO_SLIDING,
        source=source,
    )


def _qwen3(
    hf_id: str,
    aliases: tuple[str, ...],
    *,
    layers: int,
    heads: int,
    hidden: int,
    intermediate: int,
    tie: bool,
    published: float,
    source: str,
) -> CatalogEntry:
    return CatalogEntry(
        hf_id=hf_id,
        aliases=aliases,
        family="qwen3",
        kind=Kind.DENSE,
        architectures=("Qwen3ForCausalLM",),
        model_type="qwen3",
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=151936,
        max_position_embeddings=40960,
        tie_word_embeddings=tie,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=151643,
        eos_token_id=151645,
        qk_norm=True,
        published_parameters_b=published,
        extra_config=_QWEN_NO_SLIDING,
        source=source,
    )


_LLAMA_SOURCE = "config.json of {} on Hugging Face; parameter total from its model card"

CATALOG: tuple[CatalogEntry, ...] = (
    _llama(
        "meta-llama/Llama-3.2-1B-Instruct",
        ("meta-llama/Llama-3.2-1B", "llama-3.2-1b", "llama3.2-1b"),
        layers=16,
        heads=32,
        head_dim=64,
        hidden=2048,
        intermediate=8192,
        tie=True,
        rope=_LLAMA32_ROPE,
        published=1.23,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.2-1B-Instruct"),
    ),
    _llama(
        "meta-llama/Llama-3.2-3B-Instruct",
        ("meta-llama/Llama-3.2-3B", "llama-3.2-3b", "llama3.2-3b"),
        layers=28,
        heads=24,
        head_dim=128,
        hidden=3072,
        intermediate=8192,
        tie=True,
        rope=_LLAMA32_ROPE,
        published=3.21,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.2-3B-Instruct"),
    ),
    _llama(
        "meta-llama/Llama-3.1-8B-Instruct",
        (
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3.1-8B",
            "llama-3.1-8b",
            "llama3.1-8b",
        ),
        layers=32,
        heads=32,
        head_dim=128,
        hidden=4096,
        intermediate=14336,
        tie=False,
        rope=_LLAMA31_ROPE,
        published=8.03,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.1-8B-Instruct"),
    ),
    _llama(
        "meta-llama/Llama-3.1-70B-Instruct",
        (
            "meta-llama/Llama-3.1-70B",
            "meta-llama/Meta-Llama-3.1-70B-Instruct",
            "meta-llama/Meta-Llama-3.1-70B",
            "llama-3.1-70b",
            "llama3.1-70b",
        ),
        layers=80,
        heads=64,
        head_dim=128,
        hidden=8192,
        intermediate=28672,
        tie=False,
        rope=_LLAMA31_ROPE,
        published=70.6,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.1-70B-Instruct"),
    ),
    _llama(
        "meta-llama/Llama-3.3-70B-Instruct",
        ("llama-3.3-70b", "llama3.3-70b"),
        layers=80,
        heads=64,
        head_dim=128,
        hidden=8192,
        intermediate=28672,
        tie=False,
        rope=_LLAMA31_ROPE,
        published=70.6,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.3-70B-Instruct"),
    ),
    _llama(
        "meta-llama/Llama-3.1-405B-Instruct",
        (
            "meta-llama/Llama-3.1-405B",
            "meta-llama/Meta-Llama-3.1-405B-Instruct",
            "meta-llama/Meta-Llama-3.1-405B",
            "llama-3.1-405b",
            "llama3.1-405b",
        ),
        layers=126,
        heads=128,
        head_dim=128,
        hidden=16384,
        intermediate=53248,
        tie=False,
        rope=_LLAMA31_ROPE,
        published=405.9,
        source=_LLAMA_SOURCE.format("meta-llama/Llama-3.1-405B-Instruct"),
    ),
    _qwen2(
        "Qwen/Qwen2.5-0.5B-Instruct",
        ("Qwen/Qwen2.5-0.5B", "qwen2.5-0.5b"),
        layers=24,
        heads=14,
        kv_heads=2,
        head_dim=64,
        hidden=896,
        intermediate=4864,
        vocab=151936,
        tie=True,
        published=0.49,
        source="config.json of Qwen/Qwen2.5-0.5B-Instruct; 0.49B from its model card",
    ),
    _qwen2(
        "Qwen/Qwen2.5-7B-Instruct",
        ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),
        layers=28,
        heads=28,
        kv_heads=4,
        head_dim=128,
        hidden=3584,
        intermediate=18944,
        vocab=152064,
        tie=False,
        published=7.61,
        source="config.json of Qwen/Qwen2.5-7B-Instruct; 7.61B from its model card",
    ),
    _qwen2(
        "Qwen/Qwen2.5-72B-Instruct",
        ("Qwen/Qwen2.5-72B", "qwen2.5-72b"),
        layers=80,
        heads=64,
        kv_heads=8,
        head_dim=128,
        hidden=8192,
        intermediate=29568,
        vocab=152064,
        tie=False,
        published=72.7,
        source="config.json of Qwen/Qwen2.5-72B-Instruct; 72.7B from its model card",
    ),
    _qwen3(
        "Qwen/Qwen3-0.6B",
        ("Qwen/Qwen3-0.6B-Base", "qwen3-0.6b"),
        layers=28,
        heads=16,
        hidden=1024,
        intermediate=3072,
        tie=True,
        published=0.6,
        source="config.json of Qwen/Qwen3-0.6B; 0.6B (0.44B non-embedding) from its model card",
    ),
    _qwen3(
        "Qwen/Qwen3-8B",
        ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
        layers=36,
        heads=32,
        hidden=4096,
        intermediate=12288,
        tie=False,
        published=8.2,
        source="config.json of Qwen/Qwen3-8B; 8.2B (6.95B non-embedding) from its model card",
    ),
    _qwen3(
        "Qwen/Qwen3-32B",
        ("qwen3-32b",),
        layers=64,
        heads=64,
        hidden=5120,
        intermediate=25600,
        tie=False,
        published=32.8,
        source="config.json of Qwen/Qwen3-32B; 32.8B (31.2B non-embedding) from its model card",
    ),
    CatalogEntry(
        hf_id="mistralai/Mistral-7B-Instruct-v0.3",
        aliases=("mistralai/Mistral-7B-v0.3", "mistral-7b-v0.3"),
        family="mistral-v3",
        kind=Kind.DENSE,
        architectures=("MistralForCausalLM",),
        model_type="mistral",
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=32768,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        published_parameters_b=7.25,
        extra_config=MappingProxyType({"sliding_window": None}),
        source="config.json of mistralai/Mistral-7B-Instruct-v0.3; 7.25B as listed on Hugging Face",
    ),
    CatalogEntry(
        hf_id="mistralai/Mixtral-8x7B-Instruct-v0.1",
        aliases=("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        family="mistral-v1",
        kind=Kind.MOE,
        architectures=("MixtralForCausalLM",),
        model_type="mixtral",
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=32000,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        moe=MoeShape(num_experts=8, experts_per_token=2, moe_intermediate_size=14336),
        published_parameters_b=46.7,
        published_active_parameters_b=12.9,
        extra_config=MappingProxyType({"sliding_window": None, "router_aux_loss_coef": 0.02}),
        source="config.json of mistralai/Mixtral-8x7B-Instruct-v0.1 (num_local_experts 8, top-2); 46.7B total, "
        "12.9B active from Mistral's announcement",
        estimated=("head_dim (not in the published config; hidden_size / num_attention_heads)",),
    ),
    CatalogEntry(
        hf_id="Qwen/Qwen3-30B-A3B",
        aliases=("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
        family="qwen3",
        kind=Kind.MOE,
        architectures=("Qwen3MoeForCausalLM",),
        model_type="qwen3_moe",
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        hidden_size=2048,
        intermediate_size=6144,
        vocab_size=151936,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=151643,
        eos_token_id=151645,
        qk_norm=True,
        moe=MoeShape(num_experts=128, experts_per_token=8, moe_intermediate_size=768),
        published_parameters_b=30.5,
        published_active_parameters_b=3.3,
        extra_config=MappingProxyType(
            {
                **_QWEN_NO_SLIDING,
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "norm_topk_prob": True,
                "router_aux_loss_coef": 0.001,
            }
        ),
        source="config.json of Qwen/Qwen3-30B-A3B; 30.5B total, 3.3B active from its model card",
    ),
    CatalogEntry(
        hf_id="deepseek-ai/DeepSeek-V3",
        aliases=(
            "deepseek-ai/DeepSeek-V3-Base",
            "deepseek-ai/DeepSeek-V3-0324",
            "deepseek-ai/DeepSeek-R1",
            "deepseek-ai/DeepSeek-R1-0528",
            "deepseek-v3",
            "deepseek-r1",
        ),
        family="deepseek-v3",
        kind=Kind.MOE,
        architectures=("DeepseekV3ForCausalLM",),
        model_type="deepseek_v3",
        num_hidden_layers=61,
        num_attention_heads=128,
        num_key_value_heads=128,
        head_dim=192,  # qk_nope_head_dim + qk_rope_head_dim, what vLLM reports as head size
        hidden_size=7168,
        intermediate_size=18432,
        vocab_size=129280,
        max_position_embeddings=163840,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        bos_token_id=0,
        eos_token_id=1,
        rope_scaling=MappingProxyType(
            {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            }
        ),
        moe=MoeShape(
            num_experts=256, experts_per_token=8, moe_intermediate_size=2048, shared_experts=1, first_dense_layers=3
        ),
        mla=MlaShape(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        mtp_layers=1,
        published_parameters_b=671.0,
        published_active_parameters_b=37.0,
        checkpoint_quantization="fp8",
        extra_config=MappingProxyType(
            {
                "ep_size": 1,
                "moe_layer_freq": 1,
                "n_group": 8,
                "topk_group": 4,
                "topk_method": "noaux_tc",
                "scoring_func": "sigmoid",
                "routed_scaling_factor": 2.5,
                "norm_topk_prob": True,
                "seq_aux": True,
                "quantization_config": {
                    "activation_scheme": "dynamic",
                    "fmt": "e4m3",
                    "quant_method": "fp8",
                    "weight_block_size": [128, 128],
                },
            }
        ),
        source="config.json of deepseek-ai/DeepSeek-V3 (MLA, 256 routed + 1 shared expert, 1 MTP layer, FP8 "
        "weights); 671B total and 37B active from the DeepSeek-V3 report (the 685B checkpoint adds the MTP module)",
        estimated=("head_dim (MLA has none; 192 = qk_nope_head_dim + qk_rope_head_dim)",),
    ),
    CatalogEntry(
        hf_id="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        aliases=("eagle3-llama3.1-instruct-8b",),
        family="llama3",
        kind=Kind.EAGLE3_HEAD,
        architectures=("LlamaForCausalLMEagle3",),
        model_type="llama",
        num_hidden_layers=1,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        bos_token_id=128000,
        eos_token_id=128001,
        torch_dtype="float16",
        eagle3=Eagle3Shape(
            draft_vocab_size=32000,
            target_hidden_size=4096,
            trained_for=("meta-llama/Llama-3.1-8B-Instruct",),
        ),
        source="config.json of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (1 layer, draft_vocab_size 32000, "
        "max_position_embeddings 2048 as quoted in vLLM 0.32 config/speculative.py); no published parameter "
        "total: ~0.42B computed (fc 3h->h, one layer with 2h q/k/v input, 32000-token LM head; the input "
        "embedding is the target's)",
        estimated=("rope_theta (not in the published config; Llama 3.1's value)",),
    ),
    CatalogEntry(
        hf_id="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
        aliases=("eagle3-llama3.3-instruct-70b",),
        family="llama3",
        kind=Kind.EAGLE3_HEAD,
        architectures=("LlamaForCausalLMEagle3",),
        model_type="llama",
        num_hidden_layers=1,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=8192,
        intermediate_size=28672,
        vocab_size=128256,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        bos_token_id=128000,
        eos_token_id=_LLAMA_EOS,
        torch_dtype="float16",
        rope_scaling=MappingProxyType({**_LLAMA31_ROPE, "original_max_position_embeddings": 4096}),
        eagle3=Eagle3Shape(
            draft_vocab_size=32000,
            target_hidden_size=8192,
            trained_for=("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
        ),
        source="shape of the Llama-3-70B EAGLE-3 head config (sgl-project/SpecForge configs/llama3-70B-ealge3.json: "
        "1 layer, hidden 8192, intermediate 28672, 64/8 heads, draft_vocab_size 32000); no published parameter "
        "total: ~1.40B computed",
        estimated=(
            "all numbers are SpecForge's config for this head shape, not the yuhuili repository's own file "
            "(its max_position_embeddings may be 2048; vLLM >= 0.32 raises an EAGLE head's value to the target's "
            "max_model_len anyway)",
        ),
    ),
)


# ---------------------------------------------------------------------------------------------------- lookup

# Suffixes of re-published quantized checkpoints: same architecture, different weights.
_QUANTIZED_SUFFIX = re.compile(
    r"(-(fp8(-dynamic)?|fp4|nvfp4|awq|gptq(-int[48])?|int[48]|w8a8|w4a16|w8a16|bnb-4bit|gguf|mxfp4))+$"
    r"|(-quantized\.[a-z0-9.]+)$"
)


def _normalize(model_id: str) -> str:
    return model_id.strip().rstrip("/").lower()


def _build_index() -> Mapping[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in CATALOG:
        for key in (entry.hf_id, *entry.aliases):
            index[_normalize(key)] = entry
    return MappingProxyType(index)


def _build_name_index() -> Mapping[str, CatalogEntry]:
    """Repository names without owner ("Llama-3.1-8B-Instruct"), for local paths and re-uploads under other owners."""
    names: dict[str, CatalogEntry] = {}
    for entry in CATALOG:
        for key in (entry.hf_id, *entry.aliases):
            if "/" in key:
                names[_normalize(key).rsplit("/", 1)[1]] = entry
    return MappingProxyType(names)


_INDEX = _build_index()
_NAME_INDEX = _build_name_index()


def lookup(model_id: str) -> CatalogEntry | None:
    """Find a model by Hugging Face id or alias (case-insensitive), then by repository name.

    The name match lets `/models/Llama-3.1-8B-Instruct`, `someorg/Meta-Llama-3.1-70B-Instruct-FP8` or
    `RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8` resolve to the architecture they were made from; the
    quantization itself always comes from the spec, never from the name.
    """
    key = _normalize(model_id)
    if key in _INDEX:
        return _INDEX[key]
    name = key.rsplit("/", 1)[-1]
    for candidate in (name, _QUANTIZED_SUFFIX.sub("", name)):
        if candidate in _NAME_INDEX:
            return _NAME_INDEX[candidate]
    return None


# ---------------------------------------------------------------------------- the planner's view of a model


@dataclass(frozen=True)
class Architecture:
    """What the planner needs to know about one model, from the catalog or from inline numbers.

    Fields that inline numbers cannot carry (attention heads, FFN width, tied embeddings, MTP) are None when
    unknown; the planner then skips the checks that need them or falls back to a documented estimate.
    """

    model_id: str
    source: str  # "catalog: <hf id>" or "inline: spec.target.architecture"
    family: str
    parameters: int
    active_parameters: int
    embedding_parameters: int  # priced at 16 bits even when the rest is quantized
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    num_attention_heads: int | None = None
    ffn_width: int | None = None  # widest MLP activation per token (top-k experts for MoE)
    mla_latent_dim: int | None = None
    mtp_layers: int | None = None  # None: unknown (inline numbers)
    mtp_parameters: int = 0
    eagle3: Eagle3Shape | None = None
    entry: CatalogEntry | None = None

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        if self.mla_latent_dim is not None:
            return self.mla_latent_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def is_draft_head(self) -> bool:
        return self.eagle3 is not None


class UnknownArchitecture(ValueError):
    """A model that is neither cataloged nor described inline; `field` is where the user can describe it."""

    def __init__(self, model_id: str, field: str) -> None:
        known = ", ".join(e.hf_id for e in CATALOG)
        super().__init__(
            f"{field}: model {model_id!r} is not in specpilot's catalog; give its config numbers inline "
            f"(family, parametersBillions, numLayers, numKvHeads, headDim, hiddenSize, vocabSize, "
            f"maxPositionEmbeddings) or use a cataloged model: {known}"
        )
        self.model_id = model_id
        self.field = field


def from_entry(entry: CatalogEntry, model_id: str | None = None) -> Architecture:
    ffn = entry.intermediate_size
    if entry.moe is not None:
        routed = (entry.moe.experts_per_token + entry.moe.shared_experts) * entry.moe.moe_intermediate_size
        ffn = max(routed, entry.intermediate_size if entry.moe.first_dense_layers else 0)
    return Architecture(
        model_id=model_id or entry.hf_id,
        source=f"catalog: {entry.hf_id}",
        family=entry.family,
        parameters=count_parameters(entry),
        active_parameters=count_active_parameters(entry),
        embedding_parameters=embedding_parameters(entry),
        num_layers=entry.num_hidden_layers,
        num_kv_heads=1 if entry.mla is not None else entry.num_key_value_heads,
        head_dim=entry.mla.latent_dim if entry.mla is not None else entry.head_dim,
        hidden_size=entry.hidden_size,
        vocab_size=entry.vocab_size,
        max_position_embeddings=entry.max_position_embeddings,
        num_attention_heads=entry.num_attention_heads,
        ffn_width=ffn,
        mla_latent_dim=entry.mla.latent_dim if entry.mla is not None else None,
        mtp_layers=entry.mtp_layers,
        mtp_parameters=mtp_parameters(entry),
        eagle3=entry.eagle3,
        entry=entry,
    )


def from_inline(model_id: str, inline: ModelArchitecture, field: str) -> Architecture:
    """Inline numbers: untied embeddings are assumed (vocab x hidden twice, capped at the total) — the larger case."""
    parameters = max(1, round(inline.parameters_billions * 1e9))
    active = inline.active_parameters_billions
    return Architecture(
        model_id=model_id,
        source=f"inline: {field}.architecture",
        family=inline.family,
        parameters=parameters,
        active_parameters=min(parameters, max(1, round(active * 1e9))) if active is not None else parameters,
        embedding_parameters=min(parameters, 2 * inline.vocab_size * inline.hidden_size),
        num_layers=inline.num_layers,
        num_kv_heads=inline.num_kv_heads,
        head_dim=inline.head_dim,
        hidden_size=inline.hidden_size,
        vocab_size=inline.vocab_size,
        max_position_embeddings=inline.max_position_embeddings,
    )


def resolve_architecture(
    model_id: str, inline: ModelArchitecture | None, *, field: str = "spec.target"
) -> Architecture:
    """Inline numbers win over the catalog; a model with neither raises UnknownArchitecture naming `field`."""
    if inline is not None:
        return from_inline(model_id, inline, field)
    entry = lookup(model_id)
    if entry is None:
        raise UnknownArchitecture(model_id, f"{field}.architecture")
    return from_entry(entry, model_id)


# ------------------------------------------------------------------------------------------------ config.json


def to_hf_config(entry: CatalogEntry, *, include_quantization: bool = True) -> dict[str, Any]:
    """A config.json that transformers and vLLM load as this architecture (no weights needed to build configs).

    `include_quantization=False` drops the checkpoint's own `quantization_config` (DeepSeek-V3's FP8) for tests
    that render an unquantized engine on platforms without that kernel.
    """
    config: dict[str, Any] = {
        "architectures": list(entry.architectures),
        "model_type": entry.model_type,
        "hidden_size": entry.hidden_size,
        "intermediate_size": entry.intermediate_size,
        "num_hidden_layers": entry.num_hidden_layers,
        "num_attention_heads": entry.num_attention_heads,
        "num_key_value_heads": entry.num_key_value_heads,
        "vocab_size": entry.vocab_size,
        "max_position_embeddings": entry.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": entry.rms_norm_eps,
        "rope_theta": entry.rope_theta,
        "rope_scaling": dict(entry.rope_scaling) if entry.rope_scaling is not None else None,
        "tie_word_embeddings": entry.tie_word_embeddings,
        "bos_token_id": entry.bos_token_id,
        "eos_token_id": list(entry.eos_token_id) if isinstance(entry.eos_token_id, tuple) else entry.eos_token_id,
        "torch_dtype": entry.torch_dtype,
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_cache": True,
    }
    if entry.mla is None:
        config["head_dim"] = entry.head_dim
    if entry.model_type == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    if entry.model_type in ("qwen3", "qwen3_moe"):
        config["attention_bias"] = False
    if entry.moe is not None:
        config.update(_moe_config(entry, entry.moe))
    if entry.mla is not None:
        m = entry.mla
        config.update(
            {
                "q_lora_rank": m.q_lora_rank,
                "kv_lora_rank": m.kv_lora_rank,
                "qk_nope_head_dim": m.qk_nope_head_dim,
                "qk_rope_head_dim": m.qk_rope_head_dim,
                "v_head_dim": m.v_head_dim,
                "attention_bias": False,
            }
        )
    if entry.mtp_layers:
        config["num_nextn_predict_layers"] = entry.mtp_layers
    if entry.eagle3 is not None:
        config["draft_vocab_size"] = entry.eagle3.draft_vocab_size
        if entry.eagle3.target_hidden_size != entry.hidden_size:
            config["target_hidden_size"] = entry.eagle3.target_hidden_size
    for key, value in entry.extra_config.items():
        if key == "quantization_config" and not include_quantization:
            continue
        config[key] = _plain(value)
    return config


def _moe_config(entry: CatalogEntry, moe: MoeShape) -> dict[str, Any]:
    if entry.model_type == "mixtral":
        return {"num_local_experts": moe.num_experts, "num_experts_per_tok": moe.experts_per_token}
    if entry.model_type == "qwen3_moe":
        return {
            "num_experts": moe.num_experts,
            "num_experts_per_tok": moe.experts_per_token,
            "moe_intermediate_size": moe.moe_intermediate_size,
        }
    return {
        "n_routed_experts": moe.num_experts,
        "n_shared_experts": moe.shared_experts,
        "num_experts_per_tok": moe.experts_per_token,
        "moe_intermediate_size": moe.moe_intermediate_size,
        "first_k_dense_replace": moe.first_dense_layers,
    }


def _plain(value: Any) -> Any:
    """MappingProxyType and tuples are not JSON; config.json wants dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


__all__ = [
    "CATALOG",
    "Architecture",
    "CatalogEntry",
    "Eagle3Shape",
    "Kind",
    "MlaShape",
    "MoeShape",
    "UnknownArchitecture",
    "count_active_parameters",
    "count_parameters",
    "embedding_parameters",
    "from_entry",
    "from_inline",
    "lookup",
    "mtp_parameters",
    "resolve_architecture",
    "to_hf_config",
]
