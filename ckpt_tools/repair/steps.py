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
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import orjson

from ..errors import TargetError
from ..model.checkpoint import Checkpoint
from ..model.tensors import Index, Shard, TensorInfo
from ..read.header import parse_header
from ..write.header import encode_header
from ._thread import InThread
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
    # (weight map, metadata) of `new` as the loader reads it back (`read.configs.read_index`), for the predicted
    # after-state, which then parses no index; never journaled (`new` is the record), absent in a decoded journal.
    parsed: tuple[Mapping[str, str], Mapping[str, object]] | None = field(
        default=None, compare=False, repr=False, metadata={"journal": False}
    )
    # The analysis's index when `new` is exactly its weight map with keys through the plan's `index_renames` and
    # nothing dropped (the file on disk was the analysis's index: `_parsed_index`); None otherwise. What lets the
    # after-state carry index-tensor-mismatch's proof over (`rules.ck103_index_tensor_mismatch.carry_where_indexed`);
    # never journaled, absent in a decoded journal.
    renamed_from: Index | None = field(default=None, compare=False, repr=False, metadata={"journal": False})

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
    header, metadata, as_written = _reader_view_of(shard, prefix)
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
    # Names through `renames`, in C (a rename touches few entries of a large header); a collision shows as a
    # shorter map, and the loop below names the first one.
    entries: dict[str, Any] = {} if drops else dict(zip(map(renames.get, header, header), header.values(), strict=True))
    if drops or len(entries) != len(header):
        entries = {}
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
        new_header = _renamed_in_place(prefix[8:], shard, renames) if as_written else None
        if new_header is None:
            try:
                new_header = encode_header(entries, metadata, exact_length=shard.header_len)
            except ValueError:
                new_header = None
        if new_header is not None:
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


def _renamed_in_place(raw: bytes, shard: Shard, renames: Mapping[str, str]) -> bytes | None:
    """`encode_header` of `raw`'s entries with `renames` applied, padded to `raw`'s length, as `raw` with each renamed
    key's text replaced; None when it does not fit (or a name is not found, which cannot happen for a header written
    from the shard's view). `raw` must be exactly `encode_header` of the shard's reader view (`_reader_view_of`'s
    third answer) and the renames collision-free (the caller's map of renamed entries is as long as the header).

    WHY it is the encoding: the header is compact JSON, one `"name":{"dtype":...}` entry per tensor in the shard's
    order, each key encoded on its own as orjson encodes the string; inside any encoded string a quote is escaped,
    so the text `"name":{"dtype":` can only begin the entry whose key is exactly `name` (keys are unique), found in
    header order one after the other; renaming changes those keys' text alone, and the padding fills the rest."""
    names = list(map(_NAME, shard.tensors))
    cuts: list[bytes] = []
    at = 0
    for name in compress(names, map(renames.__contains__, names)):  # header order
        key = orjson.dumps(name)
        found = raw.find(key + b':{"dtype":', at)
        if found < 0:
            return None
        cuts += (raw[at:found], orjson.dumps(renames[name]))
        at = found + len(key)
    end = len(raw.rstrip(b" "))  # the JSON ends with its brace; the rest is padding
    if at > end:
        return None
    cuts.append(raw[at:end])
    text = b"".join(cuts)
    if len(text) > len(raw):
        return None
    return text + b" " * (len(raw) - len(text))


def _reader_view(shard: Shard, prefix: bytes) -> tuple[dict[str, Any], dict[str, str] | None]:
    """`_reader_view_of` without its last answer."""
    header, metadata, _as_written = _reader_view_of(shard, prefix)
    return header, metadata


def _reader_view_of(shard: Shard, prefix: bytes) -> tuple[dict[str, Any], dict[str, str] | None, bool]:
    """The header's entries and metadata exactly as the safetensors reader reads them, or a one-line refusal; and
    whether the header bytes are exactly `encode_header` of them (padded to their length).

    A repair rewrites the header from this view, so it must be the reader's: a shard the reader rejects is never
    rewritten, nor one it reads by dropping something (a repeated tensor name keeps only the last entry). Entries
    are written back in the reader's terms (dtype, shape, data_offsets); fields the reader ignores are not kept.
    """
    header = _entries_of(shard.tensors)
    metadata = dict(shard.metadata) if shard.metadata is not None else None
    if shard.valid and _encodes_as(header, metadata, prefix[8:]):
        # WHY this is the reader's view without parsing the header again: the bytes on disk are exactly what writing
        # the analysis's view of this shard gives (as safetensors writes a header, padded to the same length), and
        # the reader reads a header written from a view as that view; the analysis read this shard without a
        # problem (`guard.check_checkpoint` refuses any), and the file size is the one it read (`read_prefix`).
        return header, metadata, True
    return (*_parsed_view(shard, prefix), False)


