"""The load model (ckpt_tools/load/model.py) on genuine fixtures and corrupted copies: every tensor accounted for
once, vLLM's names for stacked / expert / KV-scale parameters, and the CLI commands agreeing on a defect."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from ckpt_tools.knowledge import kv_scales, runtimes
from ckpt_tools.load.accounting import LoadAccounting
from ckpt_tools.load.layers import per_layer, tensors_per_layer
from ckpt_tools.load.model import load_accounting
from ckpt_tools.pipeline import analyze
from ckpt_tools.rules._load_findings import findings
from tests import case_ops
from tests.corrupt import GENUINE, copy_fixture

FIXTURES = sorted(p.name for p in GENUINE.iterdir() if p.is_dir())
ROOT = Path(__file__).resolve().parents[2]


@cache
def _accounting(fixture: str) -> LoadAccounting:
    a = analyze(str(GENUINE / fixture), headers_only=True)
    return load_accounting(a.checkpoint, a.detection)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_genuine_fixture_every_tensor_once_and_no_finding(fixture: str) -> None:
    a = analyze(str(GENUINE / fixture), headers_only=True)
    acc = load_accounting(a.checkpoint, a.detection)
    if acc.build_error is None:
        assert sorted(f.tensor for f in acc.tensors) == sorted(a.checkpoint.tensors)
    else:  # a config vLLM refuses: CK310 / CK312 report it
        assert a.detection.rejection is not None
    assert [f for f in findings(acc) if f.code != "CK605"] == []


def _fate(acc: LoadAccounting, tensor: str):
    return next(f for f in acc.tensors if f.tensor == tensor)


def test_stacked_and_expert_parameters_have_vllm_names() -> None:
    acc = _accounting("llmc-qwen3moe-nvfp4")
    k = _fate(acc, "model.layers.0.self_attn.k_proj.weight_packed")
    assert (k.fate, k.parameter, k.shard) == ("loaded", "model.layers.0.self_attn.qkv_proj.weight_packed", "k")
    up = _fate(acc, "model.layers.1.mlp.experts.3.up_proj.weight_scale")
    assert (up.parameter, up.shard) == ("model.layers.1.mlp.experts.w13_weight_scale", "3:w3")


def test_qwen35_names_go_through_the_class_mapper() -> None:
    acc = _accounting("llmc-qwen35moe-nvfp4")
    f = _fate(acc, "model.language_model.layers.0.linear_attn.in_proj_z.weight_packed")
    assert (f.parameter, f.shard) == ("language_model.model.layers.0.linear_attn.in_proj_qkvz.weight_packed", "z")
    assert _fate(acc, "model.visual.blocks.0.attn.qkv.weight").parameter == "visual.blocks.0.attn.qkv.weight"


def test_kv_cache_scales_load_into_the_attention_layer() -> None:
    acc = _accounting("llmc-llama-fp8-dynamic-fp8kv")
    f = _fate(acc, "model.layers.0.self_attn.k_scale")
    assert (f.fate, f.parameter) == ("loaded", "model.layers.0.self_attn.attn.k_scale")
    acc = _accounting("modelopt-llama-nvfp4-fp8kv")
    f = _fate(acc, "model.layers.1.self_attn.v_proj.v_scale")
    assert (f.fate, f.parameter) == ("loaded", "model.layers.1.self_attn.attn.v_scale")


_KV_FIXTURES = ("llmc-llama-fp8-dynamic-fp8kv", "modelopt-llama-nvfp4-fp8kv")


def _kv_fates(fixture: str, runtime: str | None) -> dict[str, tuple[str, str | None]]:
    a = analyze(str(GENUINE / fixture), runtime=runtime, headers_only=True)
    acc = load_accounting(a.checkpoint, a.detection)
    return {f.tensor: (f.fate, f.parameter) for f in acc.tensors if f.tensor.endswith(("k_scale", "v_scale"))}


@pytest.mark.parametrize("fixture", _KV_FIXTURES)
@pytest.mark.parametrize("runtime", sorted(runtimes.runtime_ids()))
def test_kv_scales_load_alike_under_every_runtime_release(fixture: str, runtime: str) -> None:
    """vLLM 0.23.0's model classes (maybe_remap_kv_scale_name) and 0.26.0+'s AutoWeightsLoader
    (get_cache_scale_mapper) rename these spellings onto the same parameters (docs/reference/kv-cache.md)."""
    fates = _kv_fates(fixture, runtime)
    assert len(fates) == 4 and {fate for fate, _ in fates.values()} == {"loaded"}
    assert fates == _kv_fates(fixture, None)


def test_the_load_model_renames_only_what_the_runtime_release_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-release entry of rules/kv_scales.toml decides, not a built-in default: a release whose loader did
    not know ModelOpt's `k_proj.k_scale` would leave those scales unloaded (the parameters keep their default)."""
    import ckpt_tools.load.model as load_model

    def without_modelopt(version: str) -> kv_scales.KvRelease:
        r = kv_scales.renaming(version)
        return replace(r, spellings=tuple(s for s in r.spellings if s != "modelopt-proj"))

    monkeypatch.setattr(load_model, "renaming", without_modelopt)
    fates = _kv_fates("modelopt-llama-nvfp4-fp8kv", "aeon-v0.23.0")
    assert {fate for fate, _ in fates.values()} == {"skipped"}
    assert {fate for fate, _ in _kv_fates("llmc-llama-fp8-dynamic-fp8kv", "aeon-v0.23.0").values()} == {"loaded"}


