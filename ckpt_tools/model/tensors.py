"""What was read from the files: tensors, shards, and the problems met while reading them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple


class TensorInfo(NamedTuple):
    """One tensor as its shard header describes it. Offsets are relative to the shard's data start."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: str
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Problem:
    """Something wrong with a file itself, found while reading it (not a judgement about quantization).

    `kind` is a stable machine word: `lfs-pointer`, `header-too-small`, `header-too-large`, `truncated`,
    `invalid-utf8`, `invalid-json`, `nesting-too-deep` (128 levels or more), `invalid-schema`, `duplicate-field`
    (a tensor entry's field or `__metadata__` given twice), `unknown-dtype`, `invalid-offset`, `shape-overflow` (the
    element or bit count overflows 64 bits), `invalid-span`, `misaligned-slice`, `incomplete-buffer`,
    `duplicate-key` (a repeated tensor name: the reader keeps the last), `unreadable`, `invalid-index`,
    `invalid-config`.
    """

    file: str
    kind: str
    message: str
    tensor: str | None = None


@dataclass(frozen=True)
class Shard:
    """One safetensors file: its header, tensors in on-disk order, and whether it loads."""

    name: str
    size: int
    header_len: int
    metadata: Mapping[str, str] | None
    tensors: tuple[TensorInfo, ...]
    valid: bool

    @property
    def data_start(self) -> int:
        return 8 + self.header_len


@dataclass(frozen=True)
class LfsPointer:
    """A Git LFS pointer file standing where weights should be."""

    name: str
    oid: str | None
    size: int | None


@dataclass(frozen=True)
class Index:
    """`model.safetensors.index.json`: tensor name -> shard file, and its metadata."""

    name: str
    weight_map: Mapping[str, str]
    metadata: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


JOURNAL_NAME = ".ckpt-repair.journal"  # the file a repair records what it will write in, beside the checkpoint's


@dataclass(frozen=True)
class PendingRepair:
    """What an interrupted repair left in a local folder: its journal (with the job it records, or why it cannot be
    read), and temporary files at the names repairs use (`foreign`: ones that are not regular files, with what they
    are)."""

    journal: bool
    job: str | None
    problem: str | None
    temps: tuple[str, ...]
    foreign: tuple[str, ...]
