"""The sanity table of docs/plan.md: `ckpt plan` for the seed model (AEON-7 Qwen3.6-35B-A3B NVFP4) on GB10.

Builds the seed-size header set of tests/memory_models.py (sparse shards, ~22 GB of tensor data that take no disk
space), plans it at --kv-cache-dtype auto / fp8 / nvfp4, and prints a Markdown table: weights, KV bytes per token,
state per sequence, the largest context at 1 / 8 / 32 sequences, and vLLM's "KV cache size" at 8k context. Usage:

    python bench/seed_plan.py [--dir /tmp/ckpt-seed] [--gpu-memory-utilization 0.85]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ckpt_tools.pipeline import analyze  # noqa: E402
from ckpt_tools.plan import Settings, plan_for  # noqa: E402
from ckpt_tools.plan.render import size  # noqa: E402
from tests.memory_models import qwen36_35b_a3b_nvfp4  # noqa: E402


def rows(folder: Path, util: float | None) -> list[str]:
    analysis = analyze(str(folder), headers_only=True)
    out = [
        "| KV dtype | weights | KV per token | state per sequence | max context, 1 seq | 8 seqs | 32 seqs | "
        "KV cache size at 8k (concurrency) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kv in ("auto", "fp8", "nvfp4"):
        p = plan_for(analysis, Settings(hardware="gb10", kv_cache_dtype=kv, gpu_memory_utilization=util))
        at = dict(p.answers.context_at_seqs)
        short = plan_for(
            analysis, Settings(hardware="gb10", kv_cache_dtype=kv, gpu_memory_utilization=util, max_model_len=8192)
        )
        out.append(
            f"| {p.cache.kv_dtype} | {size(p.weights.bytes)} | {p.token_bytes_per_device:,} B | "
            f"{size(p.state_bytes_per_device)} | {at[1]:,} | {at[8]:,} | {at[32]:,} | "
            f"{short.answers.kv_cache_tokens:,} ({short.answers.max_concurrency:.1f}x) |"
        )
    # The settings of the image README's "KV cache capacity by body" measurement (Qwen3.6 benchmarks section): 0.78,
    # 8k, 8 sequences, prefix caching, BF16 KV, a DFlash drafter at 4 speculative tokens (its weights and layers
    # are not in the header set); then what the same pool would give at 15 speculative tokens.
    out.append("")
    for spec in (0, 4, 15):
        bench = plan_for(
            analysis,
            Settings(
                hardware="gb10",
                gpu_memory_utilization=0.78,
                max_model_len=8192,
                max_num_seqs=8,
                prefix_caching=True,
                num_speculative_tokens=spec,
            ),
        )
        p, a = bench.pages, bench.answers
        out.append(
            f"- 0.78, 8k, prefix caching, {spec} speculative tokens: KV budget {size(bench.kv_budget_bytes)}, "
            f"{bench.kv_budget_bytes // p.block_bytes:,} blocks of {p.block_bytes:,} B, "
            f"{p.request_blocks(8192)} blocks per request, KV cache size {a.kv_cache_tokens:,} tokens "
            f"({a.max_concurrency:.1f}x)"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, help="where to write the header set (default: a temporary folder)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-seed-") as tmp:
        folder = args.dir or Path(tmp) / "seed"
        total = qwen36_35b_a3b_nvfp4(folder)
        print(f"seed header set: {total:,} bytes of tensor data in {folder}")
        print("\n".join(rows(folder, args.gpu_memory_utilization)))


if __name__ == "__main__":
    main()
