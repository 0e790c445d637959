"""Parse and validate one safetensors header exactly as the safetensors reader does, from a few bytes.

Rules follow `safetensors/src/tensor.rs` (`SafeTensors::read_metadata`, `Metadata::validate`), summarised in
docs/reference/vllm-0.33.md8: 8-byte little-endian length N <= 100,000,000; UTF-8 JSON object; `__metadata__` a
string->string map; known dtypes; offsets sorted, contiguous from 0, no gap or overlap; span = numel x bits / 8;
8 + N + last end == file length. The length field is never trusted with an allocation: we only ever read
min(N, file size) bytes.
"""

from __future__ import annotations

import struct
from operator import attrgetter
from dataclasses import dataclass
from types import MappingProxyType

import orjson

from ..dtypes import BITS
from ..model.tensors import LfsPointer, Problem, Shard, TensorInfo
from .source import Source

MAX_HEADER_SIZE = 100_000_000
_BY_OFFSETS = attrgetter("begin", "end")
FIRST_READ = 64 * 1024  # one read covers the length field and most headers
LFS_MAGIC = b"version https://git-lfs"


@dataclass(frozen=True)
class ShardRead:
    shard: Shard | None
    lfs: LfsPointer | None
    problems: tuple[Problem, ...]


def _lfs_pointer(name: str, head: bytes) -> LfsPointer:
    oid = size = None
    for line in head.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key == "oid":
            oid = value.strip()
        elif key == "size" and value.strip().isdigit():
            size = int(value.strip())
    return LfsPointer(name=name, oid=oid, size=size)


def read_shard(source: Source, name: str, first_read: int = FIRST_READ) -> ShardRead:
    """Read and validate the header of one shard through any source.

    `first_read` bytes are read first; if the header is longer, exactly the rest of it is read next. Remote sources
    pass an estimate of the header length here so that most shards cost one request.
    """
    try:
        size = source.size(name)
        head = source.read_range(name, 0, min(size, max(first_read, 8)))
    except OSError as exc:
        return ShardRead(None, None, (Problem(name, "unreadable", f"cannot read: {exc.strerror or exc}"),))
    if head.startswith(LFS_MAGIC):
        pointer = _lfs_pointer(name, head)
        return ShardRead(None, pointer, ())
    if size < 8:
        return _fail(name, "header-too-small", f"file is {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", head, 0)
    if n > MAX_HEADER_SIZE:
        return _fail(name, "header-too-large", f"declared header length {n:,} exceeds the 100,000,000-byte limit")
    if 8 + n > size:
        return _fail(name, "truncated", f"declared header length {n:,} runs past the end of the {size:,}-byte file")
    if 8 + n <= len(head):
        raw = head[8 : 8 + n]
    else:
        try:
            raw = head[8:] + source.read_range(name, len(head), 8 + n - len(head))
        except OSError as exc:
            return _fail(name, "unreadable", f"cannot read header: {exc.strerror or exc}")
    return parse_header(name, size, raw)


def _fail(name: str, kind: str, message: str, tensor: str | None = None) -> ShardRead:
    return ShardRead(None, None, (Problem(name, kind, message, tensor),))


def parse_header(name: str, file_size: int, raw: bytes) -> ShardRead:
    """Validate header bytes `raw` (without the length prefix) of a file of `file_size` bytes."""
    n = len(raw)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uexc:
            return _fail(name, "invalid-utf8", f"header is not valid UTF-8 (byte {uexc.start})")
        return _fail(name, "invalid-json", f"header is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return _fail(name, "invalid-schema", f"header is a JSON {type(obj).__name__}, not an object")

    problems: list[Problem] = []
    metadata = obj.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            return _fail(name, "invalid-schema", "__metadata__ must map strings to strings")
        metadata = MappingProxyType(metadata)

    # Duplicate JSON keys load (last one wins) but the format forbids them; counting is cheap, confirming is rare.
    if raw.count(b'"data_offsets"') > len(obj):
        dupes = _duplicate_keys(raw)
        if dupes:
            problems.append(Problem(name, "duplicate-key", f"header repeats tensor name(s): {', '.join(dupes[:5])}",
                                    dupes[0]))

    tensors: list[TensorInfo] = []
    append = tensors.append
    bits_of = BITS.get
    for tname, info in obj.items():
        try:
            dtype = info["dtype"]
            shape = info["shape"]
            begin, end = info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            return _fail(name, "invalid-schema", f"tensor `{tname}` lacks dtype, shape or a [begin, end] pair", tname)
        bits = bits_of(dtype) if type(dtype) is str else None
        if bits is None:
            return _fail(name, "unknown-dtype", f"tensor `{tname}` has unknown dtype {dtype!r}", tname)
        if type(shape) is not list or type(begin) is not int or type(end) is not int or begin < 0 or end < 0:
            return _fail(name, "invalid-schema", f"tensor `{tname}` has a malformed shape or offsets", tname)
        for d in shape:
            if type(d) is not int or d < 0:
                return _fail(name, "invalid-schema", f"tensor `{tname}` has a malformed shape", tname)
        append(TensorInfo(tname, dtype, tuple(shape), name, begin, end))

    problems.extend(_validate_layout(name, file_size, n, tensors))
    valid = not any(p.kind != "duplicate-key" for p in problems)
    shard = Shard(name=name, size=file_size, header_len=n, metadata=metadata, tensors=tuple(tensors), valid=valid)
    return ShardRead(shard, None, tuple(problems))


def _validate_layout(name: str, file_size: int, n: int, tensors: list[TensorInfo]) -> list[Problem]:
    expected = 0
    for t in sorted(tensors, key=_BY_OFFSETS):
        if t.begin != expected or t.end < t.begin:
            what = "overlaps the previous tensor" if t.begin < expected else "leaves a gap" if t.begin > expected else "ends before it begins"
            return [Problem(name, "invalid-offset", f"tensor `{t.name}` {what} (data_offsets [{t.begin}, {t.end}], expected begin {expected})", t.name)]
        numel = 1
        for d in t.shape:
            numel *= d
        bits = numel * BITS[t.dtype]
        if bits % 8:
            return [Problem(name, "misaligned-slice", f"tensor `{t.name}` ({t.dtype} {list(t.shape)}) does not end on a byte boundary", t.name)]
        if bits // 8 != t.end - t.begin:
            return [Problem(name, "invalid-span", f"tensor `{t.name}` spans {t.end - t.begin} bytes but {t.dtype} {list(t.shape)} needs {bits // 8}", t.name)]
        expected = t.end
    if 8 + n + expected != file_size:
        gap = file_size - (8 + n + expected)
        what = f"{gap:,} trailing bytes after the last tensor" if gap > 0 else f"file is {-gap:,} bytes short (truncated)"
        return [Problem(name, "incomplete-buffer", f"data region does not match the file size: {what}")]
    return []


def _duplicate_keys(raw: bytes) -> list[str]:
    import json

    dupes: list[str] = []

    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                dupes.append(key)
            seen.add(key)
        return dict(pairs)

    json.loads(raw, object_pairs_hook=hook)
    return dupes
