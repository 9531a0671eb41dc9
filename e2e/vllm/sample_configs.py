"""Hugging Face ``config.json`` dicts of real architectures, and hand-written validator cases built on them.

The dicts are copies of the published configs' fields (no weights, no tokenizer): enough for vLLM's
``create_engine_config()``. The operator's catalog should produce equivalent dicts; these exist so the validator and
its tests do not depend on it.
"""

from __future__ import annotations

import json
from typing import Any

Config = dict[str, Any]

LLAMA_3_1_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_3_2_1B = "meta-llama/Llama-3.2-1B-Instruct"
LLAMA_3_3_70B = "meta-llama/Llama-3.3-70B-Instruct"
EAGLE3_LLAMA_8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
QWEN2_5_7B = "Qwen/Qwen2.5-7B-Instruct"
QWEN2_5_0_5B = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN3_8B = "Qwen/Qwen3-8B"
QWEN3_0_6B = "Qwen/Qwen3-0.6B"
QWEN3_30B_A3B = "Qwen/Qwen3-30B-A3B"
MISTRAL_7B = "mistralai/Mistral-7B-Instruct-v0.3"
MIXTRAL_8X7B = "mistralai/Mixtral-8x7B-Instruct-v0.1"
DEEPSEEK_V3 = "deepseek-ai/DeepSeek-V3"

_LLAMA3_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}

CONFIGS: dict[str, Config] = {
    LLAMA_3_1_8B: {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 14336,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": _LLAMA3_ROPE,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 128256,
    },
}
CONFIGS[LLAMA_3_2_1B] = {
    **CONFIGS[LLAMA_3_1_8B],
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "head_dim": 64,
    "tie_word_embeddings": True,
    "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
}
CONFIGS[LLAMA_3_3_70B] = {
    **CONFIGS[LLAMA_3_1_8B],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}
CONFIGS[EAGLE3_LLAMA_8B] = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
CONFIGS[QWEN2_5_7B] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}
CONFIGS[QWEN2_5_0_5B] = {
    **CONFIGS[QWEN2_5_7B],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_window_layers": 21,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}
CONFIGS[QWEN3_8B] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
CONFIGS[QWEN3_0_6B] = {
    **CONFIGS[QWEN3_8B],
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "max_window_layers": 28,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "tie_word_embeddings": True,
}
CONFIGS[QWEN3_30B_A3B] = {
    **CONFIGS[QWEN3_8B],
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "decoder_sparse_step": 1,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
}
CONFIGS[MISTRAL_7B] = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32768,
}
CONFIGS[MIXTRAL_8X7B] = {
    **CONFIGS[MISTRAL_7B],
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_experts_per_tok": 2,
    "num_local_experts": 8,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.02,
    "vocab_size": 32000,
}
CONFIGS[DEEPSEEK_V3] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


# Smallest configs: vLLM needs `model_type` (transformers fills the other fields with its defaults); `architectures`
# may be left out (vLLM derives it from model_type).
MINIMAL_LLAMA = "minimal/llama"
NO_ARCHITECTURES = "minimal/no-architectures"
NO_MODEL_TYPE = "minimal/no-model-type"
CONFIGS[MINIMAL_LLAMA] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
CONFIGS[NO_ARCHITECTURES] = {"model_type": "llama"}
CONFIGS[NO_MODEL_TYPE] = {"architectures": ["LlamaForCausalLM"]}


def configs_for(*names: str) -> dict[str, Config]:
    return {n: CONFIGS[n] for n in names}


def spec(**kwargs: Any) -> list[str]:
    return ["--speculative-config", json.dumps(kwargs)]


def serve(model: str, *flags: str) -> list[str]:
    """A rendered command line as a pod would run it."""
    return ["vllm", "serve", model, "--port", "8000", *flags]


_BASE = ("--max-model-len", "8192", "--max-num-seqs", "256")

