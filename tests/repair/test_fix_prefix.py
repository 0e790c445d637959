"""fix-prefix: header-only renames on the real mis-nested fixture and on sharded copies; the rewrite path when the
header outgrows its length; data bytes identical throughout."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from ckpt_tools.pipeline import doctor
from ckpt_tools.write.header import build_file
from tests.corrupt import read_file, rename
from tests.repair_helpers import (
    INDEX,
    MISNESTED_FIXTURE,
    assert_index_agrees,
    copy_of,
    file_bytes,
    leftovers,
    library_view,
    make_sharded,
    renamed_view,
    run_cli,
)

OLD, NEW = "model.language_model.visual.", "model.visual."


def codes(folder: Path) -> set[str]:
    return {f.slug for f in doctor(str(folder), headers_only=True).findings}


def test_seed_fixture_header_only_rename(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    shard = folder / "model.safetensors"
    before = shard.read_bytes()
    (n,) = struct.unpack_from("<Q", before)
    view = library_view(folder)
    assert sum(k.startswith(OLD) for k in view) == 33
    assert "misnested-prefix" in codes(folder)

    code, out, err = run_cli(["fix-prefix", folder, "--format", "json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["applied"] and result["plan"]["details"]["rename"] == [{"from": OLD, "to": NEW, "count": 33}]
    assert [s["kind"] for s in result["plan"]["steps"]] == ["header"]
    # The after-check is the full doctor verdict: the value rule's CK502 warning stays (weights are untouched).
    assert result["before"]["findings"] == ["CK201 misnested-prefix", "CK502 fused-scale-mismatch"]
    assert result["after"]["findings"] == ["CK502 fused-scale-mismatch"]
    # Written: the journal (new bytes + a small manifest) and the changed header span, nothing else.
    assert result["bytes_written"] <= 2 * n + 4096

    after = shard.read_bytes()
    assert len(after) == len(before) and after[:8] == before[:8]  # same length field
    assert after[8 + n :] == before[8 + n :]  # the data region, byte for byte
    assert library_view(folder) == renamed_view(view, OLD, NEW)
    _h, meta, _d = read_file(shard)
    assert meta == {"format": "pt"}
    assert after[8 : 8 + n].rstrip(b" ").endswith(b"}")  # space padding, same length
    assert "misnested-prefix" not in codes(folder)
    assert leftovers(folder) == []


def test_dry_run_changes_nothing(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    before = file_bytes(folder)
    code, out, _ = run_cli(["fix-prefix", folder, "--dry-run"], capsys)
    assert code == 0
    assert "header in place" in out and "33 renamed" in out and "nothing was changed" in out
    assert file_bytes(folder) == before
    assert leftovers(folder) == []


def test_sharded_index_and_untouched_shards(tmp_path, capsys):
    folder = make_sharded(copy_of("llmc-qwen35moe-nvfp4", tmp_path))
    rename(folder, lambda n: "model.language_model.visual." + n[len(NEW) :] if n.startswith(NEW) else n)
    index = json.loads((folder / INDEX).read_text())
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")  # as transformers writes it
    view = library_view(folder)
    holding = {shard for name, (shard, *_r) in view.items() if name.startswith(OLD)}
    before = file_bytes(folder)
    index_before = (folder / INDEX).read_text()

    code, out, err = run_cli(["fix-prefix", folder], capsys)
    assert code == 0, err
    assert "doctor after:  0 error(s)" in out
    after = file_bytes(folder)
    for name in before:
        if name.endswith(".safetensors") and name not in holding:
            assert after[name] == before[name], f"{name} holds no vision tensor and must not change"
    assert library_view(folder) == renamed_view(view, OLD, NEW)
    assert_index_agrees(folder)
    index_after = (folder / INDEX).read_text()
    # Written like transformers writes it: indent 2, keys sorted, newline at the end; only the keys changed.
    data = json.loads(index_after)
    assert index_after == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data["metadata"] == json.loads(index_before)["metadata"]
    assert leftovers(folder) == []


def test_header_that_outgrows_its_length_is_rewritten(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    view = library_view(folder)
    mode = 0o640
    (folder / "model.safetensors").chmod(mode)
    longer = "model.vision_tower_with_a_much_longer_name_than_before."
    # A prefix vLLM does not load (more errors after): --force, since this test is about the rewrite's bytes.
    code, out, err = run_cli(
        ["fix-prefix", folder, "--from", OLD, "--to", longer, "--format", "json", "--force"], capsys
    )
    assert code == 0, err
    step = json.loads(out)["plan"]["steps"][0]
    assert step["kind"] == "rewrite" and step["reason"] == "header outgrows its old length"
    assert library_view(folder) == renamed_view(view, OLD, longer)
    assert os.stat(folder / "model.safetensors").st_mode & 0o777 == mode
    raw = (folder / "model.safetensors").read_bytes()
    assert struct.unpack_from("<Q", raw)[0] % 8 == 0  # the data still starts 8-aligned
    assert leftovers(folder) == []


def test_unaligned_header_keeps_its_exact_length(tmp_path, capsys):
    # A writer that does not pad: 8 + N is not a multiple of 8. The rename must keep N as it is.
    header = b'{"enc.visual.ww":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}'
    assert len(header) % 8
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"abc")
    code, _out, err = run_cli(["fix-prefix", tmp_path, "--from", "enc.visual", "--to", "visual"], capsys)
    assert code == 0, err
    raw = (tmp_path / "model.safetensors").read_bytes()
    assert struct.unpack_from("<Q", raw)[0] == len(header) and raw.endswith(b"abc")
    assert set(library_view(tmp_path)) == {"visual.ww"}


def test_hard_linked_shard_is_replaced_not_changed_under_the_other_link(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    backup = tmp_path / "backup.safetensors"
    os.link(folder / "model.safetensors", backup)
    original = backup.read_bytes()
    code, out, err = run_cli(["fix-prefix", folder, "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["plan"]["steps"][0]["reason"] == "hard-linked file"
    assert backup.read_bytes() == original
    assert os.stat(folder / "model.safetensors").st_nlink == 1
    assert "misnested-prefix" not in codes(folder)


def test_explicit_prefix_matches_whole_segments_and_can_remove_a_prefix(tmp_path, capsys):
    data = b"\x01\x02"
    (tmp_path / "model.safetensors").write_bytes(
        build_file([("wrap.model.a.weight", "U8", [2], data), ("wrap.model_b.weight", "U8", [2], data)])
    )
    code, _, err = run_cli(["fix-prefix", tmp_path, "--from", "wrap.model", "--to", "model"], capsys)
    assert code == 0, err
    assert set(library_view(tmp_path)) == {"model.a.weight", "wrap.model_b.weight"}
    code, _, err = run_cli(["fix-prefix", tmp_path, "--from", "wrap.", "--to", ""], capsys)
    assert code == 0, err
    assert set(library_view(tmp_path)) == {"model.a.weight", "model_b.weight"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "model.visual"], "in pairs"),
        (["--from", "no.such.prefix", "--to", "x"], "no tensor name starts with"),
        (
            ["--from", "model.language_model.visual.blocks.0", "--to", "model.language_model.visual.blocks.1"],
            "collide with an existing tensor",
        ),
        (
            [
                "--from",
                "model.language_model.visual.blocks.0",
                "--to",
                "v.b",
                "--from",
                "model.language_model.visual.blocks.1",
                "--to",
                "v.b",
            ],
            "would both become",
        ),
        (["--from", "", "--to", "x"], "non-empty"),
    ],
)
def test_bad_explicit_plans_refuse_and_change_nothing(tmp_path, capsys, args, message):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    before = file_bytes(folder)
    code, _out, err = run_cli(["fix-prefix", folder, *args], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert file_bytes(folder) == before
