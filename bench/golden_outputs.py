"""Every bundled fixture through every judging command, written to one folder, to prove a refactor changed no output.

    python bench/golden_outputs.py OUT_DIR            # this checkout's outputs
    python bench/golden_outputs.py OUT_DIR --rev REV  # the outputs of git revision REV (a temporary worktree)
    diff -r BEFORE AFTER                              # or: python bench/golden_outputs.py --compare BEFORE AFTER

Each command runs as a user runs it (a subprocess of `python -m ckpt_tools.cli.main`, no colour, no progress), and
its stdout, stderr and exit code are stored under OUT_DIR/<fixture>/<command>.txt.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "doctor": ["doctor", "{t}"],
    "doctor.json": ["doctor", "{t}", "--format", "json"],
    "doctor-headers.json": ["doctor", "{t}", "--headers-only", "--format", "json"],
    "doctor.sarif": ["doctor", "{t}", "--format", "sarif"],
    "inspect": ["inspect", "{t}"],
    "inspect.json": ["inspect", "{t}", "--format", "json"],
    "serve-flags.json": ["serve-flags", "{t}", "--format", "json"],
    "serve-flags-gb10": ["serve-flags", "{t}", "--hardware", "gb10"],
    "plan": ["plan", "{t}", "--hardware", "gb10"],
}


def fixtures(tree: Path) -> list[Path]:
    return sorted(p for group in ("genuine", "defective") for p in (tree / "fixtures" / group).iterdir() if p.is_dir())


def run_one(tree: Path, fixture: Path, name: str, argv: list[str], out: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1", "CKPT_NO_PROGRESS": "1", "COLUMNS": "120", "PYTHONPATH": str(tree)}
    rel = fixture.relative_to(tree)
    args = [a.replace("{t}", str(rel)) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    dest = out / fixture.parent.name / fixture.name / f"{name}.txt"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(
        f"$ ckpt {' '.join(args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
    )


def snapshot(tree: Path, out: Path, jobs: int) -> None:
    work = [(f, name, argv) for f in fixtures(tree) for name, argv in COMMANDS.items()]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda w: run_one(tree, *w, out), work))
    print(f"{len(work)} outputs of {tree} in {out}")


def compare(before: Path, after: Path) -> int:
    names = sorted(
        {p.relative_to(before) for p in before.rglob("*.txt")} | {p.relative_to(after) for p in after.rglob("*.txt")}
    )
    differ = [
        n
        for n in names
        if not (before / n).is_file()
        or not (after / n).is_file()
        or (before / n).read_bytes() != (after / n).read_bytes()
    ]
    for n in differ:
        print(f"differs: {n}")
    print(f"{len(differ)} of {len(names)} differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--rev", help="snapshot this git revision instead of the checkout")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("OUT_DIR is required")
    if not args.rev:
        snapshot(ROOT, args.out.resolve(), args.jobs)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.rev],
            check=True,
            capture_output=True,
        )
        try:
            snapshot(tree, args.out.resolve(), args.jobs)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
