"""Issue 28, the CLI items a new user ran into: mistyped paths sent to the Hub, one unreadable target aborting a
multi-target run, --hardware, -q and stderr, `ckpt fix` hiding what it cannot repair, Ctrl-C at start-up, the GitHub
Actions recipe, and the small ones (-o into /proc, check-serve's served path, completion, help, --fail-on warn,
explain ranking, serve-flags' `command`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import FIXTURES, ckpt
from tests.repair_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
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


# ---- 6. one --hardware parser --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spelling",
    [["--hardware", "gb10,H100"], ["--hardware", "gb10", "--hardware", "h100"], ["--hardware", "gb10,h100,gb10"]],
)
def test_hardware_is_repeatable_and_comma_separated_in_doctor_and_inspect(spelling, capsys, monkeypatch):
    import ckpt_tools.census
    import ckpt_tools.pipeline

    monkeypatch.chdir(ROOT)
    asked = []
    analyze, inspection = ckpt_tools.pipeline.analyze, ckpt_tools.census.inspection

    def recording_analyze(target, **options):
        asked.append(("doctor", tuple(options.get("hardware_ids", ()))))
        return analyze(target, **options)

    def recording_inspection(analysis, tensors, hardware=()):
        asked.append(("inspect", tuple(hardware)))
        return inspection(analysis, tensors, hardware=hardware)

    monkeypatch.setattr(ckpt_tools.pipeline, "analyze", recording_analyze)
    monkeypatch.setattr(ckpt_tools.census, "inspection", recording_inspection)
    assert run_cli(["doctor", CLEAN, "--fail-on", "none", *spelling], capsys)[0] == 0
    assert run_cli(["inspect", CLEAN, *spelling], capsys)[0] == 0
    assert [a for a in asked if a[1]] == [("doctor", ("gb10", "h100")), ("inspect", ("gb10", "h100"))]


@pytest.mark.parametrize("command", [["plan"], ["serve-flags"], ["check-serve", "--", "vllm", "serve", CLEAN]])
def test_one_profile_commands_take_the_same_spellings(command, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    for spelling in (["--hardware", "gb10,h100"], ["--hardware", "gb10", "--hardware", "h100"]):
        code, _out, err = run_cli([command[0], CLEAN, *spelling, *command[1:]], capsys)
        assert code == 2
        assert err == f"ckpt: {command[0]} runs on one hardware profile; --hardware got gb10, h100: give one\n"
    verdict = [] if command[0] == "plan" else ["--fail-on", "none"]
    code, _out, err = run_cli([command[0], CLEAN, "--hardware", " GB10, ", *verdict, *command[1:]], capsys)
    assert code == 0, err


@pytest.mark.parametrize("command", ["doctor", "inspect", "plan", "serve-flags", "check-serve"])
def test_hardware_help_is_one_text(command):
    text = " ".join(ckpt(command, "--help").stdout.split()).replace("- ", "-")  # words the help broke at a hyphen
    assert "--hardware ID Hardware profile(s) gb10, rtx5090, b200, h200, h100, any case; repeatable or " in text
    assert "comma-separated (--hardware gb10,h100)." in text


# ---- 7. -q: the product on stdout, unchanged; nothing else on stderr -----------------------------------------------
MISNESTED = "fixtures/defective/qwen35moe-nvfp4-misnested-vision"
QUIET_RUNS = [  # every command, on a run that prints notes or warnings on stderr without -q where it has any
    ["doctor", CLEAN, "--hardware", "h100", "--fail-on", "none"],
    ["doctor", CLEAN, MISNESTED, "--fail-on", "none"],
    ["inspect", CLEAN],
    ["plan", CLEAN, "--hardware", "h100"],
    ["serve-flags", CLEAN, "--hardware", "h100", "--fail-on", "none"],
    ["check-serve", CLEAN, "--fail-on", "none", "--", "vllm", "serve", CLEAN],
    ["fix-prefix", MISNESTED, "--dry-run"],
    ["scrub-nan", CLEAN, "--dry-run"],
    ["drop-orphans", CLEAN, "--dry-run"],
    ["fix", MISNESTED, "--dry-run"],
    ["rules"],
    ["explain", "CK401"],
]


@pytest.mark.parametrize("args", QUIET_RUNS, ids=lambda a: a[0])
@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_keeps_stdout_and_silences_stderr(args, where, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _err = run_cli(args, capsys)
    quiet = ["-q", *args] if where == "before" else [args[0], "-q", *args[1:]]
    assert run_cli(quiet, capsys) == (code, out, "")  # the product, first line included, is the same


def test_plan_notes_go_to_stderr(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(["plan", CLEAN, "--hardware", "h100"], capsys)
    assert code == 0 and "notes:" not in out and err.startswith("notes:\n  - reserve is an estimate")


# ---- 8. ckpt fix says what it leaves, and exits by it ---------------------------------------------------------------
def test_fix_reports_what_it_cannot_repair(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = str(WEIGHT_ONLY.relative_to(ROOT))
    code, out, _err = run_cli(["fix", target], capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[:4] == [
        f"ckpt fix {target}",
        "nothing to do: no finding with an automatic repair",
        "",
        "left: 1 error(s), 0 warning(s), 0 info",
    ]
    assert lines[4].startswith("  ERROR   CK401 nvfp4-weight-only: config.json declares NVFP4 input activations")
    assert run_cli(["fix", target, "--fail-on", "none"], capsys)[0] == 0
    data = json.loads(run_cli(["fix", target, "--format", "json"], capsys)[1])
    assert data["left"]["summary"]["error"] == 1 and data["left"]["findings"][0]["code"] == "CK401"


def test_fix_dry_run_shows_the_whole_chain(tmp_path, capsys):
    from tests.corrupt import patch_tensor_bytes
    from tests.repair.test_fix_all import NAN_SCALE
    from tests.repair_helpers import MISNESTED_FIXTURE, copy_of

    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, NAN_SCALE, {1: 0x7F})
    code, out, err = run_cli(["fix", folder, "-n"], capsys)
    assert code == 0, err
    assert out.startswith(f"ckpt fix {folder} -n\n")  # the command as given, --dry-run spelling included
    assert "ckpt scrub-nan" in out and "ckpt fix-prefix" in out
    left = out[out.index("would be left after the whole chain (predicted): ") :]
    assert left.startswith("would be left after the whole chain (predicted): 0 error(s), 1 warning(s)")
    assert "CK201" not in left and "CK501" not in left  # each repaired by one job of the chain


# ---- 9. Ctrl-C at any instant: `ckpt: interrupted`, exit 130 -------------------------------------------------------
def _swallowing_every_check(monkeypatch):
    """`ckpt rules` with a library in it that swallows a Ctrl-C (as a `try: ... except BaseException` would)."""
    import signal

    import ckpt_tools.docs

    every_check = ckpt_tools.docs.every_check

    def swallowing():
        try:  # noqa: SIM105 - what such a library does, written out
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return every_check()

    monkeypatch.setattr(ckpt_tools.docs, "every_check", swallowing)


def test_a_swallowed_interrupt_still_ends_the_run(capsys, monkeypatch):
    _swallowing_every_check(monkeypatch)
    assert run_cli(["rules"], capsys) == (130, "", "ckpt: interrupted\n")


def test_an_interrupt_python_wraps_is_still_an_interrupt(capsys, monkeypatch):
    """Ctrl-C inside a class body being imported: Python 3.11 raises `RuntimeError: Error calling __set_name__`."""
    import signal

    import ckpt_tools.docs

    class Interrupted:
        def __set_name__(self, owner, name):
            signal.raise_signal(signal.SIGINT)

    def importing():
        type("Runtime", (), {"field": Interrupted()})
        return []

    monkeypatch.setattr(ckpt_tools.docs, "every_check", importing)
    assert run_cli(["rules"], capsys) == (130, "", "ckpt: interrupted\n")


def test_an_interrupted_repair_names_resume_and_rollback(tmp_path, capsys, monkeypatch):
    import signal

    import ckpt_tools.repair.execute
    from tests.repair_helpers import MISNESTED_FIXTURE, copy_of

    folder = copy_of(MISNESTED_FIXTURE, tmp_path)

    def interrupted(name: str) -> None:
        if name == "step0:before":  # the journal is on disk: Ctrl-C as the first header is about to be written
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(ckpt_tools.repair.execute, "crashpoint", interrupted)
    code, out, err = run_cli(["fix-prefix", folder], capsys)
    assert (code, out) == (130, "")
    assert err == (
        "ckpt: interrupted\n"
        f"ckpt: the repair of {folder} stopped part-way and left its journal; finish it with "
        f"`ckpt repair --resume {folder}`, or undo it with `ckpt repair --rollback {folder}`\n"
    )
    monkeypatch.undo()
    assert run_cli(["repair", "--resume", folder], capsys)[0] == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_timed_interrupts_at_spread_instants():
    """SIGINT at 40 instants spread over a doctor run, from the moment the `ckpt` code runs (its handler is installed
    before the app is imported; the interpreter's own start-up before that is Python's) through imports, reading,
    judging and printing: each run ends interrupted (one line, 130) or, when the signal came after the verdict was
    settled, exactly as an uninterrupted run; never an internal error, a traceback or another exit code."""
    import signal
    import time

    from tests.cli.test_scripting_and_messages import _maps, _wait_for

    args = [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(WEIGHT_ONLY)]
    env = {**os.environ, "NO_COLOR": "1", "CKPT_NO_PROGRESS": "1"}

    def started() -> tuple[subprocess.Popen, float]:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        _wait_for(lambda: "lib-dynload/_bz2" in _maps(proc.pid) or proc.poll() is not None)  # the app's import
        return proc, time.perf_counter()

    proc, since = started()
    out, err = proc.communicate(timeout=120)
    rest = time.perf_counter() - since
    assert proc.returncode == 1, err  # CK401 is an error: a run that finishes is told apart from an interrupted one
    normal = (1, out, err)
    outcomes = {"interrupted": 0, "finished": 0}
    for i in range(40):
        proc, _ = started()
        time.sleep(rest * 1.2 * i / 40)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 130:
            assert (out, err) == ("", "ckpt: interrupted\n") or (out == normal[1] and err == "ckpt: interrupted\n")
            outcomes["interrupted"] += 1
        else:
            assert (proc.returncode, out, err) == normal, (i, proc.returncode, err)
            outcomes["finished"] += 1
    assert outcomes["interrupted"] >= 10, outcomes  # the spread reached into the run (timing varies with the load)


# ---- 10. the GitHub Actions recipe runs as written ------------------------------------------------------------------
def _first_workflow(doc: str) -> dict:
    import yaml

    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def test_no_recipe_installs_from_a_package_index():
    doc = (ROOT / "docs" / "github-actions.md").read_text()
    installs = [line.split("run:", 1)[1].strip() for line in doc.splitlines() if "run: pip install" in line]
    assert installs and set(installs) == {"pip install ./.ckpt-tools"}


def test_github_actions_recipe_runs_as_written(tmp_path):
    """The first workflow of docs/github-actions.md, step by step, offline: the model repository checkout is a
    fixture under the path the recipe names, the ckpt-tools checkout is this project's files, setup-python is a
    fresh virtualenv, every `run:` runs in bash as the runner would, and the SARIF file it uploads is valid."""
    import re
    import shutil

    import jsonschema

    from ckpt_tools.report.sarif import INFO_URI
    from tests import wheelhouse
    from tests.corrupt import copy_fixture

    doc = (ROOT / "docs" / "github-actions.md").read_text()
    steps = _first_workflow(doc)["jobs"]["ckpt"]["steps"]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    wheels = tmp_path / "wheels"
    project = __import__("tomllib").loads((ROOT / "pyproject.toml").read_text())
    wheelhouse.build(wheels, [*project["build-system"]["requires"], *project["project"]["dependencies"]])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUALENV_", "PYTHON"))}
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels), PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    uploaded = []
    for step in steps:
        uses, given = step.get("uses", ""), step.get("with") or {}
        if uses.startswith("actions/checkout@") and "repository" not in given:
            models = sorted(set(re.findall(r"\bmodels/[\w.-]+", doc)))
            for folder in models:  # the model repository: a genuine checkpoint at each path the recipe names
                copy_fixture("modelopt-llama-nvfp4", workspace / "models")
                (workspace / "models" / "modelopt-llama-nvfp4").rename(workspace / folder)
        elif uses.startswith("actions/checkout@"):
            assert INFO_URI.endswith("/" + given["repository"])  # the repository the project names as its home
            into = workspace / given["path"]
            into.mkdir()
            for name in ("pyproject.toml", "README.md"):
                shutil.copy2(ROOT / name, into / name)
            for name in ("ckpt_tools", "rules"):
                shutil.copytree(ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif uses.startswith("actions/setup-python@"):
            venv = tmp_path / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
        elif uses.startswith("github/codeql-action/upload-sarif@"):
            uploaded.append(workspace / given["sarif_file"])
        elif "run" in step:
            done = subprocess.run(
                ["bash", "-e", "-c", step["run"]], cwd=workspace, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, (step["run"], done.stdout[-2000:], done.stderr[-2000:])
        else:
            raise AssertionError(f"a step this test does not know how to run: {step}")
    assert uploaded, "the recipe uploads no SARIF file"
    schema = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
    for sarif in uploaded:
        log = json.loads(sarif.read_text())
        jsonschema.validate(log, schema)
        assert log["runs"][0]["properties"]["target"] == "models/llama-nvfp4"


# ---- 11. the small ones ---------------------------------------------------------------------------------------------
def test_output_into_an_unwritable_folder_says_so(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, _out, err = run_cli(["doctor", CLEAN, "-o", "/proc/r.json"], capsys)
    assert (code, err) == (2, "ckpt: cannot write /proc/r.json: the folder /proc is not writable\n")


def test_check_serve_notices_another_served_folder(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    other = "fixtures/genuine/base-llama-bf16"
    code, out, _err = run_cli(["check-serve", CLEAN, "--", "vllm", "serve", other], capsys)
    assert code == 1
    assert (
        f"ERROR   CS107 served-model-mismatch\n        the command serves {other}, not the checked {CLEAN}: this "
        "report says nothing about the checkpoint it would load\n"
        f"        fix: ckpt check-serve {other} -- ...\n"
    ) in out
    assert run_cli(["check-serve", CLEAN, "--", "vllm", "serve", f"./{CLEAN}/"], capsys)[0] == 0


def test_check_serve_compares_hub_repos(tmp_path, capsys):
    from ckpt_tools.serve import check_serve
    from tests.corrupt import copy_fixture

    snapshot = tmp_path / "models--acme--llama" / "snapshots" / "0123abcd"  # a Hugging Face cache snapshot
    snapshot.parent.mkdir(parents=True)
    copy_fixture("modelopt-llama-nvfp4", snapshot.parent).rename(snapshot)
    codes = lambda served: [f.code for f in check_serve(str(snapshot), f"vllm serve {served}").findings]  # noqa: E731
    assert "CS107" not in codes("acme/llama")
    assert "CS107" in codes("acme/other")


def _complete(*words: str) -> list[str]:
    env = {
        **os.environ,
        "_CKPT_COMPLETE": "complete_bash",
        "COMP_WORDS": " ".join(words),
        "COMP_CWORD": str(len(words) - 1),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    return proc.stdout.split()


def test_completion_of_hardware_runtime_and_rule_codes():
    assert _complete("ckpt", "doctor", CLEAN, "--hardware", "h") == ["h200", "h100"]
    assert _complete("ckpt", "plan", CLEAN, "--hardware", "gb10,r") == ["gb10,rtx5090"]
    assert _complete("ckpt", "serve-flags", CLEAN, "--runtime", "aeon") == [
        "aeon-v0.23.0",
        "aeon-v0.26.0",
        "aeon-v0.27.1",
    ]
    assert _complete("ckpt", "explain", "CS12") == ["CS120", "CS121", "CS122"]
    assert _complete("ckpt", "explain", "nvfp4-w") == ["nvfp4-weight-only"]
    assert _complete("ckpt", "doctor", CLEAN, "--fail-on", "w") == ["warning"]


def test_top_level_help_has_whole_summaries():
    import typer.main

    from ckpt_tools.cli.main import app

    commands = [c for c in typer.main.get_command(app).commands.values() if not c.hidden]  # type: ignore[attr-defined]
    lines = ckpt("--help", env={"COLUMNS": "80"}).stdout.split("Commands:\n", 1)[1].splitlines()
    assert len(commands) >= 12 and len(lines) == len(commands), lines  # a summary on one line per command
    assert all(len(line) <= 80 and not line.rstrip().endswith("...") for line in lines), lines
    assert all(line.rstrip().endswith(".") for line in lines), lines


@pytest.mark.parametrize(
    "command",
    [
        "doctor",
        "inspect",
        "plan",
        "serve-flags",
        "check-serve",
        "fix-prefix",
        "scrub-nan",
        "drop-orphans",
        "fix",
        "repair",
    ],
)
def test_the_target_is_called_target_everywhere(command):
    text = ckpt(command, "--help").stdout
    assert re.search(r"\nArguments:\n  TARGET ", text), text
    assert not re.search(r"\n  target ", text)


def test_fail_on_warn_and_its_choices(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = ["check-serve", CLEAN, "--hardware", "h100", "--", "vllm", "serve", CLEAN]
    warning = run_cli([*args[:2], "--fail-on", "warning", *args[2:]], capsys)[0]
    assert run_cli([*args[:2], "--fail-on", "WARN", *args[2:]], capsys)[0] == warning
    code, out, err = run_cli(["doctor", CLEAN, "--fail-on", "warnings"], capsys)
    assert (code, out) == (2, "")
    assert err == "ckpt: --fail-on 'warnings' is not a level; choose one of: error, warning (or warn), info, none\n"


def test_explain_ranks_what_the_code_starts_with_first(capsys):
    code, _out, err = run_cli(["explain", "CS12"], capsys)
    assert code == 2
    assert err == (
        "ckpt: no rule 'CS12'; did you mean CS120 (max-model-len-exceeded) or CS121 (mm-limit-without-vision) or "
        "CS122 (vision-disabled)? (`ckpt rules` lists them)\n"
    )


def test_serve_flags_json_carries_the_command_line(capsys, monkeypatch):
    import shlex

    monkeypatch.chdir(ROOT)
    _code, text, _err = run_cli(["serve-flags", CLEAN, "--max-model-len", "2048"], capsys)
    _code, out, _err = run_cli(["serve-flags", CLEAN, "--max-model-len", "2048", "--format", "json"], capsys)
    data = json.loads(out)
    assert data["command"] + "\n" == text  # what the text output prints, environment included
    env = [f"{k}={v}" for k, v in data["env"].items()]
    assert shlex.split(data["command"]) == (["env", *env] if env else []) + data["argv"]


def test_an_interrupt_python_cannot_raise_prints_no_traceback() -> None:
    """Ctrl-C landing in a weakref callback of the import system (seen in the timed runs above) is "Exception ignored"
    with a traceback by default; under `ckpt` it is silent (the run still ends as interrupted), anything else not."""
    code = (
        "import sys, weakref\n"
        "from ckpt_tools.cli.main import _quiet_interrupt\n"
        "sys.unraisablehook = _quiet_interrupt\n"
        "class X: pass\n"
        "def interrupted(_): raise KeyboardInterrupt\n"
        "def broken(_): raise ValueError('kept')\n"
        "a, b = X(), X()\n"
        "refs = weakref.ref(a, interrupted), weakref.ref(b, broken)\n"
        "del a\n"
        "print('between', file=sys.stderr)\n"
        "del b\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    before, _, after = proc.stderr.partition("between\n")
    assert before == "" and "ValueError: kept" in after, proc.stderr
