"""A config number used as a count is checked before anything is built per item: `num_local_experts = 10**12` made
CK402 enumerate every absent expert id (a loop without end; 10**6 already 0.3 s and 116 MB per MoE layer), and
`num_hidden_layers = 10**9` made `ckpt plan` build one cache spec per layer (8 GB and still running after 30 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

FIXTURE = "modelopt-qwen3moe-fp8"  # 4 experts per MoE layer, `num_local_experts` 4


def _set(folder: Path, **values: int) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def _ckpt(*args: object, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    return proc, time.perf_counter() - started


def test_a_huge_expert_count_is_a_finding_not_a_loop(fixture_copy) -> None:
    folder = fixture_copy(FIXTURE)
    _set(folder, num_local_experts=10**12)
    proc, took = _ckpt("doctor", folder, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "CK402"]
    assert finding["details"]["configured_experts"] == 10**12 and finding["details"]["experts_present"] == 4
    assert "absent_experts" not in json.dumps(finding)  # no id below the count was listed
    assert took < 20  # a guard against the loop, not a benchmark


def test_an_expert_count_within_the_limit_still_lists_the_absent_ids(fixture_copy) -> None:
    folder = fixture_copy(FIXTURE)
    _set(folder, num_local_experts=6)
    proc, _ = _ckpt("doctor", folder, "--format", "json")
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "CK402"]
    assert {tuple(layer["absent_experts"]) for layer in finding["details"]["layers"]} == {(4, 5)}


def test_a_huge_layer_count_is_a_one_line_refusal_of_the_plan(fixture_copy) -> None:
    folder = fixture_copy(FIXTURE)
    _set(folder, num_hidden_layers=10**9)
    proc, took = _ckpt("plan", folder, "--hardware", "h100", timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "num_hidden_layers 1,000,000,000, past any released model" in proc.stderr
    assert took < 20
