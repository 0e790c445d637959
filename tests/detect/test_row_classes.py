"""Detection and the config-side rules judge per row class (`Detection.classes`): checkpoints whose members differ
(one expert with another layout, one stored BF16, an expert id written twice, a forced-unquantized pattern or an
exclude entry naming one expert) get exactly the rows a per-module pass gives, and findings that name the odd
members only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.synth import write_checkpoint
from ckpt_tools import analyze
from ckpt_tools.census import LAYER, layer_table
from ckpt_tools.detect import resolve
from ckpt_tools.detect.resolve import (
    _resolve_method,
    _Resolver,
    component_of,
    detect,
    effective_quant_config,
    is_linear_candidate,
    modelopt_algo,
)
from ckpt_tools.detect.schemes import disk_scheme
from ckpt_tools.knowledge.architectures import family_for
from ckpt_tools.knowledge.runtimes import runtime as load_runtime
from ckpt_tools.model.schemes import UNQUANTIZED
from ckpt_tools.read import open_source
from ckpt_tools.read.loader import load_checkpoint

HIDDEN, INTER = 64, 32


def _nvfp4(prefix: str, out: int, inp: int, *, input_scale: bool = True) -> list[tuple[str, str, list[int]]]:
    t = [
        (f"{prefix}.weight", "U8", [out, inp // 2]),
        (f"{prefix}.weight_scale", "F8_E4M3", [out, inp // 16]),
        (f"{prefix}.weight_scale_2", "F32", []),
    ]
    return t + ([(f"{prefix}.input_scale", "F32", [])] if input_scale else [])


def _moe_checkpoint(folder: Path, config: dict) -> Path:
    """Two Qwen3-MoE layers of 4 experts, ModelOpt NVFP4 names, with odd members: layer 1 expert 2's up_proj has no
    input scale (another layout), layer 0 expert 3's down_proj is stored BF16, layer 1 holds both `experts.1` and
    `experts.01` (one expert id, two modules), and a short `blk.experts` bank whose prefix fixes no component."""
    tensors: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", "BF16", [128, HIDDEN])]
    for layer in range(2):
        p = f"model.layers.{layer}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors += _nvfp4(f"{p}.self_attn.{proj}", HIDDEN, HIDDEN)
        tensors.append((f"{p}.mlp.gate.weight", "BF16", [4, HIDDEN]))
        tensors.append((f"{p}.input_layernorm.weight", "BF16", [HIDDEN]))
        for e in range(4):
            for proj, out, inp in (
                ("gate_proj", INTER, HIDDEN),
                ("up_proj", INTER, HIDDEN),
                ("down_proj", HIDDEN, INTER),
            ):
                name = f"{p}.mlp.experts.{e}.{proj}"
                if (layer, e, proj) == (0, 3, "down_proj"):
                    tensors.append((f"{name}.weight", "BF16", [out, inp]))
                else:
                    tensors += _nvfp4(name, out, inp, input_scale=(layer, e, proj) != (1, 2, "up_proj"))
        if layer == 1:
            tensors += _nvfp4(f"{p}.mlp.experts.01.gate_proj", INTER, HIDDEN)
    for e in range(2):
        tensors += _nvfp4(f"blk.experts.{e}.w1", INTER, HIDDEN)
    tensors += [("model.norm.weight", "BF16", [HIDDEN]), ("lm_head.weight", "BF16", [128, HIDDEN])]
    base = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_experts": 4,
        "num_hidden_layers": 2,
        "hidden_size": HIDDEN,
    }
    write_checkpoint(folder, tensors, shards=2, config={**base, **config})
    return folder


MODELOPT = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"]}}


def _reference_rows(ckpt) -> list[tuple]:
    """The rows as a pass over every module gives them (the way detection worked before row classes)."""
    rt = load_runtime(None)
    family = family_for(ckpt.architecture, ckpt.model_type)
    view = effective_quant_config(ckpt)
    method, _, _ = _resolve_method(view, rt, ckpt.model_type)
    producer = "modelopt" if method == "modelopt" else str(method)
    resolver = _Resolver(ckpt, view, family, rt, producer, modelopt_algo(view), method)
    rows = []
    for name, module in ckpt.modules.items():
        if not is_linear_candidate(module):
            continue
        forced = next((r for p, r in resolver.forced_unquantized if p.search(name)), None)
        where = module.expert
        if forced is not None:
            declared = (UNQUANTIZED, f"(built unquantized by vLLM: {forced})", None)
        elif where is not None:
            declared = resolver._declared(f"{where[0]}.0.{where[2]}", where[0])
        else:
            declared = resolver._declared(name, None)
        component = component_of(name + "." if name else ".", family)
        rows.append((name, component, declared[0], disk_scheme(module), declared[1], declared[2]))
    return sorted(rows, key=lambda r: r[0])


def _check_rows(ckpt, det) -> None:
    assert [tuple(r) for r in det.rows] == _reference_rows(ckpt)
    # Every row in exactly one class, with the class's fields.
    from_classes = sorted(
        ((n, c.component, c.declared, c.disk, c.covered_by, c.group) for c in det.classes for n in c.names),
        key=lambda r: r[0],
    )
    assert from_classes == [tuple(r) for r in det.rows]
    assert [c.names[0] for c in det.classes] == sorted(c.names[0] for c in det.classes)
    for c in det.classes:
        assert list(c.names) == sorted(c.names)
        assert len({ckpt.layouts.of[n] for n in c.names}) == 1 and ckpt.layouts.of[c.names[0]] == c.layout


def test_odd_members_get_their_own_rows(tmp_path: Path) -> None:
    ckpt = load_checkpoint(open_source(str(_moe_checkpoint(tmp_path / "m", MODELOPT))))
    det = detect(ckpt)
    _check_rows(ckpt, det)
    rows = det.row_by_name
    assert rows["model.layers.0.mlp.experts.3.down_proj"].disk.kind == "unquantized"
    assert rows["model.layers.1.mlp.experts.2.up_proj"].disk.activation == "A16"
    assert rows["model.layers.1.mlp.experts.1.up_proj"].disk.activation == "A4"
    # Both spellings of expert 1 are modules of their own, and both are rows.
    assert "model.layers.1.mlp.experts.01.gate_proj" in rows and "model.layers.1.mlp.experts.1.gate_proj" in rows
    # The expert bank under a two-segment prefix: its members' components are found one by one.
    assert rows["blk.experts.1.w1"].component == component_of("blk.experts.1.w1.", det.family)
    assert det.disk_activation_mode == "mixed" and det.activation_mode == "W4A4"


def test_forced_unquantized_pattern_naming_one_expert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model file's forced-unquantized patterns read each module's own name, not expert 0's."""
    pattern = re.compile(r"\.experts\.2\.gate_proj$")
    monkeypatch.setattr(_Resolver, "_applicable_forced_unquantized", lambda self: [(pattern, "test pattern")])
    ckpt = load_checkpoint(open_source(str(_moe_checkpoint(tmp_path / "m", MODELOPT))))
    det = detect(ckpt)
    _check_rows(ckpt, det)
    forced = sorted(r.name for r in det.rows if r.covered_by == "(built unquantized by vLLM: test pattern)")
    assert forced == ["model.layers.0.mlp.experts.2.gate_proj", "model.layers.1.mlp.experts.2.gate_proj"]
    assert det.row_by_name["model.layers.0.mlp.experts.1.gate_proj"].declared.quantized