def _entries_of(tensors: tuple[TensorInfo, ...]) -> dict[str, Any]:
    return {t.name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.begin, t.end]} for t in tensors}


def _encodes_as(header: dict[str, Any], metadata: dict[str, str] | None, raw: bytes) -> bool:
    try:
        return encode_header(header, metadata, exact_length=len(raw)) == raw
    except ValueError:  # does not fit: certainly not these bytes
        return False


def _parsed_view(shard: Shard, prefix: bytes) -> tuple[dict[str, Any], dict[str, str] | None]:
    """`_reader_view` by parsing the header on disk again."""
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
    old_sha256 = InThread(lambda: sha256(raw))  # without the interpreter lock, beside the work below
    data, as_analysed = _parsed_index(ckpt.index, raw)
    weight_map: dict[str, str] = data["weight_map"]
    drops, renames = plan.index_drops, plan.index_renames
    keys = list(weight_map)
    in_order = keys == sorted(keys)  # HF writers sort the map; a repaired one stays sorted
    if drops:
        kept = [(k, f) for k, f in weight_map.items() if k not in drops]
        new_map = {renames.get(key, key): file for key, file in kept}
        if in_order:
            new_map = dict(sorted(new_map.items()))
    elif in_order:
        new_map = _sorted_renamed(weight_map, keys, renames)
    else:
        # Every key through `renames.get(key, key)` beside its file, in C (a rename touches few keys of a large map).
        new_map = dict(zip(map(renames.get, keys, keys), weight_map.values(), strict=True))
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
    spliced = _spliced_index(raw, keys, renames, new_map) if as_analysed and in_order and not drops else None
    new = spliced if spliced is not None else _dump_like(data, raw)
    if new == raw:
        return None
    # Counted over the plan's (few) keys: each names at most one entry of the map.
    removed = sum(1 for k in drops if k in weight_map)
    renamed = sum(1 for k in renames if k in weight_map and k not in drops)
    note = ", ".join(
        p for p in (f"{renamed} key(s) renamed" if renamed else "", f"{removed} key(s) removed" if removed else "") if p
    )
    # WHY `parsed` is what reading `new` back gives: `new` is `data` dumped (key order kept, strings and integers
    # written exactly, floats by their round-tripping repr), and the loader keeps the weight map and a metadata object
    # as parsed (any other metadata reads as empty).
    parsed = (new_map, meta if isinstance(meta, dict) else {})
    return IndexStep(
        file=ckpt.index.name,
        old_sha256=old_sha256.result(),
        new=new,
        note=note or "rewritten",
        old=raw,
        parsed=parsed,
        renamed_from=ckpt.index if as_analysed and not drops else None,
    )


def _sorted_renamed(weight_map: dict[str, str], keys: list[str], renames: Mapping[str, str]) -> dict[str, str]:
    """`dict(sorted(zip(map(renames.get, keys, keys), weight_map.values()), key=itemgetter(0)))` for a map whose
    `keys` are in order, in list slices and whole-dict steps: the (few) renamed keys are cut out of the sorted key
    list where a binary search finds them and their new names merged in where it places them; the map is a copy of
    the old one up to the first place the two orders differ, and only the keys from there on are entered again.
    WHY this is the same: without two equal keys the sorted order is unique, and cutting keys out of a sorted list
    and merging a sorted run into it keeps it sorted; equal keys (a collision) make a shorter map in both, which the
    caller refuses whatever the order or the files."""
    olds = sorted(k for k in renames if k in weight_map)
    out = weight_map.copy()
    if not olds:
        return out
    moved = sorted(((renames[k], weight_map[k]) for k in olds), key=itemgetter(0))
    kept: list[str] = []
    at = 0
    for old in olds:  # each is a key of the map, so the search finds it exactly
        where = bisect_left(keys, old, lo=at)
        kept += keys[at:where]
        at = where + 1
    kept += keys[at:]
    order: list[str] = []
    at = 0
    for new, _file in moved:
        where = bisect_left(kept, new, lo=at)
        order += kept[at:where]
        order.append(new)
        at = where
    order += kept[at:]
    # `keys` and `order` agree before the first renamed key and before the first new one (`kept` is `keys` there).
    same = min(bisect_left(keys, olds[0]), bisect_left(kept, moved[0][0]))
    for key in keys[same:]:
        del out[key]
    tail = order[same:]
    files: dict[str, Any] = dict(moved)  # a JSON index may hold anything as a file
    out.update(zip(tail, map(files.get, tail, map(weight_map.get, tail)), strict=True))
    return out


