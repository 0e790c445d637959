"""Local checkpoints: a folder (single file, sharded with or without an index) or one `.safetensors` file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..errors import TargetError


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
            return [self._only]
        try:
            return sorted(entry.name for entry in os.scandir(self.root) if entry.is_file())
        except OSError as exc:
            raise TargetError(f"{self._label}: cannot list folder ({exc.strerror})") from None

    def size(self, name: str) -> int:
        return (self.root / name).stat().st_size

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
