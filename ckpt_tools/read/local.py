"""Local checkpoints: a folder (single file, sharded with or without an index) or one `.safetensors` file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..errors import TargetError
from ..model.checkpoint import CONFIG_NAMES


class LocalSource:
    """A checkpoint folder on disk, or a single safetensors file seen as a folder holding just that file."""

    is_remote = False

    def __init__(self, target: str | os.PathLike[str]) -> None:
        path = Path(target)
        self._label = str(target)
        if not path.exists():
            raise TargetError(f"{target}: no such file or directory")
        if path.is_dir():
            self.root = path
            self._only: str | None = None
        elif path.is_file():
            self.root = path.parent
            self._only = path.name
        else:
            raise TargetError(f"{target}: not a regular file or directory")
        if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            raise TargetError(f"{target}: permission denied")

    @property
    def label(self) -> str:
        return self._label

    @property
    def single_file(self) -> str | None:
        """The file name when the target was one file rather than a folder."""
        return self._only

    def path(self, name: str) -> Path:
        return self.root / name

    def list_files(self) -> Sequence[str]:
        if self._only is not None:
            # The configs beside the file describe the model it belongs to; the index and other shards do not count.
            return [self._only, *(n for n in CONFIG_NAMES if n != self._only and (self.root / n).is_file())]
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            raise TargetError(f"{self._label}: cannot list folder ({exc.strerror})") from None
        return sorted(entry.name for entry in entries if _is_file(entry) or _broken_checkpoint_link(entry))

    def size(self, name: str) -> int:
        path = self.root / name
        try:
            return path.stat().st_size
        except OSError as exc:
            if path.is_symlink():  # say what is wrong with the link, not just ENOENT / ELOOP
                raise OSError(exc.errno, f"broken symbolic link to {os.readlink(path)} ({exc.strerror})") from None
            raise

    def read_range(self, name: str, start: int, length: int) -> bytes:
        with open(self.root / name, "rb") as fh:
            return os.pread(fh.fileno(), length, start)

    def read_ranges(self, name: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        with open(self.root / name, "rb") as fh:
            fd = fh.fileno()
            return [os.pread(fd, length, start) for start, length in ranges]

    def read_file(self, name: str, limit: int) -> bytes:
        path = self.root / name
        if path.stat().st_size > limit:
            raise ValueError(f"{name} is larger than {limit} bytes")
        return path.read_bytes()


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError:  # a symlink loop (ELOOP)
        return False


def _broken_checkpoint_link(entry: os.DirEntry) -> bool:
    """A shard or JSON file that is a dangling or looping symlink (an HF cache snapshot whose blob is gone). It is
    listed so that it is reported as unreadable, not as missing or absent."""
    return entry.is_symlink() and entry.name.endswith((".safetensors", ".json")) and not os.path.exists(entry.path)
