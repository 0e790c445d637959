"""Durable file primitives: positional writes, zero-copy range copies, atomic replacement, folder fsync.

Every byte a repair writes goes through a `Writer`, which counts them (the bench and `--dry-run` totals rely on it)
and hosts the crash points the kill test uses (`CKPT_REPAIR_CRASH_AT=<point>` makes the process SIGKILL itself
there; unset, a point costs one dictionary lookup).
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TargetError
from ..read.repair_state import TMP_SUFFIX, is_temp_name, kind_of, temp_name

__all__ = [
    "TMP_SUFFIX",
    "Folder",
    "Writer",
    "atomic_write",
    "crashpoint",
    "is_temp_name",
    "kind_of",
    "symlink_refusal",
    "temp_name",
    "write_temp",
]

# linux/fs.h: FS_IOC_GETFLAGS (_IOR('f', 1, long)) and the append-only inode flag (`chattr +a`).
_FS_IOC_GETFLAGS = 0x80086601
_FS_APPEND_FL = 0x20

CRASH_ENV = "CKPT_REPAIR_CRASH_AT"
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
    first_visible: float | None = None  # perf_counter() of the first change other loaders can see
    last_visible: float | None = None  # ... and of the last

    def visible(self) -> None:
        """Record that a change other loaders can see was just made (a write into a checkpoint file, a rename over
        one)."""
        now = time.perf_counter()
        if self.first_visible is None:
            self.first_visible = now
        self.last_visible = now

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


def symlink_refusal(folder: Path, name: str) -> TargetError:
    return TargetError(
        f"{name} is a symlink (a Hugging Face cache snapshot links its files into shared blobs); a "
        f"repair never writes through a link: copy the checkpoint with `cp -rL {folder} <copy>` and "
        f"repair the copy"
    )


class Folder:
    """The checkpoint folder, opened once. Every file a repair touches is named relative to this descriptor
    (openat, renameat, unlinkat), so renaming the folder or swapping it for a link mid-repair cannot redirect a write;
    no open follows a symlink, and a file a repair creates is always a new one (`O_EXCL`), never an existing file,
    link, FIFO or device planted at its name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def refuse_if_append_only(self) -> None:
        """Refuse, before anything is written, an append-only folder (`chattr +a`): it lets a file be created but
        never renamed or removed, so the journal's temporary file would stay behind for good. (An immutable one is
        already refused as read-only.) A filesystem without inode flags, or not Linux, answers nothing."""
        try:
            flags = struct.unpack("l", fcntl.ioctl(self.fd, _FS_IOC_GETFLAGS, b"\0" * 8))[0]
        except OSError:
            return
        if flags & _FS_APPEND_FL:
            raise TargetError(
                f"{self.path} is append-only (`chattr +a`): a repair replaces and removes files there, which the "
                f"folder forbids, so nothing was written; `chattr -a {self.path}`, or repair a copy"
            )

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_file(self, name: str, flags: int) -> int:
        """Open an existing regular file of the folder. A symlink, FIFO, device or directory at `name` is refused
        (`O_NONBLOCK`: opening a FIFO never waits for a writer)."""
        st = self.lstat(name)
        if st is not None and not stat.S_ISREG(st.st_mode):  # never open a device: that alone can act on it
            raise symlink_refusal(self.path, name) if stat.S_ISLNK(st.st_mode) else self.not_regular(name, st.st_mode)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            st = self.lstat(name) if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EWOULDBLOCK) else None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise symlink_refusal(self.path, name) from None
            if st is not None:
                raise self.not_regular(name, st.st_mode) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise self.not_regular(name, st.st_mode)
        return fd

    def read(self, name: str) -> bytes:
        fd = self.open_file(name, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            chunks: list[bytes] = []
            while True:
                chunk = os.read(fd, max(size, 1 << 16))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
        finally:
            os.close(fd)

    def create(self, name: str, mode: int) -> int:
        """Create `name` as a new, empty file for writing. A regular file left there by a killed repair is
        removed first (it is ours, by its name); anything else there is refused, and so is a file that appears at the
        name between the two (`O_EXCL | O_NOFOLLOW` fails instead of opening it)."""
        self.remove_stale(name)
        try:
            return os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd
            )
        except FileExistsError:
            raise TargetError(
                f"{self.path / name}: another process created this file while the repair was "
                f"running; nothing was written through it"
            ) from None

    def remove_stale(self, name: str) -> None:
        """Remove a temporary file a killed repair left at `name`; refuse anything there that is not a regular file."""
        st = self.lstat(name)
        if st is None:
            return
        if not stat.S_ISREG(st.st_mode):
            raise self.not_ours(name, st.st_mode)
        self.unlink(name)

    def not_ours(self, name: str, mode: int) -> TargetError:
        return TargetError(
            f"{self.path / name} is {kind_of(mode)}, not a temporary file ckpt left; a repair writes "
            f"its temporary files at that name, so it refuses: remove it, then run the repair again"
        )

    def not_regular(self, name: str, mode: int) -> TargetError:
        return TargetError(
            f"{self.path / name} is {kind_of(mode)}, not a regular file; a repair only writes regular "
            f"files in the checkpoint folder"
        )

    def unlink(self, name: str, *, missing_ok: bool = False) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def fsync(self) -> None:
        """Make renames and unlinks in the folder durable."""
        os.fsync(self.fd)


def write_temp(
    folder: Folder, name: str, data: bytes, writer: Writer, *, mode: int | None = None, crash: str | None = None
) -> str:
    """Write `data` to a new file beside `name` (its temporary name, returned) and fsync it; `name` keeps its mode."""
    tmp = temp_name(name)
    if mode is None:
        st = folder.lstat(name)
        mode = st.st_mode & 0o7777 if st is not None and stat.S_ISREG(st.st_mode) else 0o644
    fd = folder.create(tmp, mode)
    try:
        writer.pwrite(fd, data, 0, crash=f"{crash}:torn" if crash else None)
        os.fsync(fd)
    finally:
        os.close(fd)
    if crash:
        crashpoint(f"{crash}:synced")
    return tmp


def atomic_write(
    folder: Folder, name: str, data: bytes, writer: Writer, *, mode: int | None = None, crash: str | None = None
) -> None:
    """Replace `name` by a file holding `data`: written to a new file beside it, fsynced, renamed over it, folder
    fsynced."""
    folder.replace(write_temp(folder, name, data, writer, mode=mode, crash=crash), name)
    if crash:
        crashpoint(f"{crash}:renamed")
    folder.fsync()
