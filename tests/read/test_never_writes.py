"""Reading a checkpoint never writes: doctor, inspect and serve-flags report an interrupted repair (CK109) and leave
its journal where it is; only `ckpt repair --resume / --rollback` and the repairs act on it. The read path does not
even import the repair package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_tools.repair.journal import JOURNAL_NAME
from tests.repair_helpers import MISNESTED_FIXTURE, copy_of, file_bytes, make_sharded, run_cli

REPO = Path(__file__).resolve().parents[2]


def killed_fix_prefix(tmp_path: Path, at: str = "step0:after") -> Path:
    """A sharded fix-prefix SIGKILLed after its first shard: that shard has the new names, the index the old ones."""
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    env = {**os.environ, "CKPT_NO_PROGRESS": "1", "CKPT_REPAIR_CRASH_AT": at, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "fix-prefix", str(folder)],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9 and (folder / JOURNAL_NAME).exists()
    return folder


def every_entry(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Name -> (mode, bytes) of every entry, hidden ones included, so that a removed temporary counts too."""
    return {p.name: (p.lstat().st_mode, p.read_bytes() if p.is_file() else b"") for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "argv",
    [["doctor"], ["doctor", "--format", "json"], ["inspect"], ["serve-flags", "--fail-on", "none"]],
    ids=lambda a: " ".join(a),
)
def test_reading_commands_report_a_pending_journal_and_write_nothing(tmp_path, capsys, argv):
    folder = killed_fix_prefix(tmp_path)
    (folder / ".model-00001-of-00003.safetensors.ckpt-tmp").write_bytes(b"half a copy")
    before = every_entry(folder)
    code, out, err = run_cli([argv[0], folder, *argv[1:]], capsys)
    assert every_entry(folder) == before, "a read-only command changed the folder"
    assert "completed the interrupted" not in err
    if argv[0] == "doctor":
        assert code == 1 and "CK109" in out and "ckpt repair --resume" in out


def test_doctor_in_a_read_only_folder_reports_instead_of_failing(tmp_path, capsys):
    # The old doctor completed the journal first, so on a read-only mount it could not even read the checkpoint.
    folder = killed_fix_prefix(tmp_path)
    before = every_entry(folder)
    folder.chmod(0o555)
    try:
        code, out, err = run_cli(["doctor", folder, "--headers-only"], capsys)
        assert code == 1 and "CK109 interrupted-repair" in out, err
        code, _out, err = run_cli(["repair", folder, "--resume"], capsys)  # the writer refuses, one line
        assert code == 2 and "the folder is read-only" in err and err.count("\n") == 1
    finally:
        folder.chmod(0o755)
    assert every_entry(folder) == before


def test_resume_completes_and_rollback_restores(tmp_path, capsys):
    original = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path / "original"))
    old = file_bytes(original)
    done = tmp_path / "done"
    done.mkdir()
    done = make_sharded(copy_of(MISNESTED_FIXTURE, done))
    assert run_cli(["fix-prefix", done], capsys)[0] == 0
    new = file_bytes(done)

    folder = killed_fix_prefix(tmp_path / "a")
    assert file_bytes(folder) not in (old, new)  # index and shards disagree: the window CK109 reports
    code, out, _err = run_cli(["repair", folder, "--resume"], capsys)
    assert code == 0 and "completed the interrupted `fix-prefix` repair" in out
    assert file_bytes(folder) == new

    folder = killed_fix_prefix(tmp_path / "b")
    code, out, _err = run_cli(["repair", folder, "--rollback", "--format", "json"], capsys)
    assert code == 0 and '"job": "fix-prefix"' in out and '"action": "rollback"' in out
    assert file_bytes(folder) == old  # journal gone, every byte as before the repair
    code, out, _err = run_cli(["repair", folder, "--resume"], capsys)
    assert code == 0 and "nothing to resume" in out


def test_repair_needs_exactly_one_direction(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    for argv in (["repair", folder], ["repair", folder, "--resume", "--rollback"]):
        code, _out, err = run_cli(argv, capsys)
        assert code == 2 and "exactly one of --resume and --rollback" in err


def test_rollback_of_a_rebuilt_shard_is_refused_with_nothing_changed(tmp_path, capsys):
    from tests.repair_helpers import add_tensors

    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    add_tensors(folder, [("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f")], beside="lm_head.weight")
    env = {**os.environ, "CKPT_NO_PROGRESS": "1", "CKPT_REPAIR_CRASH_AT": "step0:renamed", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "drop-orphans", str(folder), "-t", "lm_head.input_scale"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9
    before = every_entry(folder)
    code, _out, err = run_cli(["repair", folder, "--rollback"], capsys)
    assert code == 2 and "already rebuilt" in err and "ckpt repair --resume" in err and err.count("\n") == 1
    assert every_entry(folder) == before
    assert run_cli(["repair", folder, "--resume"], capsys)[0] == 0
    assert not (folder / JOURNAL_NAME).exists()


def test_the_read_path_imports_nothing_from_repair(tmp_path):
    folder = killed_fix_prefix(tmp_path)
    code = (
        "import sys; from ckpt_tools.pipeline import analyze; from ckpt_tools.serve import *; "
        f"r = analyze({str(folder)!r}).report; "
        "assert any(f.code == 'CK109' for f in r.findings); "
        "bad = sorted(m for m in sys.modules if m.startswith('ckpt_tools.repair')); "
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
