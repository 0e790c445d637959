"""Regression tests for disagreements with vLLM found by bench/conformance (vLLM's own code, 0.33.0).

Each test reproduces one corrected verdict of ckpt's detection on a corrupted copy from tests/config_recipes.py.
"""

from __future__ import annotations

from ckpt_tools import analyze
from tests.config_recipes import BY_NAME


def _detect(fixture_copy, name: str):
    recipe = BY_NAME[name]
    folder = fixture_copy(recipe.fixture)
    recipe.apply(folder)
    return analyze(str(folder), headers_only=True).detection


def test_fp8_config_quantizes_every_linear_but_the_head(fixture_copy) -> None:
    """vLLM Fp8Config.get_quant_method: FP8 for every LinearBase; the ParallelLMHead stays unquantized.
    ckpt used to call every layer of a `quant_method: fp8` checkpoint unquantized."""
    det = _detect(fixture_copy, "fp8-block-config")
    assert det.vllm_quantization == "fp8" and det.rejection is None
    declared = {r.name: r.declared for r in det.rows}
    assert not declared.pop("lm_head").quantized
    assert declared and {(s.kind, s.activation, s.detail) for s in declared.values()} == {("fp8", "A8", "block")}


def test_fp8_config_ignored_layers_match_exactly(fixture_copy) -> None:
    det = _detect(fixture_copy, "fp8-block-config-ignored")
    row = det.row_by_name["model.layers.0.mlp.down_proj"]
    assert not row.declared.quantized and row.covered_by == "model.layers.0.mlp.down_proj"
    # Exact names only: the same projection of the next layer is still quantized.
    assert det.row_by_name["model.layers.1.mlp.down_proj"].declared.kind == "fp8"


def test_serve_flags_blocks_an_unreadable_config(fixture_copy) -> None:
    """vLLM's ModelConfig cannot be built from a config.json that is not JSON: `ckpt serve-flags` used to emit a
    command anyway (conformance check 3: vLLM 0.33.0 `get_config` raises 'is not a valid JSON file')."""
    from ckpt_tools.serve import serve_flags

    folder = fixture_copy("llmc-llama-nvfp4")
    (folder / "config.json").write_text("{ not json")
    plan = serve_flags(str(folder))
    assert plan.blocked and "config.json cannot be read" in plan.blocked
    (folder / "config.json").unlink()
    assert "no config.json" in serve_flags(str(folder)).blocked


def test_serve_flags_does_not_block_a_readable_config(fixture_copy) -> None:
    assert serve_flags_blocked(fixture_copy("llmc-llama-nvfp4")) is None


def serve_flags_blocked(folder):
    from ckpt_tools.serve import serve_flags

    return serve_flags(str(folder)).blocked


def _routers_not_ignored(fixture_copy, fixture: str):
    from tests.corrupt import edit_json

    folder = fixture_copy(fixture)
    edit_json(
        folder / "config.json",
        lambda c: c["quantization_config"].__setitem__(
            "ignore", [e for e in c["quantization_config"]["ignore"] if not e.endswith("mlp.gate")]
        ),
    )
    det = analyze(str(folder), headers_only=True).detection
    return [r for r in det.rows if r.name.endswith("mlp.gate")]


def test_qwen3_moe_router_follows_the_quant_config(fixture_copy) -> None:
    """vLLM 0.33.0 qwen3_moe.py: GateLinear(..., quant_config=quant_config). With a "Linear" target and no ignore
    entry the router is quantized; ckpt used to declare it unquantized (rules/modules.toml moe-router)."""
    routers = _routers_not_ignored(fixture_copy, "llmc-qwen3moe-nvfp4")
    assert routers and all((r.declared.kind, r.declared.activation) == ("nvfp4", "A4") for r in routers)


def test_qwen3_5_router_is_built_without_a_quant_config(fixture_copy) -> None:
    """vLLM 0.33.0 qwen3_next.py (used by qwen3_5.py): GateLinear(...) without quant_config."""
    routers = _routers_not_ignored(fixture_copy, "llmc-qwen35moe-nvfp4")
    assert routers and all(not r.declared.quantized and "built unquantized" in r.covered_by for r in routers)