def test_exclude_entry_naming_one_expert_follows_vllm(tmp_path: Path) -> None:
    """vLLM resolves a fused MoE layer on expert 0's names and the experts prefix: an exclude entry that names one
    other expert changes nothing, one that names expert 0 unquantizes the whole projection of that layer."""
    cfg = {
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "ignore": ["lm_head", "model.layers.0.mlp.experts.3.up_proj", "model.layers.1.mlp.experts.0.down_proj"],
        }
    }
    ckpt = load_checkpoint(open_source(str(_moe_checkpoint(tmp_path / "m", cfg))))
    det = detect(ckpt)
    _check_rows(ckpt, det)
    rows = det.row_by_name
    assert rows["model.layers.0.mlp.experts.3.up_proj"].declared.quantized
    assert all(not rows[f"model.layers.1.mlp.experts.{e}.down_proj"].declared.quantized for e in range(4))
    assert rows["model.layers.0.mlp.experts.0.down_proj"].declared.quantized


def test_compressed_tensors_ignore_regex_on_one_expert(tmp_path: Path) -> None:
    cfg = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                    "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                }
            },
            "ignore": ["lm_head", "re:.*mlp\\.gate$", "re:.*experts\\.0\\.gate_proj$", "re:.*experts\\.2\\.up_proj$"],
        }
    }
    ckpt = load_checkpoint(open_source(str(_moe_checkpoint(tmp_path / "m", cfg))))
    det = detect(ckpt)
    _check_rows(ckpt, det)
    rows = det.row_by_name
    assert not rows["model.layers.1.mlp.experts.3.gate_proj"].declared.quantized  # expert 0's name decides
    assert rows["model.layers.1.mlp.experts.2.up_proj"].declared.quantized


