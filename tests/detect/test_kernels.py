"""The kernel-selection table (rules/kernels.toml) as ckpt_tools.kernels applies it, and CK405's severities on a
profile the table has no kernel for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ckpt_tools.kernels import capability, kernels_for, layer_kind, select, selections
from ckpt_tools.knowledge.hardware import hardware
from ckpt_tools.knowledge.hardware import profiles as hardware_profiles
from ckpt_tools.model.schemes import Scheme
from ckpt_tools.pipeline import analyze
from ckpt_tools.rules.base import Context
from ckpt_tools.rules.ck405_kernel_selection import KernelSelection

GENUINE = Path(__file__).resolve().parents[2] / "fixtures" / "genuine"


def test_capabilities_as_vllm_compares_them() -> None:
    assert {h.id: capability(h) for h in hardware_profiles()} == {
        "gb10": 121,
        "rtx5090": 120,
        "b200": 100,
        "h200": 90,
        "h100": 90,
    }


@pytest.mark.parametrize("sel", selections(), ids=lambda s: s.id)
def test_every_selection_cites_vllm_and_has_a_kernel_on_every_profile(sel) -> None:
    assert "vLLM 0.33.0" in sel.source and "docs/reference/vllm-0.33.md §4." in sel.source
    for hw in hardware_profiles():
        cc = capability(hw)
        assert any(p.matches(cc, None) for p in sel.picks), (sel.id, hw.id)


def test_nvfp4_reuses_the_hardware_profiles_names() -> None:
    for hw in hardware_profiles():
        w4a4 = select(Scheme("nvfp4", "A4"), "linear", hw)
        w4a16 = select(Scheme("nvfp4", "A16"), "linear", hw)
        assert w4a4 is not None and w4a16 is not None
        assert (w4a4.family, w4a16.family) == (hw.nvfp4_w4a4, hw.nvfp4_w4a16)
        assert bool(w4a4.fallback) == (not hw.native_fp4)
        assert w4a16.fallback is None  # weight-only by design is CK401's warning, not a fallback


def test_group_size_decides_marlin_machete_or_triton() -> None:
    int4 = Scheme("int4", "A16", "group")
    assert select(int4, "linear", hardware("h100"), 128).family == "Machete"
    assert select(int4, "linear", hardware("h100"), 32).family == "Humming"  # moved ahead of Marlin on SM90
    assert select(int4, "linear", hardware("rtx5090"), 128).family == "Marlin"
    slow = select(int4, "linear", hardware("rtx5090"), 16)
    assert slow.family == "Humming" and "group size" in slow.fallback
    moe = select(int4, "moe", hardware("gb10"), 16)
    assert moe.family == "MoE WNA16 (Triton)" and moe.fallback


def test_gptq_and_awq_are_marlin_only() -> None:
    int4 = Scheme("int4", "A16", "GPTQ")
    for method in ("auto_gptq", "auto_awq"):
        assert select(int4, "linear", hardware("gb10"), 128, method).family == "Marlin"
        assert select(int4, "linear", hardware("h100"), 32, method).family == "Humming"
        refused = select(int4, "linear", hardware("gb10"), 16, method)
        assert refused.family is None and "Marlin does not support group_size" in refused.no_kernel
    assert select(int4, "linear", hardware("gb10"), 16, "compressed-tensors").family == "Humming"


def test_unmodelled_and_unquantized_schemes_get_no_line() -> None:
    assert select(Scheme("unquantized"), "linear", hardware("gb10")) is None
    assert select(Scheme("int4", "A8", "group"), "linear", hardware("gb10")) is None


def test_layer_kind() -> None:
    assert layer_kind("model.layers.0.mlp.experts.3.down_proj") == "moe"
    assert layer_kind("model.layers.0.mlp.experts") == "moe"
    assert layer_kind("model.layers.0.mlp.shared_expert.down_proj") == "linear"


def _old_gpu(cc: str):
    base = hardware("h100")
    return replace(base, id="v100", name="V100", compute_capability=cc)


def test_no_kernel_on_an_old_gpu_is_an_error_when_that_gpu_was_asked_for() -> None:
    result = analyze(str(GENUINE / "sourcebuilt-gptoss-mxfp4"), headers_only=True)
    v100 = _old_gpu("7.0")
    uses = kernels_for(result.detection, (v100,))
    assert uses and uses[0].kernel.family is None and "No MXFP4 MoE backend" in uses[0].kernel.no_kernel
    ctx = Context(ckpt=result.checkpoint, det=result.detection, hardware=(v100,), target="x")
    (finding,) = KernelSelection().check(ctx)
    assert finding.severity == "error" and "no kernel" in finding.message


def test_fallback_is_a_warning_only_when_the_gpu_was_asked_for() -> None:
    """Issue 28 item 4: which kernel each GPU picks is a header fact, not a finding; CK405 speaks only when a chosen
    GPU runs a slow fallback (or has no kernel)."""
    result = analyze(str(GENUINE / "modelopt-llama-nvfp4"), headers_only=True)
    every = Context(ckpt=result.checkpoint, det=result.detection, hardware=hardware_profiles(), target="x")
    assert list(KernelSelection().check(every)) == []
    asked = Context(ckpt=result.checkpoint, det=result.detection, hardware=(hardware("h200"),), target="x")
    (warning,) = KernelSelection().check(asked)
    assert warning.severity == "warning" and warning.message.startswith("On h200 vLLM 0.33.0 runs the 14 W4A4")
    assert "a slow fallback" in warning.message and len(warning.message) < 300
    native = Context(ckpt=result.checkpoint, det=result.detection, hardware=(hardware("gb10"),), target="x")
    assert list(KernelSelection().check(native)) == []


def test_the_kernel_facts_are_in_the_header_and_json_per_runtime() -> None:
    """The kernels lines name the runtime's release and the GPUs it runs on; a runtime profile whose release the table
    does not restate gets "not modelled", never 0.33's table or a GPU the image cannot run on."""
    from ckpt_tools import doctor

    upstream = doctor(GENUINE / "llmc-llama-nvfp4")
    facts = upstream.to_dict()["checkpoint"]["kernels"]
    assert facts["vllm_version"] == "0.33.0" and list(facts["hardware"]) == ["gb10", "rtx5090", "b200", "h200", "h100"]
    text = upstream.render("text")
    assert "  kernels       vLLM 0.33.0 on gb10, rtx5090: 14 W4A4 NVFP4 linear -> FlashInfer-CUTLASS" in text
    assert "on h200, h100: 14 W4A4 NVFP4 linear -> Humming / Marlin weight-only" in text
    assert upstream.findings == ()  # no CK405 without a chosen GPU
    aeon = doctor(GENUINE / "llmc-llama-nvfp4", runtime="aeon-v0.27.1")
    ck = aeon.to_dict()["checkpoint"]
    assert ck["kernels"]["vllm_version"] is None and ck["kernels"]["hardware"] == {} and ck["nvfp4_kernels"] == {}
    aeon_text = aeon.render("text")
    assert "kernels       not modelled for aeon-v0.27.1" in aeon_text and "0.33.0 on" not in aeon_text
    assert "h100" not in aeon_text and "h200" not in aeon_text
    assert doctor(GENUINE / "llmc-llama-nvfp4", hardware="h100").to_dict()["checkpoint"]["nvfp4_kernels"] == {
        "h100": "Humming / Marlin weight-only"
    }


