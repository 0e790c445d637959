"""Issue 28 item 3: plan, serve-flags and check-serve give one verdict on the same setting, in the same words, and
each defect is reported once."""

from __future__ import annotations

import json

from ckpt_tools.memory_plan import Settings, memory_plan
from ckpt_tools.serve import check_serve, serve_flags
from tests.cli.test_cli import ckpt
from tests.corrupt import GENUINE
from tests.serve.test_one_verdict import MISNESTED

LLAMA = str(GENUINE / "llmc-llama-nvfp4")  # 4 attention heads, a 4,096-token context
AWQ = str(GENUINE / "modelopt-llama-nvfp4-awq")
FP8_BLOCK = str(GENUINE / "transformers-llama-fp8-block")  # 64x64 blocks: TP 2 splits q/k/v off its blocks


def _one(findings, code: str):
    (finding,) = [f for f in findings if f.code == code]
    return finding


def test_a_tensor_parallel_size_vllm_refuses_is_one_finding_in_plan_serve_flags_and_check_serve() -> None:
    """`plan -tp 3`, `serve-flags -tp 3` and `check-serve ... -tp 3` on a model with 4 heads: the same CS173 finding
    (code, slug, severity, message, fix) and the same --fail-on exit codes, in text and JSON."""
    cs173 = _one(check_serve(LLAMA, f"vllm serve {LLAMA} --tensor-parallel-size 3").findings, "CS173")
    assert cs173.severity == "error" and "Total number of attention heads (4)" in cs173.message
    checked = ckpt("check-serve", LLAMA, "--hardware", "h100", "--", "vllm", "serve", LLAMA, "-tp", "3")
    assert checked.returncode == 1
    plan = ckpt("plan", LLAMA, "--hardware", "h100", "-tp", "3")
    assert plan.returncode == 1 and "Traceback" not in plan.stderr and "ckpt:" not in plan.stderr
    assert f"ERROR   CS173 tensor-parallel-indivisible\n        {cs173.message}\n" in plan.stdout
    assert f"fits         NO: {cs173.message}" in plan.stdout and "fix: --tensor-parallel-size 2" in plan.stdout
    doc = json.loads(ckpt("plan", LLAMA, "--hardware", "h100", "-tp", "3", "-f", "json").stdout)
    assert doc["findings"] == [cs173.to_dict()] and doc["fits"] is False and doc["reason"] == cs173.message
    assert ckpt("plan", LLAMA, "--hardware", "h100", "-tp", "3", "--fail-on", "none").returncode == 0
    assert ckpt("check-serve", LLAMA, "--fail-on", "none", "--", "vllm", "serve", LLAMA, "-tp", "3").returncode == 0
    # serve-flags -tp 3: the same finding refuses the command.
    flags = ckpt("serve-flags", LLAMA, "--hardware", "h100", "-tp", "3")
    assert flags.returncode == 1 and flags.stdout == ""
    assert f"error: CS173 tensor-parallel-indivisible: {cs173.message}" in flags.stderr
    forced = json.loads(ckpt("serve-flags", LLAMA, "-tp", "3", "--fail-on", "none", "-f", "json").stdout)
    assert [f for f in forced["findings"] if f["code"] == "CS173"] == [cs173.to_dict()]
    # A size that divides the heads: no finding anywhere.
    assert ckpt("plan", LLAMA, "--hardware", "h100", "-tp", "2").returncode == 0
    assert not [f for f in check_serve(LLAMA, f"vllm serve {LLAMA} -tp 2").findings if f.code == "CS173"]
    assert serve_flags(LLAMA, tensor_parallel_size=2).exit_code() == 0


