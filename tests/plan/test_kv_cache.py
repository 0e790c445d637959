"""Per-layer KV bytes per token and recurrent state per sequence, against vLLM 0.33's own KV-cache specs.

The expected values below are what vLLM 0.33.0 computes for these configs: the TP-1 rows were read from vLLM's own
layer specs by bench/conformance/plan_check.py (side venv, `layer.get_kv_cache_spec(vllm_config)` on a meta-device
build; 90/90 agreement recorded in bench/conformance/FINDINGS.md); rows vLLM cannot build on the CPU platform
(tensor parallel > 1, per-token-head dtypes, fp8_ds_mla) are derived by hand from the same source lines:

- attention page per token and layer = num_kv_heads x state_content_size_bytes, content = (head_size +
  head_size_v) x dtype size (vllm/v1/kv_cache_interface.py AttentionSpec.state_content_size_bytes /
  unpadded_page_size_bytes); num_kv_heads = max(1, total // tp) (vllm/config/model.py get_num_kv_heads);
- nvfp4: 2 x num_kv_heads slots of head_size // 2 + head_size // 16 bytes (vllm/v1/attention/backends/flashinfer.py
  FlashInferBackend.customize_spec, vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim);
- fp8/int8/int4 per-token-head: (head_k + head_v) x dtype size (int4: halved) + 2 fp32 scales per head
  (vllm/v1/attention/backends/triton_attn.py TritonAttentionBackend.customize_spec);
- MLA: one head of kv_lora_rank + qk_rope_head_dim, head_size_v 0, every rank whole (max_tp_shards 1);
  fp8_ds_mla 656 B per token (vllm/model_executor/layers/attention/mla_attention.py get_kv_cache_spec);
- GatedDeltaNet: conv (kernel - 1, conv_dim / tp) + SSM (value_heads / tp, v_dim, k_dim) in the model dtype
  (vllm/model_executor/layers/mamba/mamba_utils.py gated_delta_net_state_shape / _mamba_state_dtype).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckpt_tools.plan.budget import pages
from ckpt_tools.plan.layers import FULL, GDN, MLA, SLIDING, CacheModel, cache_model
from tests.memory_models import SEED_TEXT
from tests.plan_configs import CONFIGS

GENUINE = Path(__file__).resolve().parents[2] / "fixtures" / "genuine"


def _fixture_config(name: str) -> dict:
    return json.loads((GENUINE / name / "config.json").read_text())


def _cfgs(name: str) -> tuple[dict, dict]:
    top = CONFIGS[name] if name in CONFIGS else _fixture_config(name)
    text = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
    return text, top


# (config, --kv-cache-dtype, tensor parallel) -> per-layer (kind, bytes per token, state bytes) as vLLM sizes them.
EXPECTED = [
    # dense Llama (fixtures): 2 KV heads x head_dim 32
    ("base-llama-bf16", "auto", 1, [(FULL, 256, 0)] * 2),
    ("base-llama-bf16", "fp8", 1, [(FULL, 128, 0)] * 2),
    ("base-llama-bf16", "nvfp4", 1, [(FULL, 72, 0)] * 2),  # 2 heads x 2 sides x (16 + 2)
    ("base-llama-bf16", "fp8_per_token_head", 1, [(FULL, 144, 0)] * 2),  # 2 x (64 x 1 + 8)
    ("base-llama-bf16", "int4_per_token_head", 1, [(FULL, 80, 0)] * 2),  # 2 x (32 + 8)
    ("base-llama-bf16", "auto", 2, [(FULL, 128, 0)] * 2),  # one KV head per rank
    ("base-llama-bf16", "auto", 4, [(FULL, 128, 0)] * 2),  # KV heads replicated: still one per rank
    # MoE Qwen3 (fixtures): same attention
    ("llmc-qwen3moe-nvfp4", "auto", 1, [(FULL, 256, 0)] * 2),
    ("llmc-qwen3moe-nvfp4", "fp8", 1, [(FULL, 128, 0)] * 2),
    # hybrid GatedDeltaNet + VL Qwen3.5-MoE (fixtures): layer 0 linear attention, layer 1 full attention
    ("modelopt-qwen35moe-nvfp4", "auto", 1, [(GDN, 0, 9728), (FULL, 256, 0)]),  # (3x256 + 4x32x32) x 2
    ("modelopt-qwen35moe-nvfp4", "fp8", 1, [(GDN, 0, 9728), (FULL, 128, 0)]),
    ("modelopt-qwen35moe-nvfp4", "nvfp4", 1, [(GDN, 0, 9728), (FULL, 72, 0)]),
    ("modelopt-qwen35moe-nvfp4", "auto", 2, [(GDN, 0, 4864), (FULL, 128, 0)]),  # (3x128 + 2x32x32) x 2
    # Qwen3-Next by full_attention_interval (config)
    ("qwen3-next-gdn", "auto", 1, [(GDN, 0, 9728), (FULL, 256, 0)]),
    ("qwen3-next-gdn", "nvfp4", 1, [(GDN, 0, 9728), (FULL, 72, 0)]),
    # DeepSeek-V3 MLA (config): one latent of 64 + 16 dims
    ("deepseek-v3-mla", "auto", 1, [(MLA, 160, 0)] * 2),
    ("deepseek-v3-mla", "fp8", 1, [(MLA, 80, 0)] * 2),
    ("deepseek-v3-mla", "fp8_ds_mla", 1, [(MLA, 656, 0)] * 2),
    ("deepseek-v3-mla", "auto", 2, [(MLA, 160, 0)] * 2),  # the latent is whole on every rank
    # Gemma-3 sliding window (config): sliding then full, same heads
    ("gemma3-sliding", "auto", 1, [(SLIDING, 256, 0), (FULL, 256, 0)]),
    ("gemma3-sliding", "fp8", 1, [(SLIDING, 128, 0), (FULL, 128, 0)]),
]


@pytest.mark.parametrize(("name", "kv", "tp", "layers"), EXPECTED, ids=[f"{n}-{k}-tp{t}" for n, k, t, _ in EXPECTED])
def test_per_layer_bytes_match_vllm(name: str, kv: str, tp: int, layers: list[tuple[str, int, int]]) -> None:
    text, top = _cfgs(name)
    cache = cache_model(text, top, tp=tp, kv_request=kv, quant_method=None, kv_word=None)
    assert [(layer.kind, layer.token_bytes, layer.state_bytes) for layer in cache.layers] == layers


def test_gdn_state_shapes_and_dtypes_match_vllm() -> None:
    text, top = _cfgs("modelopt-qwen35moe-nvfp4")
    gdn = cache_model(text, top, tp=1, kv_request=None, quant_method=None, kv_word=None).of(GDN)[0]
    assert gdn.state_shapes == ((3, 256), (4, 32, 32)) and gdn.state_dtypes == ("bfloat16", "bfloat16")
    fp32 = dict(text, mamba_ssm_dtype="float32")  # Qwen3.5 configs may name the SSM dtype; vLLM follows it
    gdn = cache_model(fp32, top, tp=1, kv_request=None, quant_method=None, kv_word=None).of(GDN)[0]
    assert gdn.state_dtypes == ("bfloat16", "float32") and gdn.state_bytes == 768 * 2 + 4096 * 4


def test_sliding_window_requests_stop_at_the_window() -> None:
    text, top = _cfgs("gemma3-sliding")
    cache = cache_model(text, top, tp=1, kv_request=None, quant_method=None, kv_word=None)
    p = pages(cache, max_num_batched_tokens=2048, prefix_caching=False)
    assert p.block_size == 16 and p.in_flight_tokens == 4096  # 2 concurrent batches of 2,048 under async scheduling
    page = 16 * 256
    # At 100,000 tokens the full layer holds cdiv(100000, 16) pages; the sliding one min(511 + 4096, L) tokens + 1.
    assert p.request_bytes(100_000) == 6250 * page + (-(-4607 // 16) + 1) * page
    assert p.request_bytes(1000) == 63 * page + 64 * page


def _seed_cache() -> CacheModel:
    """The attention of Qwen3.6-35B-A3B (the AEON-7 model card's model: Qwen3_5MoeForConditionalGeneration, 40
    layers, full attention every 4th; heads and dims from the public Qwen3.5/3.6-35B-A3B config, as
    tests/memory_models.py builds its checkpoint)."""
    return cache_model(SEED_TEXT, {}, tp=1, kv_request=None, quant_method=None, kv_word=None)


def test_seed_model_figures() -> None:
    """Qwen3.6-35B-A3B: the KV figures of docs/plan.md's sanity table."""
    cache = _seed_cache()
    assert len(cache.of(FULL)) == 10 and len(cache.of(GDN)) == 30
    assert sum(layer.token_bytes for layer in cache.of(FULL)) == 10 * 2 * 512 * 2  # 20,480 B per token
    assert cache.of(GDN)[0].state_bytes == (3 * 8192 + 32 * 128 * 128) * 2  # 1,097,728 B per layer
    p = pages(cache, max_num_batched_tokens=16384, prefix_caching=False)
    assert p.block_size == 544 and p.state_page == 544 * 2048  # 16 * cdiv(1097728, 16 * 2048)


