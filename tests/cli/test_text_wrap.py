"""Text output wraps long lines to the terminal width (issue 28 item 4): `COLUMNS`, else the terminal's own width;
a pipe or a file gets one line per finding (grep-able), and JSON is never wrapped."""

from __future__ import annotations

import json
import os
import pty
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
        assert "\n                weight-only (Marlin) on h100: no FP4 tensor cores)\n" in out  # under the value
        assert "\n                               weight-only (slow fallback)\n" in out  # kernels: under the GPU group
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


def test_a_terminal_that_reports_no_size_gets_unwrapped_lines_not_a_sliver() -> None:
    """A pseudo-terminal nobody sized (`script`, `docker run -t`, some CI runners) says 0 columns: that is no width."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(PYTHONPATH=str(ROOT), NO_COLOR="1")
    leader, follower = pty.openpty()  # a fresh pty is 0x0
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", TARGET, "--hardware", "h100"],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    out = b"".join(chunks).decode().replace("\r\n", "\n")
    (quantization,) = [line for line in out.splitlines() if line.startswith("  quantization")]
    assert quantization.endswith("on h100: no FP4 tensor cores)"), out


def test_inspect_wraps_its_load_accounting_too() -> None:
    defective = str(ROOT / "fixtures" / "defective" / "llama-nvfp4-missing-input-scales")
    out = ckpt("inspect", defective, columns="72").stdout
    load = out[out.index("vLLM load") :].splitlines()
    assert max(len(line) for line in load) <= 72, out
    assert "      nvfp4-weight-only)" in load  # a problem line continues indented under its tensor
