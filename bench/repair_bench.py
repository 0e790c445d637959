"""Measure the repairs: what fix-prefix writes and how long it takes when the header fits (sparse checkpoints of
growing weight size, same headers), and the rewrite's throughput against a plain file copy when it does not.

    python bench/repair_bench.py [--workdir DIR] [--copy-gb 2] [--repeat 8] [--out bench/results/repair_bench.json]

Part 1 builds a Qwen3.5-VL-MoE-shaped checkpoint (8 shards, about 19,000 tensors, the 333-tensor vision tower
mis-nested under `model.language_model.visual.` as in the seed defect) whose data regions are sparse holes, at
three weight sizes, and runs `ckpt fix-prefix` (the finding's plan) on each in this process. Bytes written are counted
twice: by the repair's own writer, and by the kernel (`wchar` in /proc/self/io, every write system call of this
process, journal included).

Part 2 renames to a longer prefix so the header does not fit (the shard holding the tower is rebuilt through a
temporary file), on real (non-sparse) data, and times a plain copy of the same shard in the same process, in rotating
order, each started after `sync` and ending with fsync: the `copy_file_range` loop `cp` uses, and `shutil.copyfile`
(sendfile); and, as the like-for-like baseline, `cp` to a new file then `mv` over the original (replacing a file frees
the old one's blocks, which a copy that keeps both files never pays for). Medians and best runs are reported.

Part 3 measures the window during which other loaders see a mix of old and new files (the Writer's first to last visible change: from
the first change they can see to the last) in a repair that rebuilds 4 dense shards and the index, with every copy
built before the first rename against the old order (each copy renamed as soon as it is built). Part 1 records the
same window for its header-only repairs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synth import Values, write_checkpoint

from ckpt_tools.repair import fix_prefix, run

CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "num_experts": 64},
    "vision_config": {"model_type": "qwen3_5_moe", "depth": 27},
}
SHARDS = 8
LAYERS = 48
EXPERTS = 128
VISION_BLOCKS = 27  # 27 x 12 + 9 = 333 vision tensors, as in the seed checkpoint


def tensor_names() -> list[tuple[str, str, int]]:
    """(name, dtype, relative size) of every tensor; sizes are scaled to the target weight size later."""
    out: list[tuple[str, str, int]] = []
    for b in range(VISION_BLOCKS):
        p = f"model.language_model.visual.blocks.{b}"
        for m in ("attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"):
            out += [(f"{p}.{m}.weight", "BF16", 64), (f"{p}.{m}.bias", "BF16", 1)]
        out += [
            (f"{p}.norm1.weight", "BF16", 1),
            (f"{p}.norm1.bias", "BF16", 1),
            (f"{p}.norm2.weight", "BF16", 1),
            (f"{p}.norm2.bias", "BF16", 1),
        ]
    v = "model.language_model.visual"
    out += [
        (f"{v}.merger.linear_fc1.weight", "BF16", 64),
        (f"{v}.merger.linear_fc1.bias", "BF16", 1),
        (f"{v}.merger.linear_fc2.weight", "BF16", 64),
        (f"{v}.merger.linear_fc2.bias", "BF16", 1),
        (f"{v}.merger.norm.weight", "BF16", 1),
        (f"{v}.merger.norm.bias", "BF16", 1),
        (f"{v}.patch_embed.proj.weight", "BF16", 16),
        (f"{v}.patch_embed.proj.bias", "BF16", 1),
        (f"{v}.pos_embed.weight", "BF16", 16),
    ]
    for layer in range(LAYERS):
        p = f"model.language_model.layers.{layer}"
        out += [(f"{p}.input_layernorm.weight", "BF16", 1), (f"{p}.post_attention_layernorm.weight", "BF16", 1)]
        for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out.append((f"{p}.self_attn.{m}.weight", "BF16", 64))
        out.append((f"{p}.mlp.gate.weight", "BF16", 4))
        for e in range(EXPERTS):
            for m in ("gate_proj", "up_proj", "down_proj"):
                out.append((f"{p}.mlp.experts.{e}.{m}.weight", "BF16", 32))
    out += [
        ("model.language_model.embed_tokens.weight", "BF16", 512),
        ("lm_head.weight", "BF16", 512),
        ("model.language_model.norm.weight", "BF16", 1),
    ]
    return out


def make_sparse_checkpoint(folder: Path, weight_bytes: int, shards: int = SHARDS) -> dict[str, int]:
    """Shards whose data regions are holes: valid safetensors files of the requested total size that occupy almost
    no disk. Tensors are dealt to shards in name order, each shard's header laid out like the safetensors writer's
    (sorted by name), and each tensor is a 1-D BF16 vector sized in proportion to its relative size."""
    folder.mkdir(parents=True)
    names = sorted(tensor_names())
    unit = weight_bytes // sum(r for _, _, r in names) // 2 * 2
    tensors = [(name, dtype, [rel * unit // 2]) for name, dtype, rel in names]
    out = write_checkpoint(folder, tensors, shards=shards, config=CONFIG, index_indent=2, index_sort_keys=True)
    return {
        "tensors": out.tensors,
        "weight_bytes": out.data_bytes,
        "shard_header_bytes": out.header_bytes,
        "index_bytes": out.index_bytes,
    }


def wchar() -> int:
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("wchar:"))


def part1(workdir: Path) -> list[dict]:
    rows = []
    for gb in (1, 64, 4096):
        folder = workdir / f"sparse-{gb}g"
        info = make_sparse_checkpoint(folder, gb * 1024**3)
        disk = sum(os.stat(p).st_blocks * 512 for p in folder.iterdir())
        spy = WindowSpy()
        w0, t0 = wchar(), time.perf_counter()
        result = run(str(folder), fix_prefix.job(), progress=False)
        spy.journal.apply_steps = spy.real
        wall, written_kernel = time.perf_counter() - t0, wchar() - w0
        assert result.applied and "misnested-prefix" not in {f.slug for f in result.after.findings}
        meta = info["shard_header_bytes"] + info["index_bytes"]
        rows.append(
            {
                **info,
                "disk_bytes": disk,
                "steps": [s.kind for s in result.steps],
                "renamed": sum(d["count"] for d in result.plan.details["rename"]),
                "bytes_written": result.bytes_written,
                "bytes_written_kernel": written_kernel,
                "written_over_header_and_index": round(written_kernel / meta, 3),
                "written_over_shard_headers": round(written_kernel / info["shard_header_bytes"], 3),
                "repair_seconds": round(result.seconds, 4),
                "mixed_seconds": round(spy.seconds, 5),
                "command_seconds": round(wall, 3),
            }
        )
        shutil.rmtree(folder)
        print(f"part 1: {gb:>5} GiB weights: {rows[-1]}", flush=True)
    return rows


def make_dense_checkpoint(folder: Path, total_bytes: int, shards: int) -> None:
    """Like the sparse one, but every data byte is written (random), so copies move real bytes."""
    make_sparse_checkpoint(folder, total_bytes, shards)
    block = os.urandom(64 * 1024 * 1024)
    for p in sorted(folder.glob("*.safetensors")):
        with open(p, "r+b") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            size = os.fstat(fh.fileno()).st_size
            pos = 8 + n
            while pos < size:
                chunk = block[: min(len(block), size - pos)]
                os.pwrite(fh.fileno(), chunk, pos)
                pos += len(chunk)
            os.fsync(fh.fileno())


def copy_cfr(src: Path, dst: Path) -> None:
    """What `cp` does on Linux: a copy_file_range loop, then fsync (the rewrite fsyncs too)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        remaining = os.fstat(fi.fileno()).st_size
        while remaining:
            n = os.copy_file_range(fi.fileno(), fo.fileno(), min(remaining, 1 << 30))
            if n == 0:
                break
            remaining -= n
        os.fsync(fo.fileno())


