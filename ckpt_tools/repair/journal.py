"""The repair journal and the repair lock.

Protocol (what makes a repair crash-safe, whatever instant the process dies at):
1. Under the lock, the complete list of steps, with every new byte they write, is written to a temporary file,
   fsynced and renamed to `.ckpt-repair.journal` (folder fsynced). Before that rename nothing in the checkpoint has
   changed; after it, the journal alone is enough to finish the repair.
2. The steps run. Each is idempotent and checks that its file holds either the old bytes, the new bytes or (an
   in-place header write that was cut short) a mix of the two in the span it writes; anything else stops the repair.
3. The journal is removed (folder fsynced).
A repair that finds a journal completes it before planning its own work. Reading never acts on a journal: doctor,
inspect and serve-flags report it (CK109), and `ckpt repair --resume` completes it or `ckpt repair --rollback` writes
the old bytes back (journaled in the same way, so a killed rollback is carried on, never undone).

File format: `CKPTJRN1`, an 8-byte little-endian manifest length, the manifest (JSON: job, the folder's real path,
steps with their small fields, the blob's sha256), then one blob holding the steps' byte fields back to back. A step
that records both a file's old and new bytes (the index) keeps the new ones as the part that differs from the old
(`new_splice`: the old bytes [i, j) give way to a blob; both ends are the old bytes'): a rename rewrites a few
thousand lines of a many-megabyte index, so the journal holds it once, not twice. A journal reader that predates this
finds no `new` field and refuses the journal as damaged, never writing the splice alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import struct
import time
from dataclasses import MISSING, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import orjson

from ..errors import TargetError
from ..model.checkpoint import INDEX_NAME
from ..read.repair_state import JOURNAL_MAGIC, JOURNAL_NAME
from .execute import apply_steps
from .fsio import Folder, Writer, atomic_write, crashpoint, is_temp_name
from .space import check_free_space
from .steps import STEP_TYPES, HeaderStep, IndexStep, PatchStep, RewriteStep, Run, Step, sha256

MAGIC = JOURNAL_MAGIC
COPIES_FIRST = True  # build every rebuilt shard before the first visible change, when the disk has room (the bench
# turns it off for its baseline)


# ---- lock ---------------------------------------------------------------------------------------------------------


# A repair killed mid-scan leaves its forked value-scan child (read/background_scan.py) alive for a moment: the child
# shares the lock's open file description until the kernel delivers its parent-death signal. A new run waits this long
# for such a dying holder before calling the lock taken.
LOCK_GRACE_SECONDS = 3.0


def _flock_within(fd: int, seconds: float) -> None:
    """`flock(LOCK_EX)` on `fd`, retried until `seconds` have passed; BlockingIOError if it is still held then."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class Lock:
    """An exclusive `flock` on the checkpoint folder itself. The kernel drops it when the holder dies, and no lock file
    is ever created, so a killed repair leaves neither a stale lock nor a file to clean up."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd: int | None = None

    def __enter__(self) -> Lock:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _flock_within(fd, LOCK_GRACE_SECONDS)
        except BlockingIOError:
            os.close(fd)
            raise TargetError(
                f"{self.root}: a repair is already running on this checkpoint (another process holds "
                f"its lock); wait for it to finish"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise TargetError(
                f"{self.root}: cannot lock the folder ({exc.strerror}); repairs need a local filesystem with flock"
            ) from None
        self.fd = fd
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


# ---- journal ------------------------------------------------------------------------------------------------------


def journal_path(root: Path) -> Path:
    return root / JOURNAL_NAME


def encode_journal(job: str, root: Path, steps: tuple[Step, ...]) -> bytes:
    """The journal of `steps`: `journal_pieces` joined."""
    return b"".join(journal_pieces(job, root, steps))


def journal_pieces(job: str, root: Path, steps: tuple[Step, ...]) -> list[bytes]:
    """The journal's bytes as pieces to join (their checksum made, nothing copied): what a thread of its own can
    make without allocating the joined journal in its own memory arena."""
    # The blob is the steps' byte fields one after the other: kept as parts, hashed part by part and joined once
    # (the index alone, old and new, is tens of megabytes on a large checkpoint).
    parts: list[bytes] = []
    digest = hashlib.sha256()
    size = 0
    encoded = []
    for step in steps:
        item: dict[str, Any] = {"kind": step.kind}
        spliced = _splice(step)
        for f in fields(step):
            value = getattr(step, f.name)
            if f.name == "new" and spliced is not None:
                i, j, middle = spliced
                item["new_splice"] = [i, j, size, len(middle)]
                parts.append(middle)
                digest.update(middle)
                size += len(middle)
            elif isinstance(value, bytes):
                item[f.name] = {"blob": [size, len(value)]}
                parts.append(value)
                digest.update(value)
                size += len(value)
            elif f.name == "runs":
                item[f.name] = [[r.offset, r.old.hex(), r.new.hex()] for r in value]
            else:
                item[f.name] = value
        encoded.append(item)
    manifest = orjson.dumps(
        {
            "format": "ckpt-repair-journal/1",
            "job": job,
            "root": str(root.resolve()),
            "pid": os.getpid(),
            "blob_sha256": digest.hexdigest(),
            "steps": encoded,
        }
    )
    return [MAGIC, struct.pack("<Q", len(manifest)), manifest, *parts]


_SPLICE_AT_LEAST = 1 << 16  # bytes a splice must save to be worth it: small steps keep their new bytes whole


def _splice(step: Step) -> tuple[int, int, bytes] | None:
    """(i, j, middle) with `step.new == step.old[:i] + middle + step.old[j:]`, the common start and end of the two
    taken out, when the step records both and that saves a useful amount; None otherwise."""
    old, new = getattr(step, "old", None), getattr(step, "new", None)
    if not isinstance(old, bytes) or not isinstance(new, bytes):
        return None
    start = _common_start(old, new)
    end = _common_end(old, new, min(len(old), len(new)) - start)
    if start + end < _SPLICE_AT_LEAST:
        return None
    return start, len(old) - end, new[start : len(new) - end]


def _common_start(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of `a` and `b`: compared a block at a time (blocks halving once one
    differs), so a many-megabyte prefix costs a few hundred slice comparisons."""
    n = min(len(a), len(b))
    i, step = 0, 1 << 16
    while step:
        while i + step <= n and a[i : i + step] == b[i : i + step]:
            i += step
        step //= 2
    return i


