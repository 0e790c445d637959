"""Turn a `Plan` into steps: the exact bytes each file gets, decided from the headers on disk.

Three ways to change a shard (safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.1); safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.2): offsets are relative to the data start, the data region must be
covered exactly):
- `HeaderStep`: the new header JSON fits in the old header length. It is padded with spaces to exactly that length,
  so the data start, the length field and every data byte stay put; only the byte span that differs is written.
- `PatchStep`: bytes inside tensors' data change value (NaN scale bytes); only those bytes are written.
- `RewriteStep`: the header grows past its old length, tensors are dropped, or the file is hard-linked (an in-place
  write would also change the other link). A new file is built beside it from the new header and the kept tensors'
  byte ranges, then renamed over the old one.
`IndexStep` replaces model.safetensors.index.json whole (a small file, written to a temporary file and renamed).

Steps are plain data: the journal stores them, and `execute` applies them idempotently (a step whose file already
holds the new bytes is skipped), which is what lets an interrupted repair be completed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson

from ..errors import TargetError
from ..model.checkpoint import Checkpoint
from ..model.tensors import Shard, TensorInfo
from ..read.header import parse_header
from ..write.header import encode_header
from .edits import BytePatch, Plan, ShardEdit
from .fsio import temp_name

_NAME = attrgetter("name")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Run:
    """Contiguous bytes at an absolute file offset: what they are before and after the repair."""

    offset: int
    old: bytes
    new: bytes

    def __post_init__(self) -> None:
        # The executor compares the bytes on disk against old and new position by position; a run read back from a
        # journal whose two sides differ in length is damaged (decode_journal reports the ValueError as such).
        if len(self.old) != len(self.new):
            raise ValueError(f"run at byte {self.offset}: {len(self.old)} old bytes but {len(self.new)} new ones")


@dataclass(frozen=True)
class HeaderStep:
    file: str
    size: int  # the file's size, which this step never changes
    prefix_len: int  # 8 + header length
    offset: int  # start of the changed span inside the prefix
    new: bytes  # the span's new bytes
    old_sha256: str  # of the span's old bytes
    keep_sha256: str  # of the prefix bytes outside the span (unchanged by the step)
    note: str
    old: bytes | None = None  # the span's old bytes, which `ckpt repair --rollback` writes back

    kind = "header"

    @property
    def bytes_to_write(self) -> int:
        return len(self.new)


@dataclass(frozen=True)
class PatchStep:
    file: str
    size: int
    runs: tuple[Run, ...]
    note: str

    kind = "patch"

    @property
    def bytes_to_write(self) -> int:
        return sum(len(r.new) for r in self.runs)


@dataclass(frozen=True)
class RewriteStep:
    file: str
    old_size: int
    old_prefix_len: int
    old_prefix_sha256: str
    new_prefix: bytes  # 8-byte length + new header
    new_size: int
    copies: tuple[tuple[int, int, int], ...]  # (offset in the old file, offset in the new file, length)
    runs: tuple[Run, ...]  # byte patches at offsets of the new file
    reason: str
    note: str

    kind = "rewrite"

    @property
    def tmp(self) -> str:
        return temp_name(self.file)

    @property
    def bytes_to_write(self) -> int:
        return self.new_size


@dataclass(frozen=True)
class IndexStep:
    file: str
    old_sha256: str
    new: bytes
    note: str
    old: bytes | None = None  # the whole old index, which `ckpt repair --rollback` writes back

    kind = "index"

    @property
    def bytes_to_write(self) -> int:
        return len(self.new)


Step = HeaderStep | PatchStep | RewriteStep | IndexStep
STEP_TYPES: dict[str, type] = {c.kind: c for c in (HeaderStep, PatchStep, RewriteStep, IndexStep)}


# ---- compiling ----------------------------------------------------------------------------------------------------


def compile_plan(plan: Plan, ckpt: Checkpoint, root: Path) -> tuple[Step, ...]:
    """The steps that carry out `plan` on the files under `root`, shards in name order, the index last."""
    shards = ckpt.shard_by_name
    steps: list[Step] = []
    for file in sorted(plan.edits):
        edit = plan.edits[file]
        if not edit.empty:
            steps.extend(_shard_steps(root, shards[file], edit, ckpt))
    if plan.touches_index and ckpt.index is not None:
        step = _index_step(root, ckpt, plan)
        if step is not None:
            steps.append(step)
    return tuple(steps)


def read_prefix(path: Path, shard: Shard) -> bytes:
    """The 8-byte length and header of a shard, checked against what the analysis read."""
    with open(path, "rb") as fh:
        prefix = os.pread(fh.fileno(), shard.data_start, 0)
        size = os.fstat(fh.fileno()).st_size
    if len(prefix) != shard.data_start or struct.unpack_from("<Q", prefix)[0] != shard.header_len or size != shard.size:
        raise TargetError(f"{shard.name}: changed while the repair was being planned; run it again")
    return prefix


def _shard_steps(root: Path, shard: Shard, edit: ShardEdit, ckpt: Checkpoint) -> list[Step]:
    path = root / shard.name
    prefix = read_prefix(path, shard)
    header, metadata = _reader_view(shard, prefix)
    drops = edit.drops
    kept = [(name, info) for name, info in header.items() if name not in drops] if drops else list(header.items())

    # New data layout: unchanged unless tensors are dropped, then the kept ones are packed in their old order
    # (a header written in place needs no layout).
    new_begin: dict[str, int] = {}
    if drops:
        offset = 0
        for name, info in sorted(kept, key=lambda kv: kv[1]["data_offsets"][0]):
            new_begin[name] = offset
            offset += info["data_offsets"][1] - info["data_offsets"][0]
    renames = edit.renames
    entries: dict[str, Any] = {}
    for name, info in kept:
        new_name = renames.get(name, name)
        if new_name in entries:
            raise TargetError(f"{shard.name}: two tensors would both be named `{new_name}`; nothing was changed")
        if drops:
            begin, end = info["data_offsets"]
            info = {**info, "data_offsets": [new_begin[name], new_begin[name] + end - begin]}
        entries[new_name] = info

    note = _note(edit)
    size = os.stat(path).st_size
    linked = os.stat(path).st_nlink > 1
    if not drops and not linked:
        try:
            new_header = encode_header(entries, metadata, exact_length=shard.header_len)
        except ValueError:  # it does not fit
            pass
        else:
            return _in_place(shard, prefix, prefix[:8] + new_header, edit, size, note)
    reason = "tensors dropped" if drops else "hard-linked file" if linked else "header outgrows its old length"
    new_header = encode_header(entries, metadata)
    new_prefix = struct.pack("<Q", len(new_header)) + new_header
    if not drops:
        new_begin = {name: info["data_offsets"][0] for name, info in kept}
    data_len = sum(info["data_offsets"][1] - info["data_offsets"][0] for _, info in kept)
    copies = _copies(kept, shard.data_start, len(new_prefix), new_begin)
    patches = [p for p in edit.patches if p.tensor not in drops]
    runs = _runs(patches, header, lambda name: len(new_prefix) + new_begin[name])
    return [
        RewriteStep(
            file=shard.name,
            old_size=size,
            old_prefix_len=len(prefix),
            old_prefix_sha256=sha256(prefix),
            new_prefix=new_prefix,
            new_size=len(new_prefix) + data_len,
            copies=copies,
            runs=runs,
            reason=reason,
            note=note,
        )
    ]


def _entries_of(tensors: tuple[TensorInfo, ...]) -> dict[str, Any]:
    return {t.name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.begin, t.end]} for t in tensors}


def _reader_view(shard: Shard, prefix: bytes) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The header's entries and metadata exactly as the safetensors reader reads them, parsed again from the bytes
    on disk, or a one-line refusal.

    A repair rewrites the header from this view, so it must be the reader's: a shard the reader rejects is never
    rewritten, nor one it reads by dropping something (a repeated tensor name keeps only the last entry). Entries
    are written back in the reader's terms (dtype, shape, data_offsets); fields the reader ignores are not kept.
    """
    read = parse_header(shard.name, shard.size, prefix[8:])
    if read.shard is None or not read.shard.valid or read.problems:
        message = read.problems[0].message if read.problems else "not a safetensors file"
        raise TargetError(
            f"{shard.name}: {message}; the safetensors reader rejects or drops part of this header, so "
            f"the repair refuses to rewrite it (re-download or re-export it; `ckpt doctor` explains)"
        )
    if read.shard.tensors != shard.tensors:
        raise TargetError(f"{shard.name}: changed while the repair was being planned; run it again")
    metadata = dict(read.shard.metadata) if read.shard.metadata is not None else None
    return _entries_of(read.shard.tensors), metadata


