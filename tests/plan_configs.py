"""Tiny but real model configs for the architecture families the fixtures do not carry (MLA, sliding window,
Qwen3-Next's `full_attention_interval`), shared by tests/plan/test_kv_cache.py (ckpt's plan) and
bench/conformance/plan_check.py (vLLM 0.33's own per-layer KV-cache specs for the same configs)."""

from __future__ import annotations

import json
from pathlib import Path

_COMMON = {
    "vocab_size": 512,
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}

CONFIGS: dict[str, dict] = {
    # DeepSeek-V3 MLA: one latent of kv_lora_rank + qk_rope_head_dim per token and layer.
    "deepseek-v3-mla": {
        **_COMMON,
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "intermediate_size": 256,
        "moe_intermediate_size": 64,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "num_key_value_heads": 4,
        "q_lora_rank": None,
        "kv_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
    },
    # Gemma-3 text: sliding-window and full-attention layers by `layer_types`.
    "gemma3-sliding": {
        **_COMMON,
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "intermediate_size": 256,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "sliding_window": 512,
        "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": 32,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
    },
    # Qwen3-Next: GatedDeltaNet layers except every `full_attention_interval`-th.
    "qwen3-next-gdn": {
        **_COMMON,
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "intermediate_size": 256,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "full_attention_interval": 2,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000.0,
        "hidden_act": "silu",
    },
}
# Qwen3-Next with 7 layers, every third full attention: 2 full-attention and 5 GatedDeltaNet layers, so vLLM's
# groups are 2 layers wide and the last of the 3 GatedDeltaNet groups carries a padding layer.
CONFIGS["qwen3-next-padded"] = {**CONFIGS["qwen3-next-gdn"], "num_hidden_layers": 7, "full_attention_interval": 3}


def write(name: str, folder: Path) -> Path:
    """A folder holding the config as config.json (enough for a header-free plan and a meta-device build)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIGS[name], indent=2))
    return folder
