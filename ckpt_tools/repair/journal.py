"""The repair journal and the repair lock.

Protocol (what makes a repair crash-safe, whatever instant the process dies at):
1. Under the lock, the complete list of steps, with every new byte they write, is written to a temporary file,
   fsynced and renamed to `.ckpt-repair.journal` (folder fsynced). Before that rename nothing in the checkpoint has
   changed; after it, the journal alone is enough to finish the repair.
2. The steps run. Each is idempotent and checks that its file holds either the old bytes, the new bytes or (an
   in-place header write that was cut short) a mix of the two in the span it writes; anything else stops the repair.
3. The journal is removed (folder fsynced).
Any later `ckpt` command on the checkpoint (a repair, or doctor through `finish_interrupted`) that finds a journal
replays it before reading anything, so an interrupted repair is always completed, never half-applied.

File format: `CKPTJRN1`, an 8-byte little-endian manifest length, the manifest (JSON: job, the folder's real path,
steps with their small fields, the blob's sha256), then one blob holding the steps' byte fields back to back.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct

import sys
from dataclasses import fields
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from ..errors import TargetError
from ..model.checkpoint import INDEX_NAME
from .execute import apply_steps
from .fsio import Folder, Writer, atomic_write, crashpoint, is_temp_name
from .steps import STEP_TYPES, Run, Step, sha256

JOURNAL_NAME = ".ckpt-repair.journal"
MAGIC = b"CKPTJRN1"


# ---- lock ---------------------------------------------------------------------------------------------------------


class Lock:
    """An exclusive `flock` on the checkpoint folder itself. The kernel drops it when the holder dies, and no lock file
    is ever created, so a killed repair leaves neither a stale lock nor a file to clean up."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd: int | None = None

    def __enter__(self) -> "Lock":
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TargetError(f"{self.root}: a repair is already running on this checkpoint (another process holds "
                              f"its lock); wait for it to finish") from None
        except OSError as exc:
            os.close(fd)
            raise TargetError(f"{self.root}: cannot lock the folder ({exc.strerror}); repairs need a local "
                              f"filesystem with flock") from None
        self.fd = fd
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


# ---- journal ------------------------------------------------------------------------------------------------------


def journal_path(root: Path) -> Path:
    return root / JOURNAL_NAME


def encode_journal(job: str, root: Path, steps: tuple[Step, ...]) -> bytes:
    blob = bytearray()
    encoded = []
    for step in steps:
        item: dict[str, Any] = {"kind": step.kind}
        for f in fields(step):
            value = getattr(step, f.name)
            if isinstance(value, bytes):
                item[f.name] = {"blob": [len(blob), len(value)]}
                blob += value
            elif f.name == "runs":
                item[f.name] = [[r.offset, r.old.hex(), r.new.hex()] for r in value]
            else:
                item[f.name] = value
        encoded.append(item)
    manifest = orjson.dumps({"format": "ckpt-repair-journal/1", "job": job, "root": str(root.resolve()),
                             "pid": os.getpid(), "blob_sha256": sha256(bytes(blob)), "steps": encoded})
    return MAGIC + struct.pack("<Q", len(manifest)) + manifest + bytes(blob)


