"""rules/dtypes.toml: which readers support each safetensors dtype (reader-dtype-support)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from ._load import Table, build_file

READER_STATUSES = ("supported", "fixed", "unsupported")


@dataclass(frozen=True)
class ReaderSupport:
    name: str
    status: str  # supported / fixed / unsupported
    note: str
    source: str


@dataclass(frozen=True)
class DtypeSupport:
    id: str
    what: str
    report: bool
    readers: tuple[ReaderSupport, ...]


def _reader(t: Table) -> ReaderSupport:
    return ReaderSupport(t.string("name"), t.choice("status", READER_STATUSES), t.string("note"), t.string("source"))


def _dtype(t: Table) -> DtypeSupport:
    return DtypeSupport(
        t.string("id"), t.string("what"), t.boolean("report"), t.each("readers", _reader, required=True)
    )


def parse(root: Table) -> Mapping[str, DtypeSupport]:
    return MappingProxyType({d.id: d for d in root.each("dtype", _dtype, required=True)})


@cache
def dtype_support() -> Mapping[str, DtypeSupport]:
    """Safetensors dtype string -> its reader support."""
    return build_file("dtypes.toml", parse, "dtypes/1")