@pytest.mark.parametrize(
    ("fixture", "runtime", "fate"),
    [
        ("llmc-qwen3moe-fp8-dynamic", "aeon-v0.23.0", "skipped"),  # Qwen3MoeModel.load_weights `continue`s
        ("llmc-qwen3moe-fp8-dynamic", "aeon-v0.27.1", "fatal"),  # AutoWeightsLoader: no such parameter
        ("llmc-qwen3moe-fp8-dynamic", None, "fatal"),
        ("llmc-llama-fp8-dynamic-fp8kv", "aeon-v0.23.0", "fatal"),  # LlamaModel.load_weights: KeyError
    ],
)
def test_unrenamed_output_scale_fate_follows_the_runtime_release(
    tmp_path: Path, fixture: str, runtime: str | None, fate: str
) -> None:
    """A projection `output_scale` under compressed-tensors is renamed by no release; what the loader then does
    differs by release and model class (rules/kv_scales.toml `drops_unrenamed`)."""
    folder = copy_fixture(fixture, tmp_path)
    case_ops.op_add_tensor(folder, "model.layers.0.self_attn.k_proj.output_scale", "F32", [], values=[0.5])
    a = analyze(str(folder), runtime=runtime, headers_only=True)
    f = _fate(load_accounting(a.checkpoint, a.detection), "model.layers.0.self_attn.k_proj.output_scale")
    assert f.fate == fate
    assert f.owner == ("kv-scale-naming" if fate == "fatal" else None)


def test_weight_only_nvfp4_input_scales_are_registered_but_unused() -> None:
    acc = _accounting("llmc-qwen3moe-nvfp4a16")
    unused = {p.parameter for p in acc.parameters if p.default == "unused"}
    assert "model.layers.0.mlp.experts.w13_input_global_scale" in unused
    assert all(not p.filled for p in acc.parameters if p.parameter in unused)


def test_accounting_round_trips_through_json() -> None:
    acc = _accounting("modelopt-qwen3moe-nvfp4")
    assert LoadAccounting.from_dict(json.loads(json.dumps(acc.to_dict()))) == acc


