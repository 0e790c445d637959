"""Header-only checkpoints the size of real ones, for the memory plan: every tensor name, dtype and shape as the
producer writes them, with sparse data regions (no disk space). Used by tests/serve/test_memory_plan_in_serve.py and
bench/seed_plan.py (the sanity table of docs/plan.md).

- `qwen36_35b_a3b_nvfp4`: the seed model, AEON-7 Qwen3.6-35B-A3B NVFP4 (model card: Qwen3_5MoeForConditionalGeneration,
  compressed-tensors NVFP4, 256 experts x 8 active + 1 shared, 40 layers, hybrid GatedDeltaNet + full attention,
  multimodal, ~22 GB), with the public Qwen3.5/3.6-35B-A3B config (full attention every 4th layer, 16 heads / 2 KV
  heads of 256, GatedDeltaNet 16 key / 32 value heads of 128, hidden 2048, vocab 248320, 262144 positions, a 27-block
  vision tower of 1152). Quantized as the llm-compressor recipe of fixtures/README.md does it: every Linear except
  lm_head, routers, shared_expert_gate, in_proj_a/b and the vision tower.
- `dense_70b_bf16`: a Llama-3-70B-shaped BF16 checkpoint (~141 GB): more than a DGX Spark holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bench.synth import Tensor, write_checkpoint


def _nvfp4(prefix: str, out: int, inp: int) -> Iterator[Tensor]:
    yield f"{prefix}.weight_packed", "U8", [out, inp // 2]
    yield f"{prefix}.weight_scale", "F8_E4M3", [out, inp // 16]
    yield f"{prefix}.weight_global_scale", "F32", [1]
    yield f"{prefix}.input_global_scale", "F32", [1]


def _bf16(prefix: str, out: int, inp: int) -> Iterator[Tensor]:
    yield f"{prefix}.weight", "BF16", [out, inp]


SEED_TEXT = {
    "num_hidden_layers": 40,
    "full_attention_interval": 4,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_5_moe_text",
    "dtype": "bfloat16",
    "attn_output_gate": True,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
SEED_VISION = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_heads": 16,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "in_channels": 3,
    "spatial_merge_size": 2,
    "out_hidden_size": 2048,
    "num_position_embeddings": 2304,
    "model_type": "qwen3_5_moe_vision",
}


def _seed_tensors(experts: int) -> Iterator[Tensor]:
    t = SEED_TEXT
    h, e, mi = t["hidden_size"], experts, t["moe_intermediate_size"]
    heads, kv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    nk, nv, dk, dv = (
        t["linear_num_key_heads"],
        t["linear_num_value_heads"],
        t["linear_key_head_dim"],
        t["linear_value_head_dim"],
    )
    lm = "model.language_model"
    yield f"{lm}.embed_tokens.weight", "BF16", [t["vocab_size"], h]
    for i in range(t["num_hidden_layers"]):
        p = f"{lm}.layers.{i}"
        yield f"{p}.input_layernorm.weight", "BF16", [h]
        yield f"{p}.post_attention_layernorm.weight", "BF16", [h]
        if (i + 1) % t["full_attention_interval"] == 0:
            yield from _nvfp4(f"{p}.self_attn.q_proj", 2 * heads * hd, h)  # attn_output_gate doubles q_proj
            yield from _nvfp4(f"{p}.self_attn.k_proj", kv * hd, h)
            yield from _nvfp4(f"{p}.self_attn.v_proj", kv * hd, h)
            yield from _nvfp4(f"{p}.self_attn.o_proj", h, heads * hd)
            yield f"{p}.self_attn.q_norm.weight", "BF16", [hd]
            yield f"{p}.self_attn.k_norm.weight", "BF16", [hd]
        else:
            a = f"{p}.linear_attn"
            yield from _nvfp4(f"{a}.in_proj_qkv", 2 * nk * dk + nv * dv, h)
            yield from _nvfp4(f"{a}.in_proj_z", nv * dv, h)
            yield from _bf16(f"{a}.in_proj_a", nv, h)
            yield from _bf16(f"{a}.in_proj_b", nv, h)
            yield f"{a}.conv1d.weight", "BF16", [2 * nk * dk + nv * dv, 1, t["linear_conv_kernel_dim"]]
            yield f"{a}.A_log", "F32", [nv]
            yield f"{a}.dt_bias", "BF16", [nv]
            yield f"{a}.norm.weight", "F32", [dv]
            yield from _nvfp4(f"{a}.out_proj", h, nv * dv)
        m = f"{p}.mlp"
        yield from _bf16(f"{m}.gate", e, h)
        for x in range(e):
            yield from _nvfp4(f"{m}.experts.{x}.gate_proj", mi, h)
            yield from _nvfp4(f"{m}.experts.{x}.up_proj", mi, h)
            yield from _nvfp4(f"{m}.experts.{x}.down_proj", h, mi)
        si = t["shared_expert_intermediate_size"]
        yield from _nvfp4(f"{m}.shared_expert.gate_proj", si, h)
        yield from _nvfp4(f"{m}.shared_expert.up_proj", si, h)
        yield from _nvfp4(f"{m}.shared_expert.down_proj", h, si)
        yield from _bf16(f"{m}.shared_expert_gate", 1, h)
    yield f"{lm}.norm.weight", "BF16", [h]
    yield "lm_head.weight", "BF16", [t["vocab_size"], h]
    v = SEED_VISION
    vh, vi = v["hidden_size"], v["intermediate_size"]
    yield "model.visual.patch_embed.proj.weight", "BF16", [vh, 3, 2, 16, 16]
    yield "model.visual.patch_embed.proj.bias", "BF16", [vh]
    yield "model.visual.pos_embed.weight", "BF16", [v["num_position_embeddings"], vh]
    for b in range(v["depth"]):
        p = f"model.visual.blocks.{b}"
        for norm in ("norm1", "norm2"):
            yield f"{p}.{norm}.weight", "BF16", [vh]
            yield f"{p}.{norm}.bias", "BF16", [vh]
        for name, out, inp in (
            ("attn.qkv", 3 * vh, vh),
            ("attn.proj", vh, vh),
            ("mlp.linear_fc1", vi, vh),
            ("mlp.linear_fc2", vh, vi),
        ):
            yield f"{p}.{name}.weight", "BF16", [out, inp]
            yield f"{p}.{name}.bias", "BF16", [out]
    merged = vh * 4
    yield "model.visual.merger.norm.weight", "BF16", [vh]
    yield "model.visual.merger.norm.bias", "BF16", [vh]
    yield "model.visual.merger.linear_fc1.weight", "BF16", [merged, merged]
    yield "model.visual.merger.linear_fc1.bias", "BF16", [merged]
    yield "model.visual.merger.linear_fc2.weight", "BF16", [v["out_hidden_size"], merged]
    yield "model.visual.merger.linear_fc2.bias", "BF16", [v["out_hidden_size"]]


def _seed_config(experts: int) -> dict:
    ignore = [
        "lm_head",
        "re:.*mlp.gate$",
        "re:.*visual.*",
        "re:.*shared_expert_gate$",
        "re:.*linear_attn.in_proj_a$",
        "re:.*linear_attn.in_proj_b$",
    ]
    scheme = {
        "num_bits": 4,
        "type": "float",
        "strategy": "tensor_group",
        "group_size": 16,
        "symmetric": True,
        "dynamic": False,
    }
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": {**SEED_TEXT, "num_experts": experts},
        "vision_config": SEED_VISION,
        "tie_word_embeddings": False,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "ignore": ignore,
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "format": "nvfp4-pack-quantized",
                    "weights": scheme,
                    "input_activations": {**scheme, "dynamic": "local"},
                }
            },
        },
    }


def _dense_tensors(
    layers: int = 80, hidden: int = 8192, inter: int = 28672, heads: int = 64, kv: int = 8, vocab: int = 128256
) -> Iterator[Tensor]:
    hd = hidden // heads
    yield "model.embed_tokens.weight", "BF16", [vocab, hidden]
    for i in range(layers):
        p = f"model.layers.{i}"
        yield f"{p}.input_layernorm.weight", "BF16", [hidden]
        yield f"{p}.post_attention_layernorm.weight", "BF16", [hidden]
        for name, out, inp in (
            ("self_attn.q_proj", hidden, hidden),
            ("self_attn.k_proj", kv * hd, hidden),
            ("self_attn.v_proj", kv * hd, hidden),
            ("self_attn.o_proj", hidden, hidden),
            ("mlp.gate_proj", inter, hidden),
            ("mlp.up_proj", inter, hidden),
            ("mlp.down_proj", hidden, inter),
        ):
            yield f"{p}.{name}.weight", "BF16", [out, inp]
    yield "model.norm.weight", "BF16", [hidden]
    yield "lm_head.weight", "BF16", [vocab, hidden]


DENSE_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
}


def _write(folder: Path, tensors: Iterator[Tensor], config: dict, shards: int) -> int:
    """Sparse shards and an index; returns the total tensor data bytes."""
    return write_checkpoint(folder, tensors, shards=shards, config=config).data_bytes


def qwen36_35b_a3b_nvfp4(folder: Path, experts: int = 256) -> int:
    """The seed model's header set; fewer `experts` keep every KV figure and shrink the MoE weights (tests)."""
    return _write(folder, _seed_tensors(experts), _seed_config(experts), shards=4)


def dense_70b_bf16(folder: Path) -> int:
    return _write(folder, _dense_tensors(), DENSE_CONFIG, shards=4)
