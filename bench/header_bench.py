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
from synth import Tensor, write_checkpoint

LAYERS, EXPERTS, SHARDS = 60, 256, 160
HIDDEN, MOE_INTER = 2048, 768


def nvfp4_linear(prefix: str, out: int, inp: int):
    """The four tensors of one ModelOpt NVFP4 linear layer: packed weight, FP8 block scales, two global scales."""
    yield f"{prefix}.weight", "U8", [out, inp // 2]
    yield f"{prefix}.weight_scale", "F8_E4M3", [out, inp // 16]
    yield f"{prefix}.weight_scale_2", "F32", []
    yield f"{prefix}.input_scale", "F32", []


def expert_tensors(layer: int, expert: int, hidden: int = HIDDEN, moe_inter: int = MOE_INTER):
    for proj, (out, inp) in (
        ("gate_proj", (moe_inter, hidden)),
        ("up_proj", (moe_inter, hidden)),
        ("down_proj", (hidden, moe_inter)),
    ):
        yield from nvfp4_linear(f"model.layers.{layer}.mlp.experts.{expert}.{proj}", out, inp)


def dense_tensors(layer: int, hidden: int, experts: int):
    """What a real MoE layer holds beside its experts: NVFP4 attention and shared expert, BF16 norms and router."""
    p = f"model.layers.{layer}"
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        yield from nvfp4_linear(f"{p}.self_attn.{proj}", hidden, hidden)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        yield from nvfp4_linear(f"{p}.mlp.shared_expert.{proj}", hidden, hidden)
    yield f"{p}.mlp.gate.weight", "BF16", [experts, hidden]
    yield f"{p}.input_layernorm.weight", "BF16", [hidden]
    yield f"{p}.post_attention_layernorm.weight", "BF16", [hidden]


def build(
    root: Path,
    *,
    layers: int = LAYERS,
    experts: int = EXPERTS,
    shards: int = SHARDS,
    hidden: int = HIDDEN,
    moe_inter: int = MOE_INTER,
    dense: bool = False,
) -> int:
    """Write the synthetic under `root`. `dense` adds each layer's attention, shared expert, router and norms and the
    embeddings (a whole model rather than its experts alone)."""
    tensors: list[Tensor] = []
    for layer in range(layers):
        if dense:
            tensors += dense_tensors(layer, hidden, experts)
        tensors += [t for e in range(experts) for t in expert_tensors(layer, e, hidden, moe_inter)]
    if dense:
        tensors += [
            ("model.embed_tokens.weight", "BF16", [4096, hidden]),
            ("model.norm.weight", "BF16", [hidden]),
            ("lm_head.weight", "BF16", [4096, hidden]),
        ]
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "ignore": ["lm_head"],
            "producer": {"name": "modelopt"},
        },
    }
    return write_checkpoint(root, tensors, shards=shards, config=cfg).tensors


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
