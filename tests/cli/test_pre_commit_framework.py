"""The hooks of .pre-commit-hooks.yaml, driven by the real pre-commit framework, offline.

A temporary git repository stands for a user's model repo holding a genuine checkpoint. `pre-commit try-repo` runs
the hooks against this project; `pre-commit install` + `git commit` shows a commit really being blocked. pre-commit
builds the hook's virtualenv and pip-installs the project into it from a wheelhouse re-packed from this test
environment (tests/wheelhouse.py), with PIP_NO_INDEX so nothing is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import wheelhouse
from tests.corrupt import GENUINE, copy_fixture, patch_tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = (".pre-commit-hooks.yaml", "pyproject.toml", "README.md", "ckpt_tools", "rules")
CLEAN = "modelopt-llama-nvfp4"  # no findings; its block scales are float8_e4m3fn (a NaN byte there is an error)
WEIGHT_ONLY = "modelopt-llama-w4a16-nvfp4"  # one warning (nvfp4-weight-only), no error

pytestmark = pytest.mark.skipif(
    not all((GENUINE / n).is_dir() for n in (CLEAN, WEIGHT_ONLY)), reason="genuine fixtures are not present"
)


def _toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(path.read_text())


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for git and pre-commit: offline pip, an isolated pre-commit cache and git config."""
    base = tmp_path_factory.mktemp("precommit-env")
    project = _toml(ROOT / "pyproject.toml")
    needs = [*project["build-system"]["requires"], *project["project"]["dependencies"]]
    wheels = base / "wheels"
    wheelhouse.build(wheels, needs)
    gitconfig = base / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n")
    out = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PRE_COMMIT", "VIRTUALENV_", "GIT_"))}
    out.update(
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        VIRTUALENV_NO_PERIODIC_UPDATE="1",
        PRE_COMMIT_HOME=str(base / "pre-commit-home"),
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        CKPT_NO_PROGRESS="1",
        NO_COLOR="1",
    )
    return out


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def git(cwd: Path, env: dict[str, str], *args: str) -> str:
    done = run(["git", *args], cwd, env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> tuple[Path, str]:
    """This project's hook-relevant files as a committed git repo (the working tree, uncommitted edits included)."""
    repo = tmp_path_factory.mktemp("ckpt-tools-hooks")
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, repo / name)
    git(repo, env, "init", "-q")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-q", "-m", "ckpt-tools")
    return repo, git(repo, env, "rev-parse", "HEAD")


def model_repo(tmp_path: Path, env: dict[str, str], fixture: str, folder: str = "llama") -> Path:
    repo = tmp_path / "model-repo"
    repo.mkdir()
    git(repo, env, "init", "-q")
    copy_fixture(fixture, repo)
    (repo / fixture).rename(repo / folder)
    return repo


def test_try_repo_passes_a_clean_checkpoint_and_strict_blocks_a_warning(
    tmp_path: Path, env: dict[str, str], hook_repo: tuple[Path, str]
) -> None:
    repo = model_repo(tmp_path, env, CLEAN, "clean")
    copy_fixture(WEIGHT_ONLY, repo)
    (repo / WEIGHT_ONLY).rename(repo / "weight-only")
    git(repo, env, "add", "-A")

    done = run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo[0]), "--verbose"], repo, env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    # ckpt-doctor (errors fail) passes both folders; ckpt-doctor-strict fails on the weight-only warning only.
    assert "ckpt doctor (errors block the commit)" in out
    default_block = out.split("ckpt doctor (errors block the commit)", 1)[1].split("ckpt doctor --fail-on", 1)[0]
    assert "Passed" in default_block.splitlines()[0], out
    strict = out.split("ckpt doctor --fail-on warning (warnings block the commit)", 1)[1]
    assert "Failed" in strict.splitlines()[0], out
    assert "- hook id: ckpt-doctor-strict" in strict
    assert "WARNING CK401 nvfp4-weight-only" in strict
    assert "ckpt: 1 of 2 checkpoint folder(s) fail --fail-on warning: weight-only" in strict
    # Each folder was checked once, however many of its files were staged.
    assert strict.count("ckpt doctor clean\n") == 1 and strict.count("ckpt doctor weight-only\n") == 1


def test_installed_hook_lets_a_clean_commit_through_and_blocks_a_defective_one(
    tmp_path: Path, env: dict[str, str], hook_repo: tuple[Path, str]
) -> None:
    repo = model_repo(tmp_path, env, CLEAN)
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hook_repo[0]}\n  rev: {hook_repo[1]}\n  hooks:\n  - id: ckpt-doctor\n"
    )
    done = run([sys.executable, "-m", "pre_commit", "install"], repo, env)
    assert done.returncode == 0, done.stdout + done.stderr

    git(repo, env, "add", "-A")
    done = run(["git", "commit", "-m", "genuine NVFP4 export"], repo, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout + done.stderr
    first = git(repo, env, "rev-parse", "HEAD")

    # One block-scale byte becomes 0x7F: NaN in float8_e4m3fn.
    scale = next(t for t in _tensor_names(repo / "llama") if t.endswith("mlp.down_proj.weight_scale"))
    patch_tensor_bytes(repo / "llama", scale, {0: 0x7F})
    git(repo, env, "add", "-A")
    done = run(["git", "commit", "-m", "re-export"], repo, env)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert git(repo, env, "rev-parse", "HEAD") == first  # the commit did not happen
    assert "Failed" in out and "- hook id: ckpt-doctor" in out
    assert "ERROR   CK501 nan-fp8-scale" in out
    assert scale in out  # the message names the tensor
    assert "ckpt: 1 of 1 checkpoint folder(s) fail --fail-on error: llama" in out


def test_installed_hook_explains_unsmudged_lfs_pointers(
    tmp_path: Path, env: dict[str, str], hook_repo: tuple[Path, str]
) -> None:
    """A clone made without git-lfs holds pointer text where the shards should be; editing config.json there runs
    the hook, which must say so in one finding instead of judging missing tensors."""
    repo = model_repo(tmp_path, env, CLEAN)
    (repo / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    shard = repo / "llama" / "model.safetensors"
    import hashlib

    data = shard.read_bytes()
    shard.write_text(
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    )
    git(repo, env, "remote", "add", "origin", "https://huggingface.co/acme/llama-nvfp4")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-q", "-m", "as cloned with GIT_LFS_SKIP_SMUDGE=1")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hook_repo[0]}\n  rev: {hook_repo[1]}\n  hooks:\n  - id: ckpt-doctor\n"
    )
    assert run([sys.executable, "-m", "pre_commit", "install"], repo, env).returncode == 0

    config = repo / "llama" / "config.json"
    config.write_text(config.read_text().replace('"use_cache": true', '"use_cache": false'))
    git(repo, env, "add", "llama/config.json", ".pre-commit-config.yaml")
    done = run(["git", "commit", "-m", "config tweak"], repo, env)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "ERROR   CK101 lfs-pointer" in out
    assert "not smudged in this checkout" in out
    assert "`git lfs pull`" in out and "`ckpt doctor acme/llama-nvfp4`" in out
    # No other rule speaks about tensors it cannot see.
    assert [line.split()[1] for line in out.splitlines() if line.startswith(("ERROR ", "WARNING ", "INFO "))] == [
        "CK101"
    ]


def _tensor_names(folder: Path) -> list[str]:
    from tests.corrupt import read_file, shards

    return [name for shard in shards(folder) for name in read_file(shard)[0]]
