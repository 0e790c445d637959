"""One analysis, one verdict: serve-flags, check-serve, doctor and the Python API judge a checkpoint the same way
(issue 12). Every test here failed before: serve-flags handed off commands doctor rates as errors, and the two serve
commands disagreed on the same facts."""

from __future__ import annotations

import json
import shlex

import ckpt_tools
from ckpt_tools.serve import check_serve, serve_flags
from tests.cli.test_cli import FIXTURES, ckpt
from tests.corrupt import GENUINE

MISSING_SCALES = str(FIXTURES / "defective" / "llama-nvfp4-missing-input-scales")
MISNESTED = str(FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision")
CLEAN = str(GENUINE / "modelopt-llama-nvfp4")


def test_serve_flags_refuses_a_checkpoint_doctor_rates_error() -> None:
    proc = ckpt("serve-flags", MISSING_SCALES, "--hardware", "gb10")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "CK401 nvfp4-weight-only" in proc.stderr and "--fail-on none" in proc.stderr
    doctor = ckpt("doctor", MISSING_SCALES)
    assert doctor.returncode == 1 and "CK401" in doctor.stdout


def test_serve_flags_fail_on_none_emits_anyway() -> None:
    proc = ckpt("serve-flags", MISSING_SCALES, "--hardware", "gb10", "--fail-on", "none")
    assert proc.returncode == 0
    assert proc.stdout.startswith("vllm serve ") and proc.stdout.count("\n") == 1
    assert "error: CK401" in proc.stderr  # still named, on stderr


def test_serve_flags_refuses_the_misnested_fixture() -> None:
    proc = ckpt("serve-flags", MISNESTED)
    assert proc.returncode == 1 and proc.stdout == "" and "CK201 misnested-prefix" in proc.stderr


def test_activation_mode_is_what_vllm_builds() -> None:
    report = json.loads(ckpt("doctor", MISSING_SCALES, "-f", "json").stdout)
    assert report["checkpoint"]["activation_mode"] == "W4A4"  # the config declares W4A4; vLLM builds W4A4
    assert report["checkpoint"]["disk_activation_mode"] == "W4A16"  # no input scales on disk
    ck401 = next(f for f in report["findings"] if f["code"] == "CK401")
    assert "vLLM builds W4A4" in ck401["message"] and ck401["details"]["builds"] == "W4A4"
    text = ckpt("doctor", MISSING_SCALES, "--hardware", "gb10").stdout
    assert "(activations: W4A4)" in text


def test_marlin_fallback_is_named_everywhere() -> None:
    text = ckpt("doctor", MISSING_SCALES, "--hardware", "h100").stdout
    assert "runs weight-only (Marlin) on h100" in text and "falls back to" in text  # header and CK401
    plan = serve_flags(MISSING_SCALES, hardware="h100")
    assert plan.facts.activation_mode == "W4A4" and "Marlin" in plan.nvfp4_kernel
    # The fallback is CK405's warning, said once: the plan's own warnings do not repeat it (issue 28 item 3).
    assert [f.severity for f in plan.findings if f.code == "CK405"] == ["warning"]
    assert not any("FP4 tensor cores" in w for w in plan.warnings)
    assert plan.to_dict()["checkpoint"]["nvfp4_kernel"] == plan.nvfp4_kernel


def test_explain_no_longer_claims_weight_only_for_a_w4a4_config() -> None:
    proc = ckpt("serve-flags", MISSING_SCALES, "--hardware", "gb10", "--explain", "--fail-on", "none")
    assert "weight-only NVFP4 layers" not in proc.stdout
    assert "vLLM builds W4A4" in proc.stdout


def test_image_on_wrong_gpu_is_one_error_in_both_commands() -> None:
    sf = ckpt("serve-flags", CLEAN, "--runtime", "aeon-v0.27.1", "--hardware", "h100")
    assert sf.returncode == 1 and "CS180 runtime-hardware-mismatch" in sf.stderr
    cs = ckpt("check-serve", CLEAN, "--runtime", "aeon-v0.27.1", "--hardware", "h100", "--", "vllm", "serve", CLEAN)
    assert cs.returncode == 1 and "CS180 runtime-hardware-mismatch" in cs.stdout


def test_long_context_same_severity_in_both_commands() -> None:
    """serve-flags never opts into VLLM_ALLOW_LONG_MAX_MODEL_LEN for the user (issue 28 item 3): its command is the
    one vLLM refuses, an error there as in check-serve on that very command (and `ckpt plan`'s "fits NO")."""
    plan = serve_flags(CLEAN, max_model_len=229376)
    [finding] = [f for f in plan.findings if f.slug == "max-model-len-exceeded"]
    assert finding.severity == "error" and plan.env == {} and plan.exit_code() == 1
    forced = ckpt("serve-flags", CLEAN, "--max-model-len", "229376", "--fail-on", "none").stdout.strip()
    checked = check_serve(CLEAN, shlex.split(forced))
    assert [(f.code, f.severity, f.message) for f in checked.findings if f.slug == "max-model-len-exceeded"] == [
        ("CS120", "error", finding.message)
    ]
    # With the variable set on the command, vLLM starts: a warning.
    allowed = check_serve(CLEAN, ["env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", *shlex.split(forced)])
    assert [f.severity for f in allowed.findings if f.slug == "max-model-len-exceeded"] == ["warning"]


def test_check_serve_carries_doctors_findings() -> None:
    result = check_serve(MISSING_SCALES, f"vllm serve {MISSING_SCALES}", hardware="gb10")
    assert "CK401" in {f.code for f in result.findings} and result.report.exit_code("error") == 1


def test_api_uses_the_same_analysis() -> None:
    report = ckpt_tools.doctor(MISSING_SCALES, hardware=["gb10"])
    plan = ckpt_tools.serve_flags(MISSING_SCALES, hardware="gb10")
    checked = ckpt_tools.check_serve(MISSING_SCALES, plan.command, hardware="gb10")
    doctor_codes = [(f.code, f.severity) for f in report.findings]
    assert doctor_codes == [(f.code, f.severity) for f in plan.findings if f.code.startswith("CK")]
    assert doctor_codes == [(f.code, f.severity) for f in checked.findings if f.code.startswith("CK")]
    assert plan.exit_code("error") == report.exit_code("error") == 1
    data = plan.to_dict()
    assert data["summary"]["error"] == 1 and data["findings"][0]["code"] == "CK401"


def test_check_serve_returns_a_report_with_the_clis_verdict() -> None:
    """`ckpt_tools.check_serve` returns the `Report` the README documents: its summary, exit code and JSON are the
    CLI's, and the attributes of earlier releases (`report`, `plan`) still answer."""
    command = f"vllm serve {MISSING_SCALES}"
    result = ckpt_tools.check_serve(MISSING_SCALES, command, hardware="gb10")
    cli = ckpt("check-serve", MISSING_SCALES, "--hardware", "gb10", "-f", "json", "--", *shlex.split(command))
    assert isinstance(result, ckpt_tools.Report)
    assert result.summary == json.loads(cli.stdout)["summary"] and result.summary["error"] >= 1
    assert result.exit_code("error") == cli.returncode == 1 and result.exit_code("none") == 0
    assert json.loads(result.render("json")) == json.loads(cli.stdout)
    assert result.report is result and result.plan is not None and result.plan.argv[:2] == ("vllm", "serve")