def _common_end(a: bytes, b: bytes, most: int) -> int:
    """Length of the longest common suffix of `a` and `b`, at most `most` bytes (what the common prefix leaves)."""
    la, lb = len(a), len(b)
    k, step = 0, 1 << 16
    while step:
        while k + step <= most and a[la - k - step : la - k] == b[lb - k - step : lb - k]:
            k += step
        step //= 2
    return k


def decode_journal(raw: bytes, root: Path) -> tuple[str, tuple[Step, ...]]:
    """The job and steps of a journal, checked before anything trusts it: intact (checksum), written for this very
    folder, and naming only checkpoint files in it. A journal copied in from elsewhere (a downloaded repository, a
    moved folder) never writes anything."""
    damaged = TargetError(
        f"{root}: the repair journal is damaged; restore the checkpoint from a copy, then delete {JOURNAL_NAME}"
    )
    if not raw.startswith(MAGIC) or len(raw) < 16:
        raise damaged
    (n,) = struct.unpack_from("<Q", raw, 8)
    try:
        manifest = orjson.loads(raw[16 : 16 + n])
        blob = raw[16 + n :]
        if sha256(blob) != manifest["blob_sha256"]:
            raise damaged
        if manifest["root"] != str(root.resolve()):
            raise TargetError(
                f"{root}: {JOURNAL_NAME} was written for another folder ({manifest['root']}); if this "
                f"checkpoint was moved after an interrupted repair, move it back and run ckpt there, "
                f"else delete the file"
            )
        steps = tuple(_decode_step(item, blob) for item in manifest["steps"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise damaged from None
    for step in steps:
        if not _checkpoint_file(step.file):
            raise TargetError(
                f"{root}: {JOURNAL_NAME} names `{step.file}`, which is not a checkpoint file in this "
                f"folder; delete the journal"
            )
    return manifest["job"], steps


def _decode_step(item: dict[str, Any], blob: bytes) -> Step:
    cls = STEP_TYPES[item["kind"]]
    kwargs: dict[str, Any] = {}
    splice = item.get("new_splice")
    for f in fields(cls):
        if f.name == "new" and splice is not None:
            continue  # rebuilt from the old bytes below
        if f.name not in item and f.default is not MISSING:  # a field newer than the journal's writer
            continue
        value = item[f.name]
        if isinstance(value, dict) and "blob" in value:
            start, length = value["blob"]
            value = blob[start : start + length]
        elif f.name == "runs":
            value = tuple(Run(o, bytes.fromhex(a), bytes.fromhex(b)) for o, a, b in value)
        elif f.name == "copies":
            value = tuple(tuple(c) for c in value)
        kwargs[f.name] = value
    if splice is not None:
        i, j, start, length = splice
        old = kwargs["old"]
        if not (isinstance(old, bytes) and 0 <= i <= j <= len(old) and 0 <= start <= start + length <= len(blob)):
            raise ValueError("a spliced field outside its bytes")  # reported as a damaged journal
        kwargs["new"] = old[:i] + blob[start : start + length] + old[j:]
    if cls is IndexStep and kwargs.get("old") is not None and sha256(kwargs["old"]) != kwargs["old_sha256"]:
        # The executor takes the recorded old bytes for their hash (`execute.prepare_index`): they must agree.
        raise ValueError("an index step whose old bytes are not the ones it hashed")  # reported as damaged
    return cls(**kwargs)


def _checkpoint_file(name: object) -> bool:
    """A shard or the index, directly in the folder: no path, no hidden file."""
    return (
        isinstance(name, str)
        and name == os.path.basename(name)
        and not name.startswith(".")
        and "\0" not in name
        and (name.endswith(".safetensors") or name == INDEX_NAME)
    )


def run_journaled(root: Path, job: str, steps: tuple[Step, ...], writer: Writer, journal: bytes | None = None) -> None:
    """Carry out `steps` under the journal protocol. The caller holds the lock. `journal`: the journal of these
    steps, `encode_journal(job, root, steps)` made in advance by this process (encoded here otherwise).

    A write that fails (a full disk, a quota, an I/O error) leaves the folder as it was: before the journal exists,
    the partial temporary file is removed; after, the steps already applied are undone from the journal and the
    journal is removed. Only when that cannot be done (a shard was already rebuilt) is the journal kept, and the
    refusal says to complete it with `ckpt repair --resume` once the cause is gone."""
    with Folder(root) as folder:
        folder.refuse_if_append_only()
        refuse_foreign_temps(folder)
        if journal is None:
            journal = encode_journal(job, root, steps)
        copies_first = COPIES_FIRST and check_free_space(folder, steps, len(journal))
        try:
            atomic_write(folder, JOURNAL_NAME, journal, writer, mode=0o644, crash="journal")
        except OSError as exc:
            _remove_stale_temps(folder)
            raise TargetError(
                f"{root}: the `{job}` repair could not write its journal ({_why(exc)}); nothing was changed"
            ) from None
        try:
            apply_steps(folder, steps, writer, copies_first=copies_first)
        except OSError as exc:
            _undo(folder, job, steps, exc)
        crashpoint("done")
        _remove_journal(folder)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _undo(folder: Folder, job: str, steps: tuple[Step, ...], exc: OSError) -> NoReturn:
    """After a failed write: put back the old bytes of the steps already applied (in place: a full disk does not
    stop it), remove the journal and temporaries, and refuse. The journal stays in place until the old bytes are
    back, so a kill meanwhile still leaves a folder `--resume` completes."""
    why = f"{folder.path}: the `{job}` repair failed while writing ({_why(exc)})"
    _remove_stale_temps(folder)
    try:
        inverse = tuple(inverse_steps(folder, job, steps))
    except TargetError:
        raise TargetError(
            f"{why}; a shard was already rebuilt, so it cannot be undone: the journal is kept, and "
            f"`ckpt repair --resume {folder.path}` completes the repair once the cause is fixed"
        ) from None
    try:
        apply_steps(folder, inverse, Writer())
        _remove_journal(folder)
    except OSError as again:
        raise TargetError(
            f"{why}, and undoing it failed too ({_why(again)}): the journal is kept; "
            f"`ckpt repair --resume {folder.path}` completes the repair once the cause is fixed"
        ) from None
    raise TargetError(f"{why}; it was undone and nothing changed") from None


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


# ---- interrupted repairs: complete or roll back -------------------------------------------------------------------

ROLLBACK = " rollback"  # the job of a rollback's own journal ends with this


def recover(root: Path, writer: Writer) -> str | None:
    """Complete the repair an interrupted process left in the journal; returns its job name, or None if there was
    none. Also removes temporary files a killed repair left behind. The caller holds the lock."""
    with Folder(root) as folder:
        folder.refuse_if_append_only()
        refuse_foreign_temps(folder)
        job = None
        if folder.lstat(JOURNAL_NAME) is not None:
            job, steps = decode_journal(folder.read(JOURNAL_NAME), root)
            _replay(folder, job, steps, writer, "completed")
        _remove_stale_temps(folder)
        return job


def rollback(root: Path, writer: Writer) -> str | None:
    """Restore the state before the repair an interrupted process left in the journal; returns its job name, or
    None if there was none. The rollback is itself journaled: the journal is replaced, in one rename, by one whose
    steps write the old bytes back, so a rollback killed in turn is completed by `--resume` or `--rollback`. Refused,
    with nothing changed, when a shard was already rebuilt (the journal does not keep a rebuilt file's old bytes).
    The caller holds the lock."""
    with Folder(root) as folder:
        folder.refuse_if_append_only()
        refuse_foreign_temps(folder)
        job = None
        if folder.lstat(JOURNAL_NAME) is not None:
            job, steps = decode_journal(folder.read(JOURNAL_NAME), root)
            if not job.endswith(ROLLBACK):  # a rollback killed in turn is carried on, not undone
                steps = tuple(inverse_steps(folder, job, steps))
                job += ROLLBACK
                try:
                    atomic_write(
                        folder, JOURNAL_NAME, encode_journal(job, root, steps), writer, mode=0o644, crash="rollback"
                    )
                except OSError as exc:
                    _remove_stale_temps(folder)
                    raise TargetError(
                        f"{root}: the rollback could not write its journal ({_why(exc)}); nothing was changed"
                    ) from None
            _replay(folder, job, steps, writer, "rolled back")
        _remove_stale_temps(folder)
        return job.removesuffix(ROLLBACK) if job else None


def inverse_steps(folder: Folder, job: str, steps: tuple[Step, ...]) -> list[Step]:
    """Steps that write the journal's old bytes back, last file first. Raises `TargetError` when the old state
    cannot be rebuilt from the journal."""
    out: list[Step] = []
    for step in reversed(steps):
        if isinstance(step, RewriteStep):
            state = _rewrite_state(folder, step)
            if state == "new":
                raise TargetError(
                    f"{step.file} was already rebuilt by the interrupted `{job}` repair ({step.reason}); "
                    f"the journal does not keep the old file's bytes, so it cannot be rolled back: "
                    f"complete it with `ckpt repair --resume` (nothing was changed)"
                )
            if state != "old":
                raise TargetError(
                    f"{step.file}: its header is neither what the interrupted `{job}` repair found nor "
                    f"what it writes (was the file changed meanwhile?); nothing was changed"
                )
            continue  # the original is untouched; its half-built copy is a stale temporary file
        old = getattr(step, "old", None)
        if isinstance(step, PatchStep):
            out.append(replace(step, runs=tuple(Run(r.offset, r.new, r.old) for r in step.runs)))
        elif old is None:
            raise TargetError(
                f"the journal of the interrupted `{job}` repair was written by a ckpt version that did "
                f"not record the old bytes of {step.file}, so it cannot be rolled back: complete it "
                f"with `ckpt repair --resume` (nothing was changed)"
            )
        elif isinstance(step, HeaderStep):
            out.append(replace(step, new=old, old=step.new, old_sha256=sha256(step.new), note=f"restore {step.note}"))
        elif isinstance(step, IndexStep):
            out.append(
                replace(
                    step,
                    new=old,
                    old=step.new,
                    old_sha256=sha256(step.new),
                    note="restore",
                )
            )
    return out


def _rewrite_state(folder: Folder, step: RewriteStep) -> str:
    """`new` if the rebuilt copy has replaced the original already, `old` if the original is still there, else
    `other`."""
    fd = folder.open_file(step.file, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == step.new_size and os.pread(fd, len(step.new_prefix), 0) == step.new_prefix:
            return "new"
        if size == step.old_size and sha256(os.pread(fd, step.old_prefix_len, 0)) == step.old_prefix_sha256:
            return "old"
        return "other"
    finally:
        os.close(fd)


def _replay(folder: Folder, job: str, steps: tuple[Step, ...], writer: Writer, done: str) -> None:
    copies_first = COPIES_FIRST and check_free_space(folder, steps, 0)
    try:
        apply_steps(folder, steps, writer, copies_first=copies_first)
        crashpoint("done")
        _remove_journal(folder)

    except TargetError as exc:
        raise TargetError(
            f"{exc}. The interrupted `{job}` repair cannot be {done}: restore the file, or delete "
            f"{folder.path / JOURNAL_NAME} to abandon it"
        ) from None
    except OSError as exc:
        _remove_stale_temps(folder)
        raise TargetError(
            f"{folder.path}: the interrupted `{job}` repair cannot be {done} ({exc.strerror or exc}); "
            f"its journal is kept: make the folder and its files writable and run "
            f"`ckpt repair --resume` again"
        ) from None


def _remove_stale_temps(folder: Folder) -> None:
    for stale in stale_temps(folder.path):
        with contextlib.suppress(OSError):  # debris in a folder we may not write to harms nothing: no loader reads it
            folder.unlink(stale.name)


def stale_temps(root: Path) -> list[Path]:
    """Temporary files of a killed repair (journal or copies being written); only ever ours, by their names."""
    return [Path(e.path) for e in os.scandir(root) if is_temp_name(e.name) and e.is_file(follow_symlinks=False)]