# ---- KV-cache groups, the pool and vLLM's start-up capacity line ------------------------------------------------------
# Hand-derived from vLLM 0.33.0: vllm/v1/core/kv_cache_planning.py `_get_kv_cache_groups_uniform_page_size` (one
# bucket per spec; group size = the smallest bucket, or the largest when under 1.5x it; cdiv(layers, group size)
# groups per bucket, the last one padded), `_get_kv_cache_bytes_per_block` (the widest group's pages), and
# `get_kv_cache_config_from_groups` (num_blocks = available // bytes per block, the null block included);
# vllm/v1/core/kv_cache_utils.py `get_max_concurrency_for_kv_cache_config` (num_blocks / the sum over groups of
# cdiv(max_memory_usage_bytes, page)) and `get_kv_cache_capacity` (tokens = int(concurrency x max_model_len));
# vllm/v1/kv_cache_interface.py `MambaSpec.max_memory_usage_bytes` (1 + speculative pages; 2 + them in align mode).
# bench/conformance/plan_check.py checks the same figures against those functions themselves.


def _pages(name: str, **kw):
    text, top = _cfgs(name)
    cache = cache_model(text, top, tp=1, kv_request=None, quant_method=None, kv_word=None)
    return pages(cache, max_num_batched_tokens=2048, **{"prefix_caching": False, **kw})


