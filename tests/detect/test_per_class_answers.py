"""Detection's checkpoint-wide answers (producer from the tensors, compressed-tensors algo, the unknown-scheme
rejection) and serve-flags' vision fact are read per row class, not per row: each must equal the per-row answer on
every genuine fixture and on compressed-tensors checkpoints whose modules resolve to different schemes (members
of different classes disagree, and the first unknown-scheme module in name order is not the first in load order)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_tools.detect.resolve import _ct_algo, detect
from ckpt_tools.pipeline import analyze
from ckpt_tools.read import open_source
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.serve.facts import checkpoint_facts
from tests.corrupt import GENUINE, copy_fixture, edit_json, genuine_entries

CT = "compressed-tensors"


def _per_row(folder: Path) -> None:
    ckpt = load_checkpoint(open_source(str(folder)))
    det = detect(ckpt)
    rows = det.rows
    assert det.classes and sum(len(c.names) for c in det.classes) == len(rows)
    if det.producer == CT:
        assert det.quant_algo == _ct_algo([r.declared for r in rows if r.declared.quantized])
        bad = next((r for r in rows if r.declared.kind == "unknown"), None)
        if bad is not None and det.config.get("quant_method") == CT:
            assert det.rejection is not None and f"layer_name={bad.name}:" in det.rejection
    facts = checkpoint_facts(analyze(str(folder), headers_only=True))
    assert facts.has_vision == (any(r.component == "vision" for r in rows) or "vision" in det.components)


@pytest.mark.parametrize("fixture", genuine_entries())
def test_per_class_answers_equal_per_row_on_genuine_fixtures(fixture: str) -> None:
    _per_row(GENUINE / fixture)


def _add_group(folder: Path, name: str, targets: list[str], weights: dict) -> None:
    # First: vLLM takes the first config group that targets a module, and the fixture's own targets every Linear.
    def edit(cfg: dict) -> None:
        quant = cfg["quantization_config"]
        new = {"targets": targets, "weights": weights, "input_activations": None}
        quant["config_groups"] = {name: new, **quant["config_groups"]}

    edit_json(folder / "config.json", edit)


FP8 = {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": True, "dynamic": False}
INT3 = {"type": "int", "num_bits": 3, "strategy": "group", "group_size": 128, "symmetric": True, "dynamic": False}


def test_mixed_schemes_and_unknown_scheme_rejection(tmp_path: Path) -> None:
    # Attention in FP8 beside NVFP4 experts: two quantized schemes, MIXED_PRECISION both ways.
    mixed = copy_fixture("llmc-qwen3moe-nvfp4", tmp_path / "mixed")
    _add_group(mixed, "group_fp8", ["re:.*self_attn\\.(q|k|v|o)_proj$"], FP8)
    _per_row(mixed)
    assert detect(load_checkpoint(open_source(str(mixed)))).quant_algo == "MIXED_PRECISION"

    # 3-bit int weights on v_proj and down_proj: vLLM has no scheme for them. Per layer, `k`/`o`/`q` sort before
    # `v`, but the first such module by name is layer 0's mlp... down_proj (`mlp` < `self_attn`).
    unknown = copy_fixture("llmc-qwen3moe-nvfp4", tmp_path / "unknown")
    _add_group(unknown, "group_int3", ["re:.*self_attn\\.v_proj$", "re:.*experts\\.\\d+\\.down_proj$"], INT3)
    _per_row(unknown)
    det = detect(load_checkpoint(open_source(str(unknown))))
    bad = sorted(r.name for r in det.rows if r.declared.kind == "unknown")
    assert len(bad) > 2 and det.rejection is not None
    assert f"layer_name={bad[0]}:" in det.rejection
