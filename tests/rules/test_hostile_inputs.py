"""Hostile configs and headers never crash a rule: every rule runs, findings stay well-formed."""

from __future__ import annotations

import pytest

from ckpt_tools.pipeline import analyze
from tests import case_ops

WEIRD = ["x", 3.5, -1, None, True, [], {}, ["a", 1], {"a": [1]}]
KEYS = [
    "quantization_config.ignore",
    "quantization_config.kv_cache_scheme",
    "quantization_config.config_groups",
    "quantization_config.config_groups.group_0.weights.block_structure",
    "quantization_config.config_groups.group_0.weights.group_size",
    "quantization_config.config_groups.group_0.weights.strategy",
    "quantization_config.weight_block_size",
    "quantization_config.group_size",
    "quantization_config.quant_algo",
    "tie_word_embeddings",
    "text_config.tie_word_embeddings",
    "vision_config",
    "text_config.num_experts",
    "num_attention_heads",
    "num_key_value_heads",
    "text_config.mtp_num_hidden_layers",
    "attention_bias",
    "architectures",
]
FIXTURES = ["llmc-qwen35moe-nvfp4", "modelopt-llama-nvfp4-fp8kv", "llmc-llama-fp8-dynamic-fp8kv"]


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("key", KEYS)
def test_weird_config_values(fixture_copy, fixture: str, key: str) -> None:
    folder = fixture_copy(fixture)
    for value in WEIRD:
        case_ops.apply(folder, [{"op": "edit_json", "file": "config.json", "set": {key: value}}])
        report = analyze(str(folder)).report
        for f in report.findings:
            assert f.message and f.count >= 0 and f.severity in ("info", "warning", "error")
            f.to_dict()


def test_block_fp8_with_garbage_block_size(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-fp8-dynamic")
    case_ops.apply(
        folder,
        [
            {"op": "block_scales", "block": [64, 64]},
            {
                "op": "edit_json",
                "file": "config.json",
                "set": {
                    "quantization_config.config_groups.group_0.weights.strategy": "block",
                    "quantization_config.config_groups.group_0.weights.block_structure": ["a", 0],
                },
            },
        ],
    )
    report = analyze(str(folder)).report
    assert "CK308" not in {f.code for f in report.findings}  # no usable block size: nothing to compute


def test_scalar_scales_with_odd_shapes_and_dtypes(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    case_ops.apply(
        folder,
        [
            {"op": "retype", "tensor": "model.layers.0.self_attn.q_proj.weight_scale_2", "dtype": "I64", "shape": [3]},
            {"op": "retype", "tensor": "model.layers.0.self_attn.k_proj.input_scale", "dtype": "U8", "shape": [0]},
            {"op": "retype", "tensor": "model.layers.0.self_attn.v_proj.weight_scale", "dtype": "F8_E4M3", "shape": []},
        ],
    )
    report = analyze(str(folder)).report
    assert "CK403" in {f.code for f in report.findings}
