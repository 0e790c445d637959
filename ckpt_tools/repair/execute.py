"""Apply steps to the files. Every step is idempotent and checks the state it finds first:

- new bytes already there: skip (an interrupted repair got this far);
- old bytes (or, for an in-place write, a torn mix inside the span it writes): write the new bytes;
- anything else: someone else changed the file; raise `TargetError` and write nothing to it.

Writes into an existing shard touch only the bytes that change and are fsynced; replaced files are built beside the
original, fsynced, renamed over it, and the folder is fsynced.
"""

from __future__ import annotations

import os
from typing import Callable

from ..errors import TargetError
from .fsio import Folder, Writer, atomic_write, crashpoint
from .steps import HeaderStep, IndexStep, PatchStep, RewriteStep, Run, Step, sha256


def apply_steps(root: Folder, steps: tuple[Step, ...], writer: Writer) -> None:
    for i, step in enumerate(steps):
        tag = f"step{i}"
        crashpoint(f"{tag}:before")
        APPLY[step.kind](root, step, writer, tag)
        crashpoint(f"{tag}:after")


def _changed(file: str, what: str) -> TargetError:
    return TargetError(f"{file}: {what} is neither what the repair found nor what it writes (was the file changed "
                       f"meanwhile?); nothing more was written to it")


def _open_checked(root: Folder, file: str, size: int) -> int:
    fd = root.open_file(file, os.O_RDWR)  # never through a link: a cache snapshot's blob is shared
    if os.fstat(fd).st_size != size:
        os.close(fd)
        raise _changed(file, "its size")
    return fd


def apply_header(root: Folder, step: HeaderStep, writer: Writer, tag: str) -> None:
    fd = _open_checked(root, step.file, step.size)
    try:
        prefix = os.pread(fd, step.prefix_len, 0)
        i, j = step.offset, step.offset + len(step.new)
        if prefix[i:j] == step.new:
            return
        if sha256(prefix[:i] + prefix[j:]) != step.keep_sha256:
            raise _changed(step.file, "its header")
        writer.pwrite(fd, step.new, i, crash=f"{tag}:torn")
        os.fsync(fd)
    finally:
        os.close(fd)


def _pending(fd: int, runs: tuple[Run, ...], file: str) -> list[Run]:
    """The runs still to write; raises if a byte is neither its old nor its new value."""
    todo = []
    for run in runs:
        cur = os.pread(fd, len(run.new), run.offset)
        if cur == run.new:
            continue
        if len(cur) != len(run.new) or any(c != o and c != n for c, o, n in zip(cur, run.old, run.new)):
            raise _changed(file, f"data at byte {run.offset:,}")
        todo.append(run)
    return todo


def apply_patch(root: Folder, step: PatchStep, writer: Writer, tag: str) -> None:
    fd = _open_checked(root, step.file, step.size)
    try:
        todo = _pending(fd, step.runs, step.file)  # check every run before writing any
        for k, run in enumerate(todo):
            writer.pwrite(fd, run.new, run.offset)
            if k == 0:
                crashpoint(f"{tag}:partial")
        if todo:
            os.fsync(fd)
    finally:
        os.close(fd)


def apply_rewrite(root: Folder, step: RewriteStep, writer: Writer, tag: str) -> None:
    fd = root.open_file(step.file, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if st.st_size == step.new_size and os.pread(fd, len(step.new_prefix), 0) == step.new_prefix:
            if not _pending(fd, step.runs, step.file):
                root.remove_stale(step.tmp)  # renamed already; a leftover can only be a stale copy
                return
        if st.st_size != step.old_size or sha256(os.pread(fd, step.old_prefix_len, 0)) != step.old_prefix_sha256:
            raise _changed(step.file, "its header")
        out = root.create(step.tmp, st.st_mode & 0o7777)
        try:
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(out, st.st_uid, st.st_gid)
                except PermissionError:
                    pass  # only root may give a file away; the copy is then ours
            writer.pwrite(out, step.new_prefix, 0)
            for k, (src, dst, length) in enumerate(step.copies):
                writer.copy(fd, out, src, dst, length, crash=f"{tag}:copy" if k == 0 else None)
            if os.fstat(out).st_size != step.new_size:
                raise TargetError(f"{step.file}: the rewritten copy has the wrong size; the original is unchanged")
            for run in _pending_in_copy(root, step.tmp, step.runs, step.file):
                writer.pwrite(out, run.new, run.offset)
            os.fsync(out)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    crashpoint(f"{tag}:synced")
    root.replace(step.tmp, step.file)
    crashpoint(f"{tag}:renamed")
    root.fsync()


def _pending_in_copy(root: Folder, tmp: str, runs: tuple[Run, ...], file: str) -> list[Run]:
    """Patch runs checked against the bytes just copied (the write-only descriptor cannot read them back)."""
    if not runs:
        return []
    rfd = root.open_file(tmp, os.O_RDONLY)
    try:
        return _pending(rfd, runs, file)
    finally:
        os.close(rfd)


def apply_index(root: Folder, step: IndexStep, writer: Writer, tag: str) -> None:
    current = root.read(step.file)
    if current == step.new:
        return
    if sha256(current) != step.old_sha256:
        raise _changed(step.file, "the index")
    atomic_write(root, step.file, step.new, writer, crash=tag)


APPLY: dict[str, Callable[[Folder, Step, Writer, str], None]] = {
    "header": apply_header,  # type: ignore[dict-item]
    "patch": apply_patch,  # type: ignore[dict-item]
    "rewrite": apply_rewrite,  # type: ignore[dict-item]
    "index": apply_index,  # type: ignore[dict-item]
}