def copy_shutil(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)  # sendfile on Linux
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def copy_and_replace(src: Path, dst: Path) -> None:
    """The whole-file equivalent of a rewrite done by hand: `cp` to a new file beside it, fsync, `mv` it over the
    original (whose blocks the filesystem then frees), fsync the folder. `dst` is unused: the original is
    replaced by an identical copy."""
    tmp = src.with_name(src.name + ".bench-copy")
    copy_cfr(src, tmp)
    os.replace(tmp, src)
    fd = os.open(src.parent, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def part2(workdir: Path, copy_gb: float, repeat: int) -> dict:
    """Two shards; the vision tower sits in the second, so every run rebuilds that shard. The plain copies copy
    exactly the shard(s) the rewrite rebuilds, in the same process, alternating with it."""
    folder = workdir / "dense"
    make_dense_checkpoint(folder, int(copy_gb * 1024**3), shards=2)
    prefix = "model.language_model.visual"
    copies = (
        ("copy_file_range (cp)", copy_cfr),
        ("shutil.copyfile (sendfile)", copy_shutil),
        ("cp then mv over the original", copy_and_replace),
    )
    plain: dict[str, list[float]] = {name: [] for name, _ in copies}
    rewrite: list[float] = []
    rebuilt: list[int] = []
    methods: tuple[str, ...] = ()
    for r in range(repeat):
        longer = f"model.vision_tower_{'x' * 48 * (r + 1)}"  # longer every time: the header never fits
        job = fix_prefix.job([(prefix, longer)])
        targets = [folder / s.file for s in run(str(folder), job, dry_run=True).steps if s.kind == "rewrite"]
        # Rotate the order, and start each timing with no dirty pages pending, so that no contender pays for the
        # previous one's writeback.
        order = ["rewrite", *(name for name, _ in copies)]
        order = order[r % len(order) :] + order[: r % len(order)]
        for what in order:
            os.sync()
            t0 = time.perf_counter()
            if what == "rewrite":
                result = run(str(folder), job, progress=False)
                assert [s.kind for s in result.steps] == ["rewrite"] * len(targets) + ["index"], result.steps
                rewrite.append(result.seconds)
                rebuilt.append(sum(s.bytes_to_write for s in result.steps if s.kind == "rewrite"))
                methods = result.copy_methods
                continue
            fn = dict(copies)[what]
            for p in targets:
                fn(p, workdir / p.name)
            plain[what].append(time.perf_counter() - t0)
            for p in targets:
                (workdir / p.name).unlink(missing_ok=True)
        prefix = longer
    size = statistics.median(rebuilt)
    out: dict = {
        "checkpoint_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "rebuilt_bytes_per_run": size,
        "copy_methods": list(methods),
        "repeat": repeat,
    }
    # Median and best of the runs: the machine is shared, and the best run is the least disturbed one.
    for stat in ("median", "best"):
        pick = statistics.median if stat == "median" else min
        rw = pick(rewrite)
        out[stat] = {
            "rewrite_seconds": round(rw, 3),
            "rewrite_gib_per_s": round(size / rw / 1024**3, 3),
            "plain_copy_gib_per_s": {k: round(size / pick(v) / 1024**3, 3) for k, v in plain.items()},
            "rewrite_throughput_vs_plain_copy": {k: round(pick(v) / rw, 3) for k, v in plain.items()},
        }
    shutil.rmtree(folder)
    print(f"part 2: {out}", flush=True)
    return out


class WindowSpy:
    """Keeps the Writer of the last journaled repair: from its first to its last change other loaders can see
    (`Writer.first_visible` / `last_visible`), the folder held a mix of old and new files."""

    def __init__(self) -> None:
        from ckpt_tools.repair import journal

        self.journal, self.real, self.writer = journal, journal.apply_steps, None

        def spy(folder, steps, writer, **kw):
            self.writer = writer
            return self.real(folder, steps, writer, **kw)

        journal.apply_steps = spy

    @property
    def seconds(self) -> float:
        w = self.writer
        if w is None or w.first_visible is None or w.last_visible is None:
            return 0.0  # no repair, or one that changed one file at once
        return w.last_visible - w.first_visible


def part3(workdir: Path, window_gb: float, repeat: int) -> dict:
    """The inconsistency window of a multi-file repair: a rename to a longer prefix that makes every one of 4 dense
    shards outgrow its header (4 rewrites + the index). Baseline: each copy renamed as soon as it is built (the old
    order). Measured: every copy built first, then the renames and the index back to back. Alternating runs."""
    from ckpt_tools.repair import journal

    folder = workdir / "window"
    make_dense_checkpoint(folder, int(window_gb * 1024**3), shards=4)
    spy = WindowSpy()
    prefix = "model.language_model"
    runs: dict[str, list[tuple[float, float]]] = {"copy then rename, shard by shard": [], "copies first": []}
    for r in range(2 * repeat):
        mode = "copies first" if r % 2 else "copy then rename, shard by shard"
        journal.COPIES_FIRST = mode == "copies first"
        longer = f"model.language_model_{'x' * 48 * (r + 1)}"
        os.sync()
        result = run(str(folder), fix_prefix.job([(prefix, longer)]), progress=False)
        assert [s.kind for s in result.steps] == ["rewrite"] * 4 + ["index"], [s.kind for s in result.steps]
        runs[mode].append((spy.seconds, result.seconds))
        prefix = longer
    journal.COPIES_FIRST = True
    out: dict = {
        "checkpoint_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "shards": 4,
        "repeat": repeat,
    }
    for mode, vals in runs.items():
        out[mode] = {
            "mixed_seconds_median": round(statistics.median(v[0] for v in vals), 4),
            "mixed_seconds_best": round(min(v[0] for v in vals), 4),
            "repair_seconds_median": round(statistics.median(v[1] for v in vals), 3),
        }
    base, new = (out[m]["mixed_seconds_median"] for m in runs)
    out["window_ratio_copies_first_vs_baseline"] = round(new / base, 5) if base else None
    shutil.rmtree(folder)
    print(f"part 3: {out}", flush=True)


# ---- seed size: issue 11's fix-prefix target ------------------------------------------------------------------------

SEED_LAYERS, SEED_EXPERTS, SEED_SHARDS = 40, 256, 5  # Qwen3.6-35B-A3B NVFP4: 40 layers x 256 experts, 5 shards
SEED_CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": SEED_LAYERS,
        "num_experts": SEED_EXPERTS,
        "max_position_embeddings": 262144,
    },
    "vision_config": {"model_type": "qwen3_5_moe", "depth": VISION_BLOCKS},
    "quantization_config": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "exclude_modules": ["lm_head", "model.visual*", "*mlp.gate", "*self_attn*"],
    },
}


