"""Durable file primitives: positional writes, zero-copy range copies, atomic replacement, folder fsync.

Every byte a repair writes goes through a `Writer`, which counts them (the bench and `--dry-run` totals rely on it)
and hosts the crash points the kill test uses (`CKPT_REPAIR_CRASH_AT=<point>` makes the process SIGKILL itself
there; unset, a point costs one dictionary lookup).
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CRASH_ENV = "CKPT_REPAIR_CRASH_AT"
TMP_SUFFIX = ".ckpt-tmp"
COPY_CHUNK = 64 * 1024 * 1024  # one progress update (and one crash point) per chunk
_NO_ZERO_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY}


def crashpoint(name: str) -> None:
    """Kill this process with SIGKILL if the environment asks for a crash at `name` (tests only)."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Writer:
    """Counts bytes written and reports copy progress."""

    progress: Callable[[int], None] = lambda n: None
    written: int = 0
    copied_with: set[str] = field(default_factory=set)  # which system calls moved the data
    method: str = "copy_file_range"  # the copy method to try first

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int, *, crash: str | None = None) -> None:
        """Write all of `data` at `offset`. With `crash`, the crash point of that name fires halfway through (a
        torn write, which is what a kill during a large write leaves)."""
        view = memoryview(data)
        if crash and os.environ.get(CRASH_ENV) == crash and len(view) > 1:
            half = len(view) // 2
            self._pwrite_all(fd, view[:half], offset)
            os.fsync(fd)
            crashpoint(crash)
        self._pwrite_all(fd, view, offset)

    def _pwrite_all(self, fd: int, view: memoryview, offset: int) -> None:
        while view:
            n = os.pwrite(fd, view, offset)
            self.written += n
            view = view[n:]
            offset += n

    def copy(self, src: int, dst: int, src_off: int, dst_off: int, length: int, *, crash: str | None = None) -> None:
        """Copy `length` bytes between two files without passing them through user space when the kernel can:
        `copy_file_range` (in-kernel, or a reflink on filesystems that share extents), else `sendfile`, else
        pread/pwrite. The crash point fires after the first chunk."""
        first = True
        while length:
            n = self._copy_chunk(src, dst, src_off, dst_off, min(length, COPY_CHUNK))
            self.written += n
            self.progress(n)
            src_off += n
            dst_off += n
            length -= n
            if first and crash:
                crashpoint(crash)
            first = False

    def _copy_chunk(self, src: int, dst: int, src_off: int, dst_off: int, count: int) -> int:
        # A method the kernel refuses for this pair of files (other filesystem, old kernel) is not tried again.
        while self.method in _ZERO_COPY:
            try:
                n = _ZERO_COPY[self.method](src, dst, src_off, dst_off, count)
            except OSError as exc:
                if exc.errno not in _NO_ZERO_COPY:
                    raise
                n = 0
            if n > 0:
                self.copied_with.add(self.method)
                return n
            self.method = _NEXT[self.method]
        data = os.pread(src, min(count, 8 * 1024 * 1024), src_off)
        if not data:
            raise OSError(errno.EIO, f"unexpected end of file at byte {src_off:,} while copying")
        self.copied_with.add(self.method)
        view = memoryview(data)
        while view:
            n = os.pwrite(dst, view, dst_off)
            view, dst_off = view[n:], dst_off + n
        return len(data)


def _sendfile(src: int, dst: int, src_off: int, dst_off: int, count: int) -> int:
    os.lseek(dst, dst_off, os.SEEK_SET)  # sendfile writes at the output's file position
    return os.sendfile(dst, src, src_off, count)


def _copy_file_range(src: int, dst: int, src_off: int, dst_off: int, count: int) -> int:
    if not hasattr(os, "copy_file_range"):  # Python < 3.8 or not Linux
        raise OSError(errno.ENOSYS, "copy_file_range is not available")
    return os.copy_file_range(src, dst, count, src_off, dst_off)


_ZERO_COPY: dict[str, Callable[[int, int, int, int, int], int]] = {
    "copy_file_range": _copy_file_range,
    "sendfile": _sendfile,
}
_NEXT = {"copy_file_range": "sendfile", "sendfile": "read/write"}


def temp_name(file: str) -> str:
    """The temporary file built beside `file` before it is renamed over it: hidden, and not ending in .safetensors
    or .json, so no loader ever picks it up."""
    return f".{file}{TMP_SUFFIX}"


def fsync_dir(folder: Path) -> None:
    """Make renames and unlinks in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, writer: Writer, *, mode: int | None = None,
                 crash: str | None = None) -> None:
    """Replace `path` by a file holding `data`: written beside it, fsynced, renamed over it, folder fsynced."""
    tmp = path.with_name(temp_name(path.name))
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        writer.pwrite(fd, data, 0, crash=f"{crash}:torn" if crash else None)
        os.fsync(fd)
    finally:
        os.close(fd)
    if crash:
        crashpoint(f"{crash}:synced")
    os.replace(tmp, path)
    if crash:
        crashpoint(f"{crash}:renamed")
    fsync_dir(path.parent)