def test_deepgemm_is_named_by_model_type_on_blackwell() -> None:
    """vLLM switches DeepGEMM off for Qwen3.5 text models on SM100 / SM12x (should_auto_disable_deep_gemm): a Llama
    gets DeepGEMM, a Qwen3.5 CUTLASS block FP8; the label never names another model's path."""
    block = Scheme("fp8", "A8", "block")
    for hw in ("b200", "gb10"):
        assert select(block, "linear", hardware(hw), None, "fp8", None, "llama").family == "DeepGEMM"
        assert (
            select(block, "linear", hardware(hw), None, "fp8", None, "qwen3_5_moe_text").family == "CUTLASS block FP8"
        )
    h100 = select(block, "linear", hardware("h100"), None, "fp8", None, "qwen3_5_text")
    assert h100.family == "FlashInfer block-scale FP8 (SM90) / DeepGEMM"
    assert select(block, "moe", hardware("gb10"), None, "fp8", None, "qwen3_moe").family == "DeepGEMM"
    assert select(block, "moe", hardware("gb10"), None, "fp8", None, "qwen3_5_moe_text").family == "Triton block FP8"
    assert all("Qwen3.5" not in (p.kernel or "") for sel in selections() for p in sel.picks)
    from ckpt_tools import doctor

    llama = doctor(GENUINE / "transformers-llama-fp8-block", hardware="b200").to_dict()["checkpoint"]["kernels"]
    assert llama["hardware"]["b200"][0]["kernel"] == "DeepGEMM"


def test_inspect_names_the_kernels_once() -> None:
    import ckpt_tools

    moe = ckpt_tools.inspect(GENUINE / "llmc-qwen3moe-nvfp4", hardware=["gb10", "h100"])
    layer = next(r for r in moe.layers if r.layer == "model.layers.1")
    assert dict(layer.kernel) == {
        "gb10": "linear: FlashInfer-CUTLASS / CUTLASS (native FP4); experts: FlashInfer-CUTLASS (native FP4)",
        "h100": "linear: Humming / Marlin weight-only (slow fallback); "
        "experts: Humming / Marlin weight-only (slow fallback)",
    }
    assert next(r for r in moe.layers if r.layer == "lm_head").kernel == {}  # unquantized
    assert moe.to_dict()["layers"][1]["kernel"] == dict(moe.layers[1].kernel)
    text = moe.render_text()
    assert text.count("FlashInfer-CUTLASS (native FP4)") == 1 and text.count("kernels ") == 1  # once, in the header
    assert "  kernels       vLLM 0.33.0 on gb10: 8 W4A4 NVFP4 linear" in text and "b200" not in text
    assert moe.to_dict()["checkpoint"]["kernels"]["hardware"].keys() == {"gb10", "h100"}
    one = ckpt_tools.inspect(GENUINE / "autoround-llama-gptq", hardware="h100").render_text()
    assert "on h100: 14 W4A16 INT4 (GPTQ) linear -> Machete" in one
    refused = ckpt_tools.inspect(GENUINE / "autoround-llama-nvfp4")  # vLLM refuses nv_fp: no kernel column
    assert all(not r.kernel for r in refused.layers) and "  kernels" not in refused.render_text()