def decode_journal(raw: bytes, root: Path) -> tuple[str, tuple[Step, ...]]:
    """The job and steps of a journal, checked before anything trusts it: intact (checksum), written for this very
    folder, and naming only checkpoint files in it. A journal copied in from elsewhere (a downloaded repository, a
    moved folder) never writes anything."""
    damaged = TargetError(f"{root}: the repair journal is damaged; restore the checkpoint from a copy, then delete "
                          f"{JOURNAL_NAME}")
    if not raw.startswith(MAGIC) or len(raw) < 16:
        raise damaged
    (n,) = struct.unpack_from("<Q", raw, 8)
    try:
        manifest = orjson.loads(raw[16 : 16 + n])
        blob = raw[16 + n :]
        if sha256(blob) != manifest["blob_sha256"]:
            raise damaged
        if manifest["root"] != str(root.resolve()):
            raise TargetError(f"{root}: {JOURNAL_NAME} was written for another folder ({manifest['root']}); if this "
                              f"checkpoint was moved after an interrupted repair, move it back and run ckpt there, "
                              f"else delete the file")
        steps = tuple(_decode_step(item, blob) for item in manifest["steps"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise damaged from None
    for step in steps:
        if not _checkpoint_file(step.file):
            raise TargetError(f"{root}: {JOURNAL_NAME} names `{step.file}`, which is not a checkpoint file in this "
                              f"folder; delete the journal")
    return manifest["job"], steps


def _decode_step(item: dict[str, Any], blob: bytes) -> Step:
    cls = STEP_TYPES[item["kind"]]
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        value = item[f.name]
        if isinstance(value, dict) and "blob" in value:
            start, length = value["blob"]
            value = blob[start : start + length]
        elif f.name == "runs":
            value = tuple(Run(o, bytes.fromhex(a), bytes.fromhex(b)) for o, a, b in value)
        elif f.name == "copies":
            value = tuple(tuple(c) for c in value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _checkpoint_file(name: object) -> bool:
    """A shard or the index, directly in the folder: no path, no hidden file."""
    return (isinstance(name, str) and name == os.path.basename(name) and not name.startswith(".")
            and "\0" not in name and (name.endswith(".safetensors") or name == INDEX_NAME))


def run_journaled(root: Path, job: str, steps: tuple[Step, ...], writer: Writer) -> None:
    """Carry out `steps` under the journal protocol. The caller holds the lock."""
    with Folder(root) as folder:
        refuse_foreign_temps(folder)
        atomic_write(folder, JOURNAL_NAME, encode_journal(job, root, steps), writer, mode=0o644, crash="journal")
        apply_steps(folder, steps, writer)
        crashpoint("done")
        _remove_journal(folder)


def _remove_journal(folder: Folder) -> None:
    folder.unlink(JOURNAL_NAME)
    folder.fsync()


def refuse_foreign_temps(folder: Folder) -> None:
    """Refuse to start while something that is not a regular file sits at one of our temporary names: a symlink
    there would redirect a write out of the folder, a FIFO would block it, a directory would fail it."""
    for name in sorted(os.listdir(folder.fd)):
        if is_temp_name(name):
            st = folder.lstat(name)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise folder.not_ours(name, st.st_mode)


def recover(root: Path, writer: Writer) -> str | None:
    """Complete the repair an interrupted process left in the journal; returns its job name, or None if there was
    none. Also removes temporary files a killed repair left behind. The caller holds the lock."""
    with Folder(root) as folder:
        return _recover(folder, writer)


def _recover(folder: Folder, writer: Writer) -> str | None:
    root, path = folder.path, journal_path(folder.path)
    refuse_foreign_temps(folder)
    job = None
    if folder.lstat(JOURNAL_NAME) is not None:
        job, steps = decode_journal(folder.read(JOURNAL_NAME), root)
        try:
            apply_steps(folder, steps, writer)
            _remove_journal(folder)
        except TargetError as exc:
            raise TargetError(f"{exc}. The interrupted `{job}` repair cannot be completed: restore the file, or "
                              f"delete {path} to abandon it") from None
        except OSError as exc:
            raise TargetError(f"{root}: an interrupted `{job}` repair must be completed before the checkpoint is "
                              f"read, and that failed ({exc.strerror or exc}); make the folder and its files "
                              f"writable and run ckpt again") from None
    for stale in stale_temps(root):
        try:
            folder.unlink(stale.name)
        except OSError:
            pass  # debris in a folder we may not write to harms nothing: no loader reads these names
    return job


def stale_temps(root: Path) -> list[Path]:
    """Temporary files of a killed repair (journal or copies being written); only ever ours, by their names."""
    return [Path(e.path) for e in os.scandir(root) if is_temp_name(e.name) and e.is_file(follow_symlinks=False)]


def finish_interrupted(root: Path | None) -> str | None:
    """Called before a checkpoint is read: if a repair was interrupted, complete it (taking the lock) and say so on
    stderr; remove a killed repair's temporary files. Returns the job completed, or None. Raises `TargetError` while
    another process is repairing the checkpoint."""
    if root is None or not (os.path.lexists(journal_path(root)) or stale_temps(root)):
        return None
    with Lock(root):
        job = recover(root, Writer())
    if job:
        print(f"ckpt: completed the interrupted `{job}` repair of {root} from its journal", file=sys.stderr)
    return job
