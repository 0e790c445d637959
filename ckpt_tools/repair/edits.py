"""What a repair changes, in checkpoint terms: per shard, tensors renamed, dropped, or bytes patched; and the index.

A job (fix-prefix, scrub-nan, drop-orphans) builds a `Plan` from a finding; `steps.compile_plan` turns it into the
exact bytes to write. Plans never hold file offsets: those are computed from the headers on disk when compiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class BytePatch:
    """Replace the byte at `position` (counted from the start of `tensor`'s data) whose value is `old` by `new`."""

    tensor: str
    position: int
    old: int
    new: int


@dataclass(frozen=True)
class ShardEdit:
    """The changes to one shard. Renames and patches keep the data layout; drops change it."""

    renames: Mapping[str, str] = field(default_factory=_frozen)  # old name -> new name
    drops: frozenset[str] = frozenset()
    patches: tuple[BytePatch, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.renames or self.drops or self.patches)


@dataclass(frozen=True)
class Plan:
    """One repair job's changes to one checkpoint.

    `index_renames` / `index_drops` apply to the index `weight_map` (they may name tensors of a shard missing from
    disk: a prefix rename renames every key under the prefix). `lines` describe the plan for people; `details` is
    the machine-readable form printed with `--format json`.
    """

    job: str
    summary: str
    edits: Mapping[str, ShardEdit]  # shard file -> edit (shards that change only)
    index_renames: Mapping[str, str] = field(default_factory=_frozen)
    index_drops: frozenset[str] = frozenset()
    lines: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=_frozen)

    @property
    def empty(self) -> bool:
        return all(e.empty for e in self.edits.values()) and not self.index_renames and not self.index_drops

    @property
    def touches_index(self) -> bool:
        return bool(self.index_renames or self.index_drops)


def nothing(job: str, why: str) -> Plan:
    """The plan of a job with nothing to repair."""
    return Plan(job=job, summary=why, edits=_frozen())
