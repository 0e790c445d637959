"""ckpt fix: every automatic repair the doctor finds, in order, each planned on the state the previous one left."""

from __future__ import annotations

import json

import pytest

from ckpt_tools.pipeline import doctor
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import (
    MISNESTED_FIXTURE,
    copy_of,
    file_bytes,
    leftovers,
    library_view,
    make_sharded,
    renamed_view,
    run_cli,
)

NAN_SCALE = "model.language_model.layers.0.linear_attn.out_proj.weight_scale"


def test_fix_applies_scrub_then_rename(tmp_path, capsys):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F, 3: 0xFF})
    view = library_view(folder)
    slugs = {f.slug for f in doctor(str(folder)).findings}
    assert {"misnested-prefix", "nan-fp8-scale"} <= slugs

    code, out, err = run_cli(["fix", folder, "--format", "json", "--fail-on", "error"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [r["job"] for r in data["repairs"]] == ["scrub-nan", "fix-prefix"]
    assert all(r["applied"] for r in data["repairs"])
    assert not {f.slug for f in doctor(str(folder)).findings} & {"misnested-prefix", "nan-fp8-scale"}

    expected = renamed_view(view, "model.language_model.visual.", "model.visual.")
    scale = bytearray(expected[NAN_SCALE][3])
    scale[0] = scale[3] = 0x7E
    expected[NAN_SCALE] = (*expected[NAN_SCALE][:3], bytes(scale))
    assert library_view(folder) == expected
    assert leftovers(folder) == []


def test_fix_dry_run_lists_both_plans_and_changes_nothing(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, NAN_SCALE, {1: 0x7F})
    before = file_bytes(folder)
    code, out, err = run_cli(["fix", folder, "--dry-run"], capsys)
    assert code == 0, err
    assert "ckpt scrub-nan" in out and "ckpt fix-prefix" in out and out.count("nothing was changed") == 2
    assert file_bytes(folder) == before


@pytest.mark.parametrize(
    "command, fixture",
    [
        ("fix", "modelopt-qwen35moe-nvfp4"),
        ("fix", "llmc-qwen3moe-nvfp4-sharded"),
        ("fix-prefix", "llmc-qwen35moe-nvfp4"),
        ("scrub-nan", "modelopt-llama-nvfp4"),
        ("scrub-nan", "llmc-qwen3moe-nvfp4"),
    ],
)
def test_clean_checkpoint_is_left_alone(tmp_path, capsys, command, fixture):
    folder = copy_of(fixture, tmp_path)
    before = file_bytes(folder)
    code, out, _ = run_cli([command, folder], capsys)
    assert code == 0 and "nothing to do" in out
    assert file_bytes(folder) == before  # hidden files included: no journal, lock or temporary file either


def test_fix_exit_code_is_its_own_after_verdict(tmp_path, capsys, monkeypatch):
    """`--fail-on` judges the verdict the last repair left (CK502 stays: a warning), with no extra doctor run."""
    import ckpt_tools.pipeline

    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F})

    def no_second_look(*args, **kwargs):
        raise AssertionError("the fix command analyzed the checkpoint again")

    monkeypatch.setattr(ckpt_tools.pipeline, "analyze", no_second_look)  # fix_all and the runner hold their own
    code, out, err = run_cli(["fix", folder, "--format", "json", "--fail-on", "warning"], capsys)
    assert code == 1, err
    last = json.loads(out)["repairs"][-1]
    assert last["job"] == "fix-prefix"
    assert last["after"]["findings"] == ["CK502 fused-scale-mismatch", "CK405 kernel-selection"]  # + the kernel line
    code, _out, err = run_cli(["fix", folder, "--fail-on", "error"], capsys)
    assert code == 0 and "nothing to do" in _out, err