def test_serve_flags_tensor_parallel_size_is_emitted_with_its_reason_and_plans_memory_per_gpu() -> None:
    sp = serve_flags(LLAMA, hardware="h100", tensor_parallel_size=2)
    argv = list(sp.argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    (flag,) = [f for f in sp.flags if f.flag == "--tensor-parallel-size"]
    assert "split over 2 GPUs" in flag.why and flag.source
    alone = memory_plan(LLAMA, Settings(hardware="h100", tensor_parallel_size=2))
    assert sp.memory.tp == 2 and sp.memory.weights.per_device_bytes == alone.weights.per_device_bytes
    assert sp.memory.weights.per_device_bytes < serve_flags(LLAMA, hardware="h100").memory.weights.per_device_bytes
    for emit in ("docker", "compose"):
        out = ckpt("serve-flags", LLAMA, "-tp", "2", "--emit", emit)
        assert out.returncode == 0 and "--tensor-parallel-size" in out.stdout, out.stderr
    assert "--tensor-parallel-size" not in serve_flags(LLAMA).argv  # only when asked


def test_a_size_block_fp8_shapes_rule_out_is_one_finding_in_plan_serve_flags_and_check_serve() -> None:
    cs174 = _one(check_serve(FP8_BLOCK, f"vllm serve {FP8_BLOCK} -tp 2").findings, "CS174")
    assert cs174.severity == "error" and cs174.fix == "--tensor-parallel-size 1"
    planned = memory_plan(FP8_BLOCK, Settings(hardware="h100", tensor_parallel_size=2))
    assert planned.findings == (cs174,) and not planned.fits and planned.answers.reason == cs174.message
    flags = serve_flags(FP8_BLOCK, hardware="h100", tensor_parallel_size=2)
    assert _one(flags.findings, "CS174") == cs174 and flags.exit_code() == 1
    assert not [f for f in serve_flags(FP8_BLOCK, tensor_parallel_size=1).findings if f.severity == "error"]


def test_a_length_past_the_context_has_one_verdict_in_plan_serve_flags_and_check_serve() -> None:
    cs120 = _one(check_serve(LLAMA, f"vllm serve {LLAMA} --max-model-len 100000").findings, "CS120")
    assert cs120.severity == "error" and cs120.fix == "--max-model-len 4096"
    # ckpt plan: the same reason, and no sequence count at a length vLLM does not start with.
    plan = memory_plan(LLAMA, Settings(hardware="h100", max_model_len=100_000))
    assert not plan.fits and plan.answers.reason == cs120.message
    text = ckpt("plan", LLAMA, "--hardware", "h100", "--max-model-len", "100000")
    assert text.returncode == 1 and "at 100,000 tokens each" not in text.stdout and "sequences" not in text.stdout
    # serve-flags: the same finding refuses the command, which never opts into the override for the user.
    flags = serve_flags(LLAMA, max_model_len=100_000)
    assert _one(flags.findings, "CS120").message == cs120.message and flags.exit_code() == 1
    assert flags.env == {}
    proc = ckpt("serve-flags", LLAMA, "--max-model-len", "100000")
    assert proc.returncode == 1 and proc.stdout == "" and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm" not in proc.stderr
    # The override, set knowingly on the command, lets vLLM start: a warning, in check-serve as before.
    allowed = check_serve(LLAMA, f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve {LLAMA} --max-model-len 100000")
    assert _one(allowed.findings, "CS120").severity == "warning"


def test_a_refused_checkpoint_is_one_finding_with_the_runtimes_that_load_it() -> None:
    findings = check_serve(AWQ, f"vllm serve {AWQ}").findings
    refusals = [f for f in findings if "ModelOpt currently only supports" in f.message]
    assert [f.code for f in refusals] == ["CK310"] and refusals[
        0
    ].fix == f"ckpt serve-flags --runtime aeon-v0.26.0 {AWQ}"
    assert [f.code for f in serve_flags(AWQ).findings if f.severity == "error"] == ["CK310"]


def test_serve_flags_names_the_hopper_fallback_once() -> None:
    proc = ckpt("serve-flags", LLAMA, "--hardware", "h100")
    assert proc.returncode == 0
    assert proc.stderr.count("FP4 tensor cores") == 1 and "warning: CK405 kernel-selection" in proc.stderr


def test_no_warning_talks_of_a_command_that_was_not_printed() -> None:
    proc = ckpt("serve-flags", MISNESTED)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "limit-mm-per-prompt" not in proc.stderr and proc.stderr.count("CK201") == 1
    forced = json.loads(ckpt("serve-flags", MISNESTED, "--fail-on", "none", "-f", "json").stdout)
    assert any("--limit-mm-per-prompt omitted" in n for n in forced["notes"])
