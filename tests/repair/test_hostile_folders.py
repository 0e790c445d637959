"""A hostile folder: links, FIFOs and directories planted at the names a repair writes. A repair never writes through
a link or onto a file that is not a regular file of its own making; it refuses (exit 2, one line) with nothing
changed, inside the folder or outside it, and never hangs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_tools.repair import fix_prefix, run
from ckpt_tools.repair.fsio import Folder, temp_name
from ckpt_tools.repair.journal import JOURNAL_NAME, encode_journal
from tests.repair_helpers import INDEX, MISNESTED_FIXTURE, add_tensors, copy_of, file_bytes, make_sharded, run_cli

REPO = Path(__file__).resolve().parents[2]
JOURNAL_TMP = temp_name(JOURNAL_NAME)
ORPHAN = ("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f")


def misnested(tmp_path: Path) -> tuple[Path, list[str]]:
    """fix-prefix: an in-place header write and an index replacement (three shards and the index)."""
    return make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path)), ["fix-prefix"]


def orphaned(tmp_path: Path) -> tuple[Path, list[str]]:
    """drop-orphans: a shard rebuilt beside itself and renamed over it (one file, no index)."""
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    add_tensors(folder, [ORPHAN], beside="lm_head.weight")
    return folder, ["drop-orphans", "-t", ORPHAN[0]]


# (temporary name, the folder and command whose repair creates it)
TEMPS = [
    pytest.param(JOURNAL_TMP, misnested, id="journal"),
    pytest.param(temp_name(INDEX), misnested, id="index"),
    pytest.param(temp_name("model.safetensors"), orphaned, id="shard"),
]


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry of the folder, without following links: name -> bytes, link target or kind."""
    out: dict[str, object] = {}
    for p in sorted(folder.iterdir()):
        out[p.name] = (
            f"-> {os.readlink(p)}"
            if p.is_symlink()
            else p.read_bytes()
            if p.is_file()
            else "directory"
            if p.is_dir()
            else "other"
        )
    return out


def ckpt(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in its own process, so that a repair blocked on a FIFO fails the test instead of hanging it."""
    env = {**os.environ, "CKPT_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def assert_refused(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("ckpt: ") and err.count("\n") == 1, err
    assert "internal error" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("name, build", TEMPS)
def test_symlink_at_a_temporary_name_is_refused_and_its_target_untouched(tmp_path, capsys, name, build):
    folder, command = build(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"precious, not part of the checkpoint\n")
    (folder / name).symlink_to(outside)
    before = snapshot(folder)
    code, _out, err = run_cli([command[0], folder, *command[1:]], capsys)
    assert_refused(code, err, name, "is a symlink, not a temporary file ckpt left")
    assert outside.read_bytes() == b"precious, not part of the checkpoint\n"
    assert snapshot(folder) == before  # the shards are still regular files, the link is still there


@pytest.mark.parametrize("name, build", TEMPS)
def test_directory_at_a_temporary_name_is_refused(tmp_path, capsys, name, build):
    folder, command = build(tmp_path)
    (folder / name).mkdir()
    before = snapshot(folder)
    code, _out, err = run_cli([command[0], folder, *command[1:]], capsys)
    assert_refused(code, err, name, "is a directory, not a temporary file ckpt left")
    assert snapshot(folder) == before


@pytest.mark.parametrize("name, build", TEMPS)
def test_fifo_at_a_temporary_name_is_refused_without_hanging(tmp_path, name, build):
    folder, command = build(tmp_path)
    os.mkfifo(folder / name)
    before = snapshot(folder)
    proc = ckpt([command[0], str(folder), *command[1:]])
    assert_refused(proc.returncode, proc.stderr, name, "is a FIFO, not a temporary file ckpt left")
    assert snapshot(folder) == before


def test_a_stale_regular_temporary_is_replaced_not_written_through(tmp_path, capsys):
    # A hard link planted at the temporary name: the old code truncated and rewrote the file it shares.
    folder, command = orphaned(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"precious\n")
    os.link(outside, folder / temp_name("model.safetensors"))
    code, _out, err = run_cli([command[0], folder, *command[1:]], capsys)
    assert code == 0, err
    assert outside.read_bytes() == b"precious\n"
    assert not (folder / temp_name("model.safetensors")).exists()


def test_create_never_opens_what_appears_at_the_name(tmp_path):
    # Between removing a stale file and creating the new one, something appears at the name: O_EXCL | O_NOFOLLOW
    # fails rather than opening it.
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"precious\n")
    (tmp_path / "ckpt").mkdir()
    with Folder(tmp_path / "ckpt") as folder:
        original = folder.remove_stale
        folder.remove_stale = lambda name: (original(name), os.symlink(outside, tmp_path / "ckpt" / name))
        with pytest.raises(Exception, match="another process created this file"):
            folder.create(".x.ckpt-tmp", 0o644)
    assert outside.read_bytes() == b"precious\n"


def pending_journal(folder: Path) -> None:
    """What a fix-prefix killed right after writing its journal leaves: the journal, no file changed yet."""
    steps = run(str(folder), fix_prefix.job(), dry_run=True).steps
    (folder / JOURNAL_NAME).write_bytes(encode_journal("fix-prefix", folder, steps))


def test_completing_a_journal_never_writes_through_a_symlinked_shard(tmp_path, capsys):
    # The plan refuses symlinked shards; a journal replayed later must refuse them too (the shard may have been
    # swapped for a link into a cache's blobs meanwhile).
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    pending_journal(folder)
    blob = tmp_path / "blob"
    (folder / "model.safetensors").rename(blob)
    (folder / "model.safetensors").symlink_to(blob)
    before, blob_before = snapshot(folder), blob.read_bytes()
    code, _out, err = run_cli(["fix-prefix", folder], capsys)
    assert_refused(code, err, "model.safetensors is a symlink", "cp -rL")
    assert blob.read_bytes() == blob_before
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_journal_that_is_not_a_regular_file_is_refused_without_hanging(tmp_path, kind):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"precious\n")
    journal = folder / JOURNAL_NAME
    {"symlink": lambda: journal.symlink_to(outside), "fifo": lambda: os.mkfifo(journal), "directory": journal.mkdir}[
        kind
    ]()
    before = snapshot(folder)
    proc = ckpt(["fix-prefix", str(folder)])
    assert_refused(proc.returncode, proc.stderr, JOURNAL_NAME)
    assert snapshot(folder) == before and outside.read_bytes() == b"precious\n"


def test_symlinked_index_is_refused_and_its_target_untouched(tmp_path, capsys):
    folder, _command = misnested(tmp_path)
    blob = tmp_path / "index-blob"
    (folder / INDEX).rename(blob)
    (folder / INDEX).symlink_to(blob)
    before, blob_before = snapshot(folder), blob.read_bytes()
    code, _out, err = run_cli(["fix-prefix", folder], capsys)
    assert_refused(code, err, f"{INDEX} is a symlink", "cp -rL")
    assert blob.read_bytes() == blob_before and snapshot(folder) == before
    assert file_bytes(folder)  # still readable as a checkpoint folder
