"""Regressions found by the adversarial QA pass: odd names, odd configs, odd folders and odd commands that once made
`ckpt` crash, hang or give a wrong verdict. Each test names the input that broke it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ckpt_tools
from ckpt_tools.write.header import build_file
from tests.cli.test_cli import assert_one_line_error, ckpt
from tests.corrupt import GENUINE, edit_json


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_top_level_scale_without_dot_is_an_orphan_not_a_crash(tmp_path: Path) -> None:
    # A tensor named `weight_scale` (no module prefix) once raised KeyError('.weight_scale') in orphan-scale.
    (tmp_path / "model.safetensors").write_bytes(
        build_file(
            [
                ("weight_scale", "F32", [1], b"\0" * 4),
                ("model.layers.0.mlp.down_proj.weight", "BF16", [2], b"\0" * 4),
            ]
        )
    )
    report = ckpt_tools.doctor(tmp_path)
    orphan = next(f for f in report.findings if f.code == "CK302")
    assert list(orphan.tensors) == ["weight_scale"]


@pytest.mark.parametrize("groups, why", [({}, "`config_groups` is empty"), ([1], "`config_groups` is not an object")])
def test_compressed_tensors_config_that_quantizes_nothing_on_quantized_tensors(fixture_copy, groups, why) -> None:
    # An FP8 checkpoint whose config_groups were emptied (or written as a list) once got "No findings": CK301 stands
    # aside when nothing is declared quantized and CK304 only looked at a missing config.
    folder = fixture_copy("llmc-llama-fp8-dynamic")
    edit_json(folder / "config.json", lambda c: c["quantization_config"].__setitem__("config_groups", groups))
    report = ckpt_tools.doctor(folder)
    finding = next(f for f in report.findings if f.code == "CK304")
    assert finding.severity == "error" and why in finding.message
    assert "model.layers.0.self_attn.q_proj" in finding.tensors
    assert report.exit_code("error") == 1


def test_modelopt_exclude_everything_on_quantized_tensors(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-fp8")
    for name in ("config.json", "hf_quant_config.json"):

        def exclude_all(c: dict) -> None:
            q = c.get("quantization_config") or c.get("quantization") or c
            q["exclude_modules"] = ["*"]
            q.pop("ignore", None)

        if (folder / name).exists():
            edit_json(folder / name, exclude_all)
    finding = next(f for f in ckpt_tools.doctor(folder).findings if f.code == "CK304")
    assert "covered by `*`" in finding.message


def test_gptq_style_checkpoint_is_not_reported_as_quantizing_nothing(fixture_copy) -> None:
    # The new CK304 branch is for producers whose layers ckpt resolves; other methods (gptq, awq) are not judged.
    folder = fixture_copy("llmc-llama-w4a16")
    edit_json(
        folder / "config.json", lambda c: c.__setitem__("quantization_config", {"quant_method": "gptq", "bits": 4})
    )
    assert not [f for f in ckpt_tools.doctor(folder).findings if "quantizes none" in f.message]


@pytest.mark.parametrize(
    "entry, name, excluded",
    [
        ("*", "model.layers.0.mlp.down_proj", True),  # vLLM keeps a bare `*` (len < 2): fnmatch excludes everything
        ("", "model.layers.0.mlp.down_proj", True),  # `"" in prefix` is true for every module
        ("model.layers.0*", "model.layers.0", True),  # split into `model.layers.0` and `model.layers.0.*`
        ("model.layers.0*", "model.layers.0.mlp.down_proj", True),
        ("lm_head", "model.layers.0.mlp.down_proj", False),
    ],
)
def test_modelopt_exclude_matching_follows_vllm_mapper(entry: str, name: str, excluded: bool) -> None:
    # A bare `*` was split into `` and `.*` (vLLM only splits entries of two or more characters) and empty entries
    # were skipped, so `exclude_modules: ["*"]` excluded nothing here and everything in vLLM.
    from ckpt_tools.detect.matching import modelopt_excluded_by, modelopt_patterns
    from ckpt_tools.knowledge.architectures import family_for

    patterns = modelopt_patterns([entry], family_for("LlamaForCausalLM", "llama"))
    assert (modelopt_excluded_by(patterns, name) is not None) is excluded


def test_exclude_lists_of_equal_length_name_the_entries_that_differ(fixture_copy) -> None:
    # Two different exclude lists of the same length once read "exclude list = 2 entries, ... says 2 entries".
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(
        folder / "hf_quant_config.json",
        lambda c: c["quantization"].__setitem__("exclude_modules", ["lm_head", "model.layers.0.mlp*"]),
    )
    finding = next(f for f in ckpt_tools.doctor(folder).findings if f.details.get("field") == "exclude list")
    assert "only in hf_quant_config.json: `model.layers.0.mlp*`" in finding.message
    assert "2 entries" not in finding.message
    assert finding.details["hf_quant_config.json"] == ["lm_head", "model.layers.0.mlp*"]


def test_missing_quant_algo_in_hf_quant_config_reads_none_not_python_none(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(folder / "hf_quant_config.json", lambda c: c.__setitem__("quantization", "NVFP4"))
    finding = next(f for f in ckpt_tools.doctor(folder).findings if f.details.get("field") == "quant_algo")
    assert "hf_quant_config.json says (none)" in finding.message and "None" not in finding.message


def test_dangling_shard_symlink_is_reported_unreadable_not_missing(fixture_copy, tmp_path: Path) -> None:
    # An HF cache snapshot whose blob is gone: the shard link dangles. It was skipped as "not a file", so a sharded
    # checkpoint got "the index names a shard that does not exist" and a single-file one "no .safetensors file".
    folder = fixture_copy("llmc-qwen3moe-nvfp4-sharded")
    (folder / "model-00002-of-00003.safetensors").unlink()
    (folder / "model-00002-of-00003.safetensors").symlink_to(tmp_path / "blobs" / "gone")
    report = ckpt_tools.doctor(folder)
    assert codes(report) == ["CK104"]
    assert "broken symbolic link" in report.findings[0].message
    single = tmp_path / "single"
    single.mkdir()
    (single / "model.safetensors").symlink_to(tmp_path / "blobs" / "gone")
    found = codes(ckpt_tools.doctor(single))  # plus unsupported-architecture: the folder has no config.json
    assert "CK104" in found and "CK102" not in found


def test_symlink_loop_names_the_file_instead_of_failing_to_list_the_folder(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(build_file([("model.norm.weight", "BF16", [2], b"\0" * 4)]))
    (tmp_path / "a.safetensors").symlink_to("b.safetensors")
    (tmp_path / "b.safetensors").symlink_to("a.safetensors")
    report = ckpt_tools.doctor(tmp_path)
    broken = sorted(f.files[0] for f in report.findings if f.code == "CK104")
    assert broken == ["a.safetensors", "b.safetensors"]
    assert report.checkpoint["tensors"] == 1


def test_single_file_target_reads_the_configs_beside_it() -> None:
    # `ckpt doctor folder/model.safetensors` once ignored config.json and reported a genuine checkpoint as
    # "quantized tensors but neither config.json nor hf_quant_config.json declares a quantization".
    report = ckpt_tools.doctor(GENUINE / "modelopt-llama-nvfp4" / "model.safetensors")
    assert [f.code for f in report.findings] == []  # clean: the kernels are header facts, not findings
    assert report.checkpoint["architecture"] == "LlamaForCausalLM"
    assert report.checkpoint["vllm_quantization"] == "modelopt_fp4"


def test_one_shard_of_a_sharded_checkpoint_is_refused_by_doctor_and_serve_flags_but_inspected() -> None:
    shard = GENUINE / "llmc-qwen3moe-nvfp4-sharded" / "model-00001-of-00003.safetensors"
    for args in (["doctor"], ["serve-flags"], ["fix", "--dry-run"]):
        proc = ckpt(*args, str(shard))
        assert_one_line_error(proc)
        assert "one shard of the sharded checkpoint" in proc.stderr and "names 3 shards" in proc.stderr
    proc = ckpt("inspect", str(shard), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["checkpoint"]["architecture"] == "Qwen3MoeForCausalLM"


def test_enum_options_accept_any_case_and_inspect_refuses_report_only_formats() -> None:
    target = str(GENUINE / "llmc-llama-nvfp4a16")  # one warning: weight-only by design
    proc = ckpt("doctor", target, "--format", "JSON", "--fail-on", "Warning")
    assert proc.returncode == 1 and json.loads(proc.stdout)["schema_version"] == 1
    assert ckpt("serve-flags", target, "--emit", "Docker", "-f", "TEXT").stdout.startswith("docker run")
    assert json.loads(ckpt("inspect", target, "-f", "Json").stdout)["census"]
    # inspect once accepted markdown / sarif and printed text: a format it cannot render is a usage error now.
    proc = ckpt("inspect", target, "-f", "sarif")
    assert proc.returncode == 2 and not proc.stdout


@pytest.mark.parametrize(
    "args, verdict",
    [
        (["doctor", str(GENUINE / "base-llama-bf16")], 0),
        (["doctor", str(GENUINE.parent / "defective" / "llama-nvfp4-missing-input-scales")], 1),
        (["serve-flags", str(GENUINE / "base-llama-bf16")], 0),
        (["rules"], 0),
    ],
)
def test_reader_gone_keeps_the_verdict_exit_code(args: list[str], verdict: int) -> None:
    # `ckpt doctor X | head -1` on a clean checkpoint exited 1: typer turns EPIPE into exit 1 whatever the verdict.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_tools.cli.main", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == verdict and proc.stderr == ""


def test_closed_stdout_is_not_an_internal_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(GENUINE / "base-llama-bf16")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize("env, coloured", [({}, True), ({"TERM": "dumb"}, False), ({"NO_COLOR": "1"}, False)])
def test_colour_only_on_a_capable_terminal(env: dict, coloured: bool) -> None:
    import pty

    leader, follower = pty.openpty()
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    target = str(GENUINE.parent / "defective" / "llama-nvfp4-missing-input-scales")
    try:
        subprocess.run(
            [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", target, "--hardware", "h100"],
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env={**clean, "TERM": "xterm", **env},
            timeout=120,
        )
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO once the follower side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    assert b"CK401" in out and (b"\x1b[" in out) is coloured


def test_serve_flags_explanations_never_print_python_none() -> None:
    # aeon-v0.26.0 records no gpu_memory_utilization default: the gb10 reason read "the runtime's default is None".
    proc = ckpt(
        "serve-flags", str(GENUINE / "base-llama-bf16"), "--runtime", "aeon-v0.26.0", "--hardware", "gb10", "--explain"
    )
    assert proc.returncode == 0 and "--gpu-memory-utilization" in proc.stdout
    assert "None" not in proc.stdout


def test_unknown_env_var_message_reads_as_english() -> None:
    from ckpt_tools.serve import check_serve

    target = str(GENUINE / "base-llama-bf16")
    finding = next(
        f
        for f in check_serve(target, ["VLLM_USE_V1=0", "vllm", "serve", target]).findings
        if f.slug == "unknown-env-var"
    )
    assert finding.message.startswith("VLLM_USE_V1 is not an environment variable of upstream vLLM")


def test_ignore_list_finding_names_the_covering_entry_and_the_key_the_config_uses(fixture_copy) -> None:
    # Read "`q_proj` (q_proj). Remove the entries from `exclude_modules / ignore`": the entry looked like a repeat of
    # the module name and the key was a guess. ModelOpt's config.json writes `ignore`.
    folder = fixture_copy("modelopt-llama-nvfp4")
    edit_json(
        folder / "config.json", lambda c: c["quantization_config"]["ignore"].append("model.layers.1.mlp.down_proj")
    )
    finding = next(
        f
        for f in ckpt_tools.doctor(folder).findings
        if f.code == "CK301" and f.details.get("direction") == "declared-unquantized-disk-quantized"
    )
    assert "`model.layers.1.mlp.down_proj` (covered by `model.layers.1.mlp.down_proj`)" in finding.message
    assert "Remove those entries from `ignore`" in finding.message and "exclude_modules / ignore" not in finding.message


def test_kv_and_component_messages_use_plain_words_and_json_values(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4-fp8kv")
    edit_json(folder / "config.json", lambda c: c["quantization_config"].pop("kv_cache_scheme", None))
    edit_json(folder / "config.json", lambda c: c.__setitem__("attention_bias", True))
    messages = [f.message for f in ckpt_tools.doctor(folder).findings]
    kv = next(m for m in messages if "hf_quant_config.json declares" in m)
    assert kv.startswith("config.json declares no KV-cache quantization, hf_quant_config.json declares fp8 KV-cache")
    assert any("(`attention_bias` = true)" in m for m in messages)


@pytest.mark.parametrize("algo, says", [(7, "(quant_algo 7)"), (None, "Missing 'quant_algo' in quantization config")])
def test_modelopt_rejection_quotes_the_algo_as_vllm_does(fixture_copy, algo, says) -> None:
    # A non-string quant_algo read "(quant_algo None)"; vLLM does str(algo).upper(), and a missing one has its own
    # error (ModelOptQuantConfigBase.from_config).
    folder = fixture_copy("modelopt-llama-fp8")
    (folder / "hf_quant_config.json").unlink()
    edit_json(folder / "config.json", lambda c: c["quantization_config"].__setitem__("quant_algo", algo))
    report = ckpt_tools.doctor(folder)
    assert says in report.checkpoint["rejection"] and "None" not in report.checkpoint["rejection"]
    assert "CK310" in codes(report)