def _in_place(shard: Shard, prefix: bytes, new_prefix: bytes, edit: ShardEdit, size: int, note: str) -> list[Step]:
    steps: list[Step] = []
    span = diff_span(prefix, new_prefix)
    if span is not None:
        i, j = span
        steps.append(
            HeaderStep(
                file=shard.name,
                size=size,
                prefix_len=len(prefix),
                offset=i,
                new=new_prefix[i:j],
                old_sha256=sha256(prefix[i:j]),
                keep_sha256=sha256(prefix[:i] + prefix[j:]),
                note=note,
                old=prefix[i:j],
            )
        )
    if edit.patches:
        header = {t.name: {"data_offsets": [t.begin, t.end]} for t in shard.tensors}
        runs = _runs(edit.patches, header, lambda name: shard.data_start + header[name]["data_offsets"][0])
        steps.append(PatchStep(file=shard.name, size=size, runs=runs, note=_note(ShardEdit(patches=edit.patches))))
    return steps


def diff_span(old: bytes, new: bytes) -> tuple[int, int] | None:
    """[first, last + 1) of the bytes that differ between two equally long byte strings, or None."""
    if old == new:
        return None
    n = len(old)
    block = 4096
    i = 0
    while old[i : i + block] == new[i : i + block]:
        i += block
    while old[i] == new[i]:
        i += 1
    j = n
    while old[max(i, j - block) : j] == new[max(i, j - block) : j]:
        j = max(i, j - block)
    while old[j - 1] == new[j - 1]:
        j -= 1
    return i, j


