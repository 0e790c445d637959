"""Which pages of a file range are in the page cache already (`mincore(2)` on a mapping that is never touched).

The value scan asks the kernel to read ahead the scale ranges it will read and to drop them once measured, so that
a scan of tens of GB does not fill the page cache. Bytes that were cached before the scan (a checkpoint just written,
or read by the last run) need neither hint: they are read from memory, and dropping them would make the next run, or
the server loading the model, read them from the disk again. One `mincore` call per shard tells them apart.

Linux only (elsewhere the answer is "unknown" and the scan hints every read, as it does without this module); the
mapping is made and released by libc's own `mmap` / `munmap` and never read, so it costs neither I/O nor memory.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from functools import cache

PAGE = mmap.PAGESIZE
_RESIDENT = bytes(b & 1 for b in range(256))  # mincore sets bit 0 for a resident page; the other bits are reserved


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols, libc among them: `ctypes.util.find_library` would run `ldconfig -p`.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    except (OSError, AttributeError):
        return None
    return libc


class Residency:
    """The page-cache residency of `[start, end)` of `fd` at the moment it was built; `cached(a, b)` says whether
    every page of `[a, b)` was resident then. Unknown (no mincore, a failed call) answers False: hint as usual."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        self.base = start - start % PAGE
        self.pages: bytes | None = None
        if end > start:
            self.pages = _snapshot(fd, self.base, end - self.base)

    def cached(self, start: int, end: int) -> bool:
        if self.pages is None or end <= start:
            return False
        first = (start - self.base) // PAGE
        last = (end - 1 - self.base) // PAGE + 1
        if first < 0 or last > len(self.pages):
            return False
        return self.pages.find(0, first, last) < 0


def _snapshot(fd: int, offset: int, length: int) -> bytes | None:
    """One byte per page of `length` bytes from page-aligned `offset` of `fd`: 1 resident, 0 not; None if unknown."""
    libc = _libc()
    if libc is None:
        return None
    addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return None
    try:
        vec = ctypes.create_string_buffer(-(-length // PAGE))
        if libc.mincore(addr, length, vec) != 0:
            return None
        return vec.raw.translate(_RESIDENT)
    finally:
        libc.munmap(addr, length)


def supported() -> bool:
    """Whether residency is known here (Linux with a usable libc)."""
    return _libc() is not None and hasattr(os, "posix_fadvise")
