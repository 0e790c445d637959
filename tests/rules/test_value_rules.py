"""The value scan reads exactly the small scale tensors the value rules need, and the value rules are skipped
(and listed) when values are not read."""

from __future__ import annotations

import math
from types import MappingProxyType

from ckpt_tools.model.values import TensorStats, ValueStats
from ckpt_tools.pipeline import analyze
from ckpt_tools.rules._values import decode, scalar, unusual
from tests.corrupt import GENUINE

VALUE_RULES = {"CK307", "CK501", "CK502", "CK503", "CK504"}


def test_modelopt_global_and_input_scales_are_read() -> None:
    ckpt = analyze(str(GENUINE / "modelopt-llama-nvfp4")).checkpoint
    read = set(ckpt.values or ())
    for suffix in ("weight_scale_2", "input_scale"):
        assert f"model.layers.0.mlp.down_proj.{suffix}" in read
    value = scalar(ckpt, "model.layers.0.mlp.down_proj.weight_scale_2")
    assert value is not None and 0 < value < 1e-2  # direct convention: amax / 2688
    assert not any(n.endswith(".weight") for n in read)  # weights are never read


def test_compressed_tensors_global_scales_and_kv_scales_are_read() -> None:
    nvfp4 = analyze(str(GENUINE / "llmc-llama-nvfp4")).checkpoint
    value = scalar(nvfp4, "model.layers.0.mlp.down_proj.weight_global_scale")
    assert value is not None and value > 100  # reciprocal convention: 2688 / amax
    assert scalar(nvfp4, "model.layers.0.mlp.down_proj.input_global_scale") is not None
    kv = analyze(str(GENUINE / "llmc-llama-fp8-dynamic-fp8kv")).checkpoint
    assert scalar(kv, "model.layers.0.self_attn.k_scale") is not None  # BF16 [1]


def test_headers_only_skips_and_lists_value_rules() -> None:
    report = analyze(str(GENUINE / "modelopt-llama-nvfp4"), headers_only=True).report
    skipped = {s["code"] for s in report.skipped}
    assert skipped == VALUE_RULES
    assert all("--headers-only" in s["reason"] for s in report.skipped)


def test_decode_formats() -> None:
    assert decode("F32", b"\x00\x00\x80\x3f") == [1.0]
    assert decode("BF16", b"\x80\x3f\x00\xc0") == [1.0, -2.0]
    assert decode("F16", b"\x00\x3c") == [1.0]
    assert decode("F32", b"\x00\x00\x80") is None
    assert decode("I32", b"\x00\x00\x00\x00") is None


def test_unusual_names_every_tensor_with_a_special_value_and_nothing_clean() -> None:
    clean = TensorStats("F32", 1, min=0.5, max=0.5, values=(0.5,))
    stats = {
        "a.clean": clean,
        "b.nan": TensorStats("F8_E4M3", 128, nan=1),
        "c.zero_row": TensorStats("F8_E4M3", 128, zero_rows=1),
        "d.uncounted": TensorStats("F32", 2, values=(1.0, math.inf)),
        "e.huge": TensorStats("F32", 2, min=1e308, max=1.7e308, values=(1e308, 1.7e308)),  # sums to inf
        "f.clean": clean,
    }
    assert unusual(ValueStats(MappingProxyType(stats))) == ("b.nan", "c.zero_row", "d.uncounted")
    assert unusual(ValueStats(MappingProxyType({"a": clean, "b": clean}))) == ()
