"""The README's console examples are the tool's real output: run them, compare them, or write them back.

A console example is a ```console block right after a `<!-- example -->` line. Each `$ ` line is a command; the lines
up to the next command are what it prints (stdout and stderr as a terminal shows them, interleaved). Commands run in
a scratch folder holding a fresh copy of `fixtures/` (so a repair example cannot change the repository), with `ckpt`
on PATH running this tree's code, colours off and an 100-column terminal.

    python tools/readme_examples.py            # compare: exit 1 and a diff per example that drifted
    python tools/readme_examples.py --write    # write every example's real output back into the file

tests/meta/test_readme.py runs the comparison, so an output change fails the tests until the README is refreshed.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = "<!-- example -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```console\n(.*?)```\n", re.S)
TERMINAL = {"NO_COLOR": "1", "COLUMNS": "100", "LINES": "50", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class Example:
    """One console block: its span in the file, and (command, printed lines) per `$ ` line."""

    start: int
    end: int
    steps: tuple[tuple[str, str], ...]

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(command for command, _ in self.steps)

    def text(self, outputs: tuple[str, ...] | None = None) -> str:
        """The block's body with these outputs (default: the ones printed in the file)."""
        printed = outputs if outputs is not None else tuple(out for _, out in self.steps)
        return "".join(f"$ {command}\n{out}" for command, out in zip(self.commands, printed, strict=True))


def examples(text: str) -> list[Example]:
    found = []
    for match in BLOCK.finditer(text):
        steps: list[tuple[str, list[str]]] = []
        for line in match.group(1).splitlines(keepends=True):
            if line.startswith("$ "):
                steps.append((line[2:].rstrip("\n"), []))
            elif steps:
                steps[-1][1].append(line)
            else:
                raise ValueError(f"a console example must start with a `$ ` command: {line!r}")
        found.append(Example(match.start(1), match.end(1), tuple((c, "".join(out)) for c, out in steps)))
    return found


def run(example: Example) -> tuple[str, ...]:
    """What each command of `example` prints, run one after the other in one scratch folder."""
    with tempfile.TemporaryDirectory(prefix="ckpt-readme-") as scratch:
        shutil.copytree(ROOT / "fixtures", Path(scratch) / "fixtures", symlinks=True)
        bin_dir = Path(scratch) / ".bin"
        bin_dir.mkdir()
        launcher = bin_dir / "ckpt"
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ckpt_tools.cli.main "$@"\n')
        launcher.chmod(0o755)
        env = {
            **os.environ,
            **TERMINAL,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
        }
        outputs = []
        for command in example.commands:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=scratch,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=300,
            )
            out = proc.stdout
            outputs.append(out if out.endswith("\n") or not out else out + "\n")
        return tuple(outputs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the real outputs back into the file")
    parser.add_argument("file", nargs="?", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    pieces, last, drifted = [], 0, 0
    for example in examples(text):
        real = example.text(run(example))
        printed = example.text()
        if real != printed:
            drifted += 1
            if not args.write:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        printed.splitlines(keepends=True), real.splitlines(keepends=True), "README", "real output"
                    )
                )
        pieces += [text[last : example.start], real]
        last = example.end
    if args.write:
        args.file.write_text("".join([*pieces, text[last:]]), encoding="utf-8")
        print(f"{args.file.name}: {drifted} example(s) rewritten")
        return 0
    if drifted:
        print(f"{drifted} example(s) differ from the real output: python tools/readme_examples.py --write")
    return 1 if drifted else 0


if __name__ == "__main__":
    raise SystemExit(main())
