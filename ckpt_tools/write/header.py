"""Encode safetensors headers the way the safetensors writer does (safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.1)): compact JSON, `__metadata__`
first, padded with spaces so the data starts on an 8-byte boundary."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import orjson

from ..dtypes import byte_size


def encode_header(
    entries: Mapping[str, Mapping[str, object]],
    metadata: Mapping[str, str] | None = None,
    *,
    min_length: int = 0,
    exact_length: int | None = None,
) -> bytes:
    """Header bytes (without the 8-byte length), space-padded to a multiple of 8 and at least `min_length` long.

    With `exact_length`, padded to exactly that many bytes instead (an in-place rewrite keeps the old length, aligned
    or not); raises `ValueError` when the JSON does not fit.
    """
    obj: dict[str, object] = {}
    if metadata is not None:
        obj["__metadata__"] = dict(metadata)
    obj.update(entries)
    raw = orjson.dumps(obj)
    if exact_length is not None:
        if len(raw) > exact_length:
            raise ValueError(f"header JSON is {len(raw)} bytes, more than the {exact_length} available")
        return raw + b" " * (exact_length - len(raw))
    length = max(len(raw), min_length)
    length += (-length) % 8
    return raw + b" " * (length - len(raw))


def build_file(
    tensors: Sequence[tuple[str, str, Sequence[int], bytes]], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A complete safetensors file from (name, dtype, shape, data) in the given on-disk order."""
    entries: dict[str, dict[str, object]] = {}
    offset = 0
    chunks: list[bytes] = []
    for name, dtype, shape, data in tensors:
        need = byte_size(dtype, tuple(shape))
        if need != len(data):
            raise ValueError(f"{name}: {dtype} {list(shape)} needs {need} bytes, got {len(data)}")
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    header = encode_header(entries, metadata)
    return struct.pack("<Q", len(header)) + header + b"".join(chunks)