def _spliced_index(raw: bytes, keys: list[str], renames: Mapping[str, str], new_map: dict[str, Any]) -> bytes | None:
    """`_dump_like` of the index with its sorted weight map `new_map` in place of the one `raw` holds, as `raw` with
    the entries that differ cut out and the new ones written in (the rest of a many-megabyte file is copied, not
    encoded again), or None where that cannot be shown to be the same bytes (the caller dumps the whole).

    `raw` must be exactly the dump of the analysis's index, whose sorted keys are `keys`, and `new_map` those keys
    with the renamed ones cut out and their new names merged in (`_sorted_renamed`), collision-free. WHY the splice is
    the dump: in HF's layout (indent 2, `": "`, `","`) with no backslash in the file (so no escaped character
    anywhere, and no newline inside a string), each weight-map entry is one line `\n    "key": value`, entries are
    joined by commas, and such a line can only start an entry of a depth-2 object, so the first one after the
    top-level `"weight_map"` key that names a key is that key's entry. Every removed key and every place a new one
    goes lie within old entries [lo, hi); the new map agrees with the old one before lo and from hi on (sorted
    merge), so only the entries between are written, between the old text up to entry lo and from entry hi (or the
    map's braces at either end): each as its line,
    encoded by orjson as the dump encodes it (a string value, and no backslash: no escape, which both encoders would
    otherwise have to spell alike)."""
    if b"\\" in raw or _layout(raw) != (2, ": ", ","):
        return None
    olds = [k for k in renames if _holds(keys, k)]  # the renamed keys of the old map
    removed = [bisect_left(keys, k) for k in olds]
    placed = [bisect_left(keys, renames[k]) for k in olds]  # where each new name goes among the old keys
    if not removed:
        return None
    n = len(keys)
    lo = min(min(removed), min(placed))
    hi = max(max(removed) + 1, max(placed))
    opening = b'\n  "weight_map": {'
    start = raw.find(opening)
    if start < 0:
        return None
    # The text before entry lo (up to the end of entry lo - 1, or the map's opening brace) and from entry hi on (its
    # separating comma, or the map's closing brace: the weight map is the file's last key, so its `\n  }` is the
    # last one).
    at_lo = raw.find(b"\n    " + orjson.dumps(keys[lo]) + b": ", start) - 1 if lo else start + len(opening)
    at_hi = raw.find(b"\n    " + orjson.dumps(keys[hi]) + b": ", at_lo) - 1 if hi < n else raw.rfind(b"\n  }")
    if at_lo < start or at_hi < at_lo:
        return None
    middle = list(islice(new_map.items(), lo, len(new_map) - (n - hi)))
    if not middle or not all(type(v) is str for _k, v in middle):
        return None
    lines = b",".join(b"\n    " + orjson.dumps(k) + b": " + orjson.dumps(v) for k, v in middle)
    if b"\\" in lines or not lines.isascii():
        return None
    view = memoryview(raw)  # slices of a view copy nothing: the join is the one copy of the file
    return b"".join((view[:at_lo], b"," if lo else b"", lines, view[at_hi:]))


def _holds(keys: list[str], key: str) -> bool:
    """`key` is one of the sorted `keys`."""
    at = bisect_left(keys, key)
    return at < len(keys) and keys[at] == key


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


def _parsed_index(index: Index, raw: bytes) -> tuple[dict[str, Any], bool]:
    """`raw` (the index file as read now) parsed, as fresh objects the caller may change, and whether it is the
    analysis's index (its weight map and metadata, copied; nothing else in the file). When `raw` is exactly the
    analysis's index written back in the file's own layout, that is the analysis's index, copied: WHY exact: JSON
    written from values reads back as the same values, so bytes equal to what those values write read as them (a
    file with other top-level keys, or changed since the analysis, differs and is parsed). Writing a 100k-entry map
    costs a fraction of parsing it."""
    # `.copy()` of the read-only views copies the dicts underneath in C (`dict(view)` would go key by key).
    known: dict[str, Any] = {"weight_map": _copy(index.weight_map)}
    if index.metadata:
        known = {"metadata": _copy(index.metadata), **known}
    if _dump_like(known, raw) == raw:
        return known, True
    return orjson.loads(raw), False  # same objects as json.loads, several times faster on a 100k-entry index


def _copy(mapping: Mapping[str, Any]) -> dict[str, Any]:
    copy = getattr(mapping, "copy", None)
    out = copy() if copy is not None else None
    return out if type(out) is dict else dict(mapping)


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
        # HF's own layout (json.dumps(indent=2)): orjson writes the same bytes for strings, ints and nesting, several
        # times faster on a 100k-entry weight map. Floats (whose spelling may differ) and non-ASCII text (which
        # json.dumps escapes) take the standard library.
        fast = orjson.dumps(data, option=orjson.OPT_INDENT_2)
        if fast.isascii():
            return fast + (b"\n" if raw.endswith(b"\n") else b"")
    out = json.dumps(data, indent=indent, separators=(item_sep, key_sep), ensure_ascii=raw.isascii())
    return (out + ("\n" if raw.endswith(b"\n") else "")).encode("utf-8")
