"""Detection on every genuine producer fixture: what vLLM 0.33 resolves, and no false error."""

from __future__ import annotations

import shutil

import pytest

from ckpt_tools import analyze
from tests.config_recipes import BY_NAME
from tests.corrupt import GENUINE, genuine_entries

# entry -> (producer, quant_algo, vllm_quantization, activation_mode, kv_cache, components)
# Derived from the producers' configs and vLLM's resolution rules (vllm-facts.md 1-4), not from our output.
CT, MO = "compressed-tensors", "modelopt"
EXPECTED: dict[str, tuple] = {
    "base-llama-bf16": ("none", None, None, None, None, ["text"]),
    "llmc-llama-fp8-dynamic": (CT, "FP8", CT, None, None, ["text"]),
    "llmc-llama-fp8-dynamic-fp8kv": (CT, "FP8", CT, None, "fp8", ["text"]),
    "llmc-llama-nvfp4": (CT, "NVFP4", CT, "W4A4", None, ["text"]),
    "llmc-llama-nvfp4a16": (CT, "W4A16_NVFP4", CT, "W4A16", None, ["text"]),
    "llmc-llama-w4a16": (CT, "W4A16", CT, None, None, ["text"]),
    "llmc-qwen35moe-fp8-dynamic": (CT, "FP8", CT, None, None, ["text", "vision"]),
    "llmc-qwen35moe-nvfp4": (CT, "NVFP4", CT, "W4A4", None, ["text", "vision"]),
    "llmc-qwen35moe-nvfp4a16": (CT, "W4A16_NVFP4", CT, "W4A16", None, ["text", "vision"]),
    "llmc-qwen35moe-w4a16": (CT, "W4A16", CT, None, None, ["text", "vision"]),
    "llmc-qwen3moe-fp8-dynamic": (CT, "FP8", CT, None, None, ["text"]),
    "llmc-qwen3moe-nvfp4": (CT, "NVFP4", CT, "W4A4", None, ["text"]),
    "llmc-qwen3moe-nvfp4-sharded": (CT, "NVFP4", CT, "W4A4", None, ["text"]),
    "llmc-qwen3moe-nvfp4a16": (CT, "W4A16_NVFP4", CT, "W4A16", None, ["text"]),
    "llmc-qwen3moe-w4a16": (CT, "W4A16", CT, None, None, ["text"]),
    "modelopt-llama-fp8": (MO, "FP8", "modelopt", None, None, ["text"]),
    "modelopt-llama-nvfp4": (MO, "NVFP4", "modelopt_fp4", "W4A4", None, ["text"]),
    "modelopt-llama-nvfp4-awq": (MO, "NVFP4_AWQ", None, "W4A4", None, ["text"]),
    "modelopt-llama-nvfp4-awq-sharded": (MO, "NVFP4_AWQ", None, "W4A4", None, ["text"]),
    "modelopt-llama-nvfp4-fp8kv": (MO, "NVFP4", "modelopt_fp4", "W4A4", "fp8", ["text"]),
    "modelopt-llama-w4a16-nvfp4": (MO, "W4A16_NVFP4", "modelopt_fp4", "W4A16", None, ["text"]),
    "modelopt-qwen35moe-fp8": (MO, "FP8", "modelopt", None, None, ["text", "vision"]),
    "modelopt-qwen35moe-nvfp4": (MO, "NVFP4", "modelopt_fp4", "W4A4", None, ["text", "vision"]),
    "modelopt-qwen35moe-w4a16-nvfp4": (MO, "W4A16_NVFP4", "modelopt_fp4", "W4A16", None, ["text", "vision"]),
    "modelopt-qwen3moe-fp8": (MO, "FP8", "modelopt", None, None, ["text"]),
    "modelopt-qwen3moe-nvfp4": (MO, "NVFP4", "modelopt_fp4", "W4A4", None, ["text"]),
    "modelopt-qwen3moe-nvfp4-awq": (MO, "NVFP4_AWQ", None, "W4A4", None, ["text"]),
    "modelopt-qwen3moe-w4a16-nvfp4": (MO, "W4A16_NVFP4", "modelopt_fp4", "W4A16", None, ["text"]),
    # Formats beyond NVFP4 (rules/formats.toml; vLLM 0.33.0 auto_gptq.py, auto_awq.py, inc/inc.py, fp8.py, quark/).
    "llmc-llama-fp8-block": (CT, "FP8", CT, None, None, ["text"]),
    "llmc-llama-w8a8-int8": (CT, "W8A8", CT, None, None, ["text"]),
    "llmc-llama-w4a8-int": (CT, "W4A8", CT, None, None, ["text"]),
    "llmc-llama-mxfp4": (CT, "MXFP4", CT, None, None, ["text"]),
    # FP8 attention + NVFP4 experts: the experts resolve through `model.layers.N.mlp.experts` in quantized_layers.
    "modelopt-qwen3moe-mixed": (MO, "MIXED_PRECISION", "modelopt_mixed", "W4A4", None, ["text"]),
    "modelopt-llama-mxfp8": (MO, "MXFP8", "modelopt_mxfp8", None, None, ["text"]),
    # gptq -> auto_gptq, awq -> auto_awq (override_quantization_method), auto-round -> inc.
    "autoround-llama-gptq": ("gptq", "W4A16", "auto_gptq", None, None, ["text"]),
    "autoround-llama-awq": ("awq", "W4A16", "auto_awq", None, None, ["text"]),
    "autoround-llama-int": ("auto-round", "W4A16", "inc", None, None, ["text"]),
    "autoround-llama-mxfp4": ("auto-round", "MXFP4", "inc", None, None, ["text"]),
    # INCConfig refuses data_type nv_fp and packing auto_round:fp8_static.
    "autoround-llama-nvfp4": ("auto-round", "NVFP4", None, "W4A4", None, ["text"]),
    "autoround-llama-fp8-static": ("auto-round", "FP8", None, None, None, ["text"]),
    "transformers-llama-fp8-block": ("fp8", "FP8", "fp8", None, None, ["text"]),
    "transformers-qwen3moe-fp8-block": ("fp8", "FP8", "fp8", None, None, ["text"]),
    "quark-llama-fp8": ("quark", "FP8", "quark", None, None, ["text"]),
    "quark-llama-mxfp4": ("quark", "MXFP4", "quark", None, None, ["text"]),
    "sourcebuilt-gptoss-mxfp4": ("mxfp4", "MXFP4", "gpt_oss_mxfp4", None, None, ["text"]),
}
# Who wrote each new-format fixture, as the report names it (from the versions the producers record).
MADE_BY = {
    "autoround-llama-gptq": "Intel AutoRound 0.16.1",
    "autoround-llama-nvfp4": "Intel AutoRound 0.16.1",
    "transformers-qwen3moe-fp8-block": "transformers FineGrainedFP8",
    "quark-llama-mxfp4": "AMD Quark 0.13",
    "modelopt-qwen3moe-mixed": "NVIDIA ModelOpt 0.47.0",
    "llmc-llama-w8a8-int8": "llm-compressor / compressed-tensors 0.19.0",
}
# Errors that are the truth about a genuine fixture under upstream vLLM 0.33 (it rejects NVFP4_AWQ).
EXPECTED_ERRORS = {name: {"unsupported-quant-algo"} for name in EXPECTED if "nvfp4-awq" in name}
EXPECTED_ERRORS["autoround-llama-nvfp4"] = {"unsupported-quant-algo"}
EXPECTED_ERRORS["autoround-llama-fp8-static"] = {"unsupported-quant-algo"}
# 128x128 blocks on the tiny llama's 64-wide k_proj / v_proj: vLLM refuses every tensor-parallel size.
EXPECTED_ERRORS["llmc-llama-fp8-block"] = {"block-fp8-tp-sizes"}


