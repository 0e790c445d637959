"""The `ckpt` command as a user runs it: exit codes, one-line errors, formats, colour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corrupt import GENUINE, drop, shards

FIXTURES = GENUINE.parent


def ckpt(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "NO_COLOR": "1", "CKPT_NO_PROGRESS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True, env=full_env, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("ckpt: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_clean_checkpoint_exits_0() -> None:
    proc = ckpt("doctor", str(GENUINE / "modelopt-qwen35moe-nvfp4"))
    assert proc.returncode == 0, proc.stdout
    assert "modelopt NVFP4" in proc.stdout and "--quantization modelopt_fp4" in proc.stdout
    # The kernels are header facts (issue 28 item 4), not a finding: nothing to fix, nothing to note.
    assert "0 error(s), 0 warning(s), 0 info" in proc.stdout and "CK405" not in proc.stdout
    assert "  kernels       vLLM 0.33.0 on gb10, rtx5090: " in proc.stdout


def test_demo_defect_exits_1_with_fix_command() -> None:
    target = FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision"
    proc = ckpt("doctor", str(target))
    assert proc.returncode == 1
    assert "CK201 misnested-prefix" in proc.stdout and f"fix: ckpt fix-prefix {target}" in proc.stdout


def test_fail_on_levels() -> None:
    target = str(GENUINE / "llmc-llama-nvfp4a16")  # one warning (weight-only by design)
    assert ckpt("doctor", target).returncode == 0
    assert ckpt("doctor", target, "--fail-on", "warning").returncode == 1
    assert (
        ckpt("doctor", str(FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision"), "--fail-on", "none").returncode
        == 0
    )


def test_missing_target_exits_2(tmp_path: Path) -> None:
    assert_one_line_error(ckpt("doctor", str(tmp_path / "nope")))


def test_folder_without_safetensors_exits_2(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    proc = ckpt("doctor", str(tmp_path))
    assert_one_line_error(proc)
    assert "no .safetensors file" in proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_target_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    folder.chmod(0)
    try:
        assert_one_line_error(ckpt("doctor", str(folder)))
    finally:
        folder.chmod(0o755)


def test_special_file_target_exits_2(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    proc = ckpt("doctor", str(fifo))
    assert_one_line_error(proc)
    assert "not a regular file" in proc.stderr


def test_bad_usage_exits_2() -> None:
    assert ckpt("doctor", str(GENUINE / "base-llama-bf16"), "--format", "yaml").returncode == 2
    assert_one_line_error(ckpt("doctor", str(GENUINE / "base-llama-bf16"), "--runtime", "vllm-9.9"))
    assert_one_line_error(ckpt("explain", "CK999"))


def test_broken_files_are_findings_not_crashes(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(GENUINE / "llmc-qwen3moe-nvfp4-sharded", folder)
    parts = shards(folder)
    parts[0].write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"1" * 64 + b"\nsize 9\n")
    parts[1].write_bytes(parts[1].read_bytes()[:50])
    parts[2].unlink()
    proc = ckpt("doctor", str(folder), "--format", "json")
    assert proc.returncode == 1 and proc.stderr == ""
    slugs = {f["slug"] for f in json.loads(proc.stdout)["findings"]}
    assert {"lfs-pointer", "invalid-header", "index-missing-shard"} <= slugs


def test_json_report_contract(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(GENUINE / "modelopt-qwen3moe-nvfp4", folder)
    drop(folder, lambda n: n.endswith(".input_scale") and ".experts." in n)
    proc = ckpt("doctor", str(folder), "-f", "json")
    report = json.loads(proc.stdout)
    assert report["schema_version"] == 1 and report["tool"]["name"] == "ckpt" and report["target"] == str(folder)
    required = {
        "producer",
        "quant_algo",
        "vllm_quantization",
        "activation_mode",
        "architecture",
        "model_type",
        "shards",
        "tensors",
        "bytes",
        "kv_cache",
        "components",
    }
    assert required <= set(report["checkpoint"])
    # vLLM builds what the config declares (W4A4); the tensors carry input scales for the dense layers only.
    assert report["checkpoint"]["activation_mode"] == "W4A4"
    assert report["checkpoint"]["disk_activation_mode"] == "mixed"
    for f in report["findings"]:
        assert {"code", "slug", "severity", "message", "files", "tensors", "count", "fix"} <= set(f)
    severities = [f["severity"] for f in report["findings"]]
    order = {"error": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=order.get)
    assert report["summary"] == {s: severities.count(s) for s in ("error", "warning", "info")}


def test_markdown_and_sarif_render() -> None:
    target = str(FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision")
    md = ckpt("doctor", target, "-f", "markdown")
    assert md.returncode == 1 and "| ❌ | CK201 | `misnested-prefix` |" in md.stdout
    sarif = json.loads(ckpt("doctor", target, "-f", "sarif").stdout)
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"][0]["ruleId"] == "CK201"


def test_colour_only_on_tty() -> None:
    proc = ckpt("doctor", str(FIXTURES / "defective" / "qwen35moe-nvfp4-misnested-vision"), env={"NO_COLOR": ""})
    assert "\x1b[" not in proc.stdout  # stdout is a pipe here


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = ckpt("doctor", str(GENUINE / "base-llama-bf16"), "-f", "json", "-o", str(out))
    assert (
        proc.returncode == 0 and proc.stdout == "" and json.loads(out.read_text())["checkpoint"]["producer"] == "none"
    )


def test_single_file_target() -> None:
    proc = ckpt("doctor", str(GENUINE / "llmc-llama-nvfp4" / "model.safetensors"), "-f", "json")
    report = json.loads(proc.stdout)
    assert report["checkpoint"]["shards"] == 1 and report["checkpoint"]["producer"] == "compressed-tensors"


def test_inspect_census_and_listing() -> None:
    proc = ckpt("inspect", str(GENUINE / "llmc-qwen35moe-nvfp4"), "--tensors", "model.visual.blocks.0.attn.*")
    assert proc.returncode == 0
    assert "vision   BF16" in proc.stdout and "model.language_model.layers.0" in proc.stdout
    assert "model.visual.blocks.0.attn.qkv.weight" in proc.stdout
    data = json.loads(ckpt("inspect", str(GENUINE / "llmc-qwen35moe-nvfp4"), "-f", "json", "-t", "lm_head*").stdout)
    assert [t["name"] for t in data["tensors"]] == ["lm_head.weight"]
    assert any(m["declared"] == "W4A4 NVFP4" for m in data["modules"])


def test_rules_and_explain() -> None:
    listing = ckpt("rules").stdout
    assert "CK401  nvfp4-weight-only" in listing
    doc = ckpt("explain", "nan-fp8-scale").stdout
    for heading in ("What it catches", "Why it matters", "Anti-pattern", "Fix"):
        assert heading in doc


@pytest.mark.parametrize(("headers_only", "absent"), [(True, "['numpy', 'torch']"), (False, "['torch']")])
def test_header_path_imports_no_torch_or_numpy(headers_only: bool, absent: str) -> None:
    """The header path imports neither numpy nor torch; the value scan measures with numpy, never torch (run in this
    process here: in a forked child the parent would import neither)."""
    code = (
        f"import sys, ckpt_tools; ckpt_tools.doctor(sys.argv[1], headers_only={headers_only}); "
        "print(sorted(m for m in ('torch', 'numpy') if m not in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(GENUINE / "llmc-qwen35moe-nvfp4")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CKPT_SCAN_IN_THREAD": "1"},
    )
    assert proc.stdout.strip() == absent, proc.stderr


HELP_PROBE = """
import runpy, sys
sys.argv = ["ckpt", *sys.argv[1:]]
try:
    runpy.run_module("ckpt_tools.cli.main", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(code, sorted(m for m in sys.modules
                   if m.split(".")[0] in ("rich", "numpy", "torch", "huggingface_hub", "tqdm", "safetensors")
                   or m.startswith(("ckpt_tools.pipeline", "ckpt_tools.read", "ckpt_tools.rules",
                                    "ckpt_tools.detect"))), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["doctor", "--help"], ["serve-flags", "--help"], []])