def test_fp8_moe_backend_per_scale_layout_and_gpu() -> None:
    block = Scheme("fp8", "A8", "block")
    assert select(block, "moe", hardware("b200"), None, "fp8").family == "FlashInfer TRTLLM block FP8"
    assert select(block, "moe", hardware("h100"), None, "fp8").family.startswith("Triton block FP8")
    assert select(block, "moe", hardware("gb10"), None, "compressed-tensors").family == "DeepGEMM"
    tensor = Scheme("fp8", "A8", "tensor")
    assert select(tensor, "moe", hardware("b200"), None, "modelopt").family == "FlashInfer TRTLLM FP8"
    assert select(tensor, "moe", hardware("rtx5090"), None, "modelopt").family == "FlashInfer-CUTLASS FP8"
    channel = Scheme("fp8", "A8", "channel")
    assert select(channel, "moe", hardware("h200"), None, "compressed-tensors").family.startswith("vLLM CUTLASS")
    # vLLM's own CUTLASS grouped FP8 experts are a compressed-tensors candidate only, and start at SM90.
    assert select(channel, "moe", _old_gpu("8.9"), None, "compressed-tensors").family == "Triton FP8"
    assert select(tensor, "moe", _old_gpu("8.9"), None, "modelopt").family == "Triton FP8"
    assert select(channel, "moe", hardware("h100"), None, "fp8") is None  # the fp8 method's per-channel experts


def test_fp8_moe_below_sm89_is_marlin_weight_only_and_below_sm75_has_no_kernel() -> None:
    for scheme, method in (
        (Scheme("fp8", "A8", "block"), "fp8"),
        (Scheme("fp8", "A8", "channel"), "compressed-tensors"),
        (Scheme("fp8", "A8", "tensor"), "modelopt"),
    ):
        slow = select(scheme, "moe", _old_gpu("8.0"), None, method)
        assert slow.family == "Marlin FP8 weight-only" and "16-bit activations" in slow.fallback
        none = select(scheme, "moe", _old_gpu("7.0"), None, method)
        assert none.family is None and none.no_kernel == "No FP8 MoE backend supports the deployment configuration."


def test_fp8_moe_fallback_warns_and_no_kernel_errors_on_an_asked_for_gpu() -> None:
    result = analyze(str(GENUINE / "llmc-qwen3moe-fp8-dynamic"), headers_only=True)
    a100 = _old_gpu("8.0")
    ctx = Context(ckpt=result.checkpoint, det=result.detection, hardware=(a100,), target="x")
    (finding,) = KernelSelection().check(ctx)
    assert (
        finding.severity == "warning" and "the 24 W8A8 FP8 (channel) expert module(s) on Marlin FP8" in finding.message
    )
    ctx = Context(ckpt=result.checkpoint, det=result.detection, hardware=(_old_gpu("7.0"),), target="x")
    (finding,) = KernelSelection().check(ctx)
    experts = [k for k in finding.details["kernels"]["v100"] if k["layer"] == "moe"]
    assert finding.severity == "error" and experts == [dict(experts[0], kernel=None, fallback=None)]
    assert "and 24 W8A8 FP8 (channel) expert module(s) on v100" in finding.message


def test_w4a8_int_runs_weight_only_on_humming_and_w4afp8_is_not_taken_for_it() -> None:
    """The genuine llm-compressor W4A8 (int8 activations) export: Humming on every GPU, a slow fallback that warns on
    an asked-for GPU; the same scheme with FP8 activations (a different vLLM scheme) gets no line from this entry."""
    w4a8 = Scheme("int4", "A8", "group")
    for hw in hardware_profiles():
        k = select(w4a8, "linear", hw, 128, "compressed-tensors", "int")
        assert k.family == "Humming" and "16-bit activations" in k.fallback, hw.id
    assert select(w4a8, "linear", _old_gpu("7.0"), 128, "compressed-tensors", "int").family is None
    assert select(w4a8, "linear", hardware("h100"), 128, "compressed-tensors", "float") is None
    result = analyze(str(GENUINE / "llmc-llama-w4a8-int"), headers_only=True)
    ctx = Context(ckpt=result.checkpoint, det=result.detection, hardware=(hardware("gb10"),), target="x")
    (finding,) = KernelSelection().check(ctx)
    assert finding.severity == "warning" and "W4A8 INT4 (group) linear module(s) on Humming" in finding.message
