"""The seam between where bytes live and everything that reads them.

A `Source` answers four questions about a checkpoint's files: which files exist, how big each is, the bytes of a
range, and (for convenience) a whole small file. Readers above this seam never know whether a file is on a local disk
or on the Hub, so rules and the model are identical for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Source(Protocol):
    """Read-only access to the files of one checkpoint."""

    @property
    def label(self) -> str:
        """The target as the user named it (a path, or a Hub repo id with its revision)."""

    @property
    def is_remote(self) -> bool:
        """True when every byte read costs a network request."""

    def list_files(self) -> Sequence[str]:
        """File names relative to the checkpoint root, sorted."""

    def size(self, name: str) -> int:
        """Size of a file in bytes."""

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """Up to `length` bytes of `name` from offset `start` (fewer only at end of file)."""

    def read_ranges(self, name: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several `(start, length)` ranges of one file, in the order given."""

    def read_file(self, name: str, limit: int) -> bytes:
        """A whole small file; raises `ValueError` if it is larger than `limit` bytes."""
