"""Corruption recipes for rule cases (tests/rule_cases/*.toml): each step is a table with an `op` and its arguments,
applied to a temporary copy of a genuine fixture through the helpers in tests/corrupt.py (which write through the
library's one header writer)."""

from __future__ import annotations

import re
import shutil
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ckpt_tools.dtypes import byte_size
from tests.corrupt import drop, edit_json, read_file, rename, rewrite, shards, tensors_of

INDEX = "model.safetensors.index.json"


def _shard_of(folder: Path, tensor: str) -> Path:
    for shard in shards(folder):
        header, _meta, _data = read_file(shard)
        if tensor in header:
            return shard
    raise KeyError(f"{tensor} is in no shard of {folder}")


def _set_index(folder: Path, tensor: str, shard: str | None) -> None:
    index = folder / INDEX
    if not index.exists():
        return

    def edit(j: dict) -> None:
        if shard is None:
            j["weight_map"].pop(tensor, None)
        else:
            j["weight_map"][tensor] = shard

    edit_json(index, edit)


def _encode(dtype: str, values: list[float]) -> bytes:
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in values)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in values)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    raise ValueError(f"cannot encode values as {dtype}")


def _resize(data: bytes, size: int) -> bytes:
    if len(data) >= size:
        return data[:size]
    return (data * (size // max(len(data), 1) + 1))[:size] if data else b"\x00" * size


def _path(obj: Any, dotted: str, *, create: bool = False) -> tuple[Any, str | int]:
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in dotted.split(".")]
    for p in parts[:-1]:
        if create and isinstance(obj, dict) and p not in obj:
            obj[p] = {}
        obj = obj[p]
    return obj, parts[-1]


# ---- operations ---------------------------------------------------------------------------------------------------


def op_rename(folder: Path, pattern: str, repl: str) -> None:
    rx = re.compile(pattern)
    if not rename(folder, lambda n: rx.sub(repl, n)):
        raise AssertionError(f"rename {pattern!r} changed no tensor")


def op_drop(folder: Path, pattern: str, index: bool = True) -> None:
    rx = re.compile(pattern)
    if not drop(folder, lambda n: bool(rx.search(n)), update_index=index):
        raise AssertionError(f"drop {pattern!r} removed no tensor")


def op_copy_tensor(folder: Path, source: str, to: str, into: str | None = None, index: bool = True) -> None:
    """Add tensor `to` with the dtype, shape and bytes of `source`, in `source`'s shard or in shard `into`."""
    src_shard = _shard_of(folder, source)
    item = next(t for t in tensors_of(src_shard) if t[0] == source)
    dest = folder / into if into else src_shard
    rewrite(dest, lambda ts: [*ts, (to, item[1], item[2], item[3])])
    if index:
        _set_index(folder, to, dest.name)


def op_add_tensor(
    folder: Path,
    name: str,
    dtype: str,
    shape: list[int],
    values: list[float] | None = None,
    fill: int = 0,
    into: str | None = None,
) -> None:
    dest = folder / into if into else shards(folder)[0]
    data = _encode(dtype, values) if values is not None else bytes([fill]) * (byte_size(dtype, tuple(shape)) or 0)
    rewrite(dest, lambda ts: [*ts, (name, dtype, shape, data)])
    _set_index(folder, name, dest.name)


def op_move_tensor(folder: Path, tensor: str, into: str, index: bool = True) -> None:
    src = _shard_of(folder, tensor)
    item = next(t for t in tensors_of(src) if t[0] == tensor)
    rewrite(src, lambda ts: [t for t in ts if t[0] != tensor])
    rewrite(folder / into, lambda ts: [*ts, item])
    if index:
        _set_index(folder, tensor, into)


def op_retype(folder: Path, tensor: str, dtype: str | None = None, shape: list[int] | None = None) -> None:
    """Rewrite one tensor with another dtype and/or shape; its bytes are cut or repeated to the new size."""
    shard = _shard_of(folder, tensor)

    def edit(ts):
        out = []
        for name, d, s, data in ts:
            if name == tensor:
                d, s = dtype or d, shape if shape is not None else s
                data = _resize(data, byte_size(d, tuple(s)) or 0)
            out.append((name, d, s, data))
        return out

    rewrite(shard, edit)


def op_retype_matching(folder: Path, pattern: str, dtype: str) -> None:
    """Rewrite every tensor whose name matches the regex with another dtype (same shape; bytes cut or repeated)."""
    rx = re.compile(pattern)
    hit = False
    for shard in shards(folder):

        def edit(ts):
            nonlocal hit
            out = []
            for name, d, s, data in ts:
                if rx.search(name):
                    hit = True
                    d, data = dtype, _resize(data, byte_size(dtype, tuple(s)) or 0)
                out.append((name, d, s, data))
            return out

        rewrite(shard, edit)
    if not hit:
        raise AssertionError(f"retype_matching {pattern!r} changed no tensor")


def _rewrite_values(folder: Path, pattern: str, fn: Callable[[str, list[float]], list[float]], what: str) -> None:
    """Replace the values of every matching float tensor by fn(dtype, values)."""
    from ckpt_tools.rules._values import decode

    rx = re.compile(pattern)
    hit = False

    def edit(ts):
        nonlocal hit
        out = []
        for name, d, s, data in ts:
            values = decode(d, data) if rx.search(name) else None
            if values is not None:
                hit = True
                data = _encode(d, fn(d, values))
            out.append((name, d, s, data))
        return out

    for shard in shards(folder):
        rewrite(shard, edit)
    if not hit:
        raise AssertionError(f"{what} {pattern!r} matched no float tensor")


def op_set_values(folder: Path, pattern: str, values: list[float]) -> None:
    """Overwrite every matching float tensor with these values (repeated to its length)."""
    _rewrite_values(folder, pattern, lambda _d, old: (values * (len(old) // len(values) + 1))[: len(old)], "set_values")


def op_scale_values(folder: Path, pattern: str, factor: float) -> None:
    """Multiply every matching float tensor's values by `factor`."""
    _rewrite_values(folder, pattern, lambda _d, old: [v * factor for v in old], "scale_values")


def op_zero_channels(folder: Path, pattern: str, rows: list[int] = (), columns: list[int] = ()) -> None:
    """Zero whole rows (first axis, everything after it) or columns (last axis) of every matching tensor, in its own
    bytes: +0 is all-zero bytes in every float format."""
    rx = re.compile(pattern)
    hit = False

    def edit(ts):
        nonlocal hit
        out = []
        for name, d, s, data in ts:
            if rx.search(name) and len(s) >= 2 and data:
                hit = True
                item = len(data) // max(1, _numel(s))
                width = _numel(s[1:]) * item
                buf = bytearray(data)
                for r in rows:
                    buf[r * width : (r + 1) * width] = bytes(width)
                last = s[-1] * item
                for c in columns:
                    for off in range(c * item, len(buf), last):
                        buf[off : off + item] = bytes(item)
                data = bytes(buf)
            out.append((name, d, s, data))
        return out

    for shard in shards(folder):
        rewrite(shard, edit)
    if not hit:
        raise AssertionError(f"zero_channels {pattern!r} matched no 2-D tensor")


def _numel(shape) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def op_patch_bytes(folder: Path, tensor: str, positions: Mapping[str, int]) -> None:
    from tests.corrupt import patch_tensor_bytes

    patch_tensor_bytes(folder, tensor, {int(k): v for k, v in positions.items()})


def op_edit_json(
    folder: Path, file: str, set: Mapping[str, Any] | None = None, delete: list[str] | None = None
) -> None:
    def edit(j: dict) -> None:
        for dotted, value in (set or {}).items():
            parent, key = _path(j, dotted, create=True)
            parent[key] = value
        for dotted in delete or []:
            parent, key = _path(j, dotted)
            del parent[key]

    edit_json(folder / file, edit)


def op_filter_json(folder: Path, file: str, path: str, pattern: str) -> None:
    """Remove the items of a JSON list whose string value matches the regex."""
    rx = re.compile(pattern)

    def edit(j: dict) -> None:
        parent, key = _path(j, path)
        parent[key] = [x for x in parent[key] if not (isinstance(x, str) and rx.search(x))]

    edit_json(folder / file, edit)


def op_append_json(folder: Path, file: str, path: str, value: Any) -> None:
    def edit(j: dict) -> None:
        parent, key = _path(j, path)
        parent[key].append(value)

    edit_json(folder / file, edit)


def op_copy_file(folder: Path, source: str, to: str) -> None:
    shutil.copyfile(folder / source, folder / to)


def op_delete_file(folder: Path, name: str) -> None:
    (folder / name).unlink()


def op_write_file(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text)


def op_killed_repair(folder: Path, command: list[str], at: str) -> None:
    """Run `ckpt COMMAND FOLDER` in its own process and SIGKILL it at crash point `at` (what a kill, power loss or
    OOM leaves: the journal, and some files changed)."""
    import os
    import signal
    import subprocess
    import sys

    env = {
        **os.environ,
        "CKPT_NO_PROGRESS": "1",
        "CKPT_REPAIR_CRASH_AT": at,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", command[0], str(folder), *command[1:]],
        env=env,
        capture_output=True,
        timeout=120,
    )
    if proc.returncode != -signal.SIGKILL:
        raise AssertionError(f"crash point {at} did not fire: {proc.stderr.decode()}")


def op_index_map(folder: Path, tensor: str, shard: str = "") -> None:
    """Point the index entry of `tensor` at `shard`, or remove the entry when `shard` is empty."""
    _set_index(folder, tensor, shard or None)


def op_index_in_shard_order(folder: Path) -> None:
    """Rewrite the index's `weight_map` in the shards' own order (shard files by name, tensors in header order), as
    writers that list tensors shard by shard do, instead of sorted by name."""

    def edit(j: dict) -> None:
        old = j["weight_map"]
        order = [(t, shard.name) for shard in sorted(shards(folder)) for t in read_file(shard)[0]]
        j["weight_map"] = {t: old[t] for t, _ in order if t in old}

    edit_json(folder / INDEX, edit)


def op_truncate(folder: Path, name: str, remove: int) -> None:
    path = folder / name
    path.write_bytes(path.read_bytes()[:-remove])


def op_new_shard(folder: Path, name: str, pattern: str) -> None:
    """Move the matching tensors into a new shard file that the index does not name."""
    rx = re.compile(pattern)
    moved = []
    for shard in shards(folder):
        items = tensors_of(shard)
        moved += [t for t in items if rx.search(t[0])]
        rewrite(shard, lambda ts: [t for t in ts if not rx.search(t[0])])
    if not moved:
        raise AssertionError(f"new_shard {pattern!r} matched no tensor")
    from ckpt_tools.write.header import build_file

    (folder / name).write_bytes(build_file(moved))
    for t in moved:
        _set_index(folder, t[0], None)


def op_block_scales(folder: Path, block: list[int], value: float = 0.01) -> None:
    """Turn every FP8 weight's `weight_scale` into an F32 block scale [ceil(N/bn), ceil(K/bk)]."""
    bn, bk = block
    for shard in shards(folder):
        items = {t[0]: t for t in tensors_of(shard)}

        def edit(ts, items=items):  # bound now: `items` is rebound for the next shard
            out = []
            for name, d, s, data in ts:
                weight = items.get(name[: -len("_scale")]) if name.endswith(".weight_scale") else None
                if weight is not None and weight[1] == "F8_E4M3":
                    n, k = weight[2]
                    s = [-(-n // bn), -(-k // bk)]
                    d, data = "F32", _encode("F32", [value] * (s[0] * s[1]))
                out.append((name, d, s, data))
            return out

        rewrite(shard, edit)


OPS: dict[str, Callable[..., None]] = {
    "index_map": op_index_map,
    "index_in_shard_order": op_index_in_shard_order,
    "killed_repair": op_killed_repair,
    "truncate": op_truncate,
    "new_shard": op_new_shard,
    "block_scales": op_block_scales,
    "rename": op_rename,
    "drop": op_drop,
    "copy_tensor": op_copy_tensor,
    "add_tensor": op_add_tensor,
    "move_tensor": op_move_tensor,
    "retype": op_retype,
    "retype_matching": op_retype_matching,
    "set_values": op_set_values,
    "scale_values": op_scale_values,
    "patch_bytes": op_patch_bytes,
    "zero_channels": op_zero_channels,
    "edit_json": op_edit_json,
    "filter_json": op_filter_json,
    "append_json": op_append_json,
    "copy_file": op_copy_file,
    "delete_file": op_delete_file,
    "write_file": op_write_file,
}


def apply(folder: Path, steps: list[Mapping[str, Any]]) -> None:
    for step in steps:
        args = dict(step)
        op = args.pop("op")
        if "from" in args:  # `from` is a Python keyword
            args["source"] = args.pop("from")
        OPS[op](folder, **args)