def test_help_imports_no_pipeline(args: list[str]) -> None:
    """Printing help registers the commands only: the pipeline, the Hub client, rich and numpy stay unimported."""
    proc = subprocess.run(
        [sys.executable, "-c", HELP_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    code, _, loaded = proc.stderr.strip().splitlines()[-1].partition(" ")
    assert loaded == "[]", proc.stderr
    assert "Usage:" in proc.stdout + proc.stderr and "--help" in proc.stdout + proc.stderr
    assert code in ("0", "2"), proc.stderr  # bare `ckpt` prints help and exits 2 (no_args_is_help)


def test_command_run_imports_no_pydantic() -> None:
    """Option values are coerced without typer's pydantic adapters when they are plain (cli/app.py); a bad value
    still goes through typer's own coercion and its message (test_scripting_and_messages.py covers those)."""
    probe = HELP_PROBE.replace('m.split(".")[0] in (', 'm.split(".")[0] in ("pydantic", ').replace(
        'or m.startswith(("ckpt_tools.pipeline", "ckpt_tools.read", "ckpt_tools.rules",\n'
        '                                    "ckpt_tools.detect"))',
        "",
    )
    target = str(GENUINE / "llmc-qwen35moe-nvfp4")
    for args in (
        ["doctor", target, "--headers-only", "-f", "json", "--fail-on", "none", "--hardware", "gb10"],
        ["serve-flags", target, "--headers-only", "--fail-on", "none"],
    ):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        code, _, loaded = proc.stderr.strip().splitlines()[-1].partition(" ")
        assert "pydantic" not in loaded, proc.stderr
        assert code == "0", proc.stderr


def test_plain_coercion_matches_typer() -> None:
    """Every option and argument of every command: the fast coercion returns what typer's pydantic coercion returns
    (value and type), or defers to it."""
    import click
    from typer._coercion import build_runtime_param
    from typer.main import get_command

    from ckpt_tools.cli.app import _MISS, _plain_coercion
    from ckpt_tools.cli.main import app

    samples = ["x", "", "3", "007", " 4", "1_0", "٣", "json", "JSON", "error", "none", True, False, ("a", "b"), ()]
    root = get_command(app)
    checked = 0
    for name, command in [("", root), *root.commands.items()]:  # type: ignore[attr-defined]
        for param in command.params:
            desc = getattr(param, "type_descriptor", None)
            fast = _plain_coercion(desc.annotation) if desc is not None else None
            if fast is None:
                continue
            ctx = click.Context(command)
            for value in samples:
                got = fast(value)
                if got is _MISS:
                    continue
                want = build_runtime_param(desc)._coerce_value(value, param=param, ctx=ctx)
                assert (type(got), got) == (type(want), want), (name, param.name, value)
                checked += 1
    assert checked > 50


def test_package_import_is_lazy_but_complete() -> None:
    code = (
        "import sys, ckpt_tools; lazy = 'ckpt_tools.pipeline' not in sys.modules; "
        "print(lazy, ckpt_tools.Report.__name__, ckpt_tools.doctor.__module__, ckpt_tools.serve_flags.__module__, "
        "set(ckpt_tools.__all__) <= set(dir(ckpt_tools)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["True", "Report", "ckpt_tools.pipeline", "ckpt_tools.serve", "True"], proc.stderr


CONSOLE_PROBE = """
import sys, time
from ckpt_tools.cli.main import {entry}
sys.argv = ["ckpt", *sys.argv[1:]]
try:
    {entry}()
finally:
    from ckpt_tools.cli.app import State
    print("KEPT", len(State.kept), file=sys.stderr)
"""


@pytest.mark.parametrize(("entry", "kept"), [("console", 1), ("main", 0)])
def test_only_the_console_entry_keeps_the_analysis_until_exit(entry: str, kept: int) -> None:
    """`ckpt` (console) leaves its analysis to process exit; `main()` in a caller's process frees it (a test run
    or an embedding program runs many commands in one process). Output and exit status are the same."""
    target = str(GENUINE / "llmc-qwen35moe-nvfp4")
    args = ["doctor", target, "--headers-only", "-f", "json", "--fail-on", "warning", "--hardware", "h100"]
    proc = subprocess.run(
        [sys.executable, "-c", CONSOLE_PROBE.format(entry=entry), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr  # W4A4 NVFP4 on Hopper: CK405's slow-fallback warning
    assert proc.stderr.strip().splitlines()[-1] == f"KEPT {kept}"
    assert json.loads(proc.stdout)["summary"]["warning"] == 1


SERVE_PROBE = """
import sys
from ckpt_tools.cli.main import console
from ckpt_tools.pipeline import Analysis
sys.argv = ["ckpt", *sys.argv[1:]]
try:
    console()
finally:
    from ckpt_tools.cli.app import State
    [analyses] = State.kept
    print("KEPT", [type(a) is Analysis for a in analyses], file=sys.stderr)
"""


def test_serve_commands_keep_their_analyses_until_exit(tmp_path: Path) -> None:
    """serve-flags and check-serve leave the analyses they judged (the checkpoint's and the drafter's; the plan
    keeps neither) to process exit, as doctor does, and print what the library's `serve_flags` plans."""
    from ckpt_tools.serve import serve_flags
    from ckpt_tools.serve.emitters import argv_line
    from tests.serve.test_serve_flags_and_check_serve import make_drafter

    target = str(GENUINE / "llmc-qwen35moe-nvfp4")
    drafter = make_drafter(tmp_path)
    args = ["serve-flags", target, "--headers-only", "--drafter", str(drafter), "--fail-on", "none"]
    proc = subprocess.run([sys.executable, "-c", SERVE_PROBE, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "KEPT [True, True]"
    plan = serve_flags(target, headers_only=True, drafter=str(drafter))
    assert proc.stdout == argv_line(plan) and "--speculative-config" in proc.stdout

    args = ["check-serve", target, "--headers-only", "-f", "json", "--", *plan.argv]
    proc = subprocess.run([sys.executable, "-c", SERVE_PROBE, *args], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "KEPT [True]", proc.stderr
    assert json.loads(proc.stdout)["suggested_argv"] == list(plan.argv)


@pytest.mark.parametrize("command", ["doctor", "check-serve"])
def test_report_format_choices_are_the_one_list_of_output_formats(command: str) -> None:
    """`--format` of the commands that print a report offers exactly report/renderers.py's formats, in its order."""
    import typer.main

    from ckpt_tools.cli.main import app
    from ckpt_tools.report.renderers import OUTPUT_FORMATS

    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    option = next(p for p in cmd.params if p.name == "format")
    flags, _help = option.get_help_record(cmd.make_context(command, ["x"], resilient_parsing=True))
    assert flags == f"-f, --format [{'|'.join(OUTPUT_FORMATS)}]"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["doctor", str(GENUINE / "llmc-llama-nvfp4"), "--hardwar", "h100"], "No such option: --hardwar"),
        (["doctor"], "Missing argument 'TARGET'"),
        (["explain"], "Missing argument 'CODE'"),
        (["plan", str(GENUINE / "llmc-llama-nvfp4"), "-tp", "x"], "Invalid value for '--tensor-parallel-size'"),
    ],
)
def test_a_usage_mistake_is_one_line(args: list[str], says: str) -> None:
    """An unknown option, a missing argument or a bad value is one `ckpt: ...` line and exit 2, like every other bad
    input (click's own four-line usage block before)."""
    proc = ckpt(*args)
    assert_one_line_error(proc)
    assert says in proc.stderr and "--help`" in proc.stderr and proc.stdout == ""
