"""A persistent cache of byte ranges read from one immutable commit.

A commit sha names fixed content, so every range read from it stays valid forever and needs no invalidation. The
cache is one append-only file per commit: each record is a length-prefixed (file, offset, bytes) triple with a
checksum, written with one `write` call under a lock, so concurrent threads, and concurrent processes appending to
the same file, cannot tear a record. Loading stops at the first torn or corrupt record (a crash mid-write), so a
damaged file costs requests, never wrong bytes.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from pathlib import Path

MAGIC = b"CKR1"
_HEAD = struct.Struct("<4sHQQ")  # magic, name length, offset, data length
_DIGEST = 16


def _digest(head: bytes, name: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(head + name + data, digest_size=_DIGEST).digest()


class RangeCache:
    """Byte ranges of files at one commit, in memory and (when `path` is given) on disk."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._ranges: dict[str, list[tuple[int, bytes]]] = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            raw = path.read_bytes()
        except OSError:
            return
        pos = 0
        while pos < len(raw):
            record = self._record(raw, pos)
            if record is None:
                # Torn or corrupt from here on: cut it off, so that what this run appends can be read back.
                try:
                    os.truncate(path, pos)
                except OSError:
                    self.path = None
                return
            name, start, data, pos = record
            self._ranges.setdefault(name, []).append((start, data))

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
            if self.path is None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, record)
                finally:
                    os.close(fd)
            except OSError:
                self.path = None  # read-only or full cache: keep working from memory