def _ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_doctor_inspect_and_serve_flags_agree_on_a_load_defect(tmp_path: Path) -> None:
    """Block-FP8 scales under the per-tensor name: doctor reports CK601 / CK602, inspect lists the fatal tensors
    and the unfilled parameters, serve-flags refuses to hand off a command."""
    folder = copy_fixture("transformers-llama-fp8-block", tmp_path)
    case_ops.apply(folder, [{"op": "rename", "pattern": r"weight_scale_inv$", "repl": "weight_scale"}])
    doctor = json.loads(_ckpt("doctor", str(folder), "--headers-only", "--format", "json").stdout)
    assert {"CK601", "CK602"} <= {f["code"] for f in doctor["findings"] if f["severity"] == "error"}
    inspect = json.loads(_ckpt("inspect", str(folder), "--format", "json").stdout)
    layer0 = next(r for r in inspect["load"]["layers"] if r["layer"] == "model.layers.0")
    assert (layer0["fatal"], layer0["unfilled"]) == (7, 4)
    assert any("model.layers.0.self_attn.o_proj.weight_scale: fatal" in p for p in layer0["problems"])
    serve = _ckpt("serve-flags", str(folder))
    assert serve.returncode == 1 and "CK601 tensor-without-parameter" in serve.stderr
    assert serve.stdout == ""


MISNESTED = ROOT / "fixtures" / "defective" / "qwen35moe-nvfp4-misnested-vision"
DOUBLED = "model.language_model.language_model.layers.1."


def test_a_misnested_vision_tower_is_accounted_as_vllm_loads_it() -> None:
    """The vision tower saved under `model.language_model.visual.`: vLLM 0.33's Qwen3_5Model raises on every one of
    its tensors (biases and norms too), naming `visual`, and the tower it builds at `visual.*` stays unfilled,
    unquantized as the config's ignore list (`model.visual.*`) declares it (what `ckpt doctor --vllm` measured)."""
    a = analyze(str(MISNESTED), headers_only=True)
    acc = load_accounting(a.checkpoint, a.detection)
    moved = sorted(t for t in a.checkpoint.tensors if t.startswith("model.language_model.visual."))
    assert len(moved) == 33
    assert sorted(f.tensor for f in acc.tensors) == sorted(a.checkpoint.tensors)  # each tensor once
    fates = {f.tensor: f for f in acc.tensors if f.tensor in moved}
    assert {(f.fate, f.owner, f.error) for f in fates.values()} == {
        ("fatal", "misnested-prefix", "ValueError: There is no module or parameter named 'visual' in Qwen3_5Model")
    }
    unfilled = {p.parameter for p in acc.parameters if not p.filled}
    assert unfilled == {"visual." + t.removeprefix("model.language_model.visual.") for t in moved}
    assert {p.owner for p in acc.parameters if not p.filled} == {"misnested-prefix"}
    qkv = a.detection.row_by_name["model.language_model.visual.blocks.0.attn.qkv"]
    assert (qkv.declared.quantized, qkv.covered_by) == (False, "model.visual.blocks.0.attn.qkv")
    # Every defect is misnested-prefix's: the CK60x findings say nothing more.
    assert findings(acc) == []


def test_per_layer_counts_add_up_to_the_tensors_of_the_layer() -> None:
    a = analyze(str(MISNESTED), headers_only=True)
    modules = a.checkpoint.modules
    totals = tensors_per_layer(modules, (len(m.tensors) for m in modules.values()))
    layers = per_layer(load_accounting(a.checkpoint, a.detection, every_tensor=False), totals)
    assert {r.layer: r.loaded + r.skipped + r.fatal for r in layers if r.layer in totals} == totals
    block = next(r for r in layers if r.layer == "model.language_model.visual.blocks.0")
    tower = next(r for r in layers if r.layer == "visual.blocks.0")
    assert (block.loaded, block.skipped, block.fatal, block.unfilled) == (0, 0, 12, 0)
    assert (tower.loaded, tower.skipped, tower.fatal, tower.unfilled) == (0, 0, 0, 12)
    assert "visual.blocks.0.attn.qkv.weight: unfilled (reported as misnested-prefix)" in tower.problems


