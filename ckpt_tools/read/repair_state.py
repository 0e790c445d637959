"""What an interrupted repair leaves in a folder, read without acting on it.

A repair (ckpt_tools.repair) writes a journal, then the files, then removes the journal; temporary copies are built
under hidden names beside the files they replace. The names are defined here, on the read side, so that reading a
checkpoint never needs the repair package: the read path reports a pending repair, and only `ckpt repair --resume`
or `--rollback` (and the repair commands) act on it.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import orjson

from ..model.tensors import JOURNAL_NAME, PendingRepair

JOURNAL_MAGIC = b"CKPTJRN1"
TMP_SUFFIX = ".ckpt-tmp"
MANIFEST_LIMIT = 64 * 1024 * 1024  # a journal's manifest lists steps' small fields; far below this


def temp_name(file: str) -> str:
    """The temporary file built beside `file` before it is renamed over it: hidden, and not ending in .safetensors
    or .json, so no loader ever picks it up."""
    return f".{file}{TMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(TMP_SUFFIX) and len(name) > len(TMP_SUFFIX) + 1


def pending_repair(root: Path) -> PendingRepair | None:
    """The journal and temporary files of an interrupted repair in `root`, or None when there are none. Never
    follows a link and never opens anything but a regular file (a FIFO would block the read)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return None
    temps: list[str] = []
    foreign: list[str] = []
    for name in names:
        if is_temp_name(name):
            kind = _kind(root / name)
            (temps if kind is None else foreign).append(name if kind is None else f"{name} ({kind})")
    journal = JOURNAL_NAME in names
    if not journal and not temps and not foreign:
        return None
    job, problem = _read_job(root / JOURNAL_NAME) if journal else (None, None)
    return PendingRepair(journal=journal, job=job, problem=problem, temps=tuple(temps), foreign=tuple(foreign))


_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def _kind(path: Path) -> str | None:
    """None for a regular file, else what it is."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return None if stat.S_ISREG(mode) else kind_of(mode)


def _read_job(path: Path) -> tuple[str | None, str | None]:
    """(the job the journal records, None) or (None, why it cannot be read)."""
    kind = _kind(path)
    if kind is not None:
        return None, f"is {kind}, not a journal ckpt wrote"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    try:
        head = os.pread(fd, 16, 0)
        if len(head) < 16 or not head.startswith(JOURNAL_MAGIC):
            return None, "is damaged (not a ckpt repair journal)"
        (n,) = struct.unpack_from("<Q", head, 8)
        if n > MANIFEST_LIMIT:
            return None, "is damaged (its manifest length is implausible)"
        manifest = orjson.loads(os.pread(fd, n, 16))
        job = manifest.get("job") if isinstance(manifest, dict) else None
        return (job, None) if isinstance(job, str) else (None, "is damaged (no job recorded)")
    except (OSError, orjson.JSONDecodeError):
        return None, "is damaged (its manifest does not parse)"
    finally:
        os.close(fd)
