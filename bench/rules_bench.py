"""Rule-catalogue benchmark: what the rules cost on top of reading and resolving a big checkpoint.

Uses header_bench's 160-shard, ~190k-tensor NVFP4 MoE checkpoint (sparse files). The baseline, measured in the same
process, is loading the headers plus vLLM-semantics detection (what every rule needs before it runs); each rule's
`check` is reported as a ratio of it, best of `--repeat` runs. Usage:

    python bench/rules_bench.py [--dir /tmp/ckpt-bench-headers] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from header_bench import build, timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/ckpt-bench-headers")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(args.dir)
    if not (root / "config.json").exists():
        print(f"built {build(root):,} tensors under {root}")
    from ckpt_tools.detect.resolve import detect
    from ckpt_tools.knowledge.hardware import profiles as hardware_profiles
    from ckpt_tools.read import open_source
    from ckpt_tools.read.loader import load_checkpoint
    from ckpt_tools.rules.base import Context, all_rules

    def baseline():
        ckpt = load_checkpoint(open_source(str(root)))
        return ckpt, detect(ckpt)

    base = timed(baseline, args.repeat)
    ckpt, det = baseline()
    rows = []
    for rule in all_rules():
        # A fresh context per run: rules that share a computation (per-expert gaps, misplaced names) would
        # otherwise reuse it across runs and look cheaper than they are.
        cost = timed(
            lambda rule=rule: list(
                rule().check(Context(ckpt=ckpt, det=det, hardware=hardware_profiles(), target=str(root)))
            ),
            args.repeat,
        )
        rows.append((rule.code, rule.slug, cost))
    total = sum(c for _, _, c in rows)
    print(f"{len(ckpt.tensors):,} tensors; baseline load + detect {base * 1000:.0f} ms = 1.00x")
    for code, slug, cost in sorted(rows, key=lambda r: -r[2])[:10]:
        print(f"  {code} {slug:<28} {cost * 1000:7.1f} ms  {cost / base:.3f}x")
    print(f"all {len(rows)} rules (each run alone)  {total * 1000:7.1f} ms  {total / base:.2f}x baseline")


if __name__ == "__main__":
    os.environ.setdefault("CKPT_NO_PROGRESS", "1")
    main()
