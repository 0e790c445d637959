"""Text output wraps long lines to the terminal width (issue 28 item 4): `COLUMNS`, else the terminal's own width;
a pipe or a file gets one line per finding (grep-able), and JSON is never wrapped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ckpt_tools.report.text import wrap

ROOT = Path(__file__).resolve().parents[2]
TARGET = str(ROOT / "fixtures" / "genuine" / "llmc-llama-nvfp4")


def ckpt(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_doctor_and_inspect_wrap_to_columns() -> None:
    for command in ("doctor", "inspect"):
        out = ckpt(command, TARGET, "--hardware", "h100", columns="80").stdout
        assert max(len(line) for line in out.splitlines()) <= 80, out
        # the kernels line continues under its GPU group's kernels (`on h100: `)
        assert "\n" + " " * 31 + "weight-only (slow fallback)\n" in out
    doctor = ckpt("doctor", TARGET, "--hardware", "h100", columns="80").stdout
    assert "\n        Marlin weight-only, a slow fallback: weight-only: no FP4 tensor cores,\n" in doctor


def test_a_pipe_gets_one_line_per_finding_and_json_is_never_wrapped() -> None:
    piped = ckpt("doctor", TARGET, "--hardware", "h100").stdout
    (message,) = [line for line in piped.splitlines() if line.startswith("        On h100")]
    assert len(message) > 200 and message.endswith("ignores its input scales.")
    text = json.dumps(json.loads(ckpt("doctor", TARGET, "--hardware", "h100", "-f", "json", columns="40").stdout))
    assert "ignores its input scales." in text


def test_wrap_never_splits_a_word_and_keeps_the_indent() -> None:
    long_name = "model.layers.0.mlp.experts.0.gate_proj.weight_scale_2"
    lines = wrap(f"        tensors: {long_name}, {long_name}", 40, 17)
    assert [line.strip(" ,") for line in lines[1:]] == [long_name, long_name]  # whole, never cut
    assert all(line.startswith(" " * 17) for line in lines[1:]) and lines[0] == "        tensors:"
    assert wrap("short", 40) == ["short"] and wrap("x " * 50, None) == ["x " * 50]
