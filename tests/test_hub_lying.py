"""A lying Hub on 127.0.0.1 (issue 27): a server that answers what no Hub would (a commit sha that is a path, a
planted cache file). Every case ends within its deadline with a one-line error or the right verdict, and nothing
outside the cache is touched: a sentinel file outside it keeps its bytes, and the cache holds only the names ckpt
gives its files. The real huggingface_hub client runs in a subprocess, as for every Hub test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corrupt import GENUINE
from tests.fake_hub import HubServer, write_settings
from tests.hub_repos import link_repo
from tests.test_hub import hub_env, local_verdict, verdict

BASE = "base-llama-bf16"
SENTINEL = b"precious bytes that are not a range cache\n"
pytestmark = pytest.mark.skipif(not (GENUINE / BASE).exists(), reason="fixtures/genuine is not present")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside every cache, with the sentinel a lying sha aims at."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "victim.ranges").write_bytes(SENTINEL)
    return folder


def lying_shas(outside: Path) -> dict[str, object]:
    victim = str(outside / "victim")
    return {
        "acme/sha-absolute": victim,  # the cache file would be /…/outside/victim.ranges
        "acme/sha-dotdot": "../" * 40 + victim.lstrip("/"),  # the same file, reached from inside the cache
        "acme/sha-number": 1234567,
        "acme/sha-short": "0123456789abcdef",
        "acme/sha-newline": "0" * 40 + "\n",
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, outside: Path):
    root = tmp_path_factory.mktemp("lying-hub")
    link_repo(GENUINE / BASE, root / "acme" / "plain")
    for repo, sha in lying_shas(outside).items():
        write_settings(link_repo(GENUINE / BASE, root / repo), info={"sha": sha})
    with HubServer(root) as srv:
        yield srv


def run(srv: HubServer, home: Path, *args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    """`ckpt ARGS` in a subprocess pointed at `srv`, killed (and the test failed) past `timeout` seconds."""
    cwd = home / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", *args],
        cwd=cwd,
        env=hub_env(srv, home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cache_names(home: Path) -> set[str]:
    """Every entry under the assets cache (HF_HOME/assets), relative to it, links included."""
    assets = home / "assets"
    return {str(p.relative_to(assets)) for p in assets.rglob("*")} if assets.exists() else set()


def cache_folder(srv: HubServer, home: Path, repo: str) -> Path:
    return home / "assets" / "ckpt-tools" / ("models--" + repo.replace("/", "--")) / f"127.0.0.1_{srv.port}"


def assert_one_line_error(run: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.startswith("ckpt: ") and run.stderr.count("\n") == 1, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in run.stderr, run.stderr


# ---- the commit sha names the cache file ----------------------------------------------------------------------------
@pytest.mark.parametrize("repo", sorted(lying_shas(Path("/x"))))
def test_a_commit_sha_that_is_not_40_hex_digits_is_refused_and_nothing_is_written(hub, outside, tmp_path, repo):
    result = run(hub, tmp_path, "doctor", repo)
    assert_one_line_error(result, "as the commit sha, which is not 40 hex digits")
    assert (outside / "victim.ranges").read_bytes() == SENTINEL
    assert sorted(p.name for p in outside.iterdir()) == ["victim.ranges"]
    assert cache_names(tmp_path) == set()  # refused before any cache folder or file exists
    assert not any("/resolve/" in r.path for r in hub.requests()), "a lying sha must not pin any read"


@pytest.mark.parametrize("planted", ["symlink", "fifo", "directory"])
def test_something_planted_at_the_cache_file_is_never_followed(hub, outside, tmp_path, planted):
    """A link at the cache file's name (to a file outside the cache), a FIFO or a directory: the run reads from the
    Hub, gives the local verdict, and leaves the planted entry and its target exactly as they were."""
    folder = cache_folder(hub, tmp_path, "acme/plain")
    folder.mkdir(parents=True)
    name = folder / f"{hub.commit('acme/plain')}.ranges"
    if planted == "symlink":
        name.symlink_to(outside / "victim.ranges")
    elif planted == "fifo":
        os.mkfifo(name)
    else:
        name.mkdir()
    before = cache_names(tmp_path)
    for _ in range(2):  # a second run would read back whatever the first one wrote through the link
        result = run(hub, tmp_path, "doctor", "acme/plain", "--format", "json", timeout=20)
        assert result.returncode == 0, result.stderr
        assert verdict(json.loads(result.stdout)) == local_verdict(GENUINE / BASE, deep=False)
    assert (outside / "victim.ranges").read_bytes() == SENTINEL
    assert cache_names(tmp_path) == before
    assert name.is_symlink() if planted == "symlink" else not name.is_symlink()


def test_the_cache_holds_only_the_commit_file(hub, tmp_path):
    result = run(hub, tmp_path, "doctor", "acme/plain")
    assert result.returncode == 0, result.stderr
    sha = hub.commit("acme/plain")
    repo_folder = "ckpt-tools/models--acme--plain"
    assert cache_names(tmp_path) == {
        "ckpt-tools",
        repo_folder,
        f"{repo_folder}/127.0.0.1_{hub.port}",
        f"{repo_folder}/127.0.0.1_{hub.port}/{sha}.ranges",
    }