@pytest.mark.parametrize("name", sorted(MADE_BY))
def test_made_by(name: str) -> None:
    assert analyze(str(GENUINE / name), headers_only=True).report.checkpoint["made_by"] == MADE_BY[name]


def test_every_fixture_has_expectations() -> None:
    assert genuine_entries(), "fixtures/genuine is empty"
    assert set(genuine_entries()) == set(EXPECTED)


def test_detection(genuine: str) -> None:
    report = analyze(str(GENUINE / genuine)).report.to_dict()
    ck = report["checkpoint"]
    got = (
        ck["producer"],
        ck["quant_algo"],
        ck["vllm_quantization"],
        ck["activation_mode"],
        ck["kv_cache"],
        ck["components"],
    )
    assert got == EXPECTED[genuine]


def test_no_false_error(genuine: str) -> None:
    report = analyze(str(GENUINE / genuine)).report
    errors = {f.slug for f in report.findings if f.severity == "error"}
    assert errors == EXPECTED_ERRORS.get(genuine, set()), [f.message for f in report.findings]


def test_scheme_table_covers_every_linear(genuine: str) -> None:
    """Every quantized module on disk is a row, and rows agree on the scheme family with their config."""
    result = analyze(str(GENUINE / genuine), headers_only=True)
    det = result.detection
    quantized_modules = {
        m.name
        for m in result.checkpoint.modules.values()
        if m.weight is not None and m.weight.dtype not in ("BF16", "F16", "F32")
    }
    assert quantized_modules <= set(det.row_by_name)
    for row in det.rows:
        if row.disk.quantized:
            assert row.declared.kind == row.disk.kind or {row.declared.kind, row.disk.kind} <= {"int4", "int8"}, row


