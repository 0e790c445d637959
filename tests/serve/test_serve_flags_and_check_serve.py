"""serve-flags / check-serve on genuine fixtures, corrupted copies and adversarial commands."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from ckpt_tools.cli.main import app  # registers every command
from ckpt_tools.errors import UsageError
from ckpt_tools.knowledge.runtimes import runtime, runtime_ids
from ckpt_tools.serve import check_serve, serve_flags
from ckpt_tools.serve.parser import parse_command
from tests.corrupt import GENUINE, edit_json, rename

# The genuine fixture folders (fixtures/genuine/*/config.json), listed directly so the test does not depend on the
# manifest layout.
ENTRIES = sorted(p.parent.name for p in GENUINE.glob("*/config.json"))
pytestmark = pytest.mark.skipif(not ENTRIES, reason="genuine fixtures not built")
QWEN_CT = str(GENUINE / "llmc-qwen35moe-nvfp4")
AWQ = str(GENUINE / "modelopt-llama-nvfp4-awq")
RUNTIMES = ["vllm-0.33", "aeon-v0.23.0", "aeon-v0.26.0", "aeon-v0.27.1"]
MANUAL_TRAPS = (
    "docker run -d --gpus all --ipc host -v ./m:/model:ro -v ./d:/drafter:ro -e VLLM_TEST_FORCE_FP8_MARLIN=1 "
    "--entrypoint vllm ghcr.io/aeon-7/aeon-vllm-ultimate:2026-06-18-v0.23.0-dflashfix serve /model "
    "--quantization modelopt --max-model-len 262144 --max-num-batched-tokens 65536 --gpu-memory-utilization 0.92 "
    "--tool-call-parser qwen3 --enable-auto-tool-choice --kv-cache-dtype fp8 --mamba-block-size 256 "
    "--speculative-config '{\"method\":\"dflash\",\"model\":\"/drafter\",\"num_speculative_tokens\":15,"
    "\"attention_backend\":\"TRITON_ATTN\"}'"
)


def slugs(result) -> set[str]:
    return {f.slug for f in result.findings}


def make_drafter(tmp_path, name="Qwen3.6-35B-A3B-DFlash"):
    """A drafter folder: a tiny genuine checkpoint with a DFlash config (method is read from dflash_config)."""
    from tests.corrupt import copy_fixture

    d = copy_fixture("base-llama-bf16", tmp_path)
    edit_json(d / "config.json", lambda c: c.update(dflash_config={"target_layer_ids": [1]}))
    return d.rename(tmp_path / name)


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_emitted_flag_is_in_the_runtime_table(entry):
    for rid in RUNTIMES:
        plan = serve_flags(str(GENUINE / entry), runtime=rid, hardware="gb10" if rid.startswith("aeon") else None)
        rt = runtime(rid)
        for f in plan.flags:
            info, negated = rt.lookup(f.flag)
            assert info is not None and not negated, (rid, f.flag)
            if info.choices is not None:
                assert info.normalize(f.value) in info.choices, (rid, f.flag, f.value)
            assert f.why and f.source
        if plan.blocked is None:
            # check-serve on the planned command finds nothing about the command, and the same checkpoint
            # findings as serve-flags (one analysis, one verdict).
            checked = check_serve(
                str(GENUINE / entry), [plan.command], runtime=rid, hardware=plan.hardware.id if plan.hardware else None
            ).findings
            assert [f for f in checked if f.code.startswith("CS")] == []
            assert checked == plan.findings


@pytest.mark.parametrize("rid", RUNTIMES)
def test_docker_emit_round_trips_clean(tmp_path, rid):
    drafter = make_drafter(tmp_path)
    plan = serve_flags(QWEN_CT, runtime=rid, hardware="gb10", drafter=str(drafter), container=True)
    from ckpt_tools.serve.emitters import docker_run

    text = docker_run(plan, QWEN_CT, str(drafter))
    result = check_serve(QWEN_CT, [text], hardware="gb10")
    assert result.plan.runtime.id == rid  # the image names the profile
    assert [f for f in result.findings if f.code.startswith("CS")] == []
    assert result.findings == plan.findings  # the checkpoint's own findings (CK502 here), as serve-flags has them
    spec = json.loads(dict(zip(plan.argv, plan.argv[1:], strict=False))["--speculative-config"])
    assert spec["method"] == "dflash" and spec["model"] == "/drafter" and spec["num_speculative_tokens"] == 11


def test_qwen_plan_matches_the_manual():
    plan = serve_flags(QWEN_CT, runtime="aeon-v0.23.0", hardware="gb10")
    args = dict(zip(plan.argv, plan.argv[1:], strict=False))
    assert args["--quantization"] == "compressed-tensors"
    assert args["--tool-call-parser"] == "qwen3_coder" and args["--reasoning-parser"] == "qwen3"
    assert json.loads(args["--limit-mm-per-prompt"]) == {"image": 4, "video": 2}
    assert args["--gpu-memory-utilization"] == "0.85" and args["--max-num-batched-tokens"] == "16384"
    assert args["--max-model-len"] == "4096"
    assert "--kv-cache-dtype" not in plan.argv and "--mamba-block-size" not in plan.argv
    colocated = serve_flags(QWEN_CT, runtime="aeon-v0.23.0", hardware="gb10", colocated=True)
    assert dict(zip(colocated.argv, colocated.argv[1:], strict=False))["--gpu-memory-utilization"] == "0.70"


def test_manual_traps_are_all_found():
    result = check_serve(QWEN_CT, [MANUAL_TRAPS], hardware="gb10")
    assert result.plan.runtime.id == "aeon-v0.23.0"
    assert {
        "env-trap",
        "quantization-mismatch",
        "max-model-len-exceeded",
        "batched-tokens-above-limit",
        "memory-utilization-above-cap",
        "invalid-flag-value",
        "dflash-kv-cache-dtype",
        "dflash-attention-backend",
        "mamba-block-size",
        "speculative-tokens-untuned",
    } <= slugs(result)
    fixes = {f.slug: f.fix for f in result.findings}
    assert fixes["quantization-mismatch"] == "--quantization compressed-tensors"
    assert fixes["invalid-flag-value"] == "--tool-call-parser qwen3_coder"
    assert fixes["memory-utilization-above-cap"] == "--gpu-memory-utilization 0.85"
    assert fixes["max-model-len-exceeded"] == "--max-model-len 4096"
    assert result.report.exit_code("error") == 1


def test_awq_rejected_upstream_loads_on_image():
    upstream = serve_flags(AWQ)
    assert upstream.blocked and "--quantization" not in upstream.argv
    assert set(upstream.alternatives) == {"aeon-v0.26.0", "aeon-v0.27.1"}
    image = serve_flags(AWQ, runtime="aeon-v0.26.0")
    assert (
        image.blocked is None
        and dict(zip(image.argv, image.argv[1:], strict=False))["--quantization"] == "modelopt_fp4"
    )
    result = check_serve(AWQ, ["vllm serve m --quantization modelopt_fp4"])
    # One defect, one finding (issue 28 item 3): doctor's unsupported-quant-algo, with the runtimes that load it.
    (rejected,) = [f for f in result.findings if f.severity == "error"]
    assert (
        rejected.slug == "unsupported-quant-algo" and rejected.fix == f"ckpt serve-flags --runtime aeon-v0.26.0 {AWQ}"
    )
    assert rejected.details["alternatives"] == "aeon-v0.26.0, aeon-v0.27.1"


def test_runtime_ids_come_from_profile_ids():
    assert set(RUNTIMES) <= set(runtime_ids())
    with pytest.raises(UsageError):
        runtime("aeon-vllm-ultimate-2026-06-18-v0.23.0-dflashfix")


def test_misnested_vision_tower_gets_no_limits(tmp_path):
    from tests.corrupt import copy_fixture

    d = copy_fixture("llmc-qwen35moe-nvfp4", tmp_path)
    moved = rename(d, lambda n: n.replace("model.visual.", "model.language_model.visual.", 1))
    assert moved > 0
    plan = serve_flags(str(d))
    assert "--limit-mm-per-prompt" not in plan.argv
    # The defect is misnested-prefix's finding alone (issue 28 item 3): no warning repeats it, or talks of a command
    # that is not printed; a note (shown with --explain) says why a forced command has no image limits.
    assert "misnested-prefix" in {f.slug for f in plan.findings if f.severity == "error"}
    assert not any("misnested" in w or "limit-mm" in w for w in plan.warnings)
    assert any("--limit-mm-per-prompt omitted" in n for n in plan.notes)
    result = check_serve(str(d), [f"vllm serve {d} --limit-mm-per-prompt '{{\"image\":4}}'"])
    assert {f.fix for f in result.findings if f.slug == "mm-limit-without-vision"} == {f"ckpt fix-prefix {d}"}


def test_text_only_checkpoint_rejects_mm_limits():
    result = check_serve(str(GENUINE / "llmc-qwen3moe-nvfp4"), ["vllm serve x --limit-mm-per-prompt '{\"image\":4}'"])
    assert "mm-limit-without-vision" in slugs(result)


def test_weight_only_nvfp4_backend_forcing():
    target = str(GENUINE / "llmc-qwen3moe-nvfp4a16")
    upstream = check_serve(target, ["vllm serve x --linear-backend flashinfer-cutlass --moe-backend cutlass"])
    sev = sorted(f.severity for f in upstream.findings if f.slug == "backend-activation-mismatch")
    assert sev == ["error", "warning"]  # moe raises; linear only falls back upstream (vllm-facts 4.1/4.2)
    image = check_serve(target, ["vllm serve x --linear-backend flashinfer_cutlass"], runtime="aeon-v0.27.1")
    assert [f.severity for f in image.findings if f.slug == "backend-activation-mismatch"] == ["error"]
    w4a4 = check_serve(str(GENUINE / "llmc-qwen3moe-nvfp4"), ["vllm serve x --moe-backend marlin"], hardware="gb10")
    assert "forced-marlin" in slugs(w4a4)


def test_env_vars_per_runtime():
    cmd = ["VLLM_NVFP4_GEMM_BACKEND=cutlass VLLM_NOT_A_THING=1 vllm serve x"]
    assert {"removed-env-var", "unknown-env-var"} <= slugs(check_serve(QWEN_CT, cmd))
    # v0.23.0 still reads VLLM_NVFP4_GEMM_BACKEND (removed in v0.24.0)
    assert "removed-env-var" not in slugs(check_serve(QWEN_CT, cmd, runtime="aeon-v0.23.0"))
    pin = check_serve(QWEN_CT, ["VLLM_USE_V2_MODEL_RUNNER=0 vllm serve x"], runtime="aeon-v0.27.1")
    assert [f.severity for f in pin.findings if f.slug == "env-trap"] == ["info"]


def test_mamba_block_size_rules():
    off = check_serve(QWEN_CT, ["vllm serve x --mamba-block-size 256 --no-enable-prefix-caching"])
    assert [f.severity for f in off.findings if f.slug == "mamba-block-size"] == ["error"]
    on = check_serve(QWEN_CT, ["vllm serve x --mamba-block-size 256 --enable-prefix-caching"])
    assert [f.severity for f in on.findings if f.slug == "mamba-block-size"] == ["warning"]


@pytest.mark.parametrize(
    "command, slug",
    [
        ("vllm serve x --max_model_len 99999", "max-model-len-exceeded"),  # underscores are accepted by vLLM
        ("vllm serve x --max-model-len=8k", "max-model-len-exceeded"),
        ("vllm serve x -q modelopt", "quantization-mismatch"),
        ("vllm serve x --gpu-memory-utilization 1.5", "invalid-flag-value"),
        ("vllm serve x --kv-cache-dtype fp9", "invalid-flag-value"),
        ("vllm serve x --speculative-config '{bad json'", "invalid-flag-value"),
        ("vllm serve x --enable-auto-tool-choice", "auto-tool-choice-without-parser"),
        ("vllm serve x --tool-call-parser gemma4", "parser-mismatch"),
        ("vllm serve x --port 1 --port 2", "duplicate-flag"),
        ("vllm serve x --no-such-flag 3", "unknown-flag"),
        (
            "vllm serve x --speculative-config '{\"model\":\"/drafter\",\"num_speculative_tokens\":3}'",
            "speculative-config-invalid",
        ),
        ("vllm serve x --language-model-only", "vision-disabled"),
    ],
)
def test_single_conflicts(command, slug):
    assert slug in slugs(check_serve(QWEN_CT, [command]))


def test_parser_forms():
    rt = runtime("vllm-0.33")
    cmd = parse_command(
        shlex.split(
            "vllm serve m -tp 2 --speculative-config.method dflash --speculative-config.num_speculative_tokens 11 "
            "--served-model-name a b --enable-prefix-caching -O3"
        ),
        rt,
    )
    assert cmd.model == "m"
    assert cmd.last("--tensor-parallel-size").value == "2"
    assert cmd.json_value("--speculative-config") == {"method": "dflash", "num_speculative_tokens": 11}
    assert cmd.last("--served-model-name").value == "a b"
    assert cmd.last("--optimization-level").value == "3"
    wrapped = parse_command(
        ["docker run --gpus all -e A=1 --entrypoint bash img:1 -lc 'exec vllm serve /model --port 8000'"], rt
    )
    assert wrapped.image == "img:1" and wrapped.model == "/model" and wrapped.env == {"A": "1"}
    with pytest.raises(UsageError):
        parse_command(["ls -la"], rt)
    with pytest.raises(UsageError):
        parse_command(["docker run --gpus"], rt)


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["serve-flags", QWEN_CT, "--format", "json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert {"runtime", "hardware", "argv", "env", "flags", "warnings"} <= set(data)
    assert data["argv"][:3] == ["vllm", "serve", QWEN_CT]
    blocked = runner.invoke(app, ["serve-flags", AWQ])
    assert blocked.exit_code == 1
    card = runner.invoke(app, ["serve-flags", QWEN_CT, "--emit", "model-card", "--runtime", "aeon-v0.27.1"])
    assert card.exit_code == 0 and card.output.startswith("## How to serve")
    compose = runner.invoke(app, ["serve-flags", QWEN_CT, "--emit", "compose"])
    assert "image: \"vllm/vllm-openai:v0.33.0\"" in compose.output
    lint = runner.invoke(
        app, ["check-serve", QWEN_CT, "--format", "json", "--", "vllm", "serve", "x", "--quantization", "modelopt"]
    )
    assert lint.exit_code == 1 and json.loads(lint.output)["findings"][0]["code"] == "CS110"
    clean = runner.invoke(app, ["check-serve", QWEN_CT, "--", "vllm", "serve", "x"])
    assert clean.exit_code == 0
    from ckpt_tools.errors import TargetError

    missing = runner.invoke(app, ["serve-flags", str(tmp_path / "nope")])
    assert isinstance(missing.exception, TargetError)  # main() turns it into one line and exit 2


def test_serve_flags_reads_the_checkpoint_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve-flags is one analysis, doctor's: the headers are read once and the scale values once (the value rules
    are part of the verdict); with headers_only no scale value is read."""
    import ckpt_tools.pipeline as pipeline

    loads: list[str] = []
    scans: list[str] = []
    real_load, real_scan = pipeline.load_checkpoint, pipeline.BackgroundScan
    monkeypatch.setattr(pipeline, "load_checkpoint", lambda source: loads.append(source.label) or real_load(source))
    monkeypatch.setattr(
        pipeline, "BackgroundScan", lambda source, *a, **k: scans.append(source.label) or real_scan(source, *a, **k)
    )
    target = str(GENUINE / "llmc-qwen35moe-nvfp4")
    plan = serve_flags(target, hardware="gb10")
    assert plan.argv and loads == [target] and scans == [target]
    loads.clear(), scans.clear()
    quick = serve_flags(target, hardware="gb10", headers_only=True)
    assert quick.argv == plan.argv and loads == [target] and scans == []
