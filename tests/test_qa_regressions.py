"""Regressions found by the adversarial QA pass: odd names, odd configs, odd folders and odd commands that once made
`ckpt` crash, hang or give a wrong verdict. Each test names the input that broke it."""

from __future__ import annotations

from pathlib import Path

import ckpt_tools
from ckpt_tools.write.header import build_file


def codes(report) -> list[str]:  # noqa: ANN001 - Report
    return [f.code for f in report.findings]


def test_top_level_scale_without_dot_is_an_orphan_not_a_crash(tmp_path: Path) -> None:
    # A tensor named `weight_scale` (no module prefix) once raised KeyError('.weight_scale') in orphan-scale.
    (tmp_path / "model.safetensors").write_bytes(build_file([
        ("weight_scale", "F32", [1], b"\0" * 4),
        ("model.layers.0.mlp.down_proj.weight", "BF16", [2], b"\0" * 4),
    ]))
    report = ckpt_tools.doctor(tmp_path)
    orphan = next(f for f in report.findings if f.code == "CK302")
    assert list(orphan.tensors) == ["weight_scale"]
