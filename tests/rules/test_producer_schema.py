"""`--producer-schema`: the producers' own validation, wired through the pipeline as rule CK311."""

from __future__ import annotations

import importlib.util

import pytest

from ckpt_tools import analyze
from ckpt_tools.detect import producer_schema
from tests.corrupt import GENUINE, edit_json

HAS_CT = importlib.util.find_spec("compressed_tensors") is not None
HAS_MODELOPT = importlib.util.find_spec("modelopt") is not None


def slugs(report) -> set[str]:
    return {f.slug for f in report.findings}


def test_off_by_default_and_never_imports_producers() -> None:
    report = analyze(str(GENUINE / "llmc-llama-nvfp4")).report
    assert "producer-schema" not in slugs(report)
    assert not any(s["slug"] == "producer-schema" for s in report.skipped)


@pytest.mark.skipif(HAS_CT, reason="compressed-tensors is installed here")
def test_missing_package_is_reported_as_skipped() -> None:
    report = analyze(str(GENUINE / "llmc-llama-nvfp4"), producer_schema=True).report
    [skip] = [s for s in report.skipped if s["slug"] == "producer-schema"]
    assert "pip install 'ckpt-tools[producers]'" in skip["reason"]


def test_errors_become_a_finding(monkeypatch) -> None:
    fake = producer_schema.SchemaCheck(
        "compressed-tensors",
        "compressed-tensors 0.19.0",
        ("config_groups.group_0.weights.strategy: not a valid QuantizationStrategy",),
    )
    monkeypatch.setattr(producer_schema, "check_producer_schema", lambda ckpt, det: fake)
    report = analyze(str(GENUINE / "llmc-llama-nvfp4"), producer_schema=True).report
    [f] = [f for f in report.findings if f.slug == "producer-schema"]
    assert f.code == "CK311" and "QuantizationStrategy" in f.message and f.files == ("config.json",)


@pytest.mark.skipif(not HAS_CT, reason="needs the producers extra (compressed-tensors)")
def test_compressed_tensors_schema(fixture_copy) -> None:
    assert "producer-schema" not in slugs(analyze(str(GENUINE / "llmc-qwen35moe-nvfp4"), producer_schema=True).report)
    folder = fixture_copy("llmc-llama-nvfp4")
    edit_json(
        folder / "config.json",
        lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].__setitem__("strategy", "x"),
    )
    assert "producer-schema" in slugs(analyze(str(folder), producer_schema=True).report)


@pytest.mark.skipif(not HAS_MODELOPT, reason="needs the producers extra (nvidia-modelopt)")
def test_modelopt_conversion_agrees(fixture_copy) -> None:
    assert "producer-schema" not in slugs(
        analyze(str(GENUINE / "modelopt-qwen35moe-nvfp4"), producer_schema=True).report
    )
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(folder / "config.json", lambda c: c["quantization_config"]["ignore"].append("model.layers.0.mlp.up_proj"))
    assert "producer-schema" in slugs(analyze(str(folder), producer_schema=True).report)
