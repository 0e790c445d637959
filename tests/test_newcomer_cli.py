"""Issue 28, the CLI items a new user ran into: mistyped paths sent to the Hub, one unreadable target aborting a
multi-target run, --hardware, -q and stderr, `ckpt fix` hiding what it cannot repair, Ctrl-C at start-up, the GitHub
Actions recipe, and the small ones (-o into /proc, check-serve's served path, completion, help, --fail-on warn,
explain ranking, serve-flags' `command`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corrupt import GENUINE
from tests.repair_helpers import run_cli
from tests.test_cli import FIXTURES, ckpt

ROOT = Path(__file__).resolve().parents[1]
CLEAN = "fixtures/genuine/modelopt-llama-nvfp4"
DEFECTIVE = FIXTURES / "defective"
WEIGHT_ONLY = DEFECTIVE / "llama-nvfp4-missing-input-scales"

# Every command that takes a checkpoint target, with the options it needs to get as far as reading it.
TARGET_COMMANDS = [
    ["doctor"],
    ["inspect"],
    ["serve-flags"],
    ["plan", "--hardware", "h100"],
    ["fix-prefix"],
    ["scrub-nan"],
    ["drop-orphans"],
    ["fix"],
    ["repair", "--resume"],
]


# ---- 1. a target is local or Hub by one rule ---------------------------------------------------------------------
@pytest.mark.parametrize("command", TARGET_COMMANDS, ids=lambda c: c[0])
def test_a_mistyped_relative_path_is_local_with_a_close_match(command, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli([command[0], "fixtures/genuin", *command[1:]], capsys)
    assert code == 2 and out == ""
    assert err == "ckpt: no such folder: fixtures/genuin; did you mean fixtures/genuine?\n"


def test_check_serve_reads_the_mistyped_path_as_local(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, _out, err = run_cli(["check-serve", "fixtures/genuin", "--", "vllm", "serve", "fixtures/genuin"], capsys)
    assert code == 2 and err == "ckpt: no such folder: fixtures/genuin; did you mean fixtures/genuine?\n"


@pytest.mark.parametrize("target", ["./org/name", "../org/name", "/org/name", "~/org/name"])
def test_path_spellings_are_local(target, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cli(["doctor", target], capsys)
    assert code == 2 and err.startswith("ckpt: no such folder: ") and "Hub" not in err


def test_a_bare_repo_id_says_it_was_read_as_one(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", "org/name"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.rstrip().endswith(
        "; treated as Hub repo id org/name (no local folder org/); use ./org/name for a local path"
    )


def test_a_repair_refuses_a_bare_repo_id_saying_how_it_was_read(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cli(["fix-prefix", "org/name@v1"], capsys)
    assert code == 2 and "is on the Hugging Face Hub" in err
    assert err.rstrip().endswith(
        "treated as Hub repo id org/name (no local folder org/); use ./org/name for a local path"
    )


def test_an_existing_first_part_makes_the_target_local(tmp_path, monkeypatch):
    from ckpt_tools.read.hub_target import HubTarget, parse_hub_target

    monkeypatch.chdir(tmp_path)
    assert parse_hub_target("models/llama-nvfp4") == HubTarget("models/llama-nvfp4", None)
    (tmp_path / "models").mkdir()
    assert parse_hub_target("models/llama-nvfp4") is None  # the README's CI example: a folder not yet downloaded
    assert parse_hub_target("hf://models/llama-nvfp4") == HubTarget("models/llama-nvfp4", None)


def test_publish_infers_the_repo_id_by_the_same_rule(tmp_path, monkeypatch):
    from ckpt_tools.serve.publish import infer_repo_id

    monkeypatch.chdir(tmp_path)
    assert infer_repo_id("org/name") == "org/name"
    (tmp_path / "org").mkdir()
    assert infer_repo_id("org/name") is None


# ---- 2. every target of a multi-target run gets its verdict --------------------------------------------------------
def test_one_unreadable_target_is_a_row_not_an_abort(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    targets = sorted(str(p.relative_to(ROOT)) for p in DEFECTIVE.iterdir())  # what `fixtures/defective/*` expands to
    assert "fixtures/defective/MANIFEST.json" in targets
    code, out, err = run_cli(["doctor", *targets, "--fail-on", "none"], capsys)
    assert code == 2  # the worst: a target could not be read
    table = out[out.rindex("\ntarget ") :]
    manifest = "fixtures/defective/MANIFEST.json"
    reason = "not a checkpoint; a target is a checkpoint folder or a .safetensors file"
    assert f"{manifest}" in table and f"could not be read: {reason}" in table
    assert sum(line.endswith(" ok") for line in table.splitlines()) == len(targets) - 1  # the others were judged
    assert err == f"ckpt: {manifest}: {reason}\n"


def test_unreadable_targets_in_json_carry_an_error(capsys, monkeypatch):
    import jsonschema

    monkeypatch.chdir(ROOT)
    code, out, _err = run_cli(["doctor", CLEAN, "nope", "--format", "json"], capsys)
    entries = json.loads(out)
    assert code == 2 and [e["target"] for e in entries] == [CLEAN, "nope"]
    assert entries[1] == {
        "schema_version": 1,
        "tool": entries[0]["tool"],
        "target": "nope",
        "error": "no such folder: nope",
    }
    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    jsonschema.validate(entries[0], schema)
    jsonschema.validate(entries[1], {"$defs": schema["$defs"], "$ref": "#/$defs/unreadable"})


def test_unreadable_targets_in_sarif_are_failed_runs(capsys, monkeypatch):
    import jsonschema

    monkeypatch.chdir(ROOT)
    code, out, _err = run_cli(["doctor", CLEAN, "nope", "--format", "sarif"], capsys)
    log = json.loads(out)
    jsonschema.validate(log, json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))
    failed = log["runs"][1]["invocations"][0]
    assert code == 2 and failed["executionSuccessful"] is False
    assert failed["toolExecutionNotifications"][0]["message"]["text"] == "no such folder: nope"


def test_find_output_is_usable(monkeypatch):
    folders = subprocess.run(
        ["find", "fixtures/genuine", "-name", "config.json", "-printf", "%h\n"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout.split()[:3]
    proc = subprocess.run(
        ["xargs", sys.executable, "-m", "ckpt_tools.cli.main", "doctor", "-q", "--fail-on", "none"],
        input="\n".join(folders) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    assert all(f"\n{folder} " in proc.stdout for folder in folders)


def test_a_file_of_a_checkpoint_folder_names_the_folder(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = f"{CLEAN}/config.json"
    code, _out, err = run_cli(["doctor", config], capsys)
    assert code == 2
    assert err == f"ckpt: {config}: not a checkpoint; give its folder {CLEAN} (or one of its .safetensors files)\n"
