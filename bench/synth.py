"""Sparse synthetic checkpoints: real safetensors headers over data regions that are holes (no disk space).

The one writer behind the benchmarks' synthetics (bench/header_bench.py, scale_bench.py, repair_bench.py) and the
memory-plan header sets (tests/memory_models.py). Tensors are dealt to shards in the order given, each shard's data
laid out in that order (offsets contiguous from 0, as the safetensors writer lays them out), with
`model.safetensors.index.json` and config.json beside them. Standard library and ckpt_tools only: tests import it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt_tools.write.header import encode_header

Tensor = tuple[str, str, list[int]]  # name, dtype, shape
ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}
INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class Written:
    tensors: int
    shards: int
    data_bytes: int  # the shards' data regions, all holes
    header_bytes: int  # the shards' JSON headers
    index_bytes: int


def nbytes(dtype: str, shape: Iterable[int]) -> int:
    n = ITEM_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def shard_name(k: int, shards: int) -> str:
    return f"model-{k + 1:05d}-of-{shards:05d}.safetensors"


def write_shard(path: Path, tensors: Iterable[Tensor], metadata: Mapping[str, str] | None = None) -> tuple[int, int]:
    """One sparse shard; returns (header bytes, data bytes)."""
    entries: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, dtype, shape in tensors:
        n = nbytes(dtype, shape)
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header = encode_header(entries, dict(metadata or {"format": "pt"}))
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + offset)  # the data region is a hole
    return len(header), offset


def write_checkpoint(
    folder: Path,
    tensors: Iterable[Tensor],
    *,
    shards: int,
    config: Mapping[str, Any] | None = None,
    index_indent: int | None = None,
    index_sort_keys: bool = False,
) -> Written:
    """Shards, index and config.json under `folder` (created if needed); the tensors are dealt to `shards` files in
    equal runs, in the order given."""
    folder.mkdir(parents=True, exist_ok=True)
    items = list(tensors)
    per = -(-len(items) // shards)
    weight_map: dict[str, str] = {}
    header_bytes = data_bytes = 0
    for k in range(shards):
        name = shard_name(k, shards)
        run = items[k * per : (k + 1) * per]
        h, d = write_shard(folder / name, run)
        header_bytes, data_bytes = header_bytes + h, data_bytes + d
        weight_map.update(dict.fromkeys((t[0] for t in run), name))
    index = json.dumps(
        {"metadata": {"total_size": data_bytes}, "weight_map": weight_map},
        indent=index_indent,
        sort_keys=index_sort_keys,
    )
    (folder / INDEX_NAME).write_text(index + "\n")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    return Written(len(items), shards, data_bytes, header_bytes, len(index) + 1)
