"""Header-path benchmark: a 160-shard, ~190k-tensor NVFP4 MoE checkpoint (sparse files, no real weight bytes).

Reports each stage as a ratio against the baseline measured in the same process: reading every shard's header bytes
and parsing them with `json.loads` (the standard library) and with `orjson.loads`. Usage:

    python bench/header_bench.py [--dir /tmp/ckpt-bench] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import time
from pathlib import Path

import orjson

from ckpt_tools.write.header import encode_header

LAYERS, EXPERTS, SHARDS = 60, 256, 160
HIDDEN, MOE_INTER = 2048, 768


def expert_tensors(layer: int, expert: int):
    for proj, (out, inp) in (("gate_proj", (MOE_INTER, HIDDEN)), ("up_proj", (MOE_INTER, HIDDEN)),
                             ("down_proj", (HIDDEN, MOE_INTER))):
        p = f"model.layers.{layer}.mlp.experts.{expert}.{proj}"
        yield f"{p}.weight", "U8", [out, inp // 2]
        yield f"{p}.weight_scale", "F8_E4M3", [out, inp // 16]
        yield f"{p}.weight_scale_2", "F32", []
        yield f"{p}.input_scale", "F32", []


def build(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    tensors = [t for layer in range(LAYERS) for e in range(EXPERTS) for t in expert_tensors(layer, e)]
    per = -(-len(tensors) // SHARDS)
    weight_map = {}
    for s in range(SHARDS):
        name = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        entries, offset = {}, 0
        for tname, dtype, shape in tensors[s * per : (s + 1) * per]:
            n = (1 if not shape else shape[0] * shape[1]) * (4 if dtype == "F32" else 1)
            entries[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[tname] = name
        header = encode_header(entries, {"format": "pt"})
        with open(root / name, "wb") as fh:
            fh.write(struct.pack("<Q", len(header)) + header)
            fh.truncate(8 + len(header) + offset)  # sparse: the data region takes no disk space
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
                                   "producer": {"name": "modelopt"}}}
    (root / "config.json").write_text(json.dumps(cfg))
    return len(tensors)


def read_headers(root: Path) -> list[bytes]:
    out = []
    for p in sorted(root.glob("*.safetensors")):
        with open(p, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            out.append(fh.read(n))
    return out


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/ckpt-bench-headers")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(args.dir)
    if not (root / "config.json").exists():
        count = build(root)
        print(f"built {count:,} tensors in {SHARDS} shards under {root}")
    from ckpt_tools.pipeline import analyze
    from ckpt_tools.read import open_source
    from ckpt_tools.read.loader import load_checkpoint

    header_bytes = sum(len(h) for h in read_headers(root))
    base_json = timed(lambda: [json.loads(h) for h in read_headers(root)], args.repeat)
    base_orjson = timed(lambda: [orjson.loads(h) for h in read_headers(root)], args.repeat)
    load = timed(lambda: load_checkpoint(open_source(str(root))).tensors, args.repeat)
    full = timed(lambda: analyze(str(root), headers_only=True), args.repeat)
    tensors = len(load_checkpoint(open_source(str(root))).tensors)
    print(f"{tensors:,} tensors, {SHARDS} shards, {header_bytes / 1e6:.1f} MB of header JSON")
    print(f"baseline read + json.loads    {base_json * 1000:8.1f} ms   1.00x")
    print(f"baseline read + orjson.loads  {base_orjson * 1000:8.1f} ms   {base_orjson / base_json:.2f}x")
    print(f"ckpt load (read+validate+map) {load * 1000:8.1f} ms   {load / base_json:.2f}x json.loads")
    print(f"ckpt doctor --headers-only    {full * 1000:8.1f} ms   {full / base_json:.2f}x json.loads")


if __name__ == "__main__":
    os.environ.setdefault("CKPT_NO_PROGRESS", "1")
    main()
