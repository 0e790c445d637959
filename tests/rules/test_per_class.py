"""The header rules judge a layout or a row class once and list its members only when there is a finding
(rules/_classes.py, `Checkpoint.layouts`). These tests compare every such rule with the per-module path on
checkpoints whose members of one class differ: the same checkpoint analysed with one layout per module (so every
class has a single member and a class shortcut cannot share a verdict) must give byte-identical findings."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from ckpt_tools.detect.resolve import detect
from ckpt_tools.knowledge.hardware import profiles as hardware_profiles
from ckpt_tools.model import checkpoint as checkpoint_module
from ckpt_tools.model import views
from ckpt_tools.model.checkpoint import Checkpoint
from ckpt_tools.model.layouts import Layouts, group_checkpoint
from ckpt_tools.read import open_source
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.rules._classes import name_templates
from ckpt_tools.rules._experts import _gaps, configured_experts, non_expert_modules
from ckpt_tools.rules.base import Context, find_rule
from tests import case_ops
from tests.corrupt import copy_fixture

RULES = ("CK105", "CK201", "CK202", "CK203", "CK302", "CK308", "CK309", "CK402", "CK403", "CK404")

# Several defects on members of classes that other members share unharmed: scales of the wrong shape on two
# experts of different layers, one of the wrong dtype, an expert lacking one scale, another lacking a whole
# projection, orphan scales on two routers of one layout.
MOE_DEFECTS: list[dict[str, Any]] = [
    {"op": "retype", "tensor": "model.layers.0.mlp.experts.1.up_proj.weight_scale", "shape": [64, 8]},
    {"op": "retype", "tensor": "model.layers.1.mlp.experts.2.up_proj.weight_scale", "shape": [64, 8]},
    {"op": "retype", "tensor": "model.layers.1.mlp.experts.3.down_proj.weight_scale", "dtype": "BF16"},
    {"op": "drop", "pattern": r"^model\.layers\.0\.mlp\.experts\.2\.gate_proj\.input_scale$"},
    {"op": "drop", "pattern": r"^model\.layers\.1\.mlp\.experts\.0\.up_proj\."},
    {
        "op": "copy_tensor",
        "from": "model.layers.0.mlp.experts.0.down_proj.input_scale",
        "to": "model.layers.0.mlp.gate.input_scale",
    },
    {
        "op": "copy_tensor",
        "from": "model.layers.0.mlp.experts.0.down_proj.input_scale",
        "to": "model.layers.1.mlp.gate.input_scale",
    },
]

CASES = {
    "moe-members-differ": ("modelopt-qwen3moe-nvfp4", MOE_DEFECTS),
    "gptq-every-member": (
        "autoround-llama-gptq",
        [
            {"op": "edit_json", "file": "config.json", "set": {"quantization_config.bits": 8}},
            {"op": "drop", "pattern": r"^model\.layers\.1\.mlp\.up_proj\.scales$"},
        ],
    ),
    # Every module of every class at fault (expert classes hold a layer's experts): all members listed.
    "fp8-block-config-edited": (
        "transformers-qwen3moe-fp8-block",
        [{"op": "edit_json", "file": "config.json", "set": {"quantization_config.weight_block_size": [32, 32]}}],
    ),
    "fp8-block-one-expert-off": (
        "transformers-qwen3moe-fp8-block",
        [{"op": "retype", "tensor": "model.layers.0.mlp.experts.1.up_proj.weight_scale_inv", "shape": []}],
    ),
    # One layout, one scheme, two names: the config sizes `mlp.gate_proj` and not `feed_forward.gate_proj`.
    "transposed-under-its-own-name": (
        "modelopt-llama-nvfp4",
        [
            {"op": "retype", "tensor": "model.layers.0.mlp.gate_proj.weight", "shape": [64, 256]},
            *(
                {
                    "op": "copy_tensor",
                    "from": f"model.layers.0.mlp.gate_proj.{suffix}",
                    "to": f"model.layers.0.feed_forward.gate_proj.{suffix}",
                }
                for suffix in ("input_scale", "weight_scale_2", "weight_scale", "weight")
            ),
        ],
    ),
    "misnested-one-layer": (
        "llmc-qwen35moe-nvfp4",
        [
            {
                "op": "rename",
                "pattern": r"^model\.language_model\.layers\.1\.mlp\.experts\.",
                "repl": "model.language_model.language_model.layers.1.mlp.experts.",
            }
        ],
    ),
}


def _one_layout_per_module(ckpt: Checkpoint) -> None:
    """Give every module a layout id of its own (the per-module path), before anything reads the layouts: the
    checkpoint's grouping view, held for it in `model.views` as computed but for the layouts."""
    modules, _layouts, experts = group_checkpoint(ckpt.tensors.values())
    names = tuple(modules)
    layouts = tuple(tuple((s, t.dtype, t.shape) for s, t in modules[n].tensors.items()) for n in names)
    of = MappingProxyType({n: i for i, n in enumerate(names)})
    grouped = (MappingProxyType(modules), Layouts(of, layouts, tuple((n,) for n in names)), MappingProxyType(experts))
    views.remembered(ckpt, checkpoint_module._grouped.__wrapped__, lambda: grouped)  # type: ignore[attr-defined]


