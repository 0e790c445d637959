"""Helpers for the repair tests: sharded copies of fixtures, the library's view of a folder, and the CLI in-process."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

from safetensors import deserialize, safe_open

from ckpt_tools.write.header import build_file
from tests.corrupt import FIXTURES, read_file, shards, tensors_of

INDEX = "model.safetensors.index.json"
MISNESTED_FIXTURE = "defective/qwen35moe-nvfp4-misnested-vision"


def fixture_path(name: str) -> Path:
    """fixtures/genuine/<name>, or any path under fixtures/."""
    for candidate in (FIXTURES / "genuine" / name, FIXTURES / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(name)


def copy_of(name: str, dest: Path) -> Path:
    """A writable copy of a fixture folder."""
    import shutil

    out = dest / Path(name).name
    shutil.copytree(fixture_path(name), out)
    for p in out.iterdir():
        p.chmod(0o644)
    return out


def make_sharded(folder: Path, parts: int = 3) -> Path:
    """Split `folder/model.safetensors` into `parts` shards with an index laid out the way transformers writes one
    (`json.dumps(index, indent=2, sort_keys=True) + "\\n"`). Tensors are dealt in on-disk order."""
    single = folder / "model.safetensors"
    _header, meta, _data = read_file(single)
    items = tensors_of(single)
    size = -(-len(items) // parts)
    weight_map: dict[str, str] = {}
    total = 0
    for k in range(parts):
        chunk = items[k * size : (k + 1) * size]
        name = f"model-{k + 1:05d}-of-{parts:05d}.safetensors"
        (folder / name).write_bytes(build_file(chunk, meta))
        for tname, _d, _s, data in chunk:
            weight_map[tname] = name
            total += len(data)
    single.unlink()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return folder


def library_view(folder: Path) -> dict[str, tuple[str, str, tuple[int, ...], bytes]]:
    """tensor -> (shard, dtype, shape, data bytes), as the safetensors library reads every shard. Fails the test if
    the library rejects a shard."""
    out: dict[str, tuple[str, str, tuple[int, ...], bytes]] = {}
    for shard in shards(folder):
        with safe_open(str(shard), "np") as fh:
            keys = set(fh.keys())
        for name, info in deserialize(shard.read_bytes()):
            assert name in keys
            out[name] = (shard.name, info["dtype"], tuple(info["shape"]), bytes(info["data"]))
    return out


def assert_index_agrees(folder: Path) -> None:
    index = folder / INDEX
    if not index.exists():
        return
    weight_map = json.loads(index.read_text())["weight_map"]
    on_disk = {name: shard for name, (shard, *_rest) in library_view(folder).items()}
    assert weight_map == on_disk


def leftovers(folder: Path) -> list[str]:
    """Files a repair must not leave behind: journal, lock, temporary copies."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and "ckpt" in p.name)


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def run_cli(args: Iterable[str], capsys) -> tuple[int, str, str]:
    """Run `ckpt ARGS` in this process through the real entry point (one-line errors, exit codes)."""
    from ckpt_tools.cli.main import main

    argv = sys.argv
    sys.argv = ["ckpt", *map(str, args)]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    return code, out, err


def renamed_view(view: dict, old: str, new: str) -> dict:
    """What the library view must be after renaming prefix `old` to `new` (shard, dtype, shape, data unchanged)."""
    return {(new + k[len(old) :] if k.startswith(old) else k): v for k, v in view.items()}


def add_tensors(folder: Path, tensors: list[tuple[str, str, list[int], bytes]], *, beside: str) -> Path:
    """Insert tensors into the shard holding `beside` (after its first tensor, so they sit mid data region), and
    into the index, written the way transformers writes it. Returns the shard."""
    from tests.corrupt import rewrite

    shard = next(p for p in shards(folder) if f'"{beside}"'.encode() in p.read_bytes())
    rewrite(shard, lambda ts: [*ts[:1], *tensors, *ts[1:]])
    index = folder / INDEX
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"].update({name: shard.name for name, *_ in tensors})
        data["metadata"]["total_size"] += sum(len(t[3]) for t in tensors)
        index.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return shard
