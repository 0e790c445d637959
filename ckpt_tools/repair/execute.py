"""Apply steps to the files. Every step is idempotent and checks the state it finds first:

- new bytes already there: skip (an interrupted repair got this far);
- old bytes (or, for an in-place write, a torn mix inside the span it writes): write the new bytes;
- anything else: someone else changed the file; raise `TargetError` and write nothing to it.

Writes into an existing shard touch only the bytes that change and are fsynced; replaced files are built beside the
original, fsynced, renamed over it, and the folder is fsynced.
"""

from __future__ import annotations

import contextlib
import os

from ..errors import TargetError
from .fsio import Folder, Writer, crashpoint, temp_name, write_temp
from .steps import HeaderStep, IndexStep, PatchStep, RewriteStep, Run, Step, sha256


def apply_steps(root: Folder, steps: tuple[Step, ...], writer: Writer, *, copies_first: bool = True) -> None:
    """Apply `steps` so that the time during which other loaders can see a mix of old and new files is as short as
    it can be. Phase 1, invisible to loaders: every rebuilt shard and the new index are written and fsynced under
    their hidden temporary names (minutes for large shards). Phase 2, visible: the in-place header and byte writes
    and the renames follow back to back, the index last, with no fsync in between (the journal, fsynced before,
    covers a crash). Phase 3: the files written in place and the folder are fsynced, and only then may the caller
    remove the journal. With `copies_first` off (the disk has room for one rebuilt copy at a time only), every step
    is carried out whole, one after the other."""
    if not copies_first:
        for i, step in enumerate(steps):
            crashpoint(f"step{i}:before")
            apply_step(root, step, writer, f"step{i}")
            crashpoint(f"step{i}:after")
        return
    staged: dict[int, bool] = {}  # step -> whether a temporary file waits to be renamed
    for i, step in enumerate(steps):
        if isinstance(step, RewriteStep):
            staged[i] = prepare_rewrite(root, step, writer, f"step{i}")
        elif isinstance(step, IndexStep):
            staged[i] = prepare_index(root, step, writer, f"step{i}")
    # Replacing a shard frees its old inode, and the kernel drops its cached pages and blocks inside the rename (a
    # tenth of a second per GB): holding the originals open moves that work after the last visible change.
    originals = [
        root.open_file(step.file, os.O_RDONLY)
        for i, step in enumerate(steps)
        if staged.get(i) and isinstance(step, RewriteStep)
    ]
    try:
        for i, step in enumerate(steps):
            tag = f"step{i}"
            crashpoint(f"{tag}:before")
            if isinstance(step, HeaderStep):  # the steps written in place: everything not staged above
                apply_header(root, step, writer, tag, sync=False)
            elif isinstance(step, PatchStep):
                apply_patch(root, step, writer, tag, sync=False)
            elif staged[i]:
                root.replace(temp_name(step.file), step.file)
                writer.visible()
                crashpoint(f"{tag}:renamed")
            crashpoint(f"{tag}:after")
    finally:
        for fd in originals:
            os.close(fd)

    for i, step in enumerate(steps):
        if i not in staged:
            fd = root.open_file(step.file, os.O_RDONLY)
            try:
                os.fsync(fd)  # flushes the file's dirty pages, whichever descriptor wrote them
            finally:
                os.close(fd)
    root.fsync()


def _changed(file: str, what: str) -> TargetError:
    return TargetError(
        f"{file}: {what} is neither what the repair found nor what it writes (was the file changed "
        f"meanwhile?); nothing more was written to it"
    )


def _open_checked(root: Folder, file: str, size: int) -> int:
    fd = root.open_file(file, os.O_RDWR)  # never through a link: a cache snapshot's blob is shared
    if os.fstat(fd).st_size != size:
        os.close(fd)
        raise _changed(file, "its size")
    return fd


def apply_header(root: Folder, step: HeaderStep, writer: Writer, tag: str, *, sync: bool = True) -> None:
    fd = _open_checked(root, step.file, step.size)
    try:
        prefix = os.pread(fd, step.prefix_len, 0)
        i, j = step.offset, step.offset + len(step.new)
        if prefix[i:j] == step.new:
            return
        if sha256(prefix[:i] + prefix[j:]) != step.keep_sha256:
            raise _changed(step.file, "its header")
        writer.pwrite(fd, step.new, i, crash=f"{tag}:torn")
        writer.visible()
        if sync:
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
        if len(cur) != len(run.new) or any(c != o and c != n for c, o, n in zip(cur, run.old, run.new, strict=True)):
            raise _changed(file, f"data at byte {run.offset:,}")
        todo.append(run)
    return todo


def apply_patch(root: Folder, step: PatchStep, writer: Writer, tag: str, *, sync: bool = True) -> None:
    fd = _open_checked(root, step.file, step.size)
    try:
        todo = _pending(fd, step.runs, step.file)  # check every run before writing any
        for k, run in enumerate(todo):
            writer.pwrite(fd, run.new, run.offset)
            writer.visible()
            if k == 0:
                crashpoint(f"{tag}:partial")
        if todo and sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def apply_rewrite(root: Folder, step: RewriteStep, writer: Writer, tag: str) -> None:
    if prepare_rewrite(root, step, writer, tag):
        commit_rewrite(root, step, writer, tag)


def prepare_rewrite(root: Folder, step: RewriteStep, writer: Writer, tag: str) -> bool:
    """Build and fsync the rebuilt copy under its temporary name. False when the shard already holds the new bytes
    (an interrupted repair renamed it), so there is nothing to commit."""
    fd = root.open_file(step.file, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if (
            st.st_size == step.new_size
            and os.pread(fd, len(step.new_prefix), 0) == step.new_prefix
            and not _pending(fd, step.runs, step.file)
        ):
            root.remove_stale(step.tmp)  # renamed already; a leftover can only be a stale copy
            return False
        if st.st_size != step.old_size or sha256(os.pread(fd, step.old_prefix_len, 0)) != step.old_prefix_sha256:
            raise _changed(step.file, "its header")
        out = root.create(step.tmp, st.st_mode & 0o7777)
        try:
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(PermissionError):  # only root may give a file away; the copy is then ours
                    os.fchown(out, st.st_uid, st.st_gid)
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
    return True


def commit_rewrite(root: Folder, step: RewriteStep, writer: Writer, tag: str) -> None:
    """Rename the fsynced copy over the shard: the moment loaders see the rebuilt file."""
    root.replace(step.tmp, step.file)
    writer.visible()
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
    if prepare_index(root, step, writer, tag):
        root.replace(temp_name(step.file), step.file)
        writer.visible()
        crashpoint(f"{tag}:renamed")
        root.fsync()


def prepare_index(root: Folder, step: IndexStep, writer: Writer, tag: str) -> bool:
    """Write and fsync the new index under its temporary name. False when the index holds the new bytes already."""
    current = root.read(step.file)
    if current == step.new:
        return False
    if sha256(current) != step.old_sha256:
        raise _changed(step.file, "the index")
    write_temp(root, step.file, step.new, writer, crash=tag)
    return True


def apply_step(root: Folder, step: Step, writer: Writer, tag: str) -> None:
    """Carry out one step whole (written, fsynced, renamed into place)."""
    if isinstance(step, HeaderStep):
        apply_header(root, step, writer, tag)
    elif isinstance(step, PatchStep):
        apply_patch(root, step, writer, tag)
    elif isinstance(step, RewriteStep):
        apply_rewrite(root, step, writer, tag)
    else:
        apply_index(root, step, writer, tag)
