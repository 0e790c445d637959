"""Benchmark: `ckpt doctor org/name` on a 100-shard repo served on loopback, cold and cached.

The repo is the genuine llm-compressor NVFP4 Qwen3-MoE fixture scaled up to 100 layers of 64 experts, one layer per
shard (about 100 KB of header per shard: the size real MoE shards have). The fake Hub of the test suite serves it on
127.0.0.1 from its own process, optionally waiting a round-trip time before each reply. The client side runs in this
process with the real huggingface_hub client, and every number is measured in the same run:

- baseline: huggingface_hub's own `get_safetensors_metadata` (index, then a 100 KB range per shard), cold cache;
- read cold / cached: `load_checkpoint(open_source(repo))`, the Hub part (configs, index, every header, parsed),
  with an empty ckpt cache, then again;
- doctor cold / cached: the whole `analyze(repo)`, whose rules cost the same as for a local copy (shown too).

Requests and bytes come from the server's log (bytes = response bodies), seconds are the median of --repeat runs.
Usage: python bench/hub_bench.py [--shards 100] [--experts 64] [--rtt-ms 0 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.corrupt import GENUINE  # noqa: E402
from tests.hub_repos import header_lengths, scale_moe_fixture  # noqa: E402

REPO = "bench/moe-100"
SOURCE = "llmc-qwen3moe-nvfp4-sharded"


class Server:
    """The test suite's fake Hub in its own process (so that it does not share this process's GIL), driven over
    its bookkeeping endpoints."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fake_hub", str(root)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()

    def get(self, path: str):
        with urllib.request.urlopen(f"{self.url}{path}") as response:
            return json.loads(response.read() or b"null") if path.startswith("/__stats") else None

    def log_size(self) -> int:
        return self.get("/__stats?since=999999999")[-1]["log_size"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def measure(srv: Server, run: Callable[[], object], reset: Callable[[], None], repeat: int) -> dict:
    seconds, requests, body = [], 0, 0
    for _ in range(repeat):
        reset()
        start = srv.log_size()
        t0 = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - t0)
        log = srv.get(f"/__stats?since={start}")[:-1]
        requests, body = len(log), sum(r["bytes"] for r in log)
    return {"requests": requests, "bytes": body, "seconds": statistics.median(seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "hub_bench.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp) / "hub", Path(tmp) / "hf"
        folder = scale_moe_fixture(GENUINE / SOURCE, root / REPO, [1] * args.shards, args.experts)
        headers = header_lengths(folder)
        repo_bytes = sum(f.stat().st_size for f in folder.iterdir())
        index_bytes = (folder / "model.safetensors.index.json").stat().st_size
        srv = Server(root)
        try:
            # huggingface_hub reads these at import time.
            os.environ.update(
                HF_ENDPOINT=srv.url,
                HF_HOME=str(home),
                HF_HUB_DISABLE_TELEMETRY="1",
                HF_HUB_DISABLE_PROGRESS_BARS="1",
                CKPT_NO_PROGRESS="1",
                NO_PROXY="127.0.0.1,localhost",
            )
            for key in ("HF_TOKEN", "HF_HUB_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                os.environ.pop(key, None)
            from huggingface_hub import get_safetensors_metadata

            from ckpt_tools.pipeline import analyze
            from ckpt_tools.read import open_source
            from ckpt_tools.read.loader import load_checkpoint

            def clear(*parts: str) -> Callable[[], None]:
                return lambda: [shutil.rmtree(home.joinpath(p), ignore_errors=True) for p in parts]

            def read(target: str) -> Callable[[], object]:
                return lambda: load_checkpoint(open_source(target))

            local = {
                "read": _median(read(str(folder)), args.repeat),
                "doctor": _median(lambda: analyze(str(folder), headers_only=True), args.repeat),
            }
            results = []
            for rtt in args.rtt_ms:
                urllib.request.urlopen(f"{srv.url}/__config?delay_ms={rtt}").read()
                row: dict = {"rtt_ms": rtt}
                row["baseline"] = measure(srv, lambda: get_safetensors_metadata(REPO), clear("hub"), args.repeat)
                row["read cold"] = measure(srv, read(REPO), clear("assets"), args.repeat)
                row["read cached"] = measure(srv, read(REPO), lambda: None, args.repeat)
                row["doctor cold"] = measure(srv, lambda: analyze(REPO), clear("assets"), args.repeat)
                row["doctor cached"] = measure(srv, lambda: analyze(REPO), lambda: None, args.repeat)
                results.append(row)
        finally:
            srv.close()

    header_total = sum(headers.values())
    print(
        f"repo: {args.shards} shards, {args.experts} experts/layer, {repo_bytes:,} bytes; headers "
        f"{header_total:,} bytes ({header_total // len(headers):,} per shard); index {index_bytes:,} bytes"
    )
    print(f"local: read {local['read']:.3f} s, doctor --headers-only {local['doctor']:.3f} s")
    print(f"{'rtt':>6}  {'run':<14} {'requests':>8} {'bytes':>12} {'x(headers+index)':>16} {'seconds':>8}")
    for row in results:
        for name in ("baseline", "read cold", "read cached", "doctor cold", "doctor cached"):
            m = row[name]
            print(
                f"{row['rtt_ms']:>4.0f}ms  {name:<14} {m['requests']:>8} {m['bytes']:>12,} "
                f"{m['bytes'] / (header_total + index_bytes):>16.2f} {m['seconds']:>8.3f}"
            )
        cold, cached, base = row["read cold"], row["read cached"], row["baseline"]
        print(
            f"        read cached/cold seconds {cached['seconds'] / cold['seconds']:.3f}; read cold/baseline: "
            f"seconds {cold['seconds'] / base['seconds']:.2f}, bytes {cold['bytes'] / base['bytes']:.2f}, "
            f"requests {cold['requests'] / base['requests']:.2f}; doctor cached/cold seconds "
            f"{row['doctor cached']['seconds'] / row['doctor cold']['seconds']:.3f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "shards": args.shards,
                "experts": args.experts,
                "header_bytes": header_total,
                "index_bytes": index_bytes,
                "repo_bytes": repo_bytes,
                "local_seconds": local,
                "results": results,
            },
            indent=2,
        )
    )


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


if __name__ == "__main__":
    main()
