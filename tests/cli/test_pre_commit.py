"""`ckpt doctor --pre-commit FILE...`: files map to checkpoint folders checked once each; Git LFS pointers get one
clear verdict instead of noise."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli.main import app
from ckpt_tools.errors import TargetError
from ckpt_tools.gates.lfs import _HUB_REMOTE, hub_repo_of, lfs_tracked
from ckpt_tools.gates.targets import plan_folders
from tests.corrupt import GENUINE, copy_fixture, patch_tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
REPORT = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "report.schema.json").read_text()))
SARIF = jsonschema.Draft4Validator(json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))

pytestmark = pytest.mark.skipif(not GENUINE.is_dir(), reason="genuine fixtures are not present")


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / ".gitconfig-none"))
    return tmp_path


def place(name: str, label: str) -> Path:
    Path(label).parent.mkdir(parents=True, exist_ok=True)
    return copy_fixture(name, Path(".")).rename(label)


def doctor(*args: str):
    return CliRunner().invoke(app, ["doctor", *args])


def ckpt(*args: str) -> subprocess.CompletedProcess:
    """The console entry point itself, for exit code 2 (main() turns errors into one line)."""
    return subprocess.run([sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def make_pointer(path: Path) -> None:
    """What a clone without git-lfs (or with GIT_LFS_SKIP_SMUDGE=1) holds instead of the file."""
    data = path.read_bytes()
    path.write_text(
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    )


def findings(out: str) -> list[str]:
    return [line.split()[1] for line in out.splitlines() if line.startswith(("ERROR ", "WARNING ", "INFO "))]


# ---- files -> folders -----------------------------------------------------------------------------------------------


def test_files_map_to_their_checkpoint_folders_once(cwd: Path) -> None:
    place("modelopt-llama-nvfp4", "a")
    place("llmc-qwen3moe-nvfp4-sharded", "models/b")
    (cwd / "docs").mkdir()
    (cwd / "docs" / "config.json").write_text("{}")
    plan = plan_folders(
        [
            "models/b/model-00001-of-00003.safetensors",
            "a/config.json",
            "./a/model.safetensors",
            "models/b/model.safetensors.index.json",
            "docs/config.json",
            "models/b/",
            "a/hf_quant_config.json",
        ]
    )
    assert plan.folders == ("a", "models/b")
    assert plan.ignored == ("docs/config.json",)


def test_a_root_level_checkpoint_is_the_dot_folder(cwd: Path) -> None:
    folder = place("modelopt-llama-nvfp4", "m")
    os.chdir(folder)
    assert plan_folders(["model.safetensors", "config.json"]).folders == (".",)


def test_a_folder_holding_only_an_index_is_a_checkpoint(cwd: Path) -> None:
    """Shards deleted, index left behind: still judged (index-missing-shard), not ignored."""
    folder = place("llmc-qwen3moe-nvfp4-sharded", "m")
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    result = doctor("--pre-commit", "m/model.safetensors.index.json")
    assert result.exit_code == 1
    assert findings(result.stdout) == ["CK102"]


def test_a_missing_path_in_a_missing_folder_is_exit_2(cwd: Path) -> None:
    with pytest.raises(TargetError, match=re.escape("gone/config.json: no such file or directory")):
        plan_folders(["gone/config.json"])
    result = ckpt("doctor", "--pre-commit", "gone/config.json")
    assert result.returncode == 2
    assert result.stderr == "ckpt: gone/config.json: no such file or directory\n"


# ---- the CLI --------------------------------------------------------------------------------------------------------


def test_one_defective_folder_fails_and_is_named_last(cwd: Path) -> None:
    place("modelopt-llama-nvfp4", "good")
    bad = place("modelopt-llama-nvfp4", "bad")
    patch_tensor_bytes(bad, "model.layers.0.mlp.up_proj.weight_scale", {0: 0x7F})
    files = ["good/config.json", "good/model.safetensors", "bad/model.safetensors", "bad/hf_quant_config.json"]
    result = doctor("--pre-commit", *files)
    assert result.exit_code == 1
    assert result.stdout.count("ckpt doctor good\n") == 1 and result.stdout.count("ckpt doctor bad\n") == 1
    assert findings(result.stdout) == ["CK501"]  # the defect alone: the kernels are header facts, not findings
    assert result.stderr.strip().splitlines()[-1] == "ckpt: 1 of 2 checkpoint folder(s) fail --fail-on error: bad"


def test_strict_fails_on_warnings_and_default_passes(cwd: Path) -> None:
    place("modelopt-llama-w4a16-nvfp4", "w")
    assert doctor("--pre-commit", "w/config.json").exit_code == 0
    strict = doctor("--pre-commit", "--fail-on", "warning", "w/config.json")
    assert strict.exit_code == 1 and findings(strict.stdout) == ["CK401"]


def test_nothing_to_check_passes_and_says_so(cwd: Path) -> None:
    (cwd / "cfg").mkdir()
    (cwd / "cfg" / "config.json").write_text("{}")
    result = doctor("--pre-commit", "cfg/config.json")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no checkpoint folder among 1 file(s); nothing to check" in result.stderr


def test_json_is_an_array_of_contract_reports_and_sarif_has_a_run_per_folder(cwd: Path) -> None:
    place("modelopt-llama-nvfp4", "a")
    place("modelopt-llama-w4a16-nvfp4", "b")
    result = doctor("--pre-commit", "--format", "json", "a/config.json", "b/config.json")
    docs = json.loads(result.stdout)
    assert [d["target"] for d in docs] == ["a", "b"]
    for doc in docs:
        assert list(REPORT.iter_errors(doc)) == []
    result = doctor("--pre-commit", "-f", "sarif", "-o", "out.sarif", "b/model.safetensors", "a/model.safetensors")
    assert result.exit_code == 0 and result.stdout == ""
    log = json.loads((cwd / "out.sarif").read_text())
    assert list(SARIF.iter_errors(log)) == []
    assert [run["properties"]["target"] for run in log["runs"]] == ["a", "b"]
    (warning,) = log["runs"][1]["results"]
    assert warning["ruleId"] == "CK401"
    assert warning["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "b/model.safetensors"


def test_several_targets_without_pre_commit_are_judged_each(cwd: Path) -> None:
    place("modelopt-llama-nvfp4", "a")
    result = ckpt("doctor", "a", "a", "--format", "json")
    assert result.returncode == 0
    assert [r["target"] for r in json.loads(result.stdout)] == ["a", "a"]


# ---- Git LFS --------------------------------------------------------------------------------------------------------


def lfs_repo(cwd: Path, fixture: str, *, tracked: bool, remote: str | None) -> Path:
    folder = place(fixture, "m")
    git(cwd, "init", "-q")
    if tracked:
        (cwd / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    if remote:
        git(cwd, "remote", "add", "origin", remote)
    return folder


def test_unsmudged_pointers_get_one_verdict_naming_the_hub_repo(cwd: Path) -> None:
    folder = lfs_repo(cwd, "llmc-qwen3moe-nvfp4-sharded", tracked=True, remote="git@hf.co:acme/qwen3-moe-nvfp4.git")
    make_pointer(folder / "model-00002-of-00003.safetensors")
    # Without the verdict the pointer is still the only finding: rules that judge absences leave the tensors the
    # index places in an unreadable shard to that shard's finding (no false CK401 for its missing input scales).
    plain = doctor("m")
    assert findings(plain.stdout) == ["CK101"]

    result = doctor("--pre-commit", "m/config.json")
    assert result.exit_code == 1
    assert findings(result.stdout) == ["CK101"]
    assert "1 of 3 .safetensors file(s) are Git LFS pointers that were not smudged in this checkout" in result.stdout
    assert "`ckpt doctor acme/qwen3-moe-nvfp4`" in result.stdout and "`git lfs pull`" in result.stdout
    assert "CK401 nvfp4-weight-only" in result.stdout.split("skipped ", 1)[1]  # listed as not run, with the cause

    doc = json.loads(doctor("--pre-commit", "-f", "json", "m/config.json").stdout)[0]
    assert list(REPORT.iter_errors(doc)) == []
    (finding,) = doc["findings"]
    assert finding["details"]["lfs"] == "not-smudged" and finding["details"]["hub_repo"] == "acme/qwen3-moe-nvfp4"
    assert finding["files"] == ["model-00002-of-00003.safetensors"]
    assert {s["slug"] for s in doc["skipped_rules"]} >= {"nvfp4-weight-only", "index-tensor-mismatch"}
    assert "index-missing-shard" not in {s["slug"] for s in doc["skipped_rules"]}


def test_unsmudged_without_a_hub_remote_asks_for_the_repo_id(cwd: Path) -> None:
    folder = lfs_repo(cwd, "modelopt-llama-nvfp4", tracked=True, remote="https://github.com/acme/models.git")
    make_pointer(folder / "model.safetensors")
    result = doctor("--pre-commit", "m/model.safetensors")
    assert "`ckpt doctor org/name` (your Hub repo id)" in result.stdout


def test_pointer_text_committed_as_a_plain_file_is_a_broken_upload(cwd: Path) -> None:
    folder = lfs_repo(cwd, "modelopt-llama-nvfp4", tracked=False, remote=None)
    make_pointer(folder / "model.safetensors")
    result = doctor("--pre-commit", "m/model.safetensors")
    assert result.exit_code == 1 and findings(result.stdout) == ["CK101"]
    assert "stored as plain Git files" in result.stdout and "would upload the pointer text" in result.stdout
    assert 'git lfs track "*.safetensors"' in result.stdout


def test_outside_a_git_work_tree_the_plain_pointer_finding_stays(cwd: Path) -> None:
    folder = place("modelopt-llama-nvfp4", "m")
    make_pointer(folder / "model.safetensors")
    result = doctor("--pre-commit", "m/config.json")
    assert result.exit_code == 1 and findings(result.stdout) == ["CK101"]
    assert "are Git LFS pointers, not weights" in result.stdout


def test_a_truncated_real_shard_beside_a_pointer_is_still_reported(cwd: Path) -> None:
    folder = lfs_repo(cwd, "llmc-qwen3moe-nvfp4-sharded", tracked=True, remote=None)
    make_pointer(folder / "model-00001-of-00003.safetensors")
    shard = folder / "model-00003-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    result = doctor("--pre-commit", "m/config.json")
    assert sorted(findings(result.stdout)) == ["CK101", "CK104"]


def test_lfs_tracked_reads_gitattributes(cwd: Path) -> None:
    git(cwd, "init", "-q")
    (cwd / ".gitattributes").write_text("*.safetensors filter=lfs\nplain.safetensors -filter\n")
    assert lfs_tracked(str(cwd), ["a.safetensors", "plain.safetensors", "config.json"]) == {
        "a.safetensors": True,
        "plain.safetensors": False,
        "config.json": False,
    }
    outside = cwd.parent / "not-a-repo"
    outside.mkdir()
    assert lfs_tracked(str(outside), ["a.safetensors"]) == {"a.safetensors": None}
    assert hub_repo_of(str(outside)) is None


@pytest.mark.parametrize(
    ("url", "repo"),
    [
        ("https://huggingface.co/acme/llama-nvfp4", "acme/llama-nvfp4"),
        ("https://huggingface.co/acme/llama-nvfp4.git", "acme/llama-nvfp4"),
        ("https://user:hf_secret@huggingface.co/acme/llama-nvfp4/", "acme/llama-nvfp4"),
        ("git@hf.co:acme/llama.v2-nvfp4.git", "acme/llama.v2-nvfp4"),
        ("ssh://git@hf.co/acme/x", "acme/x"),
        ("https://huggingface.co/datasets/acme/x", None),
        ("https://huggingface.co/spaces/acme/x", None),
        ("https://github.com/acme/x", None),
        ("https://huggingface.co/acme", None),
    ],
)
def test_hub_remote_urls(url: str, repo: str | None) -> None:
    match = _HUB_REMOTE.match(url)
    assert (match.group(1) if match else None) == repo
