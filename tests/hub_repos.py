"""Repos for the fake Hub, built from the genuine fixtures: linked copies, and a genuine MoE checkpoint scaled up to
many layers, experts and shards (the tensor names, dtypes, shapes and config of the genuine producer output,
repeated; the data bytes are zeros, written sparse, since only headers are read)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path

from ckpt_tools.dtypes import byte_size
from ckpt_tools.write.header import encode_header

INDEX = "model.safetensors.index.json"
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def link_repo(src: Path, dest: Path) -> Path:
    """A folder whose files are symlinks to `src`'s, so that per-repo settings can sit beside them."""
    dest.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.is_file():
            (dest / f.name).symlink_to(f.resolve())
    return dest


def header_lengths(folder: Path) -> dict[str, int]:
    """Shard file -> 8 + its header length: the bytes a header read cannot avoid."""
    out = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with open(shard, "rb") as fh:
            head = fh.read(8)
        out[shard.name] = 8 + struct.unpack("<Q", head)[0] if len(head) == 8 else len(head)
    return out


def _tensors(folder: Path) -> dict[str, tuple[str, list[int]]]:
    out: dict[str, tuple[str, list[int]]] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        raw = shard.read_bytes()
        (n,) = struct.unpack_from("<Q", raw)
        header = json.loads(raw[8 : 8 + n])
        header.pop("__metadata__", None)
        out.update({k: (v["dtype"], v["shape"]) for k, v in header.items()})
    return out


def _write_shard(path: Path, tensors: Sequence[tuple[str, str, list[int]]]) -> int:
    entries, offset = {}, 0
    for name, dtype, shape in tensors:
        size = byte_size(dtype, tuple(shape))
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header = encode_header(entries, {"format": "pt"})
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + offset)  # zero data, sparse on disk
    return offset


def scale_moe_fixture(src: Path, dest: Path, layers_per_shard: Sequence[int], experts: int) -> Path:
    """`src` (a genuine MoE checkpoint) with layer 0 repeated over sum(layers_per_shard) layers and expert 0 over
    `experts` experts, split into len(layers_per_shard) shards with an index, config updated to match."""
    tensors = _tensors(src)
    layer0 = sorted(n for n in tensors if n.startswith("model.layers.0."))
    outer = sorted(n for n in tensors if not _LAYER.match(n))
    n_layers = sum(layers_per_shard)

    def layer(index: int) -> list[tuple[str, str, list[int]]]:
        out = []
        for t in layer0:
            dtype, shape = tensors[t]
            name = t.replace("model.layers.0.", f"model.layers.{index}.", 1)
            if ".experts.0." in t:
                out += [(name.replace(".experts.0.", f".experts.{e}."), dtype, shape) for e in range(experts)]
            elif ".experts." not in t:
                out.append((name, dtype, [experts, *shape[1:]] if t.endswith("mlp.gate.weight") else shape))
        return out

    dest.mkdir(parents=True)
    names = [f"model-{i + 1:05d}-of-{len(layers_per_shard):05d}.safetensors" for i in range(len(layers_per_shard))]
    weight_map: dict[str, str] = {}
    total, next_layer = 0, 0
    for i, (name, count) in enumerate(zip(names, layers_per_shard, strict=True)):
        items = [t for index in range(next_layer, next_layer + count) for t in layer(index)]
        next_layer += count
        if i == 0:
            items = [(n, *tensors[n]) for n in outer if "embed" in n] + items
        if i == len(names) - 1:
            items += [(n, *tensors[n]) for n in outer if "embed" not in n]
        total += _write_shard(dest / name, items)
        weight_map.update({t[0]: name for t in items})
    (dest / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))

    config = json.loads((src / "config.json").read_text())
    config["num_hidden_layers"] = n_layers
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if key in config:
            config[key] = experts
    quant = config.get("quantization_config") or {}
    if isinstance(quant.get("ignore"), list):  # per-layer entries (the router gates) follow the layer count
        per_layer = [e for e in quant["ignore"] if e.startswith("model.layers.0.")]
        quant["ignore"] = [e for e in quant["ignore"] if not _LAYER.match(e)] + [
            e.replace("model.layers.0.", f"model.layers.{index}.", 1) for index in range(n_layers) for e in per_layer
        ]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in (INDEX, "config.json"):
            shutil.copy(f, dest / f.name)
    return dest
