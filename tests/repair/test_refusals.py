"""Every refusal: exit 2, one line on stderr naming the reason, and not one byte changed (no journal, no lock left)."""

from __future__ import annotations

import contextlib
import shutil
import struct
import subprocess

import pytest

from ckpt_tools.repair.journal import JOURNAL_NAME, Lock
from tests.case_ops import op_killed_repair
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import (
    INDEX,
    MISNESTED_FIXTURE,
    add_tensors,
    copy_of,
    file_bytes,
    leftovers,
    make_sharded,
    run_cli,
)

LAYER0 = "model.language_model.layers.0.linear_attn.out_proj"
COMMANDS = [["fix-prefix"], ["scrub-nan"], ["drop-orphans", "--tensor", "lm_head.input_scale"], ["fix"]]


def refused(capsys, folder, args, message, *, target=None):
    before = file_bytes(folder)
    code, out, err = run_cli([args[0], target or folder, *args[1:]], capsys)
    assert code == 2, (out, err)
    assert err.startswith("ckpt: ") and err.count("\n") == 1, err
    assert message in err, err
    assert file_bytes(folder) == before  # hidden files included: no lock, journal or temporary file was left


@pytest.mark.parametrize("args", COMMANDS)
def test_read_only_file(tmp_path, capsys, args):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, f"{LAYER0}.weight_scale", {0: 0x7F})  # something for scrub-nan to write
    (folder / "model.safetensors").chmod(0o444)
    if args[0] == "drop-orphans":
        args = ["drop-orphans", "--tensor", f"{LAYER0}.input_global_scale"]
    refused(capsys, folder, args, "model.safetensors is read-only")


def test_read_only_folder(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    folder.chmod(0o555)
    try:
        refused(capsys, folder, ["fix-prefix"], "the folder is read-only")
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("args", COMMANDS)
def test_lfs_pointer(tmp_path, capsys, args):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    (folder / "model-00002-of-00003.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "a" * 64 + "\nsize 123456\n"
    )
    refused(capsys, folder, args, "Git LFS pointer")


@pytest.mark.parametrize("args", COMMANDS)
def test_invalid_header(tmp_path, capsys, args):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    shard = folder / "model-00003-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated download
    refused(capsys, folder, args, "model-00003-of-00003.safetensors: data region does not match the file size")


def test_duplicate_keys_would_be_lost_so_refused(tmp_path, capsys):
    t = b'"model.language_model.visual.w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}'
    header = b"{" + t + b"," + t + b"}"
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"xy")
    refused(
        capsys,
        tmp_path,
        ["fix-prefix", "--from", "model.language_model.visual", "--to", "model.visual"],
        "repeats tensor name",
    )


def test_invalid_index_when_the_plan_updates_it(tmp_path, capsys):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    (folder / INDEX).write_text("{not json")
    refused(capsys, folder, ["fix-prefix"], "is not valid JSON")


@pytest.mark.parametrize("args", COMMANDS)
def test_repair_already_running(tmp_path, capsys, args):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    with Lock(folder):
        refused(capsys, folder, args, "a repair is already running on this checkpoint")
    assert leftovers(folder) == []  # the holder removed its lock file on release