def test_findings_name_the_odd_members(tmp_path: Path) -> None:
    result = analyze(str(_moe_checkpoint(tmp_path / "m", MODELOPT)), headers_only=True)
    by_code = {}
    for f in result.report.findings:
        by_code.setdefault(f.code, []).append(f)
    # The BF16 expert under an NVFP4 config: built quantized, stored unquantized (beside the BF16 routers, which
    # Qwen3MoeForCausalLM builds with the quant config).
    (ck301,) = [f for f in by_code["CK301"] if f.details.get("direction") == "declared-quantized-disk-unquantized"]
    assert list(ck301.tensors) == [
        "model.layers.0.mlp.experts.3.down_proj",
        "model.layers.0.mlp.gate",
        "model.layers.1.mlp.gate",
    ]
    # The kernel facts count every module the config quantizes, and nothing else, on each GPU.
    quantized = sum(1 for r in result.detection.rows if r.declared.quantized)
    for uses in result.report.checkpoint["kernels"]["hardware"].values():
        assert sum(u["modules"] for u in uses) == quantized


def test_layer_table_matches_a_pass_over_the_rows(tmp_path: Path) -> None:
    ckpt = load_checkpoint(open_source(str(_moe_checkpoint(tmp_path / "m", MODELOPT))))
    det = detect(ckpt)
    expected: dict[str, dict[str, int]] = {}
    for r in det.rows:
        m = LAYER.match(r.name)
        same = r.declared == r.disk or (not r.disk.quantized and not r.declared.quantized)
        label = r.declared.label if same else f"{r.declared.label} (disk: {r.disk.label})"
        counts = expected.setdefault(m.group(1) if m else r.name, {})
        counts[label] = counts.get(label, 0) + 1
    table = layer_table(det)
    assert {t.layer: list(t.schemes.items()) for t in table} == {k: list(v.items()) for k, v in expected.items()}
    layers = {t.layer: t for t in table}
    # Layer 0: the BF16 expert projection and the BF16 router; layer 1: the expert without an input scale.
    assert layers["model.layers.0"].schemes["W4A4 NVFP4 (disk: BF16)"] == 2
    assert layers["model.layers.1"].schemes["W4A4 NVFP4 (disk: W4A16 NVFP4)"] == 1


def test_row_classes_hold_on_every_fixture(genuine_root: Path) -> None:
    for folder in sorted(p for p in genuine_root.iterdir() if p.is_dir() and any(p.glob("*.safetensors"))):
        ckpt = load_checkpoint(open_source(str(folder)))
        det = resolve.detect(ckpt)
        from_classes = sorted(
            ((n, c.component, c.declared, c.disk, c.covered_by, c.group) for c in det.classes for n in c.names),
            key=lambda r: r[0],
        )
        assert from_classes == [tuple(r) for r in det.rows], folder.name
