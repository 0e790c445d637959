"""Value-scan benchmark: memory of a default `ckpt doctor` on a DeepSeek-V3-size NVFP4 MoE checkpoint, and the cold-
cache speed of the streaming value scan against a plain chunked read of the same byte ranges.

    python bench/value_scan_bench.py [--dir bench/out/value-scan] [--real-layers 7] [--skip-sparse] [--keep]
    python bench/value_scan_bench.py --skip-sparse --skip-real --broken-layers 2    # (c) only

(a) sparse: 163 shards, 61 layers x 256 experts x 3 projections (187k tensors), NVFP4 with F8_E4M3 block scales:
    ~43 GB of scales and ~344 GB of packed weights, all holes (real headers, `truncate` for the data). A default
    `ckpt doctor` runs as a child process; its peak RSS comes from `os.wait4` (that child's own rusage), beside
    `doctor --headers-only` for reference. Reading holes costs no disk, so this measures memory, not speed.
(b) real: the same layout with `--real-layers` layers (7: ~4.9 GB of scales in 8 shards) whose scale bytes are
    written (random positive normal E4M3 codes; F32 global scales), weights left as holes. Tensors are laid out as
    the safetensors writer orders them (dtype, then name), so each shard's block scales are one region. Then, each
    run from a cold cache: a plain chunked read (`os.pread` of the ranges the scanner plans, in chunks of the same
    size, nothing else), and the value scan (`read.value_scan.scan_values`) with 1 and 2 workers, and with 2 workers
    reading through mappings as the forked scan process of a command does; bytes fetched from storage from
    /proc/self/io `read_bytes`, and the scanner's own counter.

Cold cache: before every run the page cache is dropped with `sync; echo 3 > /proc/sys/vm/drop_caches` when that
works (root), and in every case each shard gets `fsync` + `posix_fadvise(POSIX_FADV_DONTNEED)`; the table says which
method ran, and `read_bytes` in each row shows the bytes came from storage. Files are deleted at the end unless
`--keep`. Numbers vary with the machine's load: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ckpt_tools.write.header import encode_header  # noqa: E402

LAYERS, EXPERTS, SHARDS = 61, 256, 163
HIDDEN, MOE_INTER = 7168, 2048
DTYPE_ORDER = {"F32": 0, "F8_E4M3": 1, "U8": 2}  # the safetensors writer: larger dtypes first, then by name
ITEM = {"F32": 4, "F8_E4M3": 1, "U8": 1}
CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "quantization_config": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "ignore": ["lm_head"],
        "producer": {"name": "modelopt"},
    },
}


def expert_tensors(layer: int, expert: int):
    for proj, (out, inp) in (
        ("gate_proj", (MOE_INTER, HIDDEN)),
        ("up_proj", (MOE_INTER, HIDDEN)),
        ("down_proj", (HIDDEN, MOE_INTER)),
    ):
        p = f"model.layers.{layer}.mlp.experts.{expert}.{proj}"
        yield f"{p}.weight", "U8", [out, inp // 2]
        yield f"{p}.weight_scale", "F8_E4M3", [out, inp // 16]
        yield f"{p}.weight_scale_2", "F32", []
        yield f"{p}.input_scale", "F32", []


def nbytes(dtype: str, shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * ITEM[dtype]


SCALE_BLOCK = bytes(0x30 + b % 0x4E for b in os.urandom(1 << 22))  # positive normal E4M3 codes, 0x30..0x7D
# A badly broken checkpoint (issue 27 item 11): every scale byte random, so NaN (0x7F / 0xFF), negative and zero
# codes everywhere, in every block-scale tensor.
BROKEN_BLOCK = os.urandom(1 << 22)
GLOBAL = struct.pack("<f", 3.5e-4)


def build(root: Path, layers: int, shards: int, *, real: bool, broken: bool = False) -> tuple[int, int]:
    """Write the checkpoint; (tensors, scale bytes). `broken`: random bytes in the block scales."""
    block = BROKEN_BLOCK if broken else SCALE_BLOCK
    root.mkdir(parents=True, exist_ok=True)
    tensors = [t for layer in range(layers) for e in range(EXPERTS) for t in expert_tensors(layer, e)]
    per = -(-len(tensors) // shards)
    weight_map, scale_total = {}, 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = sorted(tensors[s * per : (s + 1) * per], key=lambda t: (DTYPE_ORDER[t[1]], t[0]))
        entries, offset, spans = {}, 0, []
        for tname, dtype, shape in part:
            n = nbytes(dtype, shape)
            entries[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            if dtype != "U8":
                spans.append((dtype, offset, n))
                scale_total += n
            offset += n
            weight_map[tname] = name
        header = encode_header(entries, {"format": "pt"})
        start = 8 + len(header)
        with open(root / name, "wb") as fh:
            fh.write(struct.pack("<Q", len(header)) + header)
            if real:
                for dtype, off, n in spans:
                    fh.seek(start + off)
                    if dtype == "F32":
                        fh.write(GLOBAL)
                        continue
                    while n:
                        piece = block[: min(n, len(block))]
                        fh.write(piece)
                        n -= len(piece)
            fh.truncate(start + offset)  # the weights (and, when not real, everything) stay holes
            if real:
                fh.flush()
                os.fsync(fh.fileno())
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps(CONFIG))
    return len(tensors), scale_total


def child(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, exit code) of one child process, from its own rusage."""
    wall, usage, code = _child_usage(argv)
    return wall, usage.ru_maxrss * 1024, code


