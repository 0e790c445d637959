"""Formats beyond ModelOpt and compressed-tensors (rules/formats.toml): the serve flags vLLM 0.33 accepts for each
genuine fixture, the deprecated-method switch, and the scale-role table the value scan follows."""

from __future__ import annotations

import pytest

from ckpt_tools import analyze
from ckpt_tools.model.modules import ROLES, SCALE_ROLES
from ckpt_tools.serve import serve_flags
from tests.corrupt import GENUINE, copy_fixture, edit_json

# entry -> the --quantization value vLLM 0.33 resolves (override_quantization_method of each config class).
# gptq / awq: the checkpoint's own name, which the override accepts and resolves to auto_gptq / auto_awq on every
# platform (AutoAWQConfig has no override on CPU, where only `awq` matches).
QUANTIZATION = {
    "autoround-llama-gptq": "gptq",
    "autoround-llama-awq": "awq",
    "autoround-llama-int": "inc",
    "autoround-llama-mxfp4": "inc",
    "transformers-llama-fp8-block": "fp8",
    "transformers-qwen3moe-fp8-block": "fp8",
    "quark-llama-fp8": "quark",
    "quark-llama-mxfp4": "quark",
    "modelopt-qwen3moe-mixed": "modelopt_mixed",
    "llmc-llama-w8a8-int8": "compressed-tensors",
}


@pytest.mark.parametrize("entry", sorted(QUANTIZATION))
def test_serve_flags_quantization(entry: str) -> None:
    plan = serve_flags(str(GENUINE / entry))
    assert plan.blocked is None
    flags = {f.flag: f.value for f in plan.flags}
    assert flags["--quantization"] == QUANTIZATION[entry]
    assert "--allow-deprecated-quantization" not in flags


@pytest.mark.parametrize("entry", ["autoround-llama-nvfp4", "autoround-llama-fp8-static"])
def test_rejected_autoround_exports_get_no_quantization_flag(entry: str) -> None:
    plan = serve_flags(str(GENUINE / entry))
    assert "--quantization" not in {f.flag for f in plan.flags}
    assert any("refuses" in w for w in plan.warnings) or plan.blocked is not None


def test_fbgemm_fp8_needs_the_deprecated_switch(tmp_path) -> None:
    folder = copy_fixture("llmc-llama-fp8-dynamic", tmp_path)
    edit_json(
        folder / "config.json",
        lambda c: c.update(
            quantization_config={
                "quant_method": "fbgemm_fp8",
                "activation_scale_ub": 1200.0,
                "modules_to_not_convert": ["lm_head"],
            }
        ),
    )
    report = analyze(str(folder), headers_only=True).report
    assert report.checkpoint["vllm_quantization"] == "fbgemm_fp8"
    flags = {f.flag: f.value for f in serve_flags(str(folder)).flags}
    assert flags["--quantization"] == "fbgemm_fp8" and "--allow-deprecated-quantization" in flags


def test_new_scale_suffixes_are_scanned_scale_roles() -> None:
    """The value scan reads the tensors whose role is in SCALE_ROLES: GPTQ/AWQ `scales`, FP8 `weight_scale_inv`
    and gpt-oss MXFP4 `*_scales` are among them; `qweight` is a weight, `qzeros` a zero point."""
    for suffix in ("scales", "weight_scale_inv", "gate_up_proj_scales", "down_proj_scales"):
        assert ROLES[suffix] in SCALE_ROLES, suffix
    assert ROLES["qweight"] == "weight" and ROLES["qzeros"] == "zero_point" and ROLES["g_idx"] == "g_idx"


def test_inspect_table_names_the_new_schemes() -> None:
    det = analyze(str(GENUINE / "modelopt-qwen3moe-mixed"), headers_only=True).detection
    experts = [r for r in det.rows if r.is_expert]
    attention = [r for r in det.rows if ".self_attn." in r.name]
    assert experts and all(r.declared.kind == "nvfp4" and r.group == "NVFP4" for r in experts)
    assert attention and all(r.declared.kind == "fp8" and r.group == "FP8" for r in attention)


def test_zero_d_scale_of_a_one_block_expert_grid_loads(tmp_path) -> None:
    """transformers FineGrainedFP8 with [128, 128] blocks writes a Qwen3-MoE expert's one-block scale grid 0-d; vLLM's
    MoE loader copies a 0-d tensor into its slot without narrowing, so it is not a shape error."""
    from tests import case_ops

    folder = copy_fixture("transformers-qwen3moe-fp8-block", tmp_path)
    edit_json(folder / "config.json", lambda c: c["quantization_config"].update(weight_block_size=[128, 128]))
    ckpt = analyze(str(folder), headers_only=True).checkpoint
    for name in ckpt.tensors:
        if name.endswith(".weight_scale_inv"):
            w = ckpt.tensors[name[: -len("_scale_inv")]]
            grid = [-(-w.shape[0] // 128), -(-w.shape[1] // 128)]
            case_ops.op_retype(folder, name, shape=[] if ".experts." in name else grid)
    codes = {f.code for f in analyze(str(folder)).report.findings}
    assert "CK403" not in codes


def test_check_serve_accepts_what_the_override_accepts() -> None:
    from ckpt_tools.serve import check_serve

    target = str(GENUINE / "autoround-llama-gptq")
    for value in ("gptq", "gptq_marlin", "auto_gptq", "marlin"):
        cmd = f"vllm serve {target} --quantization {value}"
        assert not [f for f in check_serve(target, [cmd]).findings if f.slug == "quantization-mismatch"], value
    bad = check_serve(target, [f"vllm serve {target} --quantization awq"]).findings
    assert [f for f in bad if f.slug == "quantization-mismatch" and f.severity == "error"]
    ar = str(GENUINE / "autoround-llama-int")
    silent = check_serve(ar, [f"vllm serve {ar} --quantization gptq"]).findings
    assert [f for f in silent if f.slug == "quantization-mismatch" and f.severity == "warning"]
