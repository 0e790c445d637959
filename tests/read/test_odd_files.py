"""An index, config or shard that is a directory, a FIFO or a device is a finding naming what it is, never silence
(the file counting as absent), a hang (a FIFO opened for reading waits for a writer forever) or an internal error."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corrupt import copy_fixture

REPO = Path(__file__).resolve().parents[2]
FIXTURE = "llmc-qwen3moe-nvfp4-sharded"
FILES = ["model.safetensors.index.json", "config.json", "model-00002-of-00003.safetensors"]
KINDS = {
    "directory": lambda p: p.mkdir(),
    "FIFO": os.mkfifo,
    "character device": lambda p: os.mknod(p, stat.S_IFCHR | 0o644, os.makedev(1, 3)),  # what /dev/null is
}


def doctor(folder: Path) -> subprocess.CompletedProcess:
    """In its own process with a timeout, so that a read blocked on a FIFO fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(folder), "--headers-only", "--format", "json"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FILES)
def test_a_checkpoint_file_that_is_not_a_regular_file_is_reported(tmp_path, name, kind):
    if kind == "character device" and os.geteuid() != 0:
        pytest.skip("mknod needs root")
    folder = copy_fixture(FIXTURE, tmp_path)
    (folder / name).unlink()
    KINDS[kind](folder / name)
    proc = doctor(folder)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    mine = [f for f in findings if name in f["files"] and f"is a {kind}, not a regular file" in f["message"]]
    assert mine and all(f["severity"] == "error" for f in mine), findings


def test_a_fifo_named_like_a_suppression_file_is_not_opened(tmp_path):
    folder = copy_fixture(FIXTURE, tmp_path)
    os.mkfifo(folder / ".ckpt.toml")
    proc = doctor(folder)
    assert proc.returncode in (0, 1) and "internal error" not in proc.stderr, proc.stderr