def _copies(
    kept: list[tuple[str, Any]], old_start: int, new_start: int, new_begin: dict[str, int]
) -> tuple[tuple[int, int, int], ...]:
    """Byte ranges to copy from the old file to the new one, neighbours merged into one range."""
    out: list[list[int]] = []
    for name, info in sorted(kept, key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        src, dst, length = old_start + begin, new_start + new_begin[name], end - begin
        if length == 0:
            continue
        if out and out[-1][0] + out[-1][2] == src and out[-1][1] + out[-1][2] == dst:
            out[-1][2] += length
        else:
            out.append([src, dst, length])
    return tuple((a, b, c) for a, b, c in out)


def _runs(patches: Iterable[BytePatch], header: dict[str, Any], start_of: Callable[[str], int]) -> tuple[Run, ...]:
    """Byte patches as runs at absolute offsets, adjacent bytes of one tensor merged."""
    runs: list[tuple[int, bytearray, bytearray]] = []
    for p in sorted(patches, key=lambda p: (start_of(p.tensor), p.position)):
        begin, end = header[p.tensor]["data_offsets"]
        if not 0 <= p.position < end - begin:
            raise TargetError(f"`{p.tensor}`: byte {p.position} lies outside the tensor; nothing was changed")
        offset = start_of(p.tensor) + p.position
        if runs and runs[-1][0] + len(runs[-1][1]) == offset:
            runs[-1][1].append(p.old)
            runs[-1][2].append(p.new)
        else:
            runs.append((offset, bytearray([p.old]), bytearray([p.new])))
    return tuple(Run(o, bytes(a), bytes(b)) for o, a, b in runs)


def _note(edit: ShardEdit) -> str:
    parts = []
    if edit.renames:
        parts.append(f"{len(edit.renames)} renamed")
    if edit.drops:
        parts.append(f"{len(edit.drops)} dropped")
    if edit.patches:
        parts.append(f"{len(edit.patches)} byte(s) patched in {len({p.tensor for p in edit.patches})} tensor(s)")
    return ", ".join(parts)


def _index_step(root: Path, ckpt: Checkpoint, plan: Plan) -> IndexStep | None:
    assert ckpt.index is not None
    raw = (root / ckpt.index.name).read_bytes()
    data = orjson.loads(raw)
    weight_map: dict[str, str] = data["weight_map"]
    drops, renames = plan.index_drops, plan.index_renames
    keys = list(weight_map)
    in_order = keys == sorted(keys)  # HF writers sort the map; a repaired one stays sorted
    new_map = {renames.get(key, key): file for key, file in weight_map.items() if key not in drops}
    if in_order:
        new_map = dict(sorted(new_map.items()))
    # A collision shows as a shorter map.
    if len(new_map) != len(weight_map) - sum(1 for k in drops if k in weight_map):
        new_map = {}
        for key, file in weight_map.items():  # name the first collision, in index order
            if key in drops:
                continue
            new_key = renames.get(key, key)
            if new_key in new_map:
                raise TargetError(
                    f"{ckpt.index.name}: two entries would both be named `{new_key}`; nothing was changed"
                )
            new_map[new_key] = file
    data["weight_map"] = new_map
    dropped = [ckpt.tensors[n] for n in plan.index_drops if n in weight_map and n in ckpt.tensors]
    meta = data.get("metadata")
    if dropped and isinstance(meta, dict):
        # HF writers record the total byte size (and newer ones the parameter count) of the tensors listed.
        for key, amount in (
            ("total_size", sum(t.nbytes for t in dropped)),
            ("total_parameters", sum(t.numel for t in dropped)),
        ):
            if type(meta.get(key)) is int:
                meta[key] -= amount
    new = _dump_like(data, raw)
    if new == raw:
        return None
    # Counted over the plan's (few) keys: each names at most one entry of the map.
    removed = sum(1 for k in drops if k in weight_map)
    renamed = sum(1 for k in renames if k in weight_map and k not in drops)
    note = ", ".join(
        p for p in (f"{renamed} key(s) renamed" if renamed else "", f"{removed} key(s) removed" if removed else "") if p
    )
    return IndexStep(
        file=ckpt.index.name,
        old_sha256=sha256(raw),
        new=new,
        note=note or "rewritten",
        old=raw,
    )


def _layout(raw: bytes) -> tuple[int | None, str, str]:
    """(indent, key separator, item separator) of a JSON file, read off its raw bytes as `_dump_like` writes it."""
    indent = None
    first_newline = raw.find(b"\n")
    end = len(raw)
    while end and raw[end - 1] in b" \t\r\n":  # JSON's whitespace, the only kind after the value
        end -= 1
    if 0 <= first_newline < end:
        spaces = _LEADING_SPACES.match(raw, first_newline + 1)
        indent = (spaces.end() - spaces.start() if spaces else 0) or 2
    colon = raw.find(b'":')
    key_sep = ": " if raw[colon + 2 : colon + 3] == b" " else ":"
    item_sep = "," if indent is not None else ", " if key_sep == ": " else ","
    return indent, key_sep, item_sep


_LEADING_SPACES = re.compile(rb" *")


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def _dump_like(data: Any, raw: bytes) -> bytes:
    """JSON in the layout of the original file (HF writes `json.dumps(index, indent=2, sort_keys=True) + "\\n"`).
    The layout is read off the raw bytes, never a decoded copy of a many-megabyte index: `raw` parsed as JSON, so it
    is UTF-8 and its trailing whitespace is JSON's (ASCII), and every character looked at is ASCII."""
    indent, key_sep, item_sep = _layout(raw)
    # Key order is kept as loaded (the weight map is re-sorted by the caller when it was sorted).
    if (
        indent == 2
        and key_sep == ": "
        and item_sep == ","
        and not _has_float({k: v for k, v in data.items() if k != "weight_map"})
    ):
        # HF's own layout (json.dumps(indent=2)): orjson writes the same bytes for strings, ints and nesting, faster
        # on a large weight map (docs/performance.md). Floats (whose spelling may differ) and non-ASCII text (which
        # json.dumps escapes) take the standard library.
        fast = orjson.dumps(data, option=orjson.OPT_INDENT_2)
        if fast.isascii():
            return fast + (b"\n" if raw.endswith(b"\n") else b"")
    out = json.dumps(data, indent=indent, separators=(item_sep, key_sep), ensure_ascii=raw.isascii())
    return (out + ("\n" if raw.endswith(b"\n") else "")).encode("utf-8")