def test_padding_group_counts_in_blocks_and_bytes() -> None:
    from ckpt_tools.plan.budget import answer

    # 2 full-attention layers (256 B/token) and 5 GatedDeltaNet layers (9,728 B state): 48-token blocks so a
    # 12,288 B attention page holds a state; groups of 2 -> 1 full + 3 GatedDeltaNet groups, the last padded.
    p = _pages("qwen3-next-padded")
    assert p.block_size == 48 and p.group_size == 2
    assert sorted(p.groups) == [(FULL, None)] + [(GDN, None)] * 3
    assert p.block_bytes == 2 * 12_288
    assert p.request_blocks(4096) == 86 + 3  # cdiv(4096, 48) + one state page per GatedDeltaNet group
    # The padding layer's page counts: 89 blocks of 24,576 B, not the 2 x 86 + 5 pages of the layers alone.
    assert p.request_bytes(4096) == 89 * 24_576 == 2 * 86 * 12_288 + 6 * 12_288
    budget = 1_000_000_000
    a = answer(p, budget, context=4096, max_model_len=4096, max_num_seqs=None, seq_counts=())
    num_blocks = budget // 24_576  # 40,690: the pool, null block included
    assert a.max_concurrency == num_blocks / 89
    assert a.kv_cache_tokens == int(num_blocks / 89 * 4096)
    assert a.max_num_seqs == (num_blocks - 1) // 89  # what fits: the null block is never handed out


def test_speculative_tokens_add_a_state_page_per_recurrent_group() -> None:
    assert _pages("qwen3-next-padded", speculative_tokens=4).request_blocks(4096) == 86 + 3 * (1 + 4)
    assert _pages("qwen3-next-padded", prefix_caching=True, speculative_tokens=4).request_blocks(4096) == 86 + 3 * 6
    # Attention-only models keep no state: speculative tokens change nothing.
    assert _pages("gemma3-sliding", speculative_tokens=4).request_blocks(8192) == _pages(
        "gemma3-sliding"
    ).request_blocks(8192)


def test_sliding_and_full_layers_are_two_groups_of_one() -> None:
    p = _pages("gemma3-sliding")
    assert p.group_size == 1 and len(p.groups) == 2 and p.block_bytes == 16 * 256
    # Full: cdiv(8192, 16) = 512; sliding: cdiv(min(511 + 4096, 8192), 16) + 1 = 289.
    assert p.request_blocks(8192) == 512 + 289


def test_seed_model_log_line() -> None:
    """Qwen3.6-35B-A3B at 8k: 1 full-attention + 3 GatedDeltaNet groups of 10 layers; a block id is 10 pages of
    1,114,112 B; a request takes cdiv(8192, 544) = 16 attention blocks + 3 state blocks (each + the speculative
    tokens)."""
    from ckpt_tools.plan.budget import answer

    cache = _seed_cache()
    p = pages(cache, max_num_batched_tokens=16384, prefix_caching=False)
    assert p.group_size == 10 and len(p.groups) == 4 and p.block_bytes == 10 * 1_114_112
    assert p.request_blocks(8192) == 16 + 3
    assert pages(cache, max_num_batched_tokens=16384, prefix_caching=True, speculative_tokens=4).request_blocks(
        8192
    ) == 16 + 3 * (2 + 4)
    budget = 70 << 30
    a = answer(p, budget, context=262_144, max_model_len=8192, max_num_seqs=None, seq_counts=())
    assert budget // (10 * 1_114_112) == 6746
    assert a.max_concurrency == 6746 / 19  # 355.05x
    assert a.kv_cache_tokens == int(6746 / 19 * 8192) == 2_908_591