@pytest.mark.parametrize(
    "target", ["Qwen/Qwen3.6-35B-A3B-NVFP4", "hf://org/model@main", "https://huggingface.co/org/model"]
)
@pytest.mark.parametrize("args", COMMANDS)
def test_hub_target(tmp_path, capsys, monkeypatch, target, args):
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cli([args[0], target, *args[1:]], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "on the Hugging Face Hub" in err and "hf download" in err and "--local-dir" in err and "hf upload" in err
    assert list(tmp_path.iterdir()) == []


def test_symlinked_shard(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    blob = tmp_path / "blob"
    (folder / "model.safetensors").rename(blob)
    (folder / "model.safetensors").symlink_to(blob)
    before = blob.read_bytes()
    refused(capsys, folder, ["fix-prefix"], "is a symlink")
    assert blob.read_bytes() == before


def test_one_shard_of_a_sharded_checkpoint(tmp_path, capsys):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    shard = next(p for p in sorted(folder.glob("*.safetensors")) if b"language_model.visual" in p.read_bytes())
    refused(
        capsys,
        folder,
        ["fix-prefix", "--from", "model.language_model.visual", "--to", "model.visual"],
        "repair the folder",
        target=shard,
    )


def test_dry_run_does_not_complete_a_pending_journal(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    pending_journal(folder)
    refused(capsys, folder, ["fix-prefix", "--dry-run"], "an interrupted repair is pending")
    refused(capsys, folder, ["fix", "--dry-run"], "an interrupted repair is pending")


def test_damaged_journal_is_reported_not_guessed(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    (folder / JOURNAL_NAME).write_bytes(b"CKPTJRN1" + struct.pack("<Q", 4) + b"{}{}")
    refused(capsys, folder, ["fix-prefix"], "the repair journal is damaged")
    refused(capsys, folder, ["repair", "--resume"], "the repair journal is damaged")
    refused(capsys, folder, ["repair", "--rollback"], "the repair journal is damaged")
    before = file_bytes(folder)
    code, out, _err = run_cli(["doctor", folder, "--headers-only"], capsys)  # reported, not acted on
    assert code == 1 and "CK109 interrupted-repair" in out and "restore the checkpoint from a copy" in out
    assert file_bytes(folder) == before


def test_finding_without_a_safe_plan(tmp_path, capsys):
    # Both the mis-nested tensor and its canonical name exist: the rule offers no automatic fix, so neither do we.
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    add_tensors(
        folder,
        [("model.visual.pos_embed.weight", "BF16", [2], b"\x00\x00\x80\x3f")],
        beside="model.language_model.visual.pos_embed.weight",
    )
    refused(capsys, folder, ["fix-prefix"], "CK201 misnested-prefix is not automatically fixable here")


def pending_journal(folder):
    """The state a repair killed right after writing its journal leaves: the journal, and no file changed yet."""
    from ckpt_tools.repair import fix_prefix, run
    from ckpt_tools.repair.journal import encode_journal

    steps = run(str(folder), fix_prefix.job(), dry_run=True).steps
    (folder / JOURNAL_NAME).write_bytes(encode_journal("fix-prefix", folder, steps))
    return steps


def test_interrupted_repair_that_cannot_be_written_is_explained(tmp_path, capsys, monkeypatch):
    from ckpt_tools.repair import execute

    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    pending_journal(folder)
    before = file_bytes(folder)

    def denied(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(execute, "_open_checked", denied)
    code, _out, err = run_cli(["repair", folder, "--resume"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "internal error" not in err and "cannot be completed (Permission denied)" in err
    assert file_bytes(folder) == before
    monkeypatch.undo()
    code, out, _err = run_cli(["doctor", folder, "--headers-only"], capsys)  # doctor reports and writes nothing
    assert code == 1 and "CK109 interrupted-repair" in out and "fix: ckpt repair --resume" in out
    assert file_bytes(folder) == before
    code, out, err = run_cli(["repair", folder, "--resume"], capsys)
    assert code == 0 and "completed the interrupted `fix-prefix` repair" in out, err
    assert not (folder / JOURNAL_NAME).exists() and file_bytes(folder) != before


@contextlib.contextmanager
def chattr(folder, flag: str):
    """`chattr +flag folder` for the block (removed after, so the test can clean up); skips where the filesystem,
    the tool or the privileges do not allow it."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    if subprocess.run(["chattr", f"+{flag}", str(folder)], capture_output=True).returncode:
        pytest.skip(f"chattr +{flag} is not supported here (filesystem or privileges)")
    try:
        yield
    finally:
        subprocess.run(["chattr", f"-{flag}", str(folder)], check=True)


# An immutable folder was already refused (as read-only) before anything was written; it stays so.
@pytest.mark.parametrize(("flag", "message"), [("a", "is append-only (`chattr +a`)"), ("i", "")])
@pytest.mark.parametrize("args", [["fix-prefix"], ["repair", "--rollback"]])
def test_sealed_folder_leaves_nothing_behind(tmp_path, capsys, flag, message, args):
    """An append-only folder lets the journal's temporary file be created but never renamed or removed: before, the
    refused repair left `..ckpt-repair.journal.ckpt-tmp` there for good."""
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    if args[0] == "repair":  # a killed repair's journal, for the rollback to replace with its own
        op_killed_repair(folder, ["fix-prefix"], "journal:renamed")
    names = sorted(p.name for p in folder.iterdir())
    with chattr(folder, flag):
        refused(capsys, folder, args, message)
        assert sorted(p.name for p in folder.iterdir()) == names