def seed_tensors() -> list[tuple[str, str, list[int]]]:
    """A ModelOpt NVFP4 export of the seed model's shape (~124k tensors), the vision tower mis-nested."""
    out = [(name, dtype, [rel * 64]) for name, dtype, rel in tensor_names() if ".visual." in name]
    for layer in range(SEED_LAYERS):
        p = f"model.language_model.layers.{layer}"
        out += [
            (f"{p}.input_layernorm.weight", "BF16", [2048]),
            (f"{p}.post_attention_layernorm.weight", "BF16", [2048]),
        ]
        out += [(f"{p}.self_attn.{m}.weight", "BF16", [2048, 2048]) for m in ("q_proj", "k_proj", "v_proj", "o_proj")]
        out.append((f"{p}.mlp.gate.weight", "BF16", [SEED_EXPERTS, 2048]))
        for e in range(SEED_EXPERTS):
            for m, (rows, cols) in (("gate_proj", (512, 2048)), ("up_proj", (512, 2048)), ("down_proj", (2048, 512))):
                q = f"{p}.mlp.experts.{e}.{m}"
                out += [
                    (f"{q}.weight", "U8", [rows, cols // 2]),
                    (f"{q}.weight_scale", "F8_E4M3", [rows, cols // 16]),
                    (f"{q}.weight_scale_2", "F32", []),
                    (f"{q}.input_scale", "F32", []),
                ]
    out += [
        ("model.language_model.embed_tokens.weight", "BF16", [248320, 2048]),
        ("lm_head.weight", "BF16", [248320, 2048]),
        ("model.language_model.norm.weight", "BF16", [2048]),
    ]
    return out


def make_seed_checkpoint(folder: Path, values: Values | None = None) -> dict[str, int]:
    """The seed-size mis-nested export; `values` as in `synth.write_shard` (default: every data byte a hole)."""
    folder.mkdir(parents=True)
    out = write_checkpoint(
        folder,
        sorted(seed_tensors()),
        shards=SEED_SHARDS,
        config=SEED_CONFIG,
        index_indent=2,
        index_sort_keys=True,
        values=values,
    )
    return {"tensors": out.tensors, "shards": SEED_SHARDS, "weight_bytes": out.data_bytes}


def timed_process(argv: list[str]) -> tuple[float, int, float]:
    """(wall seconds, exit code, CPU seconds: user + system) of one child process. CPU time is reported beside wall
    time because a shared machine's load inflates wall time without changing the work."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, proc.returncode, cpu


def seed(workdir: Path, repeat: int) -> dict:
    """`ckpt fix-prefix` end to end (a fresh process, as a user runs it) on the seed-size checkpoint, against
    `ckpt doctor --headers-only` on the same checkpoint in the same command. The checkpoint is rebuilt before each
    repair (the repair changes it). ru_maxrss of children is the peak over all children so far, so each contender's
    RSS is measured in its own helper process."""
    ckpt = [sys.executable, "-m", "ckpt_tools.cli.main"]
    rows: dict[str, list[float]] = {"doctor --headers-only": [], "fix-prefix --headers-only": [], "fix-prefix": []}
    cpus: dict[str, list[float]] = {what: [] for what in rows}
    rss: dict[str, int] = {}
    info: dict = {}
    for _ in range(repeat):
        for what in rows:
            folder = workdir / "seed"
            if folder.exists():
                shutil.rmtree(folder)
            info = make_seed_checkpoint(folder)
            cmd, *opts = what.split()
            wall, code, cpu = timed_process([*ckpt, cmd, str(folder), *opts])
            assert code in (0, 1), (what, code)
            rows[what].append(wall)
            cpus[what].append(cpu)
            probe = [
                sys.executable,
                "-c",
                "import resource, subprocess, sys; subprocess.run(sys.argv[1:], "
                "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
            ]
            if what not in rss:
                shutil.rmtree(folder)
                make_seed_checkpoint(folder)
                import subprocess

                rss[what] = int(
                    subprocess.run(
                        [*probe, *ckpt, cmd, str(folder), *opts], capture_output=True, text=True
                    ).stdout.strip()
                    or 0
                )
    base = statistics.median(rows["doctor --headers-only"])
    base_cpu = statistics.median(cpus["doctor --headers-only"])
    out = {**info, "repeat": repeat, "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    for what, times in rows.items():
        out[what] = {
            "median_seconds": round(statistics.median(times), 3),
            "best_seconds": round(min(times), 3),
            "vs_doctor_headers_only": round(statistics.median(times) / base, 3),
            "cpu_seconds": round(statistics.median(cpus[what]), 3),
            "cpu_vs_doctor_headers_only": round(statistics.median(cpus[what]) / base_cpu, 3),
            "peak_rss_mib": round(rss.get(what, 0) / 1024, 1),
        }
    print(f"seed size: {out}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-size", action="store_true", help="Only the seed-size fix-prefix timing (issue 11).")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--copy-gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--window-gb", type=float, default=2.0)
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (comma-separated)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "repair_bench.json")
    args = ap.parse_args()
    os.environ["CKPT_NO_PROGRESS"] = "1"
    parts = set(args.parts.split(","))
    results = json.loads(args.out.read_text()) if args.out.exists() else {}  # parts not run keep their numbers
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        if args.seed_size:
            out = args.out.with_name("repair_bench_seed.json") if args.out.name == "repair_bench.json" else args.out
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(
                json.dumps(
                    {"seed_size_fix_prefix": seed(work, max(1, min(args.repeat, 3))), "python": sys.version.split()[0]},
                    indent=2,
                )
                + "\n"
            )
            print(f"wrote {out}")
            return
        if "1" in parts:
            results["part1_header_fits"] = part1(work)
        if "2" in parts:
            results["part2_rewrite"] = part2(work, args.copy_gb, args.repeat)
        if "3" in parts:
            results["part3_mixed_window"] = part3(work, args.window_gb, max(args.repeat // 2, 2))
        results.update({"python": sys.version.split()[0], "kernel": os.uname().release})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
