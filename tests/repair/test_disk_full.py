"""A full disk: a repair the filesystem has no room for is refused before it writes (naming the bytes needed and
available); a write that fails with ENOSPC anyway (another process filled the disk) is a one-line refusal and the
folder is left exactly as it was: no journal, no temporary file, nothing for doctor to report. Run on a small tmpfs
(root only), and with ENOSPC injected through the Writer seam."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ckpt_tools.pipeline import analyze
from ckpt_tools.repair import fsio, journal
from ckpt_tools.repair.journal import JOURNAL_NAME
from tests.repair_helpers import MISNESTED_FIXTURE, add_tensors, copy_of, file_bytes, leftovers, make_sharded, run_cli

ORPHAN = ("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f")
DROP = ["drop-orphans", "-t", ORPHAN[0]]


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: big enough for the checkpoint, too small once filled for a rebuilt copy of its shard."""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def orphaned_on(disk: Path, tmp_path: Path, free: int) -> Path:
    """The orphan-scale fixture on `disk`, with a filler file leaving about `free` bytes available."""
    folder = copy_of("modelopt-llama-nvfp4", tmp_path / "staging")
    add_tensors(folder, [ORPHAN], beside="lm_head.weight")
    dest = disk / folder.name
    shutil.copytree(folder, dest)
    st = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * max(st.f_bavail * st.f_frsize - free, 0))
    return dest


def no_trace(folder: Path, before: dict[str, bytes]) -> None:
    assert file_bytes(folder) == before and leftovers(folder) == []
    report = analyze(str(folder), headers_only=True).report
    assert not [f for f in report.findings if f.code == "CK109"]


def test_a_rewrite_the_disk_has_no_room_for_is_refused_before_writing(small_disk, tmp_path, capsys):
    folder = orphaned_on(small_disk, tmp_path, free=200 * 1024)
    before = file_bytes(folder)
    code, _out, err = run_cli([DROP[0], folder, *DROP[1:]], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "not enough free space" in err and "a rebuilt copy of model.safetensors" in err
    needed, available = (
        int(err.split(word)[1].split(" B")[0].replace(",", "")) for word in ("it needs ", "the filesystem has ")
    )
    assert needed > os.path.getsize(folder / "model.safetensors") and available < needed
    no_trace(folder, before)


def test_enospc_mid_copy_leaves_the_folder_as_it_was(small_disk, tmp_path, capsys, monkeypatch):
    # The disk fills after the check passed (another writer): the copy fails part-way.
    folder = orphaned_on(small_disk, tmp_path, free=200 * 1024)
    before = file_bytes(folder)
    monkeypatch.setattr(journal, "check_free_space", lambda *args: None)
    code, _out, err = run_cli([DROP[0], folder, *DROP[1:]], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "No space left on device" in err and "it was undone and nothing changed" in err
    assert "internal error" not in err
    no_trace(folder, before)


def test_enospc_writing_the_journal_leaves_no_partial_file(small_disk, tmp_path, capsys, monkeypatch):
    folder = orphaned_on(small_disk, tmp_path, free=0)
    before = file_bytes(folder)
    monkeypatch.setattr(journal, "check_free_space", lambda *args: None)
    code, _out, err = run_cli([DROP[0], folder, *DROP[1:]], capsys)
    assert code == 2 and "could not write its journal (No space left on device); nothing was changed" in err
    no_trace(folder, before)


def enospc_on_write(monkeypatch, n: int) -> None:
    """The `n`-th positional write of the repair fails with ENOSPC (the Writer seam)."""
    calls = {"n": 0}
    real = fsio.Writer._pwrite_all

    def failing(self, fd, view, offset):
        calls["n"] += 1
        if calls["n"] == n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, fd, view, offset)

    monkeypatch.setattr(fsio.Writer, "_pwrite_all", failing)


@pytest.mark.parametrize("copies_first", [True, False], ids=["copies first", "one copy at a time"])
def test_enospc_at_the_index_leaves_the_folder_as_it_was(tmp_path, capsys, monkeypatch, copies_first):
    # fix-prefix on shards. Copies first (the default): the journal (write 1), the new index under its temporary name
    # (write 2, fails: nothing visible has changed yet). One copy at a time (a disk with little room): the journal,
    # the shard header in place, then the index (write 3, fails): the header already written is undone.
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    before = file_bytes(folder)
    monkeypatch.setattr(journal, "COPIES_FIRST", copies_first)
    enospc_on_write(monkeypatch, 2 if copies_first else 3)
    code, _out, err = run_cli(["fix-prefix", folder], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "No space left on device" in err and "undone and nothing changed" in err
    monkeypatch.undo()
    no_trace(folder, before)


def test_enospc_while_resuming_keeps_the_journal_and_says_so(tmp_path, capsys, monkeypatch):
    from ckpt_tools.repair import fix_prefix, run
    from ckpt_tools.repair.journal import encode_journal

    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    steps = run(str(folder), fix_prefix.job(), dry_run=True).steps
    (folder / JOURNAL_NAME).write_bytes(encode_journal("fix-prefix", folder, steps))
    before = file_bytes(folder)
    enospc_on_write(monkeypatch, 1)  # the new index, written first under its temporary name
    code, _out, err = run_cli(["repair", folder, "--resume"], capsys)
    assert code == 2 and err.count("\n") == 1 and "internal error" not in err, err
    assert "cannot be completed (No space left on device); its journal is kept" in err
    assert file_bytes(folder) == before and leftovers(folder) == [JOURNAL_NAME]  # no partial temporary
    monkeypatch.undo()
    assert run_cli(["repair", folder, "--resume"], capsys)[0] == 0 and leftovers(folder) == []
    assert file_bytes(folder) != before