def _findings(folder: Path, per_module: bool) -> dict[str, list[dict[str, Any]]]:
    ckpt = load_checkpoint(open_source(str(folder)))
    if per_module:
        _one_layout_per_module(ckpt)
    det = detect(ckpt)
    ctx = Context(ckpt=ckpt, det=det, hardware=hardware_profiles(), target=str(folder))
    out = {}
    for code in RULES:
        rule = find_rule(code)
        assert rule is not None
        out[code] = [{**f.to_dict(), "all": list(f.all_tensors)} for f in rule().check(ctx)]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_class_shortcuts_match_the_per_module_path(case: str, tmp_path: Path) -> None:
    fixture, steps = CASES[case]
    folder = copy_fixture(fixture, tmp_path)
    case_ops.apply(folder, steps)
    shared, alone = _findings(folder, per_module=False), _findings(folder, per_module=True)
    assert shared == alone
    assert any(shared.values()), "the corrupted checkpoint must have findings, or the comparison proves nothing"


def test_moe_defects_are_reported_on_the_members_that_have_them(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-qwen3moe-nvfp4", tmp_path)
    case_ops.apply(folder, MOE_DEFECTS)
    found = _findings(folder, per_module=False)
    shapes = [f for f in found["CK403"] if f["details"]["problem"] == "shape"]
    assert [f["tensors"] for f in shapes] == [
        [
            "model.layers.0.mlp.experts.1.up_proj.weight_scale",
            "model.layers.1.mlp.experts.2.up_proj.weight_scale",
        ]
    ]
    (orphans,) = found["CK302"]
    assert orphans["tensors"] == ["model.layers.0.mlp.gate.input_scale", "model.layers.1.mlp.gate.input_scale"]
    (gaps,) = found["CK402"]
    assert "model.layers.1.mlp.experts.0.up_proj.weight" in gaps["all"]
    assert "model.layers.0.mlp.experts.2.gate_proj.input_scale" in gaps["all"]


def _reference_gaps(ckpt: Checkpoint) -> list[tuple[str, dict[str, tuple[int, ...]], tuple[int, ...]]]:
    """Per-expert gaps the direct way: every expert's `<proj>.<suffix>` set against the layer's union."""
    expected = configured_experts(ckpt)
    out = []
    for layer, group in sorted(ckpt.experts.items()):
        have = {e: {f"{p}.{s}" for p, m in projs.items() for s in m.tensors} for e, projs in group.experts.items()}
        union = set().union(*have.values())
        missing: dict[str, list[int]] = {}
        for e, keys in sorted(have.items()):
            for key in union - keys:
                missing.setdefault(key, []).append(e)
        absent = tuple(e for e in range(expected) if e not in have) if expected and max(have) < expected else ()
        if missing or absent:
            out.append((layer, {k: tuple(v) for k, v in sorted(missing.items())}, absent))
    return out


@pytest.mark.parametrize(
    "steps",
    [
        [],
        [{"op": "drop", "pattern": r"^model\.layers\.1\.mlp\.experts\.2\.up_proj\."}],
        [{"op": "drop", "pattern": r"^model\.layers\.0\.mlp\.experts\.1\..*\.input_scale$"}],
        [{"op": "drop", "pattern": r"^model\.layers\.1\.mlp\.experts\.3\."}],
        [{"op": "edit_json", "file": "config.json", "set": {"num_local_experts": 8}}],
    ],
    ids=["genuine", "whole-projection", "one-suffix", "whole-expert", "more-configured"],
)
def test_expert_gaps_match_the_direct_computation(steps: list[dict[str, Any]], tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-qwen3moe-nvfp4", tmp_path)
    case_ops.apply(folder, steps)
    ckpt = load_checkpoint(open_source(str(folder)))
    got = [(g.layer, dict(g.missing), g.absent) for g in _gaps(ckpt)]
    assert got == _reference_gaps(ckpt)
    assert bool(got) == bool(steps)


def test_non_expert_modules_are_every_module_without_an_expert_slot(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-qwen3moe-nvfp4", tmp_path)
    # `experts.01` names the same slot as `experts.1`, and `experts.x` none: the C-level count no longer adds up
    case_ops.apply(
        folder,
        [
            {
                "op": "copy_tensor",
                "from": "model.layers.0.mlp.experts.1.up_proj.weight",
                "to": "model.layers.0.mlp.experts.01.up_proj.weight",
            },
            {
                "op": "copy_tensor",
                "from": "model.layers.0.mlp.gate.weight",
                "to": "model.layers.0.mlp.experts.x.gate.weight",
            },
        ],
    )
    for target in (folder, copy_fixture("modelopt-qwen3moe-nvfp4", tmp_path / "genuine")):
        ckpt = load_checkpoint(open_source(str(target)))
        direct = tuple(n for n, m in ckpt.modules.items() if m.expert is None)
        assert non_expert_modules(ckpt) == direct


def test_name_templates_replace_digits_and_keep_names_holding_the_separator() -> None:
    assert name_templates(["model.layers.12.mlp.experts.3.w1", "lm_head"]) == [
        "model.layers.##.mlp.experts.#.w#",
        "lm_head",
    ]
    odd = ["a.1", "b\n2"]
    assert name_templates(odd) == odd
    assert name_templates([]) == []
