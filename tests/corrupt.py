"""Helpers that make defective copies of genuine checkpoints. They rewrite files through the library's one header
writer, so a corrupted copy differs from the genuine one only in what the test asks for."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from ckpt_tools.write.header import build_file

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GENUINE = FIXTURES / "genuine"


def genuine_entries() -> list[str]:
    """Every genuine fixture folder (one per producer x model x scheme)."""
    if not GENUINE.is_dir():
        return []
    return sorted(p.name for p in GENUINE.iterdir() if p.is_dir() and any(p.glob("*.safetensors")))


def copy_fixture(name: str, dest: Path) -> Path:
    """A writable copy of fixtures/genuine/<name> (or any path under fixtures/) at dest/<basename>."""
    src = GENUINE / name if (GENUINE / name).exists() else FIXTURES / name
    out = dest / Path(name).name
    shutil.copytree(src, out)
    for p in out.iterdir():
        p.chmod(0o644)
    return out


def read_file(path: Path) -> tuple[dict, dict | None, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", None)
    return header, meta, raw[8 + n :]


def tensors_of(path: Path) -> list[tuple[str, str, list[int], bytes]]:
    header, _meta, data = read_file(path)
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in items]


def rewrite(path: Path, edit: Callable[[list[tuple[str, str, list[int], bytes]]], Iterable]) -> None:
    """Rebuild a shard from edit(tensors) -> new (name, dtype, shape, data) list, keeping __metadata__."""
    _h, meta, _d = read_file(path)
    path.write_bytes(build_file(list(edit(tensors_of(path))), meta))


def shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def rename(folder: Path, fn: Callable[[str], str]) -> int:
    """Rename tensors in every shard (and the index); returns how many names changed."""
    changed = 0
    for shard in shards(folder):
        items = tensors_of(shard)
        changed += sum(1 for n, *_ in items if fn(n) != n)
        rewrite(shard, lambda ts: [(fn(n), d, s, b) for n, d, s, b in ts])
    index = folder / "model.safetensors.index.json"
    if index.exists():
        edit_json(index, lambda j: j.__setitem__("weight_map", {fn(k): v for k, v in j["weight_map"].items()}))
    return changed


def drop(folder: Path, predicate: Callable[[str], bool], *, update_index: bool = True) -> list[str]:
    """Remove matching tensors from every shard (and, by default, the index); returns the removed names."""
    removed: list[str] = []
    for shard in shards(folder):
        items = tensors_of(shard)
        removed += [n for n, *_ in items if predicate(n)]
        rewrite(shard, lambda ts: [t for t in ts if not predicate(t[0])])
    index = folder / "model.safetensors.index.json"
    if update_index and index.exists():
        edit_json(
            index, lambda j: j.__setitem__("weight_map", {k: v for k, v in j["weight_map"].items() if not predicate(k)})
        )
    return sorted(removed)


def patch_tensor_bytes(folder: Path, tensor: str, positions: dict[int, int]) -> Path:
    """Overwrite bytes of one tensor in place (position within the tensor -> new byte value)."""
    for shard in shards(folder):
        header, _meta, _data = read_file(shard)
        if tensor in header:
            raw = bytearray(shard.read_bytes())
            (n,) = struct.unpack_from("<Q", raw)
            begin = 8 + n + header[tensor]["data_offsets"][0]
            for pos, value in positions.items():
                raw[begin + pos] = value
            shard.write_bytes(bytes(raw))
            return shard
    raise KeyError(tensor)


def edit_json(path: Path, fn: Callable[[dict], object]) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2))
