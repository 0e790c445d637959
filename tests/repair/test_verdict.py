"""Repairs never make things worse silently (issue 12): a dry run prints doctor's verdict on the planned headers, a
repair that would add errors refuses (exit 2) unless --force, and the after-check is the full doctor verdict, value
findings included. The prediction is built in memory from the plan; these tests hold it to a fresh `ckpt doctor` of
the repaired files."""

from __future__ import annotations

import json

from ckpt_tools.pipeline import analyze, doctor
from ckpt_tools.repair import drop_orphans, fix_prefix, run, scrub_nan
from ckpt_tools.repair.predict import carry_values
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import add_tensors, copy_of, file_bytes, make_sharded, run_cli

MISNESTED = "defective/qwen35moe-nvfp4-misnested-vision"
OLD, NEW = "model.language_model.visual", "model.visual"
INPUT_SCALE = "model.layers.0.mlp.down_proj.input_scale"


def verdict(report) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(f.code, f.severity, f.message, tuple(f.tensors)) for f in report.sorted_findings()]


def test_dry_run_prints_the_predicted_after_state(tmp_path, capsys):
    folder = copy_of(MISNESTED, tmp_path)
    code, out, _ = run_cli(["fix-prefix", folder, "--dry-run"], capsys)
    assert code == 0
    assert "doctor now:   1 error(s), 1 warning(s)" in out
    assert "doctor after: 0 error(s), 1 warning(s), 0 info   CK502 fused-scale-mismatch   (predicted" in out


def test_after_check_keeps_value_findings(tmp_path, capsys):
    folder = copy_of(MISNESTED, tmp_path)
    code, out, _ = run_cli(["fix-prefix", folder], capsys)
    assert code == 0
    assert "doctor after:  0 error(s), 1 warning(s), 0 info   CK502 fused-scale-mismatch\n" in out
    assert [f.code for f in doctor(str(folder)).findings] == ["CK502"]


def test_dropping_a_real_input_scale_refuses(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    before = file_bytes(folder)
    code, out, err = run_cli(["drop-orphans", folder, "--tensor", INPUT_SCALE], capsys)
    assert code == 2 and out == "" and "worse: 0 -> 1 error(s) (new: CK401 nvfp4-weight-only)" in err
    assert file_bytes(folder) == before
    code, out, err = run_cli(["drop-orphans", folder, "--tensor", INPUT_SCALE, "--dry-run"], capsys)
    predicted = "CK401 nvfp4-weight-only   (predicted"
    assert code == 2 and predicted in out and "refuses without --force" in err


def test_prefix_into_the_wrong_place_refuses_and_force_applies(tmp_path, capsys):
    folder = copy_of(MISNESTED, tmp_path)
    run_cli(["fix-prefix", folder], capsys)
    args = ["fix-prefix", folder, "--from", NEW, "--to", "model.language_model"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "CK301 ignore-list-mismatch" in err and "CK306 missing-component" in err
    code, out, _ = run_cli([*args, "--force", "--format", "json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["forced"] and result["worse"]
    assert {"CK301 ignore-list-mismatch", "CK306 missing-component"} <= set(result["after"]["findings"])


def _prediction_matches_doctor(folder, job, **kw):
    dry = run(str(folder), job, dry_run=True, **kw)
    real = run(str(folder), job, **kw)
    fresh = doctor(str(folder))
    assert verdict(dry.predicted) == verdict(real.after) == verdict(fresh)
    assert dry.predicted.checkpoint == fresh.checkpoint
    return fresh


def test_prediction_equals_doctor_after_in_place_rename(tmp_path):
    _prediction_matches_doctor(copy_of(MISNESTED, tmp_path), fix_prefix.job())


def test_prediction_equals_doctor_after_a_rewrite(tmp_path):
    folder = make_sharded(copy_of(MISNESTED, tmp_path), parts=2)
    longer = "model.vision_tower_with_a_much_longer_name_than_before"
    _prediction_matches_doctor(folder, fix_prefix.job([(OLD, longer)]), force=True)


def test_prediction_equals_doctor_after_drops(tmp_path):
    folder = make_sharded(copy_of("modelopt-llama-nvfp4", tmp_path))
    add_tensors(folder, [("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f")], beside="lm_head.weight")
    assert "orphan-scale" in {f.slug for f in doctor(str(folder)).findings}
    _prediction_matches_doctor(folder, drop_orphans.job())


def test_prediction_equals_doctor_after_byte_patches(tmp_path):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, "model.layers.0.mlp.down_proj.weight_scale", {0: 0x7F, 3: 0xFF})
    fresh = _prediction_matches_doctor(folder, scrub_nan.job())
    assert "nan-fp8-scale" not in {f.slug for f in fresh.findings}


def test_carry_values_renames_whatever_value_data_the_checkpoint_holds(tmp_path):
    import dataclasses

    from ckpt_tools.repair.edits import BytePatch

    ckpt = analyze(str(copy_of(MISNESTED, tmp_path))).checkpoint
    name = next(iter(ckpt.values))  # the scan's statistics
    carried = carry_values(ckpt, {name: "renamed." + name}, frozenset())
    assert set(carried) == {"values"}
    assert carried["values"].get("renamed." + name) == ckpt.values.get(name) and name not in carried["values"]
    assert name not in carry_values(ckpt, {}, frozenset({name}))["values"]
    # A mapping keyed by tensor name (raw bytes) is carried as well, byte patches applied.
    tensor = next(iter(ckpt.tensors))
    holder = dataclasses.make_dataclass(
        "Holder", [("index", object), ("blob", object)], namespace={"tensors": property(lambda self: ckpt.tensors)}
    )
    out = carry_values(
        holder(ckpt.index, {tensor: b"\x7f\x00"}),
        {tensor: "t2"},
        frozenset(),
        {tensor: [BytePatch(tensor, 0, 0x7F, 0x7E)]},
    )
    assert out == {"blob": {"t2": b"\x7e\x00"}}