def _child_usage(argv: list[str]) -> tuple[float, Any, int]:
    """(wall seconds, rusage, exit code) of one child process; the rusage includes its own reaped children (the
    forked value scan)."""
    env = {**os.environ, "CKPT_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage, proc.returncode


def drop_cache(root: Path) -> str:
    for p in root.glob("*.safetensors"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return "drop_caches + fadvise"
    except OSError:
        return "fadvise DONTNEED"


def read_bytes() -> int:
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("read_bytes:"))


def plans_for(root: Path):
    from ckpt_tools.pipeline import value_rules, wanted_values
    from ckpt_tools.read import open_source
    from ckpt_tools.read.loader import load_checkpoint
    from ckpt_tools.read.value_scan import CHUNK, LOCAL_GAP, plan_shard

    source = open_source(str(root))
    ckpt = load_checkpoint(source)
    wanted_fn = wanted_values(value_rules(())[0])
    wanted = [t for t in ckpt.tensors.values() if wanted_fn(t)]
    shards = {s.name: s for s in ckpt.shards}
    by: dict[str, list] = {}
    for t in wanted:
        by.setdefault(t.shard, []).append(t)
    plans = [plan_shard(shards[n], ts, chunk=CHUNK, gap=LOCAL_GAP) for n, ts in by.items()]
    return source, shards, wanted, plans


def plain_read(root: Path, plans) -> int:
    """The baseline: read exactly the planned byte ranges with os.pread, in chunks, and nothing else."""
    total = 0
    for plan in plans:
        fd = os.open(root / plan.shard, os.O_RDONLY)
        try:
            for read in plan.reads:
                total += len(os.pread(fd, read.length, read.start))
        finally:
            os.close(fd)
    return total


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def sparse_section(base: Path) -> list[str]:
    root = base / "sparse-163"
    if not (root / "config.json").exists():
        t0 = time.perf_counter()
        count, scales = build(root, LAYERS, SHARDS, real=False)
        print(
            f"built {count:,} tensors, {scales / 1e9:.1f} GB of scales (holes) in {SHARDS} shards "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    cli = [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(root), "--format", "json"]
    head_wall, head_rss, _ = child([*cli, "--headers-only"])
    full_wall, full_rss, _ = child(cli)
    scales = sum(
        nbytes(d, s)
        for layer in range(LAYERS)
        for e in range(EXPERTS)
        for _, d, s in expert_tensors(layer, e)
        if d != "U8"
    )
    return [
        f"(a) {SHARDS} shards, {LAYERS * EXPERTS * 12:,} tensors, {scales / 1e9:.1f} GB of scales (sparse holes)",
        "| run | wall | peak RSS |",
        "|---|---|---|",
        f"| `ckpt doctor --headers-only` | {head_wall:.1f} s | {mib(head_rss)} |",
        f"| `ckpt doctor` (value scan of every scale byte) | {full_wall:.1f} s | {mib(full_rss)} |",
    ]


def real_section(base: Path, layers: int) -> list[str]:
    from ckpt_tools.read.value_scan import CHUNK, ScanCounters, scan_values

    shards = max(1, round(SHARDS * layers / LAYERS))
    root = base / f"real-{layers}"
    if not (root / "config.json").exists():
        t0 = time.perf_counter()
        count, scales = build(root, layers, shards, real=True)
        print(
            f"wrote {scales / 1e9:.2f} GB of real scale bytes, {count:,} tensors, {shards} shards "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    source, shard_map, wanted, plans = plans_for(root)
    scale_bytes = sum(t.nbytes for t in wanted)
    rows = []
    method = ""

    def run(label: str, fn) -> float:
        nonlocal method
        method = drop_cache(root)
        before = read_bytes()
        t0 = time.perf_counter()
        got = fn()
        wall = time.perf_counter() - t0
        rows.append((label, wall, read_bytes() - before, got))
        return wall

    for _ in range(2):  # alternate, so drift in the machine's load hits both sides
        run("plain chunked read (baseline)", lambda: plain_read(root, plans))
        for workers, mapped in ((1, False), (2, False), (2, True)):

            def scan(workers: int = workers, mapped: bool = mapped) -> int:
                counters = ScanCounters()
                scan_values(
                    source, wanted, shard_map, workers=workers, counters=counters, progress=False, mapped=mapped
                )
                return counters.bytes_read

            how = ", mapped reads (as in the forked scan process)" if mapped else ""
            run(f"value scan, {workers} worker(s){how}", scan)
    best: dict[str, tuple[float, int, int]] = {}
    for label, wall, disk, got in rows:
        if label not in best or wall < best[label][0]:
            best[label] = (wall, disk, got)
    base_wall = best["plain chunked read (baseline)"][0]
    out = [
        f"(b) {shards} shards, {scale_bytes / 1e9:.2f} GB of real scale bytes, cold cache ({method}), "
        f"chunk {CHUNK // 2**20} MiB, best of 2",
        "| run | wall | vs baseline | GB/s | read from storage | vs scale bytes | requested |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, (wall, disk, got) in best.items():
        out.append(
            f"| {label} | {wall:.2f} s | {wall / base_wall:.2f}x | {scale_bytes / wall / 1e9:.2f} | "
            f"{disk / 1e9:.2f} GB | {disk / scale_bytes:.3f}x | {got / scale_bytes:.3f}x |"
        )
    drop_cache(root)
    cli = [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(root), "--format", "json"]
    wall, rss, _ = child(cli)
    out.append(
        f"| `ckpt doctor` on it (cold, whole process) | {wall:.2f} s | | {scale_bytes / wall / 1e9:.2f} | | | "
        f"peak RSS {mib(rss)} |"
    )
    return out


def broken_section(base: Path, layers: int) -> list[str]:
    """(c) issue 27 item 11: the same layout twice, clean scales and random bytes in every block scale (NaN, negative
    and zero codes everywhere). Best of 3, alternating: a plain chunked read of the broken checkpoint's planned
    ranges, then `ckpt doctor` (a child process: wall, CPU seconds and peak RSS from its rusage) on each, from a cold
    cache; then the two doctors again on a warm cache, where only CPU is measured (a shared machine's disk and load
    move the cold walls by 2x between runs; the CPU seconds and the warm rows hold still)."""
    shards = max(1, round(SHARDS * layers / LAYERS))
    roots = {kind: base / f"{kind}-{layers}" for kind in ("clean", "broken")}
    for kind, root in roots.items():
        if not (root / "config.json").exists():
            build(root, layers, shards, real=True, broken=kind == "broken")
    _source, _shards, wanted, plans = plans_for(roots["broken"])
    scale_bytes = sum(t.nbytes for t in wanted)
    plain = "plain chunked read of the broken checkpoint's scale ranges"
    best: dict[str, tuple[float, float, int]] = {}

    def keep(label: str, wall: float, cpu: float, rss: int) -> None:
        if label not in best or wall < best[label][0]:
            best[label] = (wall, cpu, rss)

    def doctor(kind: str, cache: str) -> None:
        argv = [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(roots[kind]), "--format", "json"]
        wall, usage, _ = _child_usage(argv)
        keep(f"`ckpt doctor`, {kind} scales, {cache} cache", wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)

    for _ in range(3):
        drop_cache(roots["broken"])
        t0, c0 = time.perf_counter(), time.process_time()
        plain_read(roots["broken"], plans)
        keep(plain, time.perf_counter() - t0, time.process_time() - c0, 0)
        for kind in roots:
            drop_cache(roots[kind])
            doctor(kind, "cold")
    for _ in range(3):
        for kind in roots:
            doctor(kind, "warm")
    base_wall = best[plain][0]
    out = [
        f"(c) {shards} shards, {scale_bytes / 1e9:.2f} GB of scales, clean vs random bytes in every block scale, "
        "best of 3",
        "| run | wall | vs plain read | CPU s | peak RSS |",
        "|---|---|---|---|---|",
    ]
    for label, (wall, cpu, rss) in best.items():
        out.append(
            f"| {label} | {wall:.2f} s | {wall / base_wall:.2f}x | {cpu:.2f} | {mib(rss * 1024) if rss else ''} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench" / "out" / "value-scan"))
    ap.add_argument("--real-layers", type=int, default=7)
    ap.add_argument("--skip-sparse", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--broken-layers", type=int, default=0, help="(c): clean vs broken scales, this many layers")
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    args = ap.parse_args()
    base = Path(args.dir)
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    ]
    try:
        if not args.skip_sparse:
            lines += ["", *sparse_section(base)]
        if not args.skip_real:
            lines += ["", *real_section(base, args.real_layers)]
        if args.broken_layers:
            lines += ["", *broken_section(base, args.broken_layers)]
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("CKPT_NO_PROGRESS", "1")
    main()
