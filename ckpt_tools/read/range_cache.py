"""A persistent cache of byte ranges read from one immutable commit.

A commit sha names fixed content, so every range read from it stays valid forever and needs no invalidation. The
cache is one append-only file per commit: each record is a length-prefixed (file, offset, bytes) triple with a
checksum, written with one `write` call under a lock, so concurrent threads, and concurrent processes appending to
the same file, cannot tear a record. Loading stops at the first torn or corrupt record (a crash mid-write), so a
damaged file costs requests, never wrong bytes.

The file is always opened relative to the cache folder's descriptor, by a plain name, without following a symlink
and only if it is a regular file: whatever is planted at that name (a link to a file elsewhere, a FIFO, a device),
the cache never reads, truncates or appends anywhere but its own file, and falls back to memory instead.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import threading
from pathlib import Path

MAGIC = b"CKR1"
_HEAD = struct.Struct("<4sHQQ")  # magic, name length, offset, data length
_DIGEST = 16


def _digest(head: bytes, name: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(head + name + data, digest_size=_DIGEST).digest()


def is_plain_name(name: str) -> bool:
    """A single path component: no separator, not `.` or `..`, no NUL."""
    return bool(name) and name not in (".", "..") and "/" not in name and os.sep not in name and "\0" not in name


class RangeCache:
    """Byte ranges of files at one commit, in memory and (when `folder` is given) in the file `name` inside it."""

    def __init__(self, folder: Path | None, name: str = "") -> None:
        if folder is not None and not is_plain_name(name):
            raise ValueError(f"a range cache file is named by a plain file name, not {name!r}")
        self.folder = folder
        self.name = name
        self._lock = threading.Lock()
        self._ranges: dict[str, list[tuple[int, bytes]]] = {}
        if folder is not None:
            self._load()

    @property
    def path(self) -> Path | None:
        """The cache file, or None once the cache lives in memory only."""
        return None if self.folder is None else self.folder / self.name

    def _open(self, flags: int, *, create: bool = False) -> int:
        """The cache file, opened relative to the folder's descriptor without following a link. Anything but a
        regular file at the name raises OSError (O_NONBLOCK: opening a FIFO never waits)."""
        assert self.folder is not None
        if create:
            self.folder.mkdir(parents=True, exist_ok=True)
        folder_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = _lstat(self.name, folder_fd)
            if st is not None and not stat.S_ISREG(st.st_mode):  # never open a device: that alone can act on it
                raise OSError(errno.EINVAL, "not a regular file", self.name)
            flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if create else 0)
            fd = os.open(self.name, flags, 0o644, dir_fd=folder_fd)
        finally:
            os.close(folder_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", self.name)
        return fd

    def _load(self) -> None:
        try:
            try:
                fd = self._open(os.O_RDWR)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                fd = self._open(os.O_RDONLY)  # a read-only cache still saves requests
        except FileNotFoundError:
            return
        except OSError:
            self.folder = None  # a link, FIFO, device or unreadable file at our name: memory only
            return
        try:
            raw = _read_all(fd)
            pos = 0
            while pos < len(raw):
                record = self._record(raw, pos)
                if record is None:
                    # Torn or corrupt from here on: cut it off, so that what this run appends can be read back.
                    os.ftruncate(fd, pos)
                    return
                name, start, data, pos = record
                self._ranges.setdefault(name, []).append((start, data))
        except OSError:
            self.folder = None
        finally:
            os.close(fd)

    @staticmethod
    def _record(raw: bytes, pos: int) -> tuple[str, int, bytes, int] | None:
        """(file, offset, bytes, next position) of the record at `pos`, or None if it is torn or corrupt."""
        if pos + _HEAD.size > len(raw):
            return None
        magic, name_len, start, length = _HEAD.unpack_from(raw, pos)
        end = pos + _HEAD.size + name_len + length + _DIGEST
        if magic != MAGIC or end > len(raw):
            return None
        name = raw[pos + _HEAD.size : pos + _HEAD.size + name_len]
        data = raw[pos + _HEAD.size + name_len : end - _DIGEST]
        if _digest(raw[pos : pos + _HEAD.size], name, data) != raw[end - _DIGEST : end]:
            return None
        return name.decode("utf-8", "surrogateescape"), start, data, end

    def get(self, name: str, start: int, length: int) -> bytes | None:
        """The bytes [start, start + length) of `name` if one cached range holds them all."""
        with self._lock:
            for begin, data in self._ranges.get(name, ()):
                if begin <= start and start + length <= begin + len(data):
                    return data[start - begin : start - begin + length]
        return None

    def put(self, name: str, start: int, data: bytes) -> None:
        """Remember a range (and append it to the cache file). Disk errors only cost a future request."""
        encoded = name.encode("utf-8", "surrogateescape")
        head = _HEAD.pack(MAGIC, len(encoded), start, len(data))
        record = head + encoded + data + _digest(head, encoded, data)
        with self._lock:
            self._ranges.setdefault(name, []).append((start, data))
            if self.folder is None:
                return
            try:
                fd = self._open(os.O_WRONLY | os.O_APPEND, create=True)
                try:
                    os.write(fd, record)
                finally:
                    os.close(fd)
            except OSError:
                self.folder = None  # read-only, full, or something planted at our name: keep working from memory


def _lstat(name: str, folder_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    while chunk := os.read(fd, max(size, 1 << 16)):
        chunks.append(chunk)
    return b"".join(chunks)
