"""scrub-nan: exactly the NaN bytes change, to the documented value, and nothing else in any file."""

from __future__ import annotations

import json
import os

from ckpt_tools.pipeline import doctor
from ckpt_tools.write.header import build_file
from tests.corrupt import patch_tensor_bytes, read_file
from tests.repair_helpers import copy_of, file_bytes, leftovers, make_sharded, run_cli

SCALE = "model.layers.0.mlp.down_proj.weight_scale"
OTHER = "model.layers.1.self_attn.q_proj.weight_scale"


def tensor_start(shard, name: str) -> int:
    header, _meta, _data = read_file(shard)
    n = len(shard.read_bytes()) - len(_data) - 8
    return 8 + n + header[name]["data_offsets"][0]


def diff_positions(a: bytes, b: bytes) -> dict[int, tuple[int, int]]:
    assert len(a) == len(b)
    return {i: (x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y}


def test_only_the_nan_bytes_change(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    shard = patch_tensor_bytes(folder, SCALE, {0: 0x7F, 1: 0xFF, 2: 0x7F, 40: 0xFF})
    patch_tensor_bytes(folder, OTHER, {5: 0x7F})
    before = file_bytes(folder)
    assert "nan-fp8-scale" in {f.slug for f in doctor(str(folder)).findings}

    code, out, err = run_cli(["scrub-nan", folder, "--format", "json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["plan"]["details"]["nan_bytes"] == {SCALE: 4, OTHER: 1}
    assert result["plan"]["details"]["replacement"] == {"F8_E4M3": "0x7E"}
    assert [s["kind"] for s in result["plan"]["steps"]] == ["patch"]
    assert "CK501 nan-fp8-scale" in result["before"]["findings"]
    assert "CK501 nan-fp8-scale" not in result["after"]["findings"]

    after = file_bytes(folder)
    assert {k for k in after if after[k] != before[k]} == {shard.name}
    s, o = tensor_start(shard, SCALE), tensor_start(shard, OTHER)
    expected = {s: (0x7F, 0x7E), s + 1: (0xFF, 0x7E), s + 2: (0x7F, 0x7E), s + 40: (0xFF, 0x7E), o + 5: (0x7F, 0x7E)}
    assert diff_positions(before[shard.name], after[shard.name]) == expected
    assert leftovers(folder) == []


def test_text_output_reports_counts_per_tensor(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, SCALE, {3: 0x7F, 9: 0x7F})
    code, out, err = run_cli(["scrub-nan", folder], capsys)
    assert code == 0, err
    assert f"{SCALE}: 2 NaN byte(s) -> 0x7E" in out
    assert "doctor after:  0 error(s)" in out


def test_value_zero(tmp_path, capsys):
    folder = copy_of("llmc-llama-nvfp4", tmp_path)
    name = "model.layers.0.mlp.up_proj.weight_scale"
    shard = patch_tensor_bytes(folder, name, {7: 0xFF})
    before = shard.read_bytes()
    code, _out, err = run_cli(["scrub-nan", folder, "--value", "zero"], capsys)
    assert code == 0, err
    assert diff_positions(before, shard.read_bytes()) == {tensor_start(shard, name) + 7: (0xFF, 0x00)}


def test_unknown_value_is_a_usage_error(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    code, _out, err = run_cli(["scrub-nan", folder, "--value", "448"], capsys)
    assert code == 2 and "--value must be one of max, zero" in err


def test_e8m0_scales_saturate_and_have_no_zero(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(
        build_file(
            [
                ("m.proj.weight", "U8", [4, 8], bytes(32)),
                ("m.proj.weight_scale", "F8_E8M0", [4], b"\x7f\xff\x7f\xff"),
            ]
        )
    )
    before = file_bytes(tmp_path)
    code, _out, err = run_cli(["scrub-nan", tmp_path, "--value", "zero"], capsys)
    assert code == 2 and "F8_E8M0, which has no zero value" in err
    assert file_bytes(tmp_path) == before
    code, _out, err = run_cli(["scrub-nan", tmp_path], capsys)
    assert code == 0, err
    assert (tmp_path / "model.safetensors").read_bytes().endswith(b"\x7f\xfe\x7f\xfe")


def test_u8_mx_scales_of_a_genuine_mxfp4_export_are_scrubbed_as_e8m0(tmp_path, capsys):
    """compressed-tensors stores MXFP4 exponents as U8: its 0xFF is E8M0 NaN, patched to 0xFE and nothing else."""
    folder = copy_of("llmc-llama-mxfp4", tmp_path)
    shard = patch_tensor_bytes(folder, SCALE, {2: 0xFF, 17: 0xFF})
    before = file_bytes(folder)
    code, out, err = run_cli(["scrub-nan", folder, "--format", "json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["plan"]["details"]["replacement"] == {"F8_E8M0": "0xFE"}
    assert "CK501 nan-fp8-scale" not in result["after"]["findings"]
    s = tensor_start(shard, SCALE)
    assert diff_positions(before[shard.name], file_bytes(folder)[shard.name]) == {
        s + 2: (0xFF, 0xFE),
        s + 17: (0xFF, 0xFE),
    }


def test_sharded_only_the_affected_shard_changes(tmp_path, capsys):
    folder = make_sharded(copy_of("modelopt-llama-nvfp4", tmp_path))
    shard = patch_tensor_bytes(folder, OTHER, {0: 0x7F})
    before = file_bytes(folder)
    code, _out, err = run_cli(["scrub-nan", folder], capsys)
    assert code == 0, err
    after = file_bytes(folder)
    assert {k for k in after if after[k] != before[k]} == {shard.name}  # the index is not touched either


def test_hard_linked_shard_is_rebuilt_with_the_patch(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    shard = patch_tensor_bytes(folder, SCALE, {2: 0xFF})
    os.link(shard, tmp_path / "backup")
    before = shard.read_bytes()
    code, out, err = run_cli(["scrub-nan", folder, "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["plan"]["steps"][0]["reason"] == "hard-linked file"
    assert (tmp_path / "backup").read_bytes() == before
    assert diff_positions(before, shard.read_bytes()) == {tensor_start(shard, SCALE) + 2: (0xFF, 0x7E)}


def test_a_suppressed_nan_rule_is_named_not_reported_as_clean(tmp_path, capsys):
    """With CK501 suppressed outright its values are not read: scrub-nan says why and changes nothing, instead of
    claiming there is no NaN byte."""
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, SCALE, {0: 0x7F})
    (folder / ".ckpt.toml").write_text('ignore = [{rule = "CK501", reason = "scrubbed downstream"}]\n')
    before = file_bytes(folder)
    code, out, err = run_cli(["scrub-nan", folder], capsys)
    assert code == 2 and out == ""
    assert "CK501 nan-fp8-scale did not run" in err and "scrubbed downstream" in err
    assert file_bytes(folder) == before
