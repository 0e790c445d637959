"""Sparse synthetic checkpoints: real safetensors headers over data regions that are holes (no disk space).

The one writer behind the benchmarks' synthetics (bench/header_bench.py, scale_bench.py, repair_bench.py) and the
memory-plan header sets (tests/memory_models.py). Tensors are dealt to shards in the order given, each shard's data
laid out as the safetensors writer lays it out (offsets contiguous from 0, grouped by dtype, widest first, then by
name: `WRITER_ORDER`), with `model.safetensors.index.json` and config.json beside them. Standard library and ckpt_tools only: tests import it.

A holes-only checkpoint reads as all-zero scales, which every value rule flags (a defect path). `values=` writes real
bytes for the tensors it returns bytes for (`plausible_scales`: NVFP4 block and global scales as producers write
them), leaving every other tensor a hole.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt_tools.write.header import encode_header

Tensor = tuple[str, str, list[int]]  # name, dtype, shape
ITEM_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}
INDEX_NAME = "model.safetensors.index.json"
Values = Callable[[str, str, list[int]], "bytes | None"]  # (name, dtype, shape) -> the tensor's bytes, or None: a hole

# The order the safetensors writer (`save_file`, behind every producer's `save_pretrained`) puts a shard's tensors in,
# header entries and data alike: by dtype, in descending order of its `Dtype` enum, then by name. Seen in every
# genuine fixture (F32, BF16, F8_E4M3, U8 runs; I64, I32, BF16; I32, BF16, F16) and in safetensors 0.8's numpy
# `save` (U64, I64, F64, F32, U32, I32, F16, U16, I16, I8, U8, BOOL). So a shard's block scales are one contiguous
# region, and its one-element global scales another, which is what the value scan meets on real checkpoints.
WRITER_ORDER = (
    "U64",
    "I64",
    "F64",
    "F32",
    "U32",
    "I32",
    "BF16",
    "F16",
    "U16",
    "I16",
    "F8_E8M0",
    "F8_E4M3",
    "F8_E5M2",
    "I8",
    "U8",
    "BOOL",
)
_WRITER_RANK = {dtype: rank for rank, dtype in enumerate(WRITER_ORDER)}


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


def write_shard(
    path: Path, tensors: Iterable[Tensor], metadata: Mapping[str, str] | None = None, values: Values | None = None
) -> tuple[int, int]:
    """One sparse shard in the writer's order (`WRITER_ORDER`); returns (header bytes, data bytes). With `values`,
    the tensors it gives bytes for are written; the rest of the data region is a hole."""
    entries: dict[str, dict[str, Any]] = {}
    written: list[tuple[int, bytes]] = []
    offset = 0
    for name, dtype, shape in sorted(tensors, key=lambda t: (_WRITER_RANK[t[1]], t[0])):
        n = nbytes(dtype, shape)
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        data = values(name, dtype, shape) if values is not None else None
        if data is not None:
            assert len(data) == n, (name, len(data), n)
            written.append((offset, data))
        offset += n
    header = encode_header(entries, dict(metadata or {"format": "pt"}))
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        base = 8 + len(header)
        for at, data in written:
            fh.seek(base + at)
            fh.write(data)
        fh.truncate(base + offset)  # the rest of the data region is a hole
    return len(header), offset


def write_checkpoint(
    folder: Path,
    tensors: Iterable[Tensor],
    *,
    shards: int,
    config: Mapping[str, Any] | None = None,
    index_indent: int | None = None,
    index_sort_keys: bool = False,
    values: Values | None = None,
) -> Written:
    """Shards, index and config.json under `folder` (created if needed); the tensors are dealt to `shards` files in
    equal runs, in the order given; `values` as in `write_shard`."""
    folder.mkdir(parents=True, exist_ok=True)
    items = list(tensors)
    per = -(-len(items) // shards)
    weight_map: dict[str, str] = {}
    header_bytes = data_bytes = 0
    for k in range(shards):
        name = shard_name(k, shards)
        run = items[k * per : (k + 1) * per]
        h, d = write_shard(folder / name, run, values=values)
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


# ---- plausible scale values ---------------------------------------------------------------------------------------

# Positive normal E4M3 codes (0x30 = 0.5 ... 0x5F = 30): NVFP4 block scales, amax / 6 in the global scale's units.
_BLOCK_CODES = bytes(0x30 + (i * 7) % 0x30 for i in range(4096))
# NVFP4 global scales (6 x 448 = 2688 over the amax, rules/scales.toml): compressed-tensors stores the reciprocal,
# ModelOpt the direct value.
_RECIPROCAL = frozenset({"weight_global_scale", "input_global_scale"})
_DIRECT = frozenset({"weight_scale_2", "input_scale"})


def plausible_scales(name: str, dtype: str, shape: list[int]) -> bytes | None:
    """The bytes an NVFP4 export's scale tensors plausibly hold, or None (weights and everything else stay holes):
    positive normal E4M3 block scales, and one-element global scales in the name's convention whose amax depends on
    the module's parent only (the projections vLLM fuses, q/k/v and gate/up, share one global scale, as producers
    write them). Deterministic: the same build writes the same bytes."""
    parent, _, suffix = name.rpartition(".")
    numel = nbytes(dtype, shape) // ITEM_BYTES[dtype]
    if dtype == "F8_E4M3" and suffix == "weight_scale":
        start = zlib.crc32(parent.encode()) % 256
        reps = -(-(numel + start) // len(_BLOCK_CODES))
        return (_BLOCK_CODES * reps)[start : start + numel]
    if dtype == "F32" and numel == 1 and suffix in _RECIPROCAL | _DIRECT:
        amax = 0.5 + (zlib.crc32(parent.rpartition(".")[0].encode()) % 1000) / 100  # 0.5 .. 10.5
        return struct.pack("<f", 2688 / amax if suffix in _RECIPROCAL else amax / 2688)
    return None
