"""Config-level corruption recipes, shared by the tests (tests/detect/test_genuine_fixtures.py) and the vLLM conformance run
(bench/conformance/run.py), so both judge the same corrupted copies.

Each recipe edits a writable copy of a genuine fixture in place. Tensor-level corruptions live in the rule case
files (tests/rule_cases/*.toml, applied by tests/case_ops.py); these are the config edits the detection tests make.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.corrupt import edit_json


@dataclass(frozen=True)
class Recipe:
    name: str
    fixture: str  # a fixtures/genuine entry
    apply: Callable[[Path], None]
    what: str


def drop_config_quantization(folder: Path) -> None:
    """config.json loses `quantization_config`: vLLM falls back to hf_quant_config.json (vllm-facts.md 1.1)."""
    edit_json(folder / "config.json", lambda c: c.pop("quantization_config"))


def null_input_activations(folder: Path) -> None:
    """Every config group of config.json's quantization_config gets `input_activations: null`."""

    def edit(cfg: dict) -> None:
        for group in cfg["quantization_config"]["config_groups"].values():
            group["input_activations"] = None

    edit_json(folder / "config.json", edit)


def set_vision_ignore(pattern: str) -> Callable[[Path], None]:
    """Replace the `model.visual*` ignore entries of a compressed-tensors config with one `pattern`."""

    def apply(folder: Path) -> None:
        def edit(cfg: dict) -> None:
            q = cfg["quantization_config"]
            q["ignore"] = [e for e in q["ignore"] if not e.startswith("model.visual")] + [pattern]

        edit_json(folder / "config.json", edit)

    return apply


def fp8_block_config(ignored: tuple[str, ...] = ()) -> Callable[[Path], None]:
    """config.json says DeepSeek-style block FP8 (`quant_method: fp8`, 128x128 blocks), optionally with
    `ignored_layers`: vLLM's Fp8Config, not compressed-tensors, then decides every layer."""

    def apply(folder: Path) -> None:
        def edit(cfg: dict) -> None:
            cfg["quantization_config"] = {
                "quant_method": "fp8",
                "activation_scheme": "dynamic",
                "weight_block_size": [128, 128],
            }
            if ignored:
                cfg["quantization_config"]["ignored_layers"] = list(ignored)

        edit_json(folder / "config.json", edit)

    return apply


RECIPES: tuple[Recipe, ...] = (
    Recipe(
        "hf-quant-config-only",
        "modelopt-llama-nvfp4",
        drop_config_quantization,
        "config.json has no quantization_config; hf_quant_config.json (nested NVFP4) is used",
    ),
    Recipe(
        "legacy-nested-w4a16-nvfp4",
        "modelopt-llama-w4a16-nvfp4",
        drop_config_quantization,
        "only the nested hf_quant_config.json says W4A16_NVFP4",
    ),
    Recipe(
        "modelopt-nvfp4-null-inputs",
        "modelopt-llama-nvfp4",
        null_input_activations,
        "NVFP4 config groups with input_activations null (vLLM downgrades to W4A16)",
    ),
    Recipe(
        "ct-ignore-hf-regex",
        "llmc-qwen35moe-nvfp4",
        set_vision_ignore("re:model\\.visual.*"),
        "vision tower ignored by an HF-side regex, which vLLM matches against vLLM names",
    ),
    Recipe(
        "ct-ignore-any-visual",
        "llmc-qwen35moe-nvfp4",
        set_vision_ignore("re:.*visual.*"),
        "vision tower ignored by a regex that matches the vLLM names",
    ),
    Recipe(
        "fp8-block-config",
        "llmc-llama-fp8-dynamic",
        fp8_block_config(),
        "quantization_config replaced by a block-FP8 `quant_method: fp8` config (vLLM Fp8Config)",
    ),
    Recipe(
        "fp8-block-config-ignored",
        "llmc-llama-fp8-dynamic",
        fp8_block_config(("model.layers.0.mlp.down_proj",)),
        "block-FP8 Fp8Config with one layer in ignored_layers",
    ),
)

BY_NAME = {r.name: r for r in RECIPES}