# (id, argv, config names) -- expectations live in the tests, per vLLM version.
HANDWRITTEN: list[tuple[str, list[str], tuple[str, ...]]] = [
    (
        "ngram",
        serve(
            LLAMA_3_1_8B,
            *_BASE,
            *spec(method="ngram", num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=2),
        ),
        (LLAMA_3_1_8B,),
    ),
    (
        "draft_model",
        serve(
            LLAMA_3_1_8B,
            *_BASE,
            "--served-model-name",
            LLAMA_3_1_8B,
            "-tp",
            "2",
            *spec(method="draft_model", model=LLAMA_3_2_1B, num_speculative_tokens=5, draft_tensor_parallel_size=1),
        ),
        (LLAMA_3_1_8B, LLAMA_3_2_1B),
    ),
    (
        "eagle3",
        serve(LLAMA_3_1_8B, *_BASE, *spec(method="eagle3", model=EAGLE3_LLAMA_8B, num_speculative_tokens=3)),
        (LLAMA_3_1_8B, EAGLE3_LLAMA_8B),
    ),
    (
        "mtp",
        serve(DEEPSEEK_V3, "-tp", "8", *_BASE, *spec(method="mtp", num_speculative_tokens=1)),
        (DEEPSEEK_V3,),
    ),
    (
        "dynamic_sd",
        serve(
            LLAMA_3_1_8B,
            *_BASE,
            *spec(
                method="ngram",
                num_speculative_tokens=4,
                num_speculative_tokens_per_batch_size=[[1, 15, 4], [16, 256, 0]],
            ),
        ),
        (LLAMA_3_1_8B,),
    ),
    (
        "legacy_flags",
        serve(LLAMA_3_1_8B, *_BASE, "--speculative-model", LLAMA_3_2_1B, "--num-speculative-tokens", "5"),
        (LLAMA_3_1_8B, LLAMA_3_2_1B),
    ),
    (
        "disable_by_batch_size",
        serve(LLAMA_3_1_8B, *_BASE, *spec(method="ngram", num_speculative_tokens=4, disable_by_batch_size=32)),
        (LLAMA_3_1_8B,),
    ),
    (
        "draft_tp3_with_tp2",
        serve(
            LLAMA_3_1_8B,
            *_BASE,
            "-tp",
            "2",
            *spec(method="draft_model", model=LLAMA_3_2_1B, num_speculative_tokens=5, draft_tensor_parallel_size=3),
        ),
        (LLAMA_3_1_8B, LLAMA_3_2_1B),
    ),
    (
        "medusa",
        serve(LLAMA_3_1_8B, *_BASE, *spec(method="medusa", model=LLAMA_3_2_1B, num_speculative_tokens=3)),
        (LLAMA_3_1_8B, LLAMA_3_2_1B),
    ),
    (
        "unknown_quantization",
        serve(LLAMA_3_1_8B, *_BASE, "--quantization", "fp9"),
        (LLAMA_3_1_8B,),
    ),
    (
        "removed_quantization_gguf",
        serve(LLAMA_3_1_8B, *_BASE, "--quantization", "gguf"),
        (LLAMA_3_1_8B,),
    ),
    (
        "malformed_json",
        serve(LLAMA_3_1_8B, *_BASE, "--speculative-config", "{method: ngram"),
        (LLAMA_3_1_8B,),
    ),
    (
        "max_model_len_too_long",
        serve(MISTRAL_7B, "--max-model-len", "65536"),
        (MISTRAL_7B,),
    ),
    (
        "hub_id_without_config",
        serve("org/not-given", *_BASE),
        (),
    ),
    (
        "draft_without_config",
        serve(LLAMA_3_1_8B, *_BASE, *spec(method="draft_model", model="org/draft-not-given", num_speculative_tokens=3)),
        (LLAMA_3_1_8B,),
    ),
    (
        "config_without_model_type",
        serve(NO_MODEL_TYPE, "--max-model-len", "1024"),
        (NO_MODEL_TYPE,),
    ),
]

# Config-only folders of other architectures that must validate (target, draft or None, extra flags).
ARCHITECTURES: list[tuple[str, list[str], tuple[str, ...]]] = [
    (
        "llama70b_tp4_draft_8b_fp8",
        serve(
            LLAMA_3_3_70B,
            "-tp",
            "4",
            "--quantization",
            "fp8",
            *_BASE,
            *spec(method="draft_model", model=LLAMA_3_1_8B, num_speculative_tokens=5, draft_tensor_parallel_size=1),
        ),
        (LLAMA_3_3_70B, LLAMA_3_1_8B),
    ),
    (
        "qwen2_5_7b_ngram_skip_tokenizer",
        serve(QWEN2_5_7B, *_BASE, "--skip-tokenizer-init", *spec(method="ngram", num_speculative_tokens=3)),
        (QWEN2_5_7B,),
    ),
    (
        "qwen3_8b_draft_0_6b",
        serve(
            QWEN3_8B,
            *_BASE,
            "--tokenizer",
            QWEN3_8B,
            *spec(method="draft_model", model=QWEN3_0_6B, num_speculative_tokens=4),
        ),
        (QWEN3_8B, QWEN3_0_6B),
    ),
    (
        "qwen3_moe_tp2_ngram",
        serve(QWEN3_30B_A3B, "-tp", "2", *_BASE, *spec(method="ngram", num_speculative_tokens=3)),
        (QWEN3_30B_A3B,),
    ),
    (
        "mistral_7b_ngram",
        serve(MISTRAL_7B, *_BASE, *spec(method="ngram", num_speculative_tokens=3)),
        (MISTRAL_7B,),
    ),
    (
        "mixtral_tp2_ngram",
        serve(MIXTRAL_8X7B, "-tp", "2", *_BASE, *spec(method="ngram", num_speculative_tokens=3)),
        (MIXTRAL_8X7B,),
    ),
    (
        "minimal_llama_config",
        serve(MINIMAL_LLAMA, "--max-model-len", "1024", *spec(method="ngram", num_speculative_tokens=3)),
        (MINIMAL_LLAMA,),
    ),
    (
        "config_without_architectures",
        serve(NO_ARCHITECTURES, "--max-model-len", "1024"),
        (NO_ARCHITECTURES,),
    ),
    (
        "qwen2_5_7b_draft_0_5b_vocab_mismatch",
        serve(QWEN2_5_7B, *_BASE, *spec(method="draft_model", model=QWEN2_5_0_5B, num_speculative_tokens=4)),
        (QWEN2_5_7B, QWEN2_5_0_5B),
    ),
]


def as_cases(rows: list[tuple[str, list[str], tuple[str, ...]]]) -> list[dict[str, Any]]:
    return [{"id": i, "argv": argv, "configs": configs_for(*names)} for i, argv, names in rows]
