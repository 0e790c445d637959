"""`ckpt_tools.inspect`: the census `ckpt inspect` prints, as typed data; the CLI renders exactly this object."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools.census import CensusRow, Inspection, LayerRow
from ckpt_tools.cli.main import app
from ckpt_tools.errors import TargetError, UsageError
from tests.corrupt import GENUINE

ROOT = Path(__file__).resolve().parents[2]
MOE = GENUINE / "llmc-qwen35moe-nvfp4"

pytestmark = pytest.mark.skipif(not GENUINE.is_dir(), reason="genuine fixtures are not present")


def test_the_census_is_data_and_the_cli_prints_it() -> None:
    census = ckpt_tools.inspect(MOE, tensors="model.visual.blocks.0.attn.*")
    assert isinstance(census, Inspection)
    vision_bf16 = next(r for r in census.census if (r.component, r.dtype) == ("vision", "BF16"))
    assert isinstance(vision_bf16, CensusRow) and vision_bf16.tensors > 0 and vision_bf16.bytes > 0
    assert sum(r.tensors for r in census.census) == census.checkpoint["tensors"]
    assert sum(r.bytes for r in census.census) <= census.checkpoint["bytes"]
    layer0 = next(r for r in census.layers if r.layer == "model.language_model.layers.0")
    assert isinstance(layer0, LayerRow) and sum(layer0.schemes.values()) > 0
    assert layer0.summary == ", ".join(f"{n}x {label}" for label, n in sorted(layer0.schemes.items()))
    # natural order: layer 10 after layer 9
    numbers = [int(m.group(1)) for r in census.layers if (m := re.search(r"language_model\.layers\.(\d+)$", r.layer))]
    assert numbers == sorted(numbers) and len(numbers) > 1
    assert census.tensors is not None and "model.visual.blocks.0.attn.qkv.weight" in {t.name for t in census.tensors}

    text = CliRunner().invoke(app, ["inspect", str(MOE), "-t", "model.visual.blocks.0.attn.*"]).stdout
    assert text == census.render_text()
    cli = json.loads(CliRunner().invoke(app, ["inspect", str(MOE), "-f", "json", "-t", "lm_head*"]).stdout)
    assert cli == json.loads(json.dumps(ckpt_tools.inspect(MOE, tensors="lm_head*").to_dict()))
    assert [t["name"] for t in cli["tensors"]] == ["lm_head.weight"]


def test_without_a_pattern_there_is_no_listing() -> None:
    census = ckpt_tools.inspect(str(MOE))
    assert census.tensors is None and census.pattern is None and "tensors" not in census.to_dict()
    assert "tensors matching" not in census.render_text()


def test_refusals_are_ckpt_errors(tmp_path: Path) -> None:
    with pytest.raises(TargetError):
        ckpt_tools.inspect(tmp_path / "missing")
    with pytest.raises(UsageError):
        ckpt_tools.inspect(42)  # type: ignore[arg-type]


def test_the_docs_inspect_api_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/python-api.md's inspect example runs exactly as printed, from the repository root."""
    page = (ROOT / "docs" / "python-api.md").read_text()
    match = re.search(re.escape("<!-- inspect-api-example -->") + r"\s*```python\n(.*?)```", page, re.S)
    assert match, "docs/python-api.md lost its inspect-api-example block"
    monkeypatch.chdir(ROOT)
    exec(compile(match.group(1), "docs/python-api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "vision BF16" in out and "model.language_model.layers.0 " in out
    assert "model.language_model.layers.0.mlp.gate.weight" in out