@pytest.mark.parametrize("name", ["llmc-qwen3moe-nvfp4", "modelopt-qwen3moe-nvfp4"])
def test_moe_experts_are_grouped_per_layer(name: str) -> None:
    ckpt = analyze(str(GENUINE / name), headers_only=True).checkpoint
    assert len(ckpt.experts) == 2
    for group in ckpt.experts.values():
        assert group.ids == (0, 1, 2, 3)
        assert all(set(projs) == {"gate_proj", "up_proj", "down_proj"} for projs in group.experts.values())


def test_modelopt_vision_tower_is_unquantized_by_exclusion() -> None:
    det = analyze(str(GENUINE / "modelopt-qwen35moe-nvfp4"), headers_only=True).detection
    vision = [r for r in det.rows if r.component == "vision"]
    assert vision and all(not r.declared.quantized and r.covered_by for r in vision)


def test_ct_regex_ignore_uses_vllm_side_names(fixture_copy) -> None:
    """vllm-facts.md 2.5: `re:model\\.visual.*` never matches (vLLM sees `visual.*`); `re:.*visual.*` does."""
    for recipe, quantized in (("ct-ignore-hf-regex", True), ("ct-ignore-any-visual", False)):
        folder = fixture_copy(BY_NAME[recipe].fixture)
        BY_NAME[recipe].apply(folder)
        det = analyze(str(folder), headers_only=True).detection
        vision = [r for r in det.rows if r.component == "vision"]
        assert vision and all(r.declared.quantized == quantized for r in vision), recipe
        shutil.rmtree(folder)


def _recipe_copy(fixture_copy, name: str):
    recipe = BY_NAME[name]
    folder = fixture_copy(recipe.fixture)
    recipe.apply(folder)
    return analyze(str(folder), headers_only=True).detection


def test_hf_quant_config_only_when_config_json_has_none(fixture_copy) -> None:
    det = _recipe_copy(fixture_copy, "hf-quant-config-only")
    assert det.config.source == "hf_quant_config.json" and det.vllm_quantization == "modelopt_fp4"


def test_legacy_nested_w4a16_nvfp4_is_rejected(fixture_copy) -> None:
    """A hf_quant_config.json-only W4A16_NVFP4 checkpoint fails vLLM's nested normalisation (vllm-facts.md 1.1)."""
    det = _recipe_copy(fixture_copy, "legacy-nested-w4a16-nvfp4")
    assert det.vllm_quantization is None and "Unknown ModelOpt quant algo: W4A16_NVFP4" in det.rejection


def test_modelopt_nvfp4_with_null_input_activations_is_weight_only(fixture_copy) -> None:
    det = _recipe_copy(fixture_copy, "modelopt-nvfp4-null-inputs")
    assert det.vllm_quantization == "modelopt_fp4"
    assert {r.declared.activation for r in det.rows if r.declared.quantized} == {"A16"}


@pytest.mark.parametrize("name", ["llmc-qwen35moe-nvfp4", "modelopt-qwen3moe-nvfp4", "modelopt-llama-nvfp4"])
def test_shared_lookups_answer_as_the_per_name_functions(name: str) -> None:
    """Detection shares one component lookup per experts prefix and per module; the answers are those of the plain
    per-name functions."""
    from ckpt_tools.detect.resolve import component_of, is_linear_candidate

    analysis = analyze(str(GENUINE / name), headers_only=True)
    ckpt, det = analysis.checkpoint, analysis.detection
    family = det.family
    assert [r.component for r in det.rows] == [component_of(r.name + ".", family) for r in det.rows]
    assert {r.name for r in det.rows} == {m for m, mod in ckpt.modules.items() if is_linear_candidate(mod)}
    naive = sorted({component_of(m + "." if m else "", family) for m in ckpt.modules}, key=lambda c: (c != "text", c))
    assert list(det.components) == naive
    assert any(r.is_expert for r in det.rows) or name == "modelopt-llama-nvfp4"


@pytest.mark.parametrize("name", ["llmc-qwen35moe-nvfp4", "modelopt-qwen3moe-nvfp4"])
def test_component_lookup_answers_as_component_of(name: str) -> None:
    from ckpt_tools.detect.resolve import component_lookup, component_of

    analysis = analyze(str(GENUINE / name), headers_only=True)
    family = analysis.detection.family
    # Mis-nested names and markers below a root share four-segment heads with genuine ones (the lookup's head cache).
    odd = [
        "model.language_model.visual.blocks.0.attn.qkv.weight",
        "model.language_model.visual.blocks.1.mlp.fc1.weight",
        "model.language_model.layers.0.visual.x.weight",
        "model.language_model.layers.0.mtp.fc.weight",
        "model.visual.blocks.0.attn.qkv.weight",
        "model.visual.blocks.0.mlp.fc1.weight",
        "mtp.layers.0.x",
        "weight",
        "a.b",
    ]
    names = [*analysis.checkpoint.tensors, *odd, *odd[::-1]]
    lookup = component_lookup(family)
    assert [lookup(n) for n in names] == [component_of(n, family) for n in names]
    assert {component_of(n, family) for n in names} >= {"text", "vision"}