def test_a_doubled_language_model_prefix_loads_where_it_belongs(tmp_path: Path) -> None:
    """Qwen3_5ForCausalLM's own mapper turns `model.language_model.` into `model.` once more, so vLLM 0.33 loads a
    doubled prefix into the right layer: nothing fatal, nothing unfilled (misnested-prefix still reports the names)."""
    folder = copy_fixture("llmc-qwen35moe-nvfp4", tmp_path)
    case_ops.apply(folder, [{"op": "rename", "pattern": r"^model\.language_model\.layers\.1\.", "repl": DOUBLED}])
    a = analyze(str(folder), headers_only=True)
    acc = load_accounting(a.checkpoint, a.detection)
    f = _fate(acc, DOUBLED + "mlp.experts.2.down_proj.weight_packed")
    assert (f.fate, f.parameter, f.shard) == (
        "loaded",
        "language_model.model.layers.1.mlp.experts.w2_weight_packed",
        "2:w2",
    )
    assert [t for t in acc.tensors if t.fate != "loaded"] == []
    assert [p.parameter for p in acc.parameters if not p.filled and p.default is None] == []


CORRUPTIONS = [
    ("transformers-llama-fp8-block", [{"op": "rename", "pattern": r"weight_scale_inv$", "repl": "weight_scale"}]),
    ("llmc-llama-w4a16", [{"op": "drop", "pattern": r"model\.layers\.0\.mlp\.up_proj\."}]),
    (
        "llmc-llama-w4a16",
        [
            {
                "op": "edit_json",
                "file": "config.json",
                "set": {"quantization_config.config_groups.group_0.weights.num_bits": 8},
            }
        ],
    ),
    (
        "autoround-llama-awq",
        [
            {"op": "drop", "pattern": r"model\.layers\.1\.mlp\.down_proj\.(qweight|qzeros|scales)$"},
            {"op": "add_tensor", "name": "model.layers.1.mlp.down_proj.weight", "dtype": "BF16", "shape": [128, 256]},
        ],
    ),
    ("modelopt-llama-fp8", [{"op": "retype", "tensor": "model.layers.0.self_attn.o_proj.weight", "dtype": "U8"}]),
    ("llmc-qwen3moe-nvfp4", [{"op": "drop", "pattern": r"experts\.1\.up_proj\.input_global_scale$"}]),
    ("../defective/qwen35moe-nvfp4-misnested-vision", []),
    ("llmc-qwen35moe-nvfp4", [{"op": "rename", "pattern": r"^model\.language_model\.layers\.1\.", "repl": DOUBLED}]),
    (
        "modelopt-llama-nvfp4",
        [
            {
                "op": "append_json",
                "file": "config.json",
                "path": "quantization_config.ignore",
                "value": "model.layers.0.self_attn.q_proj",
            }
        ],
    ),
]


@pytest.mark.parametrize(("fixture", "steps"), [(f, []) for f in FIXTURES] + CORRUPTIONS)
def test_the_problems_only_accounting_is_the_whole_one_filtered(fixture: str, steps: list, tmp_path: Path) -> None:
    """What the CK6xx rules read (judged per row class) equals the whole accounting (judged tensor by tensor) less
    its plain loads and filled parameters."""
    folder = copy_fixture(fixture, tmp_path)
    case_ops.apply(folder, steps)
    a = analyze(str(folder), headers_only=True)
    whole = load_accounting(a.checkpoint, a.detection)
    quick = load_accounting(a.checkpoint, a.detection, every_tensor=False)
    assert quick.tensors == tuple(f for f in whole.tensors if f.fate != "loaded" or f.problem is not None)
    assert quick.parameters == tuple(p for p in whole.parameters if (not p.filled or p.partial) and p.default is None)
    assert findings(quick) == findings(whole)
    modules = a.checkpoint.modules
    totals = tensors_per_layer(modules, (len(m.tensors) for m in modules.values()))
    assert per_layer(quick, totals) == per_layer(whole)
